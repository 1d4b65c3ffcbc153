"""The units of one reference recording (issue #39): each measured on one lent machine, merged into one run, compared
only through their ratio to the reference configuration every unit measures again.

    merge_unit(RunStore.at("data/runs/h200x1-ref"), RunStore.at("runs/local-x/h200x1-ref-vllm"))   # servebook profile merge-unit
    src, carried = on_anchor_machine(RunStore.at("data/runs/h200x1-ref"), {"sglang": "triton", "vllm": "TRITON_MLA"})

A unit's rows keep their own ``machine`` and ``run_id`` (a unit recorded under a run id the run already holds for
another unit is merged under that id and its first day, ``_unit_id``). Where a unit's label is already in the run
(every unit profiles the reference configuration under the same label; a later unit of an engine profiles its ladder
under the earlier unit's labels), its rows are merged under the label with `` (<unit id>)`` appended and their trace
files copied under that name: the last row of a label is the one a reader takes, so a unit's rows must never replace
another unit's (they would silently move an engine's depth ladder). Merging a unit twice adds nothing.

A run may so hold two units of one engine's ladder. Every reader here reads the one unit the rule of
``ladders`` picks (the unit whose ladder reaches the most MoE layers; ties: more depths, more starts, the later
recording): its ladder, its deepest starts (never pooled across units), the engines' common depth and their ratios;
a later unit of one engine supersedes an earlier one by that rule, and the earlier stays in the run as evidence
(``other_units``, listed by ``units_markdown``).

``on_anchor_machine`` carries each engine's profiles (of the unit read) to the machine of the first engine's slices
(the anchor) by the reference configuration's GPU-busy time measured in both units (``anchor_times``, per unit, through
``machines.relative_to_reference``): a time of machine B counts as time x (reference on the anchor / reference on B).
Nothing is subtracted across machines.
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

from ..errors import ServebookError
from .ladders import RULE, ladder_units, linearity_key, unit_of
from .kernels import trace_slug
from .machines import MachineMismatch, relative_to_reference
from .tables import latest_ok

__all__ = ["LADDER_PLANS", "UNIT_TABLES", "merge_unit", "on_anchor_machine", "OnAnchor", "labels_on_two_machines", "ratio_gap",
           "units_markdown", "anchor_times", "deepest_ratios", "common_depth", "other_units", "carry_spread"]

# the committed plan that records each engine's INT4 depth ladder on the H200 (tools/gpu-stage/, issue #39)
LADDER_PLANS = {"sglang": "tools/gpu-stage/ref-plan.json", "vllm": "tools/gpu-stage/ref-plan-vllm.json"}
# the recorded tables a unit brings; the derived ones (slice_linearity, layer_kernels, step_kernels, prediction_check)
# are derived again from the merged run (servebook profile linearity / predict)
UNIT_TABLES = ("profile_runs", "decode_breakdown", "memory_bandwidth")
# fields of profile_runs and decode_breakdown that are times of the machine (carried by the reference ratio)
_TIMES = ("busy_ms", "tpot_ms", "step_ms", "idle_ms", "kernel_ms", "overlap_ms", "tpot_ci_ms", "ms_per_step",
          "tpot_unprofiled_ms")


def labels_on_two_machines(profile_rows) -> dict:
    """``{label: machines}`` of the labels whose ok rows come from more than one machine (a naive merge of two units)."""
    seen: dict = {}
    for r in profile_rows:
        if r.get("ok") and r.get("machine"):
            seen.setdefault(r["label"], set()).add(r["machine"])
    return {k: sorted(v) for k, v in seen.items() if len(v) > 1}


def _renamed(unit: str, label: str, taken: set) -> str:
    return f"{label} ({unit})" if label in taken else label


def merge_unit(dest, unit) -> dict:
    """Append ``unit``'s recorded tables (RunStores) to ``dest``'s, with its trace files and logs; labels ``dest``
    already holds (another unit's: the anchor configuration, or an engine's ladder recorded again) get
    `` (<unit id>)``, the unit id being its run id (``_unit_id``). Rows ``dest`` already holds (same label after
    renaming and ``taken_at``) are not added again; a trace file or log of another unit is never replaced. Refuses a
    unit without a reference row or without a machine on every profile. Returns ``{table: rows added, "renamed": {old:
    new}, "unit": id}``."""
    prof = unit.rows("profile_runs")
    name = Path(unit.path).name
    if not any(r.get("reference") and r.get("ok") for r in prof):
        raise ServebookError(f"unit {name}: no ok profile of the anchor configuration (rows marked reference): units "
                             "are compared only through it; profile it in that unit before merging")
    if any(r.get("machine") is None for r in prof):
        raise ServebookError(f"unit {name}: profiles without a machine identity cannot join a reference run")
    recorded, uid = _unit_id(dest, unit)
    taken = {r["label"] for r in dest.rows("profile_runs", withdrawn=True) if r.get("run_id") != uid}
    renamed = {r["label"]: _renamed(uid, r["label"], taken) for r in prof}
    out: dict = {"renamed": {k: v for k, v in renamed.items() if k != v}, "unit": uid}
    have = {(r["label"], r.get("taken_at")) for r in dest.rows("profile_runs", withdrawn=True)}
    held_bw = {json.dumps(r, sort_keys=True, default=str) for r in dest.rows("memory_bandwidth", withdrawn=True)}
    for table in UNIT_TABLES:
        rows = []
        for r in unit.rows(table, withdrawn=True, executions="all"):
            r = {**r, "run_id": uid, **({"recorded_run_id": recorded} if uid != recorded else {})}
            if "label" in r:
                old = r["label"]
                r["label"] = renamed.get(old, old)
                if (r["label"], r.get("taken_at")) in have:   # merged before: not added again
                    continue
                if table == "profile_runs":
                    r.update(_copy_traces(unit.path, dest.path, r, trace_slug(old)))
            elif json.dumps(r, sort_keys=True, default=str) in held_bw:
                continue
            rows.append(r)
        if rows:
            dest.replace(table, dest.rows(table, withdrawn=True, executions="all") + rows)
        out[table] = len(rows)
    _copy_logs(unit.path, dest.path, uid)
    return out


def _unit_id(dest, unit) -> tuple[str, str]:
    """(the run id the unit was recorded under, the id it is merged under): its rows' ``run_id`` (its folder's name
    where they carry none), or, where ``dest`` holds another unit's rows under that id (a later loan recorded with the
    same ``RUN_ID``: its labels, traces and logs would land on the earlier unit's), that id with the UTC day of the
    unit's first profile (``-YYYYMMDD``; the rows keep the recorded one as ``recorded_run_id``). The same unit merged
    again gets the same id. Refuses a unit of several run ids, and one whose dated id is another unit's too."""
    from datetime import datetime, timezone

    prof = unit.rows("profile_runs", withdrawn=True)
    ids = {r.get("run_id") or Path(unit.path).name for r in prof}
    if len(ids) != 1:
        raise ServebookError(f"unit {Path(unit.path).name}: its profiles name {len(ids)} runs ({sorted(map(str, ids))}): "
                             "a unit is one run of one machine; merge each run as a unit of its own")
    recorded = ids.pop()
    mine = {(r.get("machine"), r.get("taken_at")) for r in prof}
    held = dest.rows("profile_runs", withdrawn=True)

    def another(uid: str) -> bool:   # rows of that id in dest that are not this unit's
        return any(r.get("run_id") == uid and (r.get("machine"), r.get("taken_at")) not in mine for r in held)

    if not another(recorded):
        return recorded, recorded
    first = min(float(r["taken_at"]) for r in prof if r.get("taken_at") is not None)
    uid = f"{recorded}-{datetime.fromtimestamp(first, tz=timezone.utc):%Y%m%d}"
    if another(uid):
        raise ServebookError(f"unit {Path(unit.path).name}: {Path(dest.path).name} holds other units' profiles under "
                             f"run ids {recorded} and {uid}: record the unit under a RUN_ID of its own and merge that")
    return recorded, uid


def _copy_traces(src: Path, dst: Path, row: dict, old_slug: str) -> dict:
    """Copy a profile's trace files (``traces/<old_slug>.*``) under its label's slug, never over another unit's file of
    other content; the row's fields that name them (a file the unit does not hold: named under the new slug, or None
    where another unit's file has that name)."""
    fields, new_slug = {}, trace_slug(row["label"])
    (Path(dst) / "traces").mkdir(parents=True, exist_ok=True)
    for key, suffix in (("trace", ".trace.json.gz"), ("kernel_table", ".kernels.json"), (None, ".excerpt.json")):
        rel = row.get(key) if key else f"traces/{old_slug}{suffix}"
        if not rel:
            continue
        new = f"traces/{new_slug}{suffix}" if rel.endswith(suffix) else rel
        there = Path(dst) / new
        if not (Path(src) / rel).is_file():   # not carried: the row must not name another unit's file of that name
            if key:
                fields[key] = None if there.exists() else new
            continue
        if there.exists() and there.resolve() != (Path(src) / rel).resolve() and not filecmp.cmp(there, Path(src) / rel,
                                                                                                  shallow=False):
            raise ServebookError(f"{new} is already in {Path(dst).name}, with other content: a unit's trace would "
                                 "replace another's (each unit merges under an id of its own: units._unit_id)")
        shutil.copyfile(Path(src) / rel, there)
        if key:
            fields[key] = new
    return fields


def _copy_logs(src: Path, dst: Path, unit: str) -> None:
    """The unit's logs under ``logs/<unit id>/`` (two units' servers of one label write logs of one name; each unit's id
    is its own, ``_unit_id``)."""
    if (Path(src) / "logs").is_dir():
        shutil.copytree(Path(src) / "logs", Path(dst) / "logs" / unit, dirs_exist_ok=True)


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
        starts = _deepest_starts(prof, eng, be, depth)
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
        raise MachineMismatch("the engines' slices name machines " + ", ".join(f"{prose_name(e)}: {m or 'none recorded'}"
                              for e, m in machine.items()) + ": a slice without a machine identity cannot be compared "
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
            raise MachineMismatch(f"{prose_name(eng)}'s slices come from machine {m}, the first engine's from {anchor}: no anchor "
                                  f"configuration measured on {', '.join(lack)}, so the two cannot be compared")
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


def _deepest_starts(prof: list[dict], engine: str, backend: str, depth: int | None = None) -> list[dict]:
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


def units_markdown(store) -> str:
    """Chapter 06's account of a reference recording made of units (rows with a machine identity; "" otherwise): per
    engine its depth ladder (table slice_linearity) of the one unit it is read from (``ladders``'s rule; where the
    engine has other units, the rule in words and each other unit listed beside it as evidence, never pooled) or the
    plan that records it, and the engines' deepest slices compared only through their own unit's reference
    configuration (``relative_to_reference``, decided by ``starts.compare``)."""
    from ..engines import prose_name
    from .ranges import SEED_BACKENDS
    from .same_machine import same_machine, same_machine_line

    prof = latest_ok(store.rows("profile_runs"))
    # a recording of units: every row names its machine and the run holds the anchor configuration (a live book's
    # profiles name their machine too, and are no depth ladder)
    if not prof or not all(p.get("machine") for p in prof) or not any(p.get("reference") for p in prof):
        return ""
    lin, lines, deep = store.rows("slice_linearity"), [], {}
    others = {(o["engine"], o["run_id"], o["machine"]): o for o in other_units(prof, SEED_BACKENDS)}
    for eng, be in SEED_BACKENDS.items():
        ranked = ladder_units(prof, eng, be)
        steps = _unit_lin(lin, eng, be, ranked[0], "step") if ranked else []
        if not steps:
            lines.append(f"- {prose_name(eng)} ({be}): no depth ladder in this run; `{LADDER_PLANS[eng]}` records it, on "
                         "a machine of its own with the anchor configuration measured again.")
            continue
        pred = next(iter(_unit_lin(lin, eng, be, ranked[0], "prediction")), None)
        lines.append(f"- {prose_name(eng)} ({be}, INT4 experts, machine `{steps[0]['machine']}`), GPU busy per MoE layer: "
                     + _per_layer(steps, lin)
                     + (f"; the deepest slice predicted from the two shallowest "
                        f"{_q('linearity_error_pct', pred['busy_error_pct'], '+.1f', linearity_key(pred, lin) + ' | ' + pred['depths'])}"
                        "% off its measured GPU busy time" if pred else "") + ".")
        extra = [u for u in ranked[1:] if not u["anchor_only"]]
        if extra:
            lines[-1] += (f" Read from unit `{ranked[0]['run_id']}` by the rule: {RULE}; the engine's other "
                          f"unit{'s' * (len(extra) > 1)}, evidence beside it, never pooled with it:")
            lines += [_other_unit_line(others[(eng, u["run_id"], u["machine"])], _unit_lin(lin, eng, be, u, "step"), lin)
                      for u in extra]
        deep[eng] = _deepest_starts(prof, eng, be)
    if len(deep) == 2 and all(deep.values()):
        depth = common_depth(prof, {e: ps[0]["backend"] for e, ps in deep.items()})
        deep = {e: _deepest_starts(prof, e, ps[0]["backend"], depth) for e, ps in deep.items()}
        one = same_machine_line(same_machine(prof, SEED_BACKENDS, depth))   # units with both engines at that depth lead
        lines += [one, _engines_line(prof, deep, depth, carry_spread(store, {e: ps[0]["backend"] for e, ps in deep.items()}), bool(one))]
    return "\n".join(ln for ln in lines if ln)


def _q(name: str, value, fmt: str, of: str) -> str:
    from ..stated import q

    return q(name, value, fmt, of=of)


def _unit_lin(lin: list[dict], eng: str, be: str, unit: dict, kind: str) -> list[dict]:
    """The slice_linearity rows of ``kind`` of one unit (``ladder_units``' entry) of an engine's INT4 ladder (graph
    mode, the seed's card) with backend ``be``."""
    return [r for r in lin if r["engine"] == eng and r.get("backend") == be and r["kind"] == kind
            and r.get("quant") == "card" and r.get("mode") == "graph" and r.get("card") == "kimi-k2.5"
            and (r.get("machine"), r.get("run_id")) == (unit["machine"], unit["run_id"])]


def _per_layer(steps: list[dict], lin: list[dict]) -> str:
    """A unit's GPU busy per MoE layer between each pair of its consecutive depths, every figure tagged."""
    out = []
    for r in steps:
        key = linearity_key(r, lin) + " | " + r["depths"]
        out.append(f"{_q('linearity_per_layer_ms', r['per_layer_ms'], '.4f', key)} ms between "
                   f"{_q('linearity_moe_layers', r['moe_from'], 'd', key + ' | from')} and "
                   f"{_q('linearity_moe_layers', r['moe_to'], 'd', key + ' | to')} MoE layers")
    return "; ".join(out)


def other_units(profiles, backends: dict) -> list[dict]:
    """Per engine of ``backends``, each unit of its INT4 profiles other than the one its ladder is read from (anchor
    configurations measured again for another engine's unit left out): ``{"engine", "backend", "machine", "run_id",
    "depths", "read_run_id", "read_machine", "depth", "ratio", "read_ratio", "key"}``, where ``depth`` is the deepest
    depth it shares with the unit read and ``ratio`` / ``read_ratio`` each unit's slice there over its own unit's anchor,
    mean over that unit's starts (None where no depth is shared or a unit measured no anchor). Evidence, never pooled."""
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
            out.append({"engine": eng, "backend": be, "machine": u["machine"], "run_id": u["run_id"], "depths": u["depths"],
                        "read_run_id": read["run_id"], "read_machine": read["machine"], "depth": depth,
                        "ratio": ratio[0], "read_ratio": ratio[1], "key": f"{eng} | {u['machine']} | {u['run_id']}"})
    return out


def _other_unit_line(o: dict, steps: list[dict], lin: list[dict]) -> str:
    """One other unit of an engine, as evidence: its own per-layer times and its ratio to its own anchor at the deepest
    depth it shares with the unit read."""
    head = f"  - unit `{o['run_id']}` (machine `{o['machine']}`): " + (
        f"GPU busy per MoE layer {_per_layer(steps, lin)}" if steps else "one depth, no per-layer time")
    if o["ratio"] is None or o["read_ratio"] is None:
        why = "no depth in common with the unit read" if o["depth"] is None else "a unit without its anchor configuration"
        return head + f"; not compared ({why})."
    return (head + f"; at {_q('other_unit_moe_layers', o['depth'], 'd', o['key'])} MoE layers, the deepest depth both "
            f"units have, its slice's GPU busy time is {_q('other_unit_ratio', o['ratio'], '.3f', o['key'])} x its own "
            f"unit's anchor, against {_q('other_unit_ratio', o['read_ratio'], '.3f', o['key'] + ' | read')} x for unit "
            f"`{o['read_run_id']}`.")


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


_CARRY_SHARE = 0.05   # a kernel category counts in the carry's spread from 5% of the anchor's GPU busy time on


def carry_spread(store, backends: dict) -> dict | None:
    """How far "the machines differ by one factor in every kernel" fails, where the engines' deepest slices (those
    ``deepest_ratios`` reads) come from two machines: the anchor configuration measured on both, per kernel category
    holding at least 5% of its GPU busy time (table decode_breakdown, GPU idle left out), the category's time on the
    second engine's unit over the first's, each a mean over that unit's anchor starts. ``{"factors": {category:
    factor}, "spread_pct": 100 x (max - min) of the factors, "machines": (first, second)}``; None where the slices
    come from one machine or either unit's anchor has no breakdown."""
    prof = latest_ok(store.rows("profile_runs"))
    depth = common_depth(prof, backends)
    units = [unit_of(ps[0]) for ps in (_deepest_starts(prof, e, b, depth) for e, b in backends.items()) if ps]
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
    factors = {k: mean[1][k] / v for k, v in mean[0].items() if v >= _CARRY_SHARE * busy and mean[1].get(k)}
    if len(factors) < 2:
        return None
    return {"factors": factors, "spread_pct": 100 * (max(factors.values()) - min(factors.values())),
            "machines": (units[0][0], units[1][0])}


def _spread_words(sp: dict, gap: dict) -> str:
    """The carry's per-category spread and the margin it widens, every figure tagged."""
    from ..stated import q

    lo, hi = (min(sp["factors"], key=sp["factors"].get), max(sp["factors"], key=sp["factors"].get))
    return (f", widened by the carry's per-category spread of {q('carry_spread_pct', sp['spread_pct'], '.2f', of='engines')}% "
            f"to {q('reference_ratio_widened_pct', gap['widened_pct'], '.2f', of='engines')}%: the anchor configuration's "
            f"kernel categories of at least `{_CARRY_SHARE:.0%}` of its GPU busy time take from "
            + " to ".join(f"{q('carry_category_factor', sp['factors'][k], '.3f', of=k)} x ({k})" for k in (lo, hi))
            + f" on machine `{sp['machines'][1]}` what they take on `{sp['machines'][0]}`")


def _engines_line(prof: list[dict], deep: dict, depth: int | None, spread: dict | None = None, beside: bool = False) -> str:
    """The engines' slices at the deepest depth both have (``depth`` MoE layers), each as a ratio to its own machine's
    reference configuration, decided by the starts rule over those ratios, its margin widened by ``spread``
    (``carry_spread``) where they come from two machines; ``beside``: evidence after a comparison on one machine."""
    from ..engines import prose_name
    from ..stated import q

    ratio = deepest_ratios(prof, {e: ps[0]["backend"] for e, ps in deep.items()})
    if depth is None:
        return "- The engines are not compared: their INT4 ladders share no depth."
    if len(ratio) < len(deep):
        lack = sorted({p["machine"] for e, ps in deep.items() if e not in ratio for p in ps})
        return (f"- The engines are not compared: no anchor configuration measured on machine {', '.join(lack)}; a unit "
                "without its anchor row cannot be compared with other units.")
    (a, ra), (b, rb) = ratio.items()
    # the difference and the margin it was decided against (widened by the carry's spread), in % of the pair's mean
    gap = ratio_gap(ra, rb, spread["spread_pct"] if spread else 0.0)
    said = {"no difference": "no difference beyond the starts' spread", "undecided": "undecided (one start on a side)",
            "a lower": f"{prose_name(a)} lower", "b lower": f"{prose_name(b)} lower",
            "not decided": "not decided: within the carry's per-category spread"}[gap["verdict"]]
    said += (f" (they differ by {q('reference_ratio_diff_pct', gap['diff_pct'], '.2f', of='engines')}% of their mean, "
             f"against a margin of {q('reference_ratio_margin_pct', gap['margin_pct'], '.2f', of='engines')}%"
             + (_spread_words(spread, gap) if spread else "") + ")")
    return (("- Through the anchors as well, evidence beside the comparison on one machine above (that one is the engines' "
             "comparison: it assumes nothing about two machines): between the engines" if beside else "- Between the engines")
            + f", measured on {'one machine' if len({p['machine'] for ps in deep.values() for p in ps}) == 1 else 'two machines'}"
            f", only through each machine's anchor configuration, at the deepest depth both engines have "
            f"({q('reference_ratio_depth', depth, 'd', of='engines')} MoE layers): the slice's GPU busy time is "
            + " and ".join(f"{q('reference_ratio', sum(r) / len(r), '.3f', of=e)} x its machine's anchor for "
                           f"{prose_name(e)} ({q('reference_ratio_starts', len(r), 'd', of=e)} start{'s' * (len(r) != 1)})"
                           for e, r in ratio.items())
            + f": {said}, decided by `servebook.profile.starts.compare` (a difference below the starts rule's equivalence "
            "margin or the start-to-start spread, whichever is larger, is no difference"
            + ("; across two machines, one within that margin plus the carry's per-category spread is not decided"
               if spread else "") + "). That the two machines differ by one factor in every kernel is an assumption"
            + ("; the spread above measures how far it fails on the anchor" if spread else "")
            + ("; the comparison on one machine above needs no such assumption." if beside
               else "; both engines profiled in one unit settle it."))
