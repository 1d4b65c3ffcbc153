"""Chapter 03's further server starts: a correct configuration started again and only its rate measured, the rate and
interval taken over the starts; and on a CPU host, each round's servers started together and measured one at a time.

    _restarts(ctx, backend, mode, row)            # starts 1 .. starts - 1, then the rate over all of them
    _overlapped(ctx, todo, checked, measured)     # the sweep in two rounds of servers started together
"""

from __future__ import annotations

from typing import Callable

from ..errors import EngineError, ServebookError
from ..servers import Server, start_together, take_started
from .serve import _decode_rate, _finish, _mode_args, _prepare, _record_row, _Sweep

def _overlapped(ctx: _Sweep, todo: list[tuple], checked: dict, measured: dict) -> None:
    """``force_each_backend``'s sweep in two rounds of servers started together (``starts_overlap_here``): every
    configuration's first start, then the further starts of the correct ones. In each round every server is launched
    at once and waited for until ready or failed, then each in turn is checked and measured and stopped right after.
    A row is recorded as soon as it has all its starts; every server is stopped on every path."""
    rounds: list[dict] = []  # what each round started, for stopping whatever is left on the way out
    try:
        first = [(key, _prepare(ctx, key[0], key[1], checked.get(key[0] or "auto"))) for key in todo]
        rounds.append(_start_together(ctx, [(key, p) for key, p in first if p.get("launch")]))
        names = [_key_label(key) for key, p in first if p.get("launch")]
        rows, again = {}, []
        for key, p in first:
            if p.get("launch") is None:
                rows[key] = p["row"]
            else:
                p["row"]["started_with"] = [n for n in names if n != _key_label(key)]
                rows[key] = _finish(ctx, key[0], p, lambda key=key: take_started(rounds[0], key))
            more = [((key, k), None) for k in _more_starts(ctx, rows[key])]
            if more:
                again.extend(more)
            else:
                _restarts(ctx, key[0], key[1], rows[key], more=[])
                measured[key] = _record_row(ctx, rows[key])
        if not again:
            return
        second = [(key, _prepare_start(ctx, key[0][0], key[0][1], key[1])) for key, _ in again]
        rounds.append(_start_together(ctx, [(key, p) for key, p in second if p.get("launch")]))
        names = [_key_label(key) for key, p in second if p.get("launch")]
        entries: dict = {}
        for key, p in second:
            entries.setdefault(key[0], []).append(_one_more_start(
                ctx, key[0][0], key[0][1], rows[key[0]], key[1], prepared=p, started_with=[n for n in names if n != _key_label(key)],
                take=lambda key=key: take_started(rounds[1], key)))
        for key in todo:
            if key in entries:
                _restarts(ctx, key[0], key[1], rows[key], more=entries[key])
                measured[key] = _record_row(ctx, rows[key])
    finally:
        for started in rounds:
            for srv in started.values():
                if isinstance(srv, Server):
                    srv.stop()


def _start_together(ctx: _Sweep, group: list[tuple]) -> dict:
    """``servers.start_together`` for a round of the sweep: each server's messages named by its configuration."""
    return start_together([(key, p["launch"], p["log_path"]) for key, p in group], registry=ctx.store.path / "servers.jsonl",
                          ready_timeout=ctx.ready_timeout, progress=ctx.say, name=_key_label)


def _key_label(key: tuple) -> str:
    """``sdpa``, ``auto (eager)``, ``sdpa start 1``: a configuration (``(backend, mode)``) or one of its starts."""
    if isinstance(key[0], tuple):
        return f"{_key_label(key[0])} start {key[1]}"
    return (key[0] or "auto") + ("" if key[1] == "default" else f" ({key[1]})")


def _restarts(ctx: _Sweep, backend: str | None, mode: str, row: dict, more: list[dict] | None = None) -> None:
    """The rate over ``ctx.starts`` server starts: the first start's (from ``_run_one``), then the server started again
    and only the rate measured; each start in ``row["starts"]`` (field ``start``), the row's rate and interval taken
    over the per-start means (``bench.mean_ci``). A start that fails is recorded in the list with its error. ``more``:
    the further starts' entries when they were already taken (servers started together, ``_overlapped``)."""
    more = [_one_more_start(ctx, backend, mode, row, k) for k in _more_starts(ctx, row)] if more is None else more
    _rate_over_starts(ctx, row, more)


def _more_starts(ctx: _Sweep, row: dict) -> range:
    """The further starts ``k`` a measured configuration gets: ``1 .. starts - 1`` when its output was correct."""
    return range(1, ctx.starts if row.get("decode_tok_s") is not None and row.get("outcome") == "ok" else 1)


def _rate_over_starts(ctx: _Sweep, row: dict, more: list[dict]) -> None:
    from ..bench import mean_ci

    row["bench_model"] = ctx.served_from
    if row.get("decode_tok_s") is None:
        return
    first = {"start": 0, "decode_tok_s": row["decode_tok_s"], "decode_tok_s_ci95": row.get("decode_tok_s_ci95"), "ready_s": row.get("ready_s")}
    if row.get("started_with") is not None:
        first["started_with"] = row["started_with"]
    entries = [first, *more]
    earlier = _earlier_starts(ctx, row)
    if earlier:  # measured again (--again): further starts of this configuration and method, pooled with the earlier ones
        k0 = 1 + max(int(e.get("start") or 0) for e in earlier)
        mine = ctx.store.execution.get("id")
        entries = earlier + [{**e, "start": k0 + int(e.get("start") or 0), "execution": mine} for e in entries]
    rates = [e["decode_tok_s"] for e in entries if e.get("decode_tok_s") is not None]
    ci = mean_ci(rates)
    row["starts"] = entries
    row["decode_tok_s_ci95_within"] = first["decode_tok_s_ci95"]
    if len(rates) >= 2:
        row.update(decode_tok_s=ci["mean"], decode_tok_s_ci95=ci["half_width"], ci_over=f"{len(rates)} server starts")
    else:
        row["ci_over"] = "one start: interval within a start only"


def _earlier_starts(ctx: _Sweep, row: dict) -> list[dict]:
    """In an execution that measures a recorded run again (``servebook book --again``): the starts the last earlier
    execution recorded for this configuration (engine, backend, mode) with the same method (engine version, model,
    ``bench_method``), each with its ``execution``; [] otherwise, or where the method differs (the latest method stands)."""
    ex = ctx.store.execution
    if not ex.get("again"):
        return []
    method = lambda r: (r.get("bench_method"), r.get("engine_version"), r.get("bench_model"))  # noqa: E731
    same = lambda r: all((r.get(k) or d) == (row.get(k) or d) for k, d in (("engine", ""), ("attention", ""), ("mode", "default")))  # noqa: E731
    prior = [r for r in ctx.store.rows("backends", executions="all") if (r.get("execution") or 1) < ex["id"] and same(r)
             and r.get("outcome") == "ok" and r.get("decode_tok_s") is not None and method(r) == method(row)]
    if not prior:
        return []
    last = prior[-1]
    starts = last.get("starts") or [{"start": 0, "decode_tok_s": last["decode_tok_s"],
                                     "decode_tok_s_ci95": last.get("decode_tok_s_ci95_within", last.get("decode_tok_s_ci95"))}]
    return [{**e, "execution": e.get("execution", last.get("execution") or 1)} for e in starts]


def _prepare_start(ctx: _Sweep, backend: str | None, mode: str, k: int) -> dict:
    """Start ``k``'s launch and log (``{"launch", "log_path"}``), or the engine's refusal (``{"error"}``)."""
    engine, label = ctx.engine, backend or "auto"
    try:
        launch = engine.launch(ctx.served_from, attention=backend, extra=ctx.extra + _mode_args(engine, mode), env=ctx.env,
                               **({"port": ctx.host.free_port()} if ctx.remote else {}))
    except EngineError as exc:
        return {"error": exc}
    log_path = ctx.store.path / "logs" / (f"{engine.name}-{label.replace('/', '--')}{'' if mode == 'default' else '-' + mode}"
                                          f"-start{k}.log")
    return {"launch": launch, "log_path": log_path}


def _one_more_start(ctx: _Sweep, backend: str | None, mode: str, row: dict, k: int, prepared: dict | None = None,
                    started_with: list[str] | None = None, take: Callable | None = None) -> dict:
    """Start ``k`` of one configuration: launch, read its rate, stop (``_restarts``). With ``take``: its server was
    started beside others (``_overlapped``; ``prepared`` its launch, ``started_with`` the others)."""
    engine, label = ctx.engine, backend or "auto"
    out: dict = {"start": k}
    if started_with is not None:
        out["started_with"] = started_with
    try:
        p = prepared or _prepare_start(ctx, backend, mode, k)
        if p.get("error") is not None:
            raise p["error"]
        launch, log_path = p["launch"], p["log_path"]
        registry = ctx.store.path / "servers.jsonl"
        starting = (take() if take is not None else
                    ctx.host.serve(launch, log_path, registry=registry, ready_timeout=ctx.ready_timeout, progress=ctx.say) if ctx.remote
                    else Server.start(launch, log_path, ready_timeout=ctx.ready_timeout, registry=registry, progress=ctx.say))
        with starting as srv:
            out["ready_s"] = srv.ready_s
            r = _decode_rate(srv.base_url, engine.served_model_name(ctx.served_from), engine.name, label, ctx.max_tokens * 2, ctx.runs,
                             ctx.tokenizer, host=ctx.host)
            out.update(decode_tok_s=r["decode_tok_s"], decode_tok_s_ci95=r["decode_tok_s_ci95"])
            if r.get("bench_error"):
                out["error"] = r["bench_error"]
    except (EngineError, ServebookError) as exc:
        out["error"] = str(exc)[:400]
        ctx.store.record_failure(f"backend {engine.name} {label} ({mode}) start {k}", exc, engine=engine.name)
    ctx.say(f"{engine.name} {label} ({mode}) start {k}: " + (f"{out['decode_tok_s']:.1f} tok/s" if out.get("decode_tok_s") is not None
                                                             else f"no rate ({out.get('error', 'no request succeeded')})"))
    return out
