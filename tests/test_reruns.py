"""Re-runs of one run id (issue 42, item 3), with the real embedded engine (transformers serve on the tiny local model):
a plain re-run resumes and measures nothing recorded again, ``--again`` measures again with each execution's rows kept
apart, and no page lists a row twice; an interrupted chapter keeps its finished notebook and reads as interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from servebook.book import run_book
from servebook.render import render_book
from servebook.findings import throughput
from servebook.results import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_engine_envs_in_module")]

RUN_ID = "again"


def _book(root: Path, only: list[str], again: bool = False):
    return run_book({"smoke": True}, out=root / "site", runs_root=root / "runs", run_id=RUN_ID, only=only, progress=print,
                    again=again)


class _Table(HTMLParser):
    """The body rows of an HTML table as lists of cell texts (pandas' ``to_html``: the index in a ``th``)."""

    def __init__(self):
        super().__init__()
        self.rows, self._row, self._cell, self._body = [], None, None, False

    def handle_starttag(self, tag, attrs):
        self._body = self._body or tag == "tbody"
        if tag == "tr" and self._body:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None


def _html_tables(run: Path, stem: str, marker: str) -> list[list[list[str]]]:
    """The body rows of each HTML table a chapter's executed notebook displayed from the cell whose source holds
    ``marker``."""
    nb = nbformat.read(run / "notebooks" / f"{stem}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and marker in c.source)
    out = []
    for o in cell.get("outputs", []):
        if "text/html" in o.get("data", {}):
            parser = _Table()
            parser.feed("".join(o["data"]["text/html"]))
            out.append(parser.rows)
    return out


@pytest.fixture(scope="module")
def three_executions(tmp_path_factory, embedded_model):
    """Chapters 01, 05 and 06 of one run id: executed, executed again (resumed), executed again with --again."""
    root = tmp_path_factory.mktemp("reruns")
    first = _book(root, ["01", "05", "06"])
    store = RunStore(first.run_dir)
    snap = {t: store.table_path(t).read_text() for t in store.tables() if t != "chapters"}
    second = _book(root, ["01", "05", "06"])
    resumed = {t: store.table_path(t).read_text() for t in store.tables() if t != "chapters"}
    third = _book(root, ["01", "05", "06"], again=True)
    return {"root": root, "run": first.run_dir, "results": [first, second, third], "snap": snap, "resumed": resumed}


def test_every_execution_finished(three_executions):
    for result in three_executions["results"]:
        assert [(c["chapter"], c["status"]) for c in result.chapters if c["status"] != "ok"] == []
    m = RunStore(three_executions["run"]).manifest
    assert [e["id"] for e in m["executions"]] == [1, 2, 3] and [e["again"] for e in m["executions"]] == [False, False, True]


def test_each_chapter_execution_stamps_its_rows_with_its_own_id(three_executions):
    """Every row a chapter's execution writes, in the notebook's kernel and in the book's process (its ``chapters`` row),
    carries that execution's id; no two chapter executions share one (servebook.executions)."""
    store = RunStore(three_executions["run"])
    chapters = store.rows("chapters", executions="all")
    of = {(c["execution"], c["chapter"][:2]): c["execution_id"] for c in chapters}
    assert len(chapters) == len(of) == len(set(of.values())) == 9, chapters  # 3 chapters x 3 executions
    for table, number in (("versions", "01"), ("engines", "01"), ("bench_summary", "05"), ("bench_requests", "05")):
        rows = store.rows(table, executions="all")
        assert rows and all(r["execution_id"] == of[(r["execution"], number)] for r in rows), table
    for page in (three_executions["run"] / "notebooks").glob("*.ipynb"):  # a stamp for the tables, never a column on a page
        outputs = [o for c in nbformat.read(page, as_version=4).cells for o in c.get("outputs", [])]
        assert "execution_id" not in str(outputs), page.name


def test_a_plain_rerun_measures_nothing_recorded_again(three_executions):
    """The second execution added no row to any table of chapters 01 and 05 (chapter 06's derived tables aside)."""
    snap, resumed = three_executions["snap"], three_executions["resumed"]
    measured = {t for t in snap if t.startswith(("bench", "gpus", "versions", "engines", "engine_helpers", "warnings"))}
    assert measured and {t: resumed[t] for t in measured} == {t: snap[t] for t in measured}


def test_again_measures_further_starts_pooled_with_the_earlier_ones(three_executions):
    store = RunStore(three_executions["run"])
    single = [r for r in store.rows("bench_summary") if r.get("phase") == "single"]
    by_exec = {}
    for r in single:
        by_exec.setdefault(r.get("execution"), []).append(int(r.get("start") or 0))
    assert set(by_exec) == {1, 3}, by_exec  # execution 2 resumed: it measured nothing
    assert max(by_exec[1]) < min(by_exec[3])  # further starts, numbered after the earlier ones
    (t,) = throughput(store)
    assert t["starts"] == len(by_exec[1]) + len(by_exec[3])  # pooled: the same configuration and method


def test_no_page_lists_a_row_twice(three_executions):
    run = three_executions["run"]
    store = RunStore(run)
    for table in ("engines", "versions", "engine_helpers", "gpus", "warnings"):
        rows = store.rows(table)
        assert len({str(sorted((k, str(v)) for k, v in r.items() if k not in ("recorded_at",))) for r in rows}) == len(rows), table
        assert len({r.get("execution") for r in rows}) <= 1, table  # one execution's facts: the latest that probed
    engines = _html_tables(run, "01_detect_capabilities", 'store.table("engines")')[0]  # [index, engine, version, ...]
    names = [row[1] for row in engines]
    assert names and len(names) == len(set(names)), engines
    sweep = [r for r in store.rows("bench_summary") if r.get("phase") == "sweep"]
    from servebook.bench.runs import current

    standing, _ = current(store.rows("bench_summary"))
    levels = [(r["label"], r["concurrency"]) for r in standing if r.get("phase") == "sweep"]
    assert len(levels) == len(set(levels)) and len(sweep) > len(levels)  # measured twice, listed once
    index = render_book(run, three_executions["root"] / "site2").read_text()
    assert index.count("&#10003;") == 3 and "&#10007;" not in index


# -- an interrupted chapter -----------------------------------------------------------------------------------------
def _start_book(root: Path, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "servebook.cli", "book", "--smoke", "--only", "06", "--run-id", "cut", "--runs", str(root / "runs"),
           "--out", str(root / "site")]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _slow_kernel(root: Path, env: dict) -> dict:
    """``env`` whose notebook kernel sleeps 2 s after every cell (an IPython startup file): the embedded chapter 06
    runs in about 3 s, so without it the chapter could finish between the test seeing it start and the signal."""
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-slow.py").write_text("import time\nget_ipython().events.register('post_run_cell', lambda *_: time.sleep(2))\n")
    return {**env, "IPYTHONDIR": str(root / "ipython")}


def _when_running(proc: subprocess.Popen, partial: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not partial.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "chapter 06 did not start"
        time.sleep(0.05)


@pytest.mark.usefixtures("no_leftover_servers")
def test_an_interrupted_chapter_keeps_its_finished_notebook_and_says_interrupted(tmp_path, embedded_model):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "lib")}
    first = _start_book(tmp_path, env)
    assert first.wait(timeout=600) == 0, first.stdout.read()
    run = next((tmp_path / "runs").glob("*/cut"))
    finished = run / "notebooks" / "06_findings.ipynb"
    before = finished.read_bytes()
    partial = run / "notebooks" / "06_findings.partial.ipynb"

    for sig, status in ((signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)):
        proc = _start_book(tmp_path, _slow_kernel(tmp_path, env))
        _when_running(proc, partial)
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=120) == status, proc.stdout.read()
        assert finished.read_bytes() == before  # the finished notebook stays in place
        assert partial.exists()  # the interrupted one beside it
        index = render_book(run, tmp_path / f"site-{sig.name}").read_text()
        line = next(x for x in index.splitlines() if "06_findings.html" in x and "<li>" in x)
        assert "&#10003;" not in line and "interrupted" in line, line
        page = (tmp_path / f"site-{sig.name}" / "06_findings.html").read_text()
        assert "was interrupted before it finished; this page is the execution before it, which finished" in page
    rows = [r["status"] for r in RunStore(run).rows("chapters")]
    assert rows == ["ok", "interrupted"]  # Ctrl-C records it; a SIGKILL leaves only the partial notebook to say so

    again = _start_book(tmp_path, env)  # a finished execution moves its notebook over the old one
    assert again.wait(timeout=600) == 0
    assert not partial.exists()
    index = render_book(run, tmp_path / "site-after").read_text()
    assert "&#10003;" in next(x for x in index.splitlines() if "06_findings.html" in x and "<li>" in x)
