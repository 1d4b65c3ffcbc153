"""Chapter 06's logic on recorded runs: the real H200 x2 book run, a CPU book run, a probe-only run, an empty run.

Fixtures: data/runs/h200x2-book (2x H200, every chapter), tests/data/runs/cpu-book (a full CPU run of the
book: gloo instead of NCCL, no selection table, from an earlier revision), data/runs/h200x2-probe/1gpu
(chapter 01 only). The expected values are read from the tables here, not typed in.
"""

import json
import re
from urllib.parse import unquote

import pytest

from servebook import findings as sbf
from servebook.cli import main
from servebook.errors import ParameterError
from servebook.paths import book_root
from servebook.results import RunStore

ROOT = book_root()
H200 = ROOT / "data" / "runs" / "h200x2-book"
ONE_GPU = ROOT / "data" / "runs" / "h200x2-probe" / "1gpu"
CPU = ROOT / "tests" / "data" / "runs" / "cpu-book"


@pytest.fixture(scope="module")
def h200():
    return sbf.collect(RunStore(H200))


def _two_starts(rate, spread=0.0):
    """A chapter 03 row's ``starts`` list: the rate measured over two server starts."""
    return [{"start": 0, "decode_tok_s": rate - spread}, {"start": 1, "decode_tok_s": rate + spread}]


def _rows(path, table):
    return [json.loads(line) for line in (path / f"{table}.jsonl").read_text().splitlines() if line.strip()]


def test_host(h200):
    gpus = _rows(H200, "gpus")
    assert h200.host["gpu_count"] == len(gpus) == 2
    assert h200.host["capability"] == gpus[0]["capability"]
    assert h200.host["links"] == sorted({r["link"] for r in _rows(H200, "topology")})


def test_selection_names_the_deciding_line(h200):
    rec = [r for r in _rows(H200, "selection") if r["case"] == "this-host"][0]
    mine = [s for s in h200.selection if s["case"] == "this-host"][0]
    assert mine["backend"] == rec["attention_backend"]
    assert mine["where"] == rec["decided_by"]["where"] and re.search(r"\.py:\d+$", mine["where"])
    assert mine["rule"] == [c["text"] for c in rec["conditions"]]
    assert mine["sites"] == len({s["where"] for s in _rows(H200, "selection_sites")
                                 if (s["engine"], s["version"]) == (rec["engine"], rec["version"])})
    claim = next(c for c in h200.claims if c.chapter == "02")
    assert rec["decided_by"]["where"] in claim.text and rec["attention_backend"] in claim.text


def test_backends_overlapping_intervals_support_no_change(h200):
    rows = [r for r in _rows(H200, "backends") if r["outcome"] == "ok"]
    best = max(rows, key=lambda r: r["decode_tok_s"])
    auto = next(r for r in rows if r["attention"] == "auto")
    (b,) = h200.backends
    assert b["best"] == best["attention"] and b["best_tok_s"] == pytest.approx(best["decode_tok_s"])
    overlap = best["decode_tok_s"] - best["decode_tok_s_ci95"] <= auto["decode_tok_s"] + auto["decode_tok_s_ci95"]
    assert overlap  # the recorded data: sdpa 88 +- 35 against auto 73 +- 30
    assert b["change_supported"] is False
    claim = next(c for c in h200.claims if c.chapter == "03" and "fastest" in c.text)
    assert "no change" in claim.text and not claim.supported
    (launch,) = h200.launch
    assert "--attn-implementation" not in launch["command"]  # nothing forced without evidence


def test_backends_separated_intervals_support_a_change(tmp_path):
    """The same logic with intervals over two server starts that do not overlap: the forced backend is recommended, with
    its flag. The same rates measured in one start each support no change (one start: interval within a start only)."""
    one = RunStore.at(tmp_path / "one")
    store = RunStore.at(tmp_path / "run")
    for att, rate, ci, rep in (("auto", 40.0, 2.0, "sdpa"), ("eager", 60.0, 3.0, "eager"), ("sdpa", 41.0, 2.5, "sdpa")):
        row = {"engine": "transformers", "engine_version": "5.17.0", "attention": att, "outcome": "ok",
               "decode_tok_s": rate, "decode_tok_s_ci95": ci, "reported": rep, "agreement": 1.0}
        one.append("backends", row)
        store.append("backends", {**row, "starts": _two_starts(rate)})
    (b1,) = sbf.collect(one).backends
    assert b1["best"] == "eager" and b1["change_supported"] is False and b1["verdict"].startswith(sbf.ONE_START)
    f = sbf.collect(store)
    (b,) = f.backends
    assert b["best"] == "eager" and b["change_supported"] is True and b["verdict"].startswith("faster by 50.0%")
    (launch,) = f.launch
    assert launch["command"] == "transformers serve MODEL --attn-implementation eager"


def test_forced_backend_is_spelled_as_the_recorded_version_takes_it(tmp_path):
    """vLLM 0.12 reads VLLM_ATTENTION_BACKEND and has no --attention-backend (0.13.0 adds it): the command follows
    the version the run recorded, even where vLLM is not installed (servebook.engines.vllm.attention_mechanism_of)."""
    commands = {}
    for version in ("0.12.0", "0.13.0"):
        store = RunStore.at(tmp_path / version)
        for att, rate, rep in (("auto", 40.0, "FLASH_ATTN"), ("FLASHINFER", 60.0, "FLASHINFER")):
            store.append("backends", {"engine": "vllm", "engine_version": version, "attention": att, "outcome": "ok",
                                      "decode_tok_s": rate, "decode_tok_s_ci95": 1.0, "reported": rep, "agreement": 1.0,
                                      "starts": _two_starts(rate)})
        (launch,) = sbf.collect(store).launch
        commands[version] = launch["command"]
    assert commands == {"0.12.0": "VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve MODEL",
                        "0.13.0": "vllm serve MODEL --attention-backend FLASHINFER"}


def test_nccl_recommendation_from_recorded_grid(h200):
    from servebook.embedded import EMBEDDED_CONFIG

    n = h200.nccl
    assert n["backend"] == "nccl" and n["world_size"] == 2
    assert n["b1_bytes"] == EMBEDDED_CONFIG["hidden_size"] * 2  # the embedded model's batch-1 message, bf16
    graph = [r for r in _rows(H200, "allreduce") if r["mode"] == "graph" and r["path"] == "torch" and not r.get("shape_study")
             and r["setting"] == "default" and r["bytes"] == n["b1_bytes"]]
    assert n["default_us"] == pytest.approx(graph[0]["us_median"])
    assert n["layers"] == EMBEDDED_CONFIG["num_hidden_layers"]
    assert n["setting"] == "default"  # no setting beats the default by more than the noise at this size
    assert n["measured_effect"] is None  # no TP>1 engine benchmark with an NCCL env in this run
    texts = [c.text for c in h200.claims if c.chapter == "04"]
    assert any("keep NCCL's defaults" in t for t in texts) and any("not measured" in t for t in texts)


def test_throughput_and_roofline(h200):
    summary = _rows(H200, "bench_summary")
    single = [r for r in summary if r["phase"] == "single"][-1]
    sweep = [r for r in summary if r["phase"] == "sweep"]
    peak = max(sweep, key=lambda r: r["throughput_tok_s"])
    roof = [r for r in _rows(H200, "bench_roofline") if r["source"] == "measured here"][-1]
    (t,) = h200.throughput
    assert t["single_tok_s"] == pytest.approx(single["decode_tok_s_mean"]) and t["single_ci95"] == pytest.approx(single["decode_tok_s_ci95"])
    assert t["peak_tok_s"] == pytest.approx(peak["throughput_tok_s"]) and t["peak_c"] == peak["concurrency"]
    assert t["pct_of_roofline"] == pytest.approx(roof["pct_of_roofline"])


def test_every_claim_links_to_a_chapter_heading(h200):
    """Each link's anchor is a heading that exists in that chapter's notebook source."""
    import jupytext

    from servebook.book import chapters

    headings = {}
    for ch in chapters():
        nb = jupytext.read(ch.source)
        headings[ch.stem] = {sbf.anchor(line.lstrip("#").strip()) for c in nb.cells if c.cell_type == "markdown"
                             for line in c.source.splitlines() if line.startswith("#")}
    text = sbf.what_we_found(h200)
    links = re.findall(r"\]\((\d\d_[a-z_]+)\.html#([^)\s]+)\)", text)
    assert len(links) == len(h200.claims)
    for stem, frag in links:
        assert unquote(frag) in headings[stem], (stem, frag)


def test_cpu_run(tmp_path):
    f = sbf.collect(RunStore(CPU))
    assert f.host["gpu"] is None and f.host["probed"]
    assert "no GPU" in f.claims[0].text
    assert f.nccl["backend"] == "gloo" and f.nccl["setting"] is None
    assert any("NCCL settings do not apply" in c.text for c in f.claims)
    assert f.selection == []  # that revision recorded no selection table: said, not guessed
    assert any("No backend selection was recorded" in c.text for c in f.claims)
    (b,) = f.backends
    assert b["change_supported"] is False


def test_empty_run_says_what_is_missing(tmp_path):
    store = RunStore.at(tmp_path / "empty")
    f = sbf.collect(store)
    text = sbf.what_we_found(f)
    assert "not probed" in text and "No backend was forced" in text and "No benchmark was recorded" in text
    assert f.launch == []
    for ch in ("01", "02", "06"):
        assert sbf.check_yourself(store, ch), ch


@pytest.mark.parametrize("chapter", ["01", "02", "06"])
def test_check_yourself_answers_come_from_the_run(chapter):
    qa = sbf.check_yourself(RunStore(H200), chapter)
    assert 2 <= len(qa) <= 3
    answers = " ".join(a for _, a in qa)
    if chapter == "01":
        assert "9.0" in answers and "NV18" in answers
    if chapter == "02":
        assert "transformers/modeling_utils.py:1845" in answers
    if chapter == "06":
        assert "overlaps the default" in answers
    md = sbf.check_yourself_markdown(qa)
    assert md.count("<details>") == len(qa) and md.count("</details>") == len(qa)


def test_compare_partial_runs():
    table = sbf.compare_runs([H200, ONE_GPU])
    cols = list(table.columns)
    assert cols[:2] == ["h200x2-book", "1gpu"] and cols[2].startswith("delta 1gpu")
    assert table.at["GPUs", "h200x2-book"] == 2 and table.at["GPUs", "1gpu"] == 1
    assert table.at["GPUs", cols[2]].startswith("-1")
    assert table.at["capability", cols[2]] == "same"
    label = "transformers/default tok/s at C=1 (single stream)"
    assert table.at[label, "1gpu"] == "missing" and table.at[label, cols[2]] == ""
    assert table.at["selected backends (chapter 02)", "1gpu"] == "missing"


def test_compare_states_the_backends_each_run_selected_and_reported():
    """h200x1-live's chapter 02 answered for the h200 profile (not "this-host") and its chapter 03 reported fa3: the
    comparison says both, never "missing" beside a page that shows fa3 (issue #29, item 10)."""
    live1, live2 = H200.parent / "h200x1-live", H200.parent / "h200x2-live"
    table = sbf.compare_runs([live1, live2])
    assert table.at["selected backends (chapter 02)", "h200x1-live"] == "sglang 0.5.16 on h200: fa3"
    assert table.at["default backend reported (chapter 03)", "h200x1-live"] == "sglang: fa3, vllm: FLASH_ATTN_MLA"
    assert table.at["default backend reported (chapter 03)", "h200x2-live"] == "sglang: fa3"


def test_compare_deltas_respect_intervals(tmp_path):
    a, b = RunStore.at(tmp_path / "a"), RunStore.at(tmp_path / "b")
    for store, rate in ((a, 50.0), (b, 52.0)):
        store.append("bench_summary", {"label": "x/default", "engine": "x", "phase": "single", "decode_tok_s_mean": rate,
                                       "decode_tok_s_ci95": 5.0, "runs": 5})
    table = sbf.compare_runs([a.path, b.path])
    # one server start each: an interval within a start says nothing about the spread between starts
    assert "no verdict" in table.at["x/default tok/s at C=1 (single stream)", "delta b vs a"]
    c, d = RunStore.at(tmp_path / "c"), RunStore.at(tmp_path / "d")
    for store, rate in ((c, 50.0), (d, 52.0)):
        for start, shift in ((0, -1.0), (1, 1.0)):
            store.append("bench_summary", {"label": "x/default", "engine": "x", "phase": "single", "decode_tok_s_mean": rate + shift,
                                           "decode_tok_s_ci95": 5.0, "runs": 5, "start": start})
    table = sbf.compare_runs([c.path, d.path])
    assert "no difference beyond the restart spread" in table.at["x/default tok/s at C=1 (single stream)", "delta d vs c"]


def test_compare_cli(capsys):
    assert main(["compare", str(H200), str(ONE_GPU)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| quantity | h200x2-book | 1gpu |") and "missing" in out
    assert main(["compare", str(H200), str(ONE_GPU), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"]["1gpu"][data["quantities"].index("GPUs")] == 1


def test_compare_errors(tmp_path, capsys):
    assert main(["compare", str(H200), str(tmp_path / "nothing")]) == 2
    assert "run directory" in capsys.readouterr().err
    with pytest.raises(ParameterError):
        sbf.compare_runs([H200])


def test_chapter_06_reads_and_never_measures(tmp_path):
    """Chapter 06 executed for real on a copy of the H200 run: it succeeds, compares, and changes no measured table
    (it adds only its own: ``chapters`` and the derived ``root_causes`` / ``recommended_launch``)."""
    import hashlib
    import shutil

    import nbformat

    from servebook.book import refresh_findings

    run = tmp_path / "h200x2-book"
    shutil.copytree(H200, run)
    derived = {"chapters.jsonl", "root_causes.jsonl", "recommended_launch.jsonl"}
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.glob("*.jsonl") if p.name not in derived}
    row = refresh_findings(run, compare_with=str(ONE_GPU))
    assert row["status"] == "ok", row["error"]
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.glob("*.jsonl") if p.name not in derived}
    assert after == before
    nb = nbformat.read(run / "notebooks" / "06_findings.ipynb", as_version=4)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps(outputs)
    assert "| quantity | h200x2-book | 1gpu |" in text and "Check yourself" in json.dumps([c.source for c in nb.cells])
    assert "<details>" in text


def test_launch_command_for_a_tp_engine(tmp_path):
    """Two GPUs, SGLang with a backend faster beyond the intervals at TP=1 (chapter 03 gives a sweep one GPU), NCCL_PROTO=LL
    faster at every decode size: the command forces the backend at the size it was measured at, and the NCCL block and
    TP=2 only once chapter 04 measured them end to end at TP=2. The rows are written the way chapters 01, 03 and 04
    write them."""
    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"parameters": {"engine": "sglang", "model": "embedded"}})
    for i in range(2):
        store.append("gpus", {"index": i, "name": "NVIDIA H200", "capability": "9.0", "family": "sm_90 Hopper"})
    for att, rate, ci, rep in (("auto", 40.0, 1.0, "fa3"), ("flashinfer", 55.0, 1.5, "flashinfer")):
        store.append("backends", {"engine": "sglang", "engine_version": "0.5.9", "attention": att, "outcome": "ok",
                                  "decode_tok_s": rate, "decode_tok_s_ci95": ci, "reported": rep, "agreement": 1.0,
                                  "starts": _two_starts(rate),
                                  "launch": "CUDA_VISIBLE_DEVICES=0 /tmp/py -m sglang.launch_server --model-path /m --port 1 "
                                            f"--tensor-parallel-size 1{'' if att == 'auto' else ' --attention-backend ' + att}"})
    for setting, us in (("default", 12.0), ("NCCL_PROTO=LL", 8.0)):
        for batch in (1, 2):
            store.append("allreduce", {"backend": "nccl", "world_size": 2, "setting": setting, "mode": "graph", "path": "torch",
                                       "bytes": 512 * batch, "batch": batch, "size_source": "model", "us_median": us * (1 + batch / 10),
                                       "sum_ok": True, "shape_study": False})
    f = sbf.collect(store)
    assert f.nccl["setting"] == "NCCL_PROTO=LL" and f.nccl["predicted_delta_ms"] < 0
    (launch,) = f.launch
    # predicted by the grid, not measured end to end: no variable is exported, and the size is the one measured (TP=1)
    assert launch["command"] == "python -m sglang.launch_server --model-path MODEL --attention-backend flashinfer"
    assert any("not confirmed end to end" in w and "NCCL_PROTO=LL" in w for w in launch["why"])
    assert any("TP=1 (chapter 03)" in w and "TP=2 not measured here" in w for w in launch["why"])
    # chapter 04's end-to-end rows: the engine restarted at TP=2; the block beats "custom all-reduce off" and the default
    for setting, rate, ci, env, args in (("engine default", 50.0, 1.0, {}, []), ("custom all-reduce off", 45.0, 1.0, {}, ["--disable-custom-all-reduce"]),
                                         ("custom all-reduce off + NCCL_PROTO=LL", 56.0, 1.0, {"NCCL_PROTO": "LL"}, ["--disable-custom-all-reduce"])):
        store.append("tp_e2e", {"engine": "sglang", "tp": 2, "setting": setting, "decode_tok_s": rate, "decode_tok_s_ci95": ci,
                                "env": env, "args": args, "outcome": "ok"})
    f = sbf.collect(store)
    (launch,) = f.launch
    assert launch["command"] == ("NCCL_PROTO=LL python -m sglang.launch_server --model-path MODEL --tensor-parallel-size 2 --attention-backend flashinfer "
                                 "--disable-custom-all-reduce")
    assert any("TP=2 (chapter 04)" in w and "the forced backend was measured at TP=1 only" in w for w in launch["why"])
    assert any(c.chapter == "04" and c.supported and "NCCL_PROTO=LL" in c.text and "separate" in c.text for c in f.claims)
    # overlapping intervals: nothing is exported, the engine's all-reduce stays
    store2 = RunStore.at(tmp_path / "run2")
    store2.write_manifest({"parameters": {"engine": "sglang", "model": "embedded"}})
    for row in store.rows("gpus") + store.rows("allreduce"):
        store2.append("gpus" if "capability" in row else "allreduce", row)
    for setting, rate in (("engine default", 50.0), ("custom all-reduce off", 49.0), ("custom all-reduce off + NCCL_PROTO=LL", 50.5)):
        store2.append("tp_e2e", {"engine": "sglang", "tp": 2, "setting": setting, "decode_tok_s": rate, "decode_tok_s_ci95": 2.0,
                                 "env": {"NCCL_PROTO": "LL"} if "LL" in setting else {}, "args": [], "outcome": "ok"})
    (launch,) = sbf.collect(store2).launch
    assert "NCCL_PROTO" not in launch["command"] and any("keep the engine's all-reduce" in w for w in launch["why"])


def test_launch_command_uses_the_tp_the_run_measured_at():
    """h200x2-live: two GPUs, but chapters 03 and 05 started every server at TP=1 on one of them (their recorded launch
    lines say so): the recommended command carries no --tensor-parallel-size 2, and says TP=2 was not measured."""
    store = RunStore(ROOT / "data" / "runs" / "h200x2-live")
    launches = [r["launch"] for t in ("backends", "bench_servers") for r in _rows(store.path, t) if r.get("launch")]
    assert launches and all("--tensor-parallel-size 1" in x for x in launches)
    (lc,) = sbf.launch_commands(store)
    assert "--tensor-parallel-size" not in lc["command"]
    line = next(w for w in lc["why"] if "TP=1 (chapters 03 and 05)" in w)
    assert "TP=2 not measured here" in line and 'data-q="host_gpu_count"' in line


def test_launch_command_without_a_recorded_start_keeps_the_default_tp(tmp_path):
    """Rows with no launch line (no server start recorded): the size stays the engine's default, not the host's GPU count."""
    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"parameters": {"engine": "sglang", "model": "embedded"}})
    for i in range(8):
        store.append("gpus", {"index": i, "name": "NVIDIA H200", "capability": "9.0", "family": "sm_90 Hopper"})
    store.append("backends", {"engine": "sglang", "attention": "auto", "outcome": "ok", "decode_tok_s": 40.0,
                              "decode_tok_s_ci95": 1.0, "reported": "fa3"})
    (lc,) = sbf.collect(store).launch
    assert "--tensor-parallel-size" not in lc["command"]
    assert any("no server start of this engine is recorded" in w and 'data-v="8"' in w for w in lc["why"])


def test_a_pick_within_the_run_to_run_spread_is_no_supported_setting():
    """h200x2-live: its grid's fastest setting gains less than one setting moved between two recordings of the grid
    (chapter 04 says no setting is supported): chapter 06's statement, its claim, its comparison table and its launch
    say the same, and chapter 04's env block exports nothing."""
    from servebook.nccl.figures import run_spread
    from servebook.nccl.report import env_blocks, load_reference
    from servebook.stated import say_allreduce

    store = RunStore(ROOT / "data" / "runs" / "h200x2-live")
    f = sbf.collect(store)
    spread = run_spread(store, f.nccl)
    assert spread["within_spread"] and f.nccl["within_spread"] is True and f.nccl["setting"] == spread["pick"]
    said = say_allreduce(f.nccl)
    assert "no setting is supported" in said and "grid picks" not in said
    (claim,) = [c for c in f.claims if c.chapter == "04" and spread["pick"] in c.text]
    assert not claim.supported and "no setting is supported" in claim.text
    table = sbf.compare_runs([store.path, H200])
    assert table.at["best NCCL setting", "h200x2-live"].startswith("none supported")
    assert any("no setting is supported" in w for lc in f.launch for w in lc["why"])
    blocks = env_blocks(load_reference({}), {"setting": "default", "reason": "r"}, f.nccl, "m")
    assert "picks nothing to export" in blocks and "export " + spread["pick"] not in blocks


@pytest.mark.parametrize("starts", [(1, 1), (1, 2), (2, 1), 1])
@pytest.mark.parametrize("rates", [(416.2, 8.6, 580.7, 75.6), (580.7, 75.6, 416.2, 8.6), (500.0, 10.0, 505.0, 10.0)])
def test_a_one_start_comparison_never_says_separate(starts, rates):
    """An interval within one server start does not cover the spread between starts: whatever the two intervals do,
    the comparison gives no verdict and never says they separate."""
    text = sbf.separated(*rates, starts=starts)
    assert "separate" not in text and not text.startswith(("faster", "slower")) and "no verdict" in text


def test_chapter_06_compares_other_runs_over_their_starts_and_their_methods():
    """h200x1-live against h200x2-live (finding: "slower, the 95% intervals separate"): each single stream covers one
    server start and the two runs differ in host and warm-ups, so the pair is no verdict and never 'faster'; every
    figure of the sentence is tagged and recomputed, the count of starts too."""
    from servebook.findings.methods import bench_method, method_differences
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    store = RunStore(ROOT / "data" / "runs" / "h200x1-live")
    other = "data/runs/h200x2-live"
    items = sbf.across_runs(store, sbf.throughput(store), [other])
    assert items
    for a in items:
        assert a["faster"] is False and "separate" not in a["verdict"] and "no verdict" in a["verdict"]
        mine, theirs = bench_method(store, a["base"]), bench_method(RunStore(ROOT / other), a["label"])
        assert mine["starts"] == theirs["starts"] == 1
        differ = {x["what"] for x in method_differences(theirs, mine)}
        assert {"warm-up requests", "GPUs on the host"} <= differ and all(w in a["text"] for w in differ)
        tags = stated_on(a["text"])
        for t in tags:
            assert pick(QUANTITIES[t.name], QUANTITIES[t.name].compute(store), t.of, store) == t.value, t


def test_comparison_table_lists_what_differs_instead_of_a_verdict():
    """h200x1-trust against h200x1-live: different prompt and output lengths, weights, warm-ups, server starts, and
    sweeps that stopped at different levels. Each tok/s row's delta says it is not a verdict and lists the differences
    (the sweep's levels beside the peak); compared with itself, the same run gets a verdict over its server starts."""
    from servebook.findings.methods import bench_method

    trust, live = ROOT / "data" / "runs" / "h200x1-trust", ROOT / "data" / "runs" / "h200x1-live"
    table = sbf.compare_runs([trust, live])
    delta = table.columns[-1]
    # columns named by directory: h200x1-trust's manifest keeps the run_id of the run it was recorded beside
    assert list(table.columns) == ["h200x1-trust", "h200x1-live", "delta h200x1-live vs h200x1-trust"]
    for t in sbf.throughput(RunStore(trust)):
        a, b = bench_method(RunStore(trust), t["label"]), bench_method(RunStore(live), t["label"])
        single, peak = table.at[f"{t['label']} tok/s at C=1 (single stream)", delta], table.at[f"{t['label']} peak tok/s", delta]
        for cell in (single, peak):
            assert "not a verdict" in cell and "overlap" not in cell and "beyond" not in cell
            assert f"prompt tokens {b['input_tokens']} vs {a['input_tokens']}" in cell
            assert f"warm-up requests {b['warmup']} vs {a['warmup']}" in cell and "weights" in cell
        assert "sweep levels" not in single and (a["levels"] == b["levels"] or f"sweep levels {b['levels']} vs {a['levels']}" in peak)
    same = sbf.compare_runs([trust, trust])
    cell = same.at[f"{t['label']} tok/s at C=1 (single stream)", same.columns[-1]]
    assert "not a verdict" not in cell and "over 2 server starts" in cell


def test_check_yourself_exports_no_nccl_pick_within_the_spread():
    """h200x2-live's grid picked a setting whose gain chapter 04 found within the run-to-run spread: chapter 06's
    Check-yourself answer exports nothing, as chapters 04 and 06 say (review of 2026-12-02)."""
    from servebook.findings.questions import _questions_06

    store = RunStore(ROOT / "data" / "runs" / "h200x2-live")
    (answer,) = [a for qq, a in _questions_06(store) if "NCCL variables" in qq]
    assert answer.startswith("None") and "no setting is supported" in answer, answer


def test_run_in_short_says_the_measured_roofline_and_a_c1_level_that_disagrees():
    """Chapter 06's claims state what chapter 05 states beside a single-stream rate: the roofline at the GPU's measured
    read bandwidth too, and a sweep C=1 level outside the single stream's interval (h200x1-live, vLLM: 556 against 372
    tok/s per user on the same server start)."""
    store = RunStore(ROOT / "data" / "runs" / "h200x1-live")
    text = {re.sub(r"<[^>]+>", "", c.text) for c in sbf.collect(store).claims if c.chapter == "05"}
    vllm = next(t for t in text if t.startswith("vllm/") and "single stream" in t)
    assert "measured read bandwidth" in vllm and "the sweep's C=1 level ran at" in vllm, vllm
    trust = {re.sub(r"<[^>]+>", "", c.text) for c in sbf.collect(RunStore(ROOT / "data" / "runs" / "h200x1-trust")).claims
             if c.chapter == "05"}
    assert not any("C=1 level ran at" in t for t in trust), trust  # its C=1 levels agree with the single stream


def test_whatif_first_launch_is_settled_by_its_own_chapter():
    """A what-if's first launch says which chapter settles it on the real host: the seed verdict's NCCL block (decision
    "predicted") chapters 04 and 05, a forced backend chapter 03 by its decode-path check. The what-if book had told the
    reader that chapter 03 (backend reported, teacher-forced agreement) settles the NCCL block."""
    nccl = sbf.whatif_questions("rtx-pro-6000", [{"why": "the seed's NCCL block", "decision": "predicted", "launch": "x"}], [])
    answer = nccl[0][1]
    assert "chapter 04" in answer and "chapter 05" in answer and "chapter 03" not in answer
    backend = sbf.whatif_questions("rtx-pro-6000", [{"why": "flashinfer kept out", "decision": "hypothesis", "launch": "x"}], [])
    answer = backend[0][1]
    assert "chapter 03" in answer and "decode-path agreement" in answer and "teacher-forced" not in answer


def test_default_fastest_is_not_compared_with_itself():
    """Where the fastest correct configuration is the default itself, the answer says so instead of "the fastest, auto
    (fa3) (665.2 ± 287.1), overlaps the default (665.2 ± 287.1)" (h200x1-trust's chapter 06)."""
    trust = RunStore(ROOT / "data" / "runs" / "h200x1-trust")
    b = sbf.collect(trust).backends[0]
    assert str(b["best"]).startswith("auto")
    question, answer = sbf.check_yourself(trust, "06")[0]
    assert question.startswith("Should you force") and "default itself" in answer and "overlaps the default" not in answer


def test_the_c1_level_is_not_a_second_single_stream_number():
    """Chapter 06 gives one single-stream number per configuration: the sweep's C=1 level (output tokens over the level's
    wall time, first tokens included) is named as throughput, so "524.3 tok/s single stream" and "483.4 tok/s at C=1"
    (h200x1-trust) no longer read as two numbers for one quantity."""
    for run in ("h200x1-trust", "h200x1-live", "h200x2-book"):
        f = sbf.collect(RunStore(ROOT / "data" / "runs" / run))
        said = [c.text for c in f.claims if 'data-q="c1_tok_s"' in c.text]
        assert said, run
        assert all("sweep throughput" in t and "not the single-stream decode rate" in t for t in said), said


def test_a_recommended_launch_names_what_its_rates_were_measured_with():
    """h200x1-live recommended `python -m sglang.launch_server --model-path .../kimi-slice-dummy` for rates measured with
    --cuda-graph-max-bs 16 --sampling-backend pytorch and --load-format dummy (a slice without weights, which does not start
    without it): the launch's reasons name those arguments, read from the run's own launch lines, never an eager flag."""
    launches = {lc["engine"]: lc for lc in sbf.launch_commands(RunStore(ROOT / "data" / "runs" / "h200x1-live"))}
    why = " ".join(launches["sglang"]["why"])
    assert "--cuda-graph-max-bs 16 --sampling-backend pytorch" in why and "--load-format dummy" in why
    assert "--disable-cuda-graph" not in why and "--enforce-eager" not in " ".join(launches["vllm"]["why"])


def test_a_forced_backend_that_loads_the_defaults_implementation_is_called_noise(h200):
    """h200x2-book: forced sdpa (88.2 tok/s) against the default, which loaded sdpa (73.1): the answer says the two are one
    implementation started twice, where it read as a +20.6% difference between two backends."""
    from servebook.stated.say import say_backends

    (b,) = [x for x in h200.backends if x["engine"] == "transformers"]
    assert b["best_reported"] == b["default_reported"] and b["best_tok_s"] != b["default_tok_s"]
    assert "loads the implementation the default loaded" in say_backends(b)
