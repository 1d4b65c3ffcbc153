"""Provenance and the commands a newcomer types first: a run states the exact code it ran (a real git repository,
clean and dirty, rebuilt from the saved diff), the index page says it for every manifest form, a what-if prepares
its pinned engine before chapter 01 (or stops there naming the command), and a replay prints the recorded probe."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from servebook import book, provenance
from servebook.render import render_book
from servebook.provenance import describe_revision, git_provenance
from servebook.cli import main
from servebook.errors import EngineError
from servebook.paths import book_root
from servebook.results import RunStore


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A checkout shaped like the book: lib/, notebooks/, a README, one commit."""
    r = tmp_path / "book"
    (r / "lib" / "pkg").mkdir(parents=True)
    (r / "notebooks").mkdir()
    (r / "lib" / "pkg" / "mod.py").write_text("X = 1\n")
    (r / "notebooks" / "01_first.py").write_text("# # 01. First\nprint(1)\n")
    (r / "README.md").write_text("the book\n")
    (r / ".gitignore").write_text("__pycache__/\n/runs/\n")
    _git(r, "init", "-q")
    for key, value in (("diff.noprefix", "true"), ("color.ui", "always")):  # a user's taste must not break the diff
        _git(r, "config", key, value)
    _git(r, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(r, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return r


def _dirty(repo: Path) -> None:
    (repo / "lib" / "pkg" / "mod.py").write_text("X = 2\n")  # unstaged change
    (repo / "README.md").write_text("the book, staged\n")
    _git(repo, "add", "README.md")  # staged change
    (repo / "lib" / "pkg" / "new.py").write_text("Y = 3\n")  # untracked code
    (repo / "notebooks" / "07_new.py").write_text("# # 07. New\n")  # untracked chapter
    (repo / "scratch.txt").write_text("not code\n")  # untracked, outside lib/ and notebooks/
    (repo / "lib" / "pkg" / "__pycache__").mkdir()
    (repo / "lib" / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\0ignored")  # ignored by .gitignore


def test_a_clean_tree_is_its_commit(repo):
    info, diff = git_provenance(repo)
    assert info == {"commit": _git(repo, "rev-parse", "HEAD").strip(), "dirty": False}
    assert diff == b""
    assert describe_revision(info) == f"commit {info['commit']} (clean tree)"


def test_a_dirty_tree_is_its_commit_and_the_hash_of_a_diff_that_rebuilds_it(repo, tmp_path):
    head = _git(repo, "rev-parse", "HEAD").strip()
    _dirty(repo)
    info, diff = git_provenance(repo)
    assert info["commit"] == head and info["dirty"] is True
    assert info["diff_sha256"] == hashlib.sha256(diff).hexdigest()
    assert info["untracked"] == ["lib/pkg/new.py", "notebooks/07_new.py"]
    assert b"scratch.txt" not in diff and b"__pycache__" not in diff
    # the commit plus the diff is the tree that ran: apply it to a fresh clone and compare file by file
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    _git(clone, "checkout", "-q", head)
    subprocess.run(["git", "-C", str(clone), "apply", "--binary", "-"], input=diff, check=True)
    for rel in ("lib/pkg/mod.py", "lib/pkg/new.py", "notebooks/07_new.py", "README.md"):
        assert (clone / rel).read_bytes() == (repo / rel).read_bytes(), rel
    # another change is another hash
    (repo / "lib" / "pkg" / "new.py").write_text("Y = 4\n")
    assert git_provenance(repo)[0]["diff_sha256"] != info["diff_sha256"]


def test_only_an_untracked_file_under_lib_makes_the_tree_dirty(repo):
    (repo / "scratch.txt").write_text("not code\n")
    assert git_provenance(repo)[0]["dirty"] is False
    (repo / "lib" / "pkg" / "new.py").write_text("Y = 3\n")
    assert git_provenance(repo)[0]["dirty"] is True


def test_recorded_runs_and_renders_are_outputs_not_code(repo):
    # re-rendering one committed run rewrites its tables and its rendered pages: the next run's code is still clean
    for rel in ("data/runs/r1/chapters.jsonl", "rendered/r1/index.html", "data/models/card.json"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("first\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a run, its render, a card")
    (repo / "data" / "runs" / "r1" / "chapters.jsonl").write_text("first\nrefreshed\n")
    (repo / "rendered" / "r1" / "index.html").unlink()
    assert git_provenance(repo) == ({"commit": _git(repo, "rev-parse", "HEAD").strip(), "dirty": False}, b"")
    (repo / "data" / "models" / "card.json").write_text("changed\n")  # an input of the run: it counts
    info, diff = git_provenance(repo)
    assert info["dirty"] is True and b"data/models/card.json" in diff and b"rendered" not in diff


def test_not_a_checkout(tmp_path):
    assert git_provenance(tmp_path) == (None, b"")
    assert describe_revision(None) == "git revision not recorded"


def test_the_run_saves_its_diff_and_leaves_its_own_directory_out(repo, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_HOME", str(repo))
    assert book_root() == repo
    (repo / "data" / "runs" / "r1").mkdir(parents=True)
    (repo / "data" / "runs" / "r1" / "manifest.json").write_text("{}\n")  # a committed run, resumed below
    _git(repo, "add", "data")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a run")
    _dirty(repo)
    store = RunStore.at(repo / "data" / "runs" / "r1")
    store.write_manifest({"resumed": True})  # a change inside the run itself: not code
    info = provenance.record_code(store)
    saved = (store.path / info["diff"]).read_bytes()
    assert hashlib.sha256(saved).hexdigest() == info["diff_sha256"]
    assert b"data/runs/r1" not in saved and b"lib/pkg/new.py" in saved
    assert "diff_saved_as_is" not in info


def test_the_manifest_states_the_code(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_HOME", str(repo))
    _dirty(repo)
    store = book._open_run(tmp_path / "runs", "r1", {"host": "local", "engine": "transformers"}, lambda _m: None)
    rev = store.manifest["git_revision"]
    assert rev["commit"] == _git(repo, "rev-parse", "HEAD").strip() and rev["dirty"] is True
    assert (store.path / rev["diff"]).is_file()
    resumed = book._open_run(tmp_path / "runs", "r1", {"host": "local", "engine": "transformers"}, lambda _m: None)
    assert resumed.manifest["git_revision"] == rev  # the run's identity stays as first recorded
    assert resumed.manifest["resumptions"][0]["git_revision"]["diff_sha256"] == rev["diff_sha256"]


@pytest.mark.parametrize("revision, shown", [
    ({"commit": "3d8900eea752", "dirty": False}, "commit 3d8900eea752 (clean tree)"),
    ({"commit": "3d8900eea752", "dirty": True, "diff_sha256": "9f1c" * 16, "diff": "code-9f1c9f1c9f1c.diff"},
     "commit 3d8900eea752 + uncommitted changes (diff sha256 9f1c9f1c9f1c9f1c, saved as code-9f1c9f1c9f1c.diff)"),
    ("b3dc5f77c264-dirty", "b3dc5f77c264-dirty (recorded without its diff)"),
    ("fdc4e675b37b", "commit fdc4e675b37b"),
    (None, "git revision not recorded"),
])
def test_the_index_page_names_the_code(tmp_path, revision, shown):
    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"git_revision": revision, "parameters": {"engine": "transformers", "model": "embedded"}})
    page = render_book(store.path, tmp_path / "site").read_text()
    assert f"<tr><th>code</th><td>{shown}</td></tr>" in page


def test_the_index_page_names_the_code_of_a_refreshed_chapter(tmp_path):
    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"git_revision": "fdc4e675b37b", "parameters": {}})
    store.append("chapters", {"chapter": "06_findings", "status": "ok", "refreshed": True,
                              "git_revision": {"commit": "aaaa1111", "dirty": False}})
    page = render_book(store.path, tmp_path / "site").read_text()
    assert "commit fdc4e675b37b<br>06 executed again on these tables: commit aaaa1111 (clean tree)" in page


# -- a fresh machine: the README's what-if commands in the order written ----------------------------------

WHATIF = ["book", "--profile", "rtx-pro-6000", "--engine", "sglang==0.5.9", "--model", "kimi-k2.5"]


def test_a_whatif_prepares_its_engine_first_and_stops_before_chapter_01_when_it_cannot(tmp_path, monkeypatch, capsys):
    from servebook.selection import envs

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))  # a fresh machine: nothing prepared
    asked = []

    def add_engine(spec, progress=print, **_kw):
        asked.append(spec)
        progress(f"[{spec}] creating the environment")
        raise EngineError(f"{spec} could not be installed; versions on the index: none found (is the index reachable?)")

    monkeypatch.setattr(envs, "add_engine", add_engine)
    rc = main([*WHATIF, "--only", "01", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "site")])
    out, err = capsys.readouterr()
    assert rc == 2 and asked == ["sglang==0.5.9"]
    assert "preparing one" in out and "[sglang==0.5.9] creating the environment" in out  # progress, as it happens
    assert len(err.strip().splitlines()) == 1 and "servebook engines add sglang==0.5.9" in err
    assert not (tmp_path / "runs").exists()  # stopped before any chapter: no run was started


def test_only_a_whatif_with_a_pinned_engine_missing_its_environment_prepares_one(tmp_path, monkeypatch):
    from servebook.selection import envs

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    asked = []
    add_engine = envs.add_engine  # the real one: its heartbeat is checked below
    monkeypatch.setattr(envs, "add_engine", lambda spec, progress=None, **_kw: asked.append(spec))
    say = lambda _m: None  # noqa: E731
    book._prepare_engine({"profile": "", "engine": "sglang==0.5.9"}, {}, say)  # a real host: its own environment
    book._prepare_engine({"profile": "rtx-pro-6000", "engine": "sglang"}, {}, say)  # no version pinned
    book._prepare_engine({"profile": "rtx-pro-6000", "engine": "sglang==0.5.9"}, {"engine_python": "/opt/py"}, say)
    assert asked == []
    # a long build says it is still working (add_engine's heartbeat, which `servebook engines add` shows too)
    monkeypatch.setattr(envs, "add_engine", add_engine)
    monkeypatch.setattr(envs, "_build_env", lambda d, engine, version, *_a: (asked.append(f"{engine}=={version}"), time.sleep(0.5)))
    monkeypatch.setattr(envs, "_HEARTBEAT_S", 0.1)
    lines = []
    book._prepare_engine({"profile": "rtx-pro-6000", "engine": "vllm==0.26.0"}, {}, lines.append)
    assert asked == ["vllm==0.26.0"]
    assert any(line.strip().startswith("still preparing vllm==0.26.0") for line in lines), lines
    n = len(lines)
    time.sleep(0.3)
    assert len(lines) == n  # and stops when the build is done
    # prepared already: nothing is built again
    d = envs._env_dir("sglang", "0.5.9")
    d.mkdir(parents=True)
    (d / "servebook_env.json").write_text(json.dumps({"engine": "sglang", "version": "0.5.9", "python": "/x/python",
                                                      "package_dir": "/x/sglang", "cuda": None, "cuda_source": ""}))
    book._prepare_engine({"profile": "rtx-pro-6000", "engine": "sglang==0.5.9"}, {}, say)
    assert asked == ["vllm==0.26.0"]


def test_engines_add_says_it_is_still_preparing(tmp_path, monkeypatch, capsys):
    """`servebook engines add` hears the heartbeat the book does while pip is quiet, and it stops with the build."""
    from servebook.selection import envs

    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(envs, "_HEARTBEAT_S", 0.1)

    def build(d, engine, version, *_a):
        time.sleep(0.5)
        return envs.EngineEnv(engine, version, "/x/python", "/x/sglang", "cached")

    monkeypatch.setattr(envs, "_build_env", build)
    assert main(["engines", "add", "sglang==0.5.9"]) == 0
    out = capsys.readouterr().out
    assert "still preparing sglang==0.5.9" in out and "sglang 0.5.9: /x/python" in out
    time.sleep(0.3)
    assert "still preparing" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.envs
def test_the_readme_whatif_runs_on_a_fresh_cache(tmp_path, monkeypatch):
    """The first what-if command of the README on a machine with nothing prepared: it builds SGLang 0.5.9's
    environment itself (minutes; needs the package index) and chapter 01 asks that version's helpers."""
    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    lines = []
    result = book.run_book({"profile": "rtx-pro-6000", "engine": "sglang==0.5.9", "model": "kimi-k2.5"},
                           out=tmp_path / "site", runs_root=tmp_path / "runs", only=["01"], progress=lines.append)
    assert any(line.startswith("[sglang 0.5.9] ready in") for line in lines), lines
    assert result.ok, result.chapters
    store = RunStore(result.run_dir)
    assert not [f for f in store.rows("failures") if f["step"] == "engine environment"]
    assert any(r.get("engine") == "sglang" and r.get("version") == "0.5.9" for r in store.rows("engines"))


# -- a replayed probe ---------------------------------------------------------------------------------------

def test_the_replayed_probe_is_the_recorded_one(capsys):
    run = book_root() / "data" / "runs" / "h200x1-rec"
    assert main(["probe", "--host", f"replay:{run}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((run / "probe.json").read_text())
    assert main(["probe", "--host", f"replay:{run}"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "9.0" in out


def test_a_replayed_probe_refuses_options_it_cannot_honour(capsys):
    run = book_root() / "data" / "runs" / "h200x1-rec"
    assert main(["probe", "--host", f"replay:{run}", "--no-p2p"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "drop --no-p2p" in err


# -- the CLI's -p, one parser for book and html ------------------------------------------------------------

@pytest.mark.parametrize("command", [["book", "--only", "06"], ["html", "RUN", "--refresh", "06"]])
def test_a_chapter_parameter_without_a_value_is_one_line(command, tmp_path, capsys):
    argv = [str(tmp_path) if a == "RUN" else a for a in command]
    assert main([*argv, "-p", "max_tokens", "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'max_tokens'" in err and "expected NAME=VALUE" in err
