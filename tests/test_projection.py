"""servebook.profile.projection: each rule on small recorded-like tables."""

from __future__ import annotations

import pytest

from servebook.profile import projection as pj

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
    from servebook.selection.cards import load_card

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
    floors = pj.kernel_floors(t["excerpts"], pj.select_slices(t["profile_runs"], "sglang"))
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
    assert _row(rows, "gpu idle")["ms_per_token"] == pytest.approx(2.0 - 1.5)
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
    fixes = pj.ranked_fixes(a + b, custom_allreduce_us=10.0, nccl_tuned_us=30.0)
    gains = [f["gain_ms_per_token"] for f in fixes if f["gain_ms_per_token"] is not None]
    assert gains == sorted(gains, reverse=True)
    assert all(f["label"] == "predicted" and f["check_command"] for f in fixes)
    assert not any("root cause" in (f["basis"] + f["change"]).lower() for f in fixes)
    car = next(f for f in fixes if f["engine"] == "sglang" and f["change"].startswith("custom PCIe"))
    assert car["gain_ms_per_token"] == pytest.approx(124 * 30.0 / 1e3)
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" in car["check_command"]
    att = next(f for f in fixes if f["engine"] == "sglang" and f["change"].startswith("attention"))
    assert att["gain_ms_per_token"] == pytest.approx(_row(a, "attention")["ms_per_token"] - _row(b, "attention")["ms_per_token"])
    assert "--attention-backend flashinfer" in att["check_command"]
    assert att["gain_tok_s"] > 0
    # attention: 60 x (0.4 - 0.1) ms x bandwidth ratio dwarfs 124 x 30 us
    assert fixes[0]["change"].startswith("attention") and fixes[0]["engine"] == "sglang"
    assert fixes.index(car) < next(i for i, f in enumerate(fixes) if f["engine"] == "sglang" and f["change"].startswith("NCCL"))


def test_the_seed_projection_from_the_recorded_h200_profiles(tmp_path):
    """Both engines' Triton MLA profiles of data/runs/h200x1-prof carried to the seed's host: each engine's categories
    add up to its total, the total is compared with the seed's own figure (never fitted to it), and the tables land
    in the run."""
    from servebook.profile.seed import SEED_BACKENDS, gap_by_category, record_seed, verdict
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
    assert fixes and all(f["label"] == "predicted" for f in fixes)
    assert len(store.rows("seed_projection")) == len(rows) and "Verdict" in verdict(rows, fixes)
