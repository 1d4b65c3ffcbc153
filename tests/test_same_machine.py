"""The engines compared within one recording unit (one machine, no carry): h200x1-ref's unit 3 measured vLLM's
12-MoE-layer slice beside SGLang's (the anchor configuration); chapter 06 leads with that comparison, the one
through each unit's anchor after it as evidence."""

from __future__ import annotations

from servebook.paths import data_dir
from servebook.profile.anchor import common_depth
from servebook.profile.ranges import SEED_BACKENDS
from servebook.profile.same_machine import same_machine as _same, same_machine_line
from servebook.profile.tables import latest_ok
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-ref"


def same_machine(rows, backends):
    return _same(rows, backends, common_depth(latest_ok(rows), backends))


def test_unit_3_compares_the_engines_on_one_machine():
    rows = RunStore.at(REF).rows("profile_runs")
    units = {u["run_id"]: u for u in same_machine(rows, SEED_BACKENDS)}   # units 1 and 2 hold one engine's 12-layer slice only
    assert set(units) == {"h200x1-ref-vllm2", "h200x1-ref-backends", "h200x1-ref-backends3"}
    for u4 in (units["h200x1-ref-backends"], units["h200x1-ref-backends3"]):   # units 4 and 6: two starts a side,
        assert u4["starts"] == {"sglang": 2, "vllm": 2}                           # both measures under the margin
        assert {c["verdict"] for c in u4["compare"].values()} == {"no difference"}
        assert all(abs(u4["diff_pct"][m]) < u4["margin_pct"][m] for m in u4["diff_pct"])
    rows = [r for r in rows if r.get("run_id") not in ("h200x1-ref-backends", "h200x1-ref-backends3")]
    (u,) = same_machine(rows, SEED_BACKENDS)
    assert (u["run_id"], u["depth"], u["starts"]) == ("h200x1-ref-vllm2", 12, {"sglang": 1, "vllm": 2})
    mine = [r for r in rows if r.get("run_id") == "h200x1-ref-vllm2" and r.get("layers") == 13 and r.get("ok")]
    assert {r["machine"] for r in mine} == {u["machine"]}
    vllm = [r["busy_ms"] for r in mine if r["engine"] == "vllm"]
    assert abs(u["mean"]["vllm"]["busy_ms"] - sum(vllm) / len(vllm)) < 1e-12
    for m in ("busy_ms", "tpot_ms"):       # one SGLang start: undecided by the rule, each difference under the 2% margin
        c = u["compare"][m]
        assert c["verdict"] == "undecided" and abs(u["diff_pct"][m]) < 2.0, (m, c)
        assert abs(u["diff_pct"][m] - 100 * c["diff"] / ((c["a_mean"] + c["b_mean"]) / 2)) < 1e-12   # ratio_gap's basis
    line = same_machine_line([u])
    assert "undecided by the rule (one start on a side)" in line and "No carry between machines" in line
    # a second SGLang start in the unit (as unit 1's two agreed, within 0.06%) decides it: no difference
    sg = next(r for r in mine if r["engine"] == "sglang")
    again = dict(sg, label=sg["label"].replace(" (h200x1-ref-vllm2)", " start 2 (h200x1-ref-vllm2)"), start=2,
                 busy_ms=sg["busy_ms"] * 1.0006, tpot_ms=sg["tpot_ms"] * 0.9994, taken_at=float(sg["taken_at"]) + 60)
    (u2,) = same_machine(rows + [again], SEED_BACKENDS)
    assert u2["starts"]["sglang"] == 2 and {c["verdict"] for c in u2["compare"].values()} == {"no difference"}
    assert "no difference beyond the margin" in same_machine_line([u2])
    # without unit 3 no unit holds both engines at 12 MoE layers
    assert same_machine([r for r in rows if r.get("run_id") != "h200x1-ref-vllm2"], SEED_BACKENDS) == []


def test_chapter_06_leads_with_the_one_machine_comparison_and_keeps_the_anchors_as_evidence(monkeypatch):
    """Where a unit holds both engines at their common depth, that comparison is the engines' (it assumes nothing about
    two machines); the one through each unit's anchor follows it, said to be evidence beside it. Without such a unit the
    anchors' comparison is the engines' comparison and names what would settle it."""
    import re

    from servebook.profile import same_machine as same_machine_mod
    from servebook.profile.units_page import units_markdown

    def engines_lines(store):
        md = re.sub(r"<span[^>]*>|</span>", "", units_markdown(store))
        return [ln for ln in md.splitlines() if "between the engines" in ln.lower()]

    lines = engines_lines(RunStore.at(REF))
    assert len(lines) == 4 and lines[0].startswith("- Between the engines, on one machine (unit `h200x1-ref-vllm2`")
    assert lines[1].startswith("- Between the engines, on one machine (unit `h200x1-ref-backends`")
    assert lines[2].startswith("- Between the engines, on one machine (unit `h200x1-ref-backends3`")
    assert lines[3].startswith("- Through the anchors as well, evidence beside the comparison on one machine above")
    assert lines[3].endswith("the comparison on one machine above needs no such assumption.")
    monkeypatch.setattr(same_machine_mod, "same_machine", lambda *a: [])   # as before unit 3: no unit holds both
    (only,) = engines_lines(RunStore.at(REF))
    assert only.startswith("- Between the engines, measured on two machines, only through each machine's anchor")
    assert only.endswith("both engines profiled in one unit settle it.")
