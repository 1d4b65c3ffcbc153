"""Which recorded profiles the seed case's projection subtracts: the 1- and 2-layer slices of one engine, from one
recording unit (the machine a profile names, else the UTC day it was taken), never across machines; of an INT4 depth
ladder, the slices of the one unit ``ladders``'s rule reads.

    s = select_slices(store.rows("profile_runs"), "sglang", backend="triton")   # shallow, deep, int4, int4_base, notes
"""

from __future__ import annotations

from functools import partial
from typing import Iterable

from .machines import recorded_day, recording_unit, require_one_machine
from .tables import latest_ok

__all__ = ["recorded_day", "recording_unit", "select_slices"]


def select_slices(profile_rows: Iterable[dict], engine: str, *, backend: str = "auto", mode: str = "graph",
                  card: str = "kimi-k2.5", same_day: bool = True) -> dict:
    """The last ok profiles an engine's projection uses: the 1- and 2-layer bf16 slices with ``backend``, the 2-layer
    one from the same recording unit as the 1-layer one (``recording_unit``: the row's machine, else its day; another
    server start of it, role "repeat", where the first start was taken on another machine: the difference of two slices
    is never taken across machines); the 1-layer slice of the default backend where ``backend`` has none (said in
    ``notes``), and the INT4 2-layer slice with the 1-layer slice of its own unit (``int4_base``: the experts of one
    layer are their difference). A run of INT4 slices only (a depth ladder, as ``h200x1-ref``): the shallowest and the
    deepest INT4 first start with ``backend`` of the one unit the engine's ladder is read from (``ladders``: a run
    of units may hold two ladders of one engine; the one reaching the most MoE layers is read, the other named in
    ``notes``) (``ladder``: their MoE layers, ``(from, to)``; the projection divides their difference by the layers
    between them, ``_int4_ladder``). ``same_day=False``: the old choice (first starts only, any unit). Missing ones are
    None; ``cross_day`` lists pairs that could only be taken across units.
    """
    rows = [r for r in latest_ok(profile_rows) if r["engine"] == engine and r.get("card") == card
            and r.get("role", "slice") in ("slice", "repeat")]
    pick = partial(_pick, rows)
    notes, cross = [], []
    shallow, deep = _bf16_pair(pick, backend, mode, same_day, notes, cross)
    ladder = None
    if shallow is None and deep is None:
        shallow, deep, ladder = _int4_ladder(rows, engine, backend, mode, card, notes)
    int4, int4_base = _int4_pair(pick, backend, mode, same_day, shallow, notes, cross) if ladder is None else (None, None)
    deep_same = _deep_same(pick, mode, same_day, shallow, deep, notes)
    require_one_machine([shallow, deep, int4, int4_base, deep_same], f"the {engine} projection's slice subtraction")
    return {"shallow": shallow, "deep": deep, "int4": int4, "int4_base": int4_base, "deep_same": deep_same,
            "notes": notes, "cross_day": cross, "ladder": ladder,
            "days": sorted({d for d in (recorded_day(r) for r in (shallow, deep, int4, int4_base, deep_same) if r) if d})}


def _pick(rows: list[dict], layers: int, quant: str, be: str | None, modes: tuple[str, ...], day: str | None = None,
          roles: tuple[str, ...] = ("slice",)) -> dict | None:
    """The first of ``rows`` with that many layers, that quantization, backend (None: any) and recording unit (None: any),
    by role and then mode in the order given."""
    for role in roles:
        for m in modes:
            for r in rows:
                if int(r["layers"]) == layers and r.get("quant", "bf16") == quant and r.get("mode") == m and \
                        r.get("role", "slice") == role and (be is None or r.get("backend", "auto") == be) and \
                        (day is None or recording_unit(r) == day):
                    return r
    return None


def _bf16_pair(pick, backend: str, mode: str, same_day: bool, notes: list, cross: list) -> tuple[dict | None, dict | None]:
    """The 1- and 2-layer bf16 slices with ``backend``, the 2-layer one from the 1-layer one's recording unit."""
    both = ("slice", "repeat")
    shallow = pick(1, "bf16", backend, (mode,))
    deep = None
    if shallow is not None:
        deep = pick(2, "bf16", backend, (mode,), recording_unit(shallow) if same_day else None, both if same_day else ("slice",))
    if shallow is None and backend != "auto":
        deep = pick(2, "bf16", backend, (mode,))
        day = recording_unit(deep) if same_day and deep is not None else None
        shallow = pick(1, "bf16", "auto", (mode,), day) or pick(1, "bf16", None, (mode,), day)
        if shallow is not None:
            notes.append(f"no 1-layer slice with backend {backend}: the fixed part comes from {shallow['label']} (taken the "
                         f"same day); attention per layer = the 2-layer slice's attention / 2")
    if deep is None and shallow is not None and same_day:
        deep = pick(2, "bf16", backend, (mode,))
        if deep is not None:
            cross.append(f"{deep['label']} - {shallow['label']}")
    if deep is not None and deep.get("role") == "repeat":
        notes.append(f"the 2-layer slice is {deep['label']}, the start taken the same day as {shallow['label']} (the first "
                     "start was taken another day, on another lent machine)")
    return shallow, deep


def _int4_pair(pick, backend: str, mode: str, same_day: bool, shallow: dict | None, notes: list,
               cross: list) -> tuple[dict | None, dict | None]:
    """The INT4 2-layer slice and the 1-layer slice of its own recording unit (the experts of one layer: their difference)."""
    int4 = pick(2, "card", backend, (mode, "eager", "graph")) or pick(2, "card", None, (mode, "eager", "graph"))
    int4_base = None
    if int4 is not None:
        int4_base = (pick(1, "bf16", None, (mode, "eager", "graph"), recording_unit(int4)) if same_day else shallow)
        if int4_base is None:
            int4_base = shallow
            cross.append(f"{int4['label']} - {shallow['label'] if shallow else '?'}")
        elif int4_base is not shallow:
            notes.append(f"experts of one layer = {int4['label']} - {int4_base['label']} (the 1-layer slice taken the same day)")
    return int4, int4_base


def _deep_same(pick, mode: str, same_day: bool, shallow: dict | None, deep: dict | None, notes: list) -> dict | None:
    """The 2-layer slice of the 1-layer slice's backend, where the 2-layer slice ran another: a per-layer difference is
    taken between slices of one backend."""
    if shallow is None or deep is None or shallow.get("backend", "auto") == deep.get("backend", "auto"):
        return None
    both = ("slice", "repeat")
    deep_same = pick(2, "bf16", shallow.get("backend", "auto"), (mode,),
                     recording_unit(shallow) if same_day else None, both if same_day else ("slice",))
    notes.append(f"per MoE layer (every category but attention and experts) = {deep_same['label']} - {shallow['label']} "
                 f"(one backend); {deep['label']} - {deep_same['label']} (the backend's difference at 2 layers) "
                 "spread over both layers" if deep_same is not None else
                 f"no 2-layer slice with {shallow['label']}'s backend: the other categories mix two backends (confounded)")
    return deep_same


def _int4_ladder(rows: list[dict], engine: str, backend: str, mode: str, card: str,
                 notes: list) -> tuple[dict | None, dict | None, tuple | None]:
    """A run of INT4 slices only (no 1-layer bf16 slice): the shallowest and the deepest first start of ``backend``
    (mode ``mode``) in the one unit the engine's ladder is read from (``ladders``: the unit reaching the most MoE
    layers, never two units pooled), and their MoE layers. (None, None, None) where that unit has fewer than two depths."""
    from .ladders import RULE, ladder_units, unit_of
    from .linearity import moe_layers_of

    ranked = ladder_units(rows, engine, backend, mode=mode, card=card)
    if not ranked:
        return None, None, None
    mine = [r for r in ranked[0]["rows"] if r.get("role", "slice") == "slice"]
    if len({moe_layers_of(r) for r in mine}) < 2:
        return None, None, None
    shallow, deep = min(mine, key=moe_layers_of), max(mine, key=moe_layers_of)
    ladder = (moe_layers_of(shallow), moe_layers_of(deep))
    notes.append(f"INT4 depth ladder: one MoE layer = ({deep['label']} - {shallow['label']}) / {ladder[1] - ladder[0]} "
                 f"(MoE layers {ladder[0]} -> {ladder[1]}, one machine); the fixed part = {shallow['label']} less its "
                 f"{ladder[0]} MoE layer{'s' * (ladder[0] != 1)}; the experts are INT4 in both slices")
    others = [u for u in ranked[1:] if not u["anchor_only"]]
    if others:
        notes.append(f"INT4 ladder read from unit {unit_of(shallow)[1]} (machine {shallow.get('machine')}), by the rule: "
                     f"{RULE}; not pooled with " + ", ".join(f"unit {u['run_id']} (machine {u['machine']}, MoE layers "
                                                              f"{'/'.join(map(str, u['depths']))})" for u in others))
    return shallow, deep, ladder
