"""The run store: every measurement is data on disk before it is a plot.

    store = RunStore.open(root="runs", host="local", run_id=None)   # new run id
    store.append("decode", {"engine": "transformers", "tok_s": 41.2})
    store.table("decode")            # -> pandas.DataFrame, one row per measurement
    store.done("decode", attn="sdpa") # resume: was this measurement already recorded?
    row["derived_from"] = derived_from(summary_row, ("label",), method="10 warm-ups, 5 runs")   # a derived table's row
    standing(store.rows("model_extrapolation"), sources, identity=("case", "full_model"))      # its rows that stand now
    show_corrections(store, "backends", "backends_not_run")   # under a table: "corrected: ... by tools/corrections/X (why)"

Layout: ``<root>/<host>/<run-id>/manifest.json`` plus one ``<table>.jsonl`` per table.
Rows are appended and flushed one at a time, so a run killed midway keeps every
finished measurement, and opening the same run id again resumes it. Each appended row carries ``recorded_at``, the
book execution's number (``execution``) and the chapter execution's id (``execution_id``, ``servebook.executions``).
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import threading
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .errors import ResultsError
from .executions import FOLD_AGAIN, execution_id, folded, standing_rows, values_of
from .folds import ROOM, FoldIndex, write_at
from .secrets import mask_value

__all__ = ["RunStore", "new_run_id", "find_runs", "derived_from", "standing", "Correction", "corrections", "say_corrections",
           "show_corrections"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(name: str) -> str:
    name = _SAFE.sub("-", str(name)).strip("-.")
    return name or "unnamed"


def new_run_id(now: _dt.datetime | None = None) -> str:
    """A sortable run id: UTC time to the second."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN -> null keeps JSON strict
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return value.item()
        except Exception:  # noqa: BLE001
            return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


_APPEND_LOCK = threading.Lock()

class RunStore:
    """One run's directory: a manifest and tidy tables (JSON lines)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._execution_seen: tuple[int, dict] | None = None  # (manifest mtime, its "execution") read by ``execution``
        self._folds = FoldIndex()  # where each failure's line is: a re-hit is one write (folds)

    # -- opening ---------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike = "runs", host: str = "local", run_id: str | None = None) -> "RunStore":
        """Open (and create) ``root/host/run_id``; ``run_id=None`` starts a new run."""
        host_dir = "local-" + _safe(socket.gethostname()) if host in ("", "local") else _safe(host.split("?")[0])  # ssh://box?python=... -> ssh-box
        return cls._create(Path(root) / host_dir / _safe(run_id or new_run_id()), host=host or "local")

    @classmethod
    def at(cls, run_dir: str | os.PathLike) -> "RunStore":
        """The run at an existing or new directory path (what notebooks receive as ``run_dir``)."""
        return cls._create(Path(run_dir))

    @classmethod
    def _create(cls, path: Path, **fields: Any) -> "RunStore":
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsError(f"cannot create the run directory {path}: {exc.strerror}; pass another --runs or run_dir") from exc
        store = cls(path)
        if not store.manifest_path.exists():
            store.write_manifest({"run_id": path.name, **fields, "created": _now()})
        return store

    # -- manifest --------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def manifest(self) -> dict:
        try:
            return json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{self.manifest_path} is not valid JSON ({exc}); it was damaged, restore or delete it") from exc

    def write_manifest(self, fields: dict) -> dict:
        """Merge ``fields`` into the manifest (atomically: write then rename)."""
        data = self.manifest
        data.update(_jsonable(mask_value(fields)))
        tmp = self.manifest_path.with_suffix(".json.tmp")
        self._write(tmp, json.dumps(data, indent=2, sort_keys=True) + "\n", mode="w")
        os.replace(tmp, self.manifest_path)
        return data

    # -- tables ----------------------------------------------------------------
    def table_path(self, table: str) -> Path:
        return self.path / f"{_safe(table)}.jsonl"

    def append(self, table: str, row: dict, unchanged: str = "write") -> dict:
        """Append one measurement row (flushed and fsynced) and return it as stored.

        The row is one line written with one ``write`` call; when the write fails (disk full)
        the partial line is cut off again, and a torn last line left by a killed run is closed
        first, so a table never holds two rows fused into one line. ``unchanged="keep"``: where the table's last row
        holds the same values (``executions.STAMPS`` aside), nothing is appended and that row is returned (a verdict
        computed again by a re-execution, not a measurement: chapter 02's ``seed_comparison``). A failure a later
        execution records again is not appended: it is folded into that failure's line in place (one write, ``folds``),
        and that row is returned.
        """
        row = _jsonable(mask_value(dict(row)))
        if unchanged == "keep":
            held = self._read(table, withdrawn=False)
            if held and values_of(held[-1]) == values_of(row):
                return held[-1]
        elif unchanged != "write":
            raise ValueError(f"unchanged={unchanged!r}: 'write' (append always) or 'keep' (append only new values)")
        row.setdefault("recorded_at", _now())
        row.setdefault("execution", self.execution.get("id") or 1)  # outside a book (servebook bench, a test): the first
        row.setdefault("execution_id", execution_id())  # this chapter execution (or CLI command): servebook.executions
        with _APPEND_LOCK:  # parallel sweeps (one engine per GPU) append from threads
            held = self._fold(table, row) if table in FOLD_AGAIN else None
            if held is None:
                room = ROOM if table in FOLD_AGAIN else ""  # a failure's line: room for the fields a fold adds (folds)
                self._append_line(self.table_path(table), json.dumps(row, sort_keys=True) + room + "\n")
        return held or row

    def _fold(self, table: str, row: dict) -> dict | None:
        """``row`` recorded again by a later execution, folded into the line on disk it repeats, in place (one write of
        that line: ``folds``); None where it is to be appended. A line appended before lines had room: the table once."""
        path = self.table_path(table)
        hit = self._folds.find(path, row, row["execution_id"])
        if hit is None:
            return None
        offset, length, old = hit
        line = json.dumps(held := folded(old, row), sort_keys=True).encode()
        if len(line) < length:
            try:
                write_at(path, offset, line.ljust(length - 1) + b"\n")
            except OSError as exc:
                raise self._error(path, exc) from exc
        else:
            data = path.read_bytes()
            self._write_whole(path, (data[:offset] + line + ROOM.encode() + b"\n" + data[offset + length:]).decode())
            self._folds.forget(path)
        return held

    def replace(self, table: str, rows: Iterable[dict], unchanged: str = "write") -> list[dict]:
        """Replace a derived table whole (it is computed again from the rows it derives from, never appended to) and
        return its rows as stored. The new table is written beside the old one and then moved over it, so a failure
        while writing leaves the old table as it was.

        ``unchanged="keep"``: where the rows equal the table's rows on disk in their values (``executions.STAMPS`` aside:
        when and by which execution), nothing is written and the rows on disk are returned, with the time they were
        first recorded; computed again with the same values, a table is not rewritten (a book executed again leaves its
        run's files as they were). Where the values differ, the table is replaced as with ``"write"``; the rows it held
        are then the file's history (git), as before. Only for a table whose readers compare no ``recorded_at`` with
        another table's."""
        stamp = _now()
        stored = [_jsonable(mask_value(dict(r))) for r in rows]
        if unchanged == "keep":
            held = self._read(table, withdrawn=True)
            if self.table_path(table).exists() and [values_of(r) for r in held] == [values_of(r) for r in stored]:
                return held
        elif unchanged != "write":
            raise ValueError(f"unchanged={unchanged!r}: 'write' (replace always) or 'keep' (write only new values)")
        for r in stored:
            r.setdefault("recorded_at", stamp)
        with _APPEND_LOCK:
            self._write_whole(self.table_path(table), "".join(json.dumps(r, sort_keys=True) + "\n" for r in stored))
        return stored

    def _write_whole(self, path: Path, text: str) -> None:
        """Write a table whole beside it, then move it over it (a failure while writing leaves it as it was)."""
        tmp = path.with_name(f".{path.name}.tmp")
        self._write(tmp, text, mode="w")
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise self._error(path, exc) from exc

    @property
    def execution(self) -> dict:
        """This run's execution in progress, as ``servebook book`` recorded it in the manifest: ``{"id": n, "again": bool}``
        (the n-th invocation on this run id; ``again``: it measures again what earlier ones recorded); {} outside a book."""
        try:
            stamp = self.manifest_path.stat().st_mtime_ns
        except OSError:
            return {}
        if self._execution_seen is None or self._execution_seen[0] != stamp:
            try:
                self._execution_seen = (stamp, dict(self.manifest.get("execution") or {}))
            except ResultsError:
                self._execution_seen = (stamp, {})
        return self._execution_seen[1]

    def rows(self, table: str, withdrawn: bool = False, executions: str = "standing") -> list[dict]:
        """The rows of a table; a torn last line (a run killed mid-write) is skipped, and so are rows a correction
        withdrew (``withdrawn``: not this run's; tools/corrections/mark_rows.py) unless ``withdrawn=True``.

        A run id executed again (``servebook book --again``) keeps every execution's rows, each with its ``execution``;
        ``executions="standing"`` gives what stands now: of a table recorded whole per execution (chapter 01's facts) the
        latest execution's rows, of a table with one row per configuration (``backends``) the latest execution's row of
        each, of ``seed_comparison`` each distinct row once (the latest chapter execution's, ``execution_id``), of
        ``failures`` each distinct failure as the execution that first recorded it wrote it, later recordings folded in
        (a repeat within one stamped execution stands; a row recorded before rows carried the id stands once), and never
        the same row twice (``executions="all"``: every row as on disk); see ``servebook.executions``."""
        out = self._read(table, withdrawn)
        return standing_rows(table, out) if executions == "standing" else out

    def _read(self, table: str, withdrawn: bool) -> list[dict]:
        path = self.table_path(table)
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if withdrawn or not (isinstance(row, dict) and row.get("withdrawn")):
                out.append(row)
        return out

    def damaged(self, table: str | None = None) -> dict[str, list[int]]:
        """Lines (1-based) of this run's tables that are not a whole row: torn by a killed run or edited by hand. ``rows``
        leaves them out, so what they held is missing from every page; ``{table: [line, ...]}``, only tables with one.

            store.damaged()                    # {'bench_summary': [10]}
        """
        names = [table] if table else self.tables()
        out: dict[str, list[int]] = {}
        for name in names:
            path = self.table_path(name)
            if not path.exists():
                continue
            bad = []
            with open(path, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        row = None
                    if not isinstance(row, dict):
                        bad.append(n)
            if bad:
                out[name] = bad
        return out

    def say_damaged(self) -> str | None:
        """One line naming this run's damaged rows and what that means for a reader, or None when every line is whole."""
        bad = self.damaged()
        if not bad:
            return None
        where = "; ".join(f"{t}.jsonl line{'s' if len(n) > 1 else ''} {', '.join(map(str, n[:5]))}{' ...' if len(n) > 5 else ''}"
                          for t, n in sorted(bad.items()))
        return (f"{self.path}: {sum(map(len, bad.values()))} row(s) cannot be read ({where}): torn by a killed run or "
                f"edited; they are left out, so a figure or method read from those tables may be an older row's. Restore "
                f"the lines from a copy (or delete them) to silence this")

    def table(self, table: str):
        import pandas as pd

        return pd.DataFrame(self.rows(table))

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.jsonl"))

    def done(self, table: str, **key: Any) -> bool:
        """True when a row of ``table`` matches every ``key=value`` (resume support). In an execution that measures again
        (``--again``) only its own rows count (a failure it recorded again, folded into an earlier row, too): what earlier
        executions recorded is measured again."""
        return bool(self.find(table, **key))

    def find(self, table: str, **key: Any) -> list[dict]:
        """The rows of ``table`` matching every ``key=value`` that count as recorded for resuming (see ``done``)."""
        key = _jsonable(key)
        rows = self.rows(table, executions="all")
        ex = self.execution
        if ex.get("again") and ex.get("id") is not None:
            rows = [r for r in rows if (r.get("last_execution") or r.get("execution") or 1) >= ex["id"]]  # a failure folded
        return [r for r in rows if all(r.get(k) == v for k, v in key.items())]

    def record_failure(self, step: str, error: BaseException | str, **context: Any) -> dict:
        """A failed measurement is a finding: store what failed and why."""
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return self.append("failures", {"step": step, "error": message, **context})

    def write_text(self, name: str, text: str) -> Path:
        """A log or report file inside the run (secrets masked)."""
        path = self.path / _safe(name)
        self._write(path, mask_value(text), mode="w")
        return path

    # -- internals -------------------------------------------------------------
    def _append_line(self, path: Path, line: str) -> None:
        data = line.encode("utf-8")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._error(path, exc) from exc
        size = None
        try:
            size = os.fstat(fd).st_size
            if size and _last_byte(path, size) != b"\n":
                data = b"\n" + data  # a run killed mid-write left a torn line: close it, it stays unreadable alone
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError as exc:
            if size is not None:
                try:  # cut the partial line off: the rows written before stay whole
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            raise self._error(path, exc) from exc
        finally:
            os.close(fd)

    def _write(self, path: Path, text: str, mode: str) -> None:
        try:
            with open(path, mode, encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise self._error(path, exc) from exc

    def _error(self, path: Path, exc: OSError) -> ResultsError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            why = {errno.ENOSPC: "the disk holding it is full", errno.EDQUOT: "the disk quota is used up",
                   errno.EFBIG: "a file size limit (ulimit -f) was reached"}[exc.errno]
            return ResultsError(
                f"cannot write {path}: {why}; results written before are intact; "
                "free space (or raise the limit) and resume with the same --run-id, or pass another --runs / run_dir"
            )
        return ResultsError(f"cannot write {path}: {exc.strerror or exc}; check the run directory's permissions and space")

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1)


def derived_from(source: dict, key: Iterable[str] = ("label",), method: Any = None) -> dict:
    """What a row of a derived table records about the measurement it derives from: the source row's ``key`` fields, the
    ``method`` it was taken with and when it was recorded (``recorded_at``). A measurement taken again (another time,
    often another method) is another source, so the derived row is written again for it (its ``done`` key includes
    this) and the row of the earlier one no longer stands (:func:`standing`)."""
    return {**{k: _jsonable(source.get(k)) for k in key}, "method": _jsonable(method), "recorded_at": source.get("recorded_at")}


def standing(rows: Iterable[dict], sources: Iterable[dict], identity: Iterable[str] = (),
             legacy: Any = None) -> list[dict]:
    """The rows of a derived table that stand now: a row whose ``derived_from`` is one of ``sources`` (the
    :func:`derived_from` of each measurement that stands now); a row written before derived rows carried the field stands
    where ``legacy(row)`` says so (no ``legacy``: it stands). Of standing rows with the same ``identity`` fields, the last."""
    sources = [_jsonable(s) for s in sources]
    kept = []
    for r in rows:
        src = r.get("derived_from")
        if (src in sources) if src is not None else (legacy is None or legacy(r)):
            kept.append(r)
    identity = tuple(identity)
    if not identity:
        return kept
    last = {tuple(json.dumps(r.get(k), sort_keys=True) for k in identity): i for i, r in enumerate(kept)}
    return [r for i, r in enumerate(kept) if last[tuple(json.dumps(r.get(k), sort_keys=True) for k in identity)] == i]


def find_runs(root: str | os.PathLike = "runs") -> Iterable[RunStore]:
    """Every run under ``root`` (``root/<host>/<run-id>/manifest.json``), oldest first."""
    for manifest in sorted(Path(root).glob("*/*/manifest.json")):
        yield RunStore(manifest.parent)


# -- corrections made to recorded rows after they were recorded ---------------------------------------------------------
@dataclass(frozen=True)
class Correction:
    """Rows of one table corrected after they were recorded, the same way: ``what`` was done, ``by`` what (a tool in
    ``tools/corrections/``, or by hand where no tool existed then: the run's RECORDED.md says so), and ``reason``."""

    table: str
    rows: int
    what: str
    by: str
    reason: str

    def __str__(self) -> str:
        n = f"{self.rows} row{'s' if self.rows != 1 else ''}"
        return f"corrected: {n} of `{self.table}`, {self.what}, {self.by} ({self.reason})"


_TOOL = re.compile(r"\s*\(?(tools/corrections/[\w./-]+\.py)\)?")
_BY_HAND = "by hand before a tool in tools/corrections/ did it (the run's RECORDED.md records it)"


def _correction_of(table: str, row: dict) -> list[tuple[str, str, str]]:
    """(what, by, reason) for each correction one row carries."""
    out = []
    c = row.get("corrected")
    if isinstance(c, dict):  # what the tools in tools/corrections/ write
        fields = ", ".join(f"`{f}`" for f in c.get("fields") or [])
        if c.get("fields") == ["withdrawn"]:
            fields = "withdrawn (not this run's: left out of its findings)"
        elif fields:
            fields += " set"
        out.append((str(c.get("what") or fields), f"by {c.get('by')}", str(c.get("reason") or "no reason given")))
    itl = row.get("itl_corrected")
    if itl:
        tool = _TOOL.search(str(itl))
        what = "ITL not recomputable, set to none" if str(itl).startswith("not recomputable") else "ITL recomputed"
        out.append((what, f"by {tool.group(1)}" if tool else _BY_HAND, _TOOL.sub("", str(itl)).strip(" ;,")))
    moved = row.get("moved_from_run")
    if moved and not isinstance(c, dict):
        run, _, why = str(moved).partition(" (")
        out.append((f"moved from run {run}", _BY_HAND, why.rstrip(")") or "recorded in another run's folder"))
    fault = row.get("harness_fault")
    if fault and not isinstance(c, dict):
        out.append(("marked a fault of servebook's own harness, not the engine's verdict", _BY_HAND,
                    str(fault) if isinstance(fault, str) and fault.lower() != "true" else "servebook's check itself failed"))
    if table == "failures" and re.search(r"\breconstructed\b", str(row.get("error") or ""), flags=re.I) and not isinstance(c, dict):
        m = re.search(r"Reconstructed[^.;]*(?:\([^)]*\))?", str(row.get("error")))
        out.append(("reconstructed afterwards", _BY_HAND, m.group(0) if m else "the row was lost and written again"))
    return out


def corrections(store: "RunStore", *tables: str) -> list[Correction]:
    """The corrections made to rows of ``tables`` after they were recorded, grouped by table, what, by and reason."""
    groups: dict[tuple, int] = {}
    for table in tables:
        for r in store.rows(table, withdrawn=True):
            for what, by, reason in _correction_of(table, r):
                groups[(table, what, by, reason)] = groups.get((table, what, by, reason), 0) + 1
    return [Correction(t, n, w, b, r) for (t, w, b, r), n in groups.items()]


def say_corrections(store: "RunStore", *tables: str) -> str:
    """Markdown lines for the page under a table built from ``tables``: one "corrected: ..." line per kind of correction
    its rows carry; "" when none."""
    return "\n".join(f"- {c}" for c in corrections(store, *tables))


def show_corrections(store: "RunStore", *tables: str) -> None:
    """Display :func:`say_corrections` in a notebook (nothing when the rows carry no correction)."""
    text = say_corrections(store, *tables)
    if text:
        from IPython.display import Markdown, display

        display(Markdown(text))
