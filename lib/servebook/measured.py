"""Did a chapter measure what it is for? ("ok" means measured.)

Chapters 03, 04 and 05 each exist to measure one thing: a decode rate per forced backend (table ``backends``), the
all-reduce grid (table ``allreduce``), a single-stream decode rate (table ``bench_summary``, phase ``single``). A chapter
that ran every cell but recorded none of these measured nothing: the book records it as failed, with the first cause
recorded while it ran, and the index shows it so. A what-if (a hardware profile) measures nothing by design and is left
alone.
"""

from __future__ import annotations

import math

from .results import RunStore

# chapter number -> (table, the measured field, the rows that count, what is missing when none has it)
PURPOSE = {
    "03": ("backends", "decode_tok_s", {}, "no backend produced a decode rate"),
    "04": ("allreduce", "us_median", {}, "no all-reduce grid point was measured"),
    "05": ("bench_summary", "decode_tok_s_mean", {"phase": "single"}, "no single-stream decode rate was measured"),
}
PREFIX = "nothing measured"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _recordings(store: RunStore) -> list[dict]:
    """Every recording of a failure, oldest first: each row as written, and each time a later execution recorded it
    again (folded into it, ``executions.FOLDED``): the last at its ``last_recorded_at``, the earlier ones (their times
    not kept) at the row's own time, before anything recorded since. Stamps are to the second: within one second a
    re-hit counts as recorded before the rows appended that second."""
    out = []
    for i, f in enumerate(store.rows("failures", executions="all")):
        again = int(f.get("recorded_again") or 0)
        out += [(str(f.get("recorded_at") or ""), i, f)] * (1 + max(again - 1, 0))
        out += [(str(f.get("last_recorded_at") or ""), i, f)] * (again > 0)
    return [f for _, _, f in sorted(out, key=lambda t: t[:2])]


def failures_so_far(store: RunStore) -> int:
    """How many times the run recorded a failure (before a chapter runs: its own come after). Every recording counts,
    a repeat of an earlier one too (pages list it once, folded): a chapter that fails again the same way names that cause."""
    return len(_recordings(store))


def nothing_measured(store: RunStore, number: str, failures_before: int = 0, whatif: bool = False) -> str | None:
    """None where chapter ``number`` recorded its purpose-measurement (or has none); otherwise the reason, starting with
    ``nothing measured:`` and naming the first failure recorded since ``failures_before``."""
    from .profile.book import served_by_profiles   # a run of profiles only: its profiles timed the single stream

    if whatif or number not in PURPOSE or (number == "05" and served_by_profiles(store)):
        return None
    table, field, where, missing = PURPOSE[number]
    rows = [r for r in store.rows(table) if all(r.get(k) == v for k, v in where.items())]
    if any(_number(r.get(field)) for r in rows):
        return None
    causes = [f"{f.get('step')}: {f.get('error')}" for f in _recordings(store)[failures_before:] if f.get("error")]
    causes += [f"{r.get('engine', '')} {r.get('attention', '')}: {r.get('error')}".strip() for r in rows if r.get("error")]
    first = causes[0] if causes else "the chapter recorded no failure (its page shows what it did)"
    return f"{PREFIX}: {missing}; first cause: {first}"
