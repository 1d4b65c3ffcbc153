"""Bad input answered (issue 42, item 2): each case a one-line error or warning before work starts where it can be
known then, a non-zero exit, and nothing recorded lost. Real components: the CLI, the fake SSE server answering every
completion with HTTP 500, recorded runs copied from data/runs, the real transformers engine's backend list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servebook.cli import main
from servebook.results import RunStore

ROOT = Path(__file__).resolve().parents[1]
LIVE = ROOT / "data" / "runs" / "h200x1-live"


@pytest.fixture(autouse=True)
def _quiet_tokenizer_warning():
    """transformers' logger keeps the stderr of the test that first loaded the tokenizer (pytest's capture, closed
    after it): its one warning would print a logging traceback into the next test's stderr."""
    import transformers

    before = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    yield
    transformers.logging.set_verbosity(before)


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.startswith("servebook")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# -- servebook bench against a server whose every completion fails ------------------------------------------------
def _bench_argv(url: str, model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["bench", "--url", url, "--tokenizer", str(model_dir), "--runs", "2", "--warmup", "0", "--output-len", "8",
            "--input-len", "8", "--concurrency", "1,2", "--requests-per-level", "1", "--out", str(out), *extra]


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_against_a_server_that_fails_every_completion_stops_before_measuring(embedded_model, tmp_path, capsys, as_json):
    from servebook.bench import FakeSSEServer

    with FakeSSEServer(fail_status=500) as fake:
        rc = main(_bench_argv(fake.url, embedded_model, tmp_path / "run", *(["--json"] if as_json else [])))
    assert rc == 2
    _one_line(capsys, "first completion", "HTTP 500", "nothing was measured")
    assert not (tmp_path / "run").exists()  # no run directory of empty rows


def test_bench_whose_every_request_failed_exits_non_zero_and_keeps_the_rows(embedded_model, tmp_path, capsys, monkeypatch):
    """Past the first completion (a server that fails later): every level whose requests all failed is named, the JSON
    carries n/a-free nulls, the rows and their errors stay in the run, and the exit status is 1."""
    from servebook.bench import FakeSSEServer
    from servebook.bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "_probe_completion", lambda *a, **k: None)
    for extra in ([], ["--json"]):
        with FakeSSEServer(fail_status=500) as fake:
            rc = main(_bench_argv(fake.url, embedded_model, tmp_path / f"run{len(extra)}", *extra))
        captured = capsys.readouterr()
        assert rc == 1
        err = [line for line in captured.err.splitlines() if line.startswith("servebook")]
        assert len(err) == 1 and "C=1, C=2 failed (HTTP 500" in err[0] and "Traceback" not in captured.err, captured.err
        if extra:
            out = json.loads(captured.out)
            assert [s["ok"] for s in out] == [0, 0] and out[0]["decode_tok_s_mean"] is None
        else:
            assert "decode n/a" in captured.out and "throughput n/a" in captured.out
        store = RunStore(tmp_path / f"run{len(extra)}")
        assert len(store.rows("bench_requests")) == 4 and len(store.rows("failures")) == 4


# -- servebook html / book --out ---------------------------------------------------------------------------------
def test_html_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["html", str(tmp_path / "nowhere"), "--out", str(tmp_path / "site")]) == 2
    _one_line(capsys, "run_dir", "does not exist")
    (tmp_path / "plain").mkdir()
    assert main(["html", str(tmp_path / "plain"), "--out", str(tmp_path / "site")]) == 2
    _one_line(capsys, "run_dir", "no manifest.json")
    assert main(["html", str(ROOT / "data" / "runs"), "--out", str(tmp_path / "site")]) == 2
    _one_line(capsys, "holds runs, not one run")
    assert not (tmp_path / "site" / "index.html").exists()  # no empty book


def test_html_of_a_run_with_no_executed_chapter(tmp_path, capsys):
    RunStore.at(tmp_path / "run").write_manifest({"parameters": {}})
    assert main(["html", str(tmp_path / "run"), "--out", str(tmp_path / "site")]) == 2
    _one_line(capsys, "no executed chapter")


def test_html_out_that_cannot_be_made(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    assert main(["html", str(LIVE), "--out", str(tmp_path / "a-file" / "site")]) == 2
    _one_line(capsys, "parameter 'out'", "cannot create it")


def test_book_out_that_cannot_be_made_is_said_before_any_chapter(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    rc = main(["book", "--only", "06", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "a-file" / "site")])
    assert rc == 2
    _one_line(capsys, "parameter 'out'", "cannot create it")
    assert not (tmp_path / "runs").exists()  # nothing ran, no run directory made


# -- damaged rows: compare and html --refresh-findings -----------------------------------------------------------------
def _tear(run: Path, table: str, line: int) -> None:
    path = run / f"{table}.jsonl"
    lines = path.read_text().splitlines(True)
    lines[line] = lines[line][: len(lines[line]) // 2] + "\n"
    path.write_text("".join(lines))


def _latest_single(run: Path) -> int:
    rows = [json.loads(x) for x in (run / "bench_summary.jsonl").read_text().splitlines()]
    return max(i for i, r in enumerate(rows) if r.get("phase") == "single" and r["label"].startswith("sglang"))


def test_compare_with_a_torn_row_says_so_and_reports_no_method_difference(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(LIVE, a)
    shutil.copytree(LIVE, b)
    line = _latest_single(b)
    _tear(b, "bench_summary", line)
    assert RunStore(b).damaged() == {"bench_summary": [line + 1]}
    rc = main(["compare", str(a), str(b)])
    out = capsys.readouterr()
    assert rc == 1
    warn = [x for x in out.err.splitlines() if x.startswith("servebook compare: warning")]
    assert len(warn) == 1 and f"bench_summary.jsonl line {line + 1}" in warn[0], out.err
    single = next(x for x in out.out.splitlines() if x.startswith("| sglang") and "C=1 (single stream)" in x)
    assert "unreadable rows (b's bench_summary.jsonl line" in single and "measured differently" not in single, single
    assert main(["compare", str(a), str(LIVE)]) == 0  # whole runs: no warning, exit 0
    assert "warning" not in capsys.readouterr().err


def test_html_refresh_findings_on_damaged_tables_warns_first(tmp_path, capsys, monkeypatch):
    from servebook import book, render

    run = tmp_path / "run"
    shutil.copytree(LIVE, run)
    _tear(run, "bench_summary", _latest_single(run))
    seen = []

    def refresh(run_dir, number, extra, cell_timeout):  # chapter 06's execution itself is tested in test_findings.py
        seen.append(capsys.readouterr().err)
        return {"status": "ok", "error": None}

    monkeypatch.setattr(book, "refresh_chapter", refresh)
    monkeypatch.setattr(render, "render_book", lambda run_dir, out: Path(out) / "index.html")
    assert main(["html", str(run), "--refresh-findings", "--out", str(tmp_path / "site")]) == 1
    assert len(seen) == 1 and "warning" in seen[0] and "bench_summary.jsonl line" in seen[0] and "cannot be read" in seen[0]


# -- --engine, the model's config.json, -p backends ------------------------------------------------------------------
def test_engine_version_that_is_not_a_version(tmp_path, capsys):
    assert main(["book", "--engine", "vllm==0.0.0-nope", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s")]) == 2
    _one_line(capsys, "parameter 'engine'", "not a release version")


def test_engine_version_not_installed_here_names_what_is(tmp_path, capsys):
    import transformers

    rc = main(["book", "--engine", "transformers==4.0.0", "--only", "06", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s")])
    assert rc == 2
    _one_line(capsys, "parameter 'engine'", f"has transformers {transformers.__version__}", "drop ==VERSION")
    assert not (tmp_path / "runs").exists()


def test_engine_version_not_prepared_says_how_to_add_it(tmp_path, monkeypatch):
    from servebook.errors import ParameterError
    from servebook.params import check_engine_here

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SERVEBOOK_PYTHON_VLLM", raising=False)
    with pytest.raises(ParameterError, match=r"servebook engines add vllm==0\.26\.0"):
        check_engine_here("vllm==0.26.0", "local")
    check_engine_here("vllm==0.26.0", "ssh://u@box")  # a remote host answers for itself
    check_engine_here("vllm==0.26.0", "local", profile="rtx-pro-6000")  # a what-if prepares it itself


@pytest.mark.parametrize("config, says", [("{not json", "not valid JSON (line 1"), ('{"hidden_size": 8}', "no model_type")])
def test_a_broken_config_json_stops_the_book_before_chapter_01(embedded_model, tmp_path, capsys, config, says):
    model = tmp_path / "model"
    shutil.copytree(embedded_model, model)
    (model / "config.json").write_text(config)
    assert main(["book", "--model", str(model), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s")]) == 2
    _one_line(capsys, "parameter 'model'", says)
    assert not (tmp_path / "runs").exists()


def test_an_unknown_backend_is_refused_before_any_server_starts(tmp_path, capsys):
    rc = main(["book", "--only", "03", "-p", "backends=sdpa,nosuch", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s")])
    assert rc == 2
    _one_line(capsys, "parameter 'backends'", "'nosuch'", "its own list: eager")
    assert not (tmp_path / "runs").exists()


def test_chapter_03_leaves_an_unknown_backend_out_with_its_reason(capsys):
    """Where the book could not check it (a remote host, the notebook run alone): chapter 03 starts no server for it."""
    from servebook.backends.report import candidates_for
    from servebook.engines import get_engine

    picked, skipped = candidates_for(get_engine("transformers"), "eager,nosuch")
    assert picked == ["eager"]
    (row,) = [s for s in skipped if s["attention"] == "nosuch"]
    assert "not a value transformers accepts" in row["reason"] and "no server was started" in row["reason"]
    assert "'nosuch', which transformers does not accept" in capsys.readouterr().out


def test_again_without_a_run_id(tmp_path, capsys):
    assert main(["book", "--again", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s")]) == 2
    _one_line(capsys, "parameter 'again'", "--run-id")


def test_chapter_02_again_on_a_static_only_environment_is_refused_before_it_runs(tmp_path, capsys, monkeypatch):
    """A run whose chapter 02 answered sglang==0.5.16 from the engine's code run, executed again where that version's
    environment is a static-only build: its answers would stand over the recorded ones, so nothing runs and the error
    names the command that builds a full one. The same run with the environment importable is not refused here."""
    from servebook.selection.envs import weaker_here

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    shutil.copytree(LIVE, run, ignore=shutil.ignore_patterns("traces", "notebooks", "logs"))
    before = (run / "selection.jsonl").read_text()
    import sys

    env = tmp_path / "cache" / "engines" / f"sglang-0.5.16-py{sys.version_info.major}{sys.version_info.minor}"
    env.mkdir(parents=True)
    meta = {"engine": "sglang", "version": "0.5.16", "python": str(env / "bin" / "python"), "package_dir": str(env / "sglang"),
            "cuda": None, "cuda_source": ""}   # the fields a prepared environment's metadata carries
    (env / "servebook_env.json").write_text(json.dumps({**meta, "importable": False, "requires_installed": []}))
    assert "sglang==0.5.16" in weaker_here(RunStore.at(run))
    assert main(["html", str(run), "--refresh", "02", "--out", str(tmp_path / "site")]) == 2
    _one_line(capsys, "static-only build", "servebook engines add sglang==0.5.16 --force")
    assert (run / "selection.jsonl").read_text() == before and not (tmp_path / "site" / "index.html").exists()
    (env / "servebook_env.json").write_text(json.dumps({**meta, "importable": True, "requires_installed": ["torch"]}))
    assert weaker_here(RunStore.at(run)) == []


def test_resuming_chapter_02_on_a_static_only_environment_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """The same refusal on ``servebook book --run-id ID --only 02``: a copy of the what-if book, whose chapter 02 answered
    vllm==0.33.0 from the engine's code run, resumed where that version's environment is a static-only build."""
    import sys

    from servebook.book import run_book
    from servebook.errors import EngineError

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    env = tmp_path / "cache" / "engines" / f"vllm-0.33.0-py{sys.version_info.major}{sys.version_info.minor}"
    env.mkdir(parents=True)
    (env / "servebook_env.json").write_text(json.dumps({"engine": "vllm", "version": "0.33.0", "python": str(env / "bin" / "python"),
                                                        "package_dir": str(env / "vllm"), "cuda": None, "cuda_source": "",
                                                        "importable": False, "requires_installed": []}))
    run = RunStore.open(tmp_path / "runs", run_id="w").path
    shutil.copytree(ROOT / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9", run, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("traces", "notebooks", "logs"))
    manifest = (run / "manifest.json").read_text()
    with pytest.raises(EngineError, match=r"vllm==0\.33\.0 answering from the engine's own code.*engines add vllm==0\.33\.0"):
        run_book({"profile": "rtx-pro-6000", "engine": "sglang==0.5.9", "model": "kimi-k2.5", "smoke": True},
                 out=tmp_path / "site", runs_root=tmp_path / "runs", run_id="w", only=["02"], progress=None)
    assert (run / "manifest.json").read_text() == manifest   # refused before the run was opened as a resumption
