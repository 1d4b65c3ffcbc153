"""An execution id on every row (servebook.executions): a re-execution of a chapter is told from a repeat within one
execution, so a failure recorded again by a re-execution stands once and a failure that happened twice in one execution
stands twice; a derived table computed again with the same values is not rewritten (the seed tables of chapter 06)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from servebook.executions import EXECUTION_ID_ENV, STAMPS, execution_id, executing
from servebook.findings import failures
from servebook.paths import data_dir
from servebook.results import RunStore

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"


def _fail(store, n: int, error: str = "all_reduce_perf not found (PATH or the all_reduce_perf parameter)"):
    for _ in range(n):
        store.record_failure("nccl-tests", error)


def test_a_repeat_within_one_execution_stands_and_a_reexecution_is_folded_into_it(tmp_path):
    """h200x2-live's case, stamped: chapter 04 looks for nccl-tests twice in one execution and fails twice (two
    failures); executed again, it fails twice again: nothing is appended, the two re-hits are counted on the standing
    row, whose stamp (the ``step | recorded_at`` a page quotes) is the first execution's."""
    store = RunStore.at(tmp_path / "run")
    with executing() as first:
        _fail(store, 2)
    assert [r["execution_id"] for r in store.rows("failures")] == [first, first]
    assert [f["times"] for f in failures(store)] == [2], "a genuine repeat within one execution counts"
    stamps = [r["recorded_at"] for r in store.rows("failures")]
    with executing() as again:
        _fail(store, 2)
    assert first != again
    standing = store.rows("failures")
    assert [r["execution_id"] for r in standing] == [first, first] and [r["recorded_at"] for r in standing] == stamps
    assert (standing[-1]["recorded_again"], standing[-1]["last_execution_id"]) == (2, again)
    assert [f["times"] for f in failures(store)] == [2]
    assert len(store.rows("failures", executions="all")) == 2, "a re-execution appends no row"
    with executing() as third:  # executed once more, it fails once, and a new failure besides
        _fail(store, 1)
        _fail(store, 1, "nccl-tests: exit 1")
    assert [(f["error"], f["times"]) for f in failures(store)] == [("all_reduce_perf not found (PATH or the all_reduce_perf "
                                                                    "parameter)", 2), ("nccl-tests: exit 1", 1)]
    assert (store.rows("failures")[1]["recorded_again"], store.rows("failures")[1]["last_execution_id"]) == (3, third)
    assert len(store.rows("failures", executions="all")) == 3


def test_the_same_failing_step_executed_twice_leaves_one_row_with_the_rehit_counted(tmp_path):
    """Priority 3, re-runs without duplicates: the what-if book's chapter 02 asks vLLM 0.10.2 about Kimi again at every
    execution and fails the same way; the second execution appends nothing to ``failures.jsonl``."""
    store = RunStore.at(tmp_path / "run")
    ask = lambda: store.record_failure("whatif", "ModelError: vllm 0.10.2 does not know architecture 'KimiK25'",  # noqa: E731
                                       engine="vllm==0.10.2", gpu="a100", model="kimi-k2.5")
    with executing():
        first = ask()
    with executing() as again:
        held = ask()
    lines = store.table_path("failures").read_text().splitlines()
    assert len(lines) == 1, "one row, not one per execution"
    row = json.loads(lines[0])
    assert {k: row[k] for k in STAMPS[:3]} == {k: first[k] for k in STAMPS[:3]}, "the row as first recorded"
    assert (row["recorded_again"], row["last_execution_id"], row["last_recorded_at"]) == (1, again, held["last_recorded_at"])
    assert store.rows("failures") == [dict(row, recorded_again_at=[row["last_recorded_at"]])]


def test_a_fold_rewrites_its_line_alone(tmp_path):
    """Folding a re-hit rewrites the row it folds into and leaves every other line as it was: a withdrawn row, a torn
    one, an unstamped one of the same failure recorded before rows carried an id."""
    store = RunStore.at(tmp_path / "run")
    old = json.dumps({"step": "s", "error": "e", "recorded_at": "2026-11-30T23:39:25+00:00"})
    withdrawn = json.dumps({"step": "s", "error": "e", "withdrawn": "by a correction"})
    store.table_path("failures").write_text(f"{old}\n{withdrawn}\n{{torn\n{old}\n")
    with executing():
        store.record_failure("s", "e")
    lines = store.table_path("failures").read_text().splitlines()
    assert lines[:3] == [old, withdrawn, "{torn"] and len(lines) == 4
    folded = json.loads(lines[3])
    assert {k: v for k, v in folded.items() if not k.startswith(("last_", "recorded_again"))} == json.loads(old)
    assert folded["recorded_again"] == 1
    (r,) = store.rows("failures")
    assert (r["recorded_at"], r["recorded_again"]) == ("2026-11-30T23:39:25+00:00", 2)


def test_rows_recorded_before_the_id_keep_standing_once(tmp_path):
    """A row without ``execution_id`` (every committed run before it) cannot tell a repeat from a re-execution: equal rows
    stand once, the first, the later ones folded into it; a stamped recording of the same failure after them is folded."""
    store = RunStore.at(tmp_path / "run")
    old = {"step": "nccl-tests", "error": "all_reduce_perf not found"}
    times = ("2026-11-30T23:39:25+00:00", "2026-12-01T00:03:22+00:00")
    store.table_path("failures").write_text("".join(json.dumps({**old, "recorded_at": t}) + "\n" for t in times))
    assert [(r["recorded_at"], r["recorded_again"], r["recorded_again_at"]) for r in store.rows("failures")] == [
        (times[0], 1, [times[1]])]
    assert [f["times"] for f in failures(store)] == [1]
    with executing() as now:
        _fail(store, 2, "all_reduce_perf not found")
    (r,) = store.rows("failures")
    assert (r["recorded_at"], r["recorded_again"], r["last_execution_id"]) == (times[0], 3, now)
    assert len(store.rows("failures", executions="all")) == 2


def test_the_committed_runs_list_each_failure_once_per_its_last_execution():
    """What each committed run lists: every distinct failure stands, the rows of one value from one execution only (the
    first that recorded it; an unstamped row, from before ids, once), the later recordings folded into it."""
    for run in ("h200x2-live", "whatif-rtx-pro-6000-sglang-0.5.9"):
        store = RunStore(data_dir() / "runs" / run)
        every = store.rows("failures", executions="all")
        value = lambda r: json.dumps({k: v for k, v in r.items() if k not in STAMPS}, sort_keys=True)  # noqa: E731
        standing = store.rows("failures")
        assert {value(r) for r in standing} == {value(r) for r in every}, run
        for v in {value(r) for r in standing}:
            ids = [r.get("execution_id") for r in standing if value(r) == v]
            assert len(set(ids)) == 1 and (ids[0] is not None or len(ids) == 1), (run, v[:80], ids)
        assert len(standing) < len(every), run


def test_the_id_reaches_the_processes_a_chapter_starts_and_is_restored_after(tmp_path):
    """A notebook's kernel (and a process it starts) writes with the id of the execution that started it: the id
    travels in the environment, as jupyter_client starts the kernel with a copy of it."""
    store = RunStore.at(tmp_path / "run")
    outside = execution_id()
    code = "from servebook.results import RunStore; import sys; RunStore.at(sys.argv[1]).append('t', {'by': 'child'})"
    with executing() as mine:
        store.append("t", {"by": "parent"})
        subprocess.run([sys.executable, "-c", code, str(store.path)], check=True)
    assert [(r["by"], r["execution_id"]) for r in store.rows("t")] == [("parent", mine), ("child", mine)]
    assert execution_id() == outside and mine != outside, "the process's own id again after the chapter"
    with pytest.raises(RuntimeError):
        with executing():
            raise RuntimeError("a chapter that fails")
    assert execution_id() == outside


def test_a_cli_command_is_one_execution(tmp_path):
    """Outside a book every process is one execution: two commands writing to one run get two ids."""
    code = ("import sys, os; os.environ.pop(sys.argv[2], None); from servebook.results import RunStore; "
            "s = RunStore.at(sys.argv[1]); s.append('t', {'i': 0}); s.append('t', {'i': 1})")
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / "run"), EXECUTION_ID_ENV], check=True)
    ids = [r["execution_id"] for r in RunStore.at(tmp_path / "run").rows("t")]
    assert len(ids) == 4 and ids[0] == ids[1] != ids[2] == ids[3]


def test_a_probe_recorded_again_within_one_book_execution_supersedes_the_earlier(tmp_path):
    """Chapter 01's tables are recorded whole per probe: a probe recorded again under the same book execution number (a
    ``servebook probe`` command into the run) stands alone, not beside the earlier one."""
    store = RunStore.at(tmp_path / "run")
    with executing():
        store.append("warnings", {"warning": "nvidia-smi not found"})
        store.append("warnings", {"warning": "no P2P"})
    with executing() as later:
        store.append("warnings", {"warning": "no P2P"})
    assert [(r["warning"], r["execution_id"]) for r in store.rows("warnings")] == [("no P2P", later)]


# -- item 2: a derived table computed again with the same values is not rewritten -------------------------------------
def _whatif_copy(tmp_path):
    run = tmp_path / "whatif"
    run.mkdir()
    for name in ("manifest.json", "decode_path.jsonl", "selection.jsonl"):
        shutil.copy(WHATIF / name, run / name)
    return RunStore(run)


def test_the_seed_tables_written_again_with_the_same_values_are_byte_identical(tmp_path, monkeypatch):
    from servebook.profile.seed import SEED_TABLES, record_seed

    store = _whatif_copy(tmp_path)
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T20:00:00+00:00")
    record_seed(store)
    first = {t: store.table_path(t).read_bytes() for t in SEED_TABLES}
    assert all(first.values())
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T21:00:00+00:00")  # chapter 06 executed again, later
    record_seed(store)
    assert {t: store.table_path(t).read_bytes() for t in SEED_TABLES} == first


def test_a_table_replaced_with_other_values_is_written(tmp_path, monkeypatch):
    store = RunStore.at(tmp_path / "run")
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T20:00:00+00:00")
    store.replace("seed_range", [{"who": "sglang", "point_tok_s": 73.9}], unchanged="keep")
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T21:00:00+00:00")
    kept = store.replace("seed_range", [{"who": "sglang", "point_tok_s": 73.9}], unchanged="keep")
    assert kept == store.rows("seed_range") and kept[0]["recorded_at"] == "2026-12-04T20:00:00+00:00"
    new = store.replace("seed_range", [{"who": "sglang", "point_tok_s": 74.0}], unchanged="keep")
    assert store.rows("seed_range") == new and new[0]["recorded_at"] == "2026-12-04T21:00:00+00:00"
    fewer = store.replace("seed_range", [], unchanged="keep")
    assert fewer == [] and store.table_path("seed_range").read_text() == ""
    store.replace("seed_range", [{"who": "sglang", "point_tok_s": 74.0}])  # the default: written whatever it holds
    assert store.rows("seed_range")[0]["recorded_at"] == "2026-12-04T21:00:00+00:00"
    with pytest.raises(ValueError, match="'write'"):
        store.replace("seed_range", [], unchanged="skip")


def test_a_verdict_appended_again_with_the_same_values_is_not_written_again(tmp_path):
    """Chapter 02's seed comparison, executed again with the same verdict, adds no row; another verdict is appended, and
    the first verdict coming back is appended again (the row chapter 06 reads is the last)."""
    store = RunStore.at(tmp_path / "run")
    a, b = {"verdict": "both Triton", "gpu": "rtx-pro-6000"}, {"verdict": "differ", "gpu": "rtx-pro-6000"}
    first = store.append("seed_comparison", a, unchanged="keep")
    with executing():
        assert store.append("seed_comparison", a, unchanged="keep") == first
    assert len(store.rows("seed_comparison", executions="all")) == 1
    for row in (b, a):
        store.append("seed_comparison", row, unchanged="keep")
    assert [r["verdict"] for r in store.rows("seed_comparison", executions="all")] == ["both Triton", "differ", "both Triton"]
    with pytest.raises(ValueError, match="'keep'"):
        store.append("seed_comparison", a, unchanged="no")


def test_the_whatif_floor_planned_again_leaves_the_roofline_file_as_it_was(tmp_path, monkeypatch):
    """Chapter 04 of the what-if book plans its communication floor (table roofline, beside chapter 05's rows) at every
    execution: the same values leave the file byte for byte as it was."""
    from servebook import plan

    run = tmp_path / "whatif"
    run.mkdir()
    for name in ("manifest.json", "probe.json", "roofline.jsonl"):
        shutil.copy(WHATIF / name, run / name)
    store = RunStore(run)
    facts = plan.host_facts(store, "sglang==0.5.9", "kimi-k2.5", "rtx-pro-6000")
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T20:00:00+00:00")
    plan.plan_nccl(store, facts)
    first = store.table_path("roofline").read_bytes()
    assert [r["chapter"] for r in store.rows("roofline")] == sorted(r["chapter"] for r in store.rows("roofline"))
    assert {r["chapter"] for r in store.rows("roofline")} == {"04", "05"}, "chapter 05's rows kept"
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-04T21:00:00+00:00")
    plan.plan_nccl(store, facts)
    assert store.table_path("roofline").read_bytes() == first


def test_a_failure_folded_in_an_again_execution_counts_as_its_own_for_resuming(tmp_path):
    """``servebook book --again``: a setting that failed in execution 1 is tried again; failing the same way, it is
    folded into execution 1's row, and a resumption of execution 2 still finds it done (not tried a third time)."""
    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"execution": {"id": 1, "again": False}})
    with executing():
        store.record_failure("nccl-tests", "exit 1", setting="NCCL_ALGO=Ring")
    store.write_manifest({"execution": {"id": 2, "again": True}})
    assert not store.done("failures", setting="NCCL_ALGO=Ring"), "measured again in execution 2"
    with executing():
        store.record_failure("nccl-tests", "exit 1", setting="NCCL_ALGO=Ring")
    assert len(store.rows("failures", executions="all")) == 1
    assert store.done("failures", setting="NCCL_ALGO=Ring"), "execution 2 recorded it (folded): a resumption skips it"


def _count_writes(monkeypatch) -> list[int]:
    """Bytes written to disk by the run store from now on (appends, in-place writes, whole rewrites)."""
    import os

    from servebook import folds, results

    written: list[int] = []
    for mod in (os,):
        for name in ("write", "pwrite"):
            real = getattr(mod, name)
            monkeypatch.setattr(mod, name, lambda fd, data, *a, _real=real: written.append(len(data)) or _real(fd, data, *a))
    real_write = results.RunStore._write
    monkeypatch.setattr(results.RunStore, "_write", lambda self, path, text, mode: written.append(len(text.encode()))
                        or real_write(self, path, text, mode))
    assert folds.os is os
    return written


def test_a_rehit_is_one_bounded_write_whatever_the_tables_size(tmp_path, monkeypatch):
    """Priority 3 of session 18: a failure recorded again by a later execution writes its one line in place (no read
    and rewrite of the whole table): with 2,000 failures on disk, each re-hit writes at most one line's bytes, and
    what readers see is the fold as before."""
    store = RunStore.at(tmp_path / "run")
    with executing() as first:
        for i in range(2000):
            store.record_failure(f"step {i}", f"error {i}")
    size = store.table_path("failures").stat().st_size
    line = max(len(x) for x in store.table_path("failures").read_bytes().splitlines(keepends=True))
    written = _count_writes(monkeypatch)
    for n in range(1, 4):
        with executing() as again:
            store.record_failure("step 0", "error 0")
            store.record_failure("step 1999", "error 1999")
        assert sum(written) <= 2 * line, written  # two lines, not two tables (before: 2 x 200 kB)
        written.clear()
        assert store.table_path("failures").stat().st_size == size, "nothing appended, nothing moved"
        rows = store.rows("failures")
        assert len(rows) == 2000 and (rows[0]["execution_id"], rows[0]["recorded_again"], rows[0]["last_execution_id"]) == (first, n, again)
        assert rows[-1]["recorded_again"] == n and "recorded_again" not in rows[1]
    fresh = RunStore(store.path)  # another process's store: its index is read from the file
    with executing() as later:
        fresh.record_failure("step 5", "error 5")
    assert sum(written) <= line and fresh.rows("failures")[5]["last_execution_id"] == later


def test_a_row_from_before_lines_had_room_is_rewritten_once_then_in_place(tmp_path, monkeypatch):
    """A committed run's failure line has no room for the fold's fields: its first re-hit rewrites the table (as before
    this change), the line gains room, and every later re-hit writes that line alone."""
    store = RunStore.at(tmp_path / "run")
    old = [json.dumps({"step": f"s{i}", "error": "e", "recorded_at": "2026-11-30T23:39:25+00:00"}) for i in range(300)]
    store.table_path("failures").write_text("\n".join(old) + "\n")
    written = _count_writes(monkeypatch)
    with executing():
        store.record_failure("s0", "e")
    assert sum(written) > 300 * 40, "the first fold of a line without room rewrites its table"
    written.clear()
    with executing() as again:
        store.record_failure("s0", "e")
    assert 0 < sum(written) < 400
    lines = store.table_path("failures").read_text().splitlines()
    assert lines[1:] == old[1:] and json.loads(lines[0])["recorded_again"] == 2
    assert store.rows("failures")[0]["last_execution_id"] == again
