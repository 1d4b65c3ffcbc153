"""The recorded live run (data/runs/h200x2-live: SGLang 0.5.16 on an H200, a full-width Kimi-K2.5 slice), checked
without a GPU: what the engine reported against what its own validation resolved, and the rendered book against
the tables it was made from."""

import json
import re
from pathlib import Path

import pytest

from servebook.render import render_book
from servebook.findings import collect
from servebook.results import RunStore

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200x2-live"


@pytest.fixture(scope="module")
def store():
    return RunStore.at(RUN)


def test_the_engine_ran_what_its_own_validation_resolved(store):
    gpus = store.rows("gpus")
    assert {g["name"] for g in gpus} == {"NVIDIA H200"} and {g["capability"] for g in gpus} == {"9.0"}
    rows = [r for r in store.rows("backends") if r["engine"] == "sglang"]
    assert {r["engine_version"] for r in rows} == {"0.5.16"}
    auto = [r for r in rows if r["attention"] == "auto"]
    pre = {r["attention"]: r for r in store.rows("backends_preflight")}
    # two independent sources: the live server's /server_info, and prepare_server_args in its own process
    assert {r["reported"] for r in auto} == {pre["auto"]["resolved"]["attention_backend"]}
    for r in rows:
        if r["outcome"] == "ok" and r["attention"] != "auto":
            assert r["reported"] == r["attention"], r  # forced and really loaded
            assert r["tf_top1_agreement"] >= 0.9 and r["port_free_after"]
    # refused by SGLang's own code, with its own words, and never started
    assert all("only supported on" in pre[b]["error"] for b in ("trtllm_mla", "cutedsl_mla", "tokenspeed_mla"))
    (cm,) = [r for r in rows if r["attention"] == "cutlass_mla"]
    assert cm["error"].startswith("RuntimeError: cutlass_mla_decode is only supported on compute capability 10.0")


def test_the_rendered_book_states_the_tables(store, tmp_path):
    out = tmp_path / "book"
    render_book(RUN, out)
    page = re.sub(r"<[^>]+>", "", (out / "06_findings.html").read_text())
    f = collect(store)
    (b,) = f.backends
    assert f"{b['default_tok_s']:.1f} ± {b['default_ci95']:.1f}" in page
    for o in b["others"]:  # each forced backend against the default, the verdict computed from the intervals
        assert f"{o['tok_s']:.1f} ± {o['ci95']:.1f}" in page and o["verdict"].split(" (")[0] in page
    (t,) = f.throughput
    assert f"{t['single_tok_s']:.1f} ± {t['single_ci95']:.1f}" in page and "vllm" not in json.dumps(f.throughput)
    # each page opens with its answer, the same computed statements
    first = (out / "03_force_each_backend.html").read_text()
    box = first[first.index("This run, in short"):first.index("</ul>", first.index("This run, in short"))]
    assert f"{b['default_tok_s']:.1f} ± {b['default_ci95']:.1f}" in box and "cutlass_mla" in box
    assert "Launch for sglang" in (out / "06_findings.html").read_text()
    # chapter 03's first execution there stopped; the page (executed again on the rows, measure=False) says so
    assert [r["status"] for r in store.rows("chapters") if r["chapter"] == "03_force_each_backend"][0] == "failed"
    page3 = re.sub(r"<[^>]+>", "", (out / "03_force_each_backend.html").read_text())
    assert "An execution of this chapter stopped in this run: ImportError: cannot import name 'AutoTokenizer'" in page3
    # chapter 04 was cut off on the host (device time ran out while its TP=2 check started); executed again, it says so
    page4 = re.sub(r"<[^>]+>", "", (out / "04_tune_nccl.html").read_text())
    assert "An execution of this chapter stopped in this run: stopped: the lent machine went back" in page4


def test_chapter_02s_prediction_is_what_ran(store):
    """Chapter 02 (SGLang's own resolution with the GPU faked as an H200, run on a CPU) against the live H200 server."""
    (pred,) = [r for r in store.rows("selection") if r.get("case") == "profile h200" and r["engine"] == "sglang"]
    assert pred["version"] == "0.5.16" and pred["method"] == "dynamic"
    live = {r["reported"] for r in store.rows("backends") if r["attention"] == "auto" and r["outcome"] == "ok"}
    assert live == {pred["attention_backend"]}


# ---- data/runs/h200x1-live: SGLang 0.5.16 and vLLM 0.26.0 on one H200, the same slice -----------------------------
RUN1 = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200x1-live"


def test_vllm_ran_what_its_own_code_predicts():
    """vLLM 0.26.0 live on an H200: its default reported FLASH_ATTN_MLA in its own startup log, the backend chapter 02
    resolves from vLLM's code with the GPU faked as an H200 (on a CPU); every forced backend reported itself."""
    s = RunStore.at(RUN1)
    rows = [r for r in s.rows("backends") if r["engine"] == "vllm"]
    assert {r["engine_version"] for r in rows} == {"0.26.0"}
    auto = {r["mode"]: r for r in rows if r["attention"] == "auto"}
    (pred,) = [r for r in s.rows("selection_matrix") if r["engine"] == "vllm==0.26.0" and r["gpu"] == "h200" and r["model"] == "kimi-k2.5"]
    assert set(auto) == {"graph", "eager"}  # CUDA graphs, and --enforce-eager (the second machine)
    for r in auto.values():
        assert pred["method"] == "dynamic" and r["reported"] == pred["attention_backend"] == "FLASH_ATTN_MLA"
        assert r["reported_source"].startswith("startup log")
    assert auto["eager"]["decode_tok_s"] < auto["graph"]["decode_tok_s"]
    for r in rows:
        if r["outcome"] == "ok":
            assert r["reported"] == (r["attention"] if r["attention"] != "auto" else "FLASH_ATTN_MLA") and r["tf_top1_agreement"] >= 0.9
    (cut,) = [r for r in rows if r["attention"] == "CUTLASS_MLA"]
    assert cut["outcome"] == "rejected" and "compute capability not supported" in cut["error"]
    # the first machine's harness fault is not filed as vLLM's refusal; the second asked vLLM in its config context
    (ni,) = [r for r in s.rows("backends_not_run") if r["attention"] == "FLASHINFER_MLA"]
    assert "harness" in ni["reason"]
    (fi,) = [r for r in rows if r["attention"] == "FLASHINFER_MLA"]
    assert fi["outcome"] == "rejected" and "FlashInferMLABackend.validate_configuration: compute capability not supported" in fi["error"]


def test_sglang_ran_what_its_own_code_predicts_in_both_modes():
    """SGLang 0.5.16's default on the second machine (its rows moved from a run folder the staging script misnamed, saying
    so): `fa3` with CUDA graphs and eager, what chapter 02 resolves from SGLang's code for an H200; graphs faster."""
    s = RunStore.at(RUN1)
    auto = {r["mode"]: r for r in s.rows("backends") if r["engine"] == "sglang" and r["attention"] == "auto"}
    (pred,) = [r for r in s.rows("selection_matrix") if r["engine"] == "sglang==0.5.16" and r["gpu"] == "h200" and r["model"] == "kimi-k2.5"]
    assert set(auto) == {"graph", "eager"} and {r["reported"] for r in auto.values()} == {pred["attention_backend"]} == {"fa3"}
    assert all(r["outcome"] == "ok" and r["tf_top1_agreement"] == 1.0 and "named the run wrongly" in r["moved_from_run"] for r in auto.values())
    assert auto["eager"]["decode_tok_s"] + auto["eager"]["decode_tok_s_ci95"] < auto["graph"]["decode_tok_s"] - auto["graph"]["decode_tok_s_ci95"]


@pytest.mark.parametrize("run", [RUN1, RUN])
def test_recorded_itl_is_the_chunk_gaps_where_the_server_sent_one_token_per_chunk(run):
    """Both live servers streamed one token per chunk; the per-token ITL first recorded was spread over a re-tokenized count
    (about 10x too small). Recomputed from the stored chunk gaps: every request and level says so and agrees with them;
    the client check's ITL, not recomputable, is marked as a harness fault and never compared."""
    s = RunStore.at(run)
    for q in s.rows("bench_requests"):
        if q.get("output_tokens_usage") == q.get("n_chunks"):
            assert q["itl_ms"] == q["chunk_gaps_ms"] and q["chunk_count_source"].startswith("one per chunk")
    for r in s.rows("bench_summary"):
        assert r.get("itl_corrected"), r["label"]
        if r["itl_corrected"].startswith("recomputed"):
            assert r["itl_ms_p50"] == pytest.approx(r["chunk_gap_ms_p50"], abs=1e-3)  # request rows keep 4 decimals
        else:
            assert r["itl_ms_p50"] is None
    # (the check taken before the fix; measured again after it: test_the_client_check_measured_again_...)
    assert all(r.get("harness_fault") for r in s.rows("bench_client_check") if r["metric"] == "itl_ms" and r["recorded_at"] < "2026-12-01T12")


def test_chapter_05_refreshed_from_the_recorded_rates_starts_nothing(tmp_path):
    """`servebook html RUN --refresh 05` executes chapter 05 again with measure=False: the same tables, no server, no
    new row, and the page's verdicts computed by today's code (the fast path judged at one token per read)."""
    import shutil

    from servebook.book import refresh_chapter

    run = tmp_path / "run"
    shutil.copytree(RUN1, run)
    tables = {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"}
    row = refresh_chapter(run, "05", {"compare_engines": "vllm", "max_tokens": 128, "input_len": 128})
    assert row["status"] == "ok", row
    assert {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"} == tables
    out = tmp_path / "book"
    render_book(run, out)
    page = re.sub(r"<[^>]+>", "", (out / "05_benchmark_single_stream.html").read_text())
    assert "measure=False: nothing is started or measured" in page
    assert "The hand-written transport is justified on this host" in page
    assert "against sglang/default" in page and "one start: interval within a start only" in page  # recorded with one start each
    assert "95% CI over 5 runs; one start: interval within a start only" in page
    # chapter 03 measured the default too, another way: both numbers side by side, with what differs
    assert "default, measured two ways: chapter 03 688.4 ± 12.1 tok/s" in page and "chapter 05 580.7 ± 75.6" in page
    assert "model directory /tmp/models/kimi-slice (03) against /tmp/models/kimi-slice-dummy (05)" in page
    assert "output tokens 64 (03) against 128 (05)" in page
    # measured again with every level warmed first: SGLang's C=8 fall was a first-use cost; vLLM's C=4 is held by waits
    assert "The fall at C=8 did not recur once the level was warmed first, a 9.1x change" in page
    assert "consistent with a first-use cost, a hypothesis only" in page  # vLLM's C=4: one batch each way, no interval
    assert "vllm/default --max-num-seqs 16 at C=4: each user decoded at 354 tok/s, yet a request waited up to 1.07 s" in page
    assert "this looks like a stall. Hypothesis" not in page  # the stall of the first sweep is read from the superseded rows only


def test_chapter_03_refreshed_from_the_recorded_rows_asks_no_engine(tmp_path, monkeypatch):
    """`--refresh 03` (measure=False) needs no engine here: with no interpreter for either engine reachable, the page is
    computed from the rows, says what stopped SGLang's first sweep, and files the harness fault apart from vLLM's refusal."""
    import shutil

    from servebook.book import refresh_chapter

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "no-engines"))  # no prepared engine environment at all
    run = tmp_path / "run"
    shutil.copytree(RUN1, run)
    tables = {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"}
    row = refresh_chapter(run, "03", {"compare_engines": "vllm", "model": str(RUN1 / "models" / "kimi-slice")})
    assert row["status"] == "ok", row
    assert {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"} == tables
    out = tmp_path / "book"
    render_book(run, out)
    page = re.sub(r"<[^>]+>", "", (out / "03_force_each_backend.html").read_text())
    assert "measure=False: nothing is started or asked" in page
    assert "an earlier sweep of this run stopped (measured again later: the rows above): ModuleNotFoundError: No module named 'httptools'" in page
    # the first machine's harness fault is stated as such; the second machine's verdict is vLLM's own words
    # stated once, as its row, with the earlier record beside it (never also under "not run here")
    assert ("FLASHINFER_MLA (graph): rejected — vLLM's FlashInferMLABackend.validate_configuration: compute capability not supported "
            "(an earlier attempt in this run was recorded otherwise: not started: servebook's preflight") in page
    assert "vllm FLASHINFER_MLA (not started" not in page and "sglang fa3 (not in this run" not in page


def test_chapter_04_refreshed_reads_the_hosts_backend_not_this_machines(tmp_path):
    """`--refresh 04` on a recorded 2-GPU run, on a machine without a GPU: the page describes the host's NCCL grid (its
    backend and process count come from the rows), starts no torchrun, and changes no table."""
    import shutil

    from servebook.book import refresh_chapter

    run = tmp_path / "run"
    shutil.copytree(RUN.parent / "h200x2-book", run)
    tables = {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"}
    row = refresh_chapter(run, "04", {})
    assert row["status"] == "ok", row
    assert {p.name: p.read_text() for p in run.glob("*.jsonl") if p.name != "chapters.jsonl"} == tables
    out = tmp_path / "book"
    render_book(run, out)
    page = re.sub(r"<[^>]+>", "", (out / "04_tune_nccl.html").read_text())
    assert "2 CUDA GPUs: NCCL all-reduce over" in page and "collective backend on the recording host: nccl with 2 processes" in page
    assert "measure=False: nothing is started" in page


def test_chapter_01_refreshed_reads_the_hosts_probe(tmp_path):
    """`--refresh 01` on a recorded H200 run, here without a GPU: the page shows the host's GPUs from its probe and
    tables (not this machine's "no GPU"), probes nothing, and changes no table."""
    import shutil

    from servebook.book import refresh_chapter

    run = tmp_path / "run"
    shutil.copytree(RUN.parent / "h200x1-book", run)
    tables = {p.name: p.read_text() for p in sorted(run.glob("*.jsonl")) if p.name != "chapters.jsonl"}
    probe = (run / "probe.json").read_text()
    row = refresh_chapter(run, "01", {})
    assert row["status"] == "ok", row
    assert {p.name: p.read_text() for p in sorted(run.glob("*.jsonl")) if p.name != "chapters.jsonl"} == tables
    assert (run / "probe.json").read_text() == probe
    out = tmp_path / "book"
    render_book(run, out)
    page = re.sub(r"<[^>]+>", "", (out / "01_detect_capabilities.html").read_text())
    assert "measure=False: nothing is probed" in page and "NVIDIA H200" in page and "source: measured" in page


def test_the_client_check_measured_again_after_the_itl_fix_agrees_with_bench_serving():
    """The client check taken again on a fresh SGLang server after the ITL fix: at C=1 every metric of servebook's client
    is within 5% of sglang.bench_serving's; the faulty first rows stay in the table, marked, and are superseded."""
    s = RunStore.at(RUN1)
    rows = s.rows("bench_client_check")
    last = {(r["concurrency"], r["metric"]): r for r in rows}
    assert not any(r.get("harness_fault") for r in last.values())
    assert all(abs(last[(1, m)]["rel_diff"]) < 0.05 for m in ("ttft_ms", "itl_ms", "output_tok_s"))
    assert abs(last[(8, "itl_ms")]["rel_diff"]) < 0.1
    # C=8: servebook's first run paid the server's first use of that batch size; its run after bench_serving's did not
    ttft8 = last[(8, "ttft_ms")]
    assert ttft8["servebook_runs"][0] > 10 * ttft8["servebook_runs"][1] and ttft8["servebook_runs"][1] < 1.5 * ttft8["bench_serving"]
    assert sum(1 for r in rows if r.get("harness_fault")) == 2
