"""A failure recorded again by a later execution, folded into its row on disk in one bounded write (``RunStore.append``).

    index = FoldIndex()
    hit = index.find(path, row, execution_id())   # (offset, length, row on disk) of the line to fold into, or None
    line = json.dumps(row, sort_keys=True) + ROOM  # a new row's line, with room for the fields a fold adds

The index holds, per distinct failure (``executions.values_of``), the execution that first recorded it and where the
last line of it is; it reads only the lines appended since it last looked (a table rewritten whole, a new inode, is read
again). A fold rewrites that one line in place at its length: a row is appended with room (``ROOM``, trailing spaces,
which JSON ignores) for the fields a fold adds (``executions.FOLDED``), so a re-hit writes one line whatever the table's
size. A row appended before rows had that room (the committed runs) is folded by rewriting its table once; its line
then has room. Readers are unchanged: the line holds the row as ``executions.folded`` makes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .executions import values_of

__all__ = ["ROOM", "FoldIndex", "write_at"]

# The fields a fold adds, at their widest (an execution id of ``executions._new_id``, a stamp of ``results._now``, counts
# under ten million): appended after a FOLD_AGAIN row, as spaces, so that folding it never moves another line.
ROOM = " " * len(', "last_execution": 9999999, "last_execution_id": "20261205T042200Z-0123abcd", '
                 '"last_recorded_at": "2026-12-05T04:22:00+00:00", "recorded_again": 9999999')


def _row(raw: bytes):
    try:
        row = json.loads(raw) if raw.strip() else None
    except (ValueError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) else None


class FoldIndex:
    """Per table file: {values: {"first": execution_id of its first row, "last": (offset, length) of its last line}}."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[int, int, dict]] = {}  # path -> (inode, bytes read, groups)

    def forget(self, path: Path) -> None:
        self._seen.pop(Path(path), None)

    def _groups(self, path: Path) -> dict:
        """The groups of ``path``, the lines appended since the last look read (all of it for a new or rewritten file)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.forget(path)
            return {}
        inode, read, groups = self._seen.get(path, (st.st_ino, 0, {}))
        if inode != st.st_ino or st.st_size < read:
            read, groups = 0, {}
        with open(path, "rb") as fh:
            fh.seek(read)
            data = fh.read(st.st_size - read)
        whole = data[:data.rfind(b"\n") + 1]  # a line still being written is read next time
        at = read
        for line in whole.splitlines(keepends=True):
            row = _row(line)
            if row is not None and not row.get("withdrawn"):
                groups.setdefault(values_of(row), {"first": row.get("execution_id")})["last"] = (at, len(line))
            at += len(line)
        self._seen[path] = (st.st_ino, read + len(whole), groups)
        return groups

    def find(self, path: Path, row: dict, current: str) -> tuple[int, int, dict] | None:
        """Where execution ``current`` recording ``row`` again is folded (the rule of ``executions.FOLD_AGAIN``): the offset and
        length of the last line with ``row``'s values and the row it holds; None where none has them or ``current``
        first recorded them (a repeat within it stands: append). A line that no longer holds what the index says
        (another process rewrote the table) is looked up again from a fresh read."""
        path = Path(path)
        for fresh in (False, True):
            if fresh:
                self.forget(path)
            group = self._groups(path).get(values_of(row))
            if group is None or group["first"] == current:
                return None
            offset, length = group["last"]
            with open(path, "rb") as fh:
                fh.seek(offset)
                raw = fh.read(length)
            old = _row(raw)
            if old is not None and raw.endswith(b"\n") and values_of(old) == values_of(row):
                return offset, length, old
        return None


def write_at(path: Path, offset: int, data: bytes) -> None:
    """``data`` written over the bytes at ``offset`` of ``path`` (a folded line, at its length), flushed to disk."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
