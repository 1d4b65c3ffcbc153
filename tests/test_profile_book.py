"""A run of profiles only (h200x1-ref) read as a reference book (issue #39 item 7): which chapters ``servebook html``
executes on it, the index's line for the chapters it has no page of, chapter 05's slice depths over their starts
(servebook.profile.depths), and the render itself (slow). Every run is a copy under tmp_path: executing a chapter
writes into the run."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pytest

from servebook.paths import data_dir
from servebook.profile import book, depths
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-ref"
BOOK = data_dir() / "runs" / "h200x1-book"


def _copy(tmp_path, src=REF):
    """The run as recorded (its traces and logs left out); the notebooks and tables its first rendering wrote
    (rendered/h200x1-ref) left out too: the run as ``servebook profile run`` left it."""
    dest = tmp_path / src.name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.trace.json.gz", "logs", "notebooks", "chapters.jsonl",
                                                              "bench_roofline.jsonl", "bench_breakdown.jsonl"))
    return dest


def test_a_profiles_only_run_gets_its_profile_chapters_and_a_book_run_none(tmp_path):
    ref = _copy(tmp_path)
    assert book.html_plan(ref) == (["05", "06"], {"engine": "sglang", "compare_engines": "vllm", "model": "kimi-k2.5"})
    assert book.served_by_profiles(RunStore(ref))
    line = book.not_run_line(ref, "03_force_each_backend")
    assert line.startswith("not run: a run of profiles only") and "--only 03` fills it" in line
    assert book.not_run_line(ref, "05_benchmark_single_stream") is None            # 05 and 06 have pages
    (ref / "notebooks").mkdir()
    (ref / "notebooks" / "06_findings.ipynb").write_text("{}")
    assert book.html_plan(ref) is None                                              # executed once: rendered as it is
    assert book.html_plan(BOOK) is None and book.not_run_line(BOOK, "03_force_each_backend") is None
    assert not book.served_by_profiles(RunStore(BOOK))


def test_the_depths_are_the_recorded_starts_of_each_slice(tmp_path):
    """Each depth's figures recomputed here from the raw rows: the ok profiles of one server, by MoE layers."""
    rows = RunStore(REF).rows("profile_runs")
    every = depths.depth_rows(rows)
    # unit 1: SGLang's ladder; unit 2 (another machine): vLLM's to 4 MoE layers and SGLang's reference again; unit 3 (a
    # third machine): vLLM's at 1, 2 and 12 MoE layers beside SGLang's 1 and 12; unit 4 (a fourth): the backends, each
    # backend a depth row of its own; unit 5 (a fifth): SGLang's triton, flashmla and fa3 at 12; unit 6 (a sixth):
    # SGLang's triton and vLLM's TRITON_MLA, FLASHMLA and default at 12
    assert sorted((r["engine"], r["backend"], r["machine"][:8], r["moe_layers"]) for r in every) == sorted(
        [("sglang", "triton", "gpu-4538", m) for m in (1, 2, 4, 12)] + [("vllm", "TRITON_MLA", "gpu-da94", m) for m in (1, 2, 4)]
        + [("sglang", "triton", "gpu-da94", 12)]
        + [("vllm", "TRITON_MLA", "gpu-8ecf", m) for m in (1, 2, 12)] + [("sglang", "triton", "gpu-8ecf", m) for m in (1, 12)]
        + [(e, b, "gpu-d45a", m) for e, b in (("sglang", "triton"), ("sglang", "flashinfer"), ("vllm", "TRITON_MLA"))
           for m in (1, 12)] + [("vllm", "FLASHMLA", "gpu-d45a", 12), ("vllm", "auto", "gpu-d45a", 12)]
        + [("sglang", b, "gpu-a792", 12) for b in ("triton", "flashmla", "fa3")]
        + [("sglang", "triton", "gpu-171d", 12)] + [("vllm", b, "gpu-171d", 12) for b in ("TRITON_MLA", "FLASHMLA", "auto")])
    for r in every:
        mine = [p for p in rows if p.get("ok") and p["layers"] - p["dense_layers"] == r["moe_layers"]
                and (p["engine"], p["machine"], p.get("backend")) == (r["engine"], r["machine"], r["backend"])]
        assert r["starts"] == len(mine) and r["labels"] == [p["label"] for p in mine]
        assert r["tpot_mean_ms"] == pytest.approx(statistics.fmean(p["tpot_ms"] for p in mine))
        assert r["busy_spread_ms"] == pytest.approx(max(p["busy_ms"] for p in mine) - min(p["busy_ms"] for p in mine))
        assert r["busy_share"] == pytest.approx(r["busy_mean_ms"] / r["tpot_mean_ms"])
    got = {r["moe_layers"]: r for r in every if r["machine"].startswith("gpu-4538")}
    assert got[12]["starts"] == 2 and got[12]["busy_share"] > depths.HOST_BOUND_SHARE > got[4]["busy_share"]


def test_chapter_05_s_depth_account_tags_every_figure_and_only_on_a_profiles_only_run(tmp_path):
    import mistune

    from servebook import stated

    ref = _copy(tmp_path)
    md = depths.depth_markdown(RunStore(ref)) + "\n\n" + "\n".join(depths.found_lines(RunStore(ref)))
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    words = re.sub(r"<span[^>]*>|</span>", "", md)
    assert "the GPU is busy for most of a token's time at 12 MoE layers" in words
    assert "at 1, 2 and 4 MoE layers the GPU idles for part of each token" in words
    assert "| 12 | 2 | 3.381, 3.383 | 3.382 ± 0.015 | 3.374 (0.0006) | 100% |" in words
    assert depths.depth_markdown(RunStore(BOOK)) == "" and depths.found_lines(RunStore(BOOK)) == []


@pytest.mark.slow
def test_servebook_html_renders_the_reference_run_without_refresh(tmp_path):
    from servebook.cli import main

    ref = _copy(tmp_path)
    assert main(["html", str(ref), "--out", str(tmp_path / "out")]) == 0
    index = (tmp_path / "out" / "index.html").read_text()
    assert index.count("not run: a run of profiles only") == 4
    page = (tmp_path / "out" / "05_benchmark_single_stream.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    assert "nothing measured" not in text and "This chapter failed" not in text
    assert "timed by the profile run" in text and "busy share of the served time" in text
    # chapter 06's "What we found" says what chapter 05 says of a run of profiles (it said "No benchmark was recorded")
    page06 = re.sub(r"<[^>]+>", "", (tmp_path / "out" / "06_findings.html").read_text())
    assert "None — None CPUs" not in page06 and "not in this run's manifest (a run of profiles only" in page06  # "This run"
    found = page06.split("What we found", 1)[-1]
    assert "No benchmark was recorded in this run" not in found and "No client benchmark in this run (a run of profiles only)" in found
    # no template residue: the host's versions not recorded (not "None"), and no section over nothing recorded
    host = re.search(r"Host: [^\n]*", page06).group(0)
    assert "None" not in host and "not probed" not in host
    assert "driver, CUDA and NCCL not recorded in this run" in page06 and "not probed" not in page06
    for gone in ("Root causes", "What each engine picks, and why", "The fastest backend against the default",
                 "NCCL for decode-sized all-reduces", "The seed case in numbers", "Recommended launch commands"):
        assert f"{gone}¶" not in page06 and gone in page06.split("Left out of this page:", 1)[1]
    assert "A run of profiles only (servebook profile run) records none of what they read" in page06


def test_each_line_is_one_engine_configuration_of_one_card(tmp_path):
    """h200x1-prof profiled three cards with one engine configuration: a line each, its depths counted in MoE layers
    only on a card with routed experts."""
    prof = _copy(tmp_path, data_dir() / "runs" / "h200x1-prof")
    lines = [re.sub(r"<span[^>]*>|</span>", "", x) for x in depths.found_lines(RunStore(prof))]
    llama = next(x for x in lines if x.startswith("- SGLang (its default backend, bf16, CUDA graphs), llama-3.1-8b,"))
    assert "kimi" not in llama and "moonlight" not in llama and ": 2 layers " in llama and "MoE" not in llama
    kimi = next(x for x in lines if x.startswith("- SGLang (its default backend, bf16, CUDA graphs), kimi-k2.5,"))
    assert ": 0 MoE layers " in kimi and "; 1 MoE layer " in kimi and "(2 starts" in kimi


def test_a_profiles_only_run_says_its_host_and_engines_from_its_rows(tmp_path):
    """No probe, no book parameters: the host card, the front page's card and chapter 06's host line read the profile
    rows (GPU name and count, the machines of its units, each engine's version); a book's host is its probe's."""
    from servebook.findings import host_summary
    from servebook.findings.claims import collect

    ref = RunStore(_copy(tmp_path))
    h = host_summary(ref)
    rows = [r for r in ref.rows("profile_runs") if r.get("ok")]
    assert h["gpu"] == "NVIDIA H200" and h["gpu_count"] == 1
    assert h["machines"] == sorted({r["machine"] for r in rows}) and len(h["machines"]) == 6
    assert {(e["engine"], e["version"]) for e in h["engines"]} == {(r["engine"], r["version"]) for r in rows}
    assert "INT4 experts" in h["model"] and h["capability"] is None
    assert host_summary(RunStore(BOOK))["machines"] == [] and book.profiled_host(RunStore(BOOK)) == {}
    said = [c for c in collect(ref).claims if c.chapter == "05"]
    assert said and said[-1].supported and said[-1].text.startswith("No client benchmark in this run (a run of profiles only)")


def test_the_engines_are_compared_at_the_deepest_depth_both_have(ref_before_unit_3):
    """With units 1 and 2, vLLM's ladder ended at 4 MoE layers, SGLang's at 12: the engines' ratios to their own
    machine's anchor are taken at 4 MoE layers for both, never SGLang's 12 against vLLM's 4. Since unit 3 both reach 12."""
    from servebook.profile.anchor import anchor_times, common_depth, deepest_ratios
    from servebook.profile.linearity import moe_layers_of
    from servebook.profile.ranges import SEED_BACKENDS
    from servebook.profile.tables import latest_ok
    from servebook.profile.units_page import units_markdown

    assert common_depth(latest_ok(RunStore(REF).rows("profile_runs")), SEED_BACKENDS) == 12
    before = ref_before_unit_3
    prof = latest_ok(RunStore(before).rows("profile_runs"))
    assert common_depth(prof, SEED_BACKENDS) == 4
    anchors = anchor_times(prof)
    got = deepest_ratios(prof, SEED_BACKENDS)
    for eng, be in SEED_BACKENDS.items():
        mine = [p for p in prof if p["engine"] == eng and p.get("backend") == be and p.get("quant") == "card"
                and moe_layers_of(p) == 4 and p["run_id"] == next(x["run_id"] for x in prof if x["engine"] == eng)]
        assert got[eng] == pytest.approx([p["busy_ms"] / anchors[(p["machine"], p["run_id"])] for p in mine])   # own unit's
    md = units_markdown(RunStore(before))
    assert "at the deepest depth both engines have" in re.sub(r"<[^>]+>", "", md)
    assert common_depth(prof, {"sglang": "triton"}) == 12


def test_the_first_rendering_of_the_reference_book_is_the_reference_and_a_profile_run_is_neither(tmp_path):
    """The banner is written while a book renders: h200x1-trust, rendered for the first time onto a shelf that holds
    only earlier books, is the reference book already (its pages carry no banner). A run of profiles only (h200x1-ref,
    first in REFERENCE_BOOKS) is the shelf's profile run: never the reference, never superseded."""
    from servebook import shelf

    def shelve(name, manifest):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text("<html></html>")
        (tmp_path / name / "run.json").write_text(json.dumps({"manifest": manifest}))

    shelve("h200x1-live", {"parameters": {"engine": "sglang"}})
    assert shelf.reference(tmp_path) is None
    assert shelf.role(tmp_path / "h200x1-trust", whatif=False, profiles=False) == "reference"   # its first rendering
    shelve("h200x1-trust", {"parameters": {"engine": "sglang"}})
    shelve("h200x1-ref", {"run_id": "h200x1-ref"})
    assert shelf.reference(tmp_path) == "h200x1-trust" and shelf.profiles_only(tmp_path / "h200x1-ref")
    assert shelf.role(tmp_path / "h200x1-ref") == "profiles" and shelf.superseded_by(tmp_path / "h200x1-ref") is None
    assert shelf.superseded_by(tmp_path / "h200x1-live") == "h200x1-trust"


def test_the_front_page_answer_of_a_profiles_only_run_is_its_ladders(tmp_path):
    from servebook.frontpage import _units_answer

    store = RunStore(_copy(tmp_path))
    assert _units_answer(RunStore(BOOK)) == ""
    text = re.sub(r"<[^>]+>", "", _units_answer(store))
    assert text.startswith("Decode-step profiles only (chapter 06)")
    assert "SGLang (triton, INT4 experts" in text and "vLLM (TRITON_MLA, INT4 experts" in text
    assert "No measurement succeeded" not in text


def test_each_served_time_line_names_its_machine_and_the_anchor_only_line_says_so():
    """The anchor configuration measured again on unit 2's machine (3.410 ms) beside unit 1's (3.382 ms) read as one
    configuration stated twice with two values: each line names its machine, and a group of anchor rows only says so;
    rows with neither machine nor unit say that, not ``run `None```."""
    lines = [re.sub(r"<span[^>]*>|</span>", "", x) for x in depths.found_lines(RunStore(REF))]
    machines = sorted({p["machine"] for p in RunStore(REF).rows("profile_runs") if p.get("ok")})
    assert len(lines) == 17 and all(sum(f"machine `{m}`" in x for m in machines) == 1 for x in lines)   # one per unit and backend
    # unit 2's, unit 5's (its triton beside flashmla and fa3) and unit 6's (beside vLLM's backends); unit 3 has SGLang's
    # 1-layer slice too
    again = sorted(x for x in lines if "(the anchor configuration only" in x)
    assert len(again) == 3 and all(x.startswith("- SGLang (triton,") for x in again)
    assert [m for x in again for m in machines if f"machine `{m}`" in x] == [
        "gpu-171d973bce7b2ef7", "gpu-a792dd699a33153d", "gpu-da945170f2a21b70"]
    assert "12 MoE layers 3.411" in again[0] and "12 MoE layers 3.378" in again[1] and "12 MoE layers 3.410" in again[2]
    old = [re.sub(r"<span[^>]*>|</span>", "", x) for x in depths.found_lines(RunStore(data_dir() / "runs" / "h200x1-prof"))]
    assert old and all("run `None`" not in x and "machine not recorded" in x for x in old)


def test_the_engines_line_states_the_difference_and_the_margin_it_was_decided_against():
    """At 4 MoE layers the engines' ratios differ by 2.01% of their mean against the 2% margin: "vLLM lower" alone hid
    that the verdict sits at the margin's edge. Both figures recomputed here from the starts rule."""
    from servebook.profile.anchor import deepest_ratios
    from servebook.profile.ranges import SEED_BACKENDS
    from servebook.profile.starts import compare
    from servebook.profile.units_page import units_markdown

    r = deepest_ratios(RunStore(REF).rows("profile_runs"), SEED_BACKENDS)
    c = compare(r["sglang"], r["vllm"])
    mid = (c["a_mean"] + c["b_mean"]) / 2
    md = re.sub(r"<[^>]+>", "", units_markdown(RunStore(REF)))
    assert (f"(they differ by {100 * abs(c['diff']) / mid:.2f}% of their mean, against a margin of "
            f"{100 * c['margin'] / mid:.2f}%, widened by") in md


def test_engines_on_two_machines_are_decided_against_the_margin_widened_by_the_carrys_per_category_spread(ref_before_unit_3):
    """The engines' slices come from two machines, carried by one factor; the anchor configuration measured on both
    shows its kernel categories move by different factors (attention ~1.000, dense GEMM ~1.016): "vLLM lower" at 2.01%
    against a 2.00% margin is within that spread, so not decided. The factors recomputed here from decode_breakdown."""
    from servebook.profile.anchor import carry_spread, deepest_ratios, ratio_gap
    from servebook.profile.ranges import SEED_BACKENDS
    from servebook.profile.tables import latest_ok
    from servebook.profile.units_page import units_markdown

    store = RunStore(ref_before_unit_3)   # units 1 and 2: vLLM's slices at 4 MoE layers on another machine
    refs = [p for p in latest_ok(store.rows("profile_runs")) if p.get("reference")]
    machines = sorted({p["machine"] for p in refs})
    cat: dict = {}
    for p in refs:
        for b in store.rows("decode_breakdown"):
            if (b["label"], b["taken_at"]) == (p["label"], p["taken_at"]) and b["category"] != "gpu idle":
                cat.setdefault(b["category"], {}).setdefault(p["machine"], []).append(b["ms_per_step"])
    mean = {k: {m: sum(v) / len(v) for m, v in by.items()} for k, by in cat.items()}
    busy = sum(m[machines[0]] for m in mean.values())
    factors = {k: m[machines[1]] / m[machines[0]] for k, m in mean.items() if m[machines[0]] >= 0.05 * busy}
    assert {"attention", "moe experts", "dense gemm"} <= set(factors)
    sp = carry_spread(store, SEED_BACKENDS)
    assert sp["factors"] == pytest.approx(factors)
    assert sp["spread_pct"] == pytest.approx(100 * (max(factors.values()) - min(factors.values())))
    r = deepest_ratios(store.rows("profile_runs"), SEED_BACKENDS)
    gap = ratio_gap(r["sglang"], r["vllm"], sp["spread_pct"])
    assert gap["compared"] == "b lower" and gap["diff_pct"] < gap["widened_pct"] and gap["verdict"] == "not decided"
    md = re.sub(r"<[^>]+>", "", units_markdown(store))
    assert "not decided: within the carry's per-category spread" in md and "vLLM lower" not in md
    assert f"spread of {sp['spread_pct']:.2f}% to {gap['widened_pct']:.2f}%" in md
    assert ratio_gap(r["sglang"], r["vllm"], 0.0)["verdict"] == "b lower"   # one machine: compare's verdict


def test_a_model_that_does_not_fit_one_gpu_gets_a_per_gpu_time_and_no_single_stream_rate():
    """h200x1-ref's Kimi-K2.5 predictions are one GPU's compute time of a model one H200 cannot hold: chapter 05 says
    so with the GPUs its weights need (roofline.weights_on_gpus), states no tok/s for it, and says which machines the table's
    predictions come from (four since unit 4)."""
    from servebook.bench.seed import say_prediction_tok_s
    from servebook.profile import findings
    from servebook.roofline import weights_on_gpus

    store = RunStore(REF)
    need = weights_on_gpus("kimi-k2.5", "card", "h200")["gpus_to_hold"]
    assert need > 1
    said = [re.sub(r"<[^>]+>", "", x) for x in findings(store) + say_prediction_tok_s(store)]
    kimi = [x for x in said if x.startswith("- kimi-k2.5")]
    preds = [p for p in store.rows("prediction_check") if p.get("predicted_ms") and p.get("card") == "kimi-k2.5"]
    assert len(kimi) == 2 * len(preds) == 14 and all("per-GPU compute time only" in x and f"the model does not fit one GPU (needs {need}:" in x
                                  and "tok/s" not in x for x in kimi)
    machines = sorted({p["machine"] for p in store.rows("prediction_check") if p.get("predicted_ms")})
    four = [x for x in said if x.startswith("- The predictions above come from four machines")]
    assert len(machines) == 4 and len(four) == 1 and all(f"`{m}`" in four[0] for m in machines)


def test_a_profiles_only_run_says_what_it_is_where_a_book_would_say_nothing_was_measured(tmp_path):
    """Chapter 06's check-yourself, its "Run this yourself" command and the index's software line of a run of profiles
    only: what the run is and how it was made, not "chapters 03 to 05 recorded no measurement" or `servebook book`."""
    import nbformat

    from servebook import pages, render
    from servebook.findings import check_yourself, host_summary

    ref = RunStore(_copy(tmp_path))
    said = " ".join(a for _, a in check_yourself(ref, "06"))
    assert "run of profiles only" in said and "recorded no measurement" not in said
    nb = nbformat.v4.new_notebook()
    cell = pages.run_yourself(nb, ref.manifest, "06", ref.path, whatif=False)
    assert "servebook profile run --plan PLAN.json --runs runs --run-id h200x1-ref" in cell.source
    assert "servebook book" not in cell.source
    assert render._software_row(host_summary(ref), {}) == "<tr><th>software</th><td>not recorded in this run</td></tr>"
    assert "driver" in render._software_row(host_summary(RunStore(BOOK)), RunStore(BOOK).manifest.get("versions") or {})


def test_each_engine_pair_line_of_chapter_06_is_one_pair_of_servers_on_one_machine():
    """Three units hold both engines at 12 MoE layers (units 3, 4 and 6, three machines): one line each, naming its
    machine, and each line's "largest difference" is that pair's own (it once took the largest of every unit's rows
    of the same depth under the first pair's labels). Recomputed here from engine_difference, pair by pair."""
    from servebook.profile.chapter import where_time_goes
    from servebook.profile.ranges import SEED_BACKENDS
    from servebook.profile.tables import engine_difference

    store = RunStore(REF)
    page = where_time_goes(store)
    lines = [re.sub(r"<[^>]+>", "", x) for x in page.splitlines() if x.startswith("- kimi-k2.5, ")]
    rows = engine_difference(store.rows("decode_breakdown"), store.rows("profile_runs"), seeds=SEED_BACKENDS)
    pairs = list(dict.fromkeys((r["a"], r["b"]) for r in rows))
    assert len(lines) == len(pairs) == 5 and sum(": 13 layers " in x or " 13 layers " in x for x in lines) == 3
    machine = {p["label"]: p["machine"] for p in store.rows("profile_runs") if p.get("ok")}
    for a, b in pairs:
        gpu = [r for r in rows if (r["a"], r["b"]) == (a, b)
               and r["category"] not in ("gpu idle", "total (profiled step)", "time per token (unprofiled)")]
        top = max(gpu, key=lambda r: abs(r["diff_ms"]))
        mine = [x for x in lines if f"machine `{machine[a]}`" in x and f" {top['category']} {top['diff_ms']:+.3f} ms)" in x]
        assert len(mine) == 1, (a, b, top["category"], top["diff_ms"])


def test_the_engines_are_set_side_by_side_like_for_like():
    """Units 4 and 6 ran vLLM's default beside its seed backend TRITON_MLA while SGLang ran only its seed's triton: the
    engines' lines pair triton with TRITON_MLA (the default against a forced backend put a backend's difference under
    the engines' name); where both ran their own default (h200x1-live), the defaults stay paired."""
    from servebook.profile.chapter import where_time_goes
    from servebook.profile.ranges import SEED_BACKENDS as SEEDS
    from servebook.profile.tables import _like_for_like, engine_difference

    store = RunStore(REF)
    ref = engine_difference(store.rows("decode_breakdown"), store.rows("profile_runs"), seeds=SEEDS)
    assert {(r["a_backend"], r["b_backend"]) for r in ref} == {("triton", "TRITON_MLA")}
    lines = [x for x in re.sub(r"<[^>]+>", "", where_time_goes(store)).splitlines() if x.startswith("- kimi-k2.5, ")]
    assert len(lines) == 5 and all("SGLang (triton)" in x and "vLLM (TRITON_MLA)" in x for x in lines)   # the page's
    live = RunStore(data_dir() / "runs" / "h200x1-live")
    assert {r["b_backend"] for r in engine_difference(live.rows("decode_breakdown"), live.rows("profile_runs"), seeds=SEEDS)} \
        <= {"FLASH_ATTN_MLA", "FLASH_ATTN"}          # vLLM's own choice, as its log named it, beside SGLang's own
    s = [{"backend": "triton"}, {"backend": "auto"}]
    v = [{"backend": "auto"}, {"backend": "TRITON_MLA"}]
    assert _like_for_like(s, v, "sglang", "vllm", SEEDS) == (s[1], v[0])                  # both defaults
    assert _like_for_like(s[:1], v, "sglang", "vllm", SEEDS) == (s[0], v[1])              # both seed backends
    assert _like_for_like(s[:1], v, "sglang", "vllm", None) == (s[0], v[0])               # no seeds named: as before
    assert _like_for_like([{"backend": "fa3"}], v, "sglang", "vllm", SEEDS) == ({"backend": "fa3"}, v[0])   # neither
