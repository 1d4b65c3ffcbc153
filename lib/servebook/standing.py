"""The what-if answers of a run that stand: one answer per question, however often chapter 02 asked it.

    standing_answers(store)        # the rows of table `selection` that give each question's latest answer
    matrix_may_keep(store, rows)   # chapter 02's matrix computed again: may the rows on disk (and their stamp) stay

A question is an engine version, a GPU and a model card (``engine``, ``version``, ``gpu``, ``model``). Chapter 02 asks
some of them again at each execution, and its matrix (``selection_matrix``, computed whole each time) asks the same
engine code about the same cells. An answer recorded once can be superseded: vLLM 0.33.0 answered "static only" while
its cached environment lacked vLLM's requirements, and dynamically again once it was rebuilt. Every chapter reads the
answers through :func:`standing_answers`, so no page states a superseded answer beside the one that replaced it.
"""

from __future__ import annotations

__all__ = ["matrix_may_keep", "standing_answers"]


def _question(row: dict) -> tuple:
    """(engine, version, gpu, model) of a ``selection`` or ``selection_matrix`` row (the matrix names the engine
    ``vllm==0.33.0``)."""
    return (str(row.get("engine") or "").split("==")[0], str(row.get("version")), row.get("gpu"), row.get("model"))


def _answer(row: dict) -> tuple:
    return row.get("method"), row.get("attention_backend")


def _of_selection(rows: list[dict]) -> dict[tuple, tuple]:
    """Of each question the ``selection`` rows ``rows`` answer, the latest row's (when, answer); ``when`` orders it
    against a matrix row (``_with_matrix``): by ``recorded_at``, the same second going to the case's row, then the later."""
    latest: dict[tuple, tuple] = {}
    for i, r in enumerate(rows):
        when = (str(r.get("recorded_at") or ""), 1, i)
        if _question(r) not in latest or when >= latest[_question(r)][0]:
            latest[_question(r)] = (when, _answer(r))
    return latest


def _with_matrix(latest: dict[tuple, tuple], after: int, matrix: list[dict]) -> dict[tuple, tuple]:
    """``latest`` (``_of_selection`` of ``after`` rows) with the matrix rows ``matrix`` weighed in (a cell that failed,
    method ``error``, answers nothing)."""
    out = dict(latest)
    for j, r in enumerate(matrix):
        when = (str(r.get("recorded_at") or ""), 0, after + j)
        if r.get("method") in ("dynamic", "static") and (_question(r) not in out or when >= out[_question(r)][0]):
            out[_question(r)] = (when, _answer(r))
    return out


def _standing(rows: list[dict], latest: dict[tuple, tuple]) -> list[dict]:
    """:func:`standing_answers` of the ``selection`` rows ``rows`` given each question's latest answer ``latest``."""
    kept = [r for r in rows if _answer(r) == latest[_question(r)][1]]
    last = {(r.get("case"), _question(r)): i for i, r in enumerate(kept)}
    return [r for i, r in enumerate(kept) if last[(r.get("case"), _question(r))] == i]


def standing_answers(store) -> list[dict]:
    """The rows of table ``selection`` that stand, in the order recorded.

    Of each question, the latest answer stands: the latest row of ``selection`` or of the standing matrix
    (``selection_matrix``; a cell that failed, method ``error``, answers nothing), by ``recorded_at``. A
    ``selection`` row stands when it gives that answer (method and attention backend); of such rows, the last per
    case (``this-host``, ``seed``, ...) is kept. A row a later answer contradicts is left out, and so is a question
    whose latest answer came from the matrix alone and no ``selection`` row gives.

    The matrix's ``recorded_at`` may be older than the execution that last computed it: chapter 02 keeps the rows on
    disk when it computes the same values again, unless keeping them would change what this function returns
    (``matrix_may_keep``); then it writes them with that execution's stamp. So every ``selection`` row recorded
    after the kept stamp agrees with the matrix or was recorded after the last execution that computed one, and the
    comparison gives the answers it gave when the matrix was written at every execution."""
    rows = store.rows("selection")
    return _standing(rows, _with_matrix(_of_selection(rows), len(rows), store.rows("selection_matrix")))


def matrix_may_keep(store, rows: list[dict]) -> bool:
    """Whether chapter 02's matrix computed again as ``rows`` (stamped with this execution's ``recorded_at``) may
    leave the rows on disk as they are, their older stamp with them (``RunStore.replace(..., unchanged="keep")``): the
    answers that stand are the same with either.

    They differ only where a ``selection`` row recorded since the matrix on disk (by this execution or one that
    computed no matrix) answers a question the matrix answers otherwise: written now, the matrix is the later answer
    and supersedes it (as it did when the matrix was written at every execution); kept, it would not. Then the
    matrix is written again. The ``selection`` rows are read and weighed once (``_of_selection``), each matrix beside
    them; the standing lists are not built: they differ exactly where a question's latest answer moved and a
    ``selection`` row gives one of the two answers."""
    sel = store.rows("selection")
    base = _of_selection(sel)  # the selection rows weighed once, against the matrix on disk and the one computed now
    kept, written = _with_matrix(base, len(sel), store.rows("selection_matrix")), _with_matrix(base, len(sel), rows)
    moved = {q: {kept[q][1], written[q][1]} for q in base if kept[q][1] != written[q][1]}
    return not any(_answer(r) in moved.get(_question(r), ()) for r in sel)  # no selection row kept by one, not the other
