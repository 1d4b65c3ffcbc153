"""Numbers as the tables hold them, and the one comparison every chapter states (95% intervals).

    separated(88.0, 35.0, 73.0, 30.0)   # 'no change supported (+20.5%, the 95% intervals overlap)'
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["separated"]


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _overlap(a: float, ea: float, b: float, eb: float) -> bool:
    return (a - ea) <= (b + eb) and (b - eb) <= (a + ea)


def separated(a, ea, b, eb, what: str = "tok/s") -> str:
    """The one comparison every chapter states: ``a`` against the reference ``b``, each with its 95% half-width.

    A change is claimed only when the intervals do not overlap; otherwise "no change supported"."""
    a, b = _num(a), _num(b)
    if a is None or b is None:
        return "not comparable (one side was not measured)"
    ea, eb = _num(ea) or 0.0, _num(eb) or 0.0
    pct = 100 * (a - b) / b if b else float("nan")
    if _overlap(a, ea, b, eb):
        return f"no change supported ({pct:+.1f}%, the 95% intervals overlap)"
    return f"{'faster' if a > b else 'slower'} by {abs(pct):.1f}% (the 95% intervals separate)"

