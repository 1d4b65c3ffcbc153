"""Which execution wrote a row, and which rows of a table stand across executions (``RunStore.rows``).

    with executing():                 # one execution of a chapter: every row it writes, in this process and the
        papermill.execute_notebook(...)  # processes it starts (the notebook's kernel), carries one ``execution_id``
    execution_id()                    # the id rows written now carry: the chapter's, else this process's (a CLI command)
    standing_rows("failures", rows)   # each distinct failure once across executions; repeats within one stand

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

__all__ = ["EXECUTION_ID_ENV", "STAMPS", "execution_id", "executing", "standing_rows", "values_of"]

# The id of the chapter execution in progress, set by ``executing`` in the book's process; the notebook's kernel and every
# process started from it inherit it (jupyter_client starts the kernel with a copy of ``os.environ``).
EXECUTION_ID_ENV = "SERVEBOOK_EXECUTION_ID"

# The fields that say when and by which execution a row was written, not what it records.
STAMPS = ("recorded_at", "execution", "execution_id")

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
# (chapter 02 asking again a what-if that fails the same way) stands once, the latest execution's. Within one execution
# a repeat stands (a step that failed twice failed twice). Each recording stays in the file (``executions="all"``: what
# ``measured.nothing_measured`` reads to name a cause a chapter hit again).
EACH_ONCE = {"failures", "seed_comparison"}


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
    (recorded before rows carried it) is execution 1's. Of table ``failures`` and ``seed_comparison`` (``EACH_ONCE``) a
    row repeated within one stamped execution stands as often as it was recorded."""
    if not rows:
        return rows
    if table in EACH_ONCE:
        return _each_once(rows)
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
