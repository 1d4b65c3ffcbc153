"""Units of one reference recording compared through the anchor configuration (issue #39): the reference
configuration every unit measures again, the one thing units measured on two machines are compared through (the units
merged into one run: ``units``; chapter 06's account of them: ``units_page``).

    src, carried = on_anchor_machine(RunStore.at("data/runs/h200x1-ref"),
                                     {"sglang": "triton", "vllm": "TRITON_MLA"})

A run may hold two units of one engine's ladder (``units``). Every reader here reads the one unit the rule of
``ladders`` picks (the unit whose ladder reaches the most MoE layers; ties: more depths, more starts, the later
recording): its ladder, its deepest starts (never pooled across units), the engines' common depth and their ratios;
a later unit of one engine supersedes an earlier one by that rule, and the earlier stays in the run as evidence
(``other_units``, listed by ``units_page.units_markdown``).

``on_anchor_machine`` carries each engine's profiles (of the unit read) to the machine of the first engine's slices
(the anchor) by the reference configuration's GPU-busy time measured in both units (``anchor_times``, per unit, through
``machines.relative_to_reference``): a time of machine B counts as time x (reference on the anchor / reference on B).
Nothing is subtracted across machines.
"""

from __future__ import annotations

from .ladders import ladder_units, unit_of
from .machines import MachineMismatch, relative_to_reference
from .tables import latest_ok

__all__ = ["OnAnchor", "on_anchor_machine", "anchor_times", "deepest_ratios", "common_depth", "deepest_starts",
           "other_units", "ratio_gap", "carry_spread", "CARRY_SHARE"]

# fields of profile_runs and decode_breakdown that are times of the machine (carried by the reference ratio)
_TIMES = ("busy_ms", "tpot_ms", "step_ms", "idle_ms", "kernel_ms", "overlap_ms", "tpot_ci_ms", "ms_per_step",
          "tpot_unprofiled_ms")


class OnAnchor:
    """A RunStore's rows read with each engine's times (of the unit its ladder is read from) carried to the anchor
    machine (``on_anchor_machine``); other units' rows as recorded."""

    def __init__(self, store, factors: dict, anchor: str | None = None):
        self.path, self._store, self.factors = store.path, store, factors   # {(engine, machine, run_id): factor}
        self.anchor = anchor

    def rows(self, table: str, **kw) -> list[dict]:
        out = []
        for r in self._store.rows(table, **kw):
            f = self.factors.get((r.get("engine"), r.get("machine"), r.get("run_id")))
            if f is not None and f != 1.0:
                r = {**r, **{k: r[k] * f for k in _TIMES if isinstance(r.get(k), (int, float))},
                     "carried_from_machine": r.get("machine"), "carried_to_machine": self.anchor, "carried_factor": f}
            out.append(r)
        return out

    def __getattr__(self, name):
        return getattr(self._store, name)


def anchor_times(profiles) -> dict:
    """``{unit: the anchor configuration's GPU busy time}``, a unit being (machine, run_id) (``ladders.unit_of``):
    the mean over each anchor label's latest ok row (a label profiled again counts once) of the unit's rows marked
    ``reference`` (two units of one lent machine are not pooled). The one computation both the carry factor
    (``on_anchor_machine``: the anchor unit's time / the other unit's) and chapter 06's ratio (``deepest_ratios``: a
    slice's time / its own unit's) read, so a carried time over the anchor equals the page's ratio."""

    by: dict = {}
    for p in latest_ok(profiles):
        if p.get("reference") and p.get("busy_ms") is not None and p.get("machine"):
            by.setdefault(unit_of(p), []).append(p)
    return {u: relative_to_reference(refs, value="busy_ms")[0]["reference_value"] for u, refs in by.items()}


def deepest_ratios(profiles, backends: dict) -> dict:
    """``{engine: [ratio per start]}``: each start of the engine's INT4 slice (``backends[engine]``) at the deepest
    depth every engine of ``backends`` with such slices has (``common_depth``: slices of one depth, never one engine's
    12 MoE layers against another's 4), all of the one unit its ladder is read from (``ladders``), its GPU busy
    time over its own unit's anchor time (``anchor_times``); an engine whose unit measured no anchor configuration, or
    without such a slice, is left out."""

    per, prof, out = anchor_times(profiles), latest_ok(profiles), {}
    depth = common_depth(prof, backends)
    for eng, be in backends.items():
        starts = deepest_starts(prof, eng, be, depth)
        if starts and all(unit_of(p) in per for p in starts):
            out[eng] = [p["busy_ms"] / per[unit_of(p)] for p in starts]
    return out


def common_depth(prof: list[dict], backends: dict) -> int | None:
    """The deepest MoE-layer depth at which every engine of ``backends`` that has INT4 slices has one in the unit its
    ladder is read from (``ladders``; None: no depth in common, or no slices)."""
    from .linearity import moe_layers_of

    have = [{moe_layers_of(p) for p in _int4(prof, eng, be)} for eng, be in backends.items()]
    have = [h for h in have if h]
    both = set.intersection(*have) if have else set()
    return max(both) if both else None


def on_anchor_machine(src, backends: dict) -> tuple:
    """(source, carried): ``src`` as is where every engine's slices (``slices.select_slices``: of the unit its ladder is
    read from) come from one machine; else an ``OnAnchor`` reading of it that carries each other engine's rows of that
    unit to the first engine's machine by the reference configuration's GPU-busy time in both units (``anchor_times``),
    with a row per carried engine (machines, the two reference times, the factor, ``carried`` in words). Refuses
    (``MachineMismatch``) where a unit lacks the reference."""
    from ..engines import prose_name
    from .projection import _tables
    from .slices import select_slices

    profiles = _tables(src)[0]
    machine, unit = {}, {}
    for eng, backend in backends.items():
        sl = select_slices(profiles, eng, backend=backend)
        machine[eng], unit[eng] = (sl["deep"] or {}).get("machine"), unit_of(sl["deep"])
    known = {m for m in machine.values() if m is not None}
    if not known:   # rows recorded before machine identities: one recording's rows, as the projection always read them
        return src, []
    if None in machine.values():   # one engine's machine known, another's not: nothing says they are one machine
        raise MachineMismatch("the engines' slices name machines "
                              + ", ".join(f"{prose_name(e)}: {m or 'none recorded'}" for e, m in machine.items())
                              + ": a slice without a machine identity cannot be compared "
                              "with a machine's (record it again, or compare only rows that name their machine)")
    anchor, home = next(iter(machine.values())), next(iter(unit.values()))
    if len(known) == 1:
        return src, []
    per = anchor_times(profiles)
    factors, notes = {}, []
    for eng, m in machine.items():
        if m == anchor:
            continue
        if home not in per or unit[eng] not in per:
            lack = [f"{u[0]} (unit {u[1]})" for u in (home, unit[eng]) if u not in per]
            raise MachineMismatch(f"{prose_name(eng)}'s slices come from machine {m}, the first engine's from "
                                  f"{anchor}: no anchor configuration measured on {', '.join(lack)}, so the two "
                                  "cannot be compared")
        factors[(eng, m, unit[eng][1])] = per[home] / per[unit[eng]]
        notes.append({"engine": eng, "carried_from": m, "carried_to": anchor, "carried_ref_ms": per[unit[eng]],
                      "carried_anchor_ref_ms": per[home], "carried_factor": factors[(eng, m, unit[eng][1])],
                      "carried": f"{prose_name(eng)}'s profiles, measured on machine {m}, carried to {anchor} by the "
                                 "anchor configuration's GPU busy time on both (an assumption: that the machines "
                                 "differ by one factor in every kernel; both engines profiled in one unit settle it; "
                                 "kernel floors not carried)"})
    return OnAnchor(src, factors, anchor), notes


def _int4(prof: list[dict], engine: str, backend: str) -> list[dict]:
    """The INT4 profiles (every start) of the one unit ``engine``'s ladder with ``backend`` is read from
    (``ladders``), with a GPU busy time."""
    ranked = ladder_units(prof, engine, backend)
    return [p for p in ranked[0]["rows"] if p.get("busy_ms") is not None] if ranked else []


def deepest_starts(prof: list[dict], engine: str, backend: str, depth: int | None = None) -> list[dict]:
    """Every start of an engine's INT4 slice with ``backend`` at ``depth`` MoE layers (None: its deepest), of the one
    unit its ladder is read from (``ladders``: starts are never pooled across units)."""
    from .linearity import moe_layers_of

    mine = _int4(prof, engine, backend)
    if depth is not None:
        mine = [p for p in mine if moe_layers_of(p) == depth]
    if not mine:
        return []
    deepest = max(moe_layers_of(p) for p in mine)
    return [p for p in mine if moe_layers_of(p) == deepest]


def other_units(profiles, backends: dict) -> list[dict]:
    """Per engine of ``backends``, each unit of its INT4 profiles other than the one its ladder is read from (anchor
    configurations measured again for another engine's unit left out): ``{"engine", "backend", "machine", "run_id",
    "depths", "read_run_id", "read_machine", "depth", "ratio", "read_ratio", "key"}``, where ``depth`` is the deepest
    depth it shares with the unit read and ``ratio`` / ``read_ratio`` each unit's slice there over its own unit's
    anchor, mean over that unit's starts (None where no depth is shared or a unit measured no anchor). Evidence, never
    pooled."""
    from .linearity import moe_layers_of

    prof, per, out = latest_ok(profiles), anchor_times(profiles), []
    for eng, be in backends.items():
        ranked = ladder_units(prof, eng, be)
        for u in [u for u in ranked[1:] if not u["anchor_only"]]:
            read = ranked[0]
            both = set(u["depths"]) & set(read["depths"])
            depth = max(both) if both else None
            ratio = []
            for w in (u, read):   # each unit's slice at that depth over its own unit's anchor, mean over its starts
                at = [p["busy_ms"] for p in w["rows"] if moe_layers_of(p) == depth and p.get("busy_ms") is not None]
                ratio.append(sum(at) / len(at) / per[w["unit"]] if at and w["unit"] in per else None)
            out.append({"engine": eng, "backend": be, "machine": u["machine"], "run_id": u["run_id"],
                        "depths": u["depths"], "read_run_id": read["run_id"], "read_machine": read["machine"],
                        "depth": depth, "ratio": ratio[0], "read_ratio": ratio[1],
                        "key": f"{eng} | {u['machine']} | {u['run_id']}"})
    return out


def ratio_gap(ra, rb, spread_pct: float = 0.0) -> dict:
    """The engines' reference ratios' difference and the margin ``starts.compare`` decides it against, each in % of the
    mean of the two means (``diff_pct``: absolute; ``margin_pct``), so a verdict at the margin's edge reads as one; with
    ``spread_pct`` (``carry_spread``: the ratios come from two machines) the margin widened by it (``widened_pct``), and
    a difference within that is ``verdict`` "not decided" (compare's own verdict kept as ``compared``)."""
    from .starts import compare

    c = compare(ra, rb)
    out = {"diff_pct": abs(c["mid_diff_pct"]), "margin_pct": c["mid_margin_pct"], "compared": c["verdict"]}
    out["widened_pct"] = out["margin_pct"] + spread_pct
    out["verdict"] = ("not decided" if c["verdict"] in ("a lower", "b lower") and out["diff_pct"] < out["widened_pct"]
                      else c["verdict"])
    return out


CARRY_SHARE = 0.05   # a kernel category counts in the carry's spread from 5% of the anchor's GPU busy time on


def carry_spread(store, backends: dict) -> dict | None:
    """How far "the machines differ by one factor in every kernel" fails, where the engines' deepest slices (those
    ``deepest_ratios`` reads) come from two machines: the anchor configuration measured on both, per kernel category
    holding at least 5% of its GPU busy time (table decode_breakdown, GPU idle left out), the category's time on the
    second engine's unit over the first's, each a mean over that unit's anchor starts. ``{"factors": {category:
    factor}, "spread_pct": 100 x (max - min) of the factors, "machines": (first, second)}``; None where the slices
    come from one machine or either unit's anchor has no breakdown."""
    prof = latest_ok(store.rows("profile_runs"))
    depth = common_depth(prof, backends)
    units = [unit_of(ps[0]) for ps in (deepest_starts(prof, e, b, depth) for e, b in backends.items()) if ps]
    if len(units) != 2 or units[0][0] == units[1][0]:
        return None
    refs = {(p["label"], p.get("taken_at")): unit_of(p) for p in prof if p.get("reference")}
    per: dict = {u: {} for u in units}
    for r in store.rows("decode_breakdown"):
        u = refs.get((r.get("label"), r.get("taken_at")))
        if u in per and r.get("category") != "gpu idle" and isinstance(r.get("ms_per_step"), (int, float)):
            per[u].setdefault(r["category"], []).append(r["ms_per_step"])
    mean = [{k: sum(v) / len(v) for k, v in per[u].items()} for u in units]
    busy = sum(mean[0].values())
    factors = {k: mean[1][k] / v for k, v in mean[0].items() if v >= CARRY_SHARE * busy and mean[1].get(k)}
    if len(factors) < 2:
        return None
    return {"factors": factors, "spread_pct": 100 * (max(factors.values()) - min(factors.values())),
            "machines": (units[0][0], units[1][0])}
