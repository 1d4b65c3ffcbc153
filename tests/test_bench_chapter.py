"""servebook.bench.chapter on a recorded live run: the sweep as it ran, its stop, the answers stated once and tagged."""

import re

from servebook.bench import chapter as ch05
from servebook.bench import report as ch05_report
from servebook.paths import book_root
from servebook.results import RunStore
from servebook.quantities import expected
from servebook.stated import stated_on

RUN1 = book_root() / "data" / "runs" / "h200x1-live"


def test_sweep_parameters_are_the_recorded_ones_not_the_defaults():
    rows = {r["label"].split("/")[0]: r for r in ch05.sweep_parameters(RunStore(RUN1))}
    assert rows["sglang"]["levels"] == "1, 2, 4, 8, 16" and rows["sglang"]["requests_per_level_x_C"] == "3"
    assert rows["sglang"]["stopped_by"] == "max concurrency"
    assert rows["vllm"]["levels"] == "1, 2, 4" and rows["vllm"]["stopped_by"] == "first-token waits"


def test_every_tag_of_found_and_check_yourself_recomputes(tmp_path):
    import shutil

    shutil.copytree(RUN1, tmp_path / "run")
    store = RunStore(tmp_path / "run")  # the seed roofline may add its rows, as the chapter does
    m = ch05.measured(store)
    import pandas as pd

    from servebook import bench

    ceiling_all, ceiling_df = ch05.ceiling_tables(store)
    cc = pd.DataFrame(store.rows("bench_ceiling_check"))
    verdict = bench.ceiling_verdict(store.rows("client_ceiling"))
    seed = ch05.seed_roofline(store, seed_model="kimi-k2.5", seed_profile="rtx-pro-6000", seed_tp=8)
    assert seed["rows"] and seed["roof"] is not None
    text = "\n".join(ch05.found(store, m, runs=5, warmup=10, verdict=verdict, ceiling_tok_s=float(ceiling_df["stream_tok_s"].max()),
                                ceiling_check_df=cc, seed=seed))
    qa = ch05.check_yourself(m, verdict=verdict, ceiling_check_df=cc, seed=seed, seed_tp=8)
    text += "\n".join(a for _, a in qa)
    tags = stated_on(text)
    assert len(tags) > 40
    for s in tags:
        assert expected(store, s.name, s.of) == s.value or abs(expected(store, s.name, s.of) - s.value) < 1e-9, (s.name, s.of)
    plain = re.sub(r"<[^>]+>", "", text)
    # the transport question is answered at the level the verdict is taken, once: no "(as here)" beside "does not"
    assert "(as here)" not in plain and "the hand-written transport is justified here" in plain
    assert "it stopped on first-token waits" in plain and "not a saturation point" in plain
    assert {"seed_crossover_us", "seed_comm_roofline_tok_s", "breakdown_share", "client_check_rel_diff"} <= {t.name for t in tags}


def test_a_changed_number_no_longer_recomputes():
    store = RunStore(RUN1)
    (s,) = [x for x in stated_on("\n".join(ch05.say_sweep_stops(store))) if x.name == "sweep_levels" and x.of.startswith("vllm")]
    assert expected(store, "sweep_levels", s.of) == s.value
    assert expected(store, "sweep_levels", s.of) != "1, 2, 4, 8"


def test_graph_vs_eager_plot_only_where_both_modes_ran(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    assert ch05.plot_graph_vs_eager(RunStore(RUN1)) is not None  # SGLang's default measured eagerly too
    empty = RunStore(tmp_path)
    assert ch05.plot_graph_vs_eager(empty) is None


def test_throughput_plot_labels_do_not_overlap():
    import matplotlib

    matplotlib.use("Agg")
    axes = ch05.plot_sweep(ch05.measured(RunStore(RUN1))["sweep_ok"])
    axes[0].figure.canvas.draw()
    boxes = [t.get_window_extent() for t in axes[0].texts if t.get_text().startswith("C=")]
    assert len(boxes) == 8  # SGLang's five levels, vLLM's three
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_excerpts_never_cut_a_word():
    from servebook.bench.chapter import excerpt, whole_block
    from servebook.bench.measure import _tail

    assert excerpt("alpha beta gamma delta", 12) == "alpha beta [...]"
    assert excerpt("short", 12) == "short"
    assert _tail("Traceback\n  return future.result()\nValueError: boom", 45) == "  return future.result()\nValueError: boom"
    assert whole_block("t", []) == [] and "boom" in "\n".join(whole_block("t", ["ValueError: boom"]))


def test_the_whatif_page_states_the_recorded_roofline_once_tagged():
    """The what-if page's "What we found" and questions, from the recorded what-if run's `roofline` rows."""
    store = RunStore(book_root() / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9")
    roof = store.table("roofline")
    roof = roof[roof["chapter"] == "05"]
    facts = {"model": "kimi-k2.5", "profile": "rtx-pro-6000", "gpus": 8}
    lines = ch05.whatif_found(roof, facts)
    (tag,) = [t for t in stated_on("\n".join(lines)) if t.name == "card_roofline_tok_s"]
    assert tag.of == "kimi-k2.5 on 8x rtx-pro-6000" and expected(store, tag.name, tag.of) == tag.value
    assert any("seed case's host" in x for x in lines)  # this profile is the seed's
    qa = ch05.whatif_check_yourself(roof, facts)
    # chapter 04's floor: each engine's latency by the rule chapter 06 uses (issue #40), so the limits are the engines'
    assert len(qa) == 2 and "147 to 184 tok/s" in re.sub(r"<[^>]+>", "", qa[1][1])
    for t in stated_on("\n".join(lines + [a for _, a in qa])):
        assert expected(store, t.name, t.of) == t.value, (t.name, t.of)


RUN_TRUST = book_root() / "data" / "runs" / "h200x1-trust"


def _plain(lines) -> str:
    return re.sub(r"<[^>]+>", "", "\n".join(lines))


def test_a_fall_gone_once_warmed_is_a_fact_only_on_one_server_start(tmp_path):
    """h200x1-live measured its sweeps before and after warming each level on different server starts (and machines):
    the C=8 fall gone 9.1x is a hypothesis there, naming the measurement that settles it; the same pair on one recorded
    server start is stated as a first-use cost."""
    import json
    import shutil

    from servebook.bench.runs import remeasured

    text = _plain(ch05_report._remeasured_lines(remeasured(RunStore(RUN1).rows("bench_summary")), RunStore(RUN1)))
    assert "it was a first-use cost" not in text
    assert "a 9.1x change. Hypothesis: a first-use cost at that concurrency" in text
    assert "the two sweeps ran on different server starts" in text and "warmed on one server start" in text
    shutil.copytree(RUN1, tmp_path / "run")
    store = RunStore(tmp_path / "run")
    pairs = remeasured(store.rows("bench_summary"))
    (c8,) = [p for p in pairs if p["label"].startswith("sglang") and p["concurrency"] == 8]
    from datetime import datetime

    t0, t1 = (datetime.fromisoformat(c8[k]).timestamp() for k in ("before_at", "after_at"))
    (tmp_path / "run" / "servers.jsonl").write_text("\n".join(json.dumps(e) for e in (
        {"event": "started", "pid": 7, "engine": "sglang", "time": t0 - 60}, {"event": "stopped", "pid": 7, "engine": "sglang", "time": t1 + 60})) + "\n")
    same = _plain(ch05_report._remeasured_lines(pairs, store))
    assert "a 9.1x change on the same server start: it was a first-use cost at that concurrency" in same


def test_a_stall_on_a_warmed_level_counts_against_first_use():
    """h200x1-trust: vLLM's C=4 was warmed first (`level_warmup`) and still fell 891 -> 264 tok/s: the page says the
    warm-up counts against the first-use hypothesis, not that a warm-up would settle it."""
    from servebook.bench.runs import sweep_stalls

    m = ch05.measured(RunStore(RUN_TRUST))
    (st,) = [s for s in sweep_stalls(m["summary_rows"], m["request_rows"]) if s["stalled"]]
    text = ch05_report._stall_reading(st, m["summary_rows"])
    assert "stalled all the same: that counts against a first-use cost" in text and "which the sweep now does" not in text
    unwarmed = [{k: v for k, v in r.items() if k != "level_warmup"} for r in m["summary_rows"]]
    assert "which the sweep now does before every level" in ch05_report._stall_reading(st, unwarmed)


def test_a_single_stream_far_from_its_sweeps_c1_is_flagged_beside_both():
    """h200x1-live: vLLM's single stream 556.0 ± 24.5 tok/s and its sweep's C=1 level 361 tok/s (requests 369-375 per
    user), one server start a second apart, same 128/128 tokens: 'What we found' flags the gap where it states both, with
    what differs and a hypothesis naming the measurement that settles it; h200x1-trust's agree and are not flagged."""
    from servebook.bench.figures import single_vs_c1

    v = {x["label"].split("/")[0]: x for x in single_vs_c1(RunStore(RUN1))}["vllm"]
    assert v["apart"] and v["same_start"] and v["same_tokens"] and round(v["gap_pct"]) == -33
    assert v["c1_tpot_ms"] > 1.4 * v["single_tpot_ms"] and v["warmup_min"] <= v["c1_max"]  # a warm-up request was as slow
    assert not any(x["apart"] for x in single_vs_c1(RunStore(RUN_TRUST)))
    store = RunStore(RUN1)
    m = ch05.measured(store)
    lines = [re.sub(r"<[^>]+>", "", x) for x in ch05.found(store, m, runs=5, warmup=10, verdict={"compared": False, "reason_tagged": "x"},
                                                           ceiling_tok_s=1.0, ceiling_check_df=m["summary"].iloc[0:0], seed={"rows": []})]
    i = next(k for k, x in enumerate(lines) if x.startswith("- **vllm/default --max-num-seqs 16: its single stream and its sweep's C=1"))
    assert "361.0 tok/s at C=1" in lines[i - 1] and "556.0 ± 24.5" in "".join(lines[i - 4:i])  # right under the figures it weighs
    assert "-33%, outside the single stream's interval" in lines[i] and "1.81 ms against 2.68 ms" in lines[i]
    assert "Hypothesis: the server's decode speed changed" in lines[i] and "alternated several times on one server start" in lines[i]


def test_the_roofline_note_gives_both_bandwidths_and_the_reference_gap():
    """h200x1-live's roofline was computed at the H200's datasheet 4.8 TB/s while its table memory_bandwidth measured
    3.97 TB/s (4 GiB tensors; the reference 4.34 at 8 GiB): the note gives each rate against both and flags the gap;
    h200x1-trust measured no bandwidth and says why the datasheet stands alone."""
    from pathlib import Path

    store = RunStore(RUN1)
    note = ch05.host_roofline(store, Path("slice"), ch05.measured(store)["single_cfg"], measure=False, w=ch05.Workload())["note"]
    plain = re.sub(r"<[^>]+>", "", note)
    assert "**4,800.0 GB/s**" in plain and "**3,973.8 GB/s**" in plain
    assert "556.0 tok/s is 50.3% of the datasheet roofline (1,105 tok/s) and 60.8% of the measured one (915 tok/s)" in plain
    assert "4 GiB" in plain and "8 GiB tensors" in plain and "8.4% below it. Hypothesis:" in plain
    for t in stated_on(note):
        assert expected(store, t.name, t.of) == t.value, (t.name, t.of)
    trust = RunStore(RUN_TRUST)
    note = ch05.host_roofline(trust, Path("slice"), ch05.measured(trust)["single_cfg"], measure=False, w=ch05.Workload())["note"]
    assert "read bandwidth was not measured in this run" in note


def test_a_run_that_served_no_local_model_says_why_it_has_no_roofline():
    """h200x1-ref is a run of profiles (its model a card): the roofline cell says there is none and why, instead of an
    empty output under "the cell below says which one this run used"."""
    store = RunStore(book_root() / "data" / "runs" / "h200x1-ref")
    roof = ch05.host_roofline(store, None, ch05.measured(store)["single_cfg"], measure=False, w=ch05.Workload())
    assert roof["rows"] == [] and roof["note"].startswith("No roofline of this host: this run served no local model")


def test_each_full_model_prediction_states_its_method_gpus_and_why_the_two_differ():
    """h200x1-live predicts the whole bf16 Kimi-K2.5 twice (bytes rule 39.8 tok/s, slope rule 48): each states its method
    and that it assumes one GPU (TP=1, no all-reduce), the page says why the two differ, and that the weights need at
    least 14 H200s (2 TB)."""
    store = RunStore(RUN1)
    lines = ch05.say_prediction_tok_s(store)
    plain = [re.sub(r"<[^>]+>", "", x) for x in lines]
    assert all("on one GPU with TP=1 and no all-reduce" in x for x in plain if "predicted " in x and "predicted twice" not in x)
    (two,) = [x for x in plain if x.startswith("- kimi-k2.5 (bf16) is predicted twice")]
    assert "charged again with every layer" in two and "counts the fixed part once" in two
    assert "its weights, 1,912 GiB, need at least 14 GPUs of 141 GiB" in two  # one unit in one comparison (issue #41 item 11)
    for t in stated_on("\n".join(lines)):
        assert expected(store, t.name, t.of) == t.value, (t.name, t.of)
    from pathlib import Path

    roof = ch05.host_roofline(store, Path("slice"), ch05.measured(store)["single_cfg"], measure=False, w=ch05.Workload())
    x = ch05.extrapolation(store, RUN1 / "models" / "kimi-slice-dummy", roof["rows"], measure=False, sources=roof["sources"],
                           stands=roof["stands"])
    assert set(x["tp_assumed"]) == {1} and set(x["all_reduce"]) == {"none"}
    assert dict(zip(x["full_model"], x["gpus_to_hold_weights"])) == {"full model, bf16 like the slice": 14,
                                                                     "full model, the card's quantization": 4}


def test_the_seed_breakdowns_remainder_is_not_named_as_the_projections_and_its_share_has_chapter_06s_format():
    """h200x1-ref's chapter 05 split the seed's 15.72 ms into two floors and an 'unexplained 8.93 ms', while the what-if
    chapter 06 calls 2.90 ms (the seed's time less the projection) the remainder: two values of one name. The split's
    part is named for what it is and points to chapter 06; the seed's all-reduce share reads as chapter 06 gives it
    (profile.verdict: one decimal, 51.5%, not 52%)."""
    import re

    from servebook.bench.limits import say_breakdown
    from servebook.paths import data_dir
    from servebook.results import RunStore
    from servebook.stated import seed_case

    said = [re.sub(r"<[^>]+>", "", x) for x in say_breakdown(RunStore(data_dir() / "runs" / "h200x1-ref"))]
    seed = [x for x in said if "reported by the seed" in x]
    assert len(seed) == 2 and all("unexplained" not in x and "time beyond the two floors" in x
                                  and "not the projection's remainder" in x and "chapter 06 of the what-if book" in x
                                  for x in seed)
    share = seed_case()["allreduce_share_of_sglang_decode"]
    sg = next(x for x in seed if "sglang" in x)
    assert f"puts at {share:.1%} of SGLang's decode time" in sg
