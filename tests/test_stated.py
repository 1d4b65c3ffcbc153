"""Every committed rendered book states what its run's tables give, and no page contradicts another.

Each prose number a chapter states is written by ``servebook.stated.q``: one helper formats it and tags it with the
quantity it is (``<span class="sb-q" data-q=... data-of=... data-v=...>``). ``check_render`` reads every page of a
render, recomputes each tagged quantity from the run directory its ``run.json`` names (registry
``servebook.stated.QUANTITIES``), and groups the pages' statements by quantity. The answer box at the top of each page
("This run, in short") is checked against the box the renderer would make from the same tables now.

A committed page whose code never used ``q`` predates the tags: its test is skipped, naming the page to regenerate.
The tests below the committed ones make a fresh render from a copy of a recorded run, then damage a copy of a page
or of a table, and see the check fail: the check can fail for real.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from servebook import stated
from servebook.findings import backends, throughput
from servebook.paths import book_root
from servebook.results import RunStore

ROOT = book_root()
RENDERS = sorted(p.parent for p in (ROOT / "rendered").glob("*/run.json"))
PAGES = [(r, p.name) for r in RENDERS for p in sorted(r.glob("0[0-9]_*.html"))]


@lru_cache(maxsize=None)
def _report(render: Path) -> stated.Report:
    return stated.check_render(render)


@pytest.fixture(autouse=True)
def _at_the_book_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # run.json and the runs name paths relative to the book's root, as the renders did


# -- the committed renders --------------------------------------------------------------------------------------
def test_every_render_names_its_run():
    assert RENDERS, "no committed render under rendered/"
    for render in RENDERS:
        run = stated.run_of(render)
        assert (run / "manifest.json").exists(), f"{render.name}/run.json names {run}, which is not a run directory"


@pytest.mark.parametrize("render, page", PAGES, ids=[f"{r.name}/{p}" for r, p in PAGES])
def test_page_states_its_run(render, page):
    report = _report(render)
    if report.pages.get(page) == "predates the tags":
        pytest.skip(f"rendered/{render.name}/{page} predates the stated-quantity tags (its code never calls servebook.stated.q): "
                    f"regenerate it from {Path(report.run).relative_to(ROOT)} with the current notebooks")
    problems = report.of_page(page)
    assert not problems, f"rendered/{render.name}/{page}:\n" + "\n".join(problems)


@pytest.mark.parametrize("render", RENDERS, ids=[r.name for r in RENDERS])
def test_pages_agree(render):
    report = _report(render)
    if len(report.tagged) < 2:
        pytest.skip(f"rendered/{render.name}: {len(report.tagged)} page(s) carry stated-quantity tags, nothing to compare across pages; "
                    f"pages that predate the tags: {', '.join(report.predating) or 'none'}")
    assert not report.across(), f"rendered/{render.name}:\n" + "\n".join(report.across())


@pytest.mark.parametrize("render", RENDERS, ids=[r.name for r in RENDERS])
def test_answer_boxes_state_the_run(render):
    """The box at the top of every page equals chapter 06's statements recomputed from the run's tables now."""
    report = _report(render)
    assert any(stated.box_items(p.read_text()) is not None for p in render.glob("0[0-9]_*.html")), "no page has its answer box"
    problems = [f"{p}: {m}" for p, m in report.box_problems]
    if problems and not report.tagged:
        pytest.skip(f"rendered/{render.name} predates the stated-quantity tags on every page, and its answer boxes differ from chapter 06's "
                    f"statements recomputed now ({len(problems)} pages, e.g. {problems[0]}): regenerate it with the current notebooks")
    assert not problems, f"rendered/{render.name}:\n" + "\n".join(problems)


# -- the helper ------------------------------------------------------------------------------------------------
def test_q_formats_and_tags_the_same_value():
    html = stated.q("single_tok_s", 416.22264699772296, ",.1f", of="sglang/default")
    (s,) = stated.stated_on(html, "p")
    assert (s.name, s.of, s.value, s.text) == ("single_tok_s", "sglang/default", 416.22264699772296, "416.2")
    assert stated.q("change_supported", False, "supported|not supported", of="x").endswith(">not supported</span>")
    assert "<code>" in stated.q("default_backend", "fa3", of="sglang", code=True)
    assert stated.q("single_tok_s", None, ",.1f", of="x") == "n/a"  # nothing measured: shown, not tagged
    with pytest.raises(KeyError):
        stated.q("no_such_quantity", 1)


def test_the_seed_figures_come_from_their_file():
    ref = json.loads((ROOT / "data" / "reference" / "seed-case.json").read_text())
    tok = ref["single_stream_tok_s"]
    text = re.sub(r"<[^>]+>", "", stated.seed_sentence())
    assert f"{tok['sglang']:.1f}" in text and f"{tok['vllm']:.1f}" in text and f"{1 - tok['sglang'] / tok['vllm']:.0%} less" in text
    assert "data/reference/seed-case.json" in text


# -- the check can fail: a fresh render, then damage --------------------------------------------------------------
@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """data/runs/h200x2-live copied, chapter 06 executed again on it (it measures nothing), rendered."""
    from servebook.book import refresh_chapter, render_book

    base = tmp_path_factory.mktemp("stated")
    run = base / "h200x2-live"
    shutil.copytree(ROOT / "data" / "runs" / "h200x2-live", run)  # 3 MB; its model is named relative to the book's root
    row = refresh_chapter(run, "06")
    assert row["status"] == "ok", row
    out = base / "render"
    render_book(run, out)
    return run, out


def _copy(render: Path, to: Path) -> Path:
    shutil.copytree(render, to)
    return to


def _tamper(page: Path, name: str, of: str | None, value, text: str) -> None:
    """Give one tagged quantity of a page another value and text (as a typed-in figure would)."""
    html = page.read_text()
    pattern = re.compile(r'<span(?=[^>]*data-q="%s")%s[^>]*>[^<]*</span>' % (
        re.escape(name), "" if of is None else r'(?=[^>]*data-of="%s")' % re.escape(of)))
    new, n = pattern.subn(f'<span class="sb-q" data-q="{name}"' + (f' data-of="{of}"' if of else "")
                          + f" data-v='{json.dumps(value)}' data-f=\",.1f\">{text}</span>", html, count=1)
    assert n == 1, f"no {name}[{of}] tag on {page.name}"
    page.write_text(new)


def test_a_fresh_render_passes_and_states_what_it_must(fresh):
    run, out = fresh
    report = stated.check_render(out, run)
    assert report.pages["06_findings.html"] == "tagged"
    assert not report.problems and not report.box_problems, report.problems + report.box_problems
    said = {s.key() for s in report.stated}
    (b,) = backends(RunStore(run))
    (t,) = throughput(RunStore(run))
    for key in [("default_backend", "sglang"), ("default_tok_s", "sglang"), ("best_backend", "sglang"), ("change_supported", "sglang"),
                ("single_tok_s", t["label"]), ("pct_of_roofline", t["label"]), ("roofline_tok_s", t["label"]),
                ("peak_tok_s", t["label"]), ("allreduce_setting", None), ("allreduce_us", None), ("selection_sites", "sglang 0.5.9")]:
        assert key in said, key
    assert b["default_reported"] == "fa3"


def test_a_page_stating_another_number_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    label = next(s.of for s in stated.check_render(render, run).stated if s.name == "single_tok_s")
    _tamper(render / "06_findings.html", "single_tok_s", label, 500.0, "500.0")
    problems = stated.check_render(render, run).of_page("06_findings.html")
    assert any("single_tok_s" in p and "recomputed from" in p and "416.2" in p for p in problems), problems


def test_two_pages_that_disagree_fail(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    label = next(s.of for s in stated.check_render(render, run).stated if s.name == "single_tok_s")
    shutil.copy(render / "06_findings.html", render / "05_benchmark_single_stream.html")
    _tamper(render / "05_benchmark_single_stream.html", "single_tok_s", label, 191.0, "191.0")
    report = stated.check_render(render, run)
    assert any(p.startswith("pages disagree on single_tok_s") and "05_benchmark" in p and "06_findings" in p for p in report.across()), \
        report.across()


def test_a_shown_figure_that_is_not_its_value_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    page = render / "06_findings.html"
    html = page.read_text()
    m = re.search(r'(<span[^>]*data-q="default_tok_s"[^>]*>)([^<]*)(</span>)', html)
    page.write_text(html[:m.start()] + m.group(1) + "191" + m.group(3) + html[m.end():])  # the value kept, the text typed in
    problems = stated.check_render(render, run).of_page("06_findings.html")
    assert any("default_tok_s" in p and "formats to" in p for p in problems), problems


def test_a_quantity_left_out_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    page = render / "06_findings.html"
    page.write_text(re.sub(r'<span[^>]*data-q="change_supported"[^>]*>([^<]*)</span>', r"\1", page.read_text()))
    problems = stated.check_render(render, run).of_page("06_findings.html")
    assert any("does not state change_supported[sglang]" in p for p in problems), problems


def test_a_changed_table_fails(fresh, tmp_path):
    run, out = fresh
    changed = tmp_path / "run"
    shutil.copytree(run, changed, symlinks=True)
    rows = [json.loads(line) for line in (changed / "bench_summary.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:
        if r.get("phase") == "single":
            r["decode_tok_s_mean"] = r["decode_tok_s_mean"] * 1.1
    (changed / "bench_summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = stated.check_render(out, changed)
    assert any("single_tok_s" in p and "recomputed from" in p for p in report.of_page("06_findings.html")), report.problems
    assert any("single stream" in m for _, m in report.box_problems), report.box_problems  # the boxes say the old figure too


def test_a_tampered_answer_box_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    page = render / "03_force_each_backend.html"
    html = page.read_text()
    box = html.index('<div class="sb-answer">')
    li = html.index("<li>", box)
    page.write_text(html[:li + 4] + "sglang: forcing flashinfer is faster; " + html[li + 4:])
    report = stated.check_render(render, run)
    assert any(p == "03_force_each_backend.html" for p, _ in report.box_problems), report.box_problems


def test_a_page_without_tags_is_reported_as_predating_them(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    (render / "01_detect_capabilities.html").write_text("<html><body><p>The GPU runs 80 tok/s.</p></body></html>")
    report = stated.check_render(render, run)
    assert report.pages["01_detect_capabilities.html"] == "predates the tags"
    assert "01_detect_capabilities.html" in report.predating


# -- the notebooks' prose ------------------------------------------------------------------------------------
_RUN_FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s?(tok/s|us\b|µs|ms\b|GB/s|TB/s)")  # rates and latencies, the figures a run measures


def test_no_run_figure_typed_into_the_notebooks_prose():
    """A markdown cell is the same in every user's book: a run's figure typed into it is wrong on every other run.
    Figures belong in the cell that computes them (servebook.stated.q); reference figures in data/reference."""
    import jupytext

    found = []
    for path in sorted((ROOT / "notebooks").glob("0[0-9]_*.py")):
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "markdown":
                found += [f"{path.name}: {m.group(0)!r} in {cell.source[max(0, m.start() - 40):m.end() + 20]!r}"
                          for m in _RUN_FIGURE.finditer(cell.source)]
    assert not found, "\n".join(found)
