"""How far to trust the client: its own ceiling against the fake server, the same for a library client and for
SGLang's, and each measured rate next to it.

    rows = client_ceiling(store=store, clients=CLIENTS, tokenizer_dir=model_dir)   # servebook, httpx, sglang.bench_serving
    client_ceiling(store=store, concurrencies=ceiling_levels("1,64", smoke=True))   # the notebook's parameter: (1, 8)
    verdict = ceiling_verdict(rows)       # is servebook's ceiling >= CEILING_GOAL x bench_serving's, and is httpx's?
    checks = ceiling_check(summary, store.table("client_ceiling"))
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import ServebookError
from .bench_serving import DEFAULT_SPEC, run_bench_serving_many, write_sharegpt
from .fake import FakeSSEServer
from .httpx_stream import httpx_batch
from .payload import request_body
from .sse import finish
from .stats import percentile
from .transport import run_batch, run_coro

__all__ = ["CLIENTS", "CEILING_GOAL", "ceiling_levels", "client_ceiling", "ceiling_comparison", "ceiling_verdict", "ceiling_check"]

CLIENTS = ("servebook", "httpx", "sglang.bench_serving")  # servebook's transport, a library client, SGLang's own client
# Issue #19: servebook keeps its own HTTP transport only if its ceiling is at least this many times
# sglang.bench_serving's on the same fake server and a library client (httpx) does not get there.
CEILING_GOAL = 1.5
_SMOKE_MAX = 8  # a smoke run (tests, CI) streams the ceiling at concurrencies up to this


def ceiling_levels(concurrencies: str, smoke: bool = False, name: str = "ceiling_concurrencies") -> tuple[int, ...]:
    """The concurrencies of :func:`client_ceiling` from chapter 05's parameter, e.g. ``"1,64"`` -> ``(1, 64)``: whole
    numbers of at least 1, comma-separated (taken in increasing order, once each); with ``smoke`` each is capped at
    ``_SMOKE_MAX`` (``"1,64"`` -> ``(1, 8)``). A ParameterError names the parameter otherwise."""
    from ..params import whole_numbers

    return tuple(sorted({min(x, _SMOKE_MAX) if smoke else x for x in whole_numbers(concurrencies, name)}))


def client_ceiling(
    *,
    store=None,
    tokenizer=None,
    concurrencies: Sequence[int] = (1, 64),
    events_per_write: Sequence[int] = (1, 64),
    tokens_per_request: int = 2048,
    requests_per_level: int = 2,
    api: str = "completions",
    clients: Sequence[str] = ("servebook",),
    bench_serving: Any = DEFAULT_SPEC,
    tokenizer_dir: str | os.PathLike | None = None,
    warmup: int = 1,
    workdir: str | os.PathLike | None = None,
) -> list[dict]:
    """Streamed tokens/s each client in ``clients`` (of :data:`CLIENTS`) sustains against :class:`FakeSSEServer`.

    The fake servers (one per events-per-write) are pinned to the last CPU and the clients to CPU 0 (when the host
    has two or more). At each (events per write, concurrency) a client streams ``requests_per_level x C`` requests of
    ``tokens_per_request`` tokens after ``warmup`` untimed ones; servebook and httpx take turns level by level, then
    ``sglang.bench_serving`` runs every level in one process of its own (its imports take seconds, not timed).
    Reported: tokens/s over the batch; for servebook and httpx also the client thread's CPU time per token, parsing
    (tokenizer counting included when a tokenizer is given) and the TTFT the client itself adds (the fake server
    answers at once).

    ``sglang.bench_serving`` runs in the prepared environment of ``bench_serving`` (an engine spec, never built
    here, or an ``EngineEnv``) with the tokenizer of ``tokenizer_dir``; where it cannot run, its rows carry the
    reason in ``skipped``. Rows (column ``client``, in level order) go to ``client_ceiling``.
    """
    clients = list(dict.fromkeys(clients))
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise ValueError(f"unknown client(s) {unknown}; choose from {CLIENTS}")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    client_cpu, server_cpu = (cpus[0], cpus[-1]) if len(cpus) >= 2 else (None, None)
    levels = [(epw, c) for epw in events_per_write for c in concurrencies]
    got: dict[tuple, dict] = {}
    with ExitStack() as stack:
        fakes = {epw: stack.enter_context(FakeSSEServer(tokens_per_event=1, events_per_write=epw, cpu=server_cpu))
                 for epw in events_per_write}
        for epw, c in levels:
            for client in clients:
                if client != "sglang.bench_serving":
                    got[(epw, c, client)] = _stream_level(client, fakes[epw].url, requests_per_level * c, c, tokens_per_request,
                                                          api, tokenizer, warmup, client_cpu)
        if "sglang.bench_serving" in clients:
            bs = _bench_serving_env(bench_serving, tokenizer_dir, api)
            runs = [(fakes[epw].url, requests_per_level * c, c) for epw, c in levels]
            for (epw, c), res in zip(levels, _bench_serving_levels(bs, runs, tokens_per_request, warmup, client_cpu, workdir)):
                got[(epw, c, "sglang.bench_serving")] = res
    return _ceiling_rows(got, levels, clients, store, requests_per_level, tokens_per_request, warmup, client_cpu, server_cpu)


def _ceiling_rows(got: dict, levels: list[tuple[int, int]], clients: list[str], store, requests_per_level: int,
                  tokens_per_request: int, warmup: int, client_cpu: int | None, server_cpu: int | None) -> list[dict]:
    """One row a (level, client), in level order, with the method in words (where each side ran, what was streamed,
    how the client timed it); appended to ``client_ceiling`` when there is a store."""
    rows = []
    for epw, c in levels:
        n = requests_per_level * c
        where = (f"fake SSE server (1 token per event, {epw} events per socket write) on CPU {server_cpu}; client on CPU "
                 f"{client_cpu}; {n} requests x {tokens_per_request} tokens at C={c} after {warmup} untimed; ")
        for client in clients:
            m = dict(got[(epw, c, client)])
            how = m.pop("how")
            row = {"concurrency": c, "events_per_write": epw, "tokens_per_event": 1, "requests": n,
                   "tokens_per_request": tokens_per_request, "client_cpu": client_cpu, "server_cpu": server_cpu,
                   "client": client, **m, "method": where + how}
            if store is not None:
                store.append("client_ceiling", row)
            rows.append(row)
    return rows


def _stream_level(client: str, url: str, n: int, c: int, tokens: int, api: str, tokenizer, warmup: int,
                  client_cpu: int | None) -> dict:
    """One level streamed in this process by servebook's transport or by httpx; the rates and the client's own costs."""
    bodies = [request_body(api, "fake-sse", "hi", tokens, "", False, None) for _ in range(n)]
    if client == "servebook":
        (raws, cpu_s, wall), _ = run_coro(_servebook_batch(url, bodies, c, api, warmup), client_cpu)
    else:  # the client is made and warmed before its clock starts (httpx_stream says why)
        (raws, cpu_s, wall), _ = run_coro(httpx_batch(url, bodies, c, api, 60.0, warmup=warmup), client_cpu)
    p0 = time.process_time()
    t1 = time.perf_counter()
    res = [finish(r, api, tokenizer, None) for r in raws]
    parse_s = time.perf_counter() - t1
    ok = [r for r in res if r.ok]
    total = sum(r.output_tokens for r in ok)
    if client == "servebook":
        version, how = None, "servebook's transport (asyncio, httptools): a timestamp and the bytes per network read"
    else:
        import httpx

        version, how = httpx.__version__, (f"httpx {httpx.__version__}: one AsyncClient (pool of C connections), "
                                           "made and warmed before the clock starts; client.stream + aiter_bytes, a timestamp and "
                                           "the bytes per chunk")
    return {"ok": len(ok), "tokens": total, "stream_wall_s": wall, "stream_tok_s": total / wall if wall else None,
            "client_cpu_us_per_token": (cpu_s / total * 1e6) if total and cpu_s else None,
            "client_busy": (cpu_s / wall) if cpu_s and wall else None,  # near 1: the client's core was the limit
            "parse_us_per_token": (parse_s / total * 1e6) if total else None,
            "parse_cpu_s": time.process_time() - p0,
            "ttft_p50_s": percentile([r.ttft_s for r in ok], 50), "ttft_p99_s": percentile([r.ttft_s for r in ok], 99),
            "ttft_server_p50_s": percentile([r.ttft_server_s for r in ok], 50),
            "tokenizer": tokenizer is not None, "version": version, "skipped": None,
            "errors": sorted({r.error for r in res if r.error})[:3],
            "how": how + "; tokens/s = output tokens / wall time of the batch in the running event loop; CPU time of "
                         "the loop's thread over the batch; parsing (servebook's SSE code) timed separately"}


async def _servebook_batch(url: str, bodies: list[dict], c: int, api: str, warmup: int):
    """servebook's transport on one batch, timed like httpx's: after ``warmup`` untimed requests, inside the running loop."""
    if warmup:
        await run_batch(url, bodies[:1] * warmup, 1, api, None, 60.0, None, False, "warm-up")
    cpu0, t0 = time.thread_time(), time.perf_counter()
    raws = await run_batch(url, bodies, c, api, None, 60.0, None, False, "ceiling")
    return raws, time.thread_time() - cpu0, time.perf_counter() - t0


def _bench_serving_env(spec: Any, tokenizer_dir, api: str) -> dict:
    """Where bench_serving can run (its interpreter and version), or why it cannot (``skip``)."""
    if not spec:
        return {"skip": "not asked: no SGLang environment named for it"}
    if api != "completions":
        return {"skip": f"measured on the completions API only (this ceiling streams {api!r})"}
    if tokenizer_dir is None:
        return {"skip": "needs a local model's tokenizer for its dataset, and the model here is a card"}
    from ..engines.envs import resolve_engine  # the prepared environment; nothing is built here

    try:
        env = resolve_engine(spec) if isinstance(spec, str) else spec
    except ServebookError as exc:
        return {"skip": f"{spec}: {exc}"}
    if getattr(env, "import_error", None):
        return {"skip": f"{spec} does not import here: {str(env.import_error)[:200]}"}
    return {"python": env.python, "version": env.version, "tokenizer_dir": str(tokenizer_dir), "skip": None}


def _bench_serving_levels(bs: dict, runs: list[tuple[str, int, int]], tokens: int, warmup: int, client_cpu: int | None,
                          workdir: str | os.PathLike | None) -> list[dict]:
    """Every level (url, requests, concurrency) streamed by sglang.bench_serving, in one process of its own interpreter."""
    empty = {"ok": 0, "tokens": 0, "stream_wall_s": None, "stream_tok_s": None, "client_cpu_us_per_token": None,
             "client_busy": None, "parse_us_per_token": None, "parse_cpu_s": None, "ttft_p50_s": None, "ttft_p99_s": None,
             "ttft_server_p50_s": None, "tokenizer": True, "version": bs.get("version"), "errors": []}
    if bs.get("skip"):
        return [{**empty, "skipped": bs["skip"], "how": f"sglang.bench_serving not measured: {bs['skip']}"} for _ in runs]
    wd = Path(workdir or tempfile.mkdtemp(prefix="bench-ceiling-"))
    wd.mkdir(parents=True, exist_ok=True)
    data = write_sharegpt(["hi there, this is a prompt " * 4] * (max(n for _, n, _ in runs) + warmup),  # a request per entry
                          wd / "sharegpt.json")
    specs = [{"url": url, "model": "fake-sse", "dataset_path": data, "input_len": 8, "output_len": tokens, "num_prompts": n,
              "max_concurrency": c, "warmup_requests": warmup} for url, n, c in runs]
    try:
        results = run_bench_serving_many(bs["python"], bs["tokenizer_dir"], specs, drop_fields=(), pin_cpu=client_cpu,
                                         timeout=120.0 + 60.0 * len(runs), workdir=wd)
    except (OSError, subprocess.SubprocessError) as exc:  # it could not start, or ran past its timeout
        results = [f"{type(exc).__name__}: {exc}"] * len(runs)
    out = []
    for (_, _, c), res in zip(runs, results):
        how = (f"sglang.bench_serving (sglang {bs['version']}, aiohttp) in its own interpreter pinned to the client CPU, "
               f"every level in one process whose start is not timed; --backend vllm, random dataset, --max-concurrency {c}, "
               f"{warmup} warm-up request(s); tokens/s is its output_throughput (output tokens / its benchmark duration)")
        if isinstance(res, str):
            out.append({**empty, "skipped": f"failed: {res[-300:]}", "how": how})
            continue
        ttfts = [t for t in res.get("ttfts") or [] if t]
        out.append({**empty, "ok": res.get("completed"), "tokens": res.get("total_output_tokens"),
                    "stream_wall_s": res.get("duration"), "stream_tok_s": res.get("output_throughput"),
                    "ttft_server_p50_s": percentile(ttfts, 50), "skipped": None,  # its clock starts after the slot
                    "errors": sorted({str(e) for e in res.get("errors") or [] if e})[:3], "how": how})
    return out


# -- the verdict ---------------------------------------------------------------------------------------------------
def _records(rows: Any) -> list[dict]:
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    return list(rows or [])


def _rate(r: dict) -> float | None:
    """A level's tokens/s when every request of it completed; None otherwise (or not measured)."""
    v = r.get("stream_tok_s")
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    if r.get("ok") is not None and r.get("requests") is not None and int(r["ok"]) != int(r["requests"]):
        return None
    return float(v)


def _levels(rows: Iterable[dict], field: str = "stream_tok_s") -> dict[str, dict[tuple[int, int], float]]:
    """client -> {(events per write, concurrency): tokens/s} (or another ``field`` of the same complete levels); rows
    from before the comparison are servebook's."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    for r in rows:
        rate = _rate(r)
        client = r.get("client") if isinstance(r.get("client"), str) else "servebook"
        if rate is not None:
            out.setdefault(client, {})[(int(r["events_per_write"]), int(r["concurrency"]))] = rate if field == "stream_tok_s" else r.get(field)
    return out


def ceiling_comparison(rows: Any) -> list[dict]:
    """Per level (events per write, concurrency): each client's streamed tokens/s and its ratio to bench_serving's."""
    by = _levels(_records(rows))
    bs = by.get("sglang.bench_serving", {})
    out = []
    for epw, c in sorted({lv for levels in by.values() for lv in levels}):
        row: dict[str, Any] = {"events_per_write": epw, "concurrency": c}
        for client in CLIENTS:
            row[f"{client}_tok_s"] = by.get(client, {}).get((epw, c))
        for client in ("servebook", "httpx"):
            a, b = row[f"{client}_tok_s"], bs.get((epw, c))
            row[f"{client}_vs_bench_serving"] = a / b if a and b else None
        out.append(row)
    return out


def ceiling_verdict(rows: Any, goal: float = CEILING_GOAL) -> dict:
    """Whether servebook's own HTTP transport is justified on this host, from the rows of ``client_ceiling``.

    Only levels where servebook and bench_serving both completed every request count. Per streaming regime (events
    per socket write) each client's ceiling is its highest streamed tokens/s at that regime's levels, and its ratio is
    that over bench_serving's; ``ceilings``/``ratios``/``reaches`` are the same over all levels (the best level).
    The verdict is judged in the regime engines stream in, one token per network read (``ENGINE_REGIME``: SGLang and
    vLLM sent 1.0 token per chunk in the recorded H200 runs), and only where that regime measured the clients: both
    servebook's and httpx's core at least ``BOUND_AT`` busy there. Otherwise the fake server set the pace, and the run
    cannot say (None, with the reason). Justified when servebook reaches the goal there and httpx does not."""
    recs = _records(rows)
    by, busy = _levels(recs), _levels(recs, "client_busy")
    compared = any(isinstance(r.get("client"), str) and r.get("client") != "servebook" for r in recs)
    skips: dict = {}
    for r in recs:
        if isinstance(r.get("skipped"), str) and r.get("skipped"):
            skips.setdefault(r.get("client"), r["skipped"])
    bs, sb = by.get("sglang.bench_serving", {}), by.get("servebook", {})
    levels = sorted(set(sb) & set(bs)) or sorted(sb)
    ceilings = {}
    for c in CLIENTS:
        at = [x for x in (by.get(c, {}).get(lv) for lv in levels) if x is not None]
        if at:
            ceilings[c] = max(at)
    regimes = [_regime(by, busy, [lv for lv in levels if lv[0] == epw], epw, goal) for epw in sorted({e for e, _ in levels})]
    base = ceilings.get("sglang.bench_serving")
    ratios = {k: (ceilings[k] / base if base and k in ceilings else None) for k in ("servebook", "httpx")}
    out = {"goal": goal, "compared": compared, "levels": levels, "ceilings": ceilings, "regimes": regimes, "ratios": ratios,
           "reaches": {k: (None if v is None else v >= goal) for k, v in ratios.items()},
           "bench_serving_measured": bool(bs and set(sb) & set(bs)), "skipped": skips, "justified": None,
           "decided_in": next((r for r in regimes if r["events_per_write"] == ENGINE_REGIME), None)}
    out["reason"], out["justified"] = _judge(out, skips)
    out["reason_tagged"] = _judge(out, skips, tagged=True)[0]  # the same words, each figure tagged for a page (servebook.stated)
    return out


ENGINE_REGIME = 1  # events per network read the verdict is judged in: how SGLang and vLLM stream (one token a chunk)
BOUND_AT = 0.75    # a client's core at least this busy at a level: that level measured the client, not the fake server


def _regime(by: dict, busy: dict, levels: list, epw: int, goal: float) -> dict:
    """One streaming regime: each client's best rate there, its ratio to bench_serving's, and the busy share of
    servebook's and httpx's core at their best level (``client_bound`` when both are at least ``BOUND_AT``)."""
    regime: dict[str, Any] = {"events_per_write": epw}
    for client in CLIENTS:
        at = {lv: by.get(client, {}).get(lv) for lv in levels}
        best = max((lv for lv, x in at.items() if x is not None), key=lambda lv: at[lv], default=None)
        regime[client] = at[best] if best else None
        if client != "sglang.bench_serving":
            regime[f"{client}_busy"] = busy.get(client, {}).get(best) if best else None
    base = regime["sglang.bench_serving"]
    for client in ("servebook", "httpx"):
        regime[f"{client}_ratio"] = regime[client] / base if regime[client] and base else None
        regime[f"{client}_reaches"] = None if regime[f"{client}_ratio"] is None else regime[f"{client}_ratio"] >= goal
    regime["client_bound"] = all(isinstance(regime[f"{c}_busy"], (int, float)) and regime[f"{c}_busy"] >= BOUND_AT
                                 for c in ("servebook", "httpx"))
    return regime


def _judge(v: dict, skips: dict, tagged: bool = False) -> tuple[str, bool | None]:
    """(reason, justified) for :func:`ceiling_verdict`; ``tagged``: its figures tagged (``servebook.stated.q``) for a
    page, where the check recomputes them from the run's ``client_ceiling`` rows and this module's constants."""
    from ..stated.tags import quoter

    q = quoter(tagged)

    regime = q("method_constant", ENGINE_REGIME, "d", of="ceiling_engine_regime")
    if not v["compared"]:
        return "this run's ceiling predates the comparison of clients (only servebook's own was measured)", None
    if not v["bench_serving_measured"]:
        why = skips.get("sglang.bench_serving") or "no level where it and servebook completed every request"
        return f"sglang.bench_serving was not measured ({why}), so the goal cannot be checked on this host", None
    r = v["decided_in"]
    if r is None or r["servebook_ratio"] is None:
        return f"no level with {regime} event per write, the regime engines stream in, was measured by both", None
    if r["httpx_ratio"] is None:
        why = skips.get("httpx") or "no level where it completed every request"
        return f"httpx was not measured at {regime} event per write ({why}), so it is undecided", None
    if not r["client_bound"]:
        return (f"at {regime} event per write the fake server, not the clients, set the pace (servebook's core "
                f"{_pct(r['servebook_busy'], q, 'servebook')} busy, httpx's {_pct(r['httpx_busy'], q, 'httpx')}, below "
                f"{q('method_constant', BOUND_AT, '.0%', of='ceiling_bound_at')}): this host cannot "
                "say whether a library client would do"), None
    at = (f"at {regime} event per write, as engines stream, servebook's client reaches "
          f"{q('ceiling_ratio_decided', r['servebook_ratio'], '.2f', of='servebook')}x bench_serving's and httpx "
          f"{q('ceiling_ratio_decided', r['httpx_ratio'], '.2f', of='httpx')}x (both client-bound)")
    if not r["servebook_reaches"]:
        return f"{at}: servebook's client misses the goal, so the goal gives no reason to keep it", False
    if r["httpx_reaches"]:
        return f"{at}: httpx reaches the goal too, so a library client would do here", False
    return f"{at}: servebook's client reaches the goal and httpx does not, so a library client cannot reach it here", True


def _checked(label, phase, concurrency, tok_s) -> tuple:
    return (label, phase, int(concurrency or 1), round(float(tok_s), 6))


def _pct(x, q=None, of=None) -> str:
    if not isinstance(x, (int, float)):
        return "unmeasured"
    return q("ceiling_busy_decided", x, ".0%", of=of) if q is not None else f"{x:.0%}"


def ceiling_check(summary, ceiling, *, warn_at: float = 0.5, store=None) -> list[dict]:
    """Each measured rate next to the client's own limit; ``near_ceiling`` when it uses over ``warn_at`` of it.

    Two ways a benchmark can measure its client instead of the server: the rate approaches the
    tokens/s the client sustained against the fake server at the nearest measured concurrency (log scale), or the
    client's CPU per token (worst case: one network read per token) times the rate fills its core.
    Rows (one per summary row, single-stream and sweep levels) go to ``bench_ceiling_check``; with ``store``, a rate
    already checked there is not checked again and its stored row is returned (a resumed run checks only what it
    measured since)."""
    rows: list[dict] = []
    if ceiling is not None and "client" in getattr(ceiling, "columns", ()):  # servebook's own ceiling, not the other clients'
        ceiling = ceiling[ceiling["client"].fillna("servebook") == "servebook"]
    if summary is None or not len(summary):
        return rows
    have = {_checked(r["label"], r["phase"], r["concurrency"], r["tok_s"]): r
            for r in (store.rows("bench_ceiling_check") if store is not None else [])}
    measured = ceiling is not None and len(ceiling)
    levels = sorted({int(c) for c in ceiling["concurrency"]}) if measured else []
    for _, r in summary.iterrows():
        rate = r.get("throughput_tok_s") if r.get("phase") == "sweep" else r.get("decode_tok_s_mean")
        if rate is None or rate != rate:
            continue
        c = int(r.get("concurrency") or 1)
        k = _checked(r.get("label"), r.get("phase"), c, rate)
        if k in have:
            rows.append(have[k])
            continue
        if not measured:
            continue
        near = min(levels, key=lambda lv: (abs(math.log(lv / c)), lv))  # levels double: nearest on a log scale
        at = ceiling[ceiling["concurrency"] == near]
        ceil_tok_s = float(at["stream_tok_s"].min())
        us = float(at["client_cpu_us_per_token"].max()) if at["client_cpu_us_per_token"].notna().any() else None
        share_rate = float(rate) / ceil_tok_s if ceil_tok_s else None
        share_cpu = float(rate) * us / 1e6 if us else None
        worst = max(x for x in (share_rate, share_cpu, 0.0) if x is not None)
        row = {"label": r.get("label"), "phase": r.get("phase"), "concurrency": c, "tok_s": float(rate),
               "ceiling_concurrency": near, "ceiling_tok_s": ceil_tok_s, "share_of_ceiling": share_rate,
               "client_cpu_us_per_token": us, "client_core_share": share_cpu, "near_ceiling": worst > warn_at,
               "warn_at": warn_at}
        rows.append(row)
        if store is not None:
            store.append("bench_ceiling_check", row)
    return rows


# ---------------------------------------------------------------------------------------
