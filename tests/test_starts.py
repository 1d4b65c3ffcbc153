"""Intervals over server starts (issue #28): chapters 03 and 05 measure each configuration over ``starts`` server starts
and say "faster"/"slower" only where the 95% intervals over the per-start means separate; chapters 03 and 05 say
whether they measured the default the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servebook import bench
from servebook import findings as sbf
from servebook.results import RunStore

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def _row(att: str, per_start: list[float], within: float = 3.0, rep: str | None = None) -> dict:
    """A chapter 03 row as ``backends.restarts._restarts`` writes it: each start's rate, the mean and interval over starts."""
    ci = bench.mean_ci(per_start)
    return {"engine": "sglang", "engine_version": "0.5.16", "attention": att, "mode": "graph", "outcome": "ok", "reported": rep or att,
            "agreement": 1.0, "decode_tok_s": ci["mean"], "decode_tok_s_ci95": ci["half_width"] if len(per_start) > 1 else within,
            "decode_tok_s_ci95_within": within,
            "starts": [{"start": k, "decode_tok_s": x, "decode_tok_s_ci95": within} for k, x in enumerate(per_start)]}


def test_separate_within_a_start_but_not_over_starts_is_no_difference(tmp_path):
    """803 ± 3 against 700 ± 3 in the first start do not overlap (no verdict: one start); over two starts (803, 688
    against 700, 600) they overlap."""
    within = sbf.separated(803.0, 3.0, 700.0, 3.0, starts=(1, 1))
    assert within.startswith("one start: interval within a start only") and "do not overlap" in within and "separate" not in within
    store = RunStore.at(tmp_path / "run")
    store.append("backends", _row("auto", [803.0, 688.0], rep="triton"))
    store.append("backends", _row("flashinfer", [700.0, 600.0]))
    (b,) = sbf.backends(store)
    assert b["best"] == "auto (triton)" and b["default_starts"] == 2
    (o,) = b["others"]
    assert o["starts"] == 2 and o["verdict"].startswith("no difference beyond the restart spread")
    assert "over 2 server starts" in o["verdict"] and b["change_supported"] is False
    # the same rates with a small spread between starts: the intervals over starts separate, and the verdict says so
    tight = RunStore.at(tmp_path / "tight")
    tight.append("backends", _row("auto", [700.0, 702.0], rep="triton"))
    tight.append("backends", _row("flashinfer", [800.0, 803.0]))
    (b,) = sbf.backends(tight)
    assert b["change_supported"] is True and b["verdict"].startswith("faster by") and "over 2 server starts separate" in b["verdict"]
    claim = next(c for c in sbf.collect(tight).claims if c.chapter == "03")
    assert "over 2 server starts" in re.sub(r"<[^>]+>", "", claim.text) and claim.supported  # as the page shows it (tagged spans)


def test_chapter_05_interval_over_starts_and_a_later_start_is_not_a_remeasurement():
    rows = [{"label": "x/default", "phase": "single", "concurrency": 1, "max_tokens": 32, "decode_tok_s_mean": v, "decode_tok_s_ci95": 1.0,
             "runs": 5, "start": k, "recorded_at": f"2026-01-01T00:00:0{k}"} for k, v in enumerate((100.0, 80.0))]
    standing, _ = bench.current(rows)
    assert len(standing) == 2 and not bench.remeasured(rows)  # start 1 is another start, not start 0 taken again
    o = bench.over_starts(standing)
    ci = bench.mean_ci([100.0, 80.0])
    assert o["starts"] == 2 and o["mean"] == pytest.approx(90.0) and o["ci95"] == pytest.approx(ci["half_width"])
    assert o["over"] == "2 server starts" and [p["start"] for p in o["per_start"]] == [0, 1]
    one = bench.over_starts([{k: v for k, v in rows[0].items() if k != "start"}])  # recorded before starts were counted
    assert one["starts"] == 1 and one["ci95"] == 1.0 and one["over"] == sbf.ONE_START


@pytest.mark.parametrize("run", ["h200x1-live", "h200x2-live"])
def test_old_recorded_runs_compute_their_findings_over_one_start(run):
    store = RunStore(RUNS / run)
    f = sbf.collect(store)
    assert f.backends and f.throughput and f.claims
    for b in f.backends:
        assert b["default_starts"] == 1 and b["change_supported"] is False
        assert all(o["verdict"].startswith(sbf.ONE_START) for o in b["others"])
    for t in f.throughput:
        assert t["starts"] == 1 and t["single_over"] == sbf.ONE_START
    text = "\n".join(sbf.stated.say_throughput(t) for t in f.throughput) if hasattr(sbf, "stated") else ""
    from servebook.stated import say_backends, say_throughput

    assert all("one start: interval within a start only" in " ".join(say_throughput(t)) for t in f.throughput), text
    assert all("within one server start" in say_backends(b) for b in f.backends if b.get("default_tok_s") is not None)
    # chapter 03's default (random-weight slice, 32 in / 64 out) and chapter 05's (dummy slice, 128 / 128): not one method
    (m, *_) = sbf.default_methods(store)
    what = {d["what"]: (d["ch03"], d["ch05"]) for d in m["differences"]}
    assert not m["same_method"] and what["output tokens"] == (64, 128) and what["prompt tokens"] == (32, 128)
    assert what["model directory"] == ("/tmp/models/kimi-slice", "/tmp/models/kimi-slice-dummy")
    said = re.sub(r"<span [^>]*>|</span>", "", sbf.say_default_methods([m]))  # as shown: the tags' text
    assert f"chapter 03 {m['ch03']['tok_s']:,.1f} ± {m['ch03']['ci95']:,.1f}" in said and "The methods differ" in said


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_transformers_serve_over_two_starts(embedded_model, tmp_path, no_leftover_servers):
    """The real engine, small: chapter 03's sweep and chapter 05's single stream each over 2 server starts give one rate
    per start and the interval over starts; chapters 03 and 05 then say how their methods differ.

    32 output tokens, not 8: transformers serve sends what its generation thread queued since its last write in one write,
    and a request of 8 tokens on the tiny model sometimes arrived in one read (CI, 2026-12-04), where a decode rate cannot
    be timed from the client (``decode_tok_s`` None, ``n_reads`` 1): a whole start without a rate."""
    from servebook.backends import force_each_backend
    from servebook.engines import get_engine
    from servebook.servers import Server

    eng = get_engine("transformers")
    store = RunStore.at(tmp_path / "run")
    (row,) = force_each_backend(eng, embedded_model, [None], store, max_tokens=16, runs=2, ready_timeout=240, progress=None,
                                preflight=False, starts=2)
    assert row["outcome"] == "ok", (row.get("outcome"), row.get("error"))
    assert [s["start"] for s in row["starts"]] == [0, 1] and all(s["decode_tok_s"] > 0 for s in row["starts"])
    ci = bench.mean_ci([s["decode_tok_s"] for s in row["starts"]])
    assert row["decode_tok_s"] == pytest.approx(ci["mean"]) and row["decode_tok_s_ci95"] == pytest.approx(ci["half_width"])
    assert row["ci_over"] == "2 server starts" and row["bench_max_tokens"] == 32 and row["bench_model"] == str(embedded_model)
    assert (tmp_path / "run" / "logs" / "transformers-auto-start1.log").exists()

    tok = bench.load_tokenizer(embedded_model)
    prompts = bench.build_prompts(tok, input_len=16, n=4, seed=0)
    for k in range(2):  # chapter 05's way: stop, start again, the single stream measured after each start
        launch = eng.launch(str(embedded_model))
        with Server.start(launch, log_path=tmp_path / f"server-{k}.log", registry=tmp_path / "servers.jsonl", progress=None,
                          ready_timeout=240) as srv:
            s = bench.single_stream(srv.base_url, str(embedded_model), prompts, store=store, tokenizer=tok, engine="transformers",
                                    max_tokens=32, runs=2, warmup=1, progress=False, start=k)
            bench.record_start(store, s, model=str(embedded_model), launch=launch.shell(), ready_s=srv.ready_s)
    assert [r["start"] for r in store.rows("bench_starts")] == [0, 1]
    assert all(r["start"] == k for k in (0, 1) for r in store.find("bench_requests", start=k))
    (t,) = sbf.throughput(store)
    rates = [r["decode_tok_s"] for r in store.rows("bench_starts")]
    assert t["starts"] == 2 and t["start_tok_s"] == rates and t["single_over"] == "2 server starts"
    assert t["single_ci95"] == pytest.approx(bench.mean_ci(rates)["half_width"])
    (m,) = sbf.default_methods(store)
    what = {d["what"] for d in m["differences"]}
    assert what == {"prompt tokens", "prompts"}  # the same model, output length, warm-up and runs: only the prompts differ
    assert m["ch03"]["starts"] == m["ch05"]["starts"] == 2


# --- chapter 03's page (servebook.backends.figures and .report)


def test_each_backend_is_listed_once_and_the_default_that_ran_is_not_under_not_run(tmp_path):
    """h200x1-live: FLASHINFER_MLA has a row (rejected on the second machine) and a corrected not-run row (the first
    machine's harness fault); fa3 is what `auto` loaded. Neither is "not run here"; the earlier record is told beside the
    row, and chapter 06's box (findings.backends) lists the same."""
    import shutil

    from servebook.backends.figures import default_ran_as, earlier_attempts, not_run

    shutil.copytree(RUNS / "h200x1-live", tmp_path / "run")
    store = RunStore(tmp_path / "run")
    vllm = {x["attention"] for x in not_run(store, "vllm")}
    sglang = {x["attention"] for x in not_run(store, "sglang")}
    assert "FLASHINFER_MLA" not in vllm and "CUTLASS_MLA" not in vllm and "FLASH_ATTN" in vllm
    assert "fa3" not in sglang and "triton" in sglang and default_ran_as(store, "sglang") == ["fa3"]
    assert earlier_attempts(store, "vllm")["FLASHINFER_MLA"].startswith("not started: servebook's preflight")
    box = {b["engine"]: {x["attention"] for x in b["not_run"]} for b in sbf.backends(store)}
    assert box == {"vllm": vllm, "sglang": sglang}


def test_chapter_03_states_the_start_counts_chapter_06_gives(tmp_path):
    """The counts chapter 03 states are findings.backends' tried/correct (chapter 06's table), tagged; every tag on the
    page's sentences is what the registry recomputes from the same run."""
    import shutil

    from servebook.backends.report import UNTAGGED, found_lines, questions, starts_table
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    shutil.copytree(RUNS / "h200x1-live", tmp_path / "run")
    store = RunStore(tmp_path / "run")
    table = starts_table(store, ["sglang", "vllm"])
    text = found_lines(store, ["sglang", "vllm"], table) + "".join(a for _, a in questions(store, ["sglang", "vllm"], table))
    counts = {b["engine"]: (b["tried"], b["correct"]) for b in sbf.backends(store)}
    assert counts == {"sglang": (2, 1), "vllm": (7, 4)}
    for s in stated_on(text):
        assert pick(QUANTITIES[s.name], QUANTITIES[s.name].compute(store), s.of) == s.value, s
    tags = {(s.name, s.of): s.value for s in stated_on(text)}
    assert tags[("backend_starts", "vllm | tried")] == 7 and tags[("backend_starts", "vllm | correct")] == 4
    assert tags[("backend_tok_s", "vllm | TRITON_MLA | graph")] == pytest.approx(429.476, abs=1e-3)
    assert "Not run here" in text and "vllm FLASHINFER_MLA (not started" not in text
    assert all(isinstance(v, str) and v for v in UNTAGGED.values())


def test_the_what_if_names_the_pick_of_the_engine_it_plans():
    """What-if 03 for SGLang 0.5.9: chapter 02's prediction is SGLang's `triton`, never vLLM's TRITON_MLA (recorded
    after it in the same table)."""
    from servebook.backends.report import _prediction_for

    store = RunStore(RUNS / "whatif-rtx-pro-6000-sglang-0.5.9")
    assert store.rows("selection")[-1]["engine"] == "vllm"
    r = _prediction_for(store, {"engine": "sglang==0.5.9"})
    assert (r["engine"], r["version"], r["attention_backend"]) == ("sglang", "0.5.9", "triton")


def test_flag_notes_name_the_value_used():
    from servebook.backends.report import flags_note

    note = flags_note("python -m sglang.launch_server --cuda-graph-max-bs 16 --sampling-backend pytorch".split())
    assert "`--cuda-graph-max-bs 16`" in note and "`--sampling-backend pytorch`" in note
    assert flags_note(["--port", "1"]) == ""


def test_chapter_03_measured_again_pools_further_starts_of_the_same_method(tmp_path):
    """``servebook book --again`` (issue 42): the new execution's starts of a configuration are numbered after the earlier
    execution's and pooled with them where the method is the same; with another method the latest stands alone. The
    pages list one row per configuration (``RunStore.rows``: the latest execution's)."""
    from types import SimpleNamespace

    from servebook.backends.restarts import _rate_over_starts

    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"execution": {"id": 1, "again": False}})
    first = {**_row("auto", [800.0, 700.0]), "bench_method": "1 warm-up, 3 runs", "bench_model": "/m"}
    store.append("backends", first)
    store.write_manifest({"execution": {"id": 2, "again": True}})
    ctx = SimpleNamespace(store=store, served_from="/m")
    for method, pooled in (("1 warm-up, 3 runs", True), ("2 warm-ups, 5 runs", False)):
        row = {k: v for k, v in first.items() if k not in ("starts", "execution", "recorded_at")}
        row.update(decode_tok_s=600.0, decode_tok_s_ci95=4.0, bench_method=method)
        _rate_over_starts(ctx, row, [{"start": 1, "decode_tok_s": 500.0, "decode_tok_s_ci95": 4.0}])
        rates = [e["decode_tok_s"] for e in row["starts"]]
        if pooled:
            assert rates == [800.0, 700.0, 600.0, 500.0] and [e["start"] for e in row["starts"]] == [0, 1, 2, 3]
            assert [e["execution"] for e in row["starts"]] == [1, 1, 2, 2] and row["ci_over"] == "4 server starts"
            assert row["decode_tok_s"] == pytest.approx(650.0)
        else:
            assert rates == [600.0, 500.0] and row["ci_over"] == "2 server starts"
    store.append("backends", row)
    (standing,) = store.rows("backends")  # one row of the configuration: the latest execution's
    assert standing["execution"] == 2 and len(store.rows("backends", executions="all")) == 2


def test_a_backend_is_in_one_list_with_the_reason_its_record_gives(tmp_path):
    """h200x1-trust: vLLM's CUTLASS_MLA and FLASHINFER_MLA were in the run's backends list and refused by vLLM's own
    validation; a later resumption left them out of its list and wrote "not in this run's backends list". fa3 ran as
    SGLang's default. Each backend stands in one list only: started (a row), loaded by the default, refused, accepted and
    never started, or not run; the page had put CUTLASS_MLA under both "refused" and "not in this run's backends list",
    and fa3 under "accepted, but no start was recorded"."""
    import shutil

    import pandas as pd

    from servebook.backends.figures import asked_not_started, default_ran_as, not_run
    from servebook.backends.report import found_lines

    shutil.copytree(RUNS / "h200x1-trust", tmp_path / "run")
    store = RunStore(tmp_path / "run")
    for engine in ("sglang", "vllm"):
        started = {r["attention"] for r in store.rows("backends") if r.get("engine") == engine}
        asked = {a["attention"] for a in asked_not_started(store, engine)}
        lists = [started, set(default_ran_as(store, engine)), asked, {x["attention"] for x in not_run(store, engine)}]
        for i, a in enumerate(lists):
            for b in lists[i + 1:]:
                assert not a & b, (engine, a & b)
    refused = {a["attention"] for a in asked_not_started(store, "vllm") if not a["ok"]}
    assert refused == {"CUTLASS_MLA", "FLASHINFER_MLA"}
    table = pd.DataFrame(store.rows("backends"))
    text = found_lines(store, ["sglang", "vllm"], table)
    accepted = next(line for line in text.splitlines() if line.startswith("- Accepted"))
    assert "sglang fa3" not in accepted and "vllm CUTLASS_MLA (" not in next(
        line for line in text.splitlines() if line.startswith("- Not run here"))
    box = {b["engine"]: {x["attention"] for x in b["refused"]} for b in sbf.backends(store)}
    assert box["vllm"] == refused
