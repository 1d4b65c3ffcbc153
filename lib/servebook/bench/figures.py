"""Chapter 05's figures computed from a run's tables, and nothing else: what the page and the stated-number registry
(``servebook.stated``) both read. No page text here, so the registry can import it without an import circle.

    ceiling_tables(store)       # client_ceiling as recorded, and servebook's own rows of it
    sweep_parameters(store)     # per configuration: the levels the sweep ran, requests per level, why it stopped
    breakdowns(store)           # bench_breakdown per label, later rows superseding older ones
"""

from __future__ import annotations

__all__ = ["ceiling_tables", "sweep_parameters", "breakdowns"]


def ceiling_tables(store):
    """``client_ceiling`` as recorded, and servebook's own rows of it (the client every measurement uses)."""
    ceiling_all = store.table("client_ceiling")
    ceiling_df = ceiling_all[ceiling_all["client"].fillna("servebook") == "servebook"] if "client" in ceiling_all else ceiling_all
    return ceiling_all, ceiling_df


def _requests_of(row: dict) -> int | None:
    n = (row.get("ok") or 0) + (row.get("failed") or 0)
    return int(n) if n else None


def sweep_parameters(store) -> list[dict]:
    """Per configuration, the sweep as it ran (from ``bench_summary`` and ``bench_sweep_stops``, not the parameters
    cell): the levels, the requests sent per level and per unit of concurrency, whether a level hit its time budget, and
    why the sweep stopped: saturation (a ``bench_sweep_stops`` row), a time budget, or its last level (max concurrency)."""
    from .runs import current

    rows, _ = current(store.rows("bench_summary"))
    stops = store.rows("bench_sweep_stops")
    out = []
    for label in dict.fromkeys(r["label"] for r in rows if r.get("phase") == "sweep"):
        levels = sorted((r for r in rows if r.get("label") == label and r.get("phase") == "sweep"), key=lambda r: r["concurrency"])
        ran = [int(r["concurrency"]) for r in levels]
        per = sorted({_requests_of(r) // int(r["concurrency"]) for r in levels if _requests_of(r)})
        truncated = [int(r["concurrency"]) for r in levels if r.get("truncated")]
        warmed = bool(levels[-1].get("level_warmup"))  # a stop row belongs to the sweep of its method (levels warmed or not)
        stop = next((s for s in reversed(stops) if s.get("label") == label and s.get("levels_run") == ran
                     and bool(s.get("level_warmup")) == warmed), None)
        if stop:
            why, kind = stop["reason"], "saturation" if "saturated" in stop["reason"] else "throughput fell"
        elif truncated:
            why, kind = f"a level hit its time budget (C={', '.join(map(str, truncated))}): it started no new request after the budget", "time budget"
        else:
            why, kind = f"it ran every level up to C={ran[-1]}, its max concurrency, without a recorded stop", "max concurrency"
        out.append({"label": label, "levels": ", ".join(map(str, ran)), "last_level": ran[-1],
                    "requests_per_level_x_C": ", ".join(map(str, per)) or None,
                    "requests": ", ".join(str(_requests_of(r)) for r in levels), "warmed_levels": warmed,
                    "stopped_by": kind, "stopped_before": stop.get("stopped_before") if stop else None, "why": why})
    return out


def breakdowns(store) -> list[tuple[str, list[dict]]]:
    """``bench_breakdown`` per label, a row computed again by a later execution superseding its older one."""
    rows = {}
    for r in store.rows("bench_breakdown"):
        rows[(r["label"], r["part"])] = r
    out: dict[str, list[dict]] = {}
    for (label, _), r in rows.items():
        out.setdefault(label, []).append(r)
    return list(out.items())
