"""How many server starts a slice gets, and when two configurations are "no difference" (issue #39's rule).

    starts_required(moe_layers=12)                    # 2 (4 or more MoE layers), 3 for shallower slices
    more_starts([5.01, 5.30], moe_layers=12, decided_pct=5.0)   # {"more": 1, "why": ...}: the first two differ by more
    compare([5.01, 5.03], [5.40, 5.38])               # {"verdict": "a lower", "diff": ..., "margin": ..., ...}

A shallow slice's time per token moves from one server start to the next (host work is most of its step), a deep
one's settles: 2 starts for slices of 4 or more MoE layers, 3 for shallower ones. A third (at most a fourth) start is
taken only where the first two differ by more than the difference being decided. A difference smaller than 2% of the
mean or than the spread between starts (the larger of the two configurations' spreads) is "no difference": an
equivalence margin, so a true zero ends instead of asking for starts forever. Starts recorded later with the same
method pool with the earlier ones (the caller passes every start's value).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["starts_required", "more_starts", "compare", "EQUIVALENCE_PCT", "MAX_STARTS", "DEEP_MOE_LAYERS"]

EQUIVALENCE_PCT = 2.0     # a difference below 2% of the mean is no difference whatever the spread
MAX_STARTS = 4
DEEP_MOE_LAYERS = 4       # from this many MoE layers on a slice settles in 2 starts


def starts_required(moe_layers: int) -> int:
    """Starts a slice gets before any comparison: 2 from ``DEEP_MOE_LAYERS`` MoE layers on, 3 below."""
    return 2 if int(moe_layers) >= DEEP_MOE_LAYERS else 3


def _spread(values: Sequence[float]) -> float:
    return max(values) - min(values) if len(values) > 1 else 0.0


def more_starts(values: Sequence[float], *, moe_layers: int, decided_pct: float) -> dict:
    """Whether a slice needs another start: ``{"more": 0 or n, "why"}``.

    ``values``: one figure per start taken so far (e.g. ms per token); ``decided_pct``: the difference being decided,
    in % of the mean (e.g. 5 for linearity within 5%). Fewer than the required starts: the rest are wanted. Past them,
    one more (up to ``MAX_STARTS``) only while the first two differ by more than ``decided_pct``."""
    vals = [float(v) for v in values]
    need = starts_required(moe_layers)
    if len(vals) < need:
        return {"more": need - len(vals), "why": f"{len(vals)} of the {need} starts a slice of {moe_layers} MoE layers gets"}
    if len(vals) >= MAX_STARTS:
        return {"more": 0, "why": f"{len(vals)} starts: the cap ({MAX_STARTS})"}
    mean = sum(vals) / len(vals)
    first_two = abs(vals[0] - vals[1]) / mean * 100 if mean else 0.0
    if first_two > decided_pct and len(vals) < MAX_STARTS:
        return {"more": 1, "why": f"the first two starts differ by {first_two:.1f}%, more than the {decided_pct:g}% being decided"}
    return {"more": 0, "why": f"the first two starts differ by {first_two:.1f}% (at most {decided_pct:g}%): enough"}


def compare(a: Sequence[float], b: Sequence[float], *, equivalence_pct: float = EQUIVALENCE_PCT) -> dict:
    """Decide between two configurations from their per-start values (lower is better, e.g. ms per token).

    ``diff`` = mean(a) - mean(b); ``margin`` = the larger of ``equivalence_pct`` % of the mean of both and the larger
    start-to-start spread of the two; ``mid_diff_pct`` and ``mid_margin_pct``: each in % of the mean of both (the basis
    the pages state a comparison in; ``diff_pct`` is % of mean(b)). ``verdict``: "no difference" where ``|diff| < margin``, else "a lower" or
    "b lower"; "undecided" where either side has a single start (no spread to judge by)."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    if not a or not b:
        raise ValueError("compare needs at least one start of each configuration")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    spread = max(_spread(a), _spread(b))
    margin = max(equivalence_pct / 100 * (ma + mb) / 2, spread)
    diff, mid = ma - mb, (ma + mb) / 2
    if len(a) < 2 or len(b) < 2:
        verdict = "undecided"
    elif abs(diff) < margin:
        verdict = "no difference"
    else:
        verdict = "a lower" if diff < 0 else "b lower"
    return {"verdict": verdict, "a_mean": ma, "b_mean": mb, "diff": diff, "diff_pct": 100 * diff / mb if mb else None,
            "margin": margin, "spread": spread, "mid_diff_pct": 100 * diff / mid if mid else None,
            "mid_margin_pct": 100 * margin / mid if mid else None, "a_starts": len(a), "b_starts": len(b),
            "rule": f"no difference below {equivalence_pct:g}% of the mean or the start-to-start spread, whichever is larger"}


def extra_starts_plan(specs: Sequence[dict], profile_rows: Sequence[dict], *, decided_pct: float, value: str = "tpot_ms") -> list[dict]:
    """Plan entries for the starts :func:`more_starts` still wants, from a plan and the rows it recorded: per server
    (engine, model directory, backend, mode), the ``value`` of each recorded start; one more start each where the rule
    asks (label ``... start k``, role repeat, alone in its batch). Servers with a failed start are not started again."""
    import re

    groups: dict = {}
    for s in specs:
        key = (s["engine"], s["model_dir"], s.get("backend"), s.get("mode", "graph"))
        groups.setdefault(key, []).append(s)
    ok = {r["label"]: r for r in profile_rows if r.get("ok") and r.get(value) is not None}
    out = []
    for key, ss in groups.items():
        vals = [float(ok[s["label"]][value]) for s in sorted(ss, key=lambda s: s.get("start", 1)) if s["label"] in ok]
        if len(vals) < len(ss):
            continue
        last = max(ss, key=lambda s: s.get("start", 1))
        meta = ok[last["label"]]
        moe = int(meta["layers"]) - int(meta.get("dense_layers") or 0)
        want = more_starts(vals, moe_layers=moe, decided_pct=decided_pct)
        for i in range(min(want["more"], MAX_STARTS - len(vals))):
            k = int(last.get("start", 1)) + 1 + i
            label = re.sub(r" start \d+$", "", last["label"]) + f" start {k}"
            out.append({**{x: y for x, y in last.items() if x not in ("lead", "_ident")}, "label": label, "start": k,
                        "role": "repeat", "batch": label, "why": want["why"]})
    return out
