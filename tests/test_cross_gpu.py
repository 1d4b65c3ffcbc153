"""The projection's GPU rule carried to another GPU (``servebook.profile.cross_gpu``): checked here on the recorded
H200 reference against itself (the ladder must give back its own slices) and against a copy of its rows read as
another GPU's (the rule's arithmetic); the H100 measurement it exists for is recorded in data/runs when a loan brings one."""

from __future__ import annotations

import json
import shutil

import pytest

from servebook.paths import data_dir
from servebook.profile.cross_gpu import carry_check, summary
from servebook.profile.projection import project
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-ref"


@pytest.fixture(scope="module")
def ref():
    return RunStore.at(REF)


def test_the_ladder_gives_back_its_own_slices(ref):
    rows = [r for r in carry_check(ref, ref, profile="h200", backends=("triton",)) if "(h200x1-" not in r["label"]]
    assert {r["moe_layers"] for r in rows} == {1, 2, 4, 12}
    for r in rows:   # unit 1's starts: the ladder is theirs; a wrong number of layers would miss by far more
        assert abs(r["error_pct"]) < 1.0, r
        assert r["kept_ms"] == pytest.approx(r["predicted_ms"])   # same GPU: the rule scales nothing


def test_moe_layers_defaults_to_the_card(ref):
    whole = project(ref, "sglang", backend="triton")
    assert [r["ms_per_token"] for r in whole] == [r["ms_per_token"] for r in project(ref, "sglang", backend="triton",
                                                                                         moe_layers=60)]
    assert whole[-1]["ms_per_token"] != project(ref, "sglang", backend="triton", moe_layers=12)[-1]["ms_per_token"]


def _copy(tmp_path, keep) -> RunStore:
    """A SYNTHETIC target: the reference's rows that ``keep`` accepts, in a run of their own."""
    dst = tmp_path / "runs" / "target"
    dst.mkdir(parents=True)
    for name in ("profile_runs", "decode_breakdown"):
        rows = [json.loads(x) for x in (REF / f"{name}.jsonl").read_text().splitlines() if x.strip()]
        (dst / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if keep(r)))
    shutil.copy(REF / "manifest.json", dst / "manifest.json")
    return RunStore.at(dst)


def test_another_gpu_scales_the_memory_bound_categories_only(ref, tmp_path):
    target = _copy(tmp_path, lambda r: r["label"] == "sglang kimi-5L int4 triton")
    (row,) = carry_check(ref, target, profile="h100")
    from servebook.profiles import load_profile

    ratio = load_profile("h200")["memory_bandwidth_tbs"] / load_profile("h100")["memory_bandwidth_tbs"]   # the datasheets
    assert row["bandwidth_ratio"] == pytest.approx(ratio, rel=1e-3)
    assert row["all_scaled_ms"] == pytest.approx(row["kept_ms"] * ratio)
    assert row["kept_ms"] < row["predicted_ms"] < row["all_scaled_ms"]
    same = carry_check(ref, target, profile="h200")[0]["by_category"]
    for cat, (pred, _measured) in row["by_category"].items():
        h200 = same[cat][0]
        if cat in ("attention", "moe routing", "norm/rope/elementwise", "sampling", "other"):
            assert pred == pytest.approx(h200), cat   # latency-bound (attention at this context too): kept
        else:
            assert pred > h200 * 1.2, cat            # memory-bound: x the ratio, or a floor above it
    # measured on the H200 and read as an H100's: the rule predicts slower than what ran
    assert row["error_pct"] > 20 and row["kept_error_pct"] == pytest.approx(0.0, abs=1.0)


def test_a_backend_without_a_ladder_is_said_not_predicted(ref, tmp_path):
    target = _copy(tmp_path, lambda r: r["label"] == "sglang kimi-13L int4 triton")
    for name in ("profile_runs", "decode_breakdown"):   # the same rows under a backend the reference never ran
        p = target.path / f"{name}.jsonl"
        p.write_text(p.read_text().replace('"backend": "triton"', '"backend": "flashmla"'))
    (row,) = carry_check(ref, RunStore.at(target.path), profile="h100")
    assert row["backend"] == "flashmla" and row["predicted_ms"] is None and row["reason"]
    as_recorded = carry_check(ref, _copy(tmp_path / "t", lambda r: r["label"] == "sglang kimi-13L int4 triton"), profile="h200")
    assert row["measured_ms"] == pytest.approx(as_recorded[0]["measured_ms"])   # the relabelled rows, measured as they were
    assert summary([row])[("flashmla", 12)]["predicted_ms"] is None


def test_the_cli_writes_the_table_into_the_target(tmp_path, capsys):
    from servebook.cli import main

    target = _copy(tmp_path, lambda r: r["label"] in ("sglang kimi-5L int4 triton", "sglang kimi-5L int4 triton start 2"))
    assert main(["profile", "carry", str(REF), str(target.path), "--profile", "h100"]) == 0
    rows = RunStore.at(target.path).rows("carry_check")
    assert [r["label"] for r in rows] == ["sglang kimi-5L int4 triton", "sglang kimi-5L int4 triton start 2"]
    assert "predicted" in capsys.readouterr().out
    assert main(["profile", "carry", str(REF), str(target.path)]) == 0     # again: replaced, not appended
    assert len(RunStore.at(target.path).rows("carry_check")) == 2
    empty = _copy(tmp_path / "e", lambda r: False)
    assert main(["profile", "carry", str(REF), str(empty.path)]) == 1
    assert "no measured slice of either engine (nothing written)" in capsys.readouterr().out


XGPU = data_dir() / "runs" / "h100x1-xgpu"


def test_the_recorded_h100_check_is_recomputed_from_its_tables(ref):
    target = RunStore.at(XGPU)
    again = carry_check(ref, target, profile="h100")
    stored = target.rows("carry_check")
    assert [r["label"] for r in again] == [r["label"] for r in stored] and len(stored) == 4
    for a, s in zip(again, stored):
        assert a["predicted_ms"] == pytest.approx(s["predicted_ms"]) and a["measured_ms"] == pytest.approx(s["measured_ms"])
    # another GPU: none of the reference's machines, and the rows say which GPU
    assert {r["target_machine"] for r in again}.isdisjoint({p.get("machine") for p in ref.rows("profile_runs")})
    assert {r["target_gpu"] for r in again} == {"NVIDIA H100 80GB HBM3"}
    for r in again:   # what RECORDED.md states: the measurement inside the two bounds, the rule above it, more with depth
        assert r["kept_ms"] < r["measured_ms"] < r["all_scaled_ms"] and r["predicted_ms"] > r["measured_ms"]
    tri = sorted((r["moe_layers"], r["error_pct"]) for r in again if r["backend"] == "triton")
    assert [n for n, _ in tri] == [1, 2, 6] and tri[0][1] < tri[1][1] < tri[2][1]


def test_chapter_06_evidence_says_the_check_from_its_table():
    from servebook.profile.evidence import reference_evidence

    notes = [n for n in reference_evidence()["notes"] if "h100x1-xgpu" in n]
    assert len(notes) == 1
    deep = [r for r in RunStore.at(XGPU).rows("carry_check") if r["moe_layers"] == 6 and r["backend"] == "triton"]
    assert f"{deep[0]['error_pct']:+.1f}% at 6 MoE layers (triton)" in notes[0]
    assert "more the deeper the slice (triton)" in notes[0] and "hypothesis" in notes[0]


def test_no_check_beside_the_reference_no_note(tmp_path):
    from servebook.profile.evidence import reference_evidence

    shutil.copytree(REF, tmp_path / "runs" / "h200x1-ref", ignore=shutil.ignore_patterns("traces", "logs"))
    assert not any("checked on another GPU" in n for n in reference_evidence(tmp_path / "runs" / "h200x1-ref")["notes"])


def _scaled_copy(tmp_path, factor: float) -> RunStore:
    """A SYNTHETIC target: SGLang triton's ladder of unit 1 (2 and 13 layers, first starts) with every category's time
    x ``factor``, as if another GPU had run each part ``factor`` times as long."""
    got = _copy(tmp_path, lambda r: r["label"] in ("sglang kimi-2L int4 triton", "sglang kimi-13L int4 triton"))
    p = got.path / "decode_breakdown.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    p.write_text("".join(json.dumps({**r, "ms_per_step": r["ms_per_step"] * factor if r.get("ms_per_step") is not None
                                     else None}) + "\n" for r in rows))
    return RunStore.at(got.path)


def test_bandwidth_shares_are_what_each_part_took_of_the_ratio(ref, tmp_path):
    from servebook.profile.cross_gpu import _ratio, bandwidth_shares

    r = _ratio("h100")
    same = bandwidth_shares(ref, _scaled_copy(tmp_path / "a", 1.0), profile="h100")
    whole = bandwidth_shares(ref, _scaled_copy(tmp_path / "b", r), profile="h100")
    half = bandwidth_shares(ref, _scaled_copy(tmp_path / "c", 1 + (r - 1) / 2), profile="h100")
    assert set(same["shares"]) == {"moe experts", "dense gemm", "attention"}
    for cat in same["shares"]:
        for part in ("fixed", "moe"):
            assert same["shares"][cat][part] == pytest.approx(0.0, abs=1e-9)    # nothing moved: nothing followed bandwidth
            assert whole["shares"][cat][part] == pytest.approx(1.0)             # the whole ratio: the rule itself
            assert half["shares"][cat][part] == pytest.approx(0.5)
    too_far = bandwidth_shares(ref, _scaled_copy(tmp_path / "d", 2 * r), profile="h100")
    assert too_far["shares"]["dense gemm"]["moe"] == 1.0 and too_far["scaled"]["dense gemm"]["moe"] == pytest.approx(2 * r)
    assert bandwidth_shares(ref, _copy(tmp_path / "e", lambda r: False), profile="h100") is None   # no ladder there


def test_a_share_of_one_is_the_rule_and_zero_keeps_the_h200_time(ref):
    cats = ("moe experts", "dense gemm")
    central = project(ref, "sglang", backend="triton")
    ones = project(ref, "sglang", backend="triton", scaled_share={c: {"fixed": 1.0, "moe": 1.0} for c in cats})
    zeros = project(ref, "sglang", backend="triton", scaled_share={c: {"fixed": 0.0, "moe": 0.0} for c in cats})
    by = lambda rows: {r["category"]: r["ms_per_token"] for r in rows if r["category"] != "total"}   # noqa: E731
    assert by(ones) == pytest.approx(by(central))
    for cat in cats:
        assert by(zeros)[cat] < by(central)[cat] / 1.5, cat    # the seed's ratio is about 2.7: kept is far shorter
    assert {c: v for c, v in by(zeros).items() if c not in cats} == pytest.approx(
        {c: v for c, v in by(central).items() if c not in cats})


def test_the_seed_range_takes_the_h100_shares_as_an_end(ref):
    from servebook.profile import comm, ranges
    from servebook.profile.cross_gpu import bandwidth_shares, carry_runs

    (run,) = [p for p in carry_runs(ref) if p.name == "h100x1-xgpu"]
    got = bandwidth_shares(ref, run)
    assert got["profile"] == "h100" and got["target"]["ladder"] == (1, 6) and got["reference"]["ladder"] == (1, 12)
    # as RECORDED.md of h100x1-xgpu says: the experts per MoE layer took about half the ratio, the LM head's step nearly all
    assert 0.3 < got["shares"]["moe experts"]["moe"] < 0.7 and got["shares"]["dense gemm"]["fixed"] > 0.9
    lat = comm.engine_latencies()
    central = ranges.central_projection(ref, lat)
    rows = {r["assumption"]: r for r in ranges.assumption_table(ref, central, lat, 124, shares={"sglang": got})}
    row = rows["bandwidth scaling"]
    assert row["sglang_ms"] < -0.5 and row["vllm_ms"] < -0.5 and "h100x1-xgpu" in row["basis"] and "hypothesis" in row["basis"]
    assert "vLLM's kernels take SGLang's shares, not measured for vLLM" in row["basis"]
    # each engine its own shares where measured: vLLM's at one (the rule itself) moves vLLM by nothing
    whole = {**got, "engine": "vllm", "backend": "TRITON_MLA",
             "shares": {c: {"fixed": 1.0, "moe": 1.0} for c in got["shares"]}}
    own = {r["assumption"]: r for r in ranges.assumption_table(ref, central, lat, 124, shares={"sglang": got, "vllm": whole})}
    mine = own["bandwidth scaling"]
    assert mine["sglang_ms"] == pytest.approx(row["sglang_ms"]) and mine["vllm_ms"] == pytest.approx(0.0, abs=1e-9)
    assert "take SGLang's shares" not in mine["basis"] and "vLLM's TRITON_MLA INT4 ladder" in mine["basis"]
    none = {r["assumption"]: r for r in ranges.assumption_table(ref, central, lat, 124)}["bandwidth scaling"]
    assert none["sglang_ms"] is none["vllm_ms"] is None and "not measured" in none["basis"]


def test_recorded_md_states_the_range_row_as_the_what_if_run_holds_it():
    """What h100x1-xgpu/RECORDED.md says the 'bandwidth scaling' end does to the seed range, from the what-if run's table."""
    whatif = RunStore.at(data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9")
    (row,) = [r for r in whatif.rows("seed_assumptions") if r["assumption"] == "bandwidth scaling"]
    text = " ".join((XGPU / "RECORDED.md").read_text().split())
    assert (f"shortens SGLang's projected step by {-row['sglang_ms']:.2f} ms and vLLM's by {-row['vllm_ms']:.2f} ms per "
            f"token and moves the gap by {row['gap_ms']:+.2f} ms") in text
    assert abs(row["gap_ms"]) < 0.1 * min(-row["sglang_ms"], -row["vllm_ms"])   # "nearly unmoved" (README)
    assert "h200x1-ref-backends" in row["basis"] or "gpu-d45a97396d7721e4" in row["basis"]   # the unit RECORDED.md names


def _ladder_run(runs, name: str, labels: tuple[str, ...], factor: float) -> None:
    """A SYNTHETIC run beside the reference copy in ``runs``: the reference's rows of ``labels`` with every category's
    time x ``factor`` and a carry_check table (what marks a run measured on another GPU)."""
    dst = runs / name
    dst.mkdir(parents=True)
    for table in ("profile_runs", "decode_breakdown"):
        rows = [json.loads(x) for x in (REF / f"{table}.jsonl").read_text().splitlines() if x.strip()]
        rows = [r for r in rows if r["label"] in labels]
        if table == "decode_breakdown":
            rows = [{**r, "ms_per_step": r["ms_per_step"] * factor if r.get("ms_per_step") is not None else None} for r in rows]
        (dst / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copy(REF / "manifest.json", dst / "manifest.json")
    (dst / "carry_check.jsonl").write_text(json.dumps({"profile": "h100"}) + "\n")


def test_each_engine_reads_its_own_shares_from_the_run_holding_the_most_engines(tmp_path):
    from servebook.profile.seed import _measured_shares

    runs = tmp_path / "runs"
    shutil.copytree(REF, runs / "h200x1-ref", ignore=shutil.ignore_patterns("traces", "logs"))
    ref = RunStore.at(runs / "h200x1-ref")
    sg = ("sglang kimi-2L int4 triton", "sglang kimi-13L int4 triton")
    vl = ("vllm kimi-2L int4 TRITON_MLA (h200x1-ref-vllm2)", "vllm kimi-13L int4 TRITON_MLA")
    _ladder_run(runs, "a-sglang", sg, 1.1)
    _ladder_run(runs, "b-vllm", vl, 1.2)
    got = _measured_shares(ref, ref)
    assert {e: g["target_run"] for e, g in got.items()} == {"sglang": "a-sglang", "vllm": "b-vllm"}
    assert got["vllm"]["scaled"]["moe experts"]["moe"] == pytest.approx(1.2)
    _ladder_run(runs, "c-both", sg + vl, 1.3)   # one machine for both engines wins over a run of one engine
    assert {e: g["target_run"] for e, g in _measured_shares(ref, ref).items()} == {"sglang": "c-both", "vllm": "c-both"}
