"""``servebook html --refresh NN`` executes a chapter with the parameters its recorded execution used (the execution
that measured it, else its executed notebook), says which it reused, and an explicit ``-p`` wins
(servebook.recorded.recorded_parameters)."""

from __future__ import annotations

import json
import shutil

import pytest

from servebook.recorded import recorded_parameters
from servebook.chapters import chapters, notebook_parameters
from servebook.cli import main
from servebook.paths import data_dir
from servebook.results import RunStore

TRUST = data_dir() / "runs" / "h200x1-trust"


def _chapter(number: str):
    c = next(c for c in chapters() if c.number == number)
    return c, notebook_parameters(c.source)


def _copy(tmp_path):
    run = tmp_path / "h200x1-trust"
    shutil.copytree(TRUST, run, ignore=shutil.ignore_patterns("logs", "bench_serving*", "*.log"))
    return run


def _papermill(run, stem: str) -> dict:
    return json.loads((run / "notebooks" / f"{stem}.ipynb").read_text())["metadata"]["papermill"]["parameters"]


def _forget_the_notebooks_sweep(run):
    """The executed notebook as a refresh with the notebook's defaults left it (the case before this fix): no sweep
    parameter; only the execution that measured chapter 05 recorded them (the manifest's resumption)."""
    path = run / "notebooks" / "05_benchmark_single_stream.ipynb"
    nb = json.loads(path.read_text())
    for k in ("requests_per_level", "level_time_budget_s", "saturation_patience"):
        nb["metadata"]["papermill"]["parameters"].pop(k)
    path.write_text(json.dumps(nb))


def test_the_measuring_execution_is_read_from_the_manifest_for_rows_from_before(tmp_path):
    """h200x1-trust's chapter 05 was measured in the resumption of 2026-12-02T04:16 with 3 requests per level, 15 s per
    level and a patience of 1; its chapters row predates rows that record parameters, so the manifest's resumption that
    ran it says so. The model path of the GPU host (/tmp/models/kimi-slice) reads the run's copy."""
    run = _copy(tmp_path)
    _forget_the_notebooks_sweep(run)
    got, source = recorded_parameters(RunStore(run), *_chapter("05"))
    assert {k: got[k] for k in ("requests_per_level", "level_time_budget_s", "saturation_patience", "input_len", "max_tokens")} == {
        "requests_per_level": 3, "level_time_budget_s": 15, "saturation_patience": 1, "input_len": 32, "max_tokens": 64}
    assert got["model"] == str(run / "models" / "kimi-slice")
    assert "measure" not in got and "run_dir" not in got
    assert source.startswith("the execution that measured it (2026-12-02T04:28:52")


def test_a_chapter_row_that_records_its_parameters_wins_over_the_manifest(tmp_path):
    run = _copy(tmp_path)
    store = RunStore(run)
    store.append("chapters", {"chapter": "05_benchmark_single_stream", "status": "ok", "parameters": {"requests_per_level": 7}})
    got, _ = recorded_parameters(store, *_chapter("05"))
    assert got["requests_per_level"] == 7 and got["input_len"] == 32  # the rest from the executed notebook


def test_a_chapter_that_measures_nothing_reuses_its_executed_notebook(tmp_path):
    run = _copy(tmp_path)
    got, source = recorded_parameters(RunStore(run), *_chapter("06"))
    assert got["compare_with"] == "data/runs/h200x1-live" and "notebook" in source


@pytest.mark.slow
def test_refresh_reuses_the_recorded_parameters_and_an_explicit_one_wins(tmp_path, capsys):
    """The whole command on a copy of the run: the parameters cell of the refreshed chapter holds the recorded values,
    the line says which were reused, the new ``chapters`` row records them; ``-p`` overrides one."""
    run = _copy(tmp_path)
    _forget_the_notebooks_sweep(run)
    assert main(["html", str(run), "--refresh", "05", "-p", "saturation_patience=2", "--out", str(tmp_path / "site")]) == 0
    said = capsys.readouterr().out
    assert "chapter 05: reusing the parameters the execution that measured it (2026-12-02T04:28:52+00:00) used:" in said
    assert "requests_per_level=3" in said and "saturation_patience" not in said.split("used:")[1].split("\n")[0]
    ran = _papermill(run, "05_benchmark_single_stream")
    assert (ran["requests_per_level"], ran["level_time_budget_s"], ran["saturation_patience"], ran["measure"]) == (3, 15, 2, False)
    row = RunStore(run).rows("chapters")[-1]
    assert row["refreshed"] and row["parameters"]["requests_per_level"] == 3 and "measure" not in row["parameters"]
    # the page's "run this yourself" command executes it again without the reused ones, with the one given
    import nbformat

    from servebook.pages import commands

    nb = nbformat.read(run / "notebooks" / "05_benchmark_single_stream.ipynb", as_version=4)
    (again,) = commands(nb, RunStore(run).manifest, "05", run)["tables"]
    assert "-p saturation_patience=2" in again and "requests_per_level" not in again and "level_time_budget_s" not in again, again
