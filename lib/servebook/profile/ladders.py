"""Which recording unit an engine's INT4 depth ladder of one backend is read from, where a run holds several (issue #39:
units merged with ``servebook profile merge-unit``; a later loan records an engine's ladder again beside the earlier).

    ranked = ladder_units(profile_rows, "vllm", "TRITON_MLA")   # every unit of that ladder, the one read first
    unit = ladder_unit(profile_rows, "vllm", "TRITON_MLA")      # its key (machine, run_id), or None

A unit is a recording unit and a run (``unit_of``: ``machines.recording_unit``, the row's machine or, without one, its
UTC day; and ``run_id``). The rule, the one every reader of a ladder uses (``slices.select_slices``, the projection and
the seed verdict through it, ``units.common_depth``, ``units.deepest_ratios``, ``units.units_markdown``): the unit whose
ladder (two MoE depths or more) reaches the most MoE layers; ties -> more depths, then more starts, then the later
recording (its latest ``taken_at``). A unit of one depth only (the anchor configuration measured again in another
engine's unit, a backends unit) is read only where no unit holds a ladder. Starts are pooled within a unit, never
across units: the other units stay evidence beside it (chapter 06 lists them).
"""

from __future__ import annotations

from typing import Iterable

from .machines import unit_of
from .tables import latest_ok

__all__ = ["unit_of", "int4_rows", "ladder_units", "ladder_unit", "linearity_key", "RULE"]

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
