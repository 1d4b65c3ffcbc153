"""Chapter 02's matrix computed again (``selection.record.record_matrix``): whether the rows on disk may stay is decided
by weighing the ``selection`` rows once against both matrices, not by building the standing answers twice."""

from __future__ import annotations

import shutil
from pathlib import Path

from servebook import standing
from servebook.executions import STAMPS
from servebook.results import RunStore
from servebook.selection import record

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"


def test_record_matrix_weighs_the_answers_once(tmp_path, monkeypatch):
    shutil.copytree(RUN, tmp_path / "run", ignore=shutil.ignore_patterns("notebooks", "logs"))
    store = RunStore(tmp_path / "run")
    answers = standing.standing_answers(store)
    calls: list[str] = []
    for name in ("_standing", "_of_selection"):  # building the standing answers, or weighing the selection rows
        real = getattr(standing, name, None)
        if real is not None:
            monkeypatch.setattr(standing, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    rows = RunStore.rows
    monkeypatch.setattr(RunStore, "rows", lambda self, table, *a, **k: calls.append(table) or rows(self, table, *a, **k))
    matrix = [{k: v for k, v in r.items() if k not in STAMPS} for r in rows(store, "selection_matrix")]
    assert record.record_matrix(store, matrix) == "keep"
    assert calls.count("selection") == 1, calls
    assert calls.count("_standing") + calls.count("_of_selection") == 1, calls
    monkeypatch.undo()
    assert standing.standing_answers(store) == answers
