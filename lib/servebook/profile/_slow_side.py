"""The seed range's one-sidedness, in words for ``seed_assumptions`` (``ranges.assumption_table``'s last row): which
assumptions have an end that lengthens the step, the slow-side ends no row models, and where the seed's own rates sit in
the range (a hypothesis of a common fast bias, with the measurement that settles it).

    slow_side_row(table, central, seed, tp)   # {"assumption": "slow-side ends", "end": "not modelled", moves None, "basis": ...}

Its moves are None (nothing is modelled), so ``ranges.projection_range`` leaves the range as the other rows make it.
"""

from __future__ import annotations

from ._range_rows import projection_range, row

__all__ = ["SLOW_SIDE", "slow_side_row"]

SLOW_SIDE = "slow-side ends"
# a seed rate "at" its range's slow end: at least this share of the way from the fast end to the slow end
_AT_SLOW_END = 0.9

# what no assumption row moves toward a longer step: each is a way the seed's GPUs could be slower than the projection
# carries them, named, not sized (sizing one is a measurement on the seed's host)
_NOT_MODELLED = (
    "the seed GPU's achievable read bandwidth below its datasheet figure (the central ratio is datasheet over datasheet; "
    "the bandwidth end only replaces the measured GPU's datasheet by its measured bandwidth)",
    "weights-bound kernels at TP={tp} reading 1/{tp} of the bytes each and so running below full bandwidth (the kernel "
    "floor keeps each at least as long as the measured GPU's shortest such kernel, no longer)",
    "the latency-bound kernels kept as measured ({kept}) running slower on another GPU",
)


def _moves(rows: list[dict]) -> list[float]:
    return [r[c] for r in rows for c in ("sglang_ms", "vllm_ms") if r.get(c) is not None]


def slow_side_row(table: list[dict], central: dict, seed: dict | None, tp: int) -> dict:
    """The row saying the range is one-sided where it is: computed from ``table`` (the assumption rows so far),
    ``central`` (``{engine: project rows}``) and ``seed`` (the seed's tok/s per engine, ``projection.seed_figures``)."""
    from ..engines import prose_name

    by: dict = {}
    for r in table:
        by.setdefault(r["assumption"], []).append(r)
    longer = [a for a, rs in by.items() if any(m > 0 for m in _moves(rs))]
    shorter = [a for a, rs in by.items() if a not in longer]
    kept = {e: [r for r in rows if str(r.get("rule", "")).startswith("latency-bound") and r.get("ms_per_token") is not None]
            for e, rows in central.items()}
    cats = list(dict.fromkeys(r["category"] for rows in kept.values() for r in rows))
    kept_words = (", ".join(cats) + ": " + ", ".join(f"{sum(r['ms_per_token'] for r in rows):.2f} ms per token for "
                                                      f"{prose_name(e)}" for e, rows in kept.items()))
    basis = (f"the ends of {', '.join(shorter)} only shorten the step or move nothing; only "
             + (" and ".join(f"the {a}" for a in longer) or "no row") + f" ha{'ve' if len(longer) != 1 else 's'} an end "
             "that lengthens it. No row "
             "models these slow-side ends: " + "; ".join(w.format(tp=tp, kept=kept_words) for w in _NOT_MODELLED) + ". ")
    rng = {r["who"]: r for r in projection_range(central, table, seed)}
    where, slow = [], []
    for e in central:
        r = rng.get(e, {})
        if r.get("seed_ms") is None:
            continue
        past, share = r["seed_ms"] - r["high_ms"], (r["seed_ms"] - r["low_ms"]) / (r["high_ms"] - r["low_ms"])
        slow.append(share >= _AT_SLOW_END)
        where.append(f"{prose_name(e)}'s {r['seed_tok_s']:g} tok/s " + (
            f"lies {past:.2f} ms per token past its slow end" if past > 0 else
            f"lies {-past:.2f} ms per token short of its slow end, {share:.0%} of the way from its fast end"))
    if where:
        basis += "Where the seed's rates sit: " + "; ".join(where) + ". "
    if len(slow) > 1 and all(slow):
        basis += (f"That {'both' if len(slow) == 2 else 'all'} sit at (at least {_AT_SLOW_END:.0%} of the way) or past "
                  "the slow ends is a hypothesis of a common fast bias of the projection (a slow-side end above, or one not "
                  "listed), not a located cause: a decode-step profile of each engine on the seed's host (each category's "
                  "ms per token against its projected row) settles it")
    return row(SLOW_SIDE, "not modelled", {e: None for e in central}, basis.rstrip(". ") + ".")
