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
    (``done_delay_s``): each request's decode rate is its own chunk cadence, within 1% (the code before timed the wait too:
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
        cadences.append(1e3 / statistics.mean(r["chunk_gaps_ms"]))  # the token cadence the client saw (a busy host slows it)
        assert r["decode_tok_s"] == pytest.approx(cadences[-1], rel=0.01)
        assert 0.3 <= r["tail_s"] < 0.3 + 0.01 + 0.2  # [DONE] after the write's own 10 ms and the 300 ms
        assert r["e2e_s"] - r["ttft_s"] >= 31 * 0.01 + 0.3 and r["decode_timed_to"] == "last token"
        assert 31 / r["decode_tok_s"] < r["e2e_s"] - r["ttft_s"] - 0.29  # the 300 ms is in e2e, not in the decode interval
    assert s["decode_timed_to"] == "last token" and s["tail_s_mean"] == pytest.approx(statistics.mean(r["tail_s"] for r in reqs))
    assert s["decode_tok_s_mean"] == pytest.approx(statistics.mean(cadences), rel=0.01)
    assert "(last token - first token)" in s["method"]


def _recorded(tmp_path, label: str, tails_ms: list[float], rule: bool, name: str = "run"):
    """A run whose single stream of ``label`` served requests with 31 gaps of 10 ms and then ``tails_ms`` to the
    stream's end, as the rule of the last token records them (``rule``) or as the earlier one did (no tail_s, no
    decode_timed_to, the rate timed to the stream's end)."""
    from servebook.results import RunStore

    store = RunStore.at(tmp_path / name)
    for i, tail in enumerate(tails_ms):
        decode_s, tail_s = 0.31, tail / 1e3
        q = {"label": label, "phase": "single", "concurrency": 1, "max_tokens": 32, "run": i, "ok": True, "output_tokens": 32,
             "ttft_s": 0.05, "e2e_s": 0.05 + decode_s + tail_s, "chunk_gaps_ms": [10.0] * 31}
        q.update({"decode_tok_s": 31 / decode_s, "tail_s": tail_s, "decode_timed_to": "last token"} if rule else
                 {"decode_tok_s": 31 / (decode_s + tail_s)})
        store.append("bench_requests", q)
    store.append("bench_summary", {"label": label, "phase": "single", "concurrency": 1, "max_tokens": 32, "runs": len(tails_ms),
                                   "decode_tok_s_mean": 100.0, **({"decode_timed_to": "last token"} if rule else {})})
    return store


def test_the_page_names_the_rule_and_the_wait_after_the_last_token(tmp_path):
    """Chapter 05 says which rule timed the rates; a recorded run of the earlier rule keeps its rows and the page reads
    the wait it timed from its chunk gaps; every figure tagged and recomputed from the tables."""
    import re

    from servebook.bench.decode_rule import say_decode_rule
    from servebook.quantities import expected
    from servebook.stated import stated_on

    for rule, head in ((True, "Each request's decode is timed from"), (False, "This run's decode rates are timed to the stream's end")):
        store = _recorded(tmp_path, "a", [300.0, 310.0, 290.0], rule, name=f"run{rule}")
        text = say_decode_rule(store)
        plain = re.sub(r"<[^>]+>", "", text)
        assert plain.startswith(head) and "the wait after the last token was 300 ms" in plain and "+97%" in plain, plain
        assert ("read again from its requests' chunk gaps" in plain) != rule
        tags = stated_on(text)
        assert {t.name for t in tags} == {"decode_tail_ms", "decode_tail_rate_pct"}
        assert all(abs(expected(store, t.name, t.of) - t.value) < 1e-9 for t in tags)
        assert store.rows("bench_requests")[0].get("tail_s") == (0.3 if rule else None)  # the recorded rows are as they were


def test_rows_of_both_rules_side_by_side_each_name_their_rule(tmp_path):
    from servebook.bench.decode_rule import say_decode_rule

    store = _recorded(tmp_path, "old", [1.0], rule=False)
    for r in _recorded(tmp_path, "new", [1.0], rule=True, name="other").rows("bench_requests"):
        store.append("bench_requests", r)
    store.append("bench_summary", {"label": "new", "phase": "single", "concurrency": 1, "max_tokens": 32, "runs": 1,
                                   "decode_tok_s_mean": 100.0, "decode_timed_to": "last token"})
    text = say_decode_rule(store)
    assert text.startswith("Rows of two rules stand side by side here")
    assert "- old: timed to the stream's end: recorded before" in text and "- new: timed to the last token; " in text
    assert "- x: no timed request to read the wait after its last token from." in say_decode_rule(
        _recorded(tmp_path, "x", [], rule=True, name="empty"))


def test_chapter_03_and_05_timed_by_two_rules_are_two_methods(tmp_path):
    """Chapter 03's default measured before the rule (its row names none) beside chapter 05's timed to the last token:
    the comparison names the rule as a difference of method; both of one rule, it names none."""
    from servebook.findings import default_methods
    from servebook.results import RunStore

    def store_with(rule_03):
        store = RunStore.at(tmp_path / f"run{rule_03}")
        store.append("backends", {"engine": "sglang", "attention": "auto", "outcome": "ok", "decode_tok_s": 100.0, "decode_tok_s_ci95": 1.0,
                                  "bench_max_tokens": 32, "bench_input_len": 32, "bench_runs": 3, "bench_warmup": 1,
                                  **({"bench_decode_timed_to": rule_03} if rule_03 else {})})
        store.append("bench_summary", {"label": "sglang/default", "engine": "sglang", "attention": "default", "phase": "single",
                                       "concurrency": 1, "max_tokens": 32, "input_tokens": 32, "runs": 3, "warmup": 1,
                                       "decode_tok_s_mean": 101.0, "decode_tok_s_ci95": 1.0, "decode_timed_to": "last token"})
        (m,) = default_methods(store)
        return m
    before = store_with(None)
    assert {"what": "decode timed to", "ch03": "stream end", "ch05": "last token"} in before["differences"]
    assert not any(d["what"] == "decode timed to" for d in store_with("last token")["differences"])


def test_a_measurement_taken_again_by_the_other_rule_names_the_rule_of_each_take():
    from servebook.bench.runs import remeasured

    base = {"label": "a", "phase": "single", "concurrency": 1, "max_tokens": 32, "warmup": 1, "runs": 3}
    (pair,) = remeasured([{**base, "decode_tok_s_mean": 99.0, "recorded_at": "1"},
                          {**base, "decode_tok_s_mean": 100.0, "recorded_at": "2", "decode_timed_to": "last token"}])
    assert pair["before_method"] == "1 warm-up request(s), 3 runs, decode timed to the stream's end"
    assert pair["after_method"] == "1 warm-up request(s), 3 runs, decode timed to the last token"
    (same,) = remeasured([{**base, "recorded_at": "1"}, {**base, "recorded_at": "2"}])
    assert same["before_method"] == same["after_method"] == "1 warm-up request(s), 3 runs"


def test_starts_of_two_rules_in_one_execution_are_never_pooled_and_each_is_stated(tmp_path):
    """A partial run of the earlier rule resumed (rows from before ``execution``: one execution): start 0 timed to the
    stream's end, starts 1 and 2 to the last token. The configuration's interval pools starts 1 and 2 only (the rule is
    part of the method, ``runs._single_method``); start 0 stands apart, stated on the page with its own figure, and its
    requests are not read with the standing ones."""
    import re

    from servebook.bench.decode_rule import say_decode_rule
    from servebook.bench.runs import current, over_starts, set_apart
    from servebook.quantities import expected
    from servebook.results import RunStore
    from servebook.stated import stated_on

    store = RunStore.at(tmp_path / "run")
    base = {"label": "a", "phase": "single", "concurrency": 1, "max_tokens": 32, "warmup": 2, "runs": 5, "input_tokens": 32}
    for start, rate, rule in ((0, 90.0, {}), (1, 100.0, {"decode_timed_to": "last token"}), (2, 102.0, {"decode_timed_to": "last token"})):
        store.append("bench_requests", {**base, "start": start, "run": 0, "ok": True, "decode_tok_s": rate, **rule})
        store.append("bench_summary", {**base, "start": start, "decode_tok_s_mean": rate, "decode_tok_s_ci95": 1.0, **rule})
    summary, requests = current(store.rows("bench_summary"), store.rows("bench_requests"))
    assert [r["start"] for r in summary] == [1, 2] and [q["start"] for q in requests] == [1, 2]
    pooled = over_starts(summary)
    assert pooled["starts"] == 2 and pooled["mean"] == 101.0
    (apart,) = set_apart(store.rows("bench_summary"))
    assert (apart["label"], apart["starts"], apart["mean"], apart["decode_timed_to"]) == ("a", 1, 90.0, "stream end")
    text = say_decode_rule(store)
    plain = re.sub(r"<[^>]+>", "", text)
    assert "- a: 1 start(s) measured another way (2 warm-up request(s), 5 runs, decode timed to the stream's end) are set " \
           "apart, not pooled into its interval: 90.0 ± 1.0 tok/s (one start: interval within a start only)." in plain, plain
    tags = [t for t in stated_on(text) if t.name.startswith("set_apart")]
    assert len(tags) == 2 and all(abs(expected(store, t.name, t.of) - t.value) < 1e-9 for t in tags)


def test_a_one_gap_rate_far_above_the_measurements_steady_rates_is_untimed():
    """Session 21's case: under CPU load a 16-token answer of the embedded model came in the first token's read and one
    more 4.3 ms later (3,472 tok/s), under the one-gap bound, while the answers timed from many gaps ran near 200 tok/s."""
    from servebook.bench.sse import ONE_GAP_SET_RATIO, against_set

    steady = [bench._finish(_stream([1] * 16, [0.05 + i / 200 for i in range(16)], 16), "completions", None, None)
              for _ in range(3)]
    assert all(r.read_gaps == 15 and r.decode_tok_s == pytest.approx(200.0) for r in steady)
    late = bench._finish(_stream([1, 15], [0.05, 0.05 + 15 / 3472], 16), "completions", None, None)
    slow_split = bench._finish(_stream([1, 15], [0.05, 0.05 + 15 / 183], 16), "completions", None, None)
    assert late.read_gaps == 1 and late.untimed is None  # alone, nothing says it is not the server's
    out = against_set(steady + [late, slow_split])
    assert out[3] is late and late.decode_tok_s is None and late.tpot_s is None
    assert "3,472 tok/s" in late.untimed and f"more than {ONE_GAP_SET_RATIO:g} times the 200 tok/s" in late.untimed
    assert slow_split.decode_tok_s == pytest.approx(183.0) and slow_split.untimed is None  # a one-gap rate near the rest stands
    assert summarize_level(out)["per_user_tok_s"] == pytest.approx(statistics.mean([200.0] * 3 + [183.0]))
    edge = bench._finish(_stream([1, 15], [0.05, 0.05 + 15 / (0.99 * ONE_GAP_SET_RATIO * 200)], 16), "completions", None, None)
    assert against_set(steady + [edge])[3].untimed is None  # just under the factor: kept
    alone = bench._finish(_stream([1, 15], [0.05, 0.05 + 15 / 3472], 16), "completions", None, None)
    assert against_set([alone])[0].decode_tok_s == pytest.approx(3472.0)  # no steady rate to judge it by: unchanged


def test_a_single_streams_runs_are_judged_together_and_stored_once(tmp_path, monkeypatch):
    """One request per run: the late one-gap run is untimed against the other runs, in the stored rows and the mean."""
    from servebook.bench import runs as runs_mod
    from servebook.bench.prompts import Prompt
    from servebook.results import RunStore

    rates = iter([200.0, 3472.0, 190.0, 210.0])

    def fake_requests(url, model, batch, **kw):
        rate = next(rates)
        parts = [1, 15] if rate > 1000 else [1] * 16
        stamps = [0.05, 0.05 + 15 / rate] if rate > 1000 else [0.05 + i / rate for i in range(16)]
        return [bench._finish(_stream(parts, stamps, 16), "completions", None, None)]

    monkeypatch.setattr(runs_mod, "run_requests", fake_requests)
    store = RunStore.at(tmp_path / "run")
    prompts = [Prompt(text="a b c", tokens=3)]
    s = runs_mod.single_stream("http://x", "m", prompts, store=store, engine="fake", attention="default", label="fake/default",
                               runs=4, warmup=0, progress=False)
    assert s["decode_tok_s_runs"][1] is None and s["untimed"] == 1
    assert s["decode_tok_s_mean"] == pytest.approx(statistics.mean([200.0, 190.0, 210.0]))
    rows = store.table("bench_requests")
    assert len(rows) == 4 and rows["decode_tok_s"].isna().sum() == 1 and "3,472 tok/s" in rows["untimed"].dropna().iloc[0]


def test_a_single_streams_runs_are_judged_once_over_all_runs_not_run_by_run(tmp_path, monkeypatch):
    """Two requests per run through the real ``run_requests`` (only the transport replaced): run 0's one-gap 700 tok/s
    is more than 3 times its own run's steady 200 tok/s but not 3 times the 250 tok/s median of all runs' steady rates.
    Judged together it stands; judged first within its run (as before), it was untimed."""
    from servebook.bench import client
    from servebook.bench import runs as runs_mod
    from servebook.bench.prompts import Prompt
    from servebook.results import RunStore

    def raw(rate):
        if rate == 700.0:
            return _stream([1, 15], [0.05, 0.05 + 15 / rate], 16)
        return _stream([1] * 16, [0.05 + i / rate for i in range(16)], 16)

    calls = iter([[200.0, 700.0], [250.0, 250.0], [260.0, 250.0], [200.0, 700.0]])

    async def fake_batch(url, bodies, *a, **kw):
        return [raw(r) for r in next(calls)][:len(bodies)]

    monkeypatch.setattr(client, "run_batch", fake_batch)
    store = RunStore.at(tmp_path / "run")
    prompts = [Prompt(text="a b c", tokens=3)]
    s = runs_mod.single_stream("http://x", "m", prompts, store=store, engine="fake", attention="default", label="fake/default",
                               runs=3, warmup=0, requests_per_run=2, progress=False)
    assert s["untimed"] == 0, s
    assert s["decode_tok_s_runs"][0] == pytest.approx(450.0)
    rows = store.table("bench_requests")
    assert len(rows) == 6 and rows["decode_tok_s"].notna().all()
    alone = client.run_requests("http://x", "m", prompts * 2, max_tokens=16, engine="fake")  # run 0 judged by itself
    assert alone[1].decode_tok_s is None and "more than 3 times the 200 tok/s" in alone[1].untimed
