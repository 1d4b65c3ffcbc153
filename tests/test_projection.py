"""servebook.profile.projection: each rule on small recorded-like tables."""

from __future__ import annotations

import pytest

from servebook.profile import fixes as fx
from servebook.profile import projection as pj
from servebook.profile import slices as slc

CATS = ("attention", "moe experts", "moe routing", "dense gemm", "communication", "norm/rope/elementwise",
        "sampling", "other", "gpu idle")


def _profile(label, engine, layers, quant="bf16", backend="auto", mode="graph", tpot=2.0, busy=1.5, t=1.0):
    return {"label": label, "engine": engine, "backend": backend, "mode": mode, "card": "kimi-k2.5", "role": "slice",
            "quant": quant, "layers": layers, "tpot_ms": tpot, "step_ms": tpot + 0.1, "busy_ms": busy, "ok": True,
            "taken_at": t}


def _breakdown(p, **ms):
    return [{"label": p["label"], "engine": p["engine"], "backend": p["backend"], "mode": p["mode"], "card": p["card"],
             "layers": p["layers"], "quant": p["quant"], "category": c, "ms_per_step": ms.get(c.replace(" ", "_").replace("/", "_"), 0.0),
             "taken_at": p["taken_at"]} for c in CATS if c.replace(" ", "_").replace("/", "_") in ms or True]


def _tables(engine="sglang", int4=True, one=None, two=None, q=None):
    p1, p2 = _profile(f"{engine} 1L", engine, 1, tpot=1.0, busy=0.8), _profile(f"{engine} 2L", engine, 2, tpot=2.0, busy=1.5)
    rows = _breakdown(p1, **(one or {"attention": 0.1, "dense_gemm": 0.5, "norm_rope_elementwise": 0.1, "sampling": 0.05}))
    rows += _breakdown(p2, **(two or {"attention": 0.2, "moe_experts": 0.4, "moe_routing": 0.03, "dense_gemm": 0.7,
                                      "norm_rope_elementwise": 0.15, "sampling": 0.05}))
    profiles = [p1, p2]
    if int4:
        p3 = _profile(f"{engine} 2L int4", engine, 2, quant="card", mode="eager")
        profiles.append(p3)
        rows += _breakdown(p3, **(q or {"attention": 0.2, "moe_experts": 0.15, "dense_gemm": 0.7}))
    return {"profile_runs": profiles, "decode_breakdown": rows}


def _row(rows, cat):
    return next(r for r in rows if r["category"] == cat)


RATIO = 4.8 / 1.792


def test_bandwidth_ratio_and_tp_share_experts():
    rows = pj.project(_tables(), "sglang", allreduce_us=20.0, allreduce_source="test")
    # experts: fixed 0, one MoE layer 0.15 (INT4 slice) -> 60 x 0.15 x ratio / 8
    assert _row(rows, "moe experts")["ms_per_token"] == pytest.approx(60 * 0.15 * RATIO / 8)
    # attention, latency-bound by default: kept as measured, 0.1 + 60 x 0.1
    assert _row(rows, "attention")["ms_per_token"] == pytest.approx(0.1 + 60 * 0.1)
    # attention_rule='bandwidth': share 1 (latent KV read by every rank): (0.1 + 60 x 0.1) x ratio
    bw = pj.project(_tables(), "sglang", allreduce_us=20.0, allreduce_source="test", attention_rule="bandwidth")
    assert _row(bw, "attention")["ms_per_token"] == pytest.approx((0.1 + 60 * 0.1) * RATIO)


def test_measured_bandwidth_changes_the_ratio():
    t = _tables()
    t["memory_bandwidth"] = [{"read_tbs": 4.0}]
    rows = pj.project(t, "sglang", allreduce_us=20.0, bandwidth="measured")
    assert _row(rows, "moe experts")["ms_per_token"] == pytest.approx(60 * 0.15 * (4.0 / 1.792) / 8)


def test_dense_share_between_one_over_tp_and_one():
    from servebook.cards import load_card

    sh = pj.tp_shares(load_card("kimi-k2.5"), 8)
    assert 1 / 8 < sh["moe"]["dense gemm"] < 1 and 1 / 8 < sh["fixed"]["dense gemm"] < sh["moe"]["dense gemm"]
    assert pj.tp_shares(load_card("kimi-k2.5"), 1)["moe"]["dense gemm"] == pytest.approx(1.0)


def test_floor_from_smallest_kernel_applies():
    t = _tables()
    # 1L: 2 dense gemm kernels per step; 2L: 6 per step; smallest 5 us -> floor per MoE layer 4 x 5 us = 0.02 ms
    k1 = [{"name": "gemv_kernel", "dur": 5.0, "cat": "kernel"}, {"name": "gemv_kernel", "dur": 200.0, "cat": "kernel"}] * 2
    k2 = [{"name": "gemv_kernel", "dur": 8.0, "cat": "kernel"}] * 10 + [{"name": "gemv_kernel", "dur": 300.0, "cat": "kernel"}] * 2
    t["excerpts"] = {"sglang 1L": {"steps": 2, "kernels": k1}, "sglang 2L": {"steps": 2, "kernels": k2}}
    t["decode_breakdown"] = [r for r in t["decode_breakdown"]]
    floors = pj.kernel_floors(t["excerpts"], slc.select_slices(t["profile_runs"], "sglang"))
    assert floors["dense gemm"]["floor_us"] == 5.0
    assert floors["dense gemm"]["moe_ms"] == pytest.approx(4 * 5.0 / 1e3)
    # a tiny per-layer dense gemm (0.001 ms on H200) is lifted to the floor
    t2 = _tables(two={"attention": 0.2, "moe_experts": 0.4, "dense_gemm": 0.501, "norm_rope_elementwise": 0.1,
                      "sampling": 0.05, "moe_routing": 0.0})
    t2["excerpts"] = t["excerpts"]
    rows = pj.project(t2, "sglang", allreduce_us=20.0)
    dg = _row(rows, "dense gemm")
    assert "floor applies: per MoE layer" in dg["rule"]
    assert dg["ms_per_token"] >= 60 * 0.02
    no_exc = pj.project(_tables(), "sglang", allreduce_us=20.0)
    assert "no floor" in _row(no_exc, "dense gemm")["rule"]


def test_comm_floor_counts_collectives():
    rows = pj.project(_tables(), "sglang", allreduce_us=20.0, allreduce_source="test figure")
    c = _row(rows, "communication")
    assert c["collectives"] == 2 * 61 + 2
    assert c["ms_per_token"] == pytest.approx(124 * 20.0 / 1e3)
    assert c["source"] == "test figure"
    assert _row(pj.project(_tables(), "sglang", tp=1), "communication")["ms_per_token"] == 0.0


def test_default_allreduce_is_published_and_interpolated():
    us, label = pj._default_allreduce(14336)
    assert 24.2 < us < 24.5 and "https://" in label
    assert pj.allreduce_latency({"8192": 10.0, "32768": 20.0}, 16384) == pytest.approx(15.0)
    assert pj.allreduce_latency({"8192": 10.0, "32768": 20.0}, 1) == 10.0


def test_latency_bound_kept_and_clock_ratio():
    rows = pj.project(_tables(), "sglang", allreduce_us=20.0)
    assert _row(rows, "moe routing")["ms_per_token"] == pytest.approx(60 * 0.03)
    assert _row(rows, "sampling")["ms_per_token"] == pytest.approx(0.05)
    rows2 = pj.project(_tables(), "sglang", allreduce_us=20.0, clock_ratio=2.0)
    assert _row(rows2, "moe routing")["ms_per_token"] == pytest.approx(60 * 0.03 / 2)


def test_no_int4_slice_scales_bf16_experts_by_bytes():
    rows = pj.project(_tables(int4=False), "sglang", allreduce_us=20.0)
    e = _row(rows, "moe experts")
    ratio = (0.5 + 2 / 32) / 2
    assert e["ms_per_token"] == pytest.approx(60 * 0.4 * ratio * RATIO / 8)
    assert "no INT4 slice" in e["source"]


def test_unknown_not_zero():
    rows = pj.project({"profile_runs": [], "decode_breakdown": []}, "sglang", allreduce_us=20.0)
    assert _row(rows, "attention")["ms_per_token"] is None
    assert "unknown" in _row(rows, "attention")["source"]
    tot = _row(rows, "total")
    assert tot["ms_per_token"] is None and tot["predicted_tok_s"] is None and "attention" in tot["unknown"]
    # a category row missing from one slice's table is unknown, not 0
    t = _tables()
    t["decode_breakdown"] = [r for r in t["decode_breakdown"] if not (r["category"] == "sampling" and r["layers"] == 1)]
    rows = pj.project(t, "sglang", allreduce_us=20.0)
    assert _row(rows, "sampling")["ms_per_token"] is None
    assert _row(rows, "total")["unknown"] == ["sampling"]


def test_totals_sum_and_error_sign():
    rows = pj.project(_tables(), "sglang", allreduce_us=20.0, seed_tok_s=10.0)
    tot = _row(rows, "total")
    parts = [r["ms_per_token"] for r in rows if r["category"] != "total"]
    assert tot["ms_per_token"] == pytest.approx(sum(parts))
    assert tot["predicted_tok_s"] == pytest.approx(1e3 / sum(parts))
    gpu = sum(r["ms_per_token"] for r in rows if r["category"] not in ("total", "gpu idle"))
    # the one host rule (overlapped): the host adds only what its 2.0 ms per step exceeds the GPU time; serial is the bound
    assert _row(rows, "gpu idle")["ms_per_token"] == pytest.approx(max(0.0, 2.0 - gpu))
    assert _row(rows, "gpu idle")["serial_ms"] == pytest.approx(2.0 - 1.5) and _row(rows, "gpu idle")["host_rule"] == "overlapped"
    assert tot["serial_ms"] == pytest.approx(gpu + 0.5) and tot["host_rule"] == "overlapped"
    faster = tot["predicted_tok_s"] > 10.0
    assert (tot["error_pct"] > 0) == faster
    slow = _row(pj.project(_tables(), "sglang", allreduce_us=20.0, seed_tok_s=1e6), "total")
    assert slow["error_pct"] < 0
    none = _row(pj.project(_tables(), "vllm", allreduce_us=20.0), "total")  # no vllm slices: unknown, seed still quoted
    assert none["predicted_tok_s"] is None and none["error_pct"] is None and none["seed_tok_s"] == 82.5
    assert _row(pj.project(_tables("vllm"), "vllm", allreduce_us=20.0), "total")["seed_tok_s"] == 82.5


def test_ranking_order_and_labels():
    a = pj.project(_tables("sglang", two={"attention": 0.5, "moe_experts": 0.4, "moe_routing": 0.03, "dense_gemm": 0.7,
                                          "norm_rope_elementwise": 0.15, "sampling": 0.05}), "sglang", allreduce_us=40.0)
    b = pj.project(_tables("vllm"), "vllm", allreduce_us=40.0)
    fixes = fx.ranked_fixes(a + b, custom_allreduce_us=10.0, nccl_tuned_us=30.0)
    gains = [f["gain_ms_per_token"] for f in fixes if f["gain_ms_per_token"] is not None]
    assert gains == sorted(gains, reverse=True)
    assert all(f["label"] in ("predicted", fx.UNCHECKED) and f["check_command"] for f in fixes)
    assert not any("root cause" in (f["basis"] + f["change"]).lower() for f in fixes)
    car = next(f for f in fixes if f["engine"] == "sglang" and f["change"].startswith("custom PCIe"))
    # no reading of the engine's code says it has the PCIe all-reduce switch: listed so, with no gain, after the predicted
    assert car["label"] == fx.UNCHECKED and car["gain_ms_per_token"] is None
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" in car["check_command"]
    nccl = next(f for f in fixes if f["engine"] == "sglang" and "NCCL block" in f["change"])
    assert nccl["gain_ms_per_token"] == pytest.approx(124 * (40.0 - 30.0) / 1e3)     # a given figure: the caller's
    att = next(f for f in fixes if f["engine"] == "sglang" and f["change"].startswith("attention"))
    assert att["gain_ms_per_token"] == pytest.approx(_row(a, "attention")["ms_per_token"] - _row(b, "attention")["ms_per_token"])
    assert "--attention-backend flashinfer" in att["check_command"]
    assert att["gain_tok_s"] > 0
    # attention: 60 x (0.4 - 0.1) ms x bandwidth ratio dwarfs 124 x 30 us
    assert fixes[0]["change"].startswith("attention") and fixes[0]["engine"] == "sglang"
    assert fixes.index(nccl) < fixes.index(car)


def test_the_seed_projection_from_the_recorded_h200_profiles(tmp_path):
    """Both engines' Triton MLA profiles of data/runs/h200x1-prof carried to the seed's host: each engine's categories
    add up to its total, the total is compared with the seed's own figure (never fitted to it), and the tables land
    in the run."""
    from servebook.profile.seed import SEED_BACKENDS, SEED_TABLES, gap_by_category, record_seed
    from servebook.profile.verdict import verdict
    from servebook.results import RunStore

    store = RunStore.at(tmp_path)
    rows, fixes = record_seed(store)
    for engine, backend in SEED_BACKENDS.items():
        mine = [r for r in rows if r["engine"] == engine]
        total = next(r for r in mine if r["category"] == "total")
        assert total["backend"] == backend and total["unknown"] == []
        assert sum(r["ms_per_token"] for r in mine if r["category"] != "total") == pytest.approx(total["predicted_ms"])
        assert total["seed_tok_s"] == {"sglang": 63.6, "vllm": 82.5}[engine]
        assert total["error_pct"] == pytest.approx(100 * (total["predicted_tok_s"] - total["seed_tok_s"]) / total["seed_tok_s"])
    gap = sum(g["diff_ms"] for g in gap_by_category(rows) if g["diff_ms"] is not None)
    tot = {r["engine"]: r["predicted_ms"] for r in rows if r["category"] == "total"}
    assert gap == pytest.approx(tot["sglang"] - tot["vllm"])
    assert fixes and {f["label"] for f in fixes} >= {"predicted", fx.UNCHECKED}
    assert all((f["gain_ms_per_token"] is None) == (f["label"] != "predicted") for f in fixes)
    assert len(store.rows("seed_projection")) == len(rows)
    assert "Likely cause" in verdict({name: store.rows(name) for name in SEED_TABLES})


# -- review findings of 2026-12-02 ----------------------------------------------------------------------------------
def _mixed(same_two=True):
    """SGLang-like slices: 1 layer with the default backend, 2 layers with it and with triton (whose step adds 0.02 ms
    of copies and 0.01 ms of other per 2 layers), an INT4 slice."""
    p1 = _profile("s 1L", "sglang", 1, tpot=1.0, busy=0.8)
    p2 = _profile("s 2L", "sglang", 2, tpot=2.0, busy=1.5)
    pt = _profile("s 2L triton", "sglang", 2, backend="triton", tpot=2.0, busy=1.5)
    pq = _profile("s 2L int4", "sglang", 2, quant="card", mode="eager")
    rows = _breakdown(p1, attention=0.1, dense_gemm=0.5, norm_rope_elementwise=0.10, sampling=0.05, other=0.01)
    rows += _breakdown(p2, attention=0.2, moe_experts=0.4, dense_gemm=0.7, norm_rope_elementwise=0.15, sampling=0.04,
                       other=0.01)
    rows += _breakdown(pt, attention=0.3, moe_experts=0.4, dense_gemm=0.7, norm_rope_elementwise=0.17, sampling=0.04,
                       other=0.02)
    rows += _breakdown(pq, attention=0.2, moe_experts=0.15, dense_gemm=0.7)
    profiles = [p1, p2, pt, pq] if same_two else [p1, pt, pq]
    return {"profile_runs": profiles, "decode_breakdown": [r for r in rows if any(r["label"] == p["label"] for p in profiles)]}


def test_a_per_layer_difference_comes_from_slices_of_one_backend():
    """Finding 4: with a triton 2-layer slice and only a default 1-layer slice, one MoE layer of a category other than
    attention is the default backend's 2L - 1L plus half triton's difference at 2 layers, not triton 2L - default 1L."""
    rows = pj.project(_mixed(), "sglang", backend="triton", allreduce_us=20.0)
    nr = _row(rows, "norm/rope/elementwise")
    # fixed 0.10 + 0.01; per MoE layer (0.15 - 0.10) + 0.01; the old rule gave 0.10 + 60 x 0.07
    assert nr["ms_per_token"] == pytest.approx(0.11 + 60 * 0.06)
    assert "s 2L - s 1L (one backend)" in nr["source"] and not nr.get("confounded")
    assert _row(rows, "attention")["ms_per_token"] == pytest.approx(61 * 0.15)      # triton 2L / 2 per layer
    assert "s 2L" in _row(rows, "total")["from_labels"]


def test_without_a_same_backend_pair_the_mixed_categories_are_confounded():
    rows = pj.project(_mixed(same_two=False), "sglang", backend="triton", allreduce_us=20.0)
    assert _row(rows, "norm/rope/elementwise").get("confounded") and "confounded" in _row(rows, "norm/rope/elementwise")["source"]
    assert not _row(rows, "attention").get("confounded") and not _row(rows, "moe experts").get("confounded")


def test_a_negative_per_layer_difference_is_noise_taken_as_zero():
    """Finding 7: sampling 0.04 at 2 layers against 0.05 at 1 layer is not -0.01 per layer x 60."""
    rows = pj.project(_mixed(), "sglang", backend="triton", allreduce_us=20.0)
    smp = _row(rows, "sampling")
    assert smp["ms_per_token"] == pytest.approx(0.05) and "within the noise" in smp["source"]


def _path(engine, version, **choices):
    return [{"engine": engine, "version": version, "setting": k, **v} for k, v in choices.items()]


def test_changes_the_engine_has_not_or_runs_already_are_not_gains():
    """Finding 5: chapter 02's reading of the studied versions decides: no PCIe switch, batch 1 captured, Marlin experts."""
    a = pj.project(_tables("sglang"), "sglang", allreduce_us=40.0)
    b = pj.project(_tables("vllm"), "vllm", allreduce_us=40.0)
    marlin = {"choice": "CompressedTensorsWNA16MarlinMoEMethod", "where": "compressed_tensors.py:685"}
    path = _path("sglang", "0.5.9", **{"PCIe all-reduce options": {"choice": "none: no PCIe all-reduce switch"},
                                        "CUDA-graph capture sizes": {"choice": "on; sizes [1, 2]; batch 1 captured", "where": "x.py:1"},
                                        "MoE runner": {**marlin, "condition": "wNa16 and not (self._is_mxint4a16(w) and runner)"}})
    path += _path("vllm", "0.26.0", **{"MoE runner": marlin, "CUDA-graph capture sizes": {"choice": "batch 1 captured"}})
    fixes = fx.ranked_fixes(a + b, decode_path=path, versions={"sglang": "0.5.9"})
    by = {(f["engine"], f["change"].split()[0]): f for f in fixes}
    assert by[("sglang", "custom")]["label"] == fx.NOT_IN_VERSION
    assert by[("sglang", "CUDA-graph")]["label"] == fx.ALREADY_DEFAULT
    assert "--cuda-graph-bs-decode" not in " ".join(f["check_command"] for f in fixes)
    assert by[("sglang", "MoE")]["label"] == fx.NO_EFFECT and by[("vllm", "MoE")]["label"] == fx.ALREADY_DEFAULT
    assert by[("vllm", "CUDA-graph")]["label"] == fx.ALREADY_DEFAULT
    # vLLM 0.26.0 has no decode_path row for the PCIe switch here: not read, so not a gain either
    assert by[("vllm", "custom")]["label"] == fx.UNCHECKED
    # a version whose code has the switch (SGLang 0.5.23 in the what-if run) gets the published same-machine gain
    path2 = _path("sglang", "0.5.23", **{"PCIe all-reduce options": {"choice": "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"}})
    published = pj.project(_tables("sglang"), "sglang") + pj.project(_tables("vllm"), "vllm")
    f2 = fx.ranked_fixes(published, decode_path=path2, versions={"sglang": "0.5.23"})
    car2 = next(f for f in f2 if f["engine"] == "sglang" and f["change"].startswith("custom"))
    assert car2["label"] == "predicted" and car2["gain_ms_per_token"] > 0
    # against a latency the caller gave (its machine unknown), the published kernel's figure is no gain
    f3 = fx.ranked_fixes(a + b, decode_path=path2, versions={"sglang": "0.5.23"})
    assert next(f for f in f3 if f["engine"] == "sglang" and f["change"].startswith("custom"))["label"] == fx.NOT_COMPUTABLE
    for f in fixes:
        assert (f["gain_ms_per_token"] is None) == (f["label"] != "predicted")
    first_unranked = next(i for i, f in enumerate(fixes) if f["label"] != "predicted")
    assert all(f["label"] != "predicted" for f in fixes[first_unranked:])


def test_a_gain_never_subtracts_latencies_of_two_machines():
    """Finding 3: the default latency (a switch machine) against the LL figure (a dual-socket machine) is not a gain;
    the dual-socket machine's own default -> LL pair is stated instead; an engine the seed ran with the block has none."""
    a = pj.project(_tables("sglang"), "sglang")
    b = pj.project(_tables("vllm"), "vllm")
    fixes = fx.ranked_fixes(a + b, seed_env_engines=("vllm",))
    s = next(f for f in fixes if f["engine"] == "sglang" and "NCCL block" in f["change"])
    v = next(f for f in fixes if f["engine"] == "vllm" and "NCCL block" in f["change"])
    assert s["label"] == fx.NOT_COMPUTABLE and s["gain_ms_per_token"] is None and "different machines" in s["basis"]
    assert s["pair_default_us"] == pytest.approx(48.16) and s["pair_tuned_us"] == pytest.approx(26.20)
    assert s["pair_ms_per_token"] == pytest.approx(124 * (48.16 - 26.20) / 1e3)
    assert v["label"] == fx.ALREADY_IN_SEED and v["gain_ms_per_token"] is None
    assert "NCCL_PROTO=LL" in s["check_command"] and "NCCL_ALGO=Ring" in s["check_command"]


def test_the_verdict_says_the_likely_cause_and_first_change_first(tmp_path):
    """Issue #40 on the committed what-if run's decode path: the verdict opens with the likely cause and the first change
    (the largest expected gain, with its range and the command), says how sure and what settles it, then the parts: the
    measured and the studied versions, the 51.5% check, the range of each projection."""
    import re
    import shutil

    from servebook.paths import data_dir
    from servebook.profile.seed import SEED_TABLES, record_seed
    from servebook.profile.verdict import verdict
    from servebook.results import RunStore

    run = tmp_path / "wi"
    run.mkdir()
    src = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
    for name in ("manifest.json", "decode_path.jsonl", "selection.jsonl"):
        shutil.copy(src / name, run / name)
    store = RunStore.at(run)
    _, fixes = record_seed(store)
    text = re.sub(r"<[^>]+>", "", verdict({name: store.rows(name) for name in SEED_TABLES}))
    assert text.startswith("**Likely cause") and text.index("First change") < text.index("**The projection")
    first = next(f for f in fixes if f.get("expected_gain_ms") is not None)
    assert first["change"].startswith("the seed's NCCL block") and first["engine"] == "sglang" and first["kind"] == "environment"
    assert first["check_command"] in text and "NCCL_PROTO=LL" in first["check_command"]
    assert "measured with SGLang 0.5.16 and vLLM 0.26.0" in text and "This book studies SGLang 0.5.9" in text
    assert "51.5%" in text and "all_reduce_perf -b 14336" in text and "How sure: a hypothesis" in text
    assert all(f["label"] != "not computable" for f in fixes)


# -- same-backend 1-layer slices, a measured flashinfer profile, second starts (fix-prof2, 2026-12-02) ---------------
def _recorded():
    from servebook.paths import data_dir
    from servebook.results import RunStore

    return RunStore.at(data_dir() / "runs" / "h200x1-prof")


def test_the_recorded_projection_takes_each_backends_own_one_layer_slice():
    """h200x1-prof holds 1-layer slices of SGLang triton and vLLM TRITON_MLA: every per-layer difference is taken between
    slices of one backend, so no category is confounded or an upper bound (those are only the fallback)."""
    store = _recorded()
    for engine, backend in (("sglang", "triton"), ("vllm", "TRITON_MLA")):
        sl = slc.select_slices(store.rows("profile_runs"), engine, backend=backend)
        assert sl["shallow"]["backend"] == sl["deep"]["backend"] == backend and sl["deep_same"] is None
        rows = pj.project(store, engine, backend=backend)
        assert not any(r.get("confounded") for r in rows)
        assert not any("upper bound" in r["source"] or "confounded" in r["source"] for r in rows)
        assert _row(rows, "total")["from_labels"][:2] == [sl["shallow"]["label"], sl["deep"]["label"]]
        # the 1-layer Triton slices were taken on 2026-12-02 on another lent machine than the 2-layer first starts: the
        # 2-layer slice is the second start, taken that day; the INT4 experts pair with the 1-layer slice of their own day
        assert slc.recorded_day(sl["shallow"]) == slc.recorded_day(sl["deep"]) and sl["deep"]["label"].endswith(" start 2")
        assert slc.recorded_day(sl["int4"]) == slc.recorded_day(sl["int4_base"]) and not sl["cross_day"]


def _with_repeat(t, label, **ms):
    """``t`` plus a second start (role repeat) of the slice ``label``, taken last, with other figures."""
    p = next(p for p in t["profile_runs"] if p["label"] == label)
    r = {**p, "label": label + " start 2", "role": "repeat", "taken_at": 99.0, "tpot_ms": p["tpot_ms"] + 1.0, "busy_ms": p["busy_ms"] - 0.2}
    return {**t, "profile_runs": t["profile_runs"] + [r], "decode_breakdown": t["decode_breakdown"] + _breakdown(r, **ms)}


def test_a_second_start_never_changes_the_projection_and_its_host_time_is_stated():
    t = _tables()
    base = pj.project(t, "sglang", allreduce_us=20.0)
    again = pj.project(_with_repeat(t, "sglang 2L", attention=9.0, dense_gemm=9.0), "sglang", allreduce_us=20.0)
    assert [r["ms_per_token"] for r in again] == [r["ms_per_token"] for r in base]
    idle = _row(again, "gpu idle")
    assert idle["starts_host_ms"] == pytest.approx([2.0 - 1.5, 3.0 - 1.3]) and idle["host_spread_ms"] == pytest.approx(1.2)
    assert "the first start's is used" in idle["source"] and "starts_host_ms" not in _row(base, "gpu idle")


def test_slices_are_subtracted_only_within_one_day():
    """A 2-layer slice taken another day (another lent machine) than the 1-layer slice is never subtracted from it when a
    start of that day exists; where none exists the pair is named in ``cross_day``."""
    t = _tables()
    for p in t["profile_runs"]:
        if p["label"] == "sglang 2L":
            p["taken_at"] = 86400.0 * 3                                       # the first start: another day
    rep = _with_repeat(t, "sglang 2L", attention=0.2, moe_experts=0.4, dense_gemm=0.7)
    rep["profile_runs"][-1]["taken_at"] = 2.0                                 # its second start: the 1-layer slice's day
    sl = slc.select_slices(rep["profile_runs"], "sglang")
    assert sl["deep"]["label"] == "sglang 2L start 2" and not sl["cross_day"]
    only = slc.select_slices(t["profile_runs"], "sglang")
    assert only["deep"]["label"] == "sglang 2L" and only["cross_day"] == ["sglang 2L - sglang 1L"]
    assert slc.select_slices(t["profile_runs"], "sglang", same_day=False)["cross_day"] == []
    # rows that name their machine pair by machine, whatever the day (the reference recording's rows carry one)
    for p, m in zip(rep["profile_runs"], ("gpu-b", "gpu-a", "gpu-a", "gpu-b")):
        p["machine"] = m                                   # 1L on b, 2L first start on a, INT4 on a, second start on b
    # the INT4 slice's machine has no 1-layer slice: a subtraction across machines is refused, not named (issue #39)
    from servebook.profile.machines import MachineMismatch
    with pytest.raises(MachineMismatch, match="2 machines"):
        slc.select_slices(rep["profile_runs"], "sglang")
    for p in rep["profile_runs"]:
        p["machine"] = "gpu-b"                             # every slice on one machine: paired, nothing named
    sl = slc.select_slices(rep["profile_runs"], "sglang")
    assert sl["cross_day"] == [] and sl["deep"]["label"].startswith("sglang 2L")   # either start: both on this machine


def test_the_flashinfer_fix_takes_its_measured_profile():
    """Finding: the gain of SGLang's flashinfer fix comes from flashinfer's measured attention carried by the attention
    rule (2-layer slice / 2 per layer where it has no 1-layer slice), not from vLLM's Triton kernel; with no flashinfer
    profile the old labelled assumption stays."""
    t = _tables("sglang")
    for label, layers, backend, att in (("sglang 1L triton", 1, "triton", 0.1), ("sglang 2L triton", 2, "triton", 0.2),
                                        ("sglang 2L flashinfer", 2, "flashinfer", 0.12)):
        p = _profile(label, "sglang", layers, backend=backend, t=5.0 + layers)
        t["profile_runs"].append(p)
        t["decode_breakdown"] += _breakdown(p, attention=att, moe_experts=0.4 if layers == 2 else 0.0, dense_gemm=0.7)
    m = fx.measured_alternative(t, "sglang", "flashinfer", against="triton", allreduce_us=20.0)
    assert m["ms"] == pytest.approx(61 * 0.12 / 2) and m["like_for_like_ms"] == pytest.approx(61 * 0.2 / 2)
    assert "2-layer slice's / 2" in m["basis"]
    assert fx.measured_alternative(_tables("sglang"), "sglang", "flashinfer", allreduce_us=20.0) is None
    a = pj.project(t, "sglang", backend="triton", allreduce_us=20.0)
    b = pj.project(_tables("vllm"), "vllm", allreduce_us=20.0)
    m["assumption"] = "it runs there"
    fixes = fx.ranked_fixes(a + b, attention_alternatives={"sglang": ("flashinfer", m["ms"], m)})
    att = next(f for f in fixes if f["change"] == "attention backend flashinfer")
    assert att["gain_ms_per_token"] == pytest.approx(_row(a, "attention")["ms_per_token"] - 61 * 0.06)
    assert att["alternative_ms"] == pytest.approx(61 * 0.06) and att["assumption"] == "it runs there"
    assert att["like_for_like_gain_ms"] == pytest.approx(61 * (0.1 - 0.06))
    assert "measured" in att["basis"] and "as fast as" not in att["basis"]
    old = next(f for f in fx.ranked_fixes(a + b) if f["change"] == "attention backend flashinfer")
    assert "as fast as vllm's projected attention" in old["assumption"]


def test_the_seed_verdict_cites_the_rule_that_skips_flashinfer(tmp_path):
    """The flashinfer fix's remaining assumption names the selection rule chapter 02 read (the what-if run's table
    selection), not a guess; with no selection row it says chapter 02 holds no reading."""
    import shutil

    from servebook.paths import data_dir
    from servebook.profile.seed import record_seed
    from servebook.results import RunStore

    src = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
    for with_selection in (True, False):
        run = tmp_path / str(with_selection)
        run.mkdir()
        for name in ("manifest.json", "decode_path.jsonl") + (("selection.jsonl",) if with_selection else ()):
            shutil.copy(src / name, run / name)
        _, fixes = record_seed(RunStore.at(run))
        att = next(f for f in fixes if f["change"] == "attention backend flashinfer")
        # the profile run (h200x1-ref) holds flashinfer's ladder (unit 4): the gain is measured, and what is still
        # assumed (that it runs on the seed's GPU at all, and as on the H200) names the rule that skips flashinfer there
        assert att["alternative_backend"] == "flashinfer" and "holds no flashinfer slice" not in att["assumption"]
        assert att["assumption"].startswith("flashinfer's MLA decode runs on ")
        assert "and as it ran on the H200 (sglang kimi-13L int4 flashinfer, SGLang 0.5.16)" in att["assumption"]
        if with_selection:
            assert "`sglang/srt/server_args.py:1824`" in att["assumption"] and "`is_sm100_supported()` holds" in att["assumption"]
            assert "capability 12.0" in att["assumption"]
        else:
            assert "chapter 02 holds no reading" in att["assumption"]
