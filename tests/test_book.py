"""The whole book, executed with papermill in smoke mode against the real embedded engine.

Runs once per test session (a few minutes on 2 cores); the tests assert on what the run
recorded, not merely that nothing raised.
"""

import json

import pytest

from servebook.book import run_book
from servebook.results import RunStore


@pytest.fixture(scope="module")
def book(tmp_path_factory, embedded_model, no_engine_envs_in_module):
    root = tmp_path_factory.mktemp("book")
    result = run_book({"smoke": True}, out=root / "site", runs_root=root / "runs", progress=print)
    return result


# the smoke book as CI runs it: no cached SGLang/vLLM environment asked (conftest.py: cache_without_engines)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_engine_envs_in_module")]


def test_every_chapter_ran(book):
    failed = [(c["chapter"], c["error"]) for c in book.chapters if c["status"] != "ok"]
    assert not failed
    assert [c["chapter"][:2] for c in book.chapters] == ["01", "02", "03", "04", "05", "06"]


def test_manifest(book):
    m = RunStore(book.run_dir).manifest
    for key in ("parameters", "versions", "git_revision", "started", "finished", "host_fingerprint", "servebook_version"):
        assert key in m, key
    for key in ("servebook", "torch", "transformers", "nccl", "driver"):
        assert key in m["versions"], key
    assert m["parameters"]["smoke"] is True and m["parameters"]["engine"] == "transformers"
    assert m["host_fingerprint"]["cpu_count"] >= 1


def test_two_attention_implementations_really_served(book):
    rows = RunStore(book.run_dir).rows("backends")
    ok = [r for r in rows if r["outcome"] == "ok"]
    reported = {r["reported"] for r in ok}
    assert len(reported) >= 2, rows  # the engine itself reported two different implementations
    for r in ok:
        assert r["port_free_after"] is True
        assert r["agreement"] is not None and r["decode_tok_s"] > 0


def test_decode_measured_from_streamed_tokens(book):
    store = RunStore(book.run_dir)
    summary = [r for r in store.rows("bench_summary") if r.get("phase") == "single"]
    assert summary and summary[0]["decode_tok_s_mean"] > 1
    requests = [r for r in store.rows("bench_requests") if r.get("phase") == "single" and r.get("ok", True)]
    assert requests
    for r in requests:
        assert r["output_tokens"] >= 2 and r["ttft_s"] < r["e2e_s"]
        decode_s = sum(r["chunk_gaps_ms"]) / 1e3  # the first token's read -> the last token's; the wait for [DONE] is tail_s
        assert r["decode_tok_s"] == pytest.approx((r["output_tokens"] - 1) / decode_s, rel=1e-4)
        assert r["e2e_s"] - r["ttft_s"] == pytest.approx(decode_s + r["tail_s"], abs=1e-5) and r["decode_timed_to"] == "last token"


def test_rendered_site(book):
    index = book.index.read_text()
    pages = sorted(p.name for p in book.out.glob("0*.html"))
    assert len(pages) == 6
    for p in pages:
        assert p in index
    third = (book.out / "03_force_each_backend.html").read_text()
    assert "02_read_backend_selection.html" in third and "04_tune_nccl.html" in third
    for p in pages:  # the parameters folded under the table of what this run changed; the book's setup cell left out
        page = (book.out / p).read_text()
        assert 'class="sb-params-table"' in page and 'class="sb-code sb-params"' in page and "display.max_colwidth" not in page, p


def test_resume_does_not_remeasure(book, tmp_path):
    """Re-running a chapter with the same run id keeps the rows and adds none."""
    store = RunStore(book.run_dir)
    before = len(store.rows("backends"))
    run_id = book.run_dir.name
    result = run_book({"smoke": True}, out=tmp_path / "site", runs_root=book.run_dir.parent.parent, run_id=run_id,
                      only=["03"], progress=None)
    assert result.run_dir == book.run_dir
    assert result.chapters[0]["status"] == "ok"
    assert len(RunStore(book.run_dir).rows("backends")) == before


def test_a_render_failure_keeps_the_run_and_says_how_to_render(tmp_path, monkeypatch):
    from servebook import book as book_mod
    from servebook.errors import ServebookError

    def broken(*_a, **_k):
        raise ValueError("No template sub-directory with name 'lab' found")

    monkeypatch.setattr(book_mod, "render_book", broken)
    with pytest.raises(ServebookError) as err:
        run_book({"smoke": True}, out=tmp_path / "site", runs_root=tmp_path / "runs", only=["06"], progress=None)
    msg = str(err.value)
    assert "servebook html" in msg and "template" in msg
    run = next((tmp_path / "runs").glob("*/*"))
    store = RunStore.at(run)
    assert [c["status"] for c in store.rows("chapters")] == ["ok"]
    assert any(f["step"] == "render book" for f in store.rows("failures"))
