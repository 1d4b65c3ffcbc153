"""The reference recording's units (issue #39 item 7): the seed projection on INT4 depth ladders, its one-line refusal
where an engine's unit is missing, units merged without replacing each other's reference rows, and engines of two
machines compared only through the reference configuration. Small hand-built rows (tmp_path), no committed data."""

from __future__ import annotations

import json

import pytest

from servebook.paths import data_dir
from servebook.profile import seed, units
from servebook.profile.anchor import anchor_times, on_anchor_machine
from servebook.profile.machines import MachineMismatch
from servebook.profile.projection import h200_parts, kernel_floors
from servebook.profile.slices import select_slices
from servebook.profile.tables import starts_of
from servebook.profile.units_page import units_markdown
from servebook.results import RunStore

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
CATS = {"attention": 0.02, "moe experts": 0.07, "dense gemm": 0.1, "moe routing": 0.01, "norm/rope/elementwise": 0.03}


def _prof(engine, moe, machine, run="unit-a", start=1, reference=False, scale=1.0):
    backend = {"sglang": "triton", "vllm": "TRITON_MLA"}[engine]
    label = f"{engine} kimi-{moe + 1}L int4 {backend}" + (f" start {start}" if start > 1 else "")
    busy = scale * (0.9 + 0.2 * moe)
    return {"label": label, "engine": engine, "backend": backend, "mode": "graph", "quant": "card", "card": "kimi-k2.5",
            "role": "slice" if start == 1 else "repeat", "ok": True, "layers": moe + 1, "dense_layers": 1,
            "busy_ms": busy, "step_ms": busy + 0.3, "tpot_ms": busy + 0.2, "machine": machine, "run_id": run,
            "taken_at": 1796390000.0 + 100 * moe + start + (0 if run == "unit-a" else 86400), "version": "0.5.16",
            **({"reference": True} if reference else {})}


def _breakdown(p):
    k = p["layers"] - 1
    return [{"label": p["label"], "taken_at": p["taken_at"], "engine": p["engine"], "category": c,
             "ms_per_step": (0.5 + k) * ms * p["busy_ms"] / (0.9 + 0.2 * k)} for c, ms in CATS.items()]


def _run(path, profiles, with_logs=False):
    store = RunStore.at(path)
    store.replace("profile_runs", profiles)
    store.replace("decode_breakdown", [b for p in profiles for b in _breakdown(p)])
    store.replace("memory_bandwidth", [{"machine": m, "read_tbs": 4.2, "run_id": path.name}
                                       for m in sorted({p["machine"] for p in profiles})])
    (path / "traces").mkdir(exist_ok=True)
    for p in profiles:
        slug = p["label"].replace(" ", "_")
        (path / "traces" / f"{slug}.excerpt.json").write_text(json.dumps({"label": p["label"], "steps": 1, "kernels": []}))
    if with_logs:
        (path / "logs").mkdir(exist_ok=True)
        (path / "logs" / "profile-x.log").write_text(f"{path.name}\n")
    return store


def _ladder_a():
    return [_prof("sglang", 1, "gpu-a"), _prof("sglang", 3, "gpu-a"), _prof("sglang", 12, "gpu-a", reference=True),
            _prof("sglang", 12, "gpu-a", start=2, reference=True)]


def _unit_b(ratio=1.05):
    return ([_prof("sglang", 12, "gpu-b", run="unit-b", reference=True, scale=ratio)]
            + [_prof("vllm", k, "gpu-b", run="unit-b", scale=0.9 * ratio) for k in (1, 3, 12)])


# -- an INT4 depth ladder is projected per MoE layer ----------------------------------------------------------------
def test_an_int4_ladder_gives_one_moe_layer_per_layer_between_its_depths():
    rows = _ladder_a()
    sl = select_slices(rows, "sglang", backend="triton")
    assert (sl["shallow"]["layers"], sl["deep"]["layers"], sl["ladder"]) == (2, 13, (1, 12))
    assert sl["int4"] is None and "INT4 depth ladder" in sl["notes"][0]
    parts = h200_parts([b for p in rows for b in _breakdown(p)], sl, expert_bytes_ratio=0.27)
    for cat, ms in CATS.items():   # breakdown: (0.5 + k) x ms at k MoE layers: one layer = ms, fixed = 0.5 x ms
        assert parts[cat]["moe"] == pytest.approx(ms) and parts[cat]["fixed"] == pytest.approx(0.5 * ms), cat
    assert "INT4 experts in both slices" in parts["moe experts"]["how"]   # no bytes ratio on INT4 slices


def test_the_ladder_kernel_floor_counts_one_layer_s_kernels():
    k = {"name": "void flash_fwd_kernel<>", "cat": "kernel", "dur": 2.0}
    ex = {"sglang kimi-2L int4 triton": {"steps": 1, "kernels": [k] * 3},    # 2 per step + 1 per MoE layer
          "sglang kimi-13L int4 triton": {"steps": 1, "kernels": [k] * 14}}
    sl = select_slices(_ladder_a(), "sglang", backend="triton")
    fl = kernel_floors(ex, sl)["attention"]
    assert fl["moe_ms"] == pytest.approx(2.0e-3) and fl["fixed_ms"] == pytest.approx(4.0e-3)


# -- the refusal: one line naming what is missing -------------------------------------------------------------------
def test_a_reference_run_without_the_vllm_unit_is_refused_in_one_line(tmp_path):
    _run(tmp_path / "ref", _ladder_a())
    with pytest.raises(seed.MissingReferenceProfiles) as exc:
        seed.seed_tables(RunStore.at(WHATIF), reference=tmp_path / "ref")
    msg = str(exc.value)
    assert "\n" not in msg and "not projected from profile run ref" in msg
    assert "vllm TRITON_MLA" in msg and "profile_runs" in msg and "tools/gpu-stage/ref-plan-vllm.json" in msg
    assert "sglang" not in msg.split("vllm TRITON_MLA")[0].split(":", 1)[1]   # SGLang's ladder is there: not named


def test_a_unit_merged_by_hand_is_refused_not_read_as_a_shallower_ladder(tmp_path):
    rows = _ladder_a() + [{**r, "run_id": "unit-a"} for r in _unit_b()]   # unit B's reference row under A's label
    _run(tmp_path / "ref", rows)
    gaps = seed.missing_profiles(RunStore.at(tmp_path / "ref"))
    assert any("sglang kimi-13L int4 triton" in g and "merge-unit" in g for g in gaps)


# -- units merged: each keeps its reference rows ----------------------------------------------------------------------
def test_merge_unit_renames_the_labels_the_run_holds_and_copies_their_files(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a(), with_logs=True)
    unit = _run(tmp_path / "unit-b", _unit_b(), with_logs=True)
    got = units.merge_unit(dest, unit)
    assert got["renamed"] == {"sglang kimi-13L int4 triton": "sglang kimi-13L int4 triton (unit-b)"}
    assert got["profile_runs"] == 4 and got["decode_breakdown"] == 4 * len(CATS) and got["memory_bandwidth"] == 1
    labels = [p["label"] for p in dest.rows("profile_runs")]
    assert len(labels) == len(set(labels)) == 8
    assert (tmp_path / "ref" / "traces" / "sglang_kimi-13L_int4_triton_(unit-b).excerpt.json").is_file()
    assert (tmp_path / "ref" / "logs" / "unit-b" / "profile-x.log").read_text() == "unit-b\n"
    assert (tmp_path / "ref" / "logs" / "profile-x.log").read_text() == "ref\n"
    again = units.merge_unit(dest, unit)   # merged twice: nothing added
    assert again["profile_runs"] == again["decode_breakdown"] == 0
    # SGLang's ladder still ends at its own 12-layer slice; another unit's start of it is no start of this server
    assert select_slices(dest.rows("profile_runs"), "sglang", backend="triton")["deep"]["machine"] == "gpu-a"
    assert {p["machine"] for p in starts_of(dest.rows("profile_runs"), "sglang kimi-13L int4 triton")} == {"gpu-a"}


def test_merge_unit_refuses_a_unit_without_the_reference_configuration(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a())
    unit = _run(tmp_path / "unit-b", [r for r in _unit_b() if not r.get("reference")])
    with pytest.raises(Exception, match="anchor configuration"):
        units.merge_unit(dest, unit)


# -- engines of two machines: only through the reference configuration ----------------------------------------------
def test_engines_of_two_units_are_carried_by_the_reference_ratio(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a())
    units.merge_unit(dest, _run(tmp_path / "unit-b", _unit_b(ratio=1.05)))
    src, notes = on_anchor_machine(dest, seed.SEED_BACKENDS)
    (note,) = notes
    assert "vLLM's profiles, measured on machine gpu-b, carried to gpu-a" in note["carried"]
    assert "an assumption" in note["carried"] and (note["carried_from"], note["carried_to"]) == ("gpu-b", "gpu-a")
    v = {p["label"]: p for p in src.rows("profile_runs") if p["engine"] == "vllm"}
    raw = {p["label"]: p for p in dest.rows("profile_runs") if p["engine"] == "vllm"}
    ref_a = (2 * (0.9 + 0.2 * 12)) / 2
    ref_b = 1.05 * (0.9 + 0.2 * 12)
    assert note["carried_factor"] == pytest.approx(ref_a / ref_b)
    for label, p in v.items():
        assert p["busy_ms"] == pytest.approx(raw[label]["busy_ms"] * ref_a / ref_b)   # machine B's 5% taken out
    assert all(p["busy_ms"] == raw_p["busy_ms"] for p, raw_p in zip(
        [p for p in src.rows("profile_runs") if p["engine"] == "sglang"],
        [p for p in dest.rows("profile_runs") if p["engine"] == "sglang"]))
    # the subtraction stays inside a machine: vLLM's ladder from gpu-b only, SGLang's from gpu-a only
    assert select_slices(src.rows("profile_runs"), "vllm", backend="TRITON_MLA")["shallow"]["machine"] == "gpu-b"


def test_the_page_s_ratio_is_the_carried_time_over_the_anchor_machine_s_reference(tmp_path):
    """The carry factor (on_anchor_machine) and chapter 06's reference_ratio read one anchor time per unit: vLLM's
    deepest slice carried to gpu-a, over gpu-a's anchor, is the ratio the page prints. A superseded anchor row (a label
    profiled again) and a third machine's anchor are there to pull the two apart if either read them differently."""
    from servebook.profile.quantities import _reference_ratios

    stale = {**_prof("sglang", 12, "gpu-b", run="unit-b", reference=True, scale=1.4), "taken_at": 1796000000.0}
    other = {**_prof("sglang", 12, "gpu-c", run="unit-c", reference=True, scale=0.7),
             "label": "sglang kimi-13L int4 triton (unit-c)"}
    store = _run(tmp_path / "ref", _ladder_a() + [other])
    units.merge_unit(store, _run(tmp_path / "unit-b", [stale] + _unit_b(ratio=1.05) + [
        _prof("vllm", 12, "gpu-b", run="unit-b", start=2, scale=0.9 * 1.05 * 1.02)]))
    src, (note,) = on_anchor_machine(store, seed.SEED_BACKENDS)
    anchor = anchor_times(store.rows("profile_runs"))
    a, b = anchor[("gpu-a", "unit-a")], anchor[("gpu-b", "unit-b")]   # a unit: (machine, run_id)
    assert note["carried_factor"] == pytest.approx(a / b)
    assert b == pytest.approx(1.05 * (0.9 + 0.2 * 12))   # the latest row of the label, not the stale one
    deep = [p["busy_ms"] for p in src.rows("profile_runs") if p["engine"] == "vllm" and p["layers"] == 13]
    page = _reference_ratios(store)
    assert page["vllm"] == pytest.approx(sum(deep) / len(deep) / a)
    assert page["vllm"] == pytest.approx(0.9 * 1.01) and _reference_ratios(store, "starts") == {"sglang": 2, "vllm": 2}


def test_a_unit_without_its_reference_cannot_be_compared(tmp_path):
    rows = _ladder_a() + [r for r in _unit_b() if not r.get("reference")]
    _run(tmp_path / "ref", rows)
    with pytest.raises(MachineMismatch, match="no anchor configuration measured on gpu-b"):
        on_anchor_machine(RunStore.at(tmp_path / "ref"), seed.SEED_BACKENDS)
    with pytest.raises(seed.MissingReferenceProfiles, match="not projected"):
        seed.seed_tables(RunStore.at(WHATIF), reference=tmp_path / "ref")


def test_rows_of_two_machines_in_one_ladder_are_never_subtracted():
    rows = [_prof("vllm", 1, "gpu-b", run="u"), _prof("vllm", 12, "gpu-c", run="u")]
    sl = select_slices(rows, "vllm", backend="TRITON_MLA")
    assert sl["deep"] is None and sl["ladder"] is None   # not taken across machines: missing, so the verdict refuses


# -- chapter 06 of the reference book: each engine's ladder, the engines through the reference ----------------------
def test_chapter_06_reads_each_unit_s_ladder_and_names_the_missing_one(tmp_path):
    import re

    from servebook.profile.chapter import where_time_goes
    from servebook.profile.linearity import write_linearity

    def text(store):
        write_linearity(store)
        return re.sub(r"<span[^>]*>|</span>", "", where_time_goes(store))

    dest = _run(tmp_path / "ref", _ladder_a())
    words = text(dest)
    assert "SGLang (triton, INT4 experts, machine `gpu-a`), GPU busy per MoE layer: 0.2000 ms between 1 and 3" in words
    assert "vLLM (TRITON_MLA): no depth ladder in this run; `tools/gpu-stage/ref-plan-vllm.json` records it" in words
    units.merge_unit(dest, _run(tmp_path / "unit-b", _unit_b(ratio=1.05) + [
        _prof("vllm", 12, "gpu-b", run="unit-b", start=2, scale=0.9 * 1.05 * 1.001)]))
    words = text(dest)
    assert "vLLM (TRITON_MLA, INT4 experts, machine `gpu-b`), GPU busy per MoE layer: 0.1890 ms" in words
    assert "measured on two machines, only through each machine's anchor configuration" in words
    assert "1.000 x its machine's anchor for SGLang (2 starts) and 0.900 x its machine's anchor for vLLM (2 starts): vLLM lower" in words


def test_the_verdict_on_two_units_holds_its_words_and_tags_every_figure(tmp_path):
    import mistune

    from servebook import stated
    from servebook.profile.kernels import CATEGORIES
    from servebook.profile.verdict import verdict_markdown

    global CATS
    full = {**CATS, **{c: 0.004 for c in CATEGORIES if c not in CATS}}
    dest = _run(tmp_path / "ref", [])
    old, CATS = CATS, {c: 0.0 for c in CATEGORIES if c != "sampling"}   # a unit whose profiles lack a category
    try:
        units.merge_unit(_run(tmp_path / "ref", _ladder_a()), _run(tmp_path / "unit-b", _unit_b()))
        with pytest.raises(seed.MissingReferenceProfiles, match="no value for sampling"):
            seed.seed_tables(RunStore.at(WHATIF), reference=tmp_path / "ref")
        CATS = full
        dest = _run(tmp_path / "ref2", _ladder_a())
        units.merge_unit(dest, _run(tmp_path / "unit-b2", _unit_b(ratio=1.05)))
        tables = seed.seed_tables(RunStore.at(WHATIF), reference=tmp_path / "ref2")
    finally:
        CATS = old
    md = verdict_markdown(tables)
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    assert "How sure: a hypothesis" in md and "What settles it" in md
    assert "compared only through the anchor configuration each machine measured" in md
    assert "an assumption: that the machines differ by one factor in every kernel" in md
    v = next(r for r in tables["seed_projection"] if r["engine"] == "vllm" and r["category"] == "total")
    assert v["carried_factor"] == pytest.approx((0.9 + 0.2 * 12) / (1.05 * (0.9 + 0.2 * 12)))
    assert (v["ladder_from"], v["ladder_to"], v["machine"]) == (1, 12, "gpu-b")


def test_a_unit_without_its_own_bandwidth_row_is_named(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a())
    unit = _run(tmp_path / "unit-b", _unit_b())
    unit.replace("memory_bandwidth", [])
    units.merge_unit(dest, unit)
    (gap,) = seed.missing_profiles(dest)
    assert gap.startswith("vllm TRITON_MLA: table memory_bandwidth holds no row of its slices' machine gpu-b")


def test_a_refused_verdict_leaves_no_table_of_the_earlier_profile_run(tmp_path):
    import shutil

    run = tmp_path / "whatif"
    shutil.copytree(WHATIF, run)
    store = RunStore.at(run)
    assert store.rows("seed_projection")
    _run(tmp_path / "ref", _ladder_a())
    with pytest.raises(seed.MissingReferenceProfiles):
        seed.record_seed(store, reference=tmp_path / "ref")
    assert all(store.rows(t) == [] for t in seed.SEED_TABLES)


# -- review mends: a machine known beside one unknown, a carried engine's bandwidth, a live book's profiles -----------
def test_a_slice_without_a_machine_beside_one_with_is_refused_not_taken_as_one_machine(tmp_path):
    rows = _ladder_a() + [{**p, "machine": None} for p in _unit_b() if p["engine"] == "vllm"]
    _run(tmp_path / "ref", [p for p in rows if p["machine"]])
    store = RunStore.at(tmp_path / "ref")
    store.replace("profile_runs", rows)
    with pytest.raises(MachineMismatch, match="vLLM: none recorded.*cannot be compared"):
        on_anchor_machine(store, seed.SEED_BACKENDS)
    old = [{k: v for k, v in p.items() if k != "machine"} for p in rows]   # rows from before identities: read as one run
    store.replace("profile_runs", old)
    assert on_anchor_machine(store, seed.SEED_BACKENDS) == (store, [])


def test_a_carried_engine_s_measured_bandwidth_is_the_anchor_machine_s(tmp_path):
    """vLLM's times carried to gpu-a are divided by gpu-a's measured bandwidth: machine B's own row moves nothing."""
    from servebook.profile.projection import project

    def vllm_total(read_b):
        dest = _run(tmp_path / f"ref-{read_b}", _ladder_a())
        unit = _run(tmp_path / f"unit-b-{read_b}", _unit_b(ratio=1.1))
        unit.replace("memory_bandwidth", [{"machine": "gpu-b", "read_tbs": read_b, "run_id": "unit-b"}])
        units.merge_unit(dest, unit)
        src, _ = on_anchor_machine(dest, seed.SEED_BACKENDS)
        assert {p.get("carried_to_machine") for p in src.rows("profile_runs") if p["engine"] == "vllm"} == {"gpu-a"}
        rows = project(src, "vllm", backend="TRITON_MLA", bandwidth="measured", allreduce_us=10.0, allreduce_source="test")
        return next(r for r in rows if r["category"] == "total")["predicted_ms"]

    assert vllm_total(4.2) == pytest.approx(vllm_total(3.78))


def test_a_live_book_s_profiles_with_machines_are_no_units_account(tmp_path):
    """Chapter 05 of a new GPU book stamps every profile with its machine; without an anchor configuration in the run
    chapter 06 says nothing of depth ladders."""
    p = {**_prof("sglang", 1, "gpu-abc"), "label": "sglang llama-8b", "card": "llama-3.1-8b", "quant": None}
    store = _run(tmp_path / "live", [p])
    assert units_markdown(store) == ""
    assert "no depth ladder" in units_markdown(_run(tmp_path / "ref", _ladder_a()))
