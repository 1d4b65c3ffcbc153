"""One streaming client for every engine: single stream, concurrency sweeps, the client's own ceiling.

    tok = load_tokenizer(model_dir)
    prompts = build_prompts(tok, input_len=128, n=16, seed=0)
    results = run_requests(url, model, prompts, max_tokens=128, concurrency=4, engine="transformers", tokenizer=tok)
    summary = single_stream(url, model, prompts, store=store, tokenizer=tok, runs=5, warmup=2)
    levels = concurrency_sweep(url, model, prompts, store=store, tokenizer=tok, max_concurrency=128)
    ceiling = client_ceiling(store=store, tokenizer=tok)

Method. The client is one asyncio event loop sending HTTP/1.1 streaming POSTs to the
OpenAI-compatible ``/v1/completions`` or ``/v1/chat/completions`` through a minimal
``asyncio.Protocol`` (keep-alive pool, chunked decoding after the fact). httpx was measured
here first and spent ~2 ms of CPU per request and 10-140 us per network read inside
httpcore/h11, which capped it near 60k tokens/s; the raw protocol spends one
``perf_counter`` call and one list append per read (``client_ceiling`` measures it). While a stream runs the
client only timestamps each network read (``time.perf_counter``) and keeps its bytes;
SSE events are split, parsed and tokenized after the whole batch has finished, so parsing
never delays another stream's timestamps. An event is timestamped by the read that
completed it. Per request:

* ``slot_wait_s``: time from the request's arrival to getting a concurrency slot;
* ``ttft_s``: arrival to the first event carrying text (slot wait included: what a user sees),
  ``ttft_server_s = ttft_s - slot_wait_s``;
* ``e2e_s``: arrival to the end of the stream; ``tpot_s = (e2e_s - ttft_s) / (output_tokens - 1)``;
  ``decode_tok_s = (output_tokens - 1) / (e2e_s - ttft_s)``;
* per-token inter-token latency (``itl_ms``): each inter-chunk gap divided evenly over the tokens
  that chunk carried, kept apart from the raw inter-chunk gaps (``chunk_gaps_ms``);
* ``output_tokens``: the server's ``usage.completion_tokens`` when it sends one, else the
  model tokenizer's count of the streamed text; tokens per chunk from the tokenizer.

Fixed output lengths: ``ignore_eos`` for vLLM/SGLang, a ``generation_config`` with
``min_new_tokens`` for ``transformers serve``; otherwise the real length is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import ParameterError, ServerError

__all__ = [
    "Prompt",
    "RequestResult",
    "load_tokenizer",
    "build_prompts",
    "fixed_length_fields",
    "check_server",
    "run_requests",
    "single_stream",
    "ceiling_check",
    "concurrency_sweep",
    "concurrency_levels",
    "summarize_level",
    "mean_ci",
    "t_quantile",
    "inprocess_decode_rate",
    "FakeSSEServer",
    "client_ceiling",
    "plot_pareto",
    "plot_latency",
    "register",
    "main",
]

_CONFIG_KEYS = ("engine", "attention", "label", "api")


# ---------------------------------------------------------------------------------------
# statistics (no scipy here: Student's t from the regularized incomplete beta function)
# ---------------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > 1e-300 else 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > 1e-300 else 1e-300
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    front = math.exp(lbeta)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betai(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t distribution (``t_quantile(0.975, 4) == 2.776...``)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ParameterError("p/df", (p, df), "0 < p < 1 and df > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean and the two-sided t-distribution confidence interval of the mean."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "half_width": None, "low": None, "high": None, "confidence": confidence}
    mean = sum(vals) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None, "confidence": confidence}
    sd = statistics.stdev(vals)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half, "confidence": confidence}


def _pct(values: Sequence[float], q: float) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    k = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


# ---------------------------------------------------------------------------------------
# prompts and tokenizer
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    """A prompt and its length in the model's tokens."""

    text: str
    tokens: int
    seed: int = 0
    index: int = 0


def load_tokenizer(path: str | os.PathLike):
    """The model's tokenizer from a local directory (never downloads)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ParameterError("tokenizer", str(path), f"a local model directory with a tokenizer ({type(exc).__name__}: {str(exc)[:200]})") from exc


_CORPUS_IDS: dict[int, list[int]] = {}


def _corpus_ids(tokenizer) -> list[int]:
    key = id(tokenizer)
    if key not in _CORPUS_IDS:
        import pydoc_data.topics as topics  # the language reference: ships with every CPython

        text = "\n".join(v for _, v in sorted(topics.topics.items()))
        _CORPUS_IDS[key] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return _CORPUS_IDS[key]


def build_prompts(tokenizer, input_len: int, n: int, seed: int = 0) -> list[Prompt]:
    """``n`` prompts of ``input_len`` tokens each: seeded windows of local text, no downloads.

    The text is CPython's language reference (``pydoc_data``), tokenized with the model's
    tokenizer; a window of ``input_len`` tokens is decoded and re-encoded, and trimmed or
    extended until it re-encodes to exactly ``input_len`` tokens (the real count is kept if a
    window cannot be made exact).
    """
    if input_len < 1 or n < 1:
        raise ParameterError("input_len/n", (input_len, n), "both at least 1")
    ids = _corpus_ids(tokenizer)
    if len(ids) < input_len + 8:
        raise ParameterError("input_len", input_len, f"at most {len(ids) - 8} tokens (the local text is that long)")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        start = rng.randrange(0, len(ids) - input_len - 8)
        want = input_len
        best = None
        for _ in range(6):
            text = tokenizer.decode(ids[start:start + want], skip_special_tokens=True)
            got = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if best is None or abs(got - input_len) < abs(best[1] - input_len):
                best = (text, got)
            if got == input_len:
                break
            want += input_len - got
            if want < 1:
                break
        out.append(Prompt(text=best[0], tokens=best[1], seed=seed, index=i))
    return out


# ---------------------------------------------------------------------------------------
# requests
# ---------------------------------------------------------------------------------------
def fixed_length_fields(engine: str, max_tokens: int) -> dict:
    """Request fields that make ``engine`` generate exactly ``max_tokens`` tokens ({} when unknown)."""
    name = (engine or "").split("==")[0].strip().lower()
    if name in ("vllm", "sglang"):
        return {"ignore_eos": True, "min_tokens": int(max_tokens)}
    if name == "transformers":
        # transformers serve rejects ignore_eos/min_tokens (422) but accepts a whole GenerationConfig.
        return {"generation_config": json.dumps({"max_new_tokens": int(max_tokens), "min_new_tokens": int(max_tokens),
                                                 "do_sample": False})}
    return {}


def _body(api: str, model: str, prompt: str, max_tokens: int, engine: str, fixed_length: bool, extra: dict | None) -> dict:
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "stream": True, "temperature": 0.0}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    # vLLM/SGLang send usage only when asked; transformers serve accepts and ignores the field.
    body["stream_options"] = {"include_usage": True}
    if fixed_length:
        body.update(fixed_length_fields(engine, max_tokens))
    body.update(extra or {})
    return body


def _endpoint(api: str) -> str:
    if api not in ("chat", "completions"):
        raise ParameterError("api", api, "'completions' or 'chat'")
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


@dataclass
class RequestResult:
    """One request's measurements (times in seconds unless the name says ms)."""

    index: int
    ok: bool = False
    error: str | None = None
    status: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    output_tokens_usage: int | None = None
    output_tokens_tokenizer: int | None = None
    count_source: str = ""
    finish_reason: str | None = None
    n_chunks: int = 0
    n_reads: int = 0
    slot_wait_s: float | None = None
    ttft_s: float | None = None
    ttft_server_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    decode_tok_s: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    chunk_gaps_ms: list[float] = field(default_factory=list)
    text: str = ""

    def row(self, keep_text: bool = False) -> dict:
        d = asdict(self)
        d["itl_ms"] = [round(x, 4) for x in self.itl_ms]
        d["chunk_gaps_ms"] = [round(x, 4) for x in self.chunk_gaps_ms]
        d["itl_p50_ms"] = _pct(self.itl_ms, 50)
        d["itl_p99_ms"] = _pct(self.itl_ms, 99)
        d["chunk_gap_p50_ms"] = _pct(self.chunk_gaps_ms, 50)
        d["tokens_per_chunk"] = (self.output_tokens / self.n_chunks) if self.n_chunks else None
        if not keep_text:
            d.pop("text")
        return d


@dataclass
class _Raw:
    """What the hot loop keeps: timestamps and bytes of each read, nothing parsed."""

    index: int
    t_arrive: float = 0.0
    t_slot: float = 0.0
    t_end: float = 0.0
    status: int | None = None
    content_type: str = ""
    stamps: list[float] = field(default_factory=list)
    reads: list[bytes] = field(default_factory=list)
    error: str | None = None
    header_bytes: int = 0
    chunked: bool = False

    def body(self) -> tuple[bytes, list[tuple[int, int, int]], list[int]]:
        """``(data, segments, read_ends)``: the body with headers removed and chunked framing decoded;
        segments ``(decoded_start, length, raw_start)`` map decoded bytes back to raw body offsets;
        ``read_ends[i]`` is the raw body offset where read ``i`` ends."""
        raw = b"".join(self.reads)[self.header_bytes:]
        ends, total = [], -self.header_bytes
        for r in self.reads:
            total += len(r)
            ends.append(total)  # raw body offset where each read ends
        if not self.chunked:
            return raw, [(0, len(raw), 0)], ends
        parts, segs, pos, out_pos = [], [], 0, 0
        while pos < len(raw):
            i = raw.find(b"\r\n", pos)
            if i < 0:
                break
            try:
                size = int(raw[pos:i].split(b";")[0].strip() or b"0", 16)
            except ValueError:
                break
            if size == 0:
                break
            start = i + 2
            chunk = raw[start:start + size]
            parts.append(chunk)
            segs.append((out_pos, len(chunk), start))
            out_pos += len(chunk)
            pos = start + size + 2
        return b"".join(parts), segs, ends


class _StreamProtocol(asyncio.Protocol):
    """A minimal HTTP/1.1 response reader whose hot path is one timestamp and one list append per read."""

    def __init__(self) -> None:
        self.transport = None
        self.raw: _Raw | None = None
        self.fut: asyncio.Future | None = None
        self.closed = False
        self.keep_alive = True

    def connection_made(self, transport) -> None:
        self.transport = transport

    def begin(self, raw: "_Raw", fut: asyncio.Future) -> None:
        self.raw, self.fut = raw, fut
        self.in_body, self.hbuf, self.mode, self.remaining, self.tail = False, b"", "", 0, b""

    def data_received(self, data: bytes) -> None:
        raw = self.raw
        if raw is None:
            return
        raw.stamps.append(time.perf_counter())
        raw.reads.append(data)
        if not self.in_body:
            self.hbuf += data
            i = self.hbuf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.hbuf[:i].decode("latin-1").split("\r\n")
            data = self.hbuf[i + 4:]
            raw.header_bytes = len(self.hbuf) - len(data)
            try:
                raw.status = int(head[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                raw.error = f"not an HTTP response: {head[0][:80]!r}"
                self._finish()
                return
            hdr = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                hdr[k.strip().lower()] = v.strip()
            raw.content_type = hdr.get("content-type", "")
            self.keep_alive = hdr.get("connection", "").lower() != "close" and head[0].startswith("HTTP/1.1")
            if "chunked" in hdr.get("transfer-encoding", "").lower():
                self.mode, self.tail = "chunked", b"\r\n"
                raw.chunked = True
            elif "content-length" in hdr:
                self.mode, self.remaining = "length", int(hdr["content-length"])
            else:
                self.mode, self.keep_alive = "close", False
            self.in_body, self.hbuf = True, b""
        if self.mode == "chunked":
            t = self.tail + data
            if t.endswith(b"\r\n0\r\n\r\n"):
                self._finish()
            else:
                self.tail = t[-7:]
        elif self.mode == "length":
            self.remaining -= len(data)
            if self.remaining <= 0:
                self._finish()

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


async def _one(pool: _Pool, path: str, payload: bytes, raw: _Raw, sem: asyncio.Semaphore, deadline: float | None,
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


def _split_events(raw: _Raw) -> list[tuple[float, bytes]]:
    """SSE events, each with the timestamp of the read that completed it (linear in the body size)."""
    data, segs, ends = raw.body()
    if not data:
        return []
    sep = b"\r\n\r\n" if b"\r\n\r\n" in data else b"\n\n"  # some servers frame events with CRLF
    events = []
    seg_i, read_i, pos = 0, 0, 0
    n_segs, n_reads = len(segs), len(ends)
    k = len(sep)
    for ev in data.split(sep):
        end = pos + len(ev) + k if pos + len(ev) < len(data) else len(data)
        pos += len(ev) + k
        if not ev.strip():
            continue
        # decoded offset of the event's last byte -> raw body offset -> the read holding it
        off = end - 1
        while seg_i + 1 < n_segs and segs[seg_i + 1][0] <= off:
            seg_i += 1
        d0, _ln, r0 = segs[seg_i]
        raw_off = r0 + (off - d0)
        while read_i + 1 < n_reads and ends[read_i] <= raw_off:
            read_i += 1
        events.append((raw.stamps[read_i], ev))
    return events


def _text_of(obj: dict, api: str) -> str:
    choices = obj.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if api == "chat":
        delta = c.get("delta") or {}
        return (delta.get("content") or "") + (delta.get("reasoning_content") or "")
    return c.get("text") or ""


def _count_tokens(tokenizer, texts: list[str]) -> list[int]:
    """Tokens in each text, by the model's tokenizer (its Rust backend directly when it has one)."""
    uniq = list(dict.fromkeys(texts))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        enc = getattr(backend, "encode_batch_fast", backend.encode_batch)(uniq, add_special_tokens=False)
        n = {t: len(e.ids) for t, e in zip(uniq, enc)}
    else:
        n = {t: len(ids) for t, ids in zip(uniq, tokenizer(uniq, add_special_tokens=False)["input_ids"])}
    return [n[t] for t in texts]


def _finish(raw: _Raw, api: str, tokenizer, expect_tokens: int | None) -> RequestResult:
    """Parse one finished stream into a RequestResult (runs after the batch, off the hot path)."""
    r = RequestResult(index=raw.index, status=raw.status, n_reads=len(raw.reads))
    r.slot_wait_s = raw.t_slot - raw.t_arrive
    if raw.error and not raw.reads:
        r.error = raw.error
        return r
    if raw.status is not None and raw.status != 200:
        detail = raw.body()[0].decode("utf-8", "replace").strip()
        try:
            j = json.loads(detail)
            detail = j.get("detail") or j.get("message") or (j.get("error") or {}).get("message") or detail
        except (json.JSONDecodeError, AttributeError):
            pass
        r.error = f"HTTP {raw.status}: {str(detail)[:500]}"
        return r
    if "text/event-stream" not in raw.content_type:
        r.error = (f"the server answered without streaming (content-type {raw.content_type or 'none'}); "
                   "it ignored stream=true: use a server/endpoint that streams SSE")
        return r
    texts: list[str] = []
    times: list[float] = []
    done = False
    usage = None
    errors = []
    stamps, payloads = [], []
    for t, ev in _split_events(raw):
        for line in ev.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                continue
            stamps.append(t)
            payloads.append(payload)
    try:  # one C-level parse for the whole stream; per event only when something is malformed
        objs = json.loads(b"[" + b",".join(payloads) + b"]") if payloads else []
    except json.JSONDecodeError:
        objs = []
        for payload in payloads:
            try:
                objs.append(json.loads(payload))
            except json.JSONDecodeError:
                objs.append({"error": f"unparsable event {payload[:80]!r}"})
    for t, obj in zip(stamps, objs):
        if not isinstance(obj, dict):
            errors.append(f"unexpected event {str(obj)[:80]!r}")
            continue
        if obj.get("error"):
            err = obj["error"]
            errors.append(err.get("message", str(err)) if isinstance(err, dict) else str(err))
            continue
        if obj.get("usage"):
            usage = obj["usage"]
        choices = obj.get("choices") or []
        if choices and choices[0].get("finish_reason"):
            r.finish_reason = choices[0]["finish_reason"]
        text = _text_of(obj, api)
        if text:
            texts.append(text)
            times.append(t)
    r.text = "".join(texts)
    r.n_chunks = len(texts)
    if usage:
        r.prompt_tokens = usage.get("prompt_tokens")
        r.output_tokens_usage = usage.get("completion_tokens")
    counts = None
    if tokenizer is not None and texts:
        counts = _count_tokens(tokenizer, texts)
        r.output_tokens_tokenizer = _count_tokens(tokenizer, [r.text])[0]
    if r.output_tokens_usage is not None:
        r.output_tokens, r.count_source = int(r.output_tokens_usage), "usage"
    elif r.output_tokens_tokenizer is not None:
        r.output_tokens, r.count_source = r.output_tokens_tokenizer, "tokenizer"
    else:
        r.output_tokens, r.count_source = len(texts), "chunks"
    if counts is None:  # no tokenizer: one token per chunk is assumed for the per-token ITL
        counts = [1] * len(texts)
        r.count_source += " (ITL assumes one token per chunk: no tokenizer)"
    if times:
        r.ttft_s = times[0] - raw.t_arrive
        r.ttft_server_s = times[0] - raw.t_slot
        end = raw.t_end
        r.e2e_s = end - raw.t_arrive
        carry = 0.0
        for i in range(1, len(times)):
            gap = times[i] - times[i - 1]
            r.chunk_gaps_ms.append(gap * 1e3)
            k = counts[i]
            if k <= 0:
                carry += gap
                continue
            per = (gap + carry) * 1e3 / k
            carry = 0.0
            r.itl_ms.extend([per] * k)
        if r.output_tokens > 1 and r.e2e_s > r.ttft_s:
            r.tpot_s = (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)
            r.decode_tok_s = (r.output_tokens - 1) / (r.e2e_s - r.ttft_s)
    if errors:
        r.error = "; ".join(errors)[:500]
    elif raw.error:
        r.error = raw.error
    elif not done and r.finish_reason is None:
        r.error = f"the stream closed early: no [DONE] and no finish_reason after {r.n_chunks} text chunks"
    elif not texts:
        r.error = "the stream carried no text"
    r.ok = r.error is None
    if r.ok and expect_tokens is not None and r.output_tokens != expect_tokens:
        r.finish_reason = (r.finish_reason or "") + f" (asked for {expect_tokens}, got {r.output_tokens})"
    return r


async def _run_batch(
    url: str, bodies: list[dict], concurrency: int, api: str, arrivals: list[float] | None,
    request_timeout: float, time_budget_s: float | None, progress: bool, desc: str,
) -> list[_Raw]:
    pool = _Pool(url)
    path = _endpoint(api)
    payloads = [json.dumps(b).encode() for b in bodies]
    sem = asyncio.Semaphore(concurrency)
    raws = [_Raw(index=i) for i in range(len(bodies))]
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


def _run_coro(coro, pin_cpu: int | None = None):
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


_RAW_FIELDS = ("index", "t_arrive", "t_slot", "t_end", "status", "content_type", "stamps", "error", "header_bytes", "chunked")


def _host_batch(url: str, bodies: list, concurrency: int, api: str, arrivals, request_timeout: float,
                time_budget_s, desc: str = "requests") -> list[dict]:
    """Host side of a remote batch: run it and return each raw stream as JSON (reads base64)."""
    import base64

    raws, _cpu = _run_coro(_run_batch(url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, False, desc))
    return [{**{k: getattr(r, k) for k in _RAW_FIELDS}, "reads": [base64.b64encode(b).decode() for b in r.reads]} for r in raws]


def _raws_on_host(host, url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, desc) -> list[_Raw]:
    import base64

    n = len(bodies)
    kwargs = dict(url=url, bodies=bodies, concurrency=concurrency, api=api, arrivals=arrivals,
                  request_timeout=request_timeout, time_budget_s=time_budget_s, desc=desc)
    budget = (time_budget_s or request_timeout * max(1, -(-n // concurrency))) + request_timeout + 60
    # The label names the interaction in a cassette: no URL (its port changes) and no model path (it differs between
    # the machine that recorded and the one that replays).
    rows = host.call("servebook.bench:_host_batch", kwargs, timeout=budget,
                     label=f"bench {desc} n={n} C={concurrency} api={api} max_tokens={bodies[0].get('max_tokens') if bodies else None}")
    out = []
    for row in rows:
        raw = _Raw(index=row["index"])
        for k in _RAW_FIELDS:
            setattr(raw, k, row[k])
        raw.reads = [base64.b64decode(b) for b in row["reads"]]
        out.append(raw)
    return out


def _host_models(url: str, timeout: float = 5.0) -> dict:
    """Host side of check_server: GET /v1/models with the standard library."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=timeout) as resp:
            return {"status": resp.status, "body": resp.read().decode(errors="replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": ""}
    except (OSError, urllib.error.URLError) as exc:
        return {"status": None, "error": f"{type(exc).__name__}: {exc}"}


def check_server(url: str, timeout: float = 5.0, host=None) -> list[str]:
    """The model names ``url`` serves (GET /v1/models); ServerError naming the URL when it cannot be reached."""
    if host is not None and not host.in_process:
        ans = host.call("servebook.bench:_host_models", {"url": url, "timeout": timeout}, timeout=timeout + 60, label="bench /v1/models")
        if ans.get("status") is None:
            raise ServerError(f"cannot reach the server at {url} from {host.spec} ({ans.get('error')}); is it running?")
        if ans["status"] != 200:
            raise ServerError(f"{url}/v1/models answered HTTP {ans['status']}; is this an OpenAI-compatible server?")
        try:
            return [m.get("id") for m in json.loads(ans["body"]).get("data", [])]
        except (ValueError, AttributeError) as exc:
            raise ServerError(f"{url}/v1/models did not return the OpenAI model list; is this an OpenAI-compatible server?") from exc
    import httpx

    try:
        resp = httpx.get(url.rstrip("/") + "/v1/models", timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServerError(f"cannot reach the server at {url} ({type(exc).__name__}: {exc}); start it or pass the right --url") from exc
    if resp.status_code != 200:
        raise ServerError(f"{url}/v1/models answered HTTP {resp.status_code}; is this an OpenAI-compatible server?")
    try:
        return [m.get("id") for m in resp.json().get("data", [])]
    except (ValueError, AttributeError) as exc:
        raise ServerError(f"{url}/v1/models did not return the OpenAI model list; is this an OpenAI-compatible server?") from exc


def run_requests(
    url: str,
    model: str,
    prompts: Sequence[Prompt | str],
    *,
    max_tokens: int = 128,
    concurrency: int = 1,
    api: str = "completions",
    engine: str = "",
    tokenizer=None,
    fixed_length: bool = True,
    request_rate: float | None = None,
    seed: int = 0,
    request_timeout: float = 300.0,
    time_budget_s: float | None = None,
    extra_body: dict | None = None,
    progress: bool = False,
    desc: str = "requests",
    pin_cpu: int | None = None,
    host=None,
) -> list[RequestResult]:
    """Send one request per prompt, at most ``concurrency`` at a time, and measure each.

    All requests arrive at once (``request_rate=None``: a closed loop, later requests wait
    for a slot, and that wait is in their ``ttft_s``) or as a seeded Poisson process of
    ``request_rate`` requests/s. After ``time_budget_s`` no new request starts; those are
    returned as failed with the reason. Failures never raise: each is a result with ``error``.

    With ``host`` (a ``servebook.hosts`` host that is not this process) the client runs on that host,
    next to the server, and sends back its raw timestamps and bytes; they are parsed here by the same
    code, so per-request records are identical to a local run.
    """
    if concurrency < 1:
        raise ParameterError("concurrency", concurrency, "1 or more")
    _endpoint(api)
    texts = [p.text if isinstance(p, Prompt) else str(p) for p in prompts]
    bodies = [_body(api, model, t, max_tokens, engine, fixed_length, extra_body) for t in texts]
    arrivals = None
    if request_rate:
        rng = random.Random(seed)
        t, arrivals = 0.0, []
        for _ in bodies:
            arrivals.append(t)
            t += rng.expovariate(request_rate)
    if host is not None and not host.in_process:
        raws = _raws_on_host(host, url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, desc)
    else:
        raws, _cpu = _run_coro(_run_batch(url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, progress, desc), pin_cpu)
    expect = max_tokens if fixed_length and fixed_length_fields(engine, max_tokens) else None
    return [_finish(r, api, tokenizer, expect) for r in raws]


# ---------------------------------------------------------------------------------------
# runs: single stream and the concurrency sweep
# ---------------------------------------------------------------------------------------
def _config(engine: str, attention: str, label: str, api: str) -> dict:
    return {"engine": engine, "attention": attention or "default", "label": label or f"{engine}/{attention or 'default'}", "api": api}


def summarize_level(results: Sequence[RequestResult], wall_s: float | None = None) -> dict:
    """Throughput, per-user decode rate and latency percentiles (p50/p90/p99) of one batch."""
    ok = [r for r in results if r.ok]
    out: dict[str, Any] = {"requests": len(results), "ok": len(ok), "failed": len(results) - len(ok)}
    if wall_s is None and ok:
        # first arrival -> last stream end
        wall_s = max((r.e2e_s or 0) for r in ok)
    tokens = sum(r.output_tokens for r in ok)
    out["output_tokens"] = tokens
    out["wall_s"] = wall_s
    out["throughput_tok_s"] = tokens / wall_s if ok and wall_s else None
    rates = [r.decode_tok_s for r in ok if r.decode_tok_s]
    out["per_user_tok_s"] = statistics.mean(rates) if rates else None
    out["per_user_tok_s_p50"] = _pct(rates, 50)
    for name in ("ttft_s", "ttft_server_s", "slot_wait_s", "e2e_s", "tpot_s"):
        vals = [getattr(r, name) for r in ok if getattr(r, name) is not None]
        out[f"{name}_mean"] = statistics.mean(vals) if vals else None
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = _pct(vals, q)
    itl = [x for r in ok for x in r.itl_ms]
    gaps = [x for r in ok for x in r.chunk_gaps_ms]
    for q in (50, 90, 99):
        out[f"itl_ms_p{q}"] = _pct(itl, q)
        out[f"chunk_gap_ms_p{q}"] = _pct(gaps, q)
    out["itl_ms_mean"] = statistics.mean(itl) if itl else None
    out["tokens_per_chunk"] = tokens / sum(r.n_chunks for r in ok) if ok and sum(r.n_chunks for r in ok) else None
    errs = sorted({r.error for r in results if r.error})
    out["errors"] = errs[:5]
    return out


def _store_requests(store, results, base: dict, prompt_tokens: Sequence[int] | None = None) -> None:
    for r in results:
        row = {**base, **r.row()}
        if prompt_tokens is not None and row.get("prompt_tokens") is None:
            row["prompt_tokens"] = prompt_tokens[r.index % len(prompt_tokens)]
        store.append("bench_requests", row)
        if not r.ok:
            store.record_failure("bench_request", r.error or "failed", **{k: base.get(k) for k in ("engine", "attention", "label", "phase", "concurrency", "run")},
                                 request=r.index)


def single_stream(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    store=None,
    tokenizer=None,
    engine: str = "",
    attention: str = "",
    label: str = "",
    api: str = "completions",
    max_tokens: int = 128,
    runs: int = 5,
    warmup: int = 2,
    requests_per_run: int = 1,
    fixed_length: bool = True,
    request_timeout: float = 300.0,
    progress: bool = True,
    host=None,
) -> dict:
    """Single stream (C=1): ``warmup`` requests, then ``runs`` runs of ``requests_per_run`` requests.

    Every request goes to ``store`` table ``bench_requests`` (phase ``warmup``/``single``),
    the summary (mean and 95% t-interval over runs of the per-run mean decode tok/s,
    TTFT and TPOT) to ``bench_summary``. Returns the summary row.
    """
    if runs < 1 or warmup < 0 or requests_per_run < 1:
        raise ParameterError("runs/warmup/requests_per_run", (runs, warmup, requests_per_run), "runs >= 1, warmup >= 0, requests_per_run >= 1")
    if not prompts:
        raise ParameterError("prompts", prompts, "at least one prompt")
    cfg = _config(engine, attention, label, api)
    common = dict(max_tokens=max_tokens, concurrency=1, api=api, engine=engine, tokenizer=tokenizer,
                  fixed_length=fixed_length, request_timeout=request_timeout, host=host)
    ptoks = [p.tokens for p in prompts]
    if warmup:
        w = run_requests(url, model, [prompts[i % len(prompts)] for i in range(warmup)], desc="warm-up", progress=False, **common)
        if store is not None:
            _store_requests(store, w, {**cfg, "phase": "warmup", "concurrency": 1, "run": -1, "max_tokens": max_tokens}, ptoks)
    per_run = []
    all_results: list[RequestResult] = []
    it = range(runs)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"single stream {cfg['label']}", leave=False)
    k = warmup
    for run in it:
        batch = [prompts[(k + j) % len(prompts)] for j in range(requests_per_run)]
        k += requests_per_run
        res = run_requests(url, model, batch, progress=False, desc=f"single run {run}", **common)
        if store is not None:
            _store_requests(store, res, {**cfg, "phase": "single", "concurrency": 1, "run": run, "max_tokens": max_tokens}, ptoks)
        ok = [r for r in res if r.ok]
        all_results.extend(res)
        per_run.append({
            "decode_tok_s": statistics.mean([r.decode_tok_s for r in ok if r.decode_tok_s]) if any(r.decode_tok_s for r in ok) else None,
            "ttft_s": statistics.mean([r.ttft_s for r in ok]) if ok else None,
            "tpot_s": statistics.mean([r.tpot_s for r in ok if r.tpot_s]) if any(r.tpot_s for r in ok) else None,
        })
    s: dict[str, Any] = {**cfg, "phase": "single", "concurrency": 1, "runs": runs, "warmup": warmup,
                         "requests_per_run": requests_per_run, "max_tokens": max_tokens, "input_tokens": statistics.mean(ptoks)}
    for metric in ("decode_tok_s", "ttft_s", "tpot_s"):
        ci = mean_ci([p[metric] for p in per_run if p[metric] is not None])
        s[f"{metric}_mean"] = ci["mean"]
        s[f"{metric}_ci95"] = ci["half_width"]
        s[f"{metric}_sd"] = ci["sd"]
        s[f"{metric}_runs"] = [p[metric] for p in per_run]
    lvl = summarize_level(all_results)
    for key in ("ok", "failed", "output_tokens", "itl_ms_p50", "itl_ms_p99", "chunk_gap_ms_p50", "chunk_gap_ms_p99", "tokens_per_chunk", "errors"):
        s[key] = lvl[key]
    s["method"] = (f"{warmup} warm-up requests, then {runs} runs x {requests_per_run} request(s) at C=1; per-run mean of "
                   "(output_tokens-1)/(e2e-ttft); mean and 95% t-interval over runs")
    if store is not None:
        store.append("bench_summary", s)
    return s


def concurrency_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to ``max_concurrency`` (included even when not a power of two)."""
    if max_concurrency < 1:
        raise ParameterError("max_concurrency", max_concurrency, "1 or more")
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    levels.append(max_concurrency)
    return levels


def concurrency_sweep(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    store=None,
    tokenizer=None,
    engine: str = "",
    attention: str = "",
    label: str = "",
    api: str = "completions",
    max_tokens: int = 128,
    levels: Sequence[int] | None = None,
    max_concurrency: int = 128,
    requests_per_level: int = 5,
    min_requests: int = 1,
    level_time_budget_s: float | None = 120.0,
    request_rate: float | None = None,
    fixed_length: bool = True,
    request_timeout: float = 300.0,
    resume: bool = True,
    progress: bool = True,
    saturation_patience: int = 2,
    host=None,
) -> list[dict]:
    """For each concurrency C: ``max(min_requests, requests_per_level x C)`` requests, at most C in flight.

    The sweep stops early once throughput has not grown by 10% over the best level for
    ``saturation_patience`` levels in a row (the server is saturated: more concurrency only
    queues); the stop and its reason are a row of ``bench_sweep_stops``. 0 runs every level.

    Rows go to ``bench_requests`` (phase ``sweep``) and one summary per level to
    ``bench_summary``; a level already summarized in ``store`` for this config is skipped
    (``resume``). A level that hits ``level_time_budget_s`` starts no new requests; those
    are recorded as failed with that reason and the summary says ``truncated``.
    """
    cfg = _config(engine, attention, label, api)
    levels = list(levels) if levels else concurrency_levels(max_concurrency)
    out = []
    ptoks = [p.tokens for p in prompts]
    best, flat = 0.0, 0
    for i, c in enumerate(levels):
        if saturation_patience and flat >= saturation_patience:
            stop = {**cfg, "stopped_before": c, "levels_run": levels[:i], "best_throughput_tok_s": best,
                    "reason": f"throughput grew less than 10% over {best:.1f} tok/s for {flat} levels: saturated"}
            if store is not None:
                store.append("bench_sweep_stops", stop)
            break
        key = {**cfg, "phase": "sweep", "concurrency": c, "max_tokens": max_tokens}
        if store is not None and resume and store.done("bench_summary", **key):
            found = store.find("bench_summary", **key)
            out.extend(found)
            best, flat = _saturation(best, flat, found[-1].get("throughput_tok_s"))
            continue
        n = max(min_requests, requests_per_level * c)
        batch = [prompts[i % len(prompts)] for i in range(n)]
        t0 = time.perf_counter()
        res = run_requests(url, model, batch, max_tokens=max_tokens, concurrency=c, api=api, engine=engine, tokenizer=tokenizer,
                           fixed_length=fixed_length, request_rate=request_rate, request_timeout=request_timeout,
                           time_budget_s=level_time_budget_s, progress=progress, desc=f"{cfg['label']} C={c}", host=host)
        wall = time.perf_counter() - t0
        if store is not None:
            _store_requests(store, res, {**key, "run": 0}, ptoks)
        s = {**key, **summarize_level(res, wall_s=max((r.e2e_s or 0.0) for r in res) if res else wall)}
        s["decode_tok_s_mean"] = s["per_user_tok_s"]
        s["truncated"] = any((r.error or "").startswith("skipped:") for r in res)
        s["request_rate"] = request_rate
        s["method"] = (f"{n} requests, at most {c} in flight, all arriving at t=0" if not request_rate else
                       f"{n} requests, at most {c} in flight, Poisson arrivals at {request_rate}/s") + \
            "; throughput = output tokens of successful requests / (first arrival -> last stream end)"
        if store is not None:
            store.append("bench_summary", s)
        out.append(s)
        best, flat = _saturation(best, flat, s.get("throughput_tok_s"))
    return out


def _saturation(best: float, flat: int, throughput: float | None) -> tuple[float, int]:
    """Track the best throughput and how many levels in a row failed to beat it by 10%."""
    throughput = throughput or 0.0
    if throughput > best * 1.10:
        return throughput, 0
    return max(best, throughput), flat + 1


def inprocess_decode_rate(model_dir: str | os.PathLike, prompt: str, max_tokens: int = 64, attention: str | None = None,
                          repeats: int = 3, device: str | None = None, threads: int | None = None) -> dict:
    """Decode tok/s of the model itself, in this process, without any server (``model.generate``).

    Method: greedy ``generate`` of exactly 1 and of ``max_tokens`` new tokens (``min_new_tokens``
    set), best of ``repeats`` each after one warm-up; rate = (max_tokens - 1) / (t_N - t_1), so
    prefill cancels. Compared with the served rate it separates the model from the serving path.
    ``threads`` sets torch's intra-op threads for the measurement (restored afterwards); on a
    small CPU model one thread can beat several.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if max_tokens < 2:
        raise ParameterError("max_tokens", max_tokens, "at least 2")
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    kwargs = {"attn_implementation": attention} if attention else {}
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, **kwargs).to(dev).eval()
    ids = tok(prompt, return_tensors="pt").to(dev)

    def timed(n: int) -> float:
        best = float("inf")
        for i in range(repeats + 1):
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.inference_mode():
                model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
            if dev == "cuda":
                torch.cuda.synchronize()
            if i:  # the first call is the warm-up
                best = min(best, time.perf_counter() - t0)
        return best

    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        used = torch.get_num_threads()
        t1, tn = timed(1), timed(max_tokens)
    finally:
        torch.set_num_threads(before)
    impl = getattr(model.config, "_attn_implementation", None)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    del model
    return {"tok_s": (max_tokens - 1) / (tn - t1), "t_first_s": t1, "t_all_s": tn, "max_tokens": max_tokens,
            "device": dev, "attention": impl, "dtype": dtype, "threads": used,
            "method": (f"model.generate in-process on {dev} ({used} torch threads), greedy, best of {repeats}: "
                       f"(N-1)/(t(N)-t(1)) with N={max_tokens}")}


# ---------------------------------------------------------------------------------------
# the client's own ceiling: a fake SSE server that is clearly not an engine
# ---------------------------------------------------------------------------------------
_FAKE_SERVER = r'''
import asyncio, json, os, sys, time
port, tokens_per_event, events_per_write, delay_s, cpu, word, ttft_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6], float(sys.argv[7])
if cpu >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})

def ev(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for l in lines[1:]:
                if l.lower().startswith("content-length:"):
                    length = int(l.split(":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if path.endswith("/v1/models"):
                data = json.dumps({"object": "list", "data": [{"id": "fake-sse", "object": "model", "owned_by": "servebook-fake"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                await writer.drain()
                continue
            if not path.endswith("completions"):  # e.g. bench_serving's GET /get_server_info: not an engine
                data = b'{"detail":"Not Found"}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                await writer.drain()
                continue
            n = int(body.get("max_tokens", 16))
            chat = "chat" in path
            text = word * tokens_per_event
            if chat:
                one = ev({"choices": [{"index": 0, "delta": {"content": text}}]})
            else:
                one = ev({"choices": [{"index": 0, "text": text}]})
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            if ttft_s > 0:  # a paced server: headers at once, first token after ttft_s (like an engine's prefill)
                await writer.drain()
                await asyncio.sleep(ttft_s)
            n_events = -(-n // tokens_per_event)
            sent = 0
            while sent < n_events:
                k = min(events_per_write, n_events - sent)
                payload = one * k
                writer.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
                sent += k
                if delay_s > 0:
                    await writer.drain()
                    await asyncio.sleep(delay_s)
                else:
                    await writer.drain()
                    await asyncio.sleep(0)  # take turns with the other streams
            fin = {"choices": [{"index": 0, "finish_reason": "length", "text": ""}], "usage": {"prompt_tokens": 1, "completion_tokens": n_events * tokens_per_event}}
            tail = ev(fin) + b"data: [DONE]\n\n"
            writer.write(b"%x\r\n" % len(tail) + tail + b"\r\n0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
'''


class FakeSSEServer:
    """A local OpenAI-style SSE server that emits tokens as fast as it can (or at a fixed gap).

        with FakeSSEServer(tokens_per_event=4, events_per_write=1, delay_s=0.005) as fake:
            run_requests(fake.url, "fake-sse", ["hi"], max_tokens=64)

    It is a test fixture, clearly not an engine: every event carries ``tokens_per_event``
    copies of ``word``; ``events_per_write`` events go out per socket write, ``delay_s`` apart;
    the first waits ``ttft_s`` after the response headers; ``cpu`` pins it. Paced
    (``delay_s``/``ttft_s`` > 0) it is a server whose timing is known and steady, for comparing clients.
    """

    def __init__(self, tokens_per_event: int = 1, events_per_write: int = 64, delay_s: float = 0.0,
                 cpu: int | None = None, word: str = " the", ttft_s: float = 0.0):
        from .servers import free_port

        self.port = free_port()
        self.args = [str(self.port), str(tokens_per_event), str(events_per_write), str(delay_s),
                     str(-1 if cpu is None else cpu), word, str(ttft_s)]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeSSEServer":
        self.proc = subprocess.Popen([sys.executable, "-c", _FAKE_SERVER, *self.args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.proc.stdout.readline()
        if b"ready" not in line:
            self.stop()
            raise ServerError(f"the fake SSE server did not start: {line.decode(errors='replace')[:300]}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            from .servers import stop_process_group

            stop_process_group(self.proc.pid, grace_s=3)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "FakeSSEServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
                bodies = [_body(api, "fake-sse", "hi", tokens_per_request, "", False, None) for _ in range(n)]
                t0 = time.perf_counter()
                raws, cpu_s = _run_coro(_run_batch(fake.url, bodies, c, api, None, 60.0, None, False, "ceiling"), client_cpu)
                wall = time.perf_counter() - t0
                p0 = time.process_time()
                t1 = time.perf_counter()
                res = [_finish(r, api, tokenizer, None) for r in raws]
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
                    "ttft_p50_s": _pct([r.ttft_s for r in ok], 50),
                    "ttft_p99_s": _pct([r.ttft_s for r in ok], 99),
                    "ttft_server_p50_s": _pct([r.ttft_server_s for r in ok], 50),
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
# plots (read the stored tables)
# ---------------------------------------------------------------------------------------
def plot_pareto(summary, ax=None):
    """Throughput (tok/s, all users) vs per-user decode tok/s, one line per config; labels are C."""
    import matplotlib.pyplot as plt

    df = summary[summary["phase"] == "sweep"] if "phase" in summary else summary
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for label, g in df.groupby("label"):
        g = g.sort_values("concurrency")
        ax.plot(g["per_user_tok_s"], g["throughput_tok_s"], marker="o", label=label)
        for _, r in g.iterrows():
            if r["per_user_tok_s"] is not None and r["throughput_tok_s"] is not None:
                ax.annotate(f"C={int(r['concurrency'])}", (r["per_user_tok_s"], r["throughput_tok_s"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("per-user decode tok/s")
    ax.set_ylabel("throughput, output tok/s")
    ax.set_title("throughput vs per-user speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_latency(summary, metric: str = "ttft_s", ax=None):
    """p50/p90/p99 of ``metric`` (``ttft_s``, ``ttft_server_s``, ``tpot_s``, ``e2e_s``, ``itl_ms``) vs concurrency."""
    import matplotlib.pyplot as plt

    df = summary[summary["phase"] == "sweep"] if "phase" in summary else summary
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for label, g in df.groupby("label"):
        g = g.sort_values("concurrency")
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            col = f"{metric}_p{q}"
            if col in g:
                ax.plot(g["concurrency"], g[col], style, marker="o", label=f"{label} p{q}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} percentiles")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


# ---------------------------------------------------------------------------------------
# CLI: servebook bench --url URL --model NAME ...
# ---------------------------------------------------------------------------------------
def _engine_from_server(url: str) -> str:
    import httpx

    try:
        data = httpx.get(url.rstrip("/") + "/v1/models", timeout=5).json().get("data", [])
    except Exception:  # noqa: BLE001
        return ""
    owner = (data[0].get("owned_by") or "").lower() if data else ""
    for name in ("vllm", "sglang"):
        if name in owner:
            return name
    return "transformers" if owner == "local" else ""


_CLI_HELP = "single-stream and concurrency benchmark of any OpenAI-compatible server (chapter 05)"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="model name the server expects (default: the first of /v1/models)")
    p.add_argument("--tokenizer", default="", help="local tokenizer directory (default: --model when it is a directory)")
    p.add_argument("--engine", default="", help="transformers | sglang | vllm (default: guessed from /v1/models)")
    p.add_argument("--api", default="completions", choices=["completions", "chat"])
    p.add_argument("--concurrency", default="1", help="comma-separated levels, e.g. 1,2,4,8")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--requests-per-level", type=int, default=5)
    p.add_argument("--out", default="", help="run directory (default: a new run under runs/)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``servebook`` command (servebook.cli calls this for each plugin module)."""
    p = subparsers.add_parser("bench", help=_CLI_HELP, description=_CLI_HELP)
    _add_arguments(p)
    p.set_defaults(func=_run_cli)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``servebook bench``: benchmark any OpenAI-compatible server."""
    p = argparse.ArgumentParser(prog="servebook bench", description=_CLI_HELP)
    _add_arguments(p)
    return _run_cli(p.parse_args(argv))


def _check_url(url: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and url.isprintable()
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise ParameterError("url", url, "an http:// or https:// URL of the server, e.g. http://127.0.0.1:8000")


def _run_cli(a: argparse.Namespace) -> int:
    from .errors import ServebookError
    from .results import RunStore

    try:
        try:
            levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
        except ValueError:
            levels = []
        if not levels or min(levels) < 1:
            raise ParameterError("concurrency", a.concurrency, "comma-separated positive integers, e.g. 1,2,4")
        for name, least in (("input_len", 1), ("output_len", 1), ("runs", 1), ("warmup", 0), ("requests_per_level", 1)):
            if getattr(a, name) < least:
                raise ParameterError(name, getattr(a, name), f"an integer of {least} or more")
        _check_url(a.url)
        models = check_server(a.url)
        model = a.model or (models[0] if models else "")
        if not model:
            raise ParameterError("model", a.model, "the server lists no model; pass --model")
        tok_path = a.tokenizer or (model if Path(model).is_dir() else "")
        if not tok_path:
            raise ParameterError("tokenizer", a.tokenizer, "a local tokenizer directory (prompts are built from it; nothing is downloaded)")
        tok = load_tokenizer(tok_path)
        engine = a.engine or _engine_from_server(a.url)
        store = RunStore.at(a.out) if a.out else RunStore.open()
        prompts = build_prompts(tok, a.input_len, max(8, a.runs + a.warmup), seed=0)
        out = []
        if 1 in levels:
            out.append(single_stream(a.url, model, prompts, store=store, tokenizer=tok, engine=engine, api=a.api,
                                     max_tokens=a.output_len, runs=a.runs, warmup=a.warmup, progress=not a.json))
        others = [c for c in levels if c != 1]
        if others:
            out.extend(concurrency_sweep(a.url, model, prompts, store=store, tokenizer=tok, engine=engine, api=a.api,
                                         max_tokens=a.output_len, levels=others, requests_per_level=a.requests_per_level,
                                         progress=not a.json))
    except ServebookError as exc:
        print(f"servebook bench: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        for s in out:
            if s["phase"] == "single":
                print(f"C=1  decode {s['decode_tok_s_mean']:.1f} ± {s['decode_tok_s_ci95'] or 0:.1f} tok/s (95% CI, {s['runs']} runs)  "
                      f"TTFT {s['ttft_s_mean'] * 1e3:.1f} ms  TPOT {s['tpot_s_mean'] * 1e3:.2f} ms  failed {s['failed']}")
            else:
                print(f"C={s['concurrency']:<4} throughput {s['throughput_tok_s'] or 0:.1f} tok/s  per-user {s['per_user_tok_s'] or 0:.1f} tok/s  "
                      f"TTFT p50/p99 {s['ttft_s_p50'] or 0:.3f}/{s['ttft_s_p99'] or 0:.3f} s  failed {s['failed']}")
        print(f"results: {store.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
