"""What chapter 02 writes of its decision matrix: the matrix and the tables derived from it, written so that an execution
that computes the same values again leaves the run's files as they were (``servebook html --refresh 02`` dirties no
recorded table).

    mode = record_matrix(store, rows)                                   # "keep" or "write"
    store.replace("selection_disagreements", rows, unchanged=mode)      # its derived tables, with the matrix

Two readers compare the matrix's ``recorded_at`` with another table's, and this module keeps what they read true:

- ``standing.standing_answers`` takes, of each question, the later of the matrix's answer and the ``selection`` rows'.
  The matrix is kept (rows and stamp as on disk) only where its values are the same and keeping changes no standing
  answer (``standing.matrix_may_keep``); else it is written with this execution's stamp, as it was at every execution
  before.
- ``figures._of_standing_matrix`` reads the rows of a derived table recorded no earlier than the matrix. The derived
  tables are written in the mode the matrix was: kept beside a kept matrix (written again where their own values
  changed, so later than it), written beside a written one, so they are never older than the matrix they derive from.
"""

from __future__ import annotations

import datetime as _dt

from ..standing import matrix_may_keep

__all__ = ["record_matrix"]


def _now() -> str:
    """The stamp a row written now carries (``RunStore``'s format: UTC, to the second)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_matrix(store, rows: list[dict]) -> str:
    """Replace table ``selection_matrix`` with ``rows`` (computed again whole), or keep it as it is where that changes
    nothing a reader reads; return how the tables derived from it are to be written: ``"keep"`` where the matrix was
    kept, ``"write"`` where it was written."""
    now = _now()
    new = [dict(r, recorded_at=now) for r in rows]  # the stamp a write gives them, and the one matrix_may_keep weighs
    stored = store.replace("selection_matrix", new, unchanged="keep" if matrix_may_keep(store, new) else "write")
    kept = bool(stored) and all(r.get("recorded_at") != now for r in stored)
    return "keep" if kept else "write"
