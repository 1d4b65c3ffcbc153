"""Which execution wrote a row, and which rows of a table stand across executions (``RunStore.rows``).

    with executing():                 # one execution of a chapter: every row it writes, in this process and the
        papermill.execute_notebook(...)  # processes it starts (the notebook's kernel), carries one ``execution_id``
    execution_id()                    # the id rows written now carry: the chapter's, else this process's (a CLI command)
    standing_rows("failures", rows)   # each distinct failure as its first execution recorded it, later ones folded in
    folded(row, again)                # a failure's row with one more recording by a later execution (folds.FoldIndex
                                      # finds the line, in place on disk)

Two stamps say when a row was written. ``execution`` numbers the invocations of ``servebook book`` on one run id (the
manifest's ``execution``; ``--again`` measures again with a new number): what the resume logic compares. ``execution_id``
names one execution of one chapter (a papermill run inside a book, ``servebook html --refresh``) or one CLI command:
what tells a chapter executed again from a failure that genuinely happened twice within one execution.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from contextlib import contextmanager
from typing import Iterator

__all__ = ["EXECUTION_ID_ENV", "FOLDED", "STAMPS", "execution_id", "executing", "folded", "last_recorded",
           "standing_rows", "values_of"]

# The id of the chapter execution in progress, set by ``executing`` in the book's process; the notebook's kernel and every
# process started from it inherit it (jupyter_client starts the kernel with a copy of ``os.environ``).
EXECUTION_ID_ENV = "SERVEBOOK_EXECUTION_ID"

# What a failure's standing row says of the later executions that recorded it again (``folded``): how many
# recordings, the last one's time and execution; ``recorded_again_at`` (the view only, never written): the known times of
# those recordings (each earlier row of the same failure, and every ``last_recorded_at``), so a page that quoted one of
# them still names this row.
FOLDED = ("recorded_again", "last_recorded_at", "last_execution", "last_execution_id", "recorded_again_at")

# The fields that say when and by which execution a row was written, not what it records.
STAMPS = ("recorded_at", "execution", "execution_id", *FOLDED)

_process_id: str | None = None


def _new_id() -> str:
    """A fresh execution id: UTC time to the second, then 8 random hex digits (two executions in one second differ)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(4).hex()


def execution_id() -> str:
    """The id the rows written now carry: the chapter execution's (``executing``, inherited by its kernel), else this
    process's own, made once (a CLI command such as ``servebook bench``, or a notebook run by hand: one execution)."""
    global _process_id
    mine = os.environ.get(EXECUTION_ID_ENV)
    if mine:
        return mine
    if _process_id is None:
        _process_id = _new_id()
    return _process_id


@contextmanager
def executing() -> Iterator[str]:
    """One execution of a chapter: a new id for every row written inside, by this process and by those it starts
    (the notebook's kernel, a server's client); the id before is restored after, however the block ends."""
    before = os.environ.get(EXECUTION_ID_ENV)
    mine = os.environ[EXECUTION_ID_ENV] = _new_id()
    try:
        yield mine
    finally:
        if before is None:
            os.environ.pop(EXECUTION_ID_ENV, None)
        else:
            os.environ[EXECUTION_ID_ENV] = before


def values_of(row) -> str:
    """What a row records, without its ``STAMPS``: two rows with the same values are the same record written twice."""
    if not isinstance(row, dict):
        return json.dumps(row, sort_keys=True)
    return json.dumps({k: v for k, v in row.items() if k not in STAMPS}, sort_keys=True)


# Tables chapter 01 records whole at each probe: what stands is the latest execution's rows. Tables with one row per
# configuration (its identity): what stands is each configuration's row of the latest execution that recorded it.
WHOLE_PER_EXECUTION = {"gpus", "versions", "topology", "p2p", "engines", "engine_helpers", "warnings"}
ONE_ROW_PER = {"backends": ("engine", "attention", "mode"), "backends_not_run": ("engine", "attention"),
               "skipped": ("setting",), "bench_inprocess": ("max_tokens", "threads", "device"), "bench_breakdown": ("label", "part"),
               "backends_preflight": ("engine", "attention"), "plan_commands": ("chapter", "purpose", "command"),
               "roofline": ("chapter", "case"), "bench_sweep_stops": ("label", "stopped_before"),
               "allreduce": ("setting", "path", "mode", "bytes", "backend", "device")}

# Tables whose rows say that something happened, not what was measured: the same row recorded again by a re-execution
# stands once. ``seed_comparison`` (a verdict chapter 02 appends where it changed): the latest execution's row.
# ``failures`` (``FOLD_AGAIN``): the row(s) of the execution that first recorded it, its stamps as recorded (the
# ``step | recorded_at`` a page quotes stays true), the later executions' recordings folded into it (``FOLDED``). A
# re-execution that hits the same failure (chapter 02 asking again a what-if that fails the same way) appends nothing:
# ``RunStore.append`` folds it into that failure's last row on disk (``folds``: the last line with its values, unless the
# execution recording it is the one that first recorded it). Within the execution that first
# recorded it a repeat is appended and stands (a step that failed twice failed twice).
EACH_ONCE = {"seed_comparison"}
FOLD_AGAIN = {"failures"}


def _number(r) -> int:
    return (r.get("execution") or 1) if isinstance(r, dict) else 1


def _id(r) -> str | None:
    return r.get("execution_id") if isinstance(r, dict) else None


def _each_once(rows: list) -> list:
    """Of the rows with the same values, those of the last execution that recorded them: every one of them where that
    execution is stamped (``execution_id``: its repeats stand), only the last where it is not (a row recorded before rows
    carried the id: a repeat cannot be told from a re-execution, so it stands once, as before the id)."""
    last: dict[str, tuple[int, str | None]] = {}
    for i, r in enumerate(rows):
        last[values_of(r)] = (i, _id(r))
    keep = []
    for i, r in enumerate(rows):
        at, ident = last[values_of(r)]
        if i == at or (ident is not None and _id(r) == ident):
            keep.append(r)
    return keep


def folded(into: dict, again: dict) -> dict:
    """Row ``into`` with one more recording (``again``, stamped) folded in: the count, the last one's time and execution."""
    return {**into, "recorded_again": int(into.get("recorded_again") or 0) + 1, "last_recorded_at": again.get("recorded_at"),
            "last_execution": again.get("execution"), "last_execution_id": again.get("execution_id")}


def last_recorded(row: dict) -> str:
    """When a row was last recorded: its ``last_recorded_at`` where a later execution recorded it again, else its own."""
    return str(row.get("last_recorded_at") or row.get("recorded_at") or "")


def _fold_each(rows: list) -> list:
    """The standing view of a ``FOLD_AGAIN`` table: of the rows with the same values, those of the execution that first
    recorded them (all of its repeats where it is stamped; only the first where it is not: a row from before the id),
    the later recordings folded into the last of them (``FOLDED``: counted, and the times known). In the order of the
    line each failure was last written to (appended, or folded into): the order the latest execution's rows had before
    re-hits were folded, so a page's "the last failure" names the same one."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(values_of(r) if isinstance(r, dict) else f"#{i}", []).append(i)
    out: dict[tuple, dict] = {}
    for idx in groups.values():
        first = _id(rows[idx[0]])
        stand = [i for i in idx if first is not None and _id(rows[i]) == first] or idx[:1]
        out.update({(idx[-1], k): rows[i] for k, i in enumerate(stand)})
        later = [rows[i] for i in idx if i not in stand]
        group = [rows[i] for i in idx]
        again = len(later) + sum(int(r.get("recorded_again") or 0) for r in group if isinstance(r, dict))
        if not again:
            continue
        times = {str(r["recorded_at"]) for r in later if r.get("recorded_at")}
        times |= {str(r["last_recorded_at"]) for r in group if r.get("last_recorded_at")}
        last = group[-1]  # a later recording is appended after, or folded into, the group's last row: it holds the latest
        by = "last_" if last.get("last_recorded_at") else ""
        out[(idx[-1], len(stand) - 1)] = {
            **rows[stand[-1]], "recorded_again": again, "last_recorded_at": last_recorded(last),
            "last_execution": last.get(by + "execution"), "last_execution_id": last.get(by + "execution_id"),
            "recorded_again_at": sorted(times)}
    return [out[i] for i in sorted(out)]


def _latest_per_identity(table: str, rows: list) -> list:
    ident = lambda r: tuple(json.dumps(r.get(k) if k != "mode" else r.get(k) or "default") for k in ONE_ROW_PER[table])  # noqa: E731
    latest: dict = {}
    for r in rows:
        latest[ident(r)] = max(latest.get(ident(r), 0), _number(r))
    return [r for r in rows if _number(r) == latest[ident(r)]]


def _latest_whole(rows: list) -> list:
    """The rows of the latest ``servebook book`` execution, and of those, the last chapter execution's where it is stamped
    (a probe recorded again by a CLI command or a refresh in the same book execution supersedes the earlier one)."""
    latest = max(_number(r) for r in rows)
    rows = [r for r in rows if _number(r) == latest]
    last = _id(rows[-1])
    return [r for r in rows if _id(r) == last] if last is not None else [r for r in rows if _id(r) is None]


def standing_rows(table: str, rows: list) -> list:
    """``rows`` as they stand across executions (``RunStore.rows``), each distinct row once; a row without ``execution``
    (recorded before rows carried it) is execution 1's. Of ``seed_comparison`` (``EACH_ONCE``) and ``failures``
    (``FOLD_AGAIN``) a row repeated within one stamped execution stands as often as it was recorded."""
    if not rows:
        return rows
    if table in EACH_ONCE:
        return _each_once(rows)
    if table in FOLD_AGAIN:
        return _fold_each(rows)
    if table in WHOLE_PER_EXECUTION:
        rows = _latest_whole(rows)
    elif table in ONE_ROW_PER:
        rows = _latest_per_identity(table, rows)
    else:
        return rows
    seen, out = set(), []
    for r in reversed(rows):  # the same row recorded twice (a re-run, or before rows carried their execution): its last, once
        key = values_of(r)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out[::-1]
