"""Numbers as the tables hold them, and the one comparison every chapter states (95% intervals).

    separated(88.0, 35.0, 73.0, 30.0)   # 'no change supported (+20.5%, the 95% intervals overlap)'
    separated(803.0, 40.0, 688.0, 90.0, starts=(2, 2))   # 'no difference beyond the restart spread (+16.7%, ...)'
    separated(803.0, 3.0, 688.0, 12.0, starts=(1, 1))    # 'one start: interval within a start only (+16.7%, ...)'
    interval_of(row)   # {"mean", "ci95", "starts", "over"}: a backends row's rate and the interval to compare it by

On a lent H200 the same SGLang default on the same 2-layer slice gave 803 +/- 3, 688 +/- 12 and 505 tok/s in three
server starts: an interval over the requests of one start does not cover the spread between starts. Chapters 03 and
05 therefore measure each configuration over ``starts`` server starts and compare the t-intervals over the per-start
means; "faster" or "slower" is said only where those separate.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["separated", "interval_of", "starts_of", "fastest_correct", "ONE_START"]

ONE_START = "one start: interval within a start only"


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _overlap(a: float, ea: float, b: float, eb: float) -> bool:
    return (a - ea) <= (b + eb) and (b - eb) <= (a + ea)


def starts_of(row: dict | None) -> int:
    """How many server starts a row's rate covers: its ``starts`` list (chapter 03) or count (chapter 05's throughput
    items); a row recorded before starts were counted covers one."""
    s = (row or {}).get("starts")
    if isinstance(s, list):
        return max(1, sum(1 for x in s if isinstance(x, dict) and _num(x.get("decode_tok_s")) is not None))
    return int(s) if isinstance(s, (int, float)) and s >= 1 else 1


def interval_of(row: dict | None, mean_key: str = "decode_tok_s", ci_key: str = "decode_tok_s_ci95") -> dict:
    """A row's rate and the 95% half-width to compare it by, with what that interval covers: ``over`` is
    "N server starts" (a t-interval over the per-start means) or :data:`ONE_START`."""
    row = row or {}
    n = starts_of(row)
    return {"mean": _num(row.get(mean_key)), "ci95": _num(row.get(ci_key)), "starts": n,
            "over": f"{n} server starts" if n >= 2 else ONE_START}


def separated(a, ea, b, eb, what: str = "tok/s", starts: tuple[int, int] | int | None = None, of: str | None = None,
              names: tuple[str, str] = ("vs_default_pct", "compared_starts")) -> str:
    """The one comparison every chapter states: ``a`` against the reference ``b``, each with its 95% half-width.

    Without ``starts`` (one measurement each, e.g. chapter 04's end-to-end rows) a change is claimed only when the
    intervals do not overlap; otherwise "no change supported". With ``starts`` (how many server starts each interval
    covers, chapters 03 and 05): "faster"/"slower" only when both cover two starts or more and separate, "no difference
    beyond the restart spread" when they overlap, and with one start "one start: interval within a start only" and the
    within-start comparison, which is no verdict (the rate moves between starts by more than within one).

    ``of``: the compared start of chapter 03 (``"engine | attention | mode"``, ``b`` its engine's default in that mode):
    the difference and the count of starts are then tagged (``vs_default_pct``, ``compared_starts``) for the check.
    ``names``: the two quantities to tag them as for another comparison (``of`` then names its subject in that
    quantity's registry entry, e.g. ``("single_vs_pct", "single_vs_starts")`` with ``of="A vs B"``)."""
    a, b = _num(a), _num(b)
    if a is None or b is None:
        return "not comparable (one side was not measured)"
    ea, eb = _num(ea) or 0.0, _num(eb) or 0.0
    pct = 100 * (a - b) / b if b else float("nan")
    pct_s = _tag(names[0], pct, "+.1f", of)
    if starts is None:
        if _overlap(a, ea, b, eb):
            return f"no change supported ({pct_s}%, the 95% intervals overlap)"
        if of is not None:  # the signed difference, tagged as recomputed
            return f"{'faster' if a > b else 'slower'} ({pct_s}%, the 95% intervals separate)"
        return f"{'faster' if a > b else 'slower'} by {abs(pct):.1f}% (the 95% intervals separate)"
    n = min(starts) if isinstance(starts, (tuple, list)) else int(starts)
    n_s = _tag(names[1], n, "d", of)
    if n < 2:
        # never "separate": within one start that reads as a verdict the rate's spread between starts does not allow
        return (f"{ONE_START} ({pct_s}%, the intervals within it {'overlap' if _overlap(a, ea, b, eb) else 'do not overlap'}; "
                "the spread between starts is not measured, so no verdict)")
    if _overlap(a, ea, b, eb):
        return f"no difference beyond the restart spread ({pct_s}%, the 95% intervals over {n_s} server starts overlap)"
    if of is not None:  # the signed difference, tagged as recomputed
        return f"{'faster' if a > b else 'slower'} ({pct_s}%, the 95% intervals over {n_s} server starts separate)"
    return f"{'faster' if a > b else 'slower'} by {abs(pct):.1f}% (the 95% intervals over {n} server starts separate)"


def _tag(name: str, value, fmt: str, of: str | None) -> str:
    """``value`` as ``fmt`` shows it, tagged as ``name`` of ``of`` when ``of`` is given (servebook.stated)."""
    if of is None:
        return format(value, fmt)
    from .tags import q

    return q(name, value, fmt, of=of)


def fastest_correct(b: dict, noun: str = "backend") -> str:
    """How chapters 03 and 06 name the fastest start that served acceptable output: "the fastest correct backend" where
    its decode kernel was checked by token ids against the default's (servebook.backends.agreement), else what was checked."""
    if b.get("decode_checked", True):
        return f"the fastest correct {noun}"
    return (f"the fastest {noun} that ran (its output checked on the prefill path only: this run has no decode-path "
            "agreement, so its decode kernels' tokens were not compared)")
