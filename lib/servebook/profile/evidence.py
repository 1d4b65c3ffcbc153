"""The evidence the seed verdict rests on, shown where it is cited: the profile run's tables (it has no book of
its own) and the kernel excerpts of the slices the projection subtracts (what-if book, chapter 06).

    ev = reference_evidence()              # the run servebook.profile.seed.REFERENCE_PROFILE_RUN names
    ev["slices"], ev["breakdown"], ev["checks"], ev["kernels"]   # rows for pandas; ev["run"]: its directory

``slices``: for each engine's Triton MLA projection, every slice ``slices.select_slices`` picks (its role in the
subtraction, its unprofiled time per token, its GPU-busy time per step, its recording unit); ``breakdown``: those
slices' kernel time per step by category (``decode_breakdown``); ``checks``: the whole-model checks of the host rule
(``prediction_check``: slices and whole model of one recording unit each); ``kernels``: each picked slice's longest kernels of one decode step, from its trace excerpt
(``traces/<label>.excerpt.json``), names cut between words (``stated.text.clip``).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["ROLES", "reference_evidence"]

# what each slice ``select_slices`` picks is for in the projection's subtraction
ROLES = {"shallow": "1-layer slice (the fixed part)", "deep": "2-layer slice (one MoE layer = 2L - 1L)",
         "deep_same": "2-layer slice of the 1-layer slice's backend", "int4": "INT4 2-layer slice (the experts' bytes)",
         "int4_base": "1-layer slice the INT4 experts are taken against"}


def _roles(picked: dict) -> dict:
    """``ROLES``, or for an INT4 depth ladder (``select_slices``' ``ladder``) the two slices' roles with their MoE layers."""
    if not picked.get("ladder"):
        return ROLES
    k0, k1 = picked["ladder"]
    return {"shallow": f"shallowest INT4 slice ({k0} MoE layer{'s' * (k0 != 1)}; the fixed part = it less them)",
            "deep": f"deepest INT4 slice ({k1} MoE layers; one MoE layer = (deepest - shallowest) / {k1 - k0})"}


def _run_dir(reference=None) -> Path:
    from .seed import _reference_dir

    return Path(reference) if reference else _reference_dir()


def _top_kernels(path: Path, label: str, n: int) -> list[dict]:
    """The ``n`` longest kernels of one decode step in a slice's trace excerpt, and every attention kernel (the verdict
    compares the engines' Triton MLA attention), with their category."""
    from ..stated.text import clip
    from .kernels import classify

    if not path.is_file():
        return []
    ex = json.loads(path.read_text())
    steps = max(1, int(ex.get("steps") or 1))
    by: dict[str, float] = {}
    for k in ex.get("kernels", []):
        by[k["name"]] = by.get(k["name"], 0.0) + float(k.get("dur") or 0.0) / steps
    ranked = sorted(by.items(), key=lambda kv: -kv[1])
    top = ranked[:n] + [kv for kv in ranked[n:] if classify(kv[0]) == "attention"]
    return [{"slice": label, "kernel": clip(name, 90), "category": classify(name), "us_per_step": round(us, 1),
             "excerpt": f"traces/{path.name}"} for name, us in top]


def reference_evidence(reference=None, kernels_per_slice: int = 6) -> dict:
    """The profile run's rows the seed verdict uses (see the module's docstring); empty lists where the run
    is missing."""
    from ..results import RunStore
    from .kernels import trace_slug
    from .slices import recording_unit, select_slices
    from .ranges import SEED_BACKENDS

    run = _run_dir(reference)
    out = {"run": str(run), "slices": [], "breakdown": [], "checks": [], "kernels": [], "notes": []}
    if not (run / "profile_runs.jsonl").is_file():
        return out
    store = RunStore.at(run)
    profiles, breakdown = store.rows("profile_runs"), store.rows("decode_breakdown")
    for engine, backend in SEED_BACKENDS.items():
        picked = select_slices(profiles, engine, backend=backend)
        out["notes"] += [f"{engine}: {n}" for n in picked["notes"]]
        for role, what in _roles(picked).items():
            r = picked.get(role)
            if r is None or any(s["label"] == r["label"] and s["engine"] == engine for s in out["slices"]):
                continue
            out["slices"].append({"engine": engine, "role": what, "label": r["label"],
                                  "backend": r.get("backend", "auto"), "quant": r.get("quant", "bf16"), "mode": r.get("mode"),
                                  "layers": r.get("layers"), "tpot_ms": r.get("tpot_ms"), "busy_ms": r.get("busy_ms"),
                                  "step_ms": r.get("step_ms"), "recorded": recording_unit(r)})
            cats = {b["category"]: b["ms_per_step"] for b in breakdown
                    if b["label"] == r["label"] and b.get("taken_at") == r.get("taken_at")}
            out["breakdown"] += [{"slice": r["label"], "category": c, "ms_per_step": ms} for c, ms in cats.items()]
            out["kernels"] += _top_kernels(run / "traces" / f"{trace_slug(r['label'])}.excerpt.json", r["label"], kernels_per_slice)
    units = sorted({s["recorded"] for s in out["slices"] if str(s["recorded"]).startswith("gpu-")})
    if len(units) > 1:
        out["notes"].append(f"the rows above are as recorded on each engine's own machine ({', '.join(units)}); the "
                            "projection compares the engines only after carrying them to one machine through the "
                            "anchor configuration (seed_projection's total row, field carried)")
    out["checks"] = _checks(store, run)
    if out["checks"] and out["checks"][0]["run"] != run.name:
        out["notes"].append(f"{run.name} measured no whole model: the whole-model checks of the host rule above are "
                            f"{out['checks'][0]['run']}'s, the run that validated it (servebook.profile.predict.HOST_RULE_RUN)")
    out["notes"] += _carried_notes(run)
    return out


def _carried_notes(run: Path) -> list[str]:
    """The projection's GPU rule checked on another GPU (``servebook.profile.cross_gpu``; table ``carry_check`` of a run
    beside the reference, e.g. ``h100x1-xgpu``): one line per run, each slice's error, and whether it grows with depth."""
    from ..results import RunStore
    from .cross_gpu import carry_runs, summary

    notes = []
    for other in carry_runs(run):
        rows = RunStore.at(other).rows("carry_check")
        errs = {k: s for k, s in summary(rows).items() if s["error_pct"] is not None}
        if not errs:
            continue
        starts = sorted({s["starts"] for s in errs.values()})
        trend = ""
        for be in {k[0] for k in errs}:
            seq = [s["error_pct"] for (b, _), s in errs.items() if b == be]
            if len(seq) > 2 and all(e > 0 for e in seq) and all(x < y for x, y in zip(seq, seq[1:])):
                trend = f" - above the measurement at every depth, more the deeper the slice ({be})"
        notes.append(f"the GPU rule (weights-bound categories x the bandwidth ratio, the rest kept) checked on another GPU, "
                     f"{rows[0].get('target_gpu')} ({other.name}, {'/'.join(map(str, starts))} start(s) per slice): "
                     + ", ".join(f"{s['error_pct']:+.1f}% at {n} MoE layer{'s' * (n != 1)} ({be})" for (be, n), s in errs.items())
                     + f" against that GPU's measured GPU time{trend}; what it does at the seed's bandwidth ratio is a "
                     f"hypothesis until slices are measured on the seed's GPU (data/runs/{other.name}/RECORDED.md); the "
                     "seed range takes the share of the ratio each weights-bound part took there as an end (table "
                     "seed_assumptions, row 'bandwidth scaling')")
    return notes


def _checks(store, run: Path) -> list[dict]:
    """The whole-model checks of the host rule: this run's, or where it measured no whole model (a run of slices only),
    those of the run that validated the rule, each row naming its run."""
    from ..results import RunStore
    from .predict import HOST_RULE_RUN

    keys = ("card", "engine", "backend", "mode", "unit", "layers_measured", "full_layers", "predicted_ms", "measured_ms",
            "error_pct", "within_interval")
    rows = store.rows("prediction_check")
    if not any(r.get("measured_ms") is not None for r in rows):
        other = run.parent / HOST_RULE_RUN
        if other != run and (other / "prediction_check.jsonl").is_file():
            store, run = RunStore.at(other), other
            rows = [r for r in store.rows("prediction_check") if r.get("measured_ms") is not None]
    return [{"run": run.name, **{k: r.get(k) for k in keys}} for r in rows]
