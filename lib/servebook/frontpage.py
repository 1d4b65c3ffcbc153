"""The front page of every rendered book: ``rendered/index.html`` (and ``rendered/glossary.html`` beside it).

    render_front_page("rendered", "data/runs")   # -> Path("rendered/index.html")
    servebook front rendered/ [--runs data/runs]

Answer first: the investigation's question and its current answer for the seed case (``servebook.frontpage_answer``,
from the what-if book's chapter 06 tables); then the reference book (``servebook.shelf.REFERENCE_BOOKS``: its host, engines
and versions, model, date, and a one-line answer computed from its tables by ``servebook.findings``: the fastest
configuration and its tok/s, "correct" only where its decode kernel's tokens were compared); then the what-if book; then
one table for every configuration several books measured, the reference's number first and each other's with why it
differs (``servebook.frontpage_same``); then the earlier recordings, by name only (their numbers stay on their pages and in
that table). Every figure is tagged with ``servebook.stated.q``, so the front page can be checked against the books it
summarises. Then the debugging path as a figure: chapter by chapter, the question it answers, linked to each book's page.

The page is made only from the renders and their runs: running it twice writes the same bytes; links are relative.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from .paths import book_root

__all__ = ["QUESTIONS", "books", "book_summary", "render_front_page", "register"]

# The question each chapter answers (the README's table "chapter | question it answers"; tests/test_frontpage.py
# keeps the two the same).
QUESTIONS = {
    "01": "What GPUs, compute capability, driver/CUDA/NCCL, topology and P2P does this host have — and what do the "
          "engines' own detection helpers conclude about it?",
    "02": "Which attention backend will the engine pick for this model on this GPU, which rule in its code decides, and "
          "what would it pick on other GPUs or versions?",
    "03": "Does each backend really run when forced, is its output right, and how fast is it?",
    "04": "How long do decode-sized all-reduces take under each NCCL setting?",
    "05": "Single-stream and concurrency-sweep throughput, engines side by side, against the roofline.",
    "06": "What to change, as launch commands.",
}


def books(rendered_dir: str | os.PathLike) -> list[Path]:
    """The rendered books under ``rendered_dir``: folders with an ``index.html`` and a ``run.json``, by name."""
    from .shelf import books as on_shelf

    return on_shelf(Path(rendered_dir))


def _run_dir(render: Path, runs_dir: Path | None) -> Path:
    """The run a book was rendered from: ``runs_dir/<name>`` for the name its ``run.json`` gives, else that path."""
    named = Path(json.loads((render / "run.json").read_text())["run_dir"])
    if runs_dir is not None and (runs_dir / named.name / "manifest.json").exists():
        return runs_dir / named.name
    return named if named.is_absolute() else book_root() / named


def _model_text(model: str | None, run: Path) -> str:
    """The model under study in words: from its ``servebook_model.json``, where the path names a model built by servebook;
    a path on the recording host is looked up in the run's own ``models/`` folder (the model's files kept with the run)."""
    if not model:
        return "?"
    if model == "embedded":
        return "embedded (small DeepSeek-V3-architecture model, random weights)"
    path = Path(model) if Path(model).is_absolute() else book_root() / model
    info = next((p for p in (path / "servebook_model.json", run / "models" / path.name / "servebook_model.json") if p.exists()), None)
    if info:
        m = json.loads(info.read_text())
        scale = f", width 1/{m['scale']}" if m.get("scale", 1) != 1 else ""
        return f"{m.get('card')} slice: {m.get('layers')} layers, {m.get('weights')} weights{scale}"
    return str(model)


def _host_text(h: dict, profile: str | None) -> str:
    if not h.get("gpu"):
        return f"{h.get('hostname') or '?'}: no GPU"
    text = f"{h.get('gpu_count')} x {h['gpu']}, capability {h.get('capability') or 'not recorded'}"
    if h.get("links"):
        text += f", links {'/'.join(h['links'])}"
    if profile:   # a profile's links are assumed (servebook.probe.collect: NVLink as on a baseboard, else SYS)
        text += (f" (hardware profile {profile}: datasheet facts{' and assumed links' if h.get('links') else ''}, "
                 "nothing measured)")
    if len(h.get("machines") or []) > 1:
        text += f"; {len(h['machines'])} machines, one per recording unit"
    return text


def _engines(store, h: dict) -> tuple[list[str], list[str]]:
    """Engines with versions this run detected or ran, and the versions whose code it only read (chapter 02)."""
    from .findings import backends, versions_read

    ran = [f"{e['engine']} {e['version']}" for e in h.get("engines", []) if e.get("status") == "ok" and e.get("version")]
    for b in backends(store):
        if b.get("version") and f"{b['engine']} {b['version']}" not in ran:
            ran.append(f"{b['engine']} {b['version']}")
    return ran, [v for v in versions_read(store) if v not in ran]


def _how(b: dict) -> str:
    """How the fastest start of one engine stands against its default, in chapter 06's terms (``findings.backends``)."""
    if b.get("best_tok_s") == b.get("default_tok_s"):
        return "its default"
    if b.get("default_tok_s") is None:
        return "forced; the default did not run, so nothing to compare"
    if b.get("best_reported") and b.get("best_reported") == b.get("default_reported"):
        return "forced; the kernel the default loads"
    if b.get("change_supported"):
        return "forced; faster than the default beyond both intervals over server starts"
    if "auto" in (b.get("ties") or []):
        return "forced; within the default's interval, so keep the default"
    return "forced; ahead of the default within one server start only, so keep the default"


def _none_studied(h: dict) -> str | None:
    """"none: profiles only" for a run of profiles only (its engines each served a ladder of slices; no book
    parameters name one under study), else None."""
    return "none: profiles only" if any(e.get("source") == "profile_runs" for e in h.get("engines", [])) else None


def _units_answer(store) -> str:
    """A reference recording of units (a run of profiles only): its depth ladders and the engines compared through
    the anchor, as chapter 06 states them; "" for any other run."""
    from nbconvert.filters.markdown import markdown2html

    from .profile.units_page import units_markdown

    units = units_markdown(store)
    return "Decode-step profiles only (chapter 06): " + markdown2html(units) if units else ""


def _answer(store, profile: str | None) -> str:
    """The run's answer in one line, HTML, every figure tagged: computed from its tables, never typed in."""
    from .findings import backends, throughput
    from .stated import q, selection_of

    code = lambda t: f"<code>{html.escape(str(t))}</code>"  # noqa: E731
    if profile:
        totals = [r for r in store.rows("seed_projection") if r.get("category") == "total" and r.get("predicted_tok_s")]
        if totals:
            def one(r: dict) -> str:
                e = str(r["engine"])
                notes = []
                if r.get("measured_version"):
                    notes.append(f"kernels of {html.escape(e)} {q('seed_profile_version', r['measured_version'], of=e)} profiled on an H200"
                                 + (f", for the studied {q('seed_studied_version', r['studied_version'], of=e)}"
                                    if r.get("studied_version") not in (None, r["measured_version"]) else ""))
                if r.get("seed_tok_s") is not None:
                    notes.append(f"the seed measured {q('seed_tok_s', r['seed_tok_s'], '.1f', of=e)}")
                return (f"{html.escape(e)} {q('seed_projected_tok_s', r['predicted_tok_s'], '.1f', of=e)} tok/s"
                        + (f" ({'; '.join(notes)})" if notes else ""))
            return ("Predicted, not measured (projected onto this profile from decode-step profiles on an H200, chapter 06): "
                    + "; ".join(one(r) for r in totals) + ", single stream (the answer at the top of this page reads it).")
        seen: dict[str, str] = {}
        for r in store.rows("selection"):
            if r.get("method") == "dynamic" and r.get("gpu") == profile and r.get("attention_backend"):
                seen.setdefault(selection_of(r), f"{html.escape(str(r.get('engine')))} {html.escape(str(r.get('version')))} picks "
                                + q("selected_backend", r["attention_backend"], of=selection_of(r), code=True))
        if seen:
            return "Nothing measured (what-if): " + "; ".join(seen.values()) + f" on {html.escape(profile)}, each by its own code (chapter 02)."
        return "Nothing measured (what-if), and no engine's selection was resolved in this run."
    ranked = sorted((b for b in backends(store) if b.get("best_tok_s") is not None), key=lambda b: -b["best_tok_s"])
    # "correct" only where the forced decode kernels' tokens were compared (chapters 03 and 06 say the same, fastest_correct)
    decode_checked = all(b.get("decode_checked", True) for b in ranked)
    text = ""
    if ranked:
        parts = [f"{html.escape(b['engine'])} {html.escape(str(b.get('version')))} with "
                 f"{q('best_backend', b.get('best_reported') or b.get('best'), of=b['engine'], code=True)} ({_how(b)}) at "
                 f"{q('best_tok_s', b['best_tok_s'], ',.1f', of=b['engine'])} ± {q('best_ci95', b.get('best_ci95'), ',.1f', of=b['engine'])} "
                 f"tok/s single stream ({_over(b.get('best_starts'), 'best_starts', b['engine'])})" for b in ranked]
        text = (("Fastest correct configuration" if decode_checked else "Fastest configuration that ran") + " per engine (chapter 03"
                + ("" if decode_checked else "; output checked on the prefill path only: this run has no decode-path agreement")
                + "): " + "; ".join(parts) + ".")
        if len(ranked) > 1:
            a, b = ranked[:2]
            text += " Between the engines: " + _between(a["engine"], (a["best_tok_s"], a.get("best_ci95"), a.get("best_starts")),
                                                        b["engine"], (b["best_tok_s"], b.get("best_ci95"), b.get("best_starts"))) + "."
    served = sorted((t for t in throughput(store) if t.get("single_tok_s") is not None), key=lambda t: -t["single_tok_s"])
    if served:
        t = served[0]
        text += (" " if text else "") + (f"Served (chapter 05), the highest single-stream rate: {code(t['label'])} "
                                         f"{q('single_tok_s', t['single_tok_s'], ',.1f', of=t['label'])} ± "
                                         f"{q('single_ci95', t.get('single_ci95'), ',.1f', of=t['label'])} tok/s "
                                         f"({_over(t.get('starts'), 'single_starts', t['label'])})")
        if len(served) > 1:
            u = served[1]
            text += "; against the next, " + code(u["label"]) + ": " + _between(
                "it", (t["single_tok_s"], t.get("single_ci95"), t.get("starts")),
                code(u["label"]), (u["single_tok_s"], u.get("single_ci95"), u.get("starts")))
        text += "."
    return text or "No measurement succeeded in this run."


def _over(starts, quantity: str, of: str) -> str:
    """What a 95% interval covers, as chapters 03 and 05 say it: over N server starts, or within one."""
    from .stated import q

    n = int(starts or 1)
    return f"95% interval over {q(quantity, n, 'd', of=of)} server starts" if n >= 2 else "95% interval within one server start"


def _between(a_name: str, a: tuple, b_name: str, b: tuple) -> str:
    """Whether ``a`` (mean, 95% half-width, starts) is ahead of ``b`` beyond the intervals: chapter 06's rule
    (:func:`servebook.stated.intervals.separated`), said without a verdict where the intervals cannot give one."""
    from .stated.intervals import _overlap

    (ma, ea, na), (mb, eb, nb) = a, b
    if _overlap(ma, ea or 0.0, mb, eb or 0.0):
        return f"the 95% intervals overlap, so {a_name} is not faster than {b_name} beyond them"
    if min(int(na or 1), int(nb or 1)) < 2:
        return (f"{a_name} is ahead of {b_name} only within one server start, which is no verdict "
                "(the rate moves between starts by more than within one)")
    return f"{a_name} is faster than {b_name} beyond both 95% intervals over server starts"


def _model_info(model: str | None, run: Path) -> dict:
    """The built model's ``servebook_model.json`` (card, layers, weights), where the run's model is a slice."""
    if not model or model == "embedded":
        return {}
    path = Path(model) if Path(model).is_absolute() else book_root() / model
    info = next((p for p in (path / "servebook_model.json", run / "models" / path.name / "servebook_model.json") if p.exists()), None)
    return json.loads(info.read_text()) if info else {}


def _weights_by_chapter(ran: dict[str, dict]) -> str:
    """Where chapters 03 and 05 ran on slices with different weights, which chapter had which (h200x1-live: chapter 03 on
    the random-weight slice, chapter 05 on the dummy one); "" where they agree or one is unknown."""
    w = {n: r.get("weights") for n, r in ran.items() if r.get("weights")}
    if len(set(w.values())) < 2:
        return ""
    return " (" + "; ".join(f"chapter {n}: {v} weights" for n, v in sorted(w.items())) + ")"


def _workload(run: Path) -> dict[str, dict]:
    """Per chapter (03, 05), what its executed notebook ran: the workload (tokens generated, prompt length, runs) and the
    model's weights (its own ``model`` parameter: a chapter may have run on another slice than the book's first)."""
    import nbformat

    from .pages import parameters_used

    out = {}
    for number, stem, names in (("03", "03_force_each_backend", ("max_tokens", "runs")),
                                ("05", "05_benchmark_single_stream", ("input_len", "max_tokens", "runs"))):
        path = run / "notebooks" / f"{stem}.ipynb"
        if path.exists():
            used = parameters_used(nbformat.read(path, as_version=4))
            out[number] = {"workload": ", ".join(f"{n} {used[n]}" for n in names if n in used),
                           "weights": _model_info(used.get("model"), run).get("weights")}
    return out


def book_summary(render: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> dict:
    """What the front page says of one rendered book: name, host, engines, model, date, answer (HTML), chapter pages, and
    the configurations it measured (``frontpage_same.configurations``)."""
    from .chapters import chapters
    from .findings import host_summary
    from .frontpage_same import configurations
    from .results import RunStore

    render = Path(render)
    store = RunStore(_run_dir(render, Path(runs_dir) if runs_dir else None))
    m = store.manifest
    params = m.get("parameters") or {}
    h = host_summary(store)
    ran, read = _engines(store, h)
    pages = {c.number: f"{render.name}/{c.stem}.html" for c in chapters() if (render / f"{c.stem}.html").exists()}
    machine = f"{h.get('gpu_count')} x {h['gpu']}" if h.get("gpu") else "no GPU"
    ran_as = _workload(store.path)
    configs = [] if params.get("profile") else configurations(store, _model_info(params.get("model"), store.path), machine, ran_as)
    return {
        "name": render.name, "run": store.path.name, "host": _host_text(h, params.get("profile")),
        "whatif": bool(params.get("profile")), "engine": params.get("engine") or _none_studied(h), "engines": ran, "read": read,
        "model": (_model_text(params.get("model"), store.path) if params.get("model") or not h.get("model") else h["model"])
                 + _weights_by_chapter(ran_as), "date": str(m.get("started") or h.get("date") or "?")[:10],
        "answer": (not params.get("profile") and _units_answer(store)) or _answer(store, params.get("profile")), "pages": pages, "configs": configs, "store": store,
    }


_CSS = """body{font-family:system-ui,sans-serif;max-width:64em;margin:2em auto;line-height:1.5;padding:0 1em}
.sb-book{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.5em 1em;margin:.8em 0}
.sb-book h3{margin:.2em 0}.sb-book th,.sb-seed th{text-align:left;padding-right:1em;vertical-align:top;font-weight:600}
.sb-answer{border-left:4px solid #0969da;padding-left:.6em}
.sb-seed{border:2px solid #0969da;border-radius:6px;padding:.6em 1em;background:#eef6ff}
.sb-same{border-collapse:collapse;font-size:.88em}.sb-same td,.sb-same th{border:1px solid #d0d7de;padding:.2em .4em;vertical-align:top}
.sb-same tr.sb-ref{background:#eef6ff}.sb-earlier li{margin:.4em 0}
.sb-path{margin:1em 0}.sb-step{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;background:#fff}
.sb-step b{color:#0969da}.sb-step .sb-links{font-size:.85em}.sb-arrow{display:block;margin:0 auto}
figcaption{font-size:.9em;color:#57606a}"""

_ARROW = ('<svg class="sb-arrow" width="24" height="22" viewBox="0 0 24 22" aria-hidden="true">'
          '<path d="M12 0v14" stroke="#57606a" stroke-width="2"/><path d="M5 12l7 9 7-9z" fill="#57606a"/></svg>')


def _card(b: dict, answer: bool = True) -> str:
    e = html.escape
    engines = e(", ".join(b["engines"]) or "none") + (f"; code read only (chapter 02): {e(', '.join(b['read']))}" if b["read"] else "")
    return (f'<section class="sb-book" id="book-{e(b["name"])}" data-book="{e(b["name"])}">'
            f'<h3><a href="{e(b["name"])}/index.html">{e(b["name"])}</a>'
            + (' <small>(<a href="glossary.html#what-if">what-if</a>: no GPU, nothing measured)</small>' if b["whatif"] else "") + "</h3><table>"
            f"<tr><th>host</th><td>{e(b['host'])}</td></tr>"
            f"<tr><th>engines</th><td>{engines} &middot; under study: {e(str(b['engine']))}</td></tr>"
            f"<tr><th>model</th><td>{e(b['model'])}</td></tr>"
            f"<tr><th>date</th><td>{e(b['date'])} &middot; run <code>data/runs/{e(b['run'])}</code></td></tr>"
            + (f'<tr><th>answer</th><td class="sb-answer">{b["answer"] if answer else "the answer at the top of this page, read from this book&#39;s chapter 06 tables"}</td></tr>')
            + "</table></section>")


def _earlier(b: dict, reference: str | None, ref_pages: dict | None = None) -> str:
    """An earlier recording: what it is and which book supersedes it, in what both measured (``ref_pages``: the reference
    book's chapters; those only this book has are superseded by none); its numbers stay on its pages and, for a
    configuration the reference measured too, in the table "same configuration, other methods"."""
    e = html.escape
    own = sorted(set(b["pages"]) - set(ref_pages or {})) if ref_pages is not None else []
    return (f'<li class="sb-book-earlier" id="book-{e(b["name"])}" data-book="{e(b["name"])}"><a href="{e(b["name"])}/index.html">'
            f'{e(b["name"])}</a>: {e(b["host"])}; {e(b["model"])}; engines {e(", ".join(b["engines"]) or "none")}; recorded '
            f'{e(b["date"])} (run <code>data/runs/{e(b["run"])}</code>). Superseded by '
            + (f'<a href="{e(reference)}/index.html">{e(reference)}</a>' if reference else "the reference book")
            + " in what both measured" + (f"; its chapter{'s' if len(own) > 1 else ''} {', '.join(own)}, not in the reference book, "
                                          "superseded by none" if own else "") + ".</li>")


def _path_figure(summaries: list[dict]) -> str:
    """The debugging path: each chapter, the question it answers, and a link to it in every book that has it."""
    from .chapters import chapters

    steps = []
    for c in chapters():
        links = " &middot; ".join(f'<a href="{html.escape(b["pages"][c.number])}">{html.escape(b["name"])}</a>'
                                  for b in summaries if c.number in b["pages"])
        steps.append(f'<div class="sb-step" id="step-{c.number}"><b>{html.escape(c.title)}</b><br>'
                     f'{html.escape(QUESTIONS.get(c.number, ""))}<br><span class="sb-links">in: {links or "no book yet"}</span></div>')
    return (f'<figure class="sb-path">{_ARROW.join(steps)}<figcaption>The debugging path: each chapter answers one question '
            "and hands its answer to the next; chapter 06 turns them into launch commands.</figcaption></figure>")


def render_front_page(rendered_dir: str | os.PathLike = "rendered", runs_dir: str | os.PathLike | None = None) -> Path:
    """Write ``rendered_dir/index.html`` (the answer first, the reference book, the what-if books, one table for the
    configurations several books measured, the earlier recordings, the debugging path) and ``rendered_dir/glossary.html``.
    ``runs_dir``: where the runs are (default: the path each book's ``run.json`` names, relative to the book's root)."""
    from . import glossary, shelf
    from .frontpage_answer import seed_answer
    from .profile.seed import REFERENCE_PROFILE_RUN
    from .frontpage_same import same_configuration, table_html

    rendered_dir = Path(rendered_dir)
    summaries = [book_summary(r, runs_dir) for r in books(rendered_dir)]
    ref = shelf.reference(rendered_dir)
    reference = [b for b in summaries if b["name"] == ref]
    whatifs = [b for b in summaries if b["whatif"] and b["name"] != ref]
    profiles = [b for b in summaries if shelf.role(rendered_dir / b["name"]) == "profiles"]
    earlier = [b for b in summaries if b not in reference and b not in whatifs and b not in profiles]
    same = table_html(same_configuration(summaries, ref), ref)
    answered = next((b["name"] for b in whatifs if b["store"].rows("seed_range")), None)  # the book seed_answer reads
    page = (f'<!doctype html><html><head><meta charset="utf-8"><title>servebook: the rendered books</title>'
            f'<style>{_CSS}</style></head><body><p><a href="{glossary.FILE}">glossary</a> (every term the books use)</p>'
            "<h1>servebook</h1>" + seed_answer(whatifs)
            + (f"<h2>The reference book: {html.escape(ref)}</h2><p>This project's reference recording on an H200; where several "
               "books measured the same configuration, its number is the one quoted.</p>" + _card(reference[0]) if reference else "")
            + (f"<h2>The profile run: {', '.join(html.escape(b['name']) for b in profiles)}</h2><p>Decode-step profiles "
               "recorded on an H200 (model slices at several depths, each engine's on one machine)"
               + ("; the what-if book's projection reads them" if REFERENCE_PROFILE_RUN in [b["run"] for b in profiles] else "")
               + ". A run of profiles only serves no configuration another book measured: it supersedes none, and none "
               "supersedes it.</p>" + "".join(_card(b) for b in profiles) if profiles else "")
            + ("<h2>The what-if book" + ("s" if len(whatifs) > 1 else "") + "</h2>"
               + "".join(_card(b, answer=b["name"] != answered) for b in whatifs) if whatifs else "")
            + ('<h2 id="same-configuration">Same configuration, other methods</h2><p>Every rate another book measured for a '
               "configuration the reference book measured, and why it differs from the reference's.</p>" + same if same else "")
            + (f'<h2>Earlier recordings ({len(earlier)})</h2><p>Kept as evidence, each re-executed on its own tables; every page '
               "of each carries a banner naming the book that superseded it in what both measured.</p><ul class=\"sb-earlier\">"
               + "".join(_earlier(b, ref, reference[0]["pages"] if reference else None) for b in earlier) + "</ul>" if earlier else "")
            + "<h2>The debugging path</h2>" + _path_figure(summaries) + "</body></html>\n")
    page = glossary.link_first_uses(page, up="")
    glossary.write_glossary(rendered_dir)
    out = rendered_dir / "index.html"
    if not out.exists() or out.read_text(encoding="utf-8") != page:
        out.write_text(page, encoding="utf-8")
    return out


def register(sub) -> None:
    """``servebook front RENDERED_DIR [--runs DIR]``."""
    p = sub.add_parser("front", help="write the front page of every rendered book (RENDERED_DIR/index.html)",
                       description="One card per rendered book under RENDERED_DIR (host, engines, model, date, its answer "
                                   "computed from the run's tables) and the debugging path, linked to each book's chapters.")
    p.add_argument("rendered_dir", nargs="?", default="rendered")
    p.add_argument("--runs", default=None, help="where the run directories are (default: the path each book's run.json names)")
    p.set_defaults(func=_cmd_front)


def _cmd_front(args) -> int:
    from .errors import ParameterError

    if not books(args.rendered_dir):
        raise ParameterError("rendered_dir", args.rendered_dir, "a folder of rendered books (each with index.html and run.json), e.g. rendered/")
    print(render_front_page(args.rendered_dir, args.runs).resolve())
    return 0

