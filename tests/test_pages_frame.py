"""A book's frame: the glossary every page links, the banner of a superseded book, chapter 06's verdict first, the
parameters the run used, "run this yourself" from the run's own parameters, and figures with their own alt text and
caption whose intervals stop at zero. A recorded run (data/runs/h200x1-live) is rendered into a temporary shelf."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from servebook import glossary, shelf
from servebook.paths import book_root

ROOT = book_root()
REQUIRED = ("mla", "tpot", "ttft", "itl", "slice", "card", "seed", "graph", "host-bound", "gpu-idle", "teacher-forced",
            "profile", "what-if", "reference", "start", "roofline", "all-reduce", "tp", "seed-block", "host-rule",
            "nccl-protocols", "restart-spread", "profile-run", "anchor", "reference-grid")


@pytest.fixture(autouse=True)
def _at_the_book_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def shelf_dir(tmp_path_factory) -> Path:
    """A shelf with h200x1-live rendered, and a stand-in for the reference book beside it."""
    from servebook.render import render_book

    out = tmp_path_factory.mktemp("shelf")
    ref = out / shelf.REFERENCE_BOOKS[-1]
    ref.mkdir()
    (ref / "index.html").write_text("<html></html>")
    (ref / "run.json").write_text(json.dumps({"run_dir": "data/runs/h200x1-trust", "manifest": {"parameters": {}}}))
    (out / "index.html").write_text("<html></html>")  # the front page's place
    render_book(ROOT / "data" / "runs" / "h200x1-live", out / "h200x1-live")
    return out


def test_glossary_defines_every_listed_term_and_is_deterministic(tmp_path):
    page = glossary.write_glossary(tmp_path).read_text()
    for key in REQUIRED:
        m = re.search(rf'<dt id="{re.escape(key)}">(.*?)</dt><dd>(.*?)</dd>', page, flags=re.S)
        assert m and len(re.sub(r"<[^>]+>", "", m.group(2))) > 60, f"glossary term {key!r} is missing or not defined"
    assert "The one definition the book uses" in glossary.TERMS["gpu-idle"].text
    assert glossary.write_glossary(tmp_path).read_text() == page == glossary.glossary_html()
    with pytest.raises(KeyError):
        glossary.href("no-such-term")


def test_every_page_links_the_glossary_and_carries_the_superseded_banner(shelf_dir):
    book = shelf_dir / "h200x1-live"
    assert (shelf_dir / glossary.FILE).read_text() == glossary.glossary_html()
    pages = sorted(book.glob("*.html"))
    assert len(pages) >= 5
    for p in pages:
        text = p.read_text()
        assert f'href="../{glossary.FILE}"' in text, f"{p.name} does not link the glossary"
        assert 'id="sb-superseded"' in text and 'href="../h200x1-trust/index.html"' in text, f"{p.name} has no banner"


def test_every_link_of_the_frame_resolves(shelf_dir):
    """The links the frame adds (glossary, terms, the front page, the superseding book) lead out of the book: each resolves."""
    for p in sorted((shelf_dir / "h200x1-live").glob("*.html")):
        links = re.findall(r'<a [^>]*href="(\.\./[^"]*)"', p.read_text())
        assert any("glossary.html#" in h for h in links), f"{p.name} links no term"
        for h in links:
            assert (p.parent / h.split("#")[0]).is_file(), f"{p.name}: link {h!r} resolves to no file"


def test_pages_link_only_the_chapters_their_book_has(tmp_path):
    """h200x1-trust was recorded without chapters 02 and 04; its pages (03's "Next: 04", 06's "(ch. 02)", "(ch. 04)")
    link none of them, and say so where they name them."""
    from servebook.render import render_book

    out = tmp_path / "h200x1-trust"
    render_book(ROOT / "data" / "runs" / "h200x1-trust", out)
    pages = sorted(out.glob("*.html"))
    assert {p.stem for p in pages} >= {"03_force_each_backend", "06_findings"} and not (out / "04_tune_nccl.html").exists()
    absent = 0
    for p in pages:
        text = p.read_text()
        for h in re.findall(r'<a [^>]*href="(0\d_[^"#]*)', text):
            assert (out / h).is_file(), f"{p.name}: link to {h!r}, a chapter this book lacks"
        absent += text.count("(not in this book)")
    assert absent >= 2
    from servebook.pages import link_present_chapters

    page = '<a href="04_tune_nccl.html">04. Tune NCCL</a> <a href="03_x.html#A">ch. 03</a> <a href="../h/04_tune_nccl.html">x</a>'
    assert link_present_chapters(page, {"03_x"}) == ('04. Tune NCCL <small class="sb-absent">(not in this book)</small> '
                                                     '<a href="03_x.html#A">ch. 03</a> <a href="../h/04_tune_nccl.html">x</a>')


def test_a_book_alone_has_no_banner(tmp_path):
    assert shelf.superseded_by(tmp_path / "book", whatif=False) is None
    assert shelf.role(tmp_path / "book", whatif=False) == "alone"


def test_chapter_06_opens_with_its_verdict(shelf_dir):
    page = (shelf_dir / "h200x1-live" / "06_findings.html").read_text()
    verdict = page.index('id="The-verdict"')
    assert verdict < page.index('<details class="sb-code sb-params">') and verdict < page.index('<details class="sb-code">')


def test_parameter_cells_show_what_ran_folded(shelf_dir):
    import nbformat

    from servebook.pages import parameters_used

    nb = nbformat.read(ROOT / "data" / "runs" / "h200x1-live" / "notebooks" / "05_benchmark_single_stream.ipynb", as_version=4)
    used = parameters_used(nb)
    page = (shelf_dir / "h200x1-live" / "05_benchmark_single_stream.html").read_text()
    assert "injected-parameters" not in page
    params = re.search(r'<details class="sb-code sb-params">.*?</details>', page, flags=re.S).group(0)
    text = re.sub(r"<[^>]+>", "", params).replace("&#39;", "'").replace("&quot;", '"')
    assert f"max_tokens: int = {used['max_tokens']!r}" in text and f"engine: str = {used['engine']!r}" in text


def test_a_model_path_kept_with_the_run_says_why_it_differs_from_the_index():
    """h200x1-trust's index names the recording host's /tmp/models/kimi-slice; its chapter 05, executed again on the
    recorded tables, read the copy kept with the run: the parameters cell says which is which (#41 item 5)."""
    import nbformat

    from servebook.pages import merge_parameters

    nb = nbformat.read(ROOT / "data" / "runs" / "h200x1-trust" / "notebooks" / "05_benchmark_single_stream.ipynb", as_version=4)
    merge_parameters(nb)
    line = next(x for c in nb.cells if "parameters" in c.metadata.get("tags", []) for x in c.source.splitlines()
                if x.startswith("model"))
    assert "data/runs/h200x1-trust/models/kimi-slice" in line and "kept with the run" in line and "recording host" in line


def test_each_page_ends_with_the_command_to_run_it_yourself(shelf_dir):
    import nbformat

    from servebook.pages import commands
    from servebook.results import RunStore

    for p in sorted((shelf_dir / "h200x1-live").glob("0*.html")):
        page = p.read_text()
        assert page.rindex('id="Run-this-yourself"') > page.rindex("jp-Cell ") - 2000, p.name
    run = ROOT / "data" / "runs" / "h200x2-live"
    nb = nbformat.read(run / "notebooks" / "04_tune_nccl.ipynb", as_version=4)
    cmds = commands(nb, RunStore(run).manifest, "04", run)
    assert cmds["measure"][0].startswith("servebook model build kimi-k2.5 --layers 2 --weights dummy --out models/")
    assert "servebook book --only 04 --model models/kimi-slice-dummy --engine sglang" in cmds["measure"][-1]
    assert "-p tp_check=sglang,vllm" in cmds["measure"][-1]  # the recorded invocation that measured chapter 04
    assert "measure" not in cmds["measure"][-1] and "run_dir" not in cmds["measure"][-1]
    assert cmds["tables"] == ["servebook html data/runs/h200x2-live --refresh 04 --out build/h200x2-live"]


_HOST = {"engine": "sglang", "host": "local", "model": "/tmp/models/kimi-slice", "profile": "", "smoke": False}
# chapter 05 measured in the first resumption (2 of its own parameters); the second, richer in 05's parameters (5), ran
# chapter 03 only
_SWEEP = {**_HOST, "requests_per_level": 3, "level_time_budget_s": 15}
_BACKENDS = {**_HOST, "backends": "vllm: FLASHMLA", "compare_engines": "vllm", "engine_args": "vllm: --max-num-seqs 16",
             "runs": 3, "max_tokens": 64, "starts": 1}


def _resumed_run(tmp_path, rows: str):
    """A run resumed twice: the manifest, the ``chapters`` rows (``rows``: "parameters" records them, "before" is a row
    from before rows recorded them, "none" is a run without rows), chapter 05's executed notebook (what its measuring
    execution injected) and the built slice the run keeps."""
    import nbformat

    from servebook.chapters import chapters, notebook_parameters
    from servebook.results import RunStore

    run = tmp_path / "resumed"
    (run / "notebooks").mkdir(parents=True)
    (run / "models" / "kimi-slice").mkdir(parents=True)
    (run / "models" / "kimi-slice" / "servebook_model.json").write_text(json.dumps({"card": "kimi-k2.5", "layers": 2, "weights": "random"}))
    (run / "manifest.json").write_text(json.dumps({"run_id": "resumed", "started": "2026-12-01T10:00:00+00:00", "parameters": _HOST,
                                                   "resumptions": [{"at": "2026-12-01T10:05:00+00:00", "parameters": _SWEEP},
                                                                   {"at": "2026-12-01T11:00:00+00:00", "parameters": _BACKENDS}]}))
    store = RunStore(run)
    for stem, at, params in (("05_benchmark_single_stream", "2026-12-01T10:20:00+00:00", _SWEEP),
                             ("03_force_each_backend", "2026-12-01T11:10:00+00:00", _BACKENDS)):
        if rows != "none":
            store.append("chapters", {"chapter": stem, "status": "ok", "recorded_at": at,
                                      **({"parameters": params} if rows == "parameters" else {})})
    chapter = next(c for c in chapters() if c.number == "05")
    injected = {**_SWEEP, "run_dir": str(run), "measure": True}
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"parameters": injected}}, cells=[
        nbformat.v4.new_code_cell("\n".join(f"{n} = {d['default']}" for n, d in notebook_parameters(chapter.source).items()),
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("\n".join(f"{n} = {v!r}" for n, v in injected.items()), metadata={"tags": ["injected-parameters"]})])
    nbformat.write(nb, run / "notebooks" / f"{chapter.stem}.ipynb")
    return run, nb


@pytest.mark.parametrize("rows", ["parameters", "before", "none"])
def test_the_measure_command_is_the_execution_that_measured_the_chapter(tmp_path, rows):
    """The page's command follows the execution that measured chapter 05 (servebook.recorded.recorded_parameters, as
    ``--refresh`` reads it), not the resumption that gave the most of 05's parameters; a run without ``chapters`` rows
    follows its executed notebook. The slice it measured is built first and named where the build puts it."""
    from servebook.pages import commands
    from servebook.results import RunStore

    run, nb = _resumed_run(tmp_path, rows)
    build, measure = commands(nb, RunStore(run).manifest, "05", run)["measure"]
    assert build == "servebook model build kimi-k2.5 --layers 2 --weights random --out models/kimi-slice"
    assert measure == ("servebook book --only 05 --model models/kimi-slice --engine sglang -p level_time_budget_s=15 "
                       "-p requests_per_level=3"), measure


def test_figures_get_own_alt_text_caption_and_no_interval_below_zero():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servebook.pagefigures import clip_at_zero, describe

    fig, ax = plt.subplots()
    ax.barh(["sglang fa3", "vllm TRITON_MLA"], [524.3, 80.0], xerr=[507.9, 300.0])
    ax.set_xlabel("decode tok/s, single stream")
    ax.set_title("each backend")
    fig.canvas.draw()
    assert ax.get_xlim()[0] < 0  # matplotlib's own limits reach below zero
    clip_at_zero(fig)
    assert ax.get_xlim()[0] == 0
    alt, caption = describe(fig)
    assert "each backend" in alt and "2 bars" in alt and "one per sglang fa3, vllm TRITON_MLA" in alt and "tok/s" in caption
    fig.sb_caption = "decode tok/s; bars: 95% interval over 2 server starts"
    assert describe(fig)[1] == fig.sb_caption
    plt.close(fig)


def test_a_figure_in_the_kernel_carries_its_text_to_the_page(tmp_path):
    """The book's setup cell installs the hook: a figure executed in a chapter's kernel reaches the page with its own
    alt text and a caption."""
    import nbformat
    from nbclient import NotebookClient

    from servebook.chapters import _SETUP
    from servebook.render import _exporter

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(_SETUP),
                nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                                          "ax.bar(['a', 'b'], [3.0, 1.0], yerr=[1.0, 4.0])\nax.set_ylabel('ms per token')\n"
                                          "ax.set_title('two bars')\nfig.sb_caption = 'ms per token, over 3 runs'")]
    for i, c in enumerate(nb.cells):
        c["id"] = f"c{i}"
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}).execute()
    out = next(o for o in nb.cells[1].outputs if "image/png" in o.get("data", {}))
    assert out["metadata"]["image/png"]["caption"] == "ms per token, over 3 runs"
    page, _ = _exporter().from_notebook_node(nb)
    assert "<figcaption>ms per token, over 3 runs</figcaption>" in page
    assert 'alt="two bars: 2 bars of ms per token; one per a, b."' in page


def test_each_term_is_linked_at_its_first_use_and_the_text_stays_the_same(shelf_dir):
    from servebook.glossary import link_first_uses
    from servebook.stated.consistency import visible

    page = ("<html><head><title>MLA</title></head><body><h2>TTFT</h2><p>The MLA kernel at tensor parallelism, MLA again.</p>"
            "<pre>NCCL_PROTO=LL and TTFT</pre><p><code>MLA</code> <a href='x'>eager</a> then TTFT, eager.</p></body></html>")
    out = link_first_uses(page)
    assert out.count('class="sb-term"') == 4  # MLA, tensor parallelism, TTFT (its first use in prose), eager
    assert out.count('href="../glossary.html#mla"') == 1 and "<title>MLA</title>" in out and "<pre>NCCL_PROTO=LL and TTFT</pre>" in out
    assert visible(out).blocks == visible(page).blocks
    live = (shelf_dir / "h200x1-live" / "03_force_each_backend.html").read_text()
    assert 'class="sb-term" href="../glossary.html#mla"' in live or 'href="../glossary.html#slice"' in live


def test_a_chapter_the_reference_book_lacks_is_superseded_by_none(tmp_path):
    """h200x2's NCCL grid (chapter 04) has no counterpart in the one-GPU reference book: its banner and its front-page line
    say the reference supersedes it only in what both measured, and name chapter 04 as superseded by none (they had
    said "its numbers are superseded by the reference book h200x1-trust")."""
    from servebook.pages import banner_html

    for name, stems in (("h200x1-trust", ("01", "03", "05", "06")), ("h200x2", ("01", "02", "03", "04", "05", "06"))):
        book = tmp_path / name
        book.mkdir()
        (book / "index.html").write_text("<html></html>")
        (book / "run.json").write_text(json.dumps({"manifest": {"parameters": {}}}))
        for s in stems:
            (book / f"{s}_x.html").write_text("<html></html>")
    assert shelf.only_here(tmp_path / "h200x2") == ["02", "04"] and shelf.only_here(tmp_path / "h200x1-trust") == []
    text = re.sub(r"<[^>]+>", "", banner_html("h200x1-trust", ["02", "04"]))
    assert "measured too are superseded" in text and "chapters 02, 04 are not in h200x1-trust" in text
    assert "superseded by no book" in text and "02" not in banner_html("h200x1-trust", [])
    from servebook.frontpage import _earlier

    b = {"name": "h200x2", "host": "2 x H200", "model": "embedded", "engines": ["transformers 5.17.0"], "date": "2026-11-29",
         "run": "h200x2-book", "pages": {c: f"h200x2/{c}_x.html" for c in ("01", "02", "03", "04", "05", "06")}}
    line = re.sub(r"<[^>]+>", "", _earlier(b, "h200x1-trust", {c: "" for c in ("01", "03", "05", "06")}))
    assert "Superseded by h200x1-trust in what both measured; its chapters 02, 04, not in the reference book, superseded by none" in line


def test_the_glossary_names_the_run_that_validated_the_host_rule_and_what_a_slice_difference_gives():
    """The glossary said the profile run's whole models validated the host rule: the profile run (h200x1-ref) is slices
    only; h200x1-prof's whole models did (predict.HOST_RULE_RUN). It said the difference of a 1- and a 2-layer slice is
    one layer's time: of their GPU-busy times, not of their served times (h200x1-ref's 2-MoE-layer slice served faster
    than its 1-layer one)."""
    from servebook.profile.predict import HOST_RULE_RUN
    from servebook.profile.seed import REFERENCE_PROFILE_RUN

    rule = re.sub(r"<[^>]+>", "", glossary.TERMS["host-rule"].text)
    assert f"the whole models of {HOST_RULE_RUN} validated it" in rule
    assert (REFERENCE_PROFILE_RUN == HOST_RULE_RUN) or "the whole models of the profile run" not in rule
    sl = re.sub(r"<[^>]+>", "", glossary.TERMS["slice"].text)
    assert "is one layer's time" not in sl and "GPU-busy times per decode step, divided by the layers between them" in sl
    assert "the difference of their served times does not" in sl
