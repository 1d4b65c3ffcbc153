"""The seed range's rows and its ends (``seed_assumptions`` rows, ``seed_range``), shared by ``ranges`` (which makes the
rows) and ``_slow_side`` (which reads the range they make).

    row("host rule", "serial (host idle added)", {"sglang": 0.4, "vllm": 0.1}, "basis")   # one seed_assumptions row
    projection_range(central, table, seed)                                                 # seed_range's rows
"""

from __future__ import annotations

__all__ = ["row", "total", "projection_range"]


def total(rows: list[dict]) -> float | None:
    return rows[-1]["predicted_ms"]


def row(assumption: str, end: str, moves: dict, basis: str) -> dict:
    s, v = moves.get("sglang"), moves.get("vllm")
    gap = None if s is None or v is None else s - v
    return {"assumption": assumption, "end": end, "sglang_ms": s, "vllm_ms": v, "gap_ms": gap, "basis": basis,
            "key": f"{assumption} | {end}"}


def projection_range(central: dict, table: list[dict], seed: dict | None = None) -> list[dict]:
    """Per engine and for the gap: the point (every assumption central) and the range, all assumptions together at the
    ends that shorten (low) or lengthen (high) the ms per token: the sum of the moves below / above 0 (table
    ``seed_range``). ``seed``: the seed's tok/s per engine, set beside the range (never an input)."""
    out = []
    by = {}
    for r in table:
        by.setdefault(r["assumption"], []).append(r)
    for who in ("sglang", "vllm", "gap"):
        col = f"{who}_ms"
        point = (total(central["sglang"]) - total(central["vllm"])) if who == "gap" else total(central[who])
        lo = sum(min([0.0] + [r[col] for r in rs if r[col] is not None]) for rs in by.values())
        hi = sum(max([0.0] + [r[col] for r in rs if r[col] is not None]) for rs in by.values())
        row = {"who": who, "point_ms": point, "low_ms": point + lo, "high_ms": point + hi, "key": who,
               "how": "all assumptions together at the ends that shorten (low) or lengthen (high) it: the sum of their "
                      "moves; one-sided where no end lengthens a part (table seed_assumptions, row 'slow-side ends')"}
        if who != "gap":
            row.update({"point_tok_s": 1e3 / point, "low_tok_s": 1e3 / row["high_ms"], "high_tok_s": 1e3 / row["low_ms"]})
            if seed and seed.get(who):
                row["seed_tok_s"] = seed[who]
                row["seed_inside"] = row["low_tok_s"] <= seed[who] <= row["high_tok_s"]
                # how far outside: the seed's time per token past the range's slow end (+) or before its fast end (-)
                row["seed_ms"] = 1e3 / seed[who]
                row["seed_beyond_ms"] = (0.0 if row["seed_inside"] else row["seed_ms"] - row["high_ms"]
                                         if row["seed_ms"] > row["high_ms"] else row["seed_ms"] - row["low_ms"])
        elif seed and seed.get("sglang") and seed.get("vllm"):
            row["seed_gap_ms"] = 1e3 / seed["sglang"] - 1e3 / seed["vllm"]
            row["seed_inside"] = row["low_ms"] <= row["seed_gap_ms"] <= row["high_ms"]
        out.append(row)
    return out
