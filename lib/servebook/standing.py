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


def _standing(rows: list[dict], matrix: list[dict]) -> list[dict]:
    """:func:`standing_answers` of the ``selection`` rows ``rows`` beside the matrix rows ``matrix``."""
    latest: dict[tuple, tuple[str, int, tuple]] = {}
    sources = [(r, 1) for r in rows] + [(r, 0) for r in matrix if r.get("method") in ("dynamic", "static")]
    for i, (r, from_selection) in enumerate(sources):
        when = (str(r.get("recorded_at") or ""), from_selection, i)  # the same second: the case's row stands
        k = _question(r)
        if k not in latest or when >= latest[k][:3]:
            latest[k] = (*when, _answer(r))
    kept = [r for r in rows if _answer(r) == latest[_question(r)][3]]
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
    return _standing(store.rows("selection"), store.rows("selection_matrix"))


def matrix_may_keep(store, rows: list[dict]) -> bool:
    """Whether chapter 02's matrix computed again as ``rows`` (stamped with this execution's ``recorded_at``) may
    leave the rows on disk as they are, their older stamp with them (``RunStore.replace(..., unchanged="keep")``): the
    answers that stand are the same with either.

    They differ only where a ``selection`` row recorded since the matrix on disk (by this execution or one that
    computed no matrix) answers a question the matrix answers otherwise: written now, the matrix is the later answer
    and supersedes it (as it did when the matrix was written at every execution); kept, it would not. Then the
    matrix is written again."""
    sel = store.rows("selection")
    return _standing(sel, store.rows("selection_matrix")) == _standing(sel, rows)
