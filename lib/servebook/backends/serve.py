"""One configuration of chapter 03's sweep (a backend in a mode): its row, its launch, its server started, checked
(reported backend, greedy, teacher-forced and decode-path agreement), measured (a short single stream) and stopped.

    p = _prepare(ctx, "TRITON_MLA", "graph", verdict)     # the row and launch, or the engine's refusal
    row = _finish(ctx, "TRITON_MLA", p, start)            # start() gives the ready server; checked, measured, stopped
"""

from __future__ import annotations

import time
from typing import Callable

from ..engines import CLIRejected, EngineAdapter
from ..errors import EngineError, ServebookError, ServerError
from ..processes import port_listening
from ..servers import Server, engine_error, gpu_visible
from .agreement import decode_agreement, reference_decodes
from .checks import _exited, _overridden, _rejection, _remote, _reported_backend, _watched
from .outputs import PROBE_PROMPTS, _disagreement, _disagrees, compare_tokens, greedy_completions, prompt_logprobs, teacher_forced_agreement

class _Sweep:
    """What every start of one sweep shares."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.reference: list[str] | None = None
        self.reference_lp: list | None = None
        self.reference_decode: list | dict | None = None  # the default backend's greedy decode by token ids (agreement.py)
        self.prompt_ids: list[list[int]] = []


class _Recorded(Exception):
    """The row already says what went wrong."""


RATE_INPUT_LEN = 32  # prompt tokens of chapter 03's short single-stream measurement (prompt seed 0)
# The outcome of a start whose checks all passed and whose rate was not measured ("ok" means measured): its single-stream
# requests failed, or none could be timed (transformers serve on a loaded CPU sent all 8 tokens of its one timed request in
# one write: CI, 2026-12). Its outputs are still the default's reference (``measure._references``).
NO_RATE = "no rate"


def _decode_rate(base_url: str, model: str, engine: str, attention: str, max_tokens: int, runs: int, tokenizer, host=None) -> dict:
    """A short single-stream measurement with chapter 05's client (real streamed tokens), on ``host`` when given; with
    its method (``bench_*``: prompt tokens, seed and fingerprint, output tokens, warm-ups, runs) for comparing it with
    chapter 05's (``servebook.findings.default_methods``)."""
    from .. import bench

    prompts = bench.build_prompts(tokenizer, input_len=RATE_INPUT_LEN, n=max(2, runs + 1), seed=0)
    s = bench.single_stream(base_url, model, prompts, store=None, tokenizer=tokenizer, engine=engine, attention=attention,
                            max_tokens=max_tokens, runs=runs, warmup=1, progress=False, host=host if _remote(host) else None)
    rate = {
        "decode_tok_s": s["decode_tok_s_mean"],
        "decode_tok_s_ci95": s["decode_tok_s_ci95"],
        "ttft_ms": s["ttft_s_mean"] * 1000 if s["ttft_s_mean"] is not None else None,
        "bench_failed": s["failed"],
        "bench_method": s["method"],
        "bench_input_len": RATE_INPUT_LEN, "bench_max_tokens": max_tokens, "bench_prompt_seed": 0, "bench_runs": runs, "bench_warmup": 1,
        "bench_prompts_sha": s.get("prompts_sha"), "bench_decode_timed_to": s.get("decode_timed_to"),
    }
    if rate["decode_tok_s"] is None:
        rate["bench_error"] = _why_no_rate(s)
    return rate


def _why_no_rate(s: dict) -> str:
    """Why a single-stream summary has no decode rate: its own words where none of its served requests could be timed,
    else its failed requests' first error."""
    if s.get("error"):
        return s["error"]
    if s.get("failed"):
        return (f"no decode rate: {s['failed']} of {s['failed'] + (s.get('ok') or 0)} single-stream requests failed: "
                f"{(s.get('errors') or ['no error recorded'])[0]}")
    return "no decode rate: no single-stream run was timed"


def _record_row(ctx: _Sweep, row: dict) -> dict:
    ctx.store.append("backends", row)
    ctx.say(f"{ctx.engine.name} {row['attention']} ({row['mode']}): {row.get('outcome')}"
            + (f" ({row.get('error')})" if row.get("error") else ""))
    return row


def _mode_args(engine: EngineAdapter, mode: str) -> list[str]:
    return list(engine.eager_args or ()) if mode == "eager" else []


def _run_one(ctx: _Sweep, backend: str | None, mode: str, verdict: dict | None) -> dict:
    """One start: launch, confirm, greedy and teacher-forced agreement, a short measurement, stop."""
    p = _prepare(ctx, backend, mode, verdict)
    if p.get("launch") is None:
        return p["row"]
    registry = ctx.store.path / "servers.jsonl"
    launch, log_path = p["launch"], p["log_path"]
    return _finish(ctx, backend, p, lambda: (
        ctx.host.serve(launch, log_path, registry=registry, ready_timeout=ctx.ready_timeout, progress=ctx.say) if ctx.remote
        else Server.start(launch, log_path, ready_timeout=ctx.ready_timeout, registry=registry, progress=ctx.say)))


def _prepare(ctx: _Sweep, backend: str | None, mode: str, verdict: dict | None) -> dict:
    """A configuration's row and launch (``{"row", "launch", "log_path", "t0"}``); without a launch when nothing is to
    start: refused by the engine's own validation (preflight) or CLI, its row then complete."""
    engine = ctx.engine
    label = backend or "auto"
    row = {"engine": engine.name, "engine_version": ctx.version, "attention": label, "mode": mode}
    t0 = time.monotonic()
    if verdict and verdict.get("ok") is False:
        row.update(outcome="rejected", error=verdict.get("error"), rejected_by="the engine's own validation (preflight; no server started)",
                   seconds=0.0)
        return {"row": row}
    try:
        launch = engine.launch(ctx.served_from, attention=backend, extra=ctx.extra + _mode_args(engine, mode), env=ctx.env,
                               **({"port": ctx.host.free_port()} if ctx.remote else {}))
    except EngineError as exc:  # nothing was started: the engine's own CLI refuses the flag or value, or cannot be read
        row.update(outcome="rejected" if isinstance(exc, CLIRejected) else "failed", error=str(exc), seconds=round(time.monotonic() - t0, 1))
        return {"row": row}
    row["launch"] = launch.shell()
    log_path = ctx.store.path / "logs" / f"{engine.name}-{label.replace('/', '--')}{'' if mode == 'default' else '-' + mode}.log"
    return {"row": row, "launch": launch, "log_path": log_path, "t0": t0}


def _finish(ctx: _Sweep, backend: str | None, p: dict, start: Callable) -> dict:
    """Start (``start()``: the server, ready; used and stopped here) and exercise one configuration; its row.
    ``seconds``: from its launch to its stop; for a server started beside others, less the time it waited, ready, for
    its turn (its ``ready_s`` plus its turn)."""
    row, launch = p["row"], p["launch"]
    t0 = p["t0"]
    try:
        starting = start()
        if row.get("started_with") is not None:
            t0 = time.monotonic() - (starting.ready_s or 0.0)
        with starting as srv:
            _exercise(ctx, srv, backend, row)
    except _Recorded:
        pass
    except ServerError as exc:
        if row.get("started_with") is not None:
            t0 = time.monotonic()  # failed to start beside others: its own time is not told apart from theirs
        rejected = backend is not None and _rejection(exc.log_tail, backend)
        row.update(outcome="rejected" if rejected else "failed to start",
                   error=rejected or engine_error(exc.log_tail) or str(exc), server_error=str(exc), log_tail=exc.log_tail[-2000:])
    except ServebookError as exc:
        row.update(outcome="failed", error=str(exc))
    row["port_free_after"] = not _port_listening_on(ctx.host, launch.port) if ctx.remote else not port_listening(launch.port)
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _exercise(ctx: _Sweep, srv, backend: str | None, row: dict) -> None:
    engine = ctx.engine
    row["ready_s"] = srv.ready_s
    reported = _reported_backend(engine, srv, ctx.host)
    row["reported"], row["reported_source"] = reported.get("attention"), reported.get("source")
    row["reported_device"] = reported.get("device")
    if reported.get("mla_prefill"):
        row["reported_mla_prefill"] = reported["mla_prefill"]
    name = engine.served_model_name(ctx.served_from)
    try:
        if ctx.remote:  # the requests go out on the host, next to the server
            completions = ctx.host.call("servebook.backends.outputs:greedy_completions",
                                        {"base_url": srv.base_url, "model": name, "prompts": PROBE_PROMPTS, "max_tokens": ctx.max_tokens},
                                        timeout=120 * len(PROBE_PROMPTS) + 60, label=f"greedy completions {engine.name} {row['attention']}")
        else:
            completions = _watched(srv, lambda: greedy_completions(srv.base_url, name, PROBE_PROMPTS, ctx.max_tokens))
    except ServebookError as exc:
        dying = None if ctx.remote else srv.fatal_line()
        row.update(outcome="crashed" if dying or _exited(srv) else "rejected",
                   error=(engine_error(srv.log_tail(400)) or dying) if dying else str(exc), log_tail=srv.log_tail(15))
        raise _Recorded() from exc
    row["completions"] = completions
    # teacher-forced: every position of prompt + the default's completion, fed to this backend (on the host, beside it)
    texts = [p + c for p, c in zip(PROBE_PROMPTS, ctx.reference or completions)]
    try:
        lp = (ctx.host.call("servebook.backends.outputs:prompt_logprobs", {"base_url": srv.base_url, "model": name, "texts": texts},
                            timeout=120 * len(texts) + 60, label=f"teacher-forced {engine.name} {row['attention']}") if ctx.remote
              else _watched(srv, lambda: prompt_logprobs(srv.base_url, name, texts)))
    except ServebookError as exc:
        if (not ctx.remote and srv.fatal_line()) or not srv.alive():
            row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or str(exc), log_tail=srv.log_tail(15))
            raise _Recorded() from exc
        lp = {"unsupported": f"prompt log-probabilities failed: {str(exc)[:200]}"}
    row["teacher_forced"] = lp
    if backend is None and ctx.reference is None:
        ctx.reference_lp = lp
    row.update(teacher_forced_agreement(ctx.reference_lp, lp))
    if backend is None and ctx.reference is None:
        ctx.reference = completions
    if ctx.reference is not None:
        row.update(compare_tokens(ctx.tokenizer, ctx.reference, completions))
    _decode_check(ctx, srv, backend, row, name)
    row.update(_decode_rate(srv.base_url, name, engine.name, row["attention"], ctx.max_tokens * 2, ctx.runs, ctx.tokenizer, host=ctx.host))
    if not srv.alive() or (not ctx.remote and srv.fatal_line()):
        row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or "the server exited during the run", log_tail=srv.log_tail(15))
    elif str(reported.get("device") or "").startswith("cpu") and gpu_visible(srv.launch):
        row.update(outcome="overridden", error="the engine loaded the model on the CPU although a GPU is visible "
                                               "(a full or busy GPU makes device 'auto' fall back silently)")
    elif _overridden(engine, backend, reported):
        row.update(outcome="overridden", error=f"asked for {backend}, the engine reports {row['reported']} (from its {row['reported_source']})")
    elif _disagrees(row):
        row.update(outcome="wrong output", error=_disagreement(row))
    elif row.get("decode_tok_s") is None:  # every check passed and nothing was timed: not "ok" ("ok" means measured)
        row.update(outcome=NO_RATE, error=f"its output passed every check; {row['bench_error']}")
    else:
        row["outcome"] = "ok"


def _decode_check(ctx: _Sweep, srv, backend: str | None, row: dict, name: str) -> None:
    """The decode-path agreement (``agreement.py``): the default's greedy decode by token ids is the reference (asked
    once, from the first default start), and every start, the default's included, is compared with it."""
    engine = ctx.engine

    def ask(fn: Callable, kwargs: dict):
        kwargs = {"engine": engine.name, "base_url": srv.base_url, "model": name, "prompts": ctx.prompt_ids, **kwargs}
        if ctx.remote:
            return ctx.host.call(f"servebook.backends.agreement:{fn.__name__}", kwargs, timeout=120 * 10 * len(ctx.prompt_ids) + 60,
                                 label=f"decode {fn.__name__} {engine.name} {row['attention']}")
        return _watched(srv, lambda: fn(**kwargs))

    try:
        if backend is None and ctx.reference_decode is None:
            ctx.reference_decode = row["decode_reference"] = ask(reference_decodes, {"max_tokens": ctx.max_tokens})
        row.update(ask(decode_agreement, {"reference": ctx.reference_decode}))
    except ServebookError as exc:
        if (not ctx.remote and srv.fatal_line()) or not srv.alive():
            row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or str(exc), log_tail=srv.log_tail(15))
            raise _Recorded() from exc
        row.update(decode_agreement=None, decode_note=f"the decode check failed: {str(exc)[:300]}")


def _port_listening_on(host, port: int) -> bool:
    """``processes.port_listening`` on the host's 127.0.0.1."""
    return bool(host.call("servebook.processes:port_listening", {"port": int(port)}, timeout=60, label=f"port {port} listening"))
