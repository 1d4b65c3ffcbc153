"""Chapter 05: a decode rate the client cannot have timed from the server is untimed, with its reason, and never enters
a mean. Hand-built streams (the bytes and read times a transport would keep), parsed by the real code."""

from __future__ import annotations

import statistics

import pytest

from servebook import bench
from servebook.bench.runs import summarize_level
from servebook.bench.sse import ONE_GAP_MAX_TOK_S

EVENT = b'data: {"choices":[{"text":" a"}]}\n\n'
DONE = b'data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'


def _stream(parts: list[int], stamps: list[float], tokens: int) -> "bench._Raw":
    """``parts``: text events per read (the last read also carries usage and [DONE]), read at ``stamps`` (s)."""
    reads = [EVENT * n for n in parts]
    reads[-1] += DONE % tokens
    return bench._Raw(index=0, t_arrive=0.0, t_slot=0.0, t_end=stamps[-1], status=200, content_type="text/event-stream",
                      stamps=list(stamps), reads=reads)


def test_one_write_split_in_two_reads_is_untimed_and_stays_out_of_the_mean():
    """The fake server's case: 64 tokens written at once, handed over in two reads 40 us apart (1.6M tok/s). The old
    code timed it."""
    split = bench._finish(_stream([20, 44], [0.010, 0.010040], 64), "completions", None, None)
    assert split.ok and split.decode_tok_s is None and split.tpot_s is None and split.itl_ms == []
    assert "63 tokens after the first came in one read 40 us after it" in split.untimed and "split into two reads" in split.untimed
    steady = bench._finish(_stream([1] * 64, [0.010 + 0.01 * i for i in range(64)], 64), "completions", None, None)
    assert steady.untimed is None and steady.decode_tok_s == pytest.approx(100.0)
    lvl = summarize_level([split, steady])
    assert lvl["untimed"] == 1 and "split into two reads" in lvl["untimed_reason"]
    assert lvl["per_user_tok_s"] == pytest.approx(100.0)  # the split request is in no mean
    assert lvl["itl_ms_p99"] == pytest.approx(10.0)


def test_coalesced_writes_over_a_real_decode_keep_their_rate():
    """transformers serve writes what its generation thread queued since its last write: few reads, many tokens each,
    down to one read after the first token's (the embedded model's 16 tokens at 183 tok/s, test_bench on this branch)."""
    r = bench._finish(_stream([1, 10, 10, 11], [0.05, 0.15, 0.25, 0.35], 32), "completions", None, None)
    assert r.untimed is None and r.decode_tok_s == pytest.approx(31 / 0.3)
    one_gap = bench._finish(_stream([1, 15], [0.05, 0.05 + 15 / 183], 16), "completions", None, None)
    assert one_gap.untimed is None and one_gap.decode_tok_s == pytest.approx(183.0)
    edge = 15 / (ONE_GAP_MAX_TOK_S * 1.01)  # the same one gap, timed just above the one-gap bound
    assert "split into two reads" in bench._finish(_stream([1, 15], [0.05, 0.05 + edge], 16), "completions", None, None).untimed


def test_a_rate_above_the_hardware_ceiling_is_untimed_where_one_is_known():
    raw = _stream([1] * 32, [0.010 + 0.001 * i for i in range(32)], 32)  # 1,000 tok/s
    assert bench._finish(raw, "completions", None, None).decode_tok_s == pytest.approx(1000.0)
    assert bench._finish(raw, "completions", None, None, ceiling_tok_s=2000.0).decode_tok_s == pytest.approx(1000.0)
    r = bench._finish(raw, "completions", None, None, ceiling_tok_s=500.0)
    assert r.ok and r.decode_tok_s is None and "above the hardware ceiling of 500 tok/s" in r.untimed


def test_the_recorded_roofline_is_the_ceiling_measuring_passes(tmp_path):
    from servebook.bench.measure import _recorded_ceiling
    from servebook.results import RunStore

    store = RunStore.at(tmp_path / "run")
    assert _recorded_ceiling(store, "vllm/default") is None
    store.append("bench_roofline", {"case": "vllm/default on NVIDIA H200", "roofline_tok_s": 1104.8, "source": "measured here"})
    store.append("bench_roofline", {"case": "vllm/default on rtx-pro-6000", "roofline_tok_s": 50.0, "source": "reported by the seed"})
    assert _recorded_ceiling(store, "vllm/default") == pytest.approx(1104.8) and _recorded_ceiling(store, "sglang/default") is None


def test_a_read_of_done_alone_is_no_decode_and_no_read_gap():
    """Every token in the first read, then a read holding only usage and [DONE]: the time between them is the stream's
    end, not a decode (untimed); and a split write followed by a [DONE]-only read is still one read gap of tokens."""
    def with_done_read(parts, stamps, tokens):
        raw = _stream(parts + [0], stamps, tokens)
        return bench._finish(raw, "completions", None, None)

    one = with_done_read([16], [0.05, 0.06], 16)
    assert one.ok and one.decode_tok_s is None and "all 16 tokens arrived in one network read" in one.untimed
    split = with_done_read([1, 15], [0.05, 0.05 + 15 / 20_000, 0.05 + 15 / 19_000], 16)   # [DONE] read right after
    assert split.decode_tok_s is None and "split into two reads" in split.untimed


def test_a_done_read_long_after_the_last_token_is_the_tail_not_decode():
    """Two reads of tokens 15/183 s apart, then usage and [DONE] 300 ms later: the decode is timed to the last token's
    read (183 tok/s; the code before timed it to the [DONE] read, 40 tok/s), and the 300 ms is the tail, inside e2e."""
    raw = _stream([1, 15, 0], [0.05, 0.05 + 15 / 183, 0.05 + 15 / 183 + 0.3], 16)
    r = bench._finish(raw, "completions", None, None)
    assert r.untimed is None and r.decode_tok_s == pytest.approx(183.0) and r.tpot_s == pytest.approx(1 / 183)
    assert r.tail_s == pytest.approx(0.3) and r.e2e_s == pytest.approx(0.05 + 15 / 183 + 0.3)
    assert r.row()["decode_timed_to"] == bench.sse.DECODE_TIMED_TO == "last token"


def test_a_server_that_ends_its_stream_late_is_timed_at_its_token_cadence(tmp_path):
    """The real fake SSE server, one token every 10 ms, sends its finishing event and [DONE] 300 ms after its last token
    (``done_delay_s``): each request's decode rate is within 5% of its own chunk cadence (the code before timed the wait,
    about half the cadence here), the wait shows as ``tail_s`` and in e2e, and the summary row says which rule timed it."""
    from servebook.results import RunStore

    store = RunStore.at(tmp_path / "run")
    prompts = [bench.Prompt(text=f"p{i}", tokens=2) for i in range(3)]
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=0.01, done_delay_s=0.3) as fake:
        s = bench.single_stream(fake.url, "fake-sse", prompts, store=store, runs=2, warmup=0, max_tokens=32, progress=False)
    reqs = [r for r in store.rows("bench_requests") if r["phase"] == "single"]
    assert len(reqs) == 2 and all(r["ok"] and r["output_tokens"] == 32 for r in reqs)
    cadences = []
    for r in reqs:
        cadences.append(1e3 / statistics.median(r["chunk_gaps_ms"]))
        assert r["decode_tok_s"] == pytest.approx(cadences[-1], rel=0.05)
        assert 0.3 <= r["tail_s"] < 0.3 + 0.01 + 0.1  # [DONE] after the write's own 10 ms and the 300 ms
        assert r["e2e_s"] >= r["ttft_s"] + 31 * 0.01 + 0.3 and r["decode_timed_to"] == "last token"
    assert s["decode_timed_to"] == "last token" and s["tail_s_mean"] == pytest.approx(statistics.mean(r["tail_s"] for r in reqs))
    assert s["decode_tok_s_mean"] == pytest.approx(statistics.mean(cadences), rel=0.05)
    assert "(last token - first token)" in s["method"]
