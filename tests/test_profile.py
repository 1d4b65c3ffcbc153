"""servebook.profile: the kernel rule, steps in a trace, the per-step breakdown, traces kept, the full-model
prediction, and the in-process profile of the embedded model (a real torch profiler trace)."""

from __future__ import annotations

import gzip
import json

import pytest

from servebook.profile import (CATEGORIES, Kernel, TraceError, breakdown_check, classify, find_anchor, keep_trace,
                               kernel_events, load_trace, predict_full, prediction_rows, step_breakdown)


def _steps(n_steps=20, layers=3, idle=40.0, t0=1000.0):
    ks, t = [], t0
    for _ in range(n_steps):
        ks.append(Kernel("void at::native::indexSelectLargeIndex<>", t, 5)); t += 6
        for _ in range(layers):
            ks.append(Kernel("fused_add_rmsnorm_kernel", t, 3)); t += 3
            ks.append(Kernel("void flash::FlashAttnFwdSm90<>", t, 10)); t += 11
            ks.append(Kernel("moe_align_block_size_kernel", t, 2)); t += 2
            ks.append(Kernel("fused_moe_kernel", t, 20)); t += 20
        ks.append(Kernel("nvjet_tst_lm_head", t, 30)); t += 30
        ks.append(Kernel("reduce_kernel<ArgMaxOps>", t, 2)); t += 2
        t += idle
    return ks


def test_breakdown_sums_to_the_step_and_idle_is_the_gap():
    b = step_breakdown(_steps())
    assert b["steps"] == 19
    per_step_us = 6 + 3 * (3 + 11 + 2 + 20) + 30 + 2 + 40
    assert b["step_ms"] == pytest.approx(per_step_us / 1e3)
    assert sum(b["categories"].values()) == pytest.approx(b["step_ms"])
    assert b["categories"]["gpu idle"] == pytest.approx((40 + 3 + 1) / 1e3)   # the gap, plus 1 us after each attention and embedding kernel
    assert b["categories"]["moe experts"] == pytest.approx(60 / 1e3)
    assert b["categories"]["moe routing"] == pytest.approx(6 / 1e3)
    assert b["categories"]["sampling"] == pytest.approx(2 / 1e3)
    assert set(b["categories"]) == set(CATEGORIES)


def test_the_anchor_is_a_once_per_step_kernel_not_a_per_layer_one():
    a = find_anchor(_steps(layers=4))
    assert a["period_us"] == pytest.approx(6 + 4 * 36 + 32 + 40)


def test_overlapping_streams_are_counted_once():
    ks = _steps()
    ks += [Kernel("ncclDevKernel_AllReduce", k.ts, k.dur, stream=9) for k in ks if k.name == "fused_moe_kernel"]
    b = step_breakdown(sorted(ks, key=lambda k: k.ts))
    assert sum(b["categories"].values()) == pytest.approx(b["step_ms"])
    assert b["overlap_ms"] == pytest.approx(60 / 1e3)


def test_too_few_steps_is_a_clear_error():
    with pytest.raises(TraceError, match="profile more decode steps"):
        step_breakdown(_steps(n_steps=4))
    with pytest.raises(TraceError, match="no GPU kernels"):
        step_breakdown([])


@pytest.mark.parametrize("name, category", [
    ("void flash::FlashAttnFwdSm90<cutlass::bfloat16_t>", "attention"),
    ("_fwd_grouped_kernel_stage1", "attention"),
    ("concat_and_cache_mla_kernel", "attention"),
    ("fused_moe_kernel", "moe experts"),
    ("marlin_moe_wna16::Marlin<>", "moe experts"),
    ("moe_align_block_size_kernel", "moe routing"),
    ("topkGatingSoftmax", "moe routing"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "dense gemm"),
    ("triton_tem_fused_mm_0", "dense gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("cross_device_reduce_1stage", "communication"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>", "sampling"),
    ("flashinfer::sampling::TopKTopPSamplingFromProbKernel", "sampling"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm/rope/elementwise"),
    ("rotary_embedding_kernel", "norm/rope/elementwise"),
    ("cub::DeviceRadixSortOnesweepKernel", "other"),
    # SGLang's norms come from flashinfer: "flash" in their names is not attention (h200x1-prof, sglang kimi-2L triton)
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int)",
     "norm/rope/elementwise"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*)",
     "norm/rope/elementwise"),
    ("flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel", "norm/rope/elementwise"),
    ("create_flashinfer_kv_indices_triton", "attention"),
])
def test_the_rule(name, category):
    assert classify(name) == category


def test_memcpy_is_other_whatever_its_name():
    assert classify("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy") == "other"


def _trace(kernels, extra=()):
    ev = [{"ph": "X", "cat": "kernel", "name": k.name, "ts": k.ts, "dur": k.dur, "args": {"device": 0, "stream": 7}} for k in kernels]
    return {"traceEvents": ev + list(extra), "schemaVersion": 1}


def test_traces_plain_or_gzip_and_bad_ones(tmp_path):
    data = _trace(_steps())
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    assert len(kernel_events(load_trace(tmp_path / "a.json"))) == len(kernel_events(load_trace(tmp_path / "b.json.gz")))
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(json.dumps(data).encode())[:200])
    with pytest.raises(TraceError, match="cut off"):
        load_trace(tmp_path / "cut.json.gz")
    with pytest.raises(TraceError, match="no trace at"):
        load_trace(tmp_path / "missing.json")


def test_a_trace_over_the_cap_keeps_the_measured_steps(tmp_path):
    ks = _steps(n_steps=400)
    filler = [{"ph": "X", "cat": "python_function", "name": f"py{i}" * 20, "ts": 1000.0 + i, "dur": 1.0} for i in range(40000)]
    (tmp_path / "t.json").write_text(json.dumps(_trace(ks, filler)))
    kept = keep_trace(tmp_path / "t.json", tmp_path / "kept.json.gz", cap_bytes=200_000, window=(ks[0].ts, ks[0].ts + 20_000))
    assert kept["bytes"] <= 200_000 and "measured steps" in kept["kept"]
    back = kernel_events(load_trace(tmp_path / "kept.json.gz"))
    assert back and all(k.ts <= ks[0].ts + 20_000 for k in back)
    small = keep_trace(tmp_path / "kept.json.gz", tmp_path / "again.json.gz")
    assert small["kept"] == "whole trace"


def _run(label, layers, busy, tpot, role="slice", card="moonlight-16b-a3b", engine="sglang"):
    return {"label": label, "ok": True, "card": card, "engine": engine, "backend": "auto", "mode": "graph", "quant": "bf16",
            "role": role, "layers": layers, "busy_ms": busy, "tpot_ms": tpot, "step_ms": tpot * 1.05, "taken_at": 1.0}


def test_prediction_from_two_slices_and_its_signed_error():
    p = predict_full(_run("a", 2, 1.0, 3.0), _run("b", 5, 1.6, 3.2), full_layers=27, dense_layers=1, moe=True)
    assert p["slope_ms"] == pytest.approx(0.2)          # (1.6 - 1.0) / (4 - 1) MoE layers
    assert p["fixed_ms"] == pytest.approx(0.8)
    assert p["predicted_ms"] == p["low_ms"] == pytest.approx(max(3.2, 0.8 + 26 * 0.2))   # overlapped: host hidden behind the GPU
    assert p["high_ms"] == pytest.approx(3.2 + 22 * 0.2)                                 # serial: host time kept
    rows = prediction_rows([_run("a", 2, 1.0, 3.0), _run("b", 5, 1.6, 3.2), _run("c", 27, 6.0, 8.0, role="full")])
    (r,) = rows
    assert r["measured_ms"] == 8.0 and r["error_pct"] == pytest.approx(100 * (6.0 - 8.0) / 8.0)
    assert r["from_labels"] == ["a", "b", "c"]
    # a profile taken again (same label, later row) supersedes the earlier one
    again = prediction_rows([_run("a", 2, 1.0, 3.0), _run("b", 5, 1.6, 3.2), _run("b", 5, 1.9, 3.2)])
    assert again[0]["slope_ms_per_layer"] == pytest.approx(0.3)
    with pytest.raises(ValueError):
        predict_full(_run("b", 5, 1.6, 3.2), _run("a", 2, 1.0, 3.0), full_layers=27, dense_layers=1, moe=True)


def test_breakdown_check_finds_a_changed_row():
    prof = [_run("a", 2, 1.0, 3.0)]
    prof[0]["step_ms"] = 3.0
    rows = [{"label": "a", "category": c, "ms_per_step": 3.0 / len(CATEGORIES), "taken_at": 1.0} for c in CATEGORIES]
    assert all(r["ok"] for r in breakdown_check(rows, prof))
    rows[0]["ms_per_step"] += 0.1
    assert not breakdown_check(rows, prof)[0]["ok"]


def test_inprocess_profile_of_the_embedded_model(tmp_path):
    """A real torch-profiler trace of the embedded model decoding in this process, at two depths and whole."""
    from servebook.embedded import build_embedded_model
    from servebook.profile.inprocess import inprocess_profiles

    rows = inprocess_profiles(build_embedded_model(progress=None), depths=[2, None], steps=10, trace_dir=tmp_path, say=lambda m: None)
    assert [r["layers"] for r in rows] == [2, 4]
    for r in rows:
        b = r["breakdown"]
        assert b["steps"] == 10 and sum(b["categories"].values()) == pytest.approx(b["step_ms"])
        assert b["categories"]["dense gemm"] > 0 and b["categories"]["attention"] > 0
    # more layers, more operators per step (times on a shared CPU are too noisy to order)
    assert rows[1]["breakdown"]["kernels_per_step"] > rows[0]["breakdown"]["kernels_per_step"]


def test_capture_drives_the_profiler_endpoints_of_a_live_server(tmp_path):
    """capture() against a paced server with SGLang's endpoints: the request is sized from the time per token, the
    profile started past the prefill and stopped, and the trace the server wrote is found and broken down."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from servebook.profile import capture
    from servebook.processes import free_port, stop_process_group

    port, trace_dir = free_port(), tmp_path / "traces"
    script = Path(__file__).parent / "harness" / "fake_profiler_engine.py"
    proc = subprocess.Popen([sys.executable, str(script), str(port), "0.004"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "SGLANG_TORCH_PROFILER_DIR": str(trace_dir)}, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        path = capture("sglang", f"http://127.0.0.1:{port}", "fake", "hi", trace_dir, tpot_s=0.004, steps=20, lead_s=0.3,
                       write_timeout_s=20, say=lambda m: None)
        b = step_breakdown(kernel_events(load_trace(path)))
        assert b["steps"] >= 15 and b["step_ms"] == pytest.approx(4.0, rel=0.01)
        assert b["categories"]["moe experts"] == pytest.approx(0.080)
    finally:
        stop_process_group(proc.pid)


# -- recorded on an H200 (data/runs/h200x1-prof) --------------------------------------------------------------------
from pathlib import Path as _Path

_REC = _Path(__file__).parent / "data" / "profile"
_RUN = _Path(__file__).parents[1] / "data" / "runs" / "h200x1-prof"


@pytest.mark.parametrize("excerpt", sorted(p.name for p in _REC.glob("*.excerpt.json")))
def test_the_rule_on_recorded_steps_of_both_engines(excerpt):
    """Every kernel of two recorded decode steps gets a category; the kernels that define a decode step land where
    they belong, and what no rule names ("other") stays a sliver of the step."""
    d = json.loads((_REC / excerpt).read_text())
    ks = [Kernel(k["name"], k["ts"], k["dur"], k.get("stream", 0), k["cat"]) for k in d["kernels"]]
    cats = {}
    for k in ks:
        cats.setdefault(classify(k.name, k.cat), []).append(k.name)
    names = " ".join(k.name for k in ks)
    assert "FlashAttnFwdSm90" in names or "_fwd_grouped_kernel" in names or "mla" in names.lower()
    assert all(classify(n) == "attention" for n in cats.get("attention", []))
    assert any("FlashAttn" in n or "_fwd_" in n or "mla" in n.lower() for n in cats["attention"])
    assert any("nvjet" in n or "gemm" in n.lower() for n in cats["dense gemm"])
    assert any("ArgMax" in n for n in cats["sampling"])
    if d["card"] != "llama-3.1-8b":
        assert any("moe" in n.lower() for n in cats["moe experts"])
        assert cats.get("moe routing"), "the router and the expert sort are routing"
        assert not any("marlin" in n.lower() or n == "fused_moe_kernel" for c, ns in cats.items() if c != "moe experts" for n in ns)
    other = sum(k.dur for k in ks if classify(k.name, k.cat) == "other")
    assert other < 0.05 * sum(k.dur for k in ks)


def test_recorded_breakdowns_sum_to_their_steps_and_recompute_from_the_kept_traces():
    from servebook.profile.tables import latest_ok
    from servebook.results import RunStore

    store = RunStore.at(_RUN)
    checks = breakdown_check(store.rows("decode_breakdown"), store.rows("profile_runs"))
    assert len(checks) >= 20 and all(c["ok"] for c in checks)
    for r in latest_ok(store.rows("profile_runs")):
        if r.get("trace_kept") != "whole trace":
            continue      # cut to stay under the cap: its first steps only
        b = step_breakdown(kernel_events(load_trace(_RUN / r["trace"])))
        assert b["steps"] == r["steps"] and b["step_ms"] == pytest.approx(r["step_ms"]) and b["busy_ms"] == pytest.approx(r["busy_ms"])


def test_recorded_categories_are_todays_rule_on_the_kept_traces():
    """decode_breakdown was re-classified from the kept traces (flashinfer's norms are not attention): a trace kept
    whole gives exactly the recorded categories, and SGLang's Triton-MLA attention holds MLA and KV kernels only."""
    from servebook.profile.tables import latest_breakdown, latest_ok
    from servebook.results import RunStore

    store = RunStore.at(_RUN)
    rows = latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs"))
    for r in latest_ok(store.rows("profile_runs")):
        if r.get("trace_kept") != "whole trace":
            continue
        b = step_breakdown(kernel_events(load_trace(_RUN / r["trace"])))
        for x in (x for x in rows if x["label"] == r["label"]):
            assert x["ms_per_step"] == pytest.approx(b["categories"][x["category"]], abs=1e-9), (r["label"], x["category"])
    d = json.loads((_RUN / "traces" / "sglang_kimi-2L_triton.excerpt.json").read_text())
    att = {k["name"] for k in d["kernels"] if classify(k["name"], k["cat"]) == "attention"}
    assert att and not any("norm" in n.lower() for n in att)


def test_recorded_predictions_recompute_from_the_recorded_profiles():
    from servebook.results import RunStore

    store = RunStore.at(_RUN)
    again = prediction_rows(store.rows("profile_runs"), store.rows("memory_bandwidth"), 4.8)
    recorded = store.rows("prediction_check")
    assert len(again) == len(recorded) >= 4
    for a, r in zip(again, recorded):
        for k in ("predicted_ms", "low_ms", "high_ms", "measured_ms", "error_pct", "slope_ms_per_layer"):
            assert a[k] == pytest.approx(r[k]), (a["card"], a["engine"], k)
    checked = [r for r in recorded if r["measured_ms"] is not None]
    assert len(checked) >= 2 and {r["engine"] for r in checked} == {"sglang", "vllm"}


def test_the_prediction_table_states_the_prediction_in_tok_s_too():
    """Chapter 05's table of full-model predictions (h200x1-live) carries 1000 / predicted_ms as predicted_tok_s."""
    from servebook.paths import book_root
    from servebook.profile import chapter_tables, prediction_table
    from servebook.results import RunStore

    from servebook.roofline import weights_on_gpus

    t = chapter_tables(RunStore(book_root() / "data" / "runs" / "h200x1-live"))
    p = prediction_table(t)
    assert len(p) and list(p.columns).index("predicted_tok_s") == list(p.columns).index("predicted_ms") + 1
    # a model one H200 cannot hold (Kimi-K2.5) gets no rate: its time is one GPU's compute only
    fits = [weights_on_gpus(c, q, "h200")["gpus_to_hold"] <= 1 for c, q in zip(p["card"], p["quant"])]
    assert any(fits) and not all(fits)
    tok = 1e3 / t["predictions"]["predicted_ms"]
    assert all((abs(x - y) < 1e-3) if ok else x != x or x is None for x, y, ok in zip(p["predicted_tok_s"], tok, fits))
    assert prediction_table({"predictions": t["predictions"].iloc[0:0]}) == "no two slice depths profiled: no prediction"


def test_a_host_bound_difference_over_one_start_is_a_hypothesis(tmp_path):
    """Chapter 06 of a live run: two host-bound profiles of one server start each do not show the difference is on the
    host; the page says it is a hypothesis and what settles it, and names a shallower slice that took longer. With
    two starts of each profile it states the finding."""
    import re

    from servebook.profile.chapter import where_time_goes
    from servebook.results import RunStore

    store = RunStore.at(tmp_path)

    def profile(label, engine, layers, tpot, t):
        store.append("profile_runs", {"label": label, "engine": engine, "backend": "auto", "mode": "graph", "card": "kimi-k2.5",
                                      "quant": "bf16", "layers": layers, "role": "slice", "ok": True, "tpot_ms": tpot,
                                      "step_ms": tpot + 0.5, "busy_ms": 1.0, "taken_at": t})
        for cat, ms in (("attention", 0.3), ("dense gemm", 0.7), ("gpu idle", tpot - 0.5)):
            store.append("decode_breakdown", {"label": label, "engine": engine, "category": cat, "ms_per_step": ms,
                                              "taken_at": t, "card": "kimi-k2.5", "layers": layers})

    profile("s 1L", "sglang", 1, 2.6, 1.0)
    profile("s 2L", "sglang", 2, 2.0, 2.0)
    profile("v 2L", "vllm", 2, 2.3, 3.0)
    profile("v 1L", "vllm", 1, 2.2, 4.0)
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "on the host, not in their kernels" not in text
    assert "**hypothesis**" in text and "several server starts" in text and "host-side trace" in text
    assert "s 1L, with fewer layers, took 2.600 ms per token, more than s 2L" in text
    for label, engine, layers, tpot, t in (("s 2L", "sglang", 2, 2.0, 5.0), ("v 2L", "vllm", 2, 2.3, 6.0)):
        profile(label, engine, layers, tpot, t)
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "2 layers" in text and "so the difference between the engines here is on the host, not in their kernels" in text


# -- start-to-start spread (a second server start of each slice, role "repeat") -------------------------------------
def _start(label, engine, busy, tpot, t, role="slice", backend="auto", layers=2):
    return {"label": label, "engine": engine, "backend": backend, "mode": "graph", "card": "kimi-k2.5", "quant": "bf16",
            "layers": layers, "role": role, "ok": True, "tpot_ms": tpot, "step_ms": tpot + 0.5, "busy_ms": busy, "taken_at": t}


def test_start_spread_pairs_a_slice_with_its_other_starts():
    from servebook.profile.tables import engine_difference, start_spread

    rows = [_start("s 2L", "sglang", 1.20, 2.00, 1.0), _start("s 2L triton", "sglang", 1.25, 2.20, 2.0, backend="triton"),
            _start("s 2L start 2", "sglang", 1.10, 2.30, 3.0, role="repeat"), _start("s 1L", "sglang", 0.9, 1.8, 4.0, layers=1)]
    sp = start_spread(rows, "s 2L")
    assert sp["starts"] == 2 and sp["labels"] == ["s 2L", "s 2L start 2"]
    assert sp["busy_ms"] == [1.20, 1.10] and sp["busy_spread_ms"] == pytest.approx(0.10)
    assert sp["tpot_spread_ms"] == pytest.approx(0.30) and sp["tpot_mean_ms"] == pytest.approx(2.15)
    assert start_spread(rows, "s 2L start 2")["labels"] == ["s 2L", "s 2L start 2"]          # from either start
    assert start_spread(rows, "s 2L triton") is None and start_spread(rows, "s 1L") is None   # one start each
    # a profile taken again under its own label is another start too
    again = rows + [_start("s 2L triton", "sglang", 1.27, 2.10, 5.0, backend="triton")]
    assert start_spread(again, "s 2L triton")["starts"] == 2
    # a second start is no other server: the engines' difference is taken between first starts
    rows += [_start("v 2L start 2", "vllm", 1.0, 9.0, 6.0, role="repeat"), _start("v 2L", "vllm", 1.0, 2.5, 0.5)]
    diff = engine_difference([], rows)
    assert {r["b"] for r in diff} == {"v 2L"}


def _host_store(tmp_path, starts):
    from servebook.results import RunStore

    store = RunStore.at(tmp_path)
    for label, engine, busy, tpot, t, role in starts:
        store.append("profile_runs", _start(label, engine, busy, tpot, t, role=role))
        for cat, ms in (("attention", 0.3), ("dense gemm", busy - 0.3), ("gpu idle", tpot - busy)):
            store.append("decode_breakdown", {"label": label, "engine": engine, "category": cat, "ms_per_step": ms,
                                              "taken_at": t, "card": "kimi-k2.5", "layers": 2})
    return store


def test_a_host_bound_difference_over_two_starts_is_a_finding_only_beyond_each_spread(tmp_path):
    """Chapter 06: with a second start of each slice the starts' figures are stated; "on the host, not in their kernels"
    only where the busy times agree within the engines' start-to-start spread and the 95% intervals of the times per
    token over the starts do not overlap (issue #41 item 3); else a hypothesis saying what settles it."""
    import re

    from servebook.profile.chapter import where_time_goes

    # two starts each, tpot 2.0/2.05 against 2.6/2.8: apart by more than each spread, but the 95% intervals over two
    # starts (t = 12.7) overlap: no difference shown, a hypothesis (the old rule called this a finding)
    store = _host_store(tmp_path / "a", [("s 2L", "sglang", 1.20, 2.00, 1.0, "slice"), ("v 2L", "vllm", 1.19, 2.60, 2.0, "slice"),
                                         ("s 2L start 2", "sglang", 1.19, 2.05, 3.0, "repeat"),
                                         ("v 2L start 2", "vllm", 1.17, 2.80, 4.0, "repeat")])
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "over 2 and 2 server starts" in text and "1.200 and 1.190 ms per step" in text and "2.600 and 2.800 ms per token" in text
    assert "on the host, not in their kernels" not in text and "**hypothesis**" in text and "95% intervals overlap" in text
    # three starts each, tight: the intervals separate and the kernels agree: the finding
    store = _host_store(tmp_path / "a3", [("s 2L", "sglang", 1.20, 2.00, 1.0, "slice"), ("v 2L", "vllm", 1.19, 2.60, 2.0, "slice"),
                                          ("s 2L start 2", "sglang", 1.19, 2.01, 3.0, "repeat"),
                                          ("v 2L start 2", "vllm", 1.17, 2.62, 4.0, "repeat"),
                                          ("s 2L start 3", "sglang", 1.19, 2.02, 5.0, "repeat"),
                                          ("v 2L start 3", "vllm", 1.18, 2.61, 6.0, "repeat")])
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "over 3 and 3 server starts" in text and "do not overlap" in text
    assert "on the host, not in their kernels" in text and "**hypothesis**" not in text
    # vLLM's second start moves its tpot by more than the engines' difference: a hypothesis
    store = _host_store(tmp_path / "b", [("s 2L", "sglang", 1.20, 2.00, 1.0, "slice"), ("v 2L", "vllm", 1.19, 2.40, 2.0, "slice"),
                                         ("s 2L start 2", "sglang", 1.19, 2.05, 3.0, "repeat"),
                                         ("v 2L start 2", "vllm", 1.17, 1.80, 4.0, "repeat")])
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "on the host, not in their kernels" not in text and "**hypothesis**" in text
    assert "95% intervals overlap" in text and "more starts of each server" in text
    # kernels apart beyond their spread: a hypothesis too
    store = _host_store(tmp_path / "c", [("s 2L", "sglang", 1.40, 2.00, 1.0, "slice"), ("v 2L", "vllm", 1.19, 2.60, 2.0, "slice"),
                                         ("s 2L start 2", "sglang", 1.39, 2.05, 3.0, "repeat"),
                                         ("v 2L start 2", "vllm", 1.17, 2.80, 4.0, "repeat")])
    text = re.sub(r"<[^>]+>", "", where_time_goes(store))
    assert "the kernels differ beyond their start-to-start spread" in text and "**hypothesis**" in text


def test_the_recorded_second_starts_and_what_they_say():
    """h200x1-prof: each of the four 2-layer Kimi slices has a second start, taken on 2026-12-02 on another machine than
    the first (2026-12-01; its RECORDED.md): rows without machine identity of two recording units are no start spread
    (that would book two machines' difference as the start-to-start spread). Within one unit the spread is computed from
    every start (h200x1-ref: SGLang's 1-MoE-layer slice over its 4 starts)."""
    from servebook.profile.machines import recording_unit
    from servebook.profile.tables import start_spread, starts_of
    from servebook.results import RunStore

    rows = RunStore.at(_RUN).rows("profile_runs")
    ok = {p["label"]: p for p in rows if p.get("ok")}
    for label in ("sglang kimi-2L", "vllm kimi-2L", "sglang kimi-2L triton", "vllm kimi-2L TRITON_MLA"):
        assert recording_unit(ok[label]) != recording_unit(ok[label + " start 2"])
        assert start_spread(rows, label) is None and [p["label"] for p in starts_of(rows, label)] == [label], label
    ref = RunStore.at(_RUN.parent / "h200x1-ref").rows("profile_runs")
    sp = start_spread(ref, "sglang kimi-2L int4 triton")
    assert sp["starts"] == 4 and sp["labels"][0] == "sglang kimi-2L int4 triton" and sp["busy_spread_ms"] < 0.01


def test_copy_profile_tables_copies_every_row_as_stored(tmp_path):
    from servebook.profile.tables import PROFILE_TABLES, copy_profile_tables
    from servebook.results import RunStore

    src, dst = RunStore.at(tmp_path / "src"), RunStore.at(tmp_path / "dst")
    src.append("profile_runs", {"label": "a", "ok": True})
    src.append("profile_runs", {"label": "b", "ok": True, "withdrawn": {"reason": "x"}})
    src.append("decode_breakdown", {"label": "a", "category": "other", "ms_per_step": 1.0, "corrected": {"by": "t"}})
    dst.append("profile_runs", {"label": "old", "ok": True})
    got = copy_profile_tables(src, dst)
    assert got["profile_runs"] == 2 and got["prediction_check"] == 0
    for t in PROFILE_TABLES:
        assert dst.rows(t, withdrawn=True) == src.rows(t, withdrawn=True)


def test_the_live_run_holds_the_profile_run_tables():
    """h200x1-live shows the profiles of h200x1-prof beside its benchmark (chapters 05, 06): its copy is the same rows,
    the corrected and the later ones included."""
    from servebook.paths import book_root
    from servebook.profile.tables import PROFILE_TABLES
    from servebook.results import RunStore

    live = RunStore(book_root() / "data" / "runs" / "h200x1-live")
    prof = RunStore.at(_RUN)
    for t in PROFILE_TABLES:
        assert live.rows(t, withdrawn=True) == prof.rows(t, withdrawn=True), t


def test_each_prediction_line_names_its_quantisation_and_its_one_recording_unit():
    """h200x1-live's chapter 05 said "kimi-k2.5 with vllm (auto): predicted ... 19.702 ms" and, in the same words,
    "... 12.701 ms" (bf16 and INT4 experts): each line now names its quantisation. And the Triton rows subtracted a
    1-layer slice profiled on 2026-12-02 from a 2-layer one of 2026-12-01: two recording units, by rows without machine
    identity (h200x1-prof's RECORDED.md: two machines), flagged on the page (23.484 and 20.679 ms). No prediction pairs
    across units now: the Triton rows pair the 1-layer slice with the 2-layer slice's second start, both of 2026-12-02,
    and name the first start of 2026-12-01 as left out; every line names its unit."""
    import re

    from servebook.paths import book_root
    from servebook.profile.chapter import findings
    from servebook.profile.machines import recording_unit
    from servebook.results import RunStore

    store = RunStore(book_root() / "data" / "runs" / "h200x1-live")
    lines = [re.sub(r"<span[^>]*>|</span>", "", x) for x in findings(store) if "-layer slices" in x]
    preds = store.rows("prediction_check")
    assert len(lines) == len(preds) and len(set(lines)) == len(lines)
    prof = {p["label"]: p for p in store.rows("profile_runs") if p.get("ok")}
    for p, line in zip(preds, lines):
        assert line.startswith(f"- {p['card']} ({'INT4 experts' if p['quant'] == 'card' else p['quant']}) with {p['engine']} ")
        assert {recording_unit(prof[lab]) for lab in p["from_labels"]} == {p["unit"]}, line
        assert f"both slices from one recording unit, `{p['unit']}`" in line
    triton = {p["backend"]: (p, line) for p, line in zip(preds, lines) if p["backend"] in ("triton", "TRITON_MLA")}
    assert sorted(triton) == ["TRITON_MLA", "triton"]
    for p, line in triton.values():
        assert p["unit"] == "2026-12-02" and p["from_labels"][1].endswith(" start 2")
        assert f"`2026-12-01` holds `{p['from_labels'][1][:-len(' start 2')]}`" in line and "left out" in line
    assert sum("holds no routed expert" in x for x in lines) == 1
