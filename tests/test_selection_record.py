"""Chapter 02's matrix and its derived tables written again (``selection.record.record_matrix``): an execution that
computes the same values leaves the files byte-identical, and what the readers of their stamps conclude
(``standing.standing_answers``, ``selection.figures``) is the same as when the matrix was written at every execution."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servebook.executions import STAMPS
from servebook.results import RunStore
from servebook.selection import figures, record
from servebook.selection.report import _record_answer
from servebook.standing import standing_answers

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
DERIVED = ("selection_disagreements", "selection_diff")


def _values(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in STAMPS} for r in rows]


def _execute(store: RunStore, matrix: list[dict], derived: dict[str, list[dict]]) -> str:
    """The writes of chapter 02's matrix cells, in the notebook's order: the matrix, then the tables derived from it."""
    mode = record.record_matrix(store, matrix)
    for name, rows in derived.items():
        store.replace(name, rows, unchanged=mode)
    return mode


def test_the_recorded_matrix_computed_again_leaves_the_files_byte_identical(tmp_path):
    """The what-if run's matrix (80 cells) and its derived tables computed again with the same values: nothing is
    written, and the figures the page states are the same."""
    shutil.copytree(RUN, tmp_path / "run", ignore=shutil.ignore_patterns("notebooks", "logs"))
    store = RunStore(tmp_path / "run")
    files = ("selection_matrix",) + DERIVED
    before = {t: store.table_path(t).read_bytes() for t in files}
    counts = figures.disagreement_count(store), figures.diff_count(store), standing_answers(store)
    assert counts[0] and counts[1] and counts[2]
    for _ in range(2):
        mode = _execute(store, _values(store.rows("selection_matrix")), {t: _values(store.rows(t)) for t in DERIVED})
        assert mode == "keep"
        assert {t: store.table_path(t).read_bytes() for t in files} == before
    assert (figures.disagreement_count(store), figures.diff_count(store), standing_answers(store)) == counts


def _case(answer: str, at: str) -> dict:
    return {"case": "seed", "engine": "vllm", "version": "0.33.0", "model": "kimi-k2.5", "gpu": "rtx-pro-6000",
            "method": "dynamic", "attention_backend": answer, "decided_by": {"where": f"cuda.py:{answer}"},
            "recorded_at": at}


def _cells(answer: str) -> list[dict]:
    cell = {"engine": "vllm==0.33.0", "engine_spec": "vllm==0.33.0", "version": "0.33.0", "model": "kimi-k2.5",
            "method": "dynamic"}
    return [cell | {"gpu": "rtx-pro-6000", "attention_backend": answer},
            cell | {"gpu": "h200", "attention_backend": "FLASHMLA"}]


# Executions of chapter 02, in order: (the case's answer or None: not asked, the matrix's answer of the same question or
# None: no matrix computed). The case is asked first, the matrix a minute later, as in the notebook.
SCENARIOS = {
    "nothing changes": [("TRITON_MLA", "TRITON_MLA"), ("TRITON_MLA", "TRITON_MLA"), ("TRITON_MLA", "TRITON_MLA")],
    # the case (asked with the case's own assumptions) answers otherwise while the matrix stays as it was: the matrix, asked
    # after it in the same execution, supersedes it, as it did when it was written at every execution
    "the case changes, the matrix does not": [("TRITON_MLA", "TRITON_MLA"), ("FLASHINFER_MLA", "TRITON_MLA")],
    # an execution that computes no matrix records a new case answer; the next one computes the same matrix again
    "a case answered between two matrices": [("TRITON_MLA", "TRITON_MLA"), ("FLASHINFER_MLA", None), (None, "TRITON_MLA")],
    "a case answered after the last matrix": [("TRITON_MLA", "TRITON_MLA"), ("FLASHINFER_MLA", None)],
    "both change": [("TRITON_MLA", "TRITON_MLA"), ("FLASHINFER_MLA", "FLASHINFER_MLA"), ("FLASHINFER_MLA", "FLASHINFER_MLA")],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_standing_answer_is_the_one_a_matrix_written_at_every_execution_gives(tmp_path, monkeypatch, name):
    """Whichever of the matrix and the case's row was recorded last, the answer that stands is the one it was when chapter
    02 wrote its matrix at every execution (a stamp always later than the cases of its execution): record_matrix keeps
    the matrix's older stamp only where that changes no standing answer. A matrix kept whatever the case says
    (``unchanged="keep"`` alone) is shown to give another answer where the scenario needs the rule."""
    kept = RunStore.at(tmp_path / "kept")        # record_matrix, as chapter 02 writes now
    always = RunStore.at(tmp_path / "always")    # the matrix written at every execution, as before
    naive = RunStore.at(tmp_path / "naive")      # the matrix kept whenever its values are the same
    naive_differs = False
    for day, (case, matrix) in enumerate(SCENARIOS[name], 1):
        at, later = f"2026-12-{day:02d}T10:00:00+00:00", f"2026-12-{day:02d}T10:01:00+00:00"
        for store in (kept, always, naive) if case else ():
            _record_answer(store, _case(case, at))
        if matrix:
            monkeypatch.setattr(record, "_now", lambda t=later: t)
            before = kept.table_path("selection_matrix").read_bytes() if kept.table_path("selection_matrix").exists() else None
            mode = record.record_matrix(kept, _cells(matrix))
            always.replace("selection_matrix", [r | {"recorded_at": later} for r in _cells(matrix)])
            naive.replace("selection_matrix", [r | {"recorded_at": later} for r in _cells(matrix)], unchanged="keep")
            if name == "nothing changes" and day > 1:
                assert mode == "keep" and kept.table_path("selection_matrix").read_bytes() == before
        assert standing_answers(kept) == standing_answers(always), (name, day)
        naive_differs = naive_differs or standing_answers(naive) != standing_answers(always)
    assert naive_differs == (name in ("the case changes, the matrix does not", "a case answered between two matrices"))


def test_derived_tables_of_a_changed_matrix_still_count(tmp_path, monkeypatch):
    """The matrix changes (a cell another model's) while its disagreements stay the same: written with the matrix, they
    are not older than it, so the count the page prints stands (kept on their own, the count would be lost)."""
    store = RunStore(tmp_path)
    dis = [{"a": "sglang 0.5.9", "b": "vllm 0.33.0", "kind": "differs", "model": "kimi-k2.5", "gpu": "h200", "between": "engines"}]
    for day, answer in ((1, "TRITON_MLA"), (2, "TRITON_MLA"), (3, "CUTLASS_MLA")):
        monkeypatch.setattr(record, "_now", lambda t=f"2026-12-0{day}T10:00:00+00:00": t)
        mode = _execute(store, _cells(answer), {"selection_disagreements": dis})
        assert mode == ("keep" if day == 2 else "write")
        assert figures.disagreement_count(store) == {None: 1}
    naive = RunStore.at(tmp_path / "naive")
    naive.replace("selection_matrix", [r | {"recorded_at": "2026-12-01T10:00:00+00:00"} for r in _cells("TRITON_MLA")])
    naive.replace("selection_disagreements", [d | {"recorded_at": "2026-12-01T10:00:00+00:00"} for d in dis])
    naive.replace("selection_matrix", [r | {"recorded_at": "2026-12-03T10:00:00+00:00"} for r in _cells("CUTLASS_MLA")])
    naive.replace("selection_disagreements", dis, unchanged="keep")
    assert figures.disagreement_count(naive) == {}
