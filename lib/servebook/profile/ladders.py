"""Which recording unit an engine's INT4 depth ladder of one backend is read from, where a run holds several (issue #39:
units merged with ``servebook profile merge-unit``; a later loan records an engine's ladder again beside the earlier).

    ranked = ladder_units(profile_rows, "vllm", "TRITON_MLA")   # every unit of that ladder, the one read first
    unit = ladder_unit(profile_rows, "vllm", "TRITON_MLA")      # its key (machine, run_id), or None
    both = shared_unit(profile_rows, {"sglang": "triton", "vllm": "TRITON_MLA"})   # a unit holding every engine's ladder

A unit is a recording unit and a run (``unit_of``: ``machines.recording_unit``, the row's machine or, without one, its
UTC day; and ``run_id``). The rule, the one every reader of a ladder uses (``slices.select_slices``, the projection and
the seed verdict through it, ``anchor.common_depth``, ``anchor.deepest_ratios``, ``units_page.units_markdown``): the
unit whose ladder (two MoE depths or more) reaches the most MoE layers; ties -> more depths, then more starts, then the
later recording (its latest ``taken_at``). A unit of one depth only (the anchor configuration measured again in another
engine's unit, a backends unit) is read only where no unit holds a ladder. Starts are pooled within a unit, never
across units: the other units stay evidence beside it (chapter 06 lists them).

Engines compared with each other (the seed verdict's projection) are read from one unit where one holds a ladder of
every engine (``shared_unit``, ``OneUnit``): no figure of another machine enters their difference, and no carry between
machines is assumed. Its rule: the deepest depth every engine reaches there, then the most starts of the thinner engine
at that depth, then the later recording.
"""

from __future__ import annotations

from typing import Iterable

from .machines import unit_of
from .tables import latest_ok

__all__ = ["unit_of", "int4_rows", "ladder_units", "ladder_unit", "shared_unit", "OneUnit", "in_unit", "linearity_key",
           "RULE", "SHARED_RULE"]

# the rule in words, as chapter 06 states it
RULE = ("the unit whose ladder reaches the most MoE layers; ties -> more depths, then more starts, then the later "
        "recording (`servebook.profile.ladders`)")


def int4_rows(rows: Iterable[dict], engine: str, backend: str, *, mode: str | None = "graph",
              card: str | None = "kimi-k2.5") -> list[dict]:
    """The last ok INT4 profile (quant ``card``) of each label of ``engine`` with ``backend``, of role slice or repeat
    (every start), with layers; ``mode`` and ``card`` None: any."""
    out = []
    for r in latest_ok(rows):
        if r.get("engine") == engine and r.get("backend", "auto") == backend and r.get("quant", "bf16") == "card" \
                and r.get("layers") is not None and r.get("role", "slice") in ("slice", "repeat") \
                and (mode is None or r.get("mode") == mode) and (card is None or r.get("card") == card):
            out.append(r)
    return out


def ladder_units(rows: Iterable[dict], engine: str, backend: str, **kw) -> list[dict]:
    """Every unit holding INT4 profiles of ``engine`` with ``backend`` (``int4_rows``), the one the ladder is read from
    first (the rule: module docstring), each ``{"unit", "machine", "run_id", "depths", "starts", "taken_at",
    "anchor_only", "rows"}``; ``anchor_only``: every row of it is the anchor configuration (``reference``)."""
    from .linearity import moe_layers_of

    by: dict = {}
    for r in int4_rows(rows, engine, backend, **kw):
        by.setdefault(unit_of(r), []).append(r)
    out = []
    for key, mine in by.items():
        depths = sorted({moe_layers_of(r) for r in mine})
        out.append({"unit": key, "machine": mine[0].get("machine"), "run_id": key[1], "depths": depths,
                    "starts": len(mine), "taken_at": max(float(r.get("taken_at") or 0.0) for r in mine),
                    "anchor_only": all(r.get("reference") for r in mine), "rows": mine})
    return sorted(out, key=lambda u: (len(u["depths"]) >= 2, u["depths"][-1], len(u["depths"]), u["starts"],
                                      u["taken_at"]), reverse=True)


def ladder_unit(rows: Iterable[dict], engine: str, backend: str, **kw) -> tuple | None:
    """The unit (``unit_of``) ``engine``'s INT4 ladder with ``backend`` is read from (``ladder_units``' first), or None."""
    ranked = ladder_units(rows, engine, backend, **kw)
    return ranked[0]["unit"] if ranked else None


def linearity_key(row: dict, lin_rows: Iterable[dict]) -> str:
    """The key a slice_linearity row's figures are stated by: ``engine | backend | machine``, with `` | <run_id>`` where
    another unit of that engine and backend on the same machine has rows too (two units of one lent machine)."""
    base = f"{row['engine']} | {row.get('backend')} | {row.get('machine')}"
    runs = {r.get("run_id") for r in lin_rows if (r["engine"], r.get("backend"), r.get("machine"))
            == (row["engine"], row.get("backend"), row.get("machine"))}
    return base + (f" | {row.get('run_id')}" if len(runs) > 1 else "")


SHARED_RULE = ("the unit holding a ladder of every engine; of several, the one whose common depth is deepest, then the "
               "most starts of the thinner engine there, then the most starts at the thinnest depth of any engine's "
               "ladder, then the later recording (`servebook.profile.ladders.shared_unit`)")


def shared_unit(rows: Iterable[dict], backends: dict, **kw) -> tuple | None:
    """The unit (``unit_of``) holding an INT4 ladder (two MoE depths or more) of every engine of ``backends``
    (``{engine: backend}``), by ``SHARED_RULE``; None where no unit holds them all."""
    from .linearity import moe_layers_of

    rows = list(rows)
    per = {e: {u["unit"]: u for u in ladder_units(rows, e, be, **kw) if len(u["depths"]) >= 2} for e, be in backends.items()}
    common = set.intersection(*(set(u) for u in per.values())) if per else set()

    def starts_at(e, unit, depth):
        return sum(1 for r in per[e][unit]["rows"] if moe_layers_of(r) == depth)

    def rank(unit):
        depth = min(per[e][unit]["depths"][-1] for e in per)
        thinnest = min(starts_at(e, unit, d) for e in per for d in per[e][unit]["depths"])   # the shallow slices too
        return (depth, min(starts_at(e, unit, depth) for e in per), thinnest,
                max(per[e][unit]["taken_at"] for e in per))

    return max(common, key=rank) if common else None


def in_unit(rows: Iterable[dict], unit: tuple) -> list[dict]:
    """The rows of ``unit`` (``unit_of``), and rows that name no machine and no run id (a table not kept per unit)."""
    return [r for r in rows if not (r.get("machine") or r.get("run_id")) or unit_of(r) == unit]


class OneUnit:
    """A RunStore's rows of one unit only (``unit_of(row) == unit``; rows that name no machine and no run id as well):
    the engines' projections read through it take every slice from that one machine."""

    def __init__(self, store, unit: tuple):
        self.path, self._store, self.unit = store.path, store, unit

    def rows(self, table: str, **kw) -> list[dict]:
        return in_unit(self._store.rows(table, **kw), self.unit)

    def __getattr__(self, name):
        return getattr(self._store, name)

