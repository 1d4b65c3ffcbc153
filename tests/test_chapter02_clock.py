"""Chapter 02 of the embedded book does the same work whatever engine environments the machine has cached; -p asks more.

A cache holding an SGLang 0.5.9 environment (its record only: an interpreter that cannot run, so any ask of it fails
and is recorded) stands for a used machine. The embedded book's chapter 02 asks none of it and says so; with
-p cached_versions=true it asks it (the seed case, the static reading, the matrix), as the notebook's own default does.
"""

import json

import pytest

from servebook.book import run_book
from servebook.params import model_defaults
from servebook.results import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def used_cache(cache_without_engines, tmp_path, monkeypatch):
    view = tmp_path / "cache"
    view.mkdir()
    for entry in cache_without_engines.iterdir():
        (view / entry.name).symlink_to(entry.resolve())
    env = view / "engines" / "sglang-0.5.9"
    env.mkdir(parents=True)
    meta = {"engine": "sglang", "version": "0.5.9", "python": str(tmp_path / "no-python"), "package_dir": str(tmp_path)}
    (env / "servebook_env.json").write_text(json.dumps(meta))
    monkeypatch.setenv("SERVEBOOK_CACHE", str(view))
    return view


def _chapter_02(tmp_path, name, **extra):
    result = run_book({"smoke": True}, out=tmp_path / name / "site", runs_root=tmp_path / name / "runs", only=["02"],
                      extra=extra, progress=None)
    store = RunStore(result.run_dir)
    nb = json.loads((result.run_dir / "notebooks" / "02_read_backend_selection.ipynb").read_text())
    page = "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")  # what the cells printed
                   for c in nb["cells"] for o in c.get("outputs", []))
    asked = [f for f in store.rows("failures") if "sglang" in json.dumps(f)]
    return result.chapters[0], store, page, asked


@pytest.mark.timeout(600)
def test_the_embedded_book_asks_no_cached_environment_and_p_asks_them(tmp_path, used_cache):
    from servebook.selection import list_engines

    assert [e["version"] for e in list_engines()] == ["0.5.9"]
    assert model_defaults("embedded", "02")["cached_versions"] is False
    row, store, page, asked = _chapter_02(tmp_path, "default")
    assert row["status"] == "ok", row
    assert not asked and not store.rows("selection_matrix")
    assert not [r for r in store.rows("selection") if "sglang" in json.dumps(r)]
    assert "cached engine environments are not asked in this book (cached_versions=False)" in page
    assert "sglang==0.5.9: not asked in this book (cached, but cached_versions is off" in page
    # -p asks for more: the cached version is asked (and, its interpreter missing, each ask is a recorded failure)
    row, store, page, asked = _chapter_02(tmp_path, "asked", cached_versions=True)
    assert asked, store.rows("failures")
    assert "not asked in this book" not in page
