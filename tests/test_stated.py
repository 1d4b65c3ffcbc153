"""Every committed rendered book states what its run's tables give, and no page contradicts another.

Each prose number a chapter states is written by ``servebook.stated.q``: one helper formats it and tags it with the
quantity it is (``<span class="sb-q" data-q=... data-of=... data-v=...>``). ``check_render`` reads every page of a
render, recomputes each tagged quantity from the run directory its ``run.json`` names (registry
``servebook.quantities.QUANTITIES``), and groups the pages' statements by quantity. The answer box at the top of each page
("This run, in short") is checked against the box the renderer would make from the same tables now.

A committed page whose code never used ``q`` predates the tags: its test is skipped, naming the page to regenerate.
The tests below the committed ones make a fresh render from a copy of a recorded run, then damage a copy of a page
or of a table, and see the check fail: the check can fail for real.
"""

from __future__ import annotations

import html as _html
import json
import re
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from servebook import quantities, stated
from servebook.findings import backends, throughput
from servebook.paths import book_root
from servebook.results import RunStore

ROOT = book_root()
RENDERS = sorted(p.parent for p in (ROOT / "rendered").glob("*/run.json"))
PAGES = [(r, p.name) for r in RENDERS for p in sorted(r.glob("0[0-9]_*.html"))]


@lru_cache(maxsize=None)
def _report(render: Path) -> stated.Report:
    return quantities.check_render(render)


@pytest.fixture(autouse=True)
def _at_the_book_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # run.json and the runs name paths relative to the book's root, as the renders did


# -- the committed renders --------------------------------------------------------------------------------------
def test_every_render_names_its_run():
    assert RENDERS, "no committed render under rendered/"
    for render in RENDERS:
        run = stated.run_of(render)
        assert (run / "manifest.json").exists(), f"{render.name}/run.json names {run}, which is not a run directory"


# Pages that cannot be executed again here without changing what they state, each with the reason (strict xfail: a
# regenerated page that passes fails here, and its entry is deleted).
KNOWN_STALE: dict[str, str] = {}  # page -> why it cannot be executed again on its run's tables (none left)


def _stale_cases():
    for r, p in PAGES:
        key = f"{r.name}/{p}"
        marks = [pytest.mark.xfail(strict=True, reason=f"rendered/{key}: {KNOWN_STALE[key]}")] if key in KNOWN_STALE else []
        yield pytest.param(r, p, marks=marks, id=key)


@pytest.mark.parametrize("render, page", list(_stale_cases()))
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
    report = quantities.check_render(out, run)
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
    label = next(s.of for s in quantities.check_render(render, run).stated if s.name == "single_tok_s")
    _tamper(render / "06_findings.html", "single_tok_s", label, 500.0, "500.0")
    problems = quantities.check_render(render, run).of_page("06_findings.html")
    assert any("single_tok_s" in p and "recomputed from" in p and "416.2" in p for p in problems), problems


def test_two_pages_that_disagree_fail(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    label = next(s.of for s in quantities.check_render(render, run).stated if s.name == "single_tok_s")
    shutil.copy(render / "06_findings.html", render / "05_benchmark_single_stream.html")
    _tamper(render / "05_benchmark_single_stream.html", "single_tok_s", label, 191.0, "191.0")
    report = quantities.check_render(render, run)
    assert any(p.startswith("pages disagree on single_tok_s") and "05_benchmark" in p and "06_findings" in p for p in report.across()), \
        report.across()


def test_a_shown_figure_that_is_not_its_value_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    page = render / "06_findings.html"
    html = page.read_text()
    m = re.search(r'(<span[^>]*data-q="default_tok_s"[^>]*>)([^<]*)(</span>)', html)
    page.write_text(html[:m.start()] + m.group(1) + "191" + m.group(3) + html[m.end():])  # the value kept, the text typed in
    problems = quantities.check_render(render, run).of_page("06_findings.html")
    assert any("default_tok_s" in p and "formats to" in p for p in problems), problems


def test_a_quantity_left_out_fails(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    page = render / "06_findings.html"
    page.write_text(re.sub(r'<span[^>]*data-q="change_supported"[^>]*>([^<]*)</span>', r"\1", page.read_text()))
    problems = quantities.check_render(render, run).of_page("06_findings.html")
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
    report = quantities.check_render(out, changed)
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
    report = quantities.check_render(render, run)
    assert any(p == "03_force_each_backend.html" for p, _ in report.box_problems), report.box_problems


def test_a_page_without_tags_is_reported_as_predating_them(fresh, tmp_path):
    run, out = fresh
    render = _copy(out, tmp_path / "r")
    (render / "01_detect_capabilities.html").write_text("<html><body><p>The GPU runs 80 tok/s.</p></body></html>")
    report = quantities.check_render(render, run)
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


# -- every number a page states in prose is tagged ---------------------------------------------------------------------
# The rule (what is read, what a number is, what needs no tag) is servebook.stated.untagged's docstring; exceptions with
# their reasons are servebook.stated.EXCEPTIONS. Pages found with untagged numbers when this test was written: each is
# xfail(strict=True) here. The list is for whoever regenerates the renders and tags the chapters' prose: a page whose
# prose is all tagged passes, strict xfail then fails, and its entry is deleted.
KNOWN_UNTAGGED: dict[str, str] = {}  # page -> why a number it states cannot be tagged (none left: every page's are)


def _untagged_cases():
    for r, page in PAGES:
        key = f"{r.name}/{page}"
        marks = [pytest.mark.xfail(strict=True, reason=f"rendered/{key}: {KNOWN_UNTAGGED[key]}")] if key in KNOWN_UNTAGGED else []
        yield pytest.param(r, page, marks=marks, id=key)


@pytest.mark.parametrize("render, page", list(_untagged_cases()))
def test_every_number_in_prose_is_tagged(render, page):
    found = stated.untagged_numbers((render / page).read_text(encoding="utf-8"))
    assert not found, f"rendered/{render.name}/{page}: {len(found)} number(s) stated in prose without servebook.stated.q:\n" \
        + "\n".join(map(str, found[:40]))


def test_untagged_numbers_rule():
    md = lambda body: f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{body}</div>'  # noqa: E731
    tag = stated.q("best_tok_s", 490.2, ",.1f", of="vllm")
    page = (md(f"<p>FLASHMLA {tag} tok/s; TRITON_MLA 429.5 tok/s, 12% less, 3.4x faster at C=4 on 2 x H200.</p>")
            + md("<p>SGLang 0.5.9 on an H200 with fa3, chapters 01-03 and chapter 05 (06. Findings), 2026-12-01T11:05, "
                 "issue #28, <code>--cuda-graph-max-bs 16</code>, label sglang/default --max-num-seqs 16, at batch 1, "
                 "95% t-interval, top-1.</p>")
            + '<div data-mime-type="text/plain"><pre>printed 77.7</pre></div>'
            + md("<table><tr><td>table 88.8</td></tr></table>")
            + '<div class="jp-InputArea"><pre>x = 99.9</pre></div>'
            + '<div class="sb-answer"><li>box 66.6</li></div>')
    got = [u.number for u in stated.untagged_numbers(page)]
    assert got == ["429.5", "12", "3.4", "2"], got
    assert [u.number for u in stated.untagged_numbers(page, exceptions=())] == ["429.5", "12", "3.4", "4", "2", "1", "95"]
    assert "TRITON_MLA 429.5 tok/s" in stated.untagged_numbers(page)[0].context


# -- mutation: every tagged number changed, on the page and in its table, fails the check ------------------------------
@lru_cache(maxsize=None)
def _truth(render: Path) -> stated.Recompute:
    return quantities.recompute(RunStore(stated.run_of(render)))


def _other(value):
    """Another value of the same kind, that shows otherwise in any format the book uses."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 1.37 + 11.3
    return f"{value}-changed"


def _tagged_on(render: Path, page: str) -> list:
    return stated.stated_on((render / page).read_text(encoding="utf-8"), page)


@pytest.mark.parametrize("render, page", PAGES, ids=[f"{r.name}/{p}" for r, p in PAGES])
def test_changing_any_tagged_number_on_a_page_fails(render, page):
    """Every tag of the committed page, its value changed (shown as that value formats): the check names it. Then one tag
    changed in a copy of the page's HTML, and the whole check_render on that copy fails (end to end)."""
    from dataclasses import replace

    found = _tagged_on(render, page)
    if not found:
        pytest.skip(f"rendered/{render.name}/{page} states no tagged number (see KNOWN_UNTAGGED and the stated-quantity tests)")
    truth = _truth(render)
    sound = [s for s in found if not truth.problems(s)]  # what the committed page gets wrong, test_page_states_its_run names
    assert sound or not found, "no tagged number of the page checks out: nothing to mutate"
    missed = []
    for s in sound:
        v = _other(s.value)
        for changed in (replace(s, value=v, text=stated.text_of(v, s.fmt)),   # a figure typed in, tagged consistently
                        replace(s, text=stated.text_of(v, s.fmt))):          # the shown text alone changed
            if not truth.problems(changed):
                missed.append(f"{s.name}[{s.of}] {s.text!r} -> {changed.text!r} (value {changed.value!r}) passes")
    assert not missed, f"rendered/{render.name}/{page}:\n" + "\n".join(missed)


@pytest.mark.parametrize("render, page", PAGES, ids=[f"{r.name}/{p}" for r, p in PAGES])
def test_one_tag_changed_in_the_html_fails_check_render(render, page, tmp_path):
    # a number (a tagged text, such as a recorded error, is shown with its own markup inside the tag: test_every_tag_...)
    found = [s for s in _tagged_on(render, page) if not _truth(render).problems(s)
             and isinstance(s.value, (int, float)) and not isinstance(s.value, bool)]
    if not found:
        pytest.skip(f"rendered/{render.name}/{page} states no tagged number that checks out")
    s = found[len(found) // 2]
    copy = tmp_path / render.name
    copy.mkdir()
    shutil.copy(render / "run.json", copy / "run.json")
    html = (render / page).read_text(encoding="utf-8")
    v = _other(s.value)

    def attr(span, name):
        m = re.search(r'%s=(?:"([^"]*)"|\'([^\']*)\')' % name, span)
        return _html.unescape(m.group(1) if m.group(1) is not None else m.group(2)) if m else None

    spans = [m for m in re.finditer(r"<span [^>]*\bsb-q\b[^>]*>[^<]*</span>", html)
             if attr(m.group(0), "data-q") == s.name and attr(m.group(0), "data-of") == s.of]
    assert spans, f"{s.name}[{s.of}] not found in the HTML"
    m = spans[0]
    new = html[:m.start()] + stated.q(s.name, v, s.fmt, of=s.of) + html[m.end():]
    (copy / page).write_text(new, encoding="utf-8")
    report = quantities.check_render(copy, stated.run_of(render), boxes=False)
    assert any(s.name in p for p in report.of_page(page)), report.problems


def _run_tables(run: Path) -> dict[str, list[dict]]:
    return {p.name: [json.loads(line) for line in p.read_text().splitlines() if line.strip()] for p in sorted(run.glob("*.jsonl"))}


def _change_every(rows: list[dict], value) -> int:
    """Every cell of ``rows`` (top-level fields) equal to ``value`` given another value; how many."""
    return sum(_change_in_json(r, value, deep=False) for r in rows)


def _change_in_json(node, value, deep: bool = True) -> int:
    """Every value equal to ``value`` in a JSON document (dicts and lists; nested ones too where ``deep``) given
    another; how many."""
    n = 0
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in list(items):
        if isinstance(v, (dict, list)):
            n += _change_in_json(v, value) if deep else 0
        elif type(v) is type(value) and (v == value or (isinstance(v, float) and abs(v - value) <= 1e-9 * max(1.0, abs(value)))):
            node[k] = _other(v)
            n += 1
    return n


def _sources(s, run: Path, tables: dict) -> dict[str, str]:
    """The changed text of each source the quantity of ``s`` derives from: the run files its registry entry names
    (``Quantity.files``), else each table it names (``Quantity.tables``) with a cell equal to the stated value."""
    q = quantities.QUANTITIES[s.name]
    if q.files:
        out = {}
        for name in q.files:
            doc = json.loads((run / name).read_text())
            if _change_in_json(doc, s.value):
                out[name] = json.dumps(doc)
        return out
    out = {}
    for name, rows in tables.items():
        if name.removesuffix(".jsonl") not in q.tables:
            continue  # a table the quantity does not derive from: a cell equal to its value there is another figure
        mine = json.loads(json.dumps(rows))
        if _change_every(mine, s.value):
            out[name] = "".join(json.dumps(r) + "\n" for r in mine)
    return out


@pytest.mark.parametrize("render", RENDERS, ids=[r.name for r in RENDERS])
def test_changing_the_table_a_tagged_number_derives_from_fails(render, tmp_path):
    """For each page, tagged numbers read from a table cell (a measured float, a backend or setting name: the cells that
    hold that value) are changed in a copy of the run's tables, and the recomputation no longer gives the page's value.
    Sampled for speed: up to three per page, every page that has one. Numbers computed from several cells (intervals,
    shares, counts) and reference figures are covered by the page mutation above."""
    run = stated.run_of(render)
    tables = _run_tables(run)
    copy = tmp_path / run.name
    copy.mkdir()
    for item in run.iterdir():  # the tables copied (they are changed), everything else linked
        (copy / item.name).symlink_to(item.resolve()) if item.suffix != ".jsonl" else shutil.copy(item, copy / item.name)
    (tmp_path / "no-run").mkdir()
    without_run = quantities.recompute(RunStore(tmp_path / "no-run"))

    def from_the_run(s) -> bool:  # a reference figure (data/reference, the reference NCCL run) is the same without the run
        try:
            return without_run.want(s.name, s.of) is stated.MISSING
        except Exception:  # noqa: BLE001 - it needs the run's tables
            return True

    missed, tried = [], {}
    for page in sorted(p.name for p in render.glob("0[0-9]_*.html")):
        sound = [s for s in _tagged_on(render, page) if not _truth(render).problems(s)
                 and ((isinstance(s.value, float) and not float(s.value).is_integer()) or (isinstance(s.value, str) and len(s.value) > 2))]
        seen = set()
        for s in sound:
            if s.key() in seen or len(seen) >= 3 or not from_the_run(s):
                continue
            changed = _sources(s, run, tables)
            if not changed:
                continue  # derived from several cells, or from a reference file
            seen.add(s.key())
            for name, text in changed.items():
                (copy / name).unlink(missing_ok=True)  # a linked file is replaced, never written through
                (copy / name).write_text(text)
            try:
                problems = quantities.recompute(RunStore(copy)).problems(s)
            except Exception as exc:  # noqa: BLE001 - the recomputation breaks on the changed table: the check fails loudly too
                problems = [f"{type(exc).__name__}: {exc}"]
            for name in changed:
                shutil.copy(run / name, copy / name)
            if not problems:
                missed.append(f"{page}: {s.name}[{s.of}] = {s.value!r}: changed in {', '.join(changed)}, the check still passes")
        tried[page] = len(seen)
    assert not missed, f"rendered/{render.name}:\n" + "\n".join(missed)
    assert any(tried.values()) or not any(_tagged_on(render, p) for p in tried), f"no tagged number found in a table: {tried}"


@pytest.mark.parametrize("render", RENDERS, ids=[r.name for r in RENDERS])
def test_every_quantity_names_the_tables_it_reads(render, monkeypatch):
    """The tables a quantity's computation reads from the run (each ``RunStore.rows`` on it, every subject the render
    states included) are among those its declaration names (``Quantity.tables``): what the mutation above changes."""
    from servebook.stated import registry

    run = stated.run_of(render).resolve()
    ticks = iter(range(10**9))
    monkeypatch.setattr(registry, "_tables_now", lambda store: ("fresh", next(ticks)))  # no figure kept from another quantity
    reads: list = []
    read = RunStore._read
    monkeypatch.setattr(RunStore, "_read", lambda self, table, withdrawn: reads.append((Path(self.path).resolve(), table))
                        or read(self, table, withdrawn))
    subjects = {s.key() for p in render.glob("0[0-9]_*.html") for s in _tagged_on(render, p.name)}
    undeclared = {}
    for name, q in quantities.QUANTITIES.items():
        reads.clear()
        store = RunStore(run)
        values = q.compute(store)
        for of in [of for n, of in subjects if n == name]:
            registry.pick(q, values, of, store)
        read_here = {t for p, t in reads if p == run}
        if read_here - set(q.tables):
            undeclared[name] = sorted(read_here - set(q.tables))
    assert not undeclared, f"quantities that read tables their declaration does not name (add them to tables=): {undeclared}"


# -- shared sayers, chapters 01 and 06 (s8): host facts, seed figures, comparisons, method constants ----------------------
TRUST_RUN = ROOT / "data" / "runs" / "h200x1-trust"  # chapter 01 and chapter 03 over two server starts per configuration


def _stated_in(text: str) -> list:
    return stated.stated_on(text, "test")


def _recomputed(run: Path, text: str) -> list[str]:
    """What ``check_render`` says of each tag in ``text`` against ``run``'s tables (empty: every tag is its run's)."""
    r = quantities.recompute(RunStore(run))
    return [p for s in _stated_in(text) for p in r.problems(s)]


def test_the_host_sentence_is_tagged_and_recomputed():
    from servebook import probe as sbp

    report = json.loads((TRUST_RUN / "probe.json").read_text())
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown"><p>{sbp.describe_host(report, tagged=True)}</p></div>'
    assert stated.untagged_numbers(page) == [], stated.untagged_numbers(page)
    names = {s.name for s in _stated_in(page)}
    assert {"host_gpu_count", "host_capability", "host_gpu_memory_gib", "host_sm_count", "host_cuda"} <= names, names
    assert not _recomputed(TRUST_RUN, page)
    assert "sb-q" not in sbp.describe_host(report)  # the plain-text report (servebook probe) carries no tags
    wrong = page.replace('data-v="132"', 'data-v="142"').replace(">132<", ">142<")
    assert any("host_sm_count" in p for p in _recomputed(TRUST_RUN, wrong))


def test_separated_tags_the_difference_and_the_starts():
    from servebook.findings import separated

    (b, *_) = [b for b in backends(RunStore(TRUST_RUN)) if b.get("others")] or pytest.skip("no forced start beside the default")
    o = b["others"][0]
    text = separated(o["tok_s"], o["ci95"], b["default_tok_s"], b["default_ci95"], starts=(o["starts"], b["default_starts"]), of=o["key"])
    said = {s.name: s for s in _stated_in(text)}
    assert set(said) == {"vs_default_pct", "compared_starts"}, text
    assert said["vs_default_pct"].value == pytest.approx(100 * (o["tok_s"] - b["default_tok_s"]) / b["default_tok_s"])
    assert said["compared_starts"].value == min(o["starts"], b["default_starts"]) >= 2
    assert not _recomputed(TRUST_RUN, text)
    assert _recomputed(TRUST_RUN, stated.q("vs_default_pct", said["vs_default_pct"].value + 5, "+.1f", of=o["key"]))
    assert "sb-q" not in separated(o["tok_s"], o["ci95"], b["default_tok_s"], b["default_ci95"])  # untagged without of


def test_per_start_rates_are_tagged_and_recomputed():
    (b, *_) = [b for b in backends(RunStore(TRUST_RUN)) if len(b.get("default_start_rates") or []) >= 2] or \
        pytest.skip("no default measured over two starts")
    text = stated.say_backends(b)
    starts = [s for s in _stated_in(text) if s.name == "default_start_tok_s"]
    assert [s.value for s in starts] == [x for x in b["default_start_rates"] if x is not None]
    assert any(s.name == "compared_starts" for s in _stated_in(text))
    assert not _recomputed(TRUST_RUN, text)
    assert _recomputed(TRUST_RUN, stated.q("default_start_tok_s", starts[0].value * 1.1, ",.1f", of=starts[0].of))


def test_chapter_06_claims_are_tagged_and_recomputed():
    from servebook.findings import collect, what_we_found

    text = what_we_found(collect(RunStore(TRUST_RUN)))
    said = {s.name for s in _stated_in(text)}
    assert {"host_gpu_count", "host_capability", "host_cuda", "default_tok_s"} <= said, said
    # the fastest correct start: stated as best_tok_s, or, where the default itself was fastest, each other start against it
    assert {"best_tok_s", "backend_tok_s"} & said, said
    assert not _recomputed(TRUST_RUN, text)


def test_seed_and_profile_figures_come_from_their_files():
    from servebook.profiles import load_profile

    s = stated.seed_case()
    text = stated.seed_sentence()
    assert [x.value for x in _stated_in(text) if x.name == "seed_tp"] == [s["tp"]]
    assert quantities.expected(RunStore(TRUST_RUN), "profile_capability", s["profile"]) == load_profile(s["profile"])["capability"]
    assert quantities.expected(RunStore(TRUST_RUN), "profile_capability", "no-such-gpu") is stated.MISSING


def test_method_constants_are_read_from_the_code(monkeypatch):
    from servebook.backends import agreement

    text = stated.q("method_constant", agreement.TOLERANCE, "g", of="agreement_tolerance_nats") + " nats, " + \
        stated.q("method_constant", 100 * agreement.MIN_AGREEMENT, ".0f", of="agreement_min_pct") + "%"
    assert not _recomputed(TRUST_RUN, text)
    monkeypatch.setattr(agreement, "TOLERANCE", agreement.TOLERANCE * 2)  # the method changed, the page did not
    assert any("agreement_tolerance_nats" in p for p in _recomputed(TRUST_RUN, text))


def test_a_compared_run_figure_is_recomputed_from_that_run():
    other = "data/runs/h200x2-live"
    (t, *_) = throughput(RunStore(ROOT / other))
    store = RunStore(TRUST_RUN)
    assert quantities.expected(store, "other_run_single_tok_s", f"{other} | {t['label']}") == pytest.approx(t["single_tok_s"])
    assert quantities.expected(store, "other_run_single_tok_s", f"{other} | no such label") is stated.MISSING
    assert quantities.expected(store, "other_run_single_tok_s", f"data/runs/no-such-run | {t['label']}") is stated.MISSING
    wrong = stated.q("other_run_single_tok_s", t["single_tok_s"] + 10, ",.1f", of=f"{other} | {t['label']}")
    assert _recomputed(TRUST_RUN, wrong)


# -- issue #28 item 4 (s9): the prose figures tagged last, and the exceptions kept narrow ---------------------------------
LIVE1, LIVE2 = ROOT / "data" / "runs" / "h200x1-live", ROOT / "data" / "runs" / "h200x2-live"


def _md(text: str) -> str:
    """Markdown as a page renders it, as far as the rule reads it: inline code in ``<code>``."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown"><p>{text}</p></div>'


def _all_tagged_and_recomputed(run: Path, text: str, names: set[str]) -> None:
    page = _md(text)
    assert stated.untagged_numbers(page) == [], stated.untagged_numbers(page)
    said = {s.name for s in _stated_in(text)}
    assert names <= said, said
    assert not _recomputed(run, text), _recomputed(run, text)


def test_untagged_exceptions_are_narrow():
    """A compute capability written major.minor, a 95% half-width, a host's GPU count as it is named, chapter 05's worked
    example: no tag. The same digits anywhere else: untagged."""
    def untagged(text):
        return [u.number for u in stated.untagged_numbers(_md(text))]

    assert untagged("on an RTX PRO 6000 (compute capability 12.0), refusing capability 9.0.") == []
    assert untagged("capability 12 users; capability 12.05; capability 123.0") == ["12", "12.05", "123.0"]
    assert untagged("its 95% half-width; kimi-k2.5 on 8x rtx-pro-6000") == []
    assert untagged("its 95% share; 8x faster") == ["95", "8"]
    assert untagged("A server streams 4 tokens per chunk every 40 ms. What is the gap?") == []
    assert untagged("A server streams 4 tokens per chunk every 40 ms and 7 more") == ["4", "40", "7"]
    assert untagged("well below C=4 users at that rate; C=8 12 us; C=2 3 ms") == ["12", "3"]
    assert untagged("C=4 us") == ["4"]
    assert untagged("TP=2 and TP>1") == [] and untagged("TP 2, 3 GPUs") == ["2", "3"]
    assert untagged("1. Where does the engine choose?") == [] and untagged("it took 4. Then 3 GPUs") == ["4", "3"]


def test_the_default_measured_two_ways_is_tagged_and_recomputed():
    from servebook.findings import default_methods, say_default_methods

    items = default_methods(RunStore(LIVE1))
    assert items and not items[0]["same_method"]
    text = say_default_methods(items)
    _all_tagged_and_recomputed(LIVE1, text, {"default_method"})
    s = next(x for x in _stated_in(text) if x.of.endswith("| change %"))
    assert _recomputed(LIVE1, stated.q("default_method", s.value + 3, "+.1f", of=s.of))


def test_comparisons_between_starts_engines_and_runs_are_recomputed():
    store = RunStore(LIVE1)
    (t, ref) = throughput(store)[1], throughput(store)[0]
    from servebook.findings import separated

    text = separated(t["single_tok_s"], t["single_ci95"], ref["single_tok_s"], ref["single_ci95"], starts=(t["starts"], ref["starts"]),
                     of=f"{t['label']} vs {ref['label']}", names=("single_vs_pct", "single_vs_starts"))
    _all_tagged_and_recomputed(LIVE1, text, {"single_vs_pct"})
    other = "data/runs/h200x2-live"
    (o, *_) = throughput(RunStore(LIVE2))
    pair = f"{other} | {o['label']} vs {ref['label']}"
    text = (separated(o["single_tok_s"], o["single_ci95"], ref["single_tok_s"], ref["single_ci95"], of=pair, names=("other_run_vs_pct", None))
            + "; " + stated.q("other_run_ratio", o["single_tok_s"] / ref["single_tok_s"], ".2f", of=pair) + "x")
    _all_tagged_and_recomputed(LIVE1, text, {"other_run_vs_pct", "other_run_ratio"})
    assert _recomputed(LIVE1, stated.q("other_run_ratio", o["single_tok_s"] / ref["single_tok_s"] + 0.1, ".2f", of=pair))
    assert quantities.expected(store, "other_run_ratio", f"data/runs/no-such-run | {o['label']} vs {ref['label']}") is stated.MISSING


def test_the_engine_difference_of_the_profiles_is_tagged_and_recomputed():
    from servebook.profile import chapter as prof

    text = prof.where_time_goes(RunStore(LIVE1)) + "\n" + "\n".join(prof.findings(RunStore(LIVE1)))
    _all_tagged_and_recomputed(LIVE1, text, {"profile_layers", "profile_busy_ms", "profile_diff_ms", "prediction_layers"})
    s = next(x for x in _stated_in(text) if x.name == "profile_busy_ms")
    assert _recomputed(LIVE1, stated.q("profile_busy_ms", s.value * 1.1, ".3f", of=s.of))


def test_the_links_and_peer_copies_are_tagged_and_recomputed():
    from servebook import probe as sbp

    report = json.loads((LIVE2 / "probe.json").read_text())
    text = sbp.describe_host(report, tagged=True)
    _all_tagged_and_recomputed(LIVE2, text, {"nvlink_links", "p2p_gbs", "p2p_latency_us"})
    assert _recomputed(LIVE2, stated.q("nvlink_links", 12, "d", of="NV18"))


def test_remeasured_and_seed_figures_are_tagged_and_recomputed(tmp_path):
    from servebook.bench import chapter as ch05
    from servebook.bench import report as ch05_report
    from servebook.bench.runs import remeasured

    store = RunStore(LIVE1)
    text = "\n".join(ch05_report._remeasured_lines(remeasured(store.rows("bench_summary"))))
    _all_tagged_and_recomputed(LIVE1, text, {"remeasured"})
    run = tmp_path / "run"  # seed_roofline records its rows: on a copy
    shutil.copytree(LIVE1, run)
    seed = ch05.seed_roofline(RunStore(run), seed_model="kimi-k2.5", seed_profile="rtx-pro-6000", seed_tp=8)
    # a PCIe profile: each engine's published PCIe latency, chapter 06's rule (issue #41 item 1), not the NVLink reference grid's
    _all_tagged_and_recomputed(run, "\n".join(seed["lines"]), {"card_fact", "seed_floor", "card_roofline_tok_s", "seed_pcie_us"})
    assert _recomputed(run, stated.q("seed_floor", 9, "d", of=seed["subject"] + " | default | gpus"))


def test_nccl_figures_and_the_reference_prediction_are_recomputed():
    from servebook.findings import collect, what_we_found
    from servebook.nccl.figures import reference_prediction

    store = RunStore(LIVE2)
    text = what_we_found(collect(store))
    said = {(s.name, s.of) for s in _stated_in(text)}
    assert {("nccl_fact", "world_size"), ("nccl_fact", "b1_bytes"), ("nccl_fact", "reason")} <= said, said
    assert not _recomputed(LIVE2, text)
    assert _recomputed(LIVE2, stated.q("nccl_fact", 3, "d", of="world_size"))
    p = reference_prediction(61)
    ok = stated.q("ref_nccl_prediction", p["reason"], of="61 layers | reason") + \
        stated.q("ref_nccl_prediction", p["default ms per token"], ".2f", of="61 layers | default ms per token")
    assert not _recomputed(LIVE2, ok)
    assert _recomputed(LIVE2, stated.q("ref_nccl_prediction", p["default ms per token"] * 2, ".2f", of="61 layers | default ms per token"))


def test_the_seed_projection_verdict_is_tagged_and_recomputed():
    from servebook.profile import seed as sbseed

    run = ROOT / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
    store = RunStore(run)
    from servebook.profile.verdict import verdict_markdown

    text = verdict_markdown({name: store.rows(name) for name in sbseed.SEED_TABLES})
    _all_tagged_and_recomputed(run, text, {"seed_table", "seed_allreduce_share", "seed_attention_ratio"})
    s = next(x for x in _stated_in(text) if x.name == "seed_table" and x.of.startswith("seed_comm | sglang | matching_us"))
    assert _recomputed(run, stated.q("seed_table", s.value + 1, ".1f", of=s.of))     # a wrong figure is caught


def test_a_tagged_text_survives_markdown():
    """A recorded text shown through ``q`` inside a chapter's Markdown keeps its ``__init__`` and ``*``: h200x2-live's
    chapter 03 showed a recorded ImportError's path as "transformers/init.py" (Markdown's bold)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    text = "ImportError: cannot import name 'AutoTokenizer' from 'transformers' (/x/transformers/__init__.py) a*b*c `d`"
    page = markdown2html_mistune(f"- stopped: {stated.q('failure_text', text, of='chapter 03 | t')}")
    (s,) = stated.stated_on(page, "p")
    assert s.text == text and s.value == text
    assert stated.q("default_backend", "FLASH_ATTN_MLA", of="vllm").endswith(">FLASH_ATTN_MLA</span>")  # a name: unchanged
