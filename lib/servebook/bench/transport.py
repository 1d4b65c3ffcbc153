"""The streaming client's transport: one asyncio event loop, keep-alive HTTP/1.1 connections, httptools to parse.

    raws, cpu_s = run_coro(run_batch(url, bodies, concurrency=4, api="completions", arrivals=None,
                                     request_timeout=300, time_budget_s=None, progress=False, desc="requests"))

While a stream runs the client only timestamps each network read (``time.perf_counter``) and keeps its bytes
(:class:`RawStream`); httptools (llhttp, in C) reads the status line and headers and says when the response
has ended. Everything else (chunked framing, SSE events, JSON) is parsed after the batch, off the hot path,
by :meth:`RawStream.body_pieces` and ``servebook.bench.sse``.

Why not httpx: issue #19 keeps a transport of servebook's own only where a measurement shows that a library client
cannot reach the client-ceiling goal (``ceiling.CEILING_GOAL`` x ``sglang.bench_serving``'s ceiling). Chapter 05
measures it on each host: ``client_ceiling(clients=CLIENTS)`` streams the same requests from the same fake server
with this transport, with httpx (``httpx_stream``) and with ``sglang.bench_serving``; ``ceiling_verdict`` reads the
rows (table ``client_ceiling``) and the chapter states whether this transport is justified there, judged at one token
per network read (how SGLang and vLLM stream). On the 16-core H200 host of ``data/runs/h200x1-live`` it is: there this
transport reached 1.68x bench_serving's ceiling and httpx 0.98x, both clients' cores busy; at 64 tokens per write httpx
clears the goal too (8.5x), so the difference is the cost per network read. Per network read this transport spends
one timestamp, one list append and one C parser call; the same table gives each client's CPU per token.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass, field

import httptools

from ..errors import ParameterError
from .payload import endpoint

__all__ = ["RawStream", "run_batch", "run_coro", "RAW_FIELDS"]


@dataclass
class RawStream:
    """What the hot loop keeps: timestamps and bytes of each read, nothing parsed but the status and headers."""

    index: int
    t_arrive: float = 0.0
    t_slot: float = 0.0
    t_end: float = 0.0
    status: int | None = None
    content_type: str = ""
    stamps: list[float] = field(default_factory=list)
    reads: list[bytes] = field(default_factory=list)
    error: str | None = None

    def body_pieces(self) -> list[tuple[int, bytes]]:
        """``(read index, body bytes)`` in order: the response body with its head removed and chunked framing
        decoded (by httptools), each piece tagged with the network read that carried it. Reads that are not an
        HTTP response (a stream built by hand) are the body as they are."""
        if b"".join(self.reads[:2])[:5] != b"HTTP/":
            return [(i, r) for i, r in enumerate(self.reads) if r]
        sink = _BodySink()
        parser = httptools.HttpResponseParser(sink)
        for i, r in enumerate(self.reads):
            sink.read = i
            try:
                parser.feed_data(r)
            except httptools.HttpParserError:
                break
        return sink.pieces

    def body(self) -> bytes:
        return b"".join(p for _, p in self.body_pieces())


# Rows a host sends back for each stream (reads as base64); older recordings also carry header_bytes/chunked.
RAW_FIELDS = ("index", "t_arrive", "t_slot", "t_end", "status", "content_type", "stamps", "error")


class _BodySink:
    """httptools callbacks that collect the body, piece by piece, with the read each piece came in."""

    def __init__(self) -> None:
        self.read = 0
        self.pieces: list[tuple[int, bytes]] = []

    def on_body(self, body: bytes) -> None:
        self.pieces.append((self.read, bytes(body)))


class _StreamProtocol(asyncio.Protocol):
    """One keep-alive connection; its hot path is one timestamp, one list append and one httptools call per read."""

    def __init__(self) -> None:
        self.transport = None
        self.raw: RawStream | None = None
        self.fut: asyncio.Future | None = None
        self.closed = False
        self.keep_alive = True

    def connection_made(self, transport) -> None:
        self.transport = transport

    def begin(self, raw: RawStream, fut: asyncio.Future) -> None:
        self.raw, self.fut = raw, fut
        self.mode, self.headers = "", {}
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        raw = self.raw
        if raw is None:
            return
        raw.stamps.append(time.perf_counter())
        raw.reads.append(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raw.error = f"not an HTTP response: {raw.reads[0][:80]!r} ({exc})"
            self._finish()

    # -- httptools callbacks --------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[bytes(name).lower()] = bytes(value)

    def on_headers_complete(self) -> None:
        raw = self.raw
        raw.status = self.parser.get_status_code()
        raw.content_type = self.headers.get(b"content-type", b"").decode("latin-1")
        self.keep_alive = self.parser.should_keep_alive()
        chunked = b"chunked" in self.headers.get(b"transfer-encoding", b"").lower()
        self.mode = "chunked" if chunked else "length" if b"content-length" in self.headers else "close"
        if self.mode == "close":
            self.keep_alive = False

    def on_message_complete(self) -> None:
        self._finish()

    # -- the end ----------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(None)
        self.raw = None

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.raw is not None:
            if self.mode != "close":
                self.raw.error = f"the connection closed before the response ended ({exc or 'EOF'})"
            self._finish()


class _Pool:
    """Keep-alive connections to one server, at most as many as the concurrency."""

    def __init__(self, url: str):
        from urllib.parse import urlsplit

        u = urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https"):
            raise ParameterError("url", url, "an http:// or https:// URL")
        self.host, self.ssl = u.hostname or "127.0.0.1", u.scheme == "https"
        self.port = u.port or (443 if self.ssl else 80)
        self.prefix = u.path.rstrip("/")
        self.idle: list[_StreamProtocol] = []

    async def acquire(self, timeout: float, fresh: bool = False) -> tuple[_StreamProtocol, bool]:
        """A connection and whether it was reused (an idle keep-alive connection may have been closed by the server)."""
        while self.idle and not fresh:
            p = self.idle.pop()
            if not p.closed and not p.transport.is_closing():
                return p, True
        loop = asyncio.get_running_loop()
        _t, p = await asyncio.wait_for(loop.create_connection(_StreamProtocol, self.host, self.port, ssl=self.ssl or None), timeout)
        return p, False

    def release(self, p: _StreamProtocol, reuse: bool) -> None:
        if reuse and p.keep_alive and not p.closed:
            self.idle.append(p)
        else:
            p.transport.close()

    def close(self) -> None:
        for p in self.idle:
            p.transport.close()
        self.idle.clear()


async def _one(pool: _Pool, path: str, payload: bytes, raw: RawStream, sem: asyncio.Semaphore, deadline: float | None,
               timeout: float, url: str) -> None:
    async with sem:
        raw.t_slot = time.perf_counter()
        if deadline is not None and raw.t_slot > deadline:
            raw.error = "skipped: the time budget of this batch ran out before it got a slot"
            raw.t_end = raw.t_slot
            return
        head = (f"POST {pool.prefix}{path} HTTP/1.1\r\nHost: {pool.host}:{pool.port}\r\nUser-Agent: servebook-bench\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
        for attempt in (0, 1):
            try:
                proto, reused = await pool.acquire(10.0, fresh=attempt > 0)
            except (OSError, asyncio.TimeoutError) as exc:
                raw.error = f"cannot connect to {url}: {exc or type(exc).__name__}; is the server running and is the URL right?"
                raw.t_end = time.perf_counter()
                return
            fut = asyncio.get_running_loop().create_future()
            proto.begin(raw, fut)
            proto.transport.write(head + payload)
            ok = False
            try:
                await asyncio.wait_for(fut, timeout)
                ok = raw.error is None
            except asyncio.TimeoutError:
                raw.error = f"no complete answer from {url} within {timeout:.0f}s; the server is stuck or overloaded (raise request_timeout)"
            except asyncio.CancelledError:
                proto.raw = None
                pool.release(proto, reuse=False)
                raise
            proto.raw = None
            pool.release(proto, reuse=ok)
            if reused and not raw.reads and raw.error and raw.error.startswith("the connection closed"):
                raw.error = None  # the server had closed the idle keep-alive connection: send again on a new one
                continue
            break
        raw.t_end = raw.stamps[-1] if raw.stamps else time.perf_counter()


async def run_batch(
    url: str, bodies: list[dict], concurrency: int, api: str, arrivals: list[float] | None,
    request_timeout: float, time_budget_s: float | None, progress: bool, desc: str,
) -> list[RawStream]:
    pool = _Pool(url)
    path = endpoint(api)
    payloads = [json.dumps(b).encode() for b in bodies]
    sem = asyncio.Semaphore(concurrency)
    raws = [RawStream(index=i) for i in range(len(bodies))]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(bodies), desc=desc, leave=False)
    t0 = time.perf_counter()
    deadline = t0 + time_budget_s if time_budget_s else None

    async def task(i: int) -> None:
        if arrivals is not None and arrivals[i] > 0:
            await asyncio.sleep(max(0.0, t0 + arrivals[i] - time.perf_counter()))
        raws[i].t_arrive = t0 + (arrivals[i] if arrivals is not None else 0.0)
        await _one(pool, path, payloads[i], raws[i], sem, deadline, request_timeout, url)
        if bar is not None:
            bar.update(1)

    try:
        await asyncio.gather(*(task(i) for i in range(len(bodies))))
    finally:
        pool.close()
        if bar is not None:
            bar.close()
    return raws


def run_coro(coro, pin_cpu: int | None = None):
    """Run a coroutine to completion from sync code, also inside Jupyter (whose loop is running)."""
    def runner(box: dict) -> None:
        try:
            if pin_cpu is not None and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {pin_cpu})  # this thread only (Linux)
            box["t_cpu0"] = time.thread_time()
            box["value"] = asyncio.run(coro)
            box["cpu_s"] = time.thread_time() - box["t_cpu0"]
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    box: dict = {}
    th = threading.Thread(target=runner, args=(box,), name="servebook-bench", daemon=True)
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["value"], box.get("cpu_s")
