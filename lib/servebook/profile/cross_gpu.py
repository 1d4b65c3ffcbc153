"""The projection's GPU rule checked on a GPU that can be measured: H200 slices carried to another GPU of the same
architecture, against the same slices measured there.

    rows = carry_check(RunStore.at("data/runs/h200x1-ref"), RunStore.at("data/runs/h100x1-xgpu"))   # table carry_check

The seed projection (``servebook.profile.projection``) carries H200 profiles onto the seed's GPU by two rules: the
weights-bound categories (MoE experts, dense GEMM) take the bandwidth ratio, the latency-bound ones (attention at
these contexts, routing, norms, sampling) stay as measured. Nothing on the seed's host can check them. An H100 SXM
can: it is the H200's chip (132 SMs, capability 9.0; clocks not compared here) with 3.35 TB/s of HBM3 against 4.8
TB/s, so what mainly separates the two GPUs is the bandwidth the rule is about. Each slice measured on the target (its
first start and its repeats: ``role`` slice or repeat, ``ok``) is predicted by ``project`` - the same code the seed
verdict runs - with the target's hardware profile, TP=1 and the slice's own number of MoE layers, from the reference
ladder of the same engine and backend, and compared category by category with what the target's profiler measured
(table ``decode_breakdown``).

Two bounds beside the rule, computed the same way: ``kept`` (nothing scaled: the H200's own GPU time) and
``all_scaled`` (every category x the bandwidth ratio). Where the measurement falls between them says how much of the
step moves with memory bandwidth. The GPU-busy time is compared (the sum of the categories; the host's idle time is
the host's, not the rule's); a prediction is a prediction, never a measurement of the seed's GPU.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from .kernels import CATEGORIES
from .projection import MEASURED_ON, MEMORY_BOUND, _bandwidths, _tables, project
from .tables import latest_breakdown, latest_ok

__all__ = ["carry_check", "summary", "carry_runs", "bandwidth_shares", "shares_words", "GPU_CATEGORIES"]

# what the GPU does in a step at TP=1: every category but the host's idle time and the collectives
GPU_CATEGORIES = tuple(c for c in CATEGORIES if c not in ("gpu idle", "communication"))


def _measured(breakdown: list[dict], label: str) -> dict:
    """``label``'s GPU categories, from ``decode_breakdown`` rows already narrowed by ``tables.latest_breakdown``."""
    return {r["category"]: float(r["ms_per_step"]) for r in breakdown
            if r["label"] == label and r["category"] in GPU_CATEGORIES and r.get("ms_per_step") is not None}


def carry_check(reference, target, *, engine: str = "sglang", backends: tuple[str, ...] | None = None,
                profile: str = "h100", card: str = "kimi-k2.5", mode: str = "graph") -> list[dict]:
    """One row per server start measured in ``target`` (``engine``, ``backends`` or every backend it holds): the
    slice's GPU-busy time predicted from ``reference`` onto ``profile`` (``predicted_ms``), the two bounds (``kept_ms``,
    ``all_scaled_ms``), what the target measured (``measured_ms``: the sum of its categories, ``busy_ms``: the
    profiler's busy time), ``error_pct`` = 100 x (predicted - measured) / measured, and ``by_category``
    ({category: (predicted, measured)}). A backend the reference holds no ladder of gets ``predicted_ms`` None and
    the reason."""
    profiles, breakdown, _, _ = _tables(target)
    breakdown = latest_breakdown(breakdown, profiles)
    mine = [p for p in latest_ok(profiles) if p.get("engine") == engine and p.get("busy_ms") is not None
            and p.get("role", "slice") in ("slice", "repeat") and p.get("mode", "graph") == mode
            and (backends is None or p.get("backend") in backends)]
    # the reference's tables (its trace excerpts included) read once, not once per projected slice
    ref = dict(zip(("profile_runs", "decode_breakdown", "memory_bandwidth", "excerpts"), _tables(reference)))
    cache: dict = {}
    out = []
    for p in mine:
        n_moe = int(p["layers"]) - int(p.get("dense_layers") or 0)
        key = (p.get("backend") or "auto", n_moe)
        if key not in cache:
            cache[key] = _predict(ref, engine, key[0], n_moe, profile, card, mode)
        pred = cache[key]
        meas = _measured(breakdown, p["label"])
        row = {"engine": engine, "backend": key[0], "label": p["label"], "moe_layers": n_moe, "start": p.get("start", 1),
               "target_machine": p.get("machine"), "target_gpu": p.get("machine_gpu_name"), "profile": profile,
               "busy_ms": float(p["busy_ms"]), "measured_ms": sum(meas.values()) if meas else None,
               "tpot_ms": p.get("tpot_ms"), **{k: v for k, v in pred.items() if k != "by_category"}}
        row["by_category"] = {c: (pred["by_category"].get(c), meas.get(c)) for c in GPU_CATEGORIES}
        m = row["measured_ms"]
        for k in ("predicted", "kept", "all_scaled"):
            v = row.get(f"{k}_ms")
            row[f"{k}_error_pct"] = None if v is None or not m else 100 * (v - m) / m
        row["error_pct"] = row["predicted_error_pct"]
        out.append(row)
    return out


def _unknown(reason: str) -> dict:
    return {"predicted_ms": None, "kept_ms": None, "all_scaled_ms": None, "by_category": {}, "reason": reason}


def _predict(reference, engine: str, backend: str, n_moe: int, profile: str, card: str, mode: str) -> dict:
    try:
        rows = project(reference, engine, backend=backend, mode=mode, card=card, profile=profile, tp=1, moe_layers=n_moe)
    except (ValueError, KeyError, StopIteration) as exc:
        return _unknown(f"{type(exc).__name__}: {exc}")
    got = {r["category"]: r for r in rows if r["category"] in GPU_CATEGORIES}
    if any(got[c]["ms_per_token"] is None for c in got):
        return _unknown("; ".join(f"{c}: {r['source']}" for c, r in got.items() if r["ms_per_token"] is None))
    kept = {c: (r["h200_full_ms"] if r.get("h200_full_ms") is not None else r["ms_per_token"]) for c, r in got.items()}
    ratio = _ratio(profile)
    tot = next(r for r in rows if r["category"] == "total")
    return {"predicted_ms": sum(r["ms_per_token"] for r in got.values()), "kept_ms": sum(kept.values()),
            "all_scaled_ms": sum(kept.values()) * ratio, "bandwidth_ratio": ratio,
            "by_category": {c: r["ms_per_token"] for c, r in got.items()}, "from_labels": tot.get("from_labels"),
            "reference_machine": tot.get("machine"), "reason": None,
            "rules": {c: got[c]["rule"] for c in MEMORY_BOUND if c in got}}


def _ratio(profile: str) -> float:
    """The bandwidth ratio the projection's rule applies by default: the two datasheets (``projection._bandwidths``)."""
    src, dst, _ = _bandwidths(profile, MEASURED_ON, [], "datasheet")
    return src / dst


def summary(rows: list[dict]) -> dict:
    """Per (backend, MoE layers), shallowest first: the starts' measured GPU-busy mean and spread beside the prediction,
    and the starts' mean ``error_pct`` (None where nothing was predicted)."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["backend"], r["moe_layers"]), []).append(r)
    res = {}
    for k, rs in sorted(out.items(), key=lambda kv: kv[0][1]):
        m = [r["measured_ms"] for r in rs if r["measured_ms"] is not None]
        e = [r["error_pct"] for r in rs if r.get("error_pct") is not None]
        res[k] = {"starts": len(rs), "measured_ms": statistics.mean(m) if m else None,
                  "spread_ms": (max(m) - min(m)) if len(m) > 1 else None, "predicted_ms": rs[0]["predicted_ms"],
                  "kept_ms": rs[0]["kept_ms"], "all_scaled_ms": rs[0]["all_scaled_ms"],
                  "error_pct": statistics.mean(e) if e else None}
    return res


def carry_runs(reference) -> list:
    """The runs beside the reference run (its directory's siblings) that hold a table ``carry_check``, by name."""
    run = Path(str(getattr(reference, "path", reference)))
    return sorted(p for p in run.parent.iterdir() if p != run and (p / "carry_check.jsonl").is_file())


def bandwidth_shares(reference, target, *, engine: str = "sglang", backend: str = "triton", profile: str | None = None,
                     card: str = "kimi-k2.5") -> dict | None:
    """How much of each weights-bound part followed the bandwidth ratio between the reference's GPU and the target's:
    both runs' depth ladders of ``engine`` and ``backend`` split into a fixed and a per-MoE-layer part
    (``projection.h200_parts``, first starts), ``scaled`` = target / reference time of each part, and ``shares`` = (scaled
    - 1) / (ratio - 1), clipped to [0, 1], the datasheet ratio between the GPUs (``profile``: the target's hardware
    profile, default the one its ``carry_check`` rows name): 1 where the part took the whole ratio (the projection's rule),
    0 where it did not move. None where either run holds no such ladder."""
    from ..cards import load_card
    from ..results import RunStore
    from .projection import MEMORY_BOUND, _card_facts, h200_parts
    from .slices import select_slices

    tgt = RunStore.at(target) if not hasattr(target, "rows") else target
    profile = profile or next((r.get("profile") for r in tgt.rows("carry_check") if r.get("profile")), "h100")
    facts, parts, ladders = _card_facts(load_card(card)), [], []
    for src in (reference, tgt):
        profiles, breakdown, _, _ = _tables(src)
        sl = select_slices(profiles, engine, backend=backend, card=card)
        if not sl.get("ladder") or sl["shallow"] is None or sl["deep"] is None:
            return None
        parts.append(h200_parts(latest_breakdown(breakdown, profiles), sl, facts["expert_bytes_ratio"]))
        ladders.append({"ladder": tuple(sl["ladder"]), "machine": sl["deep"].get("machine"),
                        "gpu": sl["deep"].get("machine_gpu_name")})
    ratio = _ratio(profile)
    scaled, shares = {}, {}
    for cat in MEMORY_BOUND:
        ref, got = parts[0].get(cat, {}), parts[1].get(cat, {})
        if any(x.get(k) in (None, 0) for x in (ref, got) for k in ("fixed", "moe")):
            continue
        scaled[cat] = {k: got[k] / ref[k] for k in ("fixed", "moe")}
        shares[cat] = {k: min(1.0, max(0.0, (v - 1) / (ratio - 1))) for k, v in scaled[cat].items()}
    return {"engine": engine, "backend": backend, "profile": profile, "ratio": ratio, "scaled": scaled, "shares": shares,
            "reference": ladders[0], "target": ladders[1], "target_run": Path(str(tgt.path)).name}


def shares_words(got: dict, categories: tuple[str, ...]) -> str:
    """``bandwidth_shares``' result in words: whose ladder, between which machines, and what each part of
    ``categories`` took of the ratio."""
    from ..engines import prose_name

    part = {"fixed": "per step", "moe": "per MoE layer"}
    each = "; ".join(f"{cat} {part[k]} {got['scaled'][cat][k]:.2f}x (share {got['shares'][cat][k]:.2f})"
                     for cat in categories if cat in got["shares"] for k in ("moe", "fixed"))
    r, t = got["reference"], got["target"]
    return (f"{prose_name(got['engine'])}'s {got['backend']} INT4 ladder from the H200 ({r['machine']}, MoE layers "
            f"{r['ladder'][0]}->{r['ladder'][1]}) to the {t['gpu']} ({got['target_run']}, {t['machine']}, MoE layers "
            f"{t['ladder'][0]}->{t['ladder'][1]}, first starts), datasheet ratio {got['ratio']:.2f}: {each}")
