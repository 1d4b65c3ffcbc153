"""A run's executed chapters rendered to pages: each notebook in the book's frame (navigation, the parameters that ran,
the run's answer box, failures marked), and the run's index page with its verdict and provenance.

    render_book(run_dir, out)            # out/index.html and one page per executed chapter
    chapter_verdict(run_dir)             # chapter 06's verdict, as its page states it
    parameters_that_ran(notebook)        # {name: value} the executed notebook's injected parameters assigned
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from pathlib import Path
from typing import Any

from . import glossary, measured, shelf
from . import pages as pages_frame
from .errors import ParameterError, ServebookError
from .provenance import describe_revision
from .results import RunStore
from .secret_refs import mask_known, mask_notebook
from .chapters import Chapter, chapters, partial_notebook
from .findings.boxes import answer_boxes
from .quantities import QUANTITIES
from .stated.tags import unregistered

__all__ = ["render_book", "check_run_dir", "chapter_verdict", "excerpt_html", "parameters_that_ran"]


_NAV_CSS = """
<style>
.sb-nav{font-family:system-ui,sans-serif;background:#f4f6f8;border-bottom:1px solid #d0d7de;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center;position:sticky;top:0;z-index:10}
.sb-nav a{color:#0969da;text-decoration:none}.sb-nav .sb-here{font-weight:600}
.sb-answer{font-family:system-ui,sans-serif;background:#eef6ff;border:1px solid #b6d4fe;border-radius:6px;margin:1em 1.2em;padding:.6em 1em}
.sb-answer ul{margin:.3em 0 0 1.2em;padding:0}
details.sb-code>summary{cursor:pointer;color:#57606a;font:12px system-ui,sans-serif;margin:.15em 0 .15em 4.5em}
.sb-failed{background:#ffebe9;border:1px solid #ff8182;padding:.6em 1em;margin:1em;font-family:system-ui,sans-serif}
details{margin:.3em 0 .8em}summary{cursor:pointer;color:#0969da}
.sb-params-table{font-family:system-ui,sans-serif;margin:.4em 1.2em .2em 5.5em;font-size:90%}.sb-params-table table{margin-top:.3em}
details.sb-excerpt pre{max-height:30em;overflow:auto;background:#f6f8fa;padding:.4em}
h1[id],h2[id],h3[id],h4[id]{scroll-margin-top:3.5em}
.sb-superseded{font-family:system-ui,sans-serif;background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;margin:1em 1.2em;padding:.6em 1em}
figure.sb-figure{margin:.4em 0}figure.sb-figure figcaption{font:13px system-ui,sans-serif;color:#57606a;margin-top:.2em}
</style>
"""


# The lab template without what a static, offline page cannot load: require.js, MathJax and mermaid come
# from a CDN and fail (console errors, a stalled page) where there is no network. Nothing in the book uses them.
# The page template: nbconvert's lab template, with code folded (a reader opens it with one click; the parameters cells
# too: a short table above them says which parameters this run changed) and every plot given alternative text.
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block input_group -%}
{%- set tags = cell.metadata.get('tags', []) -%}
{%- if 'show-code' in tags -%}
{{ super() }}
{%- elif 'sb-verdict-first' in tags -%}
{#- chapter 06's verdict, moved to the top: its output only (the call that prints it is the chapter's code) -#}
{%- elif 'parameters' in tags -%}
<details class="sb-code sb-params"><summary>parameters this run used (the notebook's defaults with the {{ cell.metadata.get('sb_given', 0) }} values it was given merged in)</summary>
{{ super() }}
</details>
{%- else -%}
<details class="sb-code"><summary>code</summary>
{{ super() }}
</details>
{%- endif -%}
{% endblock input_group %}
{% block data_png scoped %}
{%- set md = output.metadata.get('image/png', {}) -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}"><figure class="sb-figure">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
 alt="{{ (md.get('alt') or output.metadata.get('alt') or cell.metadata.get('alt') or 'a figure drawn by the code above') | escape_html }}">
{%- if md.get('caption') %}<figcaption>{{ md.get('caption') | escape_html }}</figcaption>{% endif %}
</figure></div>
{%- endblock data_png %}
"""


# stderr that libraries print and that says nothing about the run (rendered, it looks like an error)
_NOISE = re.compile(r"TqdmWarning: IProgress not found|from \.autonotebook import tqdm|Token indices sequence length is longer|"
                    r"Kernel is running over TCP without encryption|with an incorrect regex pattern|fix_mistral_regex")


def _assigned(source: str) -> dict[str, Any]:
    """``NAME = literal`` assignments of a parameters cell (papermill writes the injected one the same way)."""
    import ast

    out: dict[str, Any] = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None:
                try:
                    out[targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return out


def parameters_that_ran(nb) -> list[tuple[str, Any, Any]]:
    """(name, value this run was given, the notebook's default) for each parameter papermill injected with a value other
    than the notebook's default; secrets masked."""
    from .secrets import MASK, is_secret_name, mask_value

    tagged = lambda t: next((c for c in nb.cells if t in c.metadata.get("tags", [])), None)  # noqa: E731
    defaults_cell, injected_cell = tagged("parameters"), tagged("injected-parameters")
    if injected_cell is None:
        return []
    defaults = _assigned(defaults_cell.source) if defaults_cell is not None else {}
    out = []
    for name, value in _assigned(injected_cell.source).items():
        if name in defaults and defaults[name] == value:
            continue
        hide = lambda v: MASK if is_secret_name(name) and v not in ("", None) else mask_value(v)  # noqa: E731
        out.append((name, hide(value), hide(defaults.get(name, "(none)"))))
    return out


def _parameters_table(nb) -> None:
    """Above the (folded) parameters cells: a short table of the parameters this run changed from the notebook's
    defaults; the injected cell's text masked like the run's tables."""
    import nbformat

    from .secrets import mask_text

    at = next((i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), None)
    if at is None:
        return
    for c in nb.cells:
        if "injected-parameters" in c.metadata.get("tags", []):
            c.source = mask_text(c.source)
    ran = parameters_that_ran(nb)
    code = lambda v: f"<code>{html.escape(repr(v) if not isinstance(v, str) else v)}</code>"  # noqa: E731
    rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{code(v)}</td><td>{code(d)}</td></tr>" for n, v, d in ran)
    body = (f'<div class="sb-params-table"><b>Parameters this run changed</b> from the notebook\'s defaults (the cell '
            f'below, folded, holds every value this run used):<table><thead><tr><th>parameter</th><th>this run</th><th>default</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></div>' if ran else
            '<div class="sb-params-table"><b>Parameters:</b> this run used the notebook\'s defaults (the cell below, folded).</div>')
    cell = nbformat.v4.new_markdown_cell(body, metadata={"tags": ["sb-params-table"]})
    cell["id"] = "sb-params-table"
    nb.cells.insert(at, cell)


def _frame(nb, chapter: Chapter, store: RunStore, run_dir: Path) -> None:
    """The page's frame around the executed cells: the table of changed parameters above one parameters cell showing the
    values the run used; chapter 06's verdict first; each figure's own alternative text; "run this yourself" last."""
    whatif = bool((store.manifest.get("parameters") or {}).get("profile"))
    last = pages_frame.run_yourself(nb, store.manifest, chapter.number, run_dir, whatif)  # before the cells are merged
    _parameters_table(nb)
    pages_frame.merge_parameters(nb)
    if chapter.number == "06":
        pages_frame.verdict_first(nb)
    pages_frame.figure_alts(nb)
    nb.cells.append(last)


def _drop_noise(nb) -> int:
    """Remove stderr streams made only of known library noise; returns how many were dropped."""
    dropped = 0
    for cell in nb.cells:
        keep = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                lines = [l for l in str(o.get("text", "")).splitlines() if l.strip()]
                if lines and all(_NOISE.search(l) or l.startswith("  ") for l in lines):
                    dropped += 1
                    continue
            keep.append(o)
        if "outputs" in cell:
            cell["outputs"] = keep
    return dropped


def _nav(prev: tuple[str, str] | None, nxt: tuple[str, str] | None, title: str, shelved: bool = False) -> str:
    parts = ['<div class="sb-nav"><a href="index.html">servebook</a>']
    parts.append(f'<a href="{prev[0]}">&larr; {html.escape(prev[1])}</a>' if prev else "<span></span>")
    parts.append(f'<span class="sb-here">{html.escape(title)}</span>')
    parts.append(f'<a href="{nxt[0]}">{html.escape(nxt[1])} &rarr;</a>' if nxt else "<span></span>")
    parts.append(f'<a href="../{glossary.FILE}">glossary</a>' + ('<a href="../index.html">all books</a>' if shelved else "") + "</div>")
    return "".join(parts)


def _exporter():
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    return HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"servebook.html.j2": _TEMPLATE})],
                        template_file="servebook.html.j2")


def excerpt_html(text: str, summary: str = "", first: int = 160) -> str:
    """A failure or log excerpt for a page: whole, in a collapsible block, never cut mid-word. Its summary is ``summary``
    or the text's first line, shortened at a word boundary (marked "...") when longer than ``first`` characters.

        display(HTML(excerpt_html(row["error"])))
    """
    text = str(text).rstrip()
    head = summary or (text.splitlines() or [""])[0]
    if not summary and (len(head) > first or "\n" in text):
        cut = head[:first].rsplit(" ", 1)[0] if len(head) > first else head
        head = cut.rstrip(" ,;:") + (" ..." if len(head) > first else "") + " (whole text below)"
    return (f'<details class="sb-excerpt"><summary>{html.escape(head)}</summary>'
            f'<pre style="white-space:pre-wrap">{html.escape(text)}</pre></details>')


def _mark_error_cells(nb) -> int:
    """Tag cells whose output is an error, so the page (and a test) can find them: class ``celltag_sb-error``."""
    n = 0
    for cell in nb.cells:
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            tags = cell.metadata.setdefault("tags", [])
            if "sb-error" not in tags:
                tags.append("sb-error")
            n += 1
    return n


def check_run_dir(run_dir: str | os.PathLike, name: str = "run_dir") -> Path:
    """``run_dir`` when it is a run's directory (it holds the ``manifest.json`` that ``servebook book`` writes), else a
    one-line ``ParameterError`` naming the parameter (``name``) and what is there instead."""
    path = Path(run_dir)
    if (path / "manifest.json").is_file():
        return path
    what = ("does not exist" if not path.exists() else "is not a directory" if not path.is_dir() else
            "holds runs, not one run" if any(path.glob("*/manifest.json")) or any(path.glob("*/*/manifest.json")) else
            "has no manifest.json")
    raise ParameterError(name, str(run_dir), f"it {what}; give one run's directory, runs/<host>/<run-id> "
                                                  f"(servebook book writes it, with its manifest.json)")


def render_book(run_dir: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Render a run's executed notebooks to ``out``: one page per chapter and an index."""
    import nbformat

    from .paths import writable_dir

    run_dir = check_run_dir(run_dir)
    out = writable_dir(out)
    store = RunStore(run_dir)
    manifest = store.manifest
    status = _chapter_status(store)
    pages = []
    for chapter in chapters():  # the finished notebook; with none, an interrupted execution's partial one
        executed = run_dir / "notebooks" / f"{chapter.stem}.ipynb"
        executed = executed if executed.exists() else partial_notebook(run_dir / "notebooks", chapter.stem)
        if executed.exists():
            pages.append((chapter, executed))
    exporter = _exporter()
    boxes = answer_boxes(store)
    by = shelf.superseded_by(out, bool((manifest.get("parameters") or {}).get("profile")), shelf.profiles_manifest(manifest))
    superseded = pages_frame.banner_html(by, shelf.only_here(out, {c.number for c, _ in pages}) if by else [])
    glossary.write_glossary(out.parent)  # beside the book, as rendered/glossary.html: every page links ../glossary.html
    shelved = (out.parent / "index.html").exists()  # a front page beside the book (rendered/): the pages link it
    errors: dict[str, int] = {}
    written: dict[str, str] = {}
    for i, (chapter, executed) in enumerate(pages):
        nb = mask_notebook(nbformat.read(executed, as_version=4))
        nb.cells = [c for c in nb.cells if "sb-setup" not in c.metadata.get("tags", [])]
        errors[chapter.stem] = _mark_error_cells(nb)
        _drop_noise(nb)
        _frame(nb, chapter, store, run_dir)
        body, _ = exporter.from_notebook_node(nb)
        prev = (f"{pages[i - 1][0].stem}.html", pages[i - 1][0].title) if i > 0 else None
        nxt = (f"{pages[i + 1][0].stem}.html", pages[i + 1][0].title) if i + 1 < len(pages) else None
        banner = ""
        info = status.get(chapter.stem, {})
        if info.get("status") == "interrupted":
            finished = executed.name == f"{chapter.stem}.ipynb"
            banner = ('<div class="sb-failed" id="sb-failed">The last execution of this chapter was interrupted before it '
                      'finished; ' + ("this page is the execution before it, which finished." if finished else
                                      "this page is what it had run by then: the cells after that did not run.") + '</div>')
        elif info.get("status") == "failed" or errors[chapter.stem]:
            why = excerpt_html(str(info.get("error") or "a cell raised an error"))
            where = ('<a href="#papermill-error-cell">The cell that failed</a> is marked below; the cells before it ran.'
                     if errors[chapter.stem] else "Every cell ran; what each measurement tried and why it failed is below.")
            banner = f'<div class="sb-failed" id="sb-failed">This chapter failed in this run: {why}{where}</div>'
        nav = _NAV_CSS + _nav(prev, nxt, chapter.title, shelved) + superseded + banner + boxes.get(chapter.stem[:2], "")
        body = glossary.link_first_uses(re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1))
        body = pages_frame.link_present_chapters(body, {c.stem for c, _ in pages})
        body = _shared_stylesheet(mask_known(body), out)
        (out / f"{chapter.stem}.html").write_text(body, encoding="utf-8")
        written[f"{chapter.stem}.html"] = body
    index = pages_frame.link_present_chapters(pages_frame.index_frame(_index_html(store, pages, status, errors), superseded,
                                                                      shelved), {c.stem for c, _ in pages})
    (out / "index.html").write_text(mask_known(glossary.link_first_uses(index)), encoding="utf-8")
    (out / "run.json").write_text(json.dumps({"run_dir": str(run_dir), "manifest": manifest}, indent=2, default=str))
    stray = unregistered(written, QUANTITIES)  # a name q was given at run time: the kernel does not gather the registry
    if stray:
        raise ServebookError(f"{out}: {stray}; the pages are written, render them again once fixed")
    return out / "index.html"


def _shared_stylesheet(page: str, out: Path) -> str:
    """Move the template's inline stylesheets (~300 KB, the same on every page) into one file the pages link."""
    head_end = page.find("</head>")
    blocks = list(re.finditer(r'<style type="text/css">(.*?)</style>\s*', page[:head_end], flags=re.S))
    if not blocks:
        return page
    css = "\n".join(m.group(1) for m in blocks)
    name = f"lab-{hashlib.sha256(css.encode()).hexdigest()[:10]}.css"
    if not (out / name).exists():
        (out / name).write_text(css, encoding="utf-8")
    first, last = blocks[0], blocks[-1]
    link = f'<link rel="stylesheet" href="{name}">\n'
    inner = page[first.start():last.end()]
    kept = re.sub(r'<style type="text/css">.*?</style>\s*', "", inner, flags=re.S)  # anything between the blocks stays
    return page[:first.start()] + link + kept + page[last.end():]


def _chapter_status(store: RunStore) -> dict[str, dict]:
    """Each chapter's last recorded outcome: the ``chapters`` table (every invocation), then the manifest; a chapter whose
    last execution left its partial notebook behind (killed, or stopped before it could say so) is ``interrupted``."""
    status = {r["chapter"]: r for r in store.rows("chapters") if r.get("chapter")}
    for r in store.manifest.get("chapters", []):
        status.setdefault(r["chapter"], r)
    for c in chapters():
        if partial_notebook(store.path / "notebooks", c.stem).exists() and status.get(c.stem, {}).get("status") != "interrupted":
            status[c.stem] = {**status.get(c.stem, {}), "chapter": c.stem, "status": "interrupted",
                              "error": "its last execution did not finish (the book was stopped or killed while it ran)"}
    return status


def _code_cell(manifest: dict, status: dict) -> str:
    """The code the run ran (``describe_revision``), and the code of chapters executed again later on its tables."""
    lines = [html.escape(describe_revision(manifest.get("git_revision")))]
    for stem, row in sorted(status.items()):
        if row.get("refreshed") and "git_revision" in row:
            lines.append(f"{html.escape(stem[:2])} executed again on these tables: {html.escape(describe_revision(row['git_revision']))}")
    return "<br>".join(lines)


def chapter_verdict(run_dir: str | os.PathLike) -> str | None:
    """Chapter 06's verdict as the run's executed notebook states it: the first Markdown output after its heading
    "## The verdict" (before the next heading), or None (a run whose chapter 06 predates that section, or did not run)."""
    import nbformat

    path = Path(run_dir) / "notebooks" / "06_findings.ipynb"
    if not path.exists():
        return None
    inside = False
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            heading = cell.source.lstrip()
            if inside and heading.startswith("## "):
                return None
            inside = inside or heading.startswith("## The verdict")
            continue
        if inside:
            for o in cell.get("outputs", []):
                text = (o.get("data") or {}).get("text/markdown")
                if text:
                    return "".join(text) if isinstance(text, list) else str(text)
    return None


def _verdict_html(run_dir: Path) -> str:
    from nbconvert.filters.markdown import markdown2html

    verdict = chapter_verdict(run_dir)
    if not verdict:
        return ""
    return (f'<h2>The verdict</h2><div class="sb-verdict">{markdown2html(verdict)}'
            f'<p><small>As <a href="06_findings.html">06. Findings</a> states it.</small></p></div>')


def _book_name(store: RunStore) -> str:
    """The book's name: its run directory's (the name every page and the front page use), with the run_id it was
    recorded under where that differs (h200x1-trust was recorded as h200x1-live)."""
    rid = str(store.manifest.get("run_id") or "")
    name = store.path.name or rid
    return name if not rid or rid == name else f"{name} (recorded under the run_id {rid})"


def _software_row(h: dict, versions: dict) -> str:
    """The index card's software line; "not recorded" where the run holds none of it (a run of profiles only)."""
    got = {"driver": h.get("driver"), "CUDA": h.get("cuda"), "torch": h.get("torch") or versions.get("torch"), "NCCL": h.get("nccl")}
    if not any(got.values()):
        return "<tr><th>software</th><td>not recorded in this run</td></tr>"
    return "<tr><th>software</th><td>" + " &middot; ".join(f"{k} {html.escape(str(v))}" for k, v in got.items()) + "</td></tr>"


def _gpus_text(h: dict, manifest: dict) -> str:
    """The index card's GPUs: count, name, capability, links; the machines of a recording made of units."""
    if not h.get("gpu"):
        return ", ".join((manifest.get("host_fingerprint") or {}).get("gpus") or []) or "no GPU"
    return (f"{h.get('gpu_count')} x {h['gpu']}, capability {h.get('capability') or 'not recorded'}"
            + (f", {'/'.join(h['links'])}" if h.get("links") else "")
            + (f"; {len(h['machines'])} machines, one per recording unit: {', '.join(h['machines'])}"
               if len(h.get("machines") or []) > 1 else ""))


def _index_html(store: RunStore, pages, status: dict, errors: dict) -> str:
    from .profile.book import not_run_line
    from .findings import host_summary, versions_read

    manifest = store.manifest
    params = manifest.get("parameters", {})
    versions = manifest.get("versions", {})
    h = host_summary(store)
    gpus = _gpus_text(h, manifest)
    engines = ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("transformers", "sglang", "vllm") and v)
    studied = ", ".join(f"{e['engine']} {e.get('version')}" for e in h.get("engines", []) if e.get("status") == "ok")
    profiled = any(e.get("source") == "profile_runs" for e in h.get("engines", []))
    read = [v for v in versions_read(store) if v not in studied.split(", ")]
    rows = []
    for chapter, _ in pages:
        info = status.get(chapter.stem, {})
        state = "failed" if errors.get(chapter.stem) and info.get("status") == "ok" else info.get("status", "?")
        mark = "&#10003;" if state == "ok" else f"&#10007; {html.escape(str(state))}"
        if state == "failed" and str(info.get("error") or "").startswith(measured.PREFIX):
            mark += f": {measured.PREFIX}"
        secs = f" {info['seconds']}s" if info.get("seconds") is not None else ""
        secs += f", executed again on the recorded tables {html.escape(str(info.get('recorded_at') or ''))}" if info.get("refreshed") else ""
        rows.append(f'<li><a href="{chapter.stem}.html">{html.escape(chapter.title)}</a> <small class="sb-status">{mark}{secs}</small></li>')
    missing = [c for c in chapters() if c.stem not in {p[0].stem for p in pages}]
    for c in missing:
        rows.append(f'<li>{html.escape(c.title)} <small class="sb-status">{html.escape(not_run_line(store.path, c.stem) or "not run in this run")}</small></li>')
    date = str(manifest.get("started") or manifest.get("created") or "?")
    card = (
        f"<table class=\"sb-card\"><tr><th>host</th><td>{html.escape(str(h.get('hostname') or '?'))} ({html.escape(gpus)})</td></tr>"
        + (f"<tr><th>what-if</th><td>hardware profile {html.escape(str(params.get('profile')))}: nothing on it was measured; "
           f"chapters 03-05 plan and predict</td></tr>" if params.get("profile") else "")
        + (f"<tr><th>engine under study</th><td>{html.escape(str(params.get('engine')))} &middot; model {html.escape(str(params.get('model')))}</td></tr>"
           if params or not profiled else
           f"<tr><th>engine under study</th><td>none: a run of profiles only &middot; model {html.escape(str(h.get('model')))}</td></tr>")
        + f"<tr><th>engines</th><td>{html.escape(studied or engines or 'none')}"
        + ((" (as the profiles recorded them, table profile_runs)" if profiled else
            " (each engine environment's own version, chapter 01's engines table; the chapters' versions line is the "
            "kernel's that executed them)") if studied else "") + "</td></tr>"
        + (f"<tr><th>code read</th><td>chapter 02 read {html.escape(', '.join(read))} (their selection code, read and run on this CPU with GPU-only libraries stubbed - the [run] of chapter 02; no server of them was started)</td></tr>"
           if read else "")
        + _software_row(h, versions)
        + f"<tr><th>date</th><td>{html.escape(date)}"
        + (f" (finished {html.escape(str(manifest.get('finished')))})" if manifest.get("finished") else "") + "</td></tr>"
        f"<tr><th>run</th><td>{html.escape(_book_name(store))}"
        + (f" &middot; servebook {html.escape(str(manifest.get('servebook_version')))}" if manifest.get("servebook_version") else "")
        + "</td></tr>"
        f"<tr><th>code</th><td>{_code_cell(manifest, status)}</td></tr></table>"
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>servebook: {html.escape(store.path.name or str(manifest.get('run_id') or ''))}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;line-height:1.5}}th{{text-align:left;padding-right:1em;vertical-align:top}}li{{margin:.3em 0}}
.sb-card{{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6em 1em}}
.sb-verdict{{border-left:4px solid #0969da;padding:.2em 1em;background:#f6f8fa}}</style>
</head><body><h1>servebook</h1><p>Why is this engine slow on this hardware, and what fixes it? An investigation in six steps.</p>
<h2>This run</h2>{card}{_verdict_html(store.path)}<h2>Chapters</h2><ol style="list-style:none;padding-left:0">{''.join(rows)}</ol>
<p>Start with <a href="06_findings.html">06. Findings</a> for what to change; every finding links to the chapter that shows it.</p></body></html>
"""
