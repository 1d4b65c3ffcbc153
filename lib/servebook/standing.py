"""The what-if answers of a run that stand: one answer per question, however often chapter 02 asked it.

    standing_answers(store)        # the rows of table `selection` that give each question's latest answer

A question is an engine version, a GPU and a model card (``engine``, ``version``, ``gpu``, ``model``). Chapter 02 asks
some of them again at each execution, and its matrix (``selection_matrix``, written whole each time) asks the same
engine code about the same cells. An answer recorded once can be superseded: vLLM 0.33.0 answered "static only" while
its cached environment lacked vLLM's requirements, and dynamically again once it was rebuilt. Every chapter reads the
answers through :func:`standing_answers`, so no page states a superseded answer beside the one that replaced it.
"""

from __future__ import annotations

__all__ = ["standing_answers"]


def _question(row: dict) -> tuple:
    """(engine, version, gpu, model) of a ``selection`` or ``selection_matrix`` row (the matrix names the engine
    ``vllm==0.33.0``)."""
    return (str(row.get("engine") or "").split("==")[0], str(row.get("version")), row.get("gpu"), row.get("model"))


def _answer(row: dict) -> tuple:
    return row.get("method"), row.get("attention_backend")


def standing_answers(store) -> list[dict]:
    """The rows of table ``selection`` that stand, in the order recorded.

    Of each question, the latest answer stands: the latest row of ``selection`` or of the standing matrix
    (``selection_matrix``; a cell that failed, method ``error``, answers nothing), by ``recorded_at``. A ``selection``
    row stands when it gives that answer (method and attention backend); of such rows, the last per case (``this-host``,
    ``seed``, ...) is kept. A row a later answer contradicts is left out, and so is a question whose latest answer came
    from the matrix alone and no ``selection`` row gives."""
    rows = store.rows("selection")
    latest: dict[tuple, tuple[str, int, tuple]] = {}
    sources = [(r, 1) for r in rows] + [(r, 0) for r in store.rows("selection_matrix") if r.get("method") in ("dynamic", "static")]
    for i, (r, from_selection) in enumerate(sources):
        when = (str(r.get("recorded_at") or ""), from_selection, i)  # the same second: the matrix is asked after the cases
        k = _question(r)
        if k not in latest or when >= latest[k][:3]:
            latest[k] = (*when, _answer(r))
    kept = [r for r in rows if _answer(r) == latest[_question(r)][3]]
    last = {(r.get("case"), _question(r)): i for i, r in enumerate(kept)}
    return [r for i, r in enumerate(kept) if last[(r.get("case"), _question(r))] == i]
