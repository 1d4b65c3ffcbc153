"""A library client streaming the same requests as servebook's: httpx, for chapter 05's comparison of client ceilings.

    (raws, cpu_s, wall_s), _ = run_coro(httpx_batch(url, bodies, concurrency=8, api="completions", timeout=60.0, warmup=1), pin_cpu)
    results = [finish(r, "completions", tokenizer, None) for r in raws]

Written the way a user of the library writes it: one ``httpx.AsyncClient`` whose pool holds as many connections as
the concurrency, ``client.stream("POST", ...)`` and ``aiter_bytes()``, each chunk timestamped and kept. The client is
made, and ``warmup`` requests sent on it, before the clock starts: a user makes it once (making one costs tens of ms,
mostly its SSL context), so only the batch is timed, in wall time and in CPU time of the event-loop thread. The chunks
are parsed after the batch by the same code as servebook's own streams (``servebook.bench.sse.finish``), so the two
clients differ only in how the bytes arrive: httpx (httpcore, h11) or servebook's transport (asyncio, httptools).
"""

from __future__ import annotations

import asyncio
import time

from .payload import endpoint
from .transport import RawStream

__all__ = ["httpx_batch"]


async def httpx_batch(url: str, bodies: list[dict], concurrency: int, api: str, timeout: float,
                      warmup: int = 0) -> tuple[list[RawStream], float, float]:
    """Stream ``bodies`` with at most ``concurrency`` in flight, all arriving at once, after ``warmup`` untimed
    requests (copies of the first body); one :class:`RawStream` each, the thread's CPU seconds and the wall seconds."""
    import httpx

    path = endpoint(api)
    sem = asyncio.Semaphore(concurrency)
    raws = [RawStream(index=i) for i in range(len(bodies))]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    t0 = 0.0

    async def one(client: httpx.AsyncClient, raw: RawStream, body: dict) -> None:
        raw.t_arrive = t0
        async with sem:
            raw.t_slot = time.perf_counter()
            try:
                async with client.stream("POST", path, json=body, headers={"Accept": "text/event-stream"}) as resp:
                    raw.status = resp.status_code
                    raw.content_type = resp.headers.get("content-type", "")
                    async for chunk in resp.aiter_bytes():
                        raw.stamps.append(time.perf_counter())
                        raw.reads.append(chunk)
            except httpx.HTTPError as exc:
                raw.error = f"httpx: {type(exc).__name__}: {exc or 'no message'}"
            raw.t_end = raw.stamps[-1] if raw.stamps else time.perf_counter()

    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout, limits=limits) as client:
        for _ in range(warmup):
            await one(client, RawStream(index=-1), bodies[0])
        cpu0, t0 = time.thread_time(), time.perf_counter()
        await asyncio.gather(*(one(client, raws[i], bodies[i]) for i in range(len(bodies))))
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    return raws, cpu, wall
