"""How far to trust the client: its own ceiling against the fake server, and each measured rate next to it."""

from __future__ import annotations

import math
import os
import time
from typing import Sequence

from .fake import FakeSSEServer
from .payload import request_body
from .sse import finish
from .stats import percentile
from .transport import run_batch, run_coro

__all__ = ["client_ceiling", "ceiling_check"]


def client_ceiling(
    *,
    store=None,
    tokenizer=None,
    concurrencies: Sequence[int] = (1, 64),
    events_per_write: Sequence[int] = (1, 64),
    tokens_per_request: int = 2048,
    requests_per_level: int = 2,
    api: str = "completions",
) -> list[dict]:
    """The client's own limit: streamed tokens/s it sustains against :class:`FakeSSEServer`.

    The fake server is pinned to the last CPU and the client's event-loop thread to CPU 0
    (when the host has two or more). For each (concurrency, events per write) the client
    streams ``requests_per_level x C`` requests of ``tokens_per_request`` tokens. Reported:
    tokens/s over the streaming phase, client CPU time per token for streaming and for
    parsing (tokenizer counting included when a tokenizer is given), and the TTFT the client
    itself adds (the fake server answers at once). Rows go to ``client_ceiling``.
    """
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(ncpu))
    client_cpu = cpus[0] if ncpu >= 2 else None
    server_cpu = cpus[-1] if ncpu >= 2 else None
    rows = []
    for epw in events_per_write:
        with FakeSSEServer(tokens_per_event=1, events_per_write=epw, cpu=server_cpu) as fake:
            for c in concurrencies:
                n = requests_per_level * c
                bodies = [request_body(api, "fake-sse", "hi", tokens_per_request, "", False, None) for _ in range(n)]
                t0 = time.perf_counter()
                raws, cpu_s = run_coro(run_batch(fake.url, bodies, c, api, None, 60.0, None, False, "ceiling"), client_cpu)
                wall = time.perf_counter() - t0
                p0 = time.process_time()
                t1 = time.perf_counter()
                res = [finish(r, api, tokenizer, None) for r in raws]
                parse_s = time.perf_counter() - t1
                ok = [r for r in res if r.ok]
                tokens = sum(r.output_tokens for r in ok)
                row = {
                    "concurrency": c, "events_per_write": epw, "tokens_per_event": 1, "requests": n, "ok": len(ok),
                    "tokens": tokens, "stream_wall_s": wall,
                    "stream_tok_s": tokens / wall if wall else None,
                    "client_cpu_us_per_token": (cpu_s / tokens * 1e6) if tokens and cpu_s else None,
                    "parse_us_per_token": (parse_s / tokens * 1e6) if tokens else None,
                    "parse_cpu_s": time.process_time() - p0,
                    "ttft_p50_s": percentile([r.ttft_s for r in ok], 50),
                    "ttft_p99_s": percentile([r.ttft_s for r in ok], 99),
                    "ttft_server_p50_s": percentile([r.ttft_server_s for r in ok], 50),
                    "tokenizer": tokenizer is not None,
                    "client_cpu": client_cpu, "server_cpu": server_cpu,
                    "errors": sorted({r.error for r in res if r.error})[:3],
                    "method": (f"fake SSE server (1 token per event, {epw} events per socket write) on CPU {server_cpu}; "
                               f"client event loop on CPU {client_cpu}; {n} requests x {tokens_per_request} tokens at C={c}; "
                               "tokens/s over the streaming phase; CPU time of the client thread; parsing timed separately"),
                }
                if store is not None:
                    store.append("client_ceiling", row)
                rows.append(row)
    return rows


def ceiling_check(summary, ceiling, *, warn_at: float = 0.5, store=None) -> list[dict]:
    """Each measured rate next to the client's own limit; ``near_ceiling`` when it uses over ``warn_at`` of it.

    Two ways a benchmark can measure its client instead of the server: the rate approaches the
    tokens/s the client sustained against the fake server at the nearest measured concurrency (log scale), or the
    client's CPU per token (worst case: one network read per token) times the rate fills its core.
    Rows (one per summary row, single-stream and sweep levels) go to ``bench_ceiling_check``."""
    rows: list[dict] = []
    if summary is None or not len(summary) or ceiling is None or not len(ceiling):
        return rows
    levels = sorted({int(c) for c in ceiling["concurrency"]})
    for _, r in summary.iterrows():
        rate = r.get("throughput_tok_s") if r.get("phase") == "sweep" else r.get("decode_tok_s_mean")
        if rate is None or rate != rate:
            continue
        c = int(r.get("concurrency") or 1)
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
