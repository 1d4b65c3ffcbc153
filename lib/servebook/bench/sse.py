"""From a finished stream's bytes to one request's measurements: SSE events, their text, tokens, and timings.

Runs after the batch, off the hot path. An event is timestamped by the network read that completed it. Per request:

* ``slot_wait_s``: time from the request's arrival to getting a concurrency slot;
* ``ttft_s``: arrival to the first event carrying text (slot wait included: what a user sees),
  ``ttft_server_s = ttft_s - slot_wait_s``;
* ``e2e_s``: arrival to the end of the stream (the last read: [DONE], a usage event, the close);
* the decode interval, from the read that carried the first token to the last read that carried tokens (``DECODE_TIMED_TO``):
  ``tpot_s = interval / (output_tokens - 1)``, ``decode_tok_s = (output_tokens - 1) / interval``; the wait after the last
  token until the stream's end (``tail_s``: a server that sends [DONE] or its usage event later) is in ``e2e_s``, not in
  the decode. Rows recorded before carry no ``decode_timed_to``: they timed the decode to the stream's end
  (``EARLIER_RULE``, :func:`timed_to`);
* per-token inter-token latency (``itl_ms``): each inter-chunk gap divided evenly over the tokens
  that chunk carried, kept apart from the raw inter-chunk gaps (``chunk_gaps_ms``);
* ``output_tokens``: the server's ``usage.completion_tokens`` when it sends one, else the
  model tokenizer's count of the streamed text; tokens per chunk from the tokenizer, scaled to the server's count
  when it sent one (one per chunk when it streamed as many chunks as tokens).

A served request without a decode rate says why (``untimed``): its tokens came in one read, it has one token, or its
rate is not the server's (:func:`implausible`): one read gap after the first token's at a rate no decode reaches, or
above the hardware ceiling given (``ceiling_tok_s``). Its decode rate, TPOT and ITL stay empty, so they never enter a mean.
Within one measurement (a batch, a single stream's runs) a rate timed from one read gap is also untimed when it is more
than ``ONE_GAP_SET_RATIO`` times the median of the rates there timed from two or more gaps (:func:`against_set`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field

from .stats import percentile
from .transport import RawStream

__all__ = ["RequestResult", "finish", "split_events", "untimed_of", "implausible", "against_set", "MIN_READ_GAPS",
           "ONE_GAP_MAX_TOK_S", "ONE_GAP_SET_RATIO",
           "DECODE_TIMED_TO", "EARLIER_RULE", "timed_to", "timed_to_words"]

# Which read ends a request's decode interval: the last that carried tokens. Until session 17 it was the stream's end, so
# a server writing [DONE] (or a usage-only event) well after its last token had that wait timed as decoding. A row says
# which rule timed it (``decode_timed_to``); a row without the field is of the earlier rule.
DECODE_TIMED_TO = "last token"
EARLIER_RULE = "stream end"


def timed_to(row: dict) -> str:
    """The rule that timed a row's decode rate (a request row, a ``bench_summary`` row): ``DECODE_TIMED_TO``, or
    ``EARLIER_RULE`` for a row recorded before rows said which."""
    return row.get("decode_timed_to") or EARLIER_RULE


def timed_to_words(row: dict) -> str:
    """:func:`timed_to` in the book's words: "the last token" or "the stream's end"."""
    return "the last token" if timed_to(row) == DECODE_TIMED_TO else "the stream's end"


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
    chunk_count_source: str = "the tokenizer's"  # tokens per chunk, over which each chunk gap is spread for the ITL
    finish_reason: str | None = None
    n_chunks: int = 0
    n_reads: int = 0
    slot_wait_s: float | None = None
    ttft_s: float | None = None
    ttft_server_s: float | None = None
    e2e_s: float | None = None
    tail_s: float | None = None  # the last token's read -> the stream's end: in e2e_s, not in the decode
    tpot_s: float | None = None
    decode_tok_s: float | None = None
    decode_timed_to: str = DECODE_TIMED_TO
    untimed: str | None = None  # why a served request has no decode rate (one read, one token, or implausible: see finish)
    read_gaps: int | None = None  # reads that carried tokens after the first token's read: the gaps its decode is timed over
    itl_ms: list[float] = field(default_factory=list)
    chunk_gaps_ms: list[float] = field(default_factory=list)
    text: str = ""

    def row(self, keep_text: bool = False) -> dict:
        d = asdict(self)
        d["itl_ms"] = [round(x, 4) for x in self.itl_ms]
        d["chunk_gaps_ms"] = [round(x, 4) for x in self.chunk_gaps_ms]
        d["itl_p50_ms"] = percentile(self.itl_ms, 50)
        d["itl_p99_ms"] = percentile(self.itl_ms, 99)
        d["chunk_gap_p50_ms"] = percentile(self.chunk_gaps_ms, 50)
        d["tokens_per_chunk"] = (self.output_tokens / self.n_chunks) if self.n_chunks else None
        if not keep_text:
            d.pop("text")
        return d



def split_events(raw: RawStream) -> list[tuple[float, bytes]]:
    """SSE events, each with the timestamp of the read that completed it (linear in the body size)."""
    pieces = raw.body_pieces()
    data = b"".join(p for _, p in pieces)
    if not data:
        return []
    ends, total = [], 0
    for _, p in pieces:
        total += len(p)
        ends.append(total)  # body offset where each piece ends
    sep = b"\r\n\r\n" if b"\r\n\r\n" in data else b"\n\n"  # some servers frame events with CRLF
    events = []
    piece_i, pos, k = 0, 0, len(sep)
    for ev in data.split(sep):
        end = pos + len(ev) + k if pos + len(ev) < len(data) else len(data)
        pos += len(ev) + k
        if not ev.strip():
            continue
        while piece_i + 1 < len(ends) and ends[piece_i] <= end - 1:  # the piece holding the event's last byte
            piece_i += 1
        events.append((raw.stamps[pieces[piece_i][0]], ev))
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



def _parse_events(raw: RawStream, api: str) -> dict:
    """The stream's SSE events read: text chunks with their times, usage, finish reason, errors, [DONE]."""
    out = {"texts": [], "times": [], "done": False, "usage": None, "errors": [], "finish_reason": None}
    stamps, payloads = [], []
    for t, ev in split_events(raw):
        for line in ev.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out["done"] = True
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
            out["errors"].append(f"unexpected event {str(obj)[:80]!r}")
            continue
        if obj.get("error"):
            err = obj["error"]
            out["errors"].append(err.get("message", str(err)) if isinstance(err, dict) else str(err))
            continue
        if obj.get("usage"):
            out["usage"] = obj["usage"]
        choices = obj.get("choices") or []
        if choices and choices[0].get("finish_reason"):
            out["finish_reason"] = choices[0]["finish_reason"]
        text = _text_of(obj, api)
        if text:
            out["texts"].append(text)
            out["times"].append(t)
    return out


def _count_output(r: RequestResult, texts: list[str], usage: dict | None, tokenizer) -> list[int]:
    """Set the request's token counts (usage first, then the tokenizer, then chunks); tokens per chunk."""
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
        r.chunk_count_source = "one per chunk, assumed (no tokenizer)"
    elif r.output_tokens_usage is not None and texts and sum(counts) != r.output_tokens_usage:
        # the server's count is the truth; text does not always re-tokenize into the tokens that made it (random weights
        # emit fragments: h200x1-live, 1,217 re-counted for 128 generated), which would split each gap over too many tokens
        counts = _scaled(counts, int(r.output_tokens_usage), len(texts))
        r.chunk_count_source = "one per chunk (the server's count)" if r.output_tokens_usage == len(texts) else \
            "the tokenizer's, scaled to the server's count"
    return counts


def _scaled(counts: list[int], total: int, n: int) -> list[int]:
    """Per-chunk token counts summing to the server's ``total``: one per chunk when it streamed one chunk per token,
    else the tokenizer's counts scaled (largest remainders)."""
    if total == n:
        return [1] * n
    weights = counts if sum(counts) else [1] * n
    raw = [w * total / sum(weights) for w in weights]
    out = [int(x) for x in raw]
    for i in sorted(range(n), key=lambda i: raw[i] - out[i], reverse=True)[:total - sum(out)]:
        out[i] += 1
    return out


def _timings(r: RequestResult, raw: RawStream, times: list[float], counts: list[int]) -> None:
    """TTFT, end-to-end, the wait after the last token (``tail_s``), per-token ITL (each chunk gap spread over its
    tokens), and TPOT and decode rate over the first token's read -> the last token's (``times``: the text chunks' reads)."""
    r.ttft_s = times[0] - raw.t_arrive
    r.ttft_server_s = times[0] - raw.t_slot
    r.e2e_s = raw.t_end - raw.t_arrive
    r.tail_s = max(0.0, raw.t_end - times[-1])
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
    decode_s = times[-1] - times[0]  # a later read holding only [DONE] or usage is the stream's end (tail_s), not decode
    if r.output_tokens > 1 and decode_s > 0:
        r.tpot_s = decode_s / (r.output_tokens - 1)
        r.decode_tok_s = (r.output_tokens - 1) / decode_s
    elif r.output_tokens > 1:  # e.g. transformers serve writes what its generation thread queued since its last write at once
        r.untimed = (f"all {r.output_tokens} tokens arrived in one network read: no time between the first token and the "
                     "last to time a decode rate by")
    else:
        r.untimed = f"{r.output_tokens} output token(s): a decode rate needs two or more"


# A decode rate is timed from the first token's read to the last read that carried tokens. With one read of tokens after
# the first token's, that is one gap between two reads, and one server write that the kernel hands over in two reads gives the same
# picture as two writes a decode apart (session 15 saw 177,655 tok/s so). Measured here with the fake server writing
# each answer at once (1,600 requests of 8 to 2,048 tokens at C=1 and 8): 186 had a read after the first token's, 185
# of them one gap timed above 10,000 tok/s, and one 8-token answer 9,321 tok/s. A real stream can give one gap too:
# transformers serve writes what its generation thread queued since its last write at once, and a 16-token answer of
# the embedded model once came in the first token's read and one more, at 183 tok/s. So a one-gap rate stands below
# ONE_GAP_MAX_TOK_S, 12 times the fastest decode recorded in data/runs (813 tok/s, SGLang on the H200), and is untimed
# above it. A split of an answer of a few tokens can stay under it; the hardware ceiling, where known, bounds every rate.
MIN_READ_GAPS = 2
ONE_GAP_MAX_TOK_S = 10_000.0


def _read_gaps(r: RequestResult, raw: RawStream, times: list[float] | None) -> int:
    """Reads after the one that carried the first token (of the text chunks' reads ``times``, else of every read)."""
    first = raw.t_arrive + r.ttft_s  # the first token's read stamp, up to rounding (well under a microsecond)
    return sum(1 for t in (sorted(set(times)) if times is not None else raw.stamps) if t > first + 1e-7)


# A one-gap rate under ONE_GAP_MAX_TOK_S can still be the client's and not the server's: under CPU load the client reads
# the first token late and the rest in one read soon after, which shortens the one gap (session 21 saw 3,472 and 4,490
# tok/s for 16-token answers of the embedded model, whose answers timed from many gaps in the same tests ran near 200).
# Where the same measurement also timed rates from two or more gaps, those say what this server decodes at: a one-gap rate
# more than ONE_GAP_SET_RATIO times their median is untimed. Rates of one server at one concurrency and one request
# length stay well within that factor of each other (runs of a single stream differ by tens of percent).
ONE_GAP_SET_RATIO = 3.0


def against_set(results: list[RequestResult]) -> list[RequestResult]:
    """Untime, in place, each rate of ``results`` (one measurement) timed from fewer than ``MIN_READ_GAPS`` read gaps that
    is more than ``ONE_GAP_SET_RATIO`` times the median of those timed from more; no such median, no change. Returns
    ``results``."""
    steady = sorted(r.decode_tok_s for r in results if r.decode_tok_s and (r.read_gaps or 0) >= MIN_READ_GAPS)
    if not steady:
        return results
    median = statistics.median(steady)
    for r in results:
        if r.decode_tok_s and r.read_gaps is not None and r.read_gaps < MIN_READ_GAPS \
                and r.decode_tok_s > ONE_GAP_SET_RATIO * median:
            r.untimed = (f"{r.output_tokens - 1} tokens after the first came in one read, timed at {r.decode_tok_s:,.0f} "
                         f"tok/s: more than {ONE_GAP_SET_RATIO:g} times the {median:,.0f} tok/s this measurement timed "
                         f"from two or more read gaps ({len(steady)} request(s)); a late read of the first token "
                         "shortens one gap")
            r.decode_tok_s, r.tpot_s, r.itl_ms = None, None, []
    return results


def implausible(r: RequestResult, raw: RawStream, ceiling_tok_s: float | None = None,
                times: list[float] | None = None) -> str | None:
    """Why the decode rate the client timed for ``r`` is not the server's, or None: fewer than ``MIN_READ_GAPS`` reads
    after the read that carried the first token at a rate above ``ONE_GAP_MAX_TOK_S``, or a rate above ``ceiling_tok_s``
    (the hardware's ceiling for one stream where one is known: chapter 05's bandwidth roofline). ``times``: the read
    stamps of the text chunks (only reads that carried tokens count as gaps; a read of [DONE] or usage alone does not);
    without them every read of the stream counts."""
    if r.decode_tok_s is None or r.ttft_s is None:
        return None
    gaps = r.read_gaps if r.read_gaps is not None else _read_gaps(r, raw, times)   # finish counted them already
    if gaps < MIN_READ_GAPS and r.decode_tok_s > ONE_GAP_MAX_TOK_S:
        apart_us = 1e6 * (r.output_tokens - 1) / r.decode_tok_s  # the first token's read -> the last token's
        return (f"{r.output_tokens - 1} tokens after the first came in one read {apart_us:,.0f} us after it "
                f"({r.decode_tok_s:,.0f} tok/s): one server write split into two reads gives this, and no decode recorded "
                f"here comes near it (a rate from one read gap stands below {ONE_GAP_MAX_TOK_S:,.0f} tok/s)")
    if ceiling_tok_s and r.decode_tok_s > ceiling_tok_s:
        return (f"decode rate {r.decode_tok_s:,.0f} tok/s above the hardware ceiling of {ceiling_tok_s:,.0f} tok/s for one "
                "stream (chapter 05's roofline): not the server's")
    return None


def untimed_of(ok: list[RequestResult]) -> dict:
    """Served requests without a decode rate: how many (``untimed``) and why, the first reason (``untimed_reason``)."""
    why = [r.untimed for r in ok if r.untimed]
    return {"untimed": len(why), "untimed_reason": why[0] if why else None}


def _http_error(raw: RawStream) -> str | None:
    """Why the response is not a stream to measure (an HTTP error, or no SSE), or None."""
    if raw.status is not None and raw.status != 200:
        detail = raw.body().decode("utf-8", "replace").strip()
        try:
            j = json.loads(detail)
            detail = j.get("detail") or j.get("message") or (j.get("error") or {}).get("message") or detail
        except (json.JSONDecodeError, AttributeError):
            pass
        return f"HTTP {raw.status}: {str(detail)[:500]}"
    if "text/event-stream" not in raw.content_type:
        return (f"the server answered without streaming (content-type {raw.content_type or 'none'}); "
                "it ignored stream=true: use a server/endpoint that streams SSE")
    return None


def finish(raw: RawStream, api: str, tokenizer, expect_tokens: int | None, ceiling_tok_s: float | None = None) -> RequestResult:
    """Parse one finished stream into a RequestResult (runs after the batch, off the hot path); ``ceiling_tok_s``: the
    hardware's ceiling for one stream where one is known (a rate above it is untimed, :func:`implausible`)."""
    r = RequestResult(index=raw.index, status=raw.status, n_reads=len(raw.reads))
    r.slot_wait_s = raw.t_slot - raw.t_arrive
    if raw.error and not raw.reads:
        r.error = raw.error
        return r
    r.error = _http_error(raw)
    if r.error:
        return r
    ev = _parse_events(raw, api)
    texts, times = ev["texts"], ev["times"]
    r.finish_reason = ev["finish_reason"]
    r.text = "".join(texts)
    r.n_chunks = len(texts)
    counts = _count_output(r, texts, ev["usage"], tokenizer)
    if times:
        _timings(r, raw, times, counts)
        r.read_gaps = _read_gaps(r, raw, times)
        why = implausible(r, raw, ceiling_tok_s, times)
        if why:
            r.untimed, r.decode_tok_s, r.tpot_s, r.itl_ms = why, None, None, []
    if ev["errors"]:
        r.error = "; ".join(ev["errors"])[:500]
    elif raw.error:
        r.error = raw.error
    elif not ev["done"] and r.finish_reason is None:
        r.error = f"the stream closed early: no [DONE] and no finish_reason after {r.n_chunks} text chunks"
    elif not texts:
        r.error = "the stream carried no text"
    r.ok = r.error is None
    if r.ok and expect_tokens is not None and r.output_tokens != expect_tokens:
        r.finish_reason = (r.finish_reason or "") + f" (asked for {expect_tokens}, got {r.output_tokens})"
    return r
