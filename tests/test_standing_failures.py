"""The failures table's standing view is what every reader reads, ``failure_text`` too: a chapter's page quotes the
failure it hit (``step | recorded_at``), and that quote still names a standing row after a later execution recorded the
same failure again (folded into the row, ``executions.FOLDED``), so no reader needs every recording."""

from __future__ import annotations

import shutil

from servebook.executions import executing
from servebook.paths import data_dir
from servebook.quantities import QUANTITIES, recompute
from servebook.results import RunStore

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"


def _copy(tmp_path) -> RunStore:
    run = tmp_path / "whatif"
    run.mkdir()
    for name in ("manifest.json", "failures.jsonl"):
        shutil.copy(WHATIF / name, run / name)
    return RunStore(run)


def test_failure_text_reads_the_standing_view(tmp_path, monkeypatch):
    store = _copy(tmp_path)
    asked = []
    rows = RunStore.rows
    monkeypatch.setattr(RunStore, "rows", lambda self, table, *a, **k: asked.append((table, a, k)) or rows(self, table, *a, **k))
    texts = QUANTITIES["failure_text"].compute(store)
    assert asked and all(not a and k.get("executions", "standing") == "standing" for t, a, k in asked if t == "failures")
    # every recording on disk (the what-if book's chapter 02 executed many times) and each standing row's last re-hit
    # (folded into the row: executions.FOLDED) still names its failure's text, and nothing else does
    every = rows(store, "failures", executions="all")
    last = {f"{f['step']} | {f['last_recorded_at']}" for f in rows(store, "failures") if f.get("last_recorded_at")}
    assert len(every) >= 50 and last and {f"{f['step']} | {f['recorded_at']}" for f in every} | last == set(texts)


def test_a_quote_made_before_a_re_execution_still_names_the_failure_after_it(tmp_path):
    """The what-if book's chapter 03 quoted the failure chapter 02 recorded at 22:50:41; chapter 02 executed again at
    23:16 recorded it again (the committed case), and once more here: the quote stays true and the file gains no row."""
    store = _copy(tmp_path)
    quoted = "whatif | 2026-12-04T22:50:41+00:00"
    before = recompute(store).values_of("failure_text")[quoted]
    again = [int(f.get("recorded_again") or 0) for f in store.rows("failures")]   # as committed (each re-render adds one)
    lines = store.table_path("failures").read_text().count("\n")
    with executing():
        for f in store.rows("failures"):
            store.record_failure(f["step"], f["error"], **{k: f[k] for k in ("engine", "gpu", "model")})
    assert store.table_path("failures").read_text().count("\n") == lines
    after = recompute(store)
    assert after.values_of("failure_text")[quoted] == before
    assert after.values_of("failures_recorded") == {None: 5}
    standing = store.rows("failures")
    assert len(standing) == 5 and [f["recorded_again"] for f in standing] == [n + 1 for n in again]
    on_disk = max(f["recorded_at"] for f in store.rows("failures", executions="all"))
    assert all(f["last_recorded_at"] >= on_disk and f["recorded_at"] < on_disk for f in standing[1:])


def test_a_chapter_that_fails_anew_then_hits_an_old_failure_names_the_new_one_first(tmp_path, monkeypatch):
    """``measured.nothing_measured`` names the first failure recorded since the chapter began: a re-hit is folded into
    an old row (its earlier re-hits' times are not kept), and still the order of this chapter's recordings holds (to
    the second of their stamps: within one second a re-hit is taken as recorded before that second's new rows)."""
    from servebook import results
    from servebook.measured import failures_so_far, nothing_measured

    clock = iter(f"2026-12-05T01:00:{s:02d}+00:00" for s in range(60))
    monkeypatch.setattr(results, "_now", lambda: next(clock))
    store = RunStore.at(tmp_path / "run")
    for _ in range(3):  # three executions hit it: one row, two re-hits folded in
        with executing():
            store.record_failure("chapter 03 sweep sglang", "ServerError: old")
    before = failures_so_far(store)
    assert before == 3 and len(store.rows("failures", executions="all")) == 1
    with executing():
        store.record_failure("chapter 03 sweep vllm", "ServerError: new")
        store.record_failure("chapter 03 sweep sglang", "ServerError: old")
    assert failures_so_far(store) == before + 2
    assert nothing_measured(store, "03", before).endswith("first cause: chapter 03 sweep vllm: ServerError: new")
    assert nothing_measured(store, "03", before + 1).endswith("first cause: chapter 03 sweep sglang: ServerError: old")
