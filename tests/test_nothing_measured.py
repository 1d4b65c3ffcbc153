""""ok" means measured: chapters 03, 04 and 05 run against a server (or a grid) that never starts are recorded as
failed with "nothing measured" and the first cause, in the chapter's first lines and on the index, and the book command
exits non-zero.

The server that never starts: SERVEBOOK_PYTHON_TRANSFORMERS names a wrapper of this interpreter that runs everything
(the engine's version, its CLI, its attention list) except the server launcher, which exits at once with its reason.
Chapter 04 starts no server: each torchrun launch of its grid is given one second (`timeout_s=1`), less than torch takes
to import, so every launch is killed and recorded.
"""

import json
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pytest

from servebook.cli import main
from servebook.executions import STAMPS, executing
from servebook.findings import failures
from servebook.measured import failures_so_far, nothing_measured
from servebook.results import RunStore
from servebook.selection.report import ask

WHATIF = Path(__file__).resolve().parents[1] / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"



REASON = "drill: this server never starts"


@pytest.fixture
def never_starts(tmp_path, monkeypatch):
    wrapper = tmp_path / "python-never-serves"
    wrapper.write_text(f'#!/bin/sh\ncase "$1" in *transformers_serve.py) echo "{REASON}" >&2; exit 3;; esac\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("SERVEBOOK_PYTHON_TRANSFORMERS", str(wrapper))
    return wrapper


def _book(tmp_path, capsys, number: str, *params: str):
    runs, site = tmp_path / "runs", tmp_path / "site"
    rc = main(["book", "--smoke", "--only", number, "--runs", str(runs), "--out", str(site), "--run-id", "r",
               *[a for p in params for a in ("-p", p)]])
    err = capsys.readouterr().err
    store = RunStore(next(runs.glob("*/r")))
    row = store.rows("chapters")[-1]
    page = next(site.glob(f"{number}_*.html")).read_text()
    index = (site / "index.html").read_text()
    return rc, row, page, index, err, store


def _check(rc, row, page, index, err, number, missing):
    assert rc == 1 and f"chapter(s) failed: {number}_" in err
    assert row["status"] == "failed" and row["error"].startswith(f"nothing measured: {missing}; first cause: "), row
    banner = page[page.index('id="sb-failed"'):][:3000]  # the page's first lines, before any cell
    assert page.index('id="sb-failed"') < page.index("jp-Cell")
    assert "nothing measured" in banner and "Every cell ran" in banner
    item = next(line for line in index.split("<li>") if f'href="{number}_' in line)
    assert "&#10003;" not in item and "&#10007; failed: nothing measured" in item


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("no_engine_envs")
def test_chapter_03_with_no_backend_started(tmp_path, capsys, never_starts, no_leftover_servers):
    rc, row, page, index, err, store = _book(tmp_path, capsys, "03")
    _check(rc, row, page, index, err, "03", "no backend produced a decode rate")
    rows = store.rows("backends")
    assert rows and all(r["outcome"] == "failed to start" and r.get("decode_tok_s") is None for r in rows), rows
    assert REASON in row["error"] or "exited with code 3" in row["error"]
    assert "failed to start" in page  # the failure table is rendered
    assert "Traceback" not in page and "AttributeError" not in page  # plot_rates drew nothing and raised nothing
    assert '<img src="data:image/png' not in page


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("no_engine_envs")
def test_chapter_05_with_a_server_that_never_starts(tmp_path, capsys, never_starts, no_leftover_servers):
    rc, row, page, index, err, store = _book(tmp_path, capsys, "05", "profile_steps=0")
    _check(rc, row, page, index, err, "05", "no single-stream decode rate was measured")
    assert REASON in row["error"] or "exited with code 3" in row["error"]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("no_engine_envs")
def test_chapter_04_with_no_grid_point(tmp_path, capsys):
    rc, row, page, index, err, store = _book(tmp_path, capsys, "04", "timeout_s=1", "builtin_grid=false")
    _check(rc, row, page, index, err, "04", "no all-reduce grid point was measured")
    assert not store.rows("allreduce")


def test_a_measured_chapter_and_a_whatif_are_left_alone(tmp_path):
    store = RunStore.at(tmp_path / "run")
    assert nothing_measured(store, "03").startswith("nothing measured: no backend produced a decode rate; first cause: "
                                                    "the chapter recorded no failure")
    store.record_failure("chapter 03 sweep transformers", "ServerError: it exited")
    store.append("backends", {"engine": "transformers", "attention": "eager", "outcome": "failed to start", "error": "x"})
    assert nothing_measured(store, "03", 0).endswith("first cause: chapter 03 sweep transformers: ServerError: it exited")
    assert nothing_measured(store, "03", 1).endswith("first cause: transformers eager: x")
    assert nothing_measured(store, "03", whatif=True) is None and nothing_measured(store, "01") is None
    store.append("backends", {"engine": "transformers", "attention": "sdpa", "outcome": "ok", "decode_tok_s": 12.5})
    assert nothing_measured(store, "03") is None
    store.append("bench_summary", {"phase": "sweep", "decode_tok_s_mean": 30.0})
    assert nothing_measured(store, "05") is not None  # a sweep is not the single stream
    store.append("bench_summary", {"phase": "single", "decode_tok_s_mean": float("nan")})
    assert nothing_measured(store, "05") is not None
    store.append("bench_summary", {"phase": "single", "decode_tok_s_mean": 30.0})
    assert nothing_measured(store, "05") is None


def test_a_failure_recorded_again_is_listed_once_and_a_chapter_hitting_it_again_still_names_it(tmp_path):
    """Issue 42: executing the what-if book's chapter 02 again records the what-ifs that fail (vLLM 0.10.2 does not know
    Kimi's architecture) again. Each recording stays in the file; the failures a page lists do not change."""
    run = tmp_path / "whatif"
    run.mkdir()
    for name in ("manifest.json", "failures.jsonl"):
        shutil.copy(WHATIF / name, run / name)
    store = RunStore(run)
    listed, distinct = store.rows("failures"), failures(store)
    assert len(listed) == 5 < len(store.rows("failures", executions="all"))  # 7 executions of chapter 02, each listed once
    assert [d["times"] for d in distinct] == [5]
    before = failures_so_far(store)
    with executing():  # chapter 02 executed again: the same what-ifs fail the same way (its matrix's on_error, ask's)
        for r in listed:
            store.record_failure(r["step"], r["error"], **{k: r[k] for k in ("engine", "gpu", "model")})
        assert ask(store, "vllm==0.0.1", "kimi-k2.5", "seed", "whatif_seed", gpu="h200") is None  # and a what-if it asks
    with executing():  # executed once more: it asks that what-if again
        assert ask(store, "vllm==0.0.1", "kimi-k2.5", "seed", "whatif_seed", gpu="h200") is None
    strip = lambda rows: [{k: v for k, v in r.items() if k not in STAMPS} for r in rows]  # noqa: E731
    now = strip(store.rows("failures"))
    assert now[:5] == strip(listed) and len(now) == 6 and now[5]["engine"] == "vllm==0.0.1"  # the new failure, once
    assert [d["times"] for d in failures(store)] == [5, 1]
    # a chapter that measured nothing and hit only failures recorded before still names its first cause
    assert nothing_measured(store, "03", before).endswith(f"first cause: {listed[0]['step']}: {listed[0]['error']}")
    assert failures_so_far(store) == before + 7


def test_the_seed_comparison_recorded_again_stands_once_and_the_last_stays_last(tmp_path):
    """Chapter 02 writes its seed comparison at every execution: the what-if book's file holds 8 rows of 2 distinct
    verdicts; the standing view lists each once, and the row the pages read (the last) is the file's last."""
    run = tmp_path / "whatif"
    run.mkdir()
    for name in ("manifest.json", "seed_comparison.jsonl"):
        shutil.copy(WHATIF / name, run / name)
    store = RunStore(run)
    every = store.rows("seed_comparison", executions="all")
    standing = store.rows("seed_comparison")
    strip = lambda r: {k: v for k, v in r.items() if k not in STAMPS}  # noqa: E731
    assert len(every) > len(standing) == len({json.dumps(strip(r), sort_keys=True) for r in every})
    assert strip(standing[-1]) == strip(every[-1])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chapter_05_re_executed_on_a_run_of_profiles_alone_states_the_profiles_served_times(tmp_path, capsys):
    """A run that never measured the client (h200x1-ref: decode-step profiles only) executed again: chapter 05 says its
    client ceiling was not measured, not in a KeyError of an empty table, and its single stream is the one the profile
    run timed (profile.book.served_by_profiles), stated per slice depth: not "nothing measured"."""
    run = tmp_path / "h200x1-ref"
    shutil.copytree(Path(WHATIF).parent / "h200x1-ref", run, ignore=shutil.ignore_patterns("traces"))
    rc = main(["html", str(run), "--refresh", "05", "--out", str(tmp_path / "site")])
    err = capsys.readouterr().err
    assert rc == 0 and "nothing measured" not in err, err
    assert "KeyError" not in err
    page = (tmp_path / "site" / "05_benchmark_single_stream.html").read_text()
    assert "client ceiling: not measured in this run" in page
    assert "timed by the profile run" in re.sub(r"<[^>]+>", "", page)     # the glossary links "profile run"
