"""The units of one reference recording (issue #39): each measured on one lent machine, merged into one run, compared
only through their ratio to the reference configuration every unit measures again (``anchor``; chapter 06's account of
them: ``units_page``).

    merge_unit(RunStore.at("data/runs/h200x1-ref"),
               RunStore.at("runs/local-x/h200x1-ref-vllm"))   # servebook profile merge-unit

A unit's rows keep their own ``machine`` and ``run_id`` (a unit recorded under a run id the run already holds for
another unit is merged under that id and its first day, ``_unit_id``). Where a unit's label is already in the run
(every unit profiles the reference configuration under the same label; a later unit of an engine profiles its ladder
under the earlier unit's labels), its rows are merged under the label with `` (<unit id>)`` appended and their trace
files copied under that name: the last row of a label is the one a reader takes, so a unit's rows must never replace
another unit's (they would silently move an engine's depth ladder). Merging a unit twice adds nothing.
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

from ..errors import ServebookError
from .kernels import trace_slug

__all__ = ["LADDER_PLANS", "UNIT_TABLES", "merge_unit", "labels_on_two_machines"]

# the committed plan that records each engine's INT4 depth ladder on the H200 (tools/gpu-stage/, issue #39)
LADDER_PLANS = {"sglang": "tools/gpu-stage/ref-plan.json", "vllm": "tools/gpu-stage/ref-plan-vllm.json"}
# the recorded tables a unit brings; the derived ones (slice_linearity, layer_kernels, step_kernels, prediction_check)
# are derived again from the merged run (servebook profile linearity / predict)
UNIT_TABLES = ("profile_runs", "decode_breakdown", "memory_bandwidth")


def labels_on_two_machines(profile_rows) -> dict:
    """``{label: machines}`` of the labels whose ok rows come from more than one machine (a naive merge of two
    units)."""
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
        raise ServebookError(f"unit {Path(unit.path).name}: its profiles name {len(ids)} runs "
                             f"({sorted(map(str, ids))}): "
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
