"""Issue #39's reference recording: machine identity on every row and the refusal to subtract rows of two machines,
the starts rule, kernels matched between depths, slice_linearity, the reclassified kernels, device.sh's ref step."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from servebook.profile import machines, starts
from servebook.profile.kernels import Kernel, classify
from servebook.profile.linearity import kernel_table, match_depths, slice_linearity
from servebook.profile.predict import predict_full
from servebook.profile.slices import select_slices
from servebook.profile.tables import engine_difference, start_spread

ROOT = Path(__file__).resolve().parents[1]


def _row(label, layers, busy, machine="gpu-a", **kw):
    return {"label": label, "engine": "sglang", "backend": "triton", "mode": "graph", "quant": "card", "card": "kimi-k2.5",
            "role": "slice", "ok": True, "layers": layers, "dense_layers": 1, "busy_ms": busy, "step_ms": busy + 0.5,
            "tpot_ms": busy + 0.7, "machine": machine, "run_id": "r", **kw}


# -- machine identity and the refusal ----------------------------------------------------------------------------
def test_identity_is_the_set_of_gpu_uuids():
    a = machines.identity_of_uuids(["GPU-2", "GPU-1"], ["NVIDIA H200", "NVIDIA H200"])
    assert a == machines.identity_of_uuids(["GPU-1", "GPU-2", "GPU-1"], ["NVIDIA H200"]) | {"machine_gpu_name": "NVIDIA H200"}
    assert a["machine"].startswith("gpu-") and a["machine_gpus"] == 2
    assert machines.identity_of_uuids(["GPU-1"])["machine"] != a["machine"]
    with pytest.raises(machines.MachineMismatch, match="no GPU UUID"):
        machines.identity_of_uuids([None, ""])


def test_rows_of_two_machines_are_never_subtracted():
    shallow, deep = _row("s", 2, 1.0, "gpu-a"), _row("d", 3, 1.5, "gpu-b")
    with pytest.raises(machines.MachineMismatch, match="2 machines"):
        predict_full(shallow, deep, full_layers=61, dense_layers=1, moe=True)
    with pytest.raises(machines.MachineMismatch, match="no machine identity"):
        predict_full(shallow, {**deep, "machine": None}, full_layers=61, dense_layers=1, moe=True)
    # rows recorded before identities: within one run only
    old = [{**shallow, "machine": None, "run_id": "run1"}, {**deep, "machine": None, "run_id": "run2"}]
    with pytest.raises(machines.MachineMismatch, match="2 runs"):
        predict_full(*old, full_layers=61, dense_layers=1, moe=True)
    legacy = [{k: v for k, v in r.items() if k not in ("machine", "run_id")} for r in (shallow, deep)]
    assert predict_full(*legacy, full_layers=61, dense_layers=1, moe=True)["slope_ms"] == pytest.approx(0.5)
    assert predict_full(shallow, {**deep, "machine": "gpu-a"}, full_layers=61, dense_layers=1, moe=True)["slope_ms"] == pytest.approx(0.5)


def test_the_projection_and_the_spread_refuse_two_machines():
    rows = [{**_row("one", 1, 1.0, "gpu-a"), "quant": "bf16", "backend": "auto"},
            {**_row("two", 2, 1.4, "gpu-b"), "quant": "bf16", "backend": "auto"}]
    with pytest.raises(machines.MachineMismatch, match="projection"):
        select_slices(rows, "sglang")
    # a second start on another machine is another recording unit's server, not a start of this one: no spread
    starts_rows = [_row("x", 2, 1.0, "gpu-a"), {**_row("x start 2", 2, 1.1, "gpu-b"), "role": "repeat"}]
    assert start_spread(starts_rows, "x") is None
    assert start_spread(starts_rows[:1] + [{**starts_rows[1], "machine": "gpu-a"}], "x")["starts"] == 2


def test_engines_are_compared_only_on_one_machine():
    a = {**_row("sg", 2, 1.0, "gpu-a"), "backend": "auto"}
    b = {**_row("vl", 2, 1.2, "gpu-b"), "engine": "vllm", "backend": "auto"}
    assert engine_difference([], [a, b]) == []                       # two machines: no comparison row
    assert engine_difference([], [a, {**b, "machine": "gpu-a"}])     # one machine: compared


def test_units_are_compared_through_their_reference():
    rows = [_row("ref a", 13, 4.0, "gpu-a", reference=True), _row("x a", 5, 2.0, "gpu-a"),
            _row("ref b", 13, 4.4, "gpu-b", reference=True), _row("x b", 5, 2.2, "gpu-b")]
    rel = {r["label"]: r["busy_ms_ratio"] for r in machines.relative_to_reference(rows, value="busy_ms")}
    assert rel["x a"] == pytest.approx(0.5) and rel["x b"] == pytest.approx(0.5) and rel["ref b"] == pytest.approx(1.0)
    with pytest.raises(machines.MachineMismatch, match="no anchor configuration"):
        machines.relative_to_reference(rows + [_row("x c", 5, 2.0, "gpu-c")], value="busy_ms")


# -- the starts rule -------------------------------------------------------------------------------------------------
def test_starts_rule():
    assert starts.starts_required(1) == starts.starts_required(2) == 3 and starts.starts_required(4) == starts.starts_required(12) == 2
    assert starts.more_starts([5.0], moe_layers=12, decided_pct=5)["more"] == 1
    assert starts.more_starts([5.0, 5.1], moe_layers=12, decided_pct=5)["more"] == 0          # 2% apart, 5% decided
    assert starts.more_starts([5.0, 5.6], moe_layers=12, decided_pct=5)["more"] == 1          # 11% apart: a third
    assert starts.more_starts([5.0, 5.6, 5.3, 5.2], moe_layers=12, decided_pct=5)["more"] == 0  # the cap
    assert starts.more_starts([2.0, 2.5], moe_layers=1, decided_pct=5)["more"] == 1           # shallow: 3 starts


def test_no_difference_below_two_percent_or_the_spread():
    assert starts.compare([5.0, 5.02], [5.05, 5.07])["verdict"] == "no difference"              # < 2%
    assert starts.compare([5.0, 5.8], [5.5, 5.6])["verdict"] == "no difference"                 # < spread 0.8
    c = starts.compare([5.0, 5.02], [5.5, 5.52])
    assert c["verdict"] == "a lower" and c["diff"] == pytest.approx(-0.5)
    assert starts.compare([5.0], [5.5, 5.52])["verdict"] == "undecided"


def test_extra_starts_plan_asks_only_what_the_rule_wants():
    plan = [{"label": "d", "engine": "sglang", "model_dir": "/m/13", "backend": "triton", "start": 1, "lead": True},
            {"label": "d start 2", "engine": "sglang", "model_dir": "/m/13", "backend": "triton", "start": 2},
            {"label": "s", "engine": "sglang", "model_dir": "/m/5", "backend": "triton", "start": 1},
            {"label": "s start 2", "engine": "sglang", "model_dir": "/m/5", "backend": "triton", "start": 2}]
    rows = [{**_row("d", 13, 4.0), "tpot_ms": 5.0}, {**_row("d start 2", 13, 4.0), "tpot_ms": 5.6},
            {**_row("s", 5, 2.0), "tpot_ms": 3.0}, {**_row("s start 2", 5, 2.0), "tpot_ms": 3.05}]
    extra = starts.extra_starts_plan(plan, rows, decided_pct=5)
    assert [e["label"] for e in extra] == ["d start 3"] and extra[0]["start"] == 3 and "lead" not in extra[0]


def test_more_starts_with_required_only_leaves_the_plans_optional_entries_out(tmp_path):
    """The CLI's plan filter (``--required-only``, shared by ``profile run``): both groups want a third start, the
    optional one only without the flag."""
    import sys

    from servebook.results import RunStore

    plan = [{"label": "d", "engine": "sglang", "model_dir": "/m/13", "backend": "triton", "start": 1},
            {"label": "d start 2", "engine": "sglang", "model_dir": "/m/13", "backend": "triton", "start": 2},
            {"label": "s", "engine": "sglang", "model_dir": "/m/2", "backend": "triton", "start": 1, "optional": "warm-up"},
            {"label": "s start 2", "engine": "sglang", "model_dir": "/m/2", "backend": "triton", "start": 2,
             "optional": "warm-up"}]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    store = RunStore.at(tmp_path / "run")
    for r in ({**_row("d", 13, 4.0), "tpot_ms": 5.0}, {**_row("d start 2", 13, 4.0), "tpot_ms": 5.6},
              {**_row("s", 2, 2.0), "tpot_ms": 3.0}, {**_row("s start 2", 2, 2.0), "tpot_ms": 3.05}):
        store.append("profile_runs", r)

    def wanted(*flag):
        out = subprocess.run([sys.executable, "-m", "servebook.cli", "profile", "more-starts", "--plan",
                              str(tmp_path / "plan.json"), "--run-dir", str(store.path), "--out", str(tmp_path / "o.json"),
                              *flag], capture_output=True, text=True, timeout=120, env=os.environ | {"PYTHONPATH": str(ROOT / "lib")})
        assert out.returncode == 0, out.stderr
        return [e["label"] for e in json.loads((tmp_path / "o.json").read_text())]

    assert wanted() == ["d start 3", "s start 3"]
    assert wanted("--required-only") == ["d start 3"]


def test_device_sh_ref_step_passes_required_only_to_the_plans_runs(tmp_path):
    env = os.environ | {"DRY": "1", "OUT": str(tmp_path), "REF_REQUIRED_ONLY": "1"}
    out = subprocess.run(["bash", str(ROOT / "tools" / "gpu-stage" / "device.sh"), "ref"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if "--plan /tmp/ref-plan.json" in ln]
    assert len(lines) == 4 and all("--plan /tmp/ref-plan.json --required-only " in ln for ln in lines)
    plain = subprocess.run(["bash", str(ROOT / "tools" / "gpu-stage" / "device.sh"), "ref"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env=os.environ | {"DRY": "1", "OUT": str(tmp_path)})
    assert "--required-only" not in plain.stdout


# -- kernels matched between depths, linearity -------------------------------------------------------------------
def _trace(n_moe: int, steps: int = 6, layer_us: float = 100.0) -> list[Kernel]:
    """Synthetic decode steps: embedding, a dense layer, n_moe MoE layers, LM head, argmax."""
    out, t = [], 0.0
    block = [("rmsnorm", 3.0), ("attn_fwd_grouped_kernel", 20.0), ("marlin_moe", layer_us - 33.0), ("moe_align_block", 10.0)]
    for _ in range(steps):
        seq = [("embedding_kernel", 5.0), ("rmsnorm", 3.0), ("nvjet_dense", 40.0)] + block * n_moe + [("nvjet_lmhead", 500.0), ("argmax", 4.0)]
        for name, dur in seq:
            out.append(Kernel(name, t, dur))
            t += dur + 1.0
        t += 50.0
    return out


def test_kernels_matched_by_name_and_position():
    t1, t4 = kernel_table(_trace(1), "embedding_kernel"), kernel_table(_trace(4), "embedding_kernel")
    m = match_depths(t1, t4, 3)
    assert m["clean"] and m["block_kernels"] == 4 and m["per_layer_us"] == pytest.approx(100.0)
    assert {k["name"] for k in m["block"]} == {"rmsnorm", "attn_fwd_grouped_kernel", "marlin_moe", "moe_align_block"}
    carried = [c["name"] for c in m["carried"]]
    assert carried.count("nvjet_lmhead") == 1 and carried.count("embedding_kernel") == 1 and m["carried_moved_us"] == 0
    assert not match_depths(t1, t4, 2)["clean"]       # 12 more kernels cut in 2 blocks of 6: not repeats of one block


def test_slice_linearity_predicts_the_deepest_from_the_two_shallowest():
    rows = []
    for moe, starts_ in ((1, 3), (2, 3), (4, 2), (12, 2)):
        for k in range(starts_):
            rows.append({**_row(f"s{moe} {k}", moe + 1, 1.0 + 0.3 * moe + 0.01 * k), "role": "slice" if k == 0 else "repeat"})
    lin = slice_linearity(rows)
    steps = [r for r in lin if r["kind"] == "step"]
    assert [r["depths"] for r in steps] == ["1->2", "2->4", "4->12"]
    assert all(r["per_layer_ms"] == pytest.approx(0.3, abs=0.01) for r in steps)
    pred = next(r for r in lin if r["kind"] == "prediction")
    assert pred["depths"] == "1,2->12" and abs(pred["busy_error_pct"]) < 1 and pred["within_5pct"]
    # two machines are two groups, never one line
    other = [{**r, "machine": "gpu-b", "busy_ms": r["busy_ms"] * 1.1} for r in rows if r["layers"] <= 3]
    lin2 = slice_linearity(rows + other)
    assert {r["machine"] for r in lin2} == {"gpu-a", "gpu-b"} and len(lin2) == len(lin) + 1


def test_the_misfiled_kernels_have_their_class():
    assert classify("get_num_kv_splits_triton") == "attention"
    assert classify("triton_per_fused_copy__mul_sum_0") == "moe experts"            # SGLang's top-k sum
    assert classify("void (anonymous namespace)::router_gemm_kernel<__nv_bfloat16, float, 128, 8, 1, 384, 7168, true>") == "dense gemm"
    assert classify("_router_triton_kernel") == "moe routing"                       # the top-k selection stays routing
    assert classify("triton_red_fused_fused_add_rms_norm_moe_forward_shared_0") == "norm/rope/elementwise"


# -- the unit's plan and device.sh's ref step ---------------------------------------------------------------------------
@pytest.mark.parametrize("plan_file", sorted((ROOT / "tools" / "gpu-stage").glob("ref-plan*.json")), ids=lambda p: p.name)
def test_every_unit_plan_follows_the_starts_rule_and_measures_the_reference(plan_file):
    plan = json.loads(plan_file.read_text())
    assert len({s["label"] for s in plan}) == len(plan)
    moe = lambda s: int(Path(s["model_dir"]).name.split("L")[0].split("-")[-1]) - 1   # noqa: E731 - kimi-13L-int4: 12 MoE layers
    ref = [s for s in plan if s.get("reference")]
    assert sorted(s["start"] for s in ref) == [1, 2], "each unit measures the reference configuration, 2 starts"
    assert {(s["engine"], s["backend"], moe(s), s["quant"], s["mode"]) for s in ref} == {("sglang", "triton", 12, "card", "graph")}
    servers: dict = {}
    for s in plan:
        if not s.get("optional"):     # an entry taken only if the loan's time allows says so
            servers.setdefault((s["engine"], s.get("backend"), moe(s)), []).append(s["start"])
    for (engine, backend, n), st in servers.items():
        assert sorted(st) == list(range(1, starts.starts_required(n) + 1)), (plan_file.name, engine, backend, n)
    assert all(s["quant"] == "card" and s["mode"] == "graph" for s in plan)
    assert sum(1 for s in plan if s.get("lead")) <= 1


def test_device_sh_ref_step(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "tools" / "gpu-stage" / "device.sh"), "ref"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=os.environ | {"DRY": "1", "OUT": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "[job rmodels]" in out.stdout and "[job ref]" in out.stdout
    assert "--quant card" in out.stdout and "--run-id h200x1-ref" in out.stdout
    assert out.stdout.index("--engines sglang") < out.stdout.index("more-starts") < out.stdout.index("--engines vllm")


# -- the recorded unit (data/runs/h200x1-ref) ------------------------------------------------------------------------
REF = ROOT / "data" / "runs" / "h200x1-ref"


def _close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return a == b


def test_recorded_linearity_is_recomputed_from_the_recorded_tables():
    from servebook.profile.linearity import layer_kernels, load_kernel_tables, step_kernels
    from servebook.results import RunStore

    store = RunStore.at(REF)
    rows, tables = store.rows("profile_runs"), load_kernel_tables(store)
    recorded = store.rows("slice_linearity")
    again = slice_linearity(rows, tables)
    assert len(again) == len(recorded)
    for r, a in zip(recorded, again):
        for k, v in a.items():
            assert _close(v, r[k]), (r["depths"], k, v, r[k])
    # unit 1: SGLang's ladder to 12 MoE layers; unit 2 (another machine): vLLM's to 4 (its 12-layer profile was lost);
    # unit 3 (a third machine): vLLM's to 12 beside SGLang's 1- and 12-layer slices (two depths: no prediction)
    preds = {(r["engine"], r["run_id"]): r for r in again if r["kind"] == "prediction"}
    assert {k: p["depths"] for k, p in preds.items()} == {("sglang", "h200x1-ref"): "1,2->12", ("vllm", "h200x1-ref-vllm"): "1,2->4",
                                                          ("vllm", "h200x1-ref-vllm2"): "1,2->12"}
    assert all(p["within_5pct"] and abs(p["busy_error_pct"]) < 5 for p in preds.values())
    machines = {k: {r["machine"] for r in again if (r["engine"], r["run_id"]) == k} for k in preds}
    assert all(len(m) == 1 for m in machines.values()) and len(set.union(*machines.values())) == 3
    lk = layer_kernels(rows, tables)
    assert [(x["name"], x["us_per_layer"]) for x in lk] == [(x["name"], x["us_per_layer"]) for x in store.rows("layer_kernels")]
    assert any("marlin_moe" in x["name"] and x["category"] == "moe experts" for x in lk)
    sk = step_kernels(rows, tables)
    assert [(x["name"], x["us_per_step"]) for x in sk] == [(x["name"], x["us_per_step"]) for x in store.rows("step_kernels")]
    # every per-step kernel takes time, except one where a unit's ladder has two depths only (1 and 12 MoE layers): the
    # cuBLAS split-K reduce, booked below zero in unit 3's SGLang (-5.1 us per step, RECORDED.md "Unit 3") and in unit 4's
    # SGLang flashinfer and vLLM (-0.6 and -7.6 us): hypothesis, cuBLAS picks a split-K variant for a GEMM in one slice and
    # not the other. Each under 1% of its unit's per-step kernel time; the projection reads no per-step kernel table
    neg = [x for x in sk if x["us_per_step"] <= 0]
    assert all(x["per_step"] >= 1 for x in sk) and {x["name"].split("<")[0] for x in neg} == {"void cublasLt::splitKreduce_kernel"}
    assert {(x["engine"], x["backend"], x["run_id"]) for x in neg} == {
        ("sglang", "triton", "h200x1-ref-vllm2"), ("sglang", "flashinfer", "h200x1-ref-backends"),
        ("vllm", "TRITON_MLA", "h200x1-ref-backends")}
    for x in neg:
        unit = [y for y in sk if (y["engine"], y["backend"], y["run_id"]) == (x["engine"], x["backend"], x["run_id"])]
        assert -x["us_per_step"] < 0.01 * sum(y["us_per_step"] for y in unit)
    lm_head = sk[0]        # the largest per-step kernel: the LM head's GEMV (163840 x 7168 bf16, 2.35 GB)
    assert lm_head["category"] == "dense gemm" and 400 < lm_head["us_per_step"] < 700


def test_recorded_rows_carry_one_machine_and_refuse_another_runs_rows():
    from servebook.results import RunStore

    store = RunStore.at(REF)
    ok = [r for r in store.rows("profile_runs") if r.get("ok")]
    # one machine per unit (unit 1: SGLang's ladder; units 2 and 3: vLLM's, beside SGLang's reference measured again
    # there; unit 4: the backends at 12 MoE layers, both engines; unit 5: SGLang's flashmla and fa3 at 12 beside triton;
    # unit 6: vLLM's FLASHMLA and default against TRITON_MLA at 12, two starts each, beside SGLang's triton)
    assert {r["machine"] for r in ok} == {r["machine"] for r in store.rows("decode_breakdown")} \
        == {r["machine"] for r in store.rows("memory_bandwidth")}
    assert len({r["machine"] for r in ok}) == 6 and all(r["machine"].startswith("gpu-") for r in ok)
    assert len({r["machine"] for r in ok if r["engine"] == "vllm"}) == 4
    assert all(len({r["machine"] for r in ok if r.get("run_id") == u}) == 1 for u in {r.get("run_id") for r in ok})
    deep = next(r for r in ok if r["layers"] == 13 and not r["label"].endswith(")"))
    older = next(r for r in RunStore.at(ROOT / "data" / "runs" / "h200x1-prof").rows("profile_runs") if r["label"] == "sglang kimi-2L triton")
    with pytest.raises(machines.MachineMismatch):       # a 2-layer slice of another machine (no identity) under this deep one
        predict_full(older, deep, full_layers=61, dense_layers=1, moe=True)


def test_recorded_starts_follow_the_rule():
    from servebook.results import RunStore

    ok = [r for r in RunStore.at(REF).rows("profile_runs") if r.get("ok")]
    by: dict = {}
    for r in sorted(ok, key=lambda r: r.get("start", 1)):           # per unit (machine) and configuration
        by.setdefault((r["machine"], r["engine"], r.get("backend"), r["layers"] - r["dense_layers"]), []).append(r["tpot_ms"])
    # unit 5 (h200x1-ref-backends2): SGLang triton, flashmla and fa3 at 12 MoE layers, 2 starts each; unit 6
    # (h200x1-ref-backends3): SGLang triton, vLLM TRITON_MLA, FLASHMLA and its default at 12, 2 starts each
    assert len(by) == 28
    # unit 3's loan ran out while its second batch of starts was starting (RECORDED.md, "Unit 3"): its shallow slices and
    # SGLang's two slices there have one start each, short of the rule; unit 4's loan ran out after FLASHMLA's and vLLM's
    # default's first starts, and its 1-MoE-layer slices were one warm-up batch (RECORDED.md, "Unit 4"). Nothing is
    # decided on one start (backends_at_depth and same_machine say "undecided"); the ladders read the shallow slices'
    # GPU busy time, which settled within 0.3% between starts in units 1 and 2
    unit3 = {r["machine"] for r in ok if r.get("run_id") == "h200x1-ref-vllm2"}
    unit4 = {r["machine"] for r in ok if r.get("run_id") == "h200x1-ref-backends"}
    short = {(m, e, b, n) for m in unit3 for e, b, n in (("vllm", "TRITON_MLA", 1), ("vllm", "TRITON_MLA", 2),
                                                        ("sglang", "triton", 1), ("sglang", "triton", 12))}
    short |= {(m, e, b, n) for m in unit4 for e, b, n in (("vllm", "TRITON_MLA", 1), ("sglang", "triton", 1),
                                                        ("sglang", "flashinfer", 1), ("vllm", "FLASHMLA", 12),
                                                        ("vllm", "auto", 12))}
    assert {k for k, t in by.items() if len(t) < starts.starts_required(k[3])} == short
    assert all(len(by[k]) == 1 for k in short) and (REF / "RECORDED.md").read_text().count("ran out") >= 2
    for (_machine, _engine, _backend, moe), t in by.items():
        if (_machine, _engine, _backend, moe) in short:
            continue
        assert len(t) >= starts.starts_required(moe) and len(t) <= starts.MAX_STARTS
        if len(t) > starts.starts_required(moe):            # extra starts only where the first two differ by more than 5%
            assert abs(t[0] - t[1]) / (sum(t[:2]) / 2) > 0.05
