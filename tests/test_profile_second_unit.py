"""A second recording unit of one engine in the reference run (issue #39's next loan: vLLM's whole ladder recorded again,
merged beside the partial unit 2). Every reader of an engine's INT4 ladder reads one unit, the one the rule picks
(``servebook.profile.ladders``: the unit reaching the most MoE layers), and never pools starts of two units; chapter
06 lists the other unit as evidence. A scratch copy of data/runs/h200x1-ref's tables (no traces) and a SYNTHETIC unit 3
built from unit 2's own rows (below): no committed file is written."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from servebook.paths import data_dir
from servebook.profile import seed, units
from servebook.profile.anchor import anchor_times, common_depth, deepest_ratios, deepest_starts
from servebook.profile.ladders import ladder_units
from servebook.profile.linearity import moe_layers_of, write_linearity
from servebook.profile.slices import select_slices
from servebook.profile.tables import latest_ok, starts_of
from servebook.profile.units_page import units_markdown
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-ref"
WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
UNIT2 = "h200x1-ref-vllm"
UNIT3, MACHINE3 = "h200x1-ref-vllm2", "gpu-5e7e7e7e00000003"   # SYNTHETIC: no machine of that identity exists
TIMES = ("busy_ms", "tpot_ms", "step_ms", "idle_ms", "kernel_ms", "overlap_ms", "ms_per_step", "tpot_unprofiled_ms")
DAY = 86400.0
UNIT2_LOG = REF / "logs" / UNIT2 / "device-ref.log"


def _scratch(path, before):
    """The reference run's recorded tables as they stood before the real unit 3 was merged (``before``: the
    ref_before_unit_3 fixture's copy; no traces, no logs but unit 2's device log): a copy to merge the synthetic unit 3
    into."""
    path.mkdir()
    for name in ("manifest.json", "profile_runs.jsonl", "decode_breakdown.jsonl", "memory_bandwidth.jsonl"):
        shutil.copyfile(before / name, path / name)
    (path / "logs" / UNIT2).mkdir(parents=True)
    shutil.copyfile(UNIT2_LOG, path / "logs" / UNIT2 / "device-ref.log")
    (path / "traces").mkdir()
    (path / "traces" / "vllm_kimi-3L_int4_TRITON_MLA.excerpt.json").write_text(_excerpt(UNIT2))   # stands for unit 2's
    store = RunStore.at(path)
    write_linearity(store)
    return store


def _excerpt(unit: str) -> str:
    """A trace excerpt without kernels (no kernel floor), marked with the unit it stands for."""
    return json.dumps({"unit": unit, "steps": 1, "kernels": []})


def _scaled(r: dict, f: float) -> dict:
    return {**r, **{k: r[k] * f for k in TIMES if isinstance(r.get(k), (int, float))}}


def _deeper(r4: dict, per_layer: dict, label: str) -> dict:
    """SYNTHETIC 12-MoE-layer row from a 4-MoE-layer one: + 8 x one MoE layer (per field, from unit 2's 2 -> 4 slope)."""
    return {**r4, "label": label, "layers": 13, **{k: r4[k] + 8 * per_layer[k] for k in per_layer if r4.get(k) is not None}}


def _unit3(path, run_id=UNIT3, machine=MACHINE3, factor=1.02):
    """SYNTHETIC unit 3: unit 2's rows (its vLLM ladder and its anchor rows, labels as recorded there) on another
    machine and run, a day later, every time x ``factor``, and vLLM's 12-MoE-layer slice (2 starts) made from unit 2's
    4-MoE-layer starts + 8 x unit 2's own per-layer GPU time (the slope between its 2 and 4 MoE layers)."""
    src = RunStore.at(REF)
    prof = [p for p in src.rows("profile_runs") if p.get("run_id") == UNIT2]
    bd = [b for b in src.rows("decode_breakdown") if b.get("run_id") == UNIT2]
    mean = lambda k, moe: (lambda v: sum(v) / len(v))([p[k] for p in prof if p["engine"] == "vllm"  # noqa: E731
                                                       and moe_layers_of(p) == moe])
    slope = {k: (mean(k, 4) - mean(k, 2)) / 2 for k in ("busy_ms", "tpot_ms", "step_ms", "kernel_ms")}
    deep = [_deeper(p, slope, p["label"].replace("kimi-5L", "kimi-13L")) for p in prof if p["engine"] == "vllm"
            and moe_layers_of(p) == 4]
    first4 = {b["category"]: b for b in bd if b["label"] == "vllm kimi-5L int4 TRITON_MLA"}
    first2 = {b["category"]: b["ms_per_step"] for b in bd if b["label"] == "vllm kimi-3L int4 TRITON_MLA"}
    deep_bd = [{**b, "label": "vllm kimi-13L int4 TRITON_MLA", "layers": 13, "taken_at": deep[0]["taken_at"],
                "ms_per_step": b["ms_per_step"] + (0.0 if c == "gpu idle" else 8 * (b["ms_per_step"] - first2[c]) / 2)}
               for c, b in first4.items()]
    own = lambda lab: lab.replace(f" ({UNIT2})", "")   # noqa: E731  the labels as unit 2 recorded them
    move = lambda r: {**_scaled(r, factor), "label": own(r["label"]), "machine": machine, "run_id": run_id,  # noqa: E731
                      "taken_at": r["taken_at"] + DAY + (0.5 if r in deep or r in deep_bd else 0.0)}
    rows = [{k: v for k, v in move(p).items() if k not in ("trace", "kernel_table")} for p in prof + deep]
    store = RunStore.at(path)
    store.replace("profile_runs", rows)
    store.replace("decode_breakdown", [move(b) for b in bd + deep_bd])
    store.replace("memory_bandwidth", [{**b, "machine": machine, "run_id": run_id, "read_tbs": b["read_tbs"] / factor}
                                       for b in src.rows("memory_bandwidth") if b.get("run_id") == UNIT2])
    (path / "logs").mkdir(parents=True)
    (path / "logs" / "device-ref.log").write_text(f"synthetic unit {run_id}\n")
    (path / "traces").mkdir()
    for p in rows:
        (path / "traces" / f"{p['label'].replace(' ', '_')}.excerpt.json").write_text(_excerpt(run_id))
    return store


@pytest.fixture
def merged(tmp_path, ref_before_unit_3):
    dest = _scratch(tmp_path / "h200x1-ref", ref_before_unit_3)
    got = units.merge_unit(dest, _unit3(tmp_path / UNIT3))
    write_linearity(dest)
    return dest, got


def _run_of(label: str, store) -> str:
    return next(p["run_id"] for p in latest_ok(store.rows("profile_runs")) if p["label"] == label)


# -- the ladder, its linearity, its deepest starts, the engines' comparison and the projection read unit 3 -----------
def test_the_vllm_ladder_is_read_from_the_unit_reaching_the_most_moe_layers(merged):
    dest, _ = merged
    prof = dest.rows("profile_runs")
    sl = select_slices(prof, "vllm", backend="TRITON_MLA")
    assert (sl["shallow"]["run_id"], sl["deep"]["run_id"], sl["ladder"]) == (UNIT3, UNIT3, (1, 12))
    assert any(f"read from unit {UNIT3}" in n and f"not pooled with unit {UNIT2}" in n for n in sl["notes"])
    deepest = deepest_starts(latest_ok(prof), "vllm", "TRITON_MLA")
    assert {(p["run_id"], moe_layers_of(p)) for p in deepest} == {(UNIT3, 12)} and len(deepest) == 2
    assert common_depth(latest_ok(prof), seed.SEED_BACKENDS) == 12   # SGLang's 12 against unit 3's 12, not 4
    anchor = anchor_times(prof)
    ratios = deepest_ratios(prof, seed.SEED_BACKENDS)
    assert ratios["vllm"] == pytest.approx([p["busy_ms"] / anchor[(MACHINE3, UNIT3)] for p in deepest])
    # SGLang's ladder stays unit 1's: unit 3's anchor rows (renamed) are no second SGLang ladder
    assert select_slices(prof, "sglang", backend="triton")["deep"]["run_id"] == "h200x1-ref"


def test_the_seed_projection_reads_unit_3_carried_by_its_own_anchor(merged):
    dest, _ = merged
    tables = seed.seed_tables(RunStore.at(WHATIF), reference=dest.path)
    v = next(r for r in tables["seed_projection"] if r["engine"] == "vllm" and r["category"] == "total")
    assert (v["machine"], v["ladder_from"], v["ladder_to"], v["carried_from"]) == (MACHINE3, 1, 12, MACHINE3)
    assert {_run_of(lab, dest) for lab in v["from_labels"]} == {UNIT3}
    anchor = anchor_times(dest.rows("profile_runs"))
    assert v["carried_factor"] == pytest.approx(anchor[("gpu-4538749d407c51d4", "h200x1-ref")] / anchor[(MACHINE3, UNIT3)])


# -- no pairing across the two vLLM units --------------------------------------------------------------------------
def test_no_linearity_row_or_start_spans_two_vllm_units(merged):
    dest, _ = merged
    lin = [r for r in dest.rows("slice_linearity") if r["engine"] == "vllm"]
    assert {r["run_id"] for r in lin} == {UNIT2, UNIT3}   # each unit's ladder derived on its own
    for r in lin:
        assert {_run_of(lab, dest) for lab in r.get("labels", [])} <= {r["run_id"]}
    assert [r["depths"] for r in lin if r["run_id"] == UNIT3 and r["kind"] == "step"] == ["1->2", "2->4", "4->12"]
    assert [r["depths"] for r in lin if r["run_id"] == UNIT2 and r["kind"] == "step"] == ["1->2", "2->4"]
    prof = dest.rows("profile_runs")
    for p in latest_ok(prof):
        if p["engine"] == "vllm":
            assert {s["run_id"] for s in starts_of(prof, p["label"])} == {p["run_id"]}, p["label"]


# -- chapter 06 names the unit read and lists the other as evidence --------------------------------------------------
def test_chapter_06_names_unit_3_and_lists_unit_2_as_evidence_every_figure_recomputed(merged):
    import mistune

    from servebook import quantities as _all  # noqa: F401  every chapter's quantities registered
    from servebook import stated
    from servebook.stated.registry import expected
    from servebook.stated.tags import stated_on

    dest, _ = merged
    md = units_markdown(dest)
    words = re.sub(r"<span[^>]*>|</span>", "", md)
    vllm = next(line for line in words.splitlines() if line.startswith("- vLLM"))
    assert f"machine `{MACHINE3}`" in vllm and f"Read from unit `{UNIT3}` by the rule" in vllm
    assert "reaches the most MoE layers" in vllm and "never pooled" in vllm
    other = next(line for line in words.splitlines() if line.startswith(f"  - unit `{UNIT2}`"))
    assert "machine `gpu-da945170f2a21b70`" in other and "0.2060 ms between 1 and 2 MoE layers" in other
    assert "at 4 MoE layers, the deepest depth both units have" in other and f"for unit `{UNIT3}`" in other
    assert "(12 MoE layers): the slice's GPU busy time" in words   # the engines compared at unit 3's depth
    assert "- SGLang" in words and "Read from unit" not in words.split("- vLLM")[0]   # SGLang: one ladder, no rule words
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    tags = stated_on(md)
    assert {t.name for t in tags} >= {"other_unit_ratio", "other_unit_moe_layers", "linearity_per_layer_ms"}
    for t in tags:
        assert expected(dest, t.name, t.of) == pytest.approx(t.value), (t.name, t.of)


# -- merge_unit: a second unit of an engine, merged twice, recorded under the same RUN_ID -------------------------------
def test_merging_unit_3_twice_adds_nothing_and_replaces_no_other_unit_s_file(merged, tmp_path):
    dest, got = merged
    assert got["profile_runs"] == 12   # unit 2's 10 rows (its anchor and vLLM's ladder) + 2 SYNTHETIC 12-layer starts
    assert got["renamed"]["vllm kimi-2L int4 TRITON_MLA"] == f"vllm kimi-2L int4 TRITON_MLA ({UNIT3})"
    assert got["renamed"]["sglang kimi-13L int4 triton"] == f"sglang kimi-13L int4 triton ({UNIT3})"
    assert "vllm kimi-13L int4 TRITON_MLA" not in got["renamed"]   # a label the run did not hold keeps its name
    tables = {t: dest.rows(t, withdrawn=True, executions="all") for t in units.UNIT_TABLES}
    again = units.merge_unit(dest, RunStore.at(tmp_path / UNIT3))
    assert {t: again[t] for t in units.UNIT_TABLES} == {t: 0 for t in units.UNIT_TABLES}
    assert {t: dest.rows(t, withdrawn=True, executions="all") for t in units.UNIT_TABLES} == tables
    traces = dest.path / "traces"
    assert json.loads((traces / "vllm_kimi-3L_int4_TRITON_MLA.excerpt.json").read_text())["unit"] == UNIT2
    assert json.loads((traces / f"vllm_kimi-3L_int4_TRITON_MLA_({UNIT3}).excerpt.json").read_text())["unit"] == UNIT3
    assert (dest.path / "logs" / UNIT2 / "device-ref.log").read_text() == UNIT2_LOG.read_text()   # unit 2's own log
    assert (dest.path / "logs" / UNIT3 / "device-ref.log").read_text() == f"synthetic unit {UNIT3}\n"
    labels = [p["label"] for p in dest.rows("profile_runs")]
    assert len(labels) == len(set(labels))
    assert got["unit"] == UNIT3


def test_a_later_unit_recorded_under_unit_2_s_run_id_merges_under_a_dated_id(tmp_path, ref_before_unit_3):
    dest = _scratch(tmp_path / "h200x1-ref", ref_before_unit_3)
    unit = _unit3(tmp_path / "again" / UNIT2, run_id=UNIT2)   # the plan's RUN_ID used again on the next loan
    got = units.merge_unit(dest, unit)
    assert got["unit"] == f"{UNIT2}-20261206" and got["profile_runs"] == 12
    assert (dest.path / "logs" / UNIT2 / "device-ref.log").read_text() == UNIT2_LOG.read_text()   # unit 2's log kept
    assert (dest.path / "logs" / f"{UNIT2}-20261206" / "device-ref.log").read_text() == f"synthetic unit {UNIT2}\n"
    mine = [p for p in dest.rows("profile_runs") if p.get("recorded_run_id") == UNIT2]
    assert len(mine) == 12 and {p["run_id"] for p in mine} == {f"{UNIT2}-20261206"}
    assert units.merge_unit(dest, unit)["profile_runs"] == 0   # the same unit again: the same id, nothing added
    sl = select_slices(dest.rows("profile_runs"), "vllm", backend="TRITON_MLA")
    assert (sl["deep"]["run_id"], sl["ladder"]) == (f"{UNIT2}-20261206", (1, 12))


# -- the rule's order, on its own ------------------------------------------------------------------------------------
def test_the_rule_orders_units_by_depth_then_depths_then_starts_then_recording():
    def row(moe, run, start=1, at=0.0, machine="gpu-x"):
        return {"label": f"vllm {moe} {run} {start}", "engine": "vllm", "backend": "TRITON_MLA", "quant": "card",
                "mode": "graph", "card": "kimi-k2.5", "layers": moe + 1, "dense_layers": 1, "ok": True,
                "role": "slice" if start == 1 else "repeat", "machine": machine, "run_id": run, "taken_at": at, "busy_ms": 1.0}

    def first(rows):
        return ladder_units(rows, "vllm", "TRITON_MLA")[0]["run_id"]

    a = [row(1, "a"), row(4, "a")]
    assert first(a + [row(1, "b"), row(12, "b")]) == "b"                       # reaches more MoE layers
    assert first(a + [row(12, "c")]) == "a"                                     # one depth is no ladder
    assert first([row(1, "a"), row(12, "a"), row(1, "b"), row(4, "b"), row(12, "b")]) == "b"   # more depths
    assert first([row(1, "a"), row(12, "a"), row(1, "b"), row(12, "b"), row(12, "b", 2)]) == "b"   # more starts
    assert first([row(1, "a", at=5.0), row(12, "a", at=5.0), row(1, "b", at=1.0), row(12, "b", at=1.0)]) == "a"  # later
    assert first([row(1, "a", machine="gpu-x"), row(4, "a", machine="gpu-y")] + [row(1, "b"), row(2, "b")]) == "b"
