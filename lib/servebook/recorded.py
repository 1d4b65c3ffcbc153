"""What a chapter's recorded execution used: the parameters ``servebook html --refresh`` reuses (``book.refresh_chapter``),
the page's "run this yourself" measure command gives and its refresh command leaves out (``pages.commands``).

    params, source = recorded_parameters(store, chapter, notebook_parameters(chapter.source))
    ran_with(declared, values, extra)   # what a chapter's execution was given: its ``chapters`` row records it
"""

from __future__ import annotations

import json
from pathlib import Path

from .chapters import Chapter, partial_notebook
from .results import RunStore

__all__ = ["MEASURING", "SET_BY_REFRESH", "ran_with", "recorded_parameters"]

# The chapters that measure: executed again, they measure nothing (measure=False) and re-read the tables.
MEASURING = ("01", "03", "04", "05")

# What a refresh sets itself, never reused from a recorded execution: where the run is, and that nothing is measured.
SET_BY_REFRESH = ("run_dir", "measure")


def ran_with(declared: dict, values: dict, extra: dict) -> dict:
    """The parameters a chapter's execution was given (its ``chapters`` row records them: a refresh reuses them)."""
    return {k: v for k, v in {**values, **extra}.items() if k in declared and k not in SET_BY_REFRESH}


def _invocation_before(manifest: dict, at: str) -> dict | None:
    """The parameters of the ``servebook book`` invocation that ran a chapter finished at ``at``: the run's first
    (``parameters``, from ``started``) or a resumption's, the last one started before ``at``."""
    starts = [(str(manifest.get("started") or ""), manifest.get("parameters"))]
    starts += [(str(r.get("at") or ""), r.get("parameters")) for r in manifest.get("resumptions") or []]
    before = [p for t, p in starts if t and t <= at and isinstance(p, dict)]
    return before[-1] if before else None


def _notebook_parameters(store: RunStore, stem: str) -> dict:
    """The parameters papermill recorded in the chapter's executed notebook (its last execution), {} without one."""
    path = store.path / "notebooks" / f"{stem}.ipynb"
    path = path if path.exists() else partial_notebook(store.path / "notebooks", stem)
    try:
        return dict(((json.loads(path.read_text()).get("metadata") or {}).get("papermill") or {}).get("parameters") or {})
    except (OSError, ValueError):
        return {}


def _here(store: RunStore, params: dict) -> dict:
    """``params`` with a model path recorded on the measuring host that does not exist here read from the copy the run
    holds (``models/<name>``, where the staging put it): the same model, where this machine has it."""
    model = params.get("model")
    if isinstance(model, str) and "/" in model and not Path(model).exists() and (store.path / "models" / Path(model).name).is_dir():
        return {**params, "model": str(store.path / "models" / Path(model).name)}
    return params


def recorded_parameters(store: RunStore, chapter: Chapter, declared: dict) -> tuple[dict, str]:
    """The parameters ``chapter``'s recorded execution used, and where they were read (for the line that says so):
    the executed notebook's (its last execution), and over them, for a chapter that measures (01, 03-05), those of the
    execution that measured it: its ``chapters`` row's ``parameters``, or for a row from before rows recorded them, the
    ``servebook book`` invocation that ran it (the manifest's ``parameters`` or ``resumptions``). A model path of the
    measuring host reads the run's copy (``models/<name>``). What a refresh sets itself (run_dir, measure) is left out."""
    found = _notebook_parameters(store, chapter.stem)
    source = "its last execution (the executed notebook)"
    if chapter.number in MEASURING:
        measured = [r for r in store.rows("chapters") if r.get("chapter") == chapter.stem and not r.get("refreshed")]
        last = measured[-1] if measured else {}
        mine = last.get("parameters")
        if mine is None and last.get("recorded_at"):
            mine = {k: v for k, v in (_invocation_before(store.manifest, str(last["recorded_at"])) or {}).items() if k in declared}
        if mine:
            found, source = {**found, **mine}, f"the execution that measured it ({last.get('recorded_at')})"
    return _here(store, {k: v for k, v in found.items() if k in declared and k not in SET_BY_REFRESH}), source
