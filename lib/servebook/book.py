"""Run the whole book: every chapter executed with papermill, rendered to HTML.

    result = run_book({"engine": "transformers", "smoke": True}, out="build/book")
    result.index        # build/book/index.html
    result.run_dir      # runs/<host>/<run-id>/ with manifest.json and the tidy tables

A chapter that fails does not stop the book: its executed notebook (with papermill's
failure banner) is rendered, the failure is recorded in the run, and the next chapter
runs. Re-running with the same ``run_id`` resumes: measurements already recorded in the
run directory are not taken again.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import html
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import __version__, glossary, measured, shelf
from . import pages as pages_frame
from .errors import ParameterError, ServebookError
from .params import PARAMS, check_chapter_param, check_here, coerce, model_defaults, validate
from .paths import book_root, notebooks_dir
from .provenance import describe_revision, host_fingerprint, record_code, software_versions
from .results import RunStore
from .secret_refs import hide_secrets, mask_known, mask_notebook, masked_notebook_writes

__all__ = ["BookResult", "chapters", "notebook_parameters", "run_book", "render_book", "check_run_dir", "answer_boxes", "refresh_findings", "refresh_chapter",
           "chapter_verdict", "host_fingerprint", "software_versions", "excerpt_html", "parameters_that_ran", "partial_notebook"]

_CHAPTER = re.compile(r"^(\d\d)_([a-z0-9_]+)\.py$")


@dataclass
class Chapter:
    number: str
    slug: str
    source: Path

    @property
    def title(self) -> str:
        """The notebook's own first heading, else one made from the file name."""
        for line in self.source.read_text(encoding="utf-8").splitlines():
            if line.startswith("# # "):
                return line[4:].strip()
        return f"{self.number}. " + self.slug.replace("_", " ").capitalize()

    @property
    def stem(self) -> str:
        return f"{self.number}_{self.slug}"


@dataclass
class BookResult:
    run_dir: Path
    out: Path
    index: Path
    chapters: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["status"] == "ok" for c in self.chapters)


def chapters(directory: Path | None = None) -> list[Chapter]:
    """The notebooks in reading order (``NN_verb_object.py``)."""
    directory = directory or notebooks_dir()
    out = []
    for path in sorted(directory.glob("*.py")):
        m = _CHAPTER.match(path.name)
        if m:
            out.append(Chapter(m.group(1), m.group(2), path))
    return out


def _read_notebook(path: Path):
    import jupytext

    nb = jupytext.read(path)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    return nb


def _select_cells(nb, whatif: bool):
    """What-if mode (a ``profile`` is set): a chapter that has cells tagged ``whatif`` runs only its title cell,
    its parameters and those cells (it plans instead of measuring); on a real host those cells are left out.
    Chapters without ``whatif`` cells run whole in both modes."""
    if not any("whatif" in c.metadata.get("tags", []) for c in nb.cells):
        return nb
    if whatif:
        nb.cells = [c for i, c in enumerate(nb.cells) if (i == 0 and c.cell_type == "markdown")
                    or {"parameters", "whatif"} & set(c.metadata.get("tags", []))]
    else:
        nb.cells = [c for c in nb.cells if "whatif" not in c.metadata.get("tags", [])]
    return nb


def notebook_parameters(path: Path) -> dict[str, dict]:
    """The parameters a notebook declares (papermill's own inspection)."""
    import papermill

    import tempfile

    import nbformat

    with tempfile.TemporaryDirectory() as tmp:
        ipynb = Path(tmp) / (path.stem + ".ipynb")
        nbformat.write(_read_notebook(path), ipynb)
        return papermill.inspect_notebook(str(ipynb))


# The book's kernel starts with this cell (tagged ``sb-setup``, left out of the rendered page): pandas shows every string
# whole, so no table on a page is cut with "..." mid-word. The one place the book sets display options.
_SETUP = """import pandas as _pd
_pd.set_option("display.max_colwidth", None)
del _pd
try:  # every figure: its own alt text and caption, intervals cut at zero (servebook.pagefigures)
    from servebook.pagefigures import install as _sb_figures
    _sb_figures()
    del _sb_figures
except ImportError:
    pass"""


def _with_setup(nb):
    """The notebook with the book's setup cell first (see ``_SETUP``)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(_SETUP, metadata={"tags": ["sb-setup"]})
    cell["id"] = "sb-setup"
    nb.cells.insert(0, cell)
    return nb


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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _require_notebook_tools() -> None:
    import importlib.util

    missing = [m for m in ("papermill", "jupytext", "nbformat", "nbconvert", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        raise ServebookError(f"running the book needs {', '.join(missing)} in this interpreter ({sys.executable}): "
                             f"install servebook with its dependencies (make env, or pip install -e .)")


def run_book(
    params: dict[str, Any] | None = None,
    out: str | os.PathLike = "build/book",
    runs_root: str | os.PathLike = "runs",
    run_id: str | None = None,
    only: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    cell_timeout: int | None = None,
    progress: Callable[[str], None] | None = print,
    record: bool = False,
    again: bool = False,
) -> BookResult:
    """Execute the chapters (``only``: numbers or slugs) and render the book under ``out``.

    ``run_id`` of a recorded run resumes it: what it recorded is not measured again. ``again``: measure it again, the rows
    of this execution kept apart from the earlier ones' (field ``execution``; the pages read what stands, never a row twice).

    ``record``: every host interaction of the chapters goes to ``<run_dir>/cassette.jsonl``, so that
    ``host='replay:<run_dir>'`` can rebuild the book later without the host. A what-if (``profile``) with a
    pinned engine (``sglang==0.5.9``) first prepares that version's cached environment, as
    ``servebook engines add`` does.
    """
    say = progress or (lambda _m: None)
    _require_notebook_tools()
    values = validate(params or {})
    from .paths import writable_dir

    writable_dir(out)  # the book's directory: a path that cannot be made is said now, not after the chapters ran
    selected = _select_chapters(only)
    # Check chapter-specific parameters before anything runs.
    declared = {c.stem: notebook_parameters(c.source) for c in selected}
    extra = _check_extra(dict(extra or {}), declared)
    check_here(values, extra)  # a pinned engine version, the backends named: against this host, before anything starts
    values, extra = hide_secrets(values), hide_secrets(extra)  # a secret reaches the chapters as a reference (secret_refs)
    _prepare_engine(values, extra, say)
    sized = _sized_defaults(selected, declared, values, extra, say)
    store = _open_run(runs_root, run_id, {**values, **extra}, say, sized, again)
    if record:
        from .hosts import start_recording

        if values["host"].startswith("replay:"):
            raise ParameterError("record", True, "a replay is not recorded again; record with --host local or ssh://...")
        say(f"recording every host interaction in {start_recording(store.path, values['host'])}")
    if values["model"] == "embedded":  # built here too: the notebooks read its tokenizer and config
        from .embedded import build_embedded_model

        build_embedded_model(progress=say)
    results = _run_chapters(selected, declared, values, extra, store, cell_timeout, say, sized)
    store.write_manifest({"finished": _now(), "chapters": results})
    index = _render_run(store, Path(out))
    say(f"book: {index.resolve()}")
    return BookResult(run_dir=store.path, out=Path(out), index=index, chapters=results)


def _select_chapters(only: list[str] | None) -> list[Chapter]:
    """The chapters ``only`` names (numbers, slugs or stems), in reading order; all of them for none."""
    all_chapters = chapters()
    if not only:
        return all_chapters
    wanted = {str(o).strip() for o in only}
    known = {c.number for c in all_chapters} | {c.slug for c in all_chapters} | {c.stem for c in all_chapters}
    bad = sorted(wanted - known)
    if bad:
        raise ParameterError("only", bad[0], f"valid chapters: {', '.join(c.stem for c in all_chapters)}")
    return [c for c in all_chapters if {c.number, c.slug, c.stem} & wanted]


def _check_extra(extra: dict[str, Any], declared: dict[str, dict]) -> dict[str, Any]:
    """Chapter parameters (``-p NAME=VALUE``) coerced to the type a selected chapter declares, and checked."""
    known_extra = {name: spec for d in declared.values() for name, spec in d.items()}
    for name, value in list(extra.items()):
        if name in PARAMS:
            raise ParameterError(name, value, f"pass --{name.replace('_', '-')} instead of -p {name}=...")
        if name not in known_extra:
            raise ParameterError(name, value, f"no chapter declares it; chapter parameters: {', '.join(sorted(set(known_extra) - set(PARAMS) - {'run_dir'}))}")
        extra[name] = _coerce_declared(name, value, known_extra[name])
        check_chapter_param(name, extra[name])
    return extra


def _sized_defaults(selected: list[Chapter], declared: dict, values: dict, extra: dict,
                    say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Per chapter stem, the parameters sized to this run's model (``params.MODEL_DEFAULTS``) that ``-p`` leaves open."""
    sized = {}
    for c in selected:
        mine = {k: v for k, v in model_defaults(values["model"], c.number).items() if k in declared[c.stem] and k not in extra}
        if mine:
            sized[c.stem] = mine
            say(f"chapter {c.number}: sized to the {values['model']} model: "
                + ", ".join(f"{k}={v}" for k, v in mine.items()) + " (-p NAME=VALUE overrides)")
    return sized


def _prepare_engine(values: dict, extra: dict, say: Callable[[str], None]) -> None:
    """A what-if with a pinned engine version reads that version in its own cached environment: prepare it
    now, with pip's steps shown, so that chapter 01 finds it (a failure stops here, naming the command)."""
    spec = values["engine"]
    if not values.get("profile") or "==" not in spec or extra.get("engine_python"):
        return
    from .errors import EngineError
    from .engines.envs import parse_engine_spec, resolve_engine
    from .selection.envs import add_engine

    if parse_engine_spec(spec)[0] == "transformers":
        return
    try:
        resolve_engine(spec)
        return
    except EngineError:
        pass
    say(f"{spec}: no environment prepared yet; preparing one (once per version, a few minutes) ...")
    try:
        add_engine(spec, progress=say)  # with a "still preparing" line every minute: pip is quiet for minutes at a time
    except ServebookError as exc:
        raise EngineError(f"the what-if reads {spec} in its own environment, and preparing it failed: {exc}; "
                          f"prepare it with `servebook engines add {spec}`, then run this command again") from exc


def _open_run(runs_root, run_id: str | None, parameters: dict, say: Callable[[str], None],
              sized: dict | None = None, again: bool = False) -> RunStore:
    """The run directory, new or resumed, with its manifest: where and with what code it runs, and which execution of
    the run id this is (``execution``: its number, and whether it measures ``again``)."""
    store = RunStore.open(runs_root, host=parameters["host"], run_id=run_id)
    previous = store.manifest
    resumed = "started" in previous
    executions = list(previous.get("executions") or [])
    number = (executions[-1]["id"] if executions else (1 if resumed else 0)) + 1  # unstamped rows are execution 1's
    execution = {"id": number, "again": bool(again and resumed), "at": _now()}
    store.write_manifest({"execution": execution, "executions": executions + [execution]})
    here = {"servebook_version": __version__, "git_revision": record_code(store), "versions": software_versions(),
            "host_fingerprint": host_fingerprint()}
    if sized:
        here["chapter_defaults"] = sized
    if not resumed:
        store.write_manifest({"parameters": parameters, **here, "started": _now(), "finished": None})
    else:
        # The run's identity (where and with what it was measured) stays as first recorded;
        # each resumption is logged with its own fingerprint.
        here.pop("chapter_defaults", None)
        resumptions = list(previous.get("resumptions", [])) + [{"at": _now(), "parameters": parameters, **here,
                                                                 **({"chapter_defaults": sized} if sized else {})}]
        store.write_manifest({"resumptions": resumptions, "finished": None})
    say(f"run directory: {store.path}" + ((f" (measuring again): execution {number}, earlier executions' rows kept apart"
                                             if execution["again"] else f" (resuming): execution {number}; what is recorded "
                                             f"is not measured again (--again measures it again)") if resumed else ""))
    return store


def _run_chapters(selected: list[Chapter], declared: dict, values: dict, extra: dict, store: RunStore,
                  cell_timeout: int | None, say: Callable[[str], None], sized: dict | None = None) -> list[dict]:
    """Execute each chapter in turn; a failed one is recorded and the next one runs."""
    executed_dir = store.path / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for i, chapter in enumerate(selected, 1):
        t0 = time.monotonic()
        say(f"[{i}/{len(selected)}] chapter {chapter.title} ...")
        mine = {**(sized or {}).get(chapter.stem, {}), **extra}
        status, error = _execute(chapter, declared[chapter.stem], values, mine, store, executed_dir, cell_timeout)
        seconds = round(time.monotonic() - t0, 1)
        results.append({"chapter": chapter.stem, "title": chapter.title, "status": status, "error": error, "seconds": seconds})
        store.append("chapters", results[-1])
        say(f"      {status} in {seconds}s" + (f": {error}" if error else ""))
    return results


def _render_run(store: RunStore, out: Path) -> Path:
    """``render_book`` for a run just executed: a render problem must not read as a lost run."""
    try:
        return render_book(store.path, out)
    except Exception as exc:  # the run's results are on disk
        store.record_failure("render book", exc)
        raise ServebookError(f"the chapters ran and their results are in {store.path}, but rendering the book failed: "
                             f"{type(exc).__name__}: {str(exc)[:300]}. Render it here once fixed, or on another machine, "
                             f"with: servebook html {store.path}") from exc


def _coerce_declared(name: str, value: Any, spec: dict) -> Any:
    hint = (spec.get("inferred_type_name") or "").lower()
    typ = {"int": int, "float": float, "bool": bool, "str": str}.get(hint.split()[0] if hint else "", str)
    return coerce(name, value, typ)


def _execute(chapter: Chapter, declared: dict, values: dict, extra: dict, store: RunStore, executed_dir: Path,
             cell_timeout: int | None, run_dir_arg: str | None = None) -> tuple[str, str | None]:
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source = executed_dir / f"{chapter.stem}.source.ipynb"
    target = executed_dir / f"{chapter.stem}.ipynb"
    partial = partial_notebook(executed_dir, chapter.stem)  # papermill writes here; moved over ``target`` when it ends
    nbformat.write(_with_setup(_select_cells(_read_notebook(chapter.source), whatif=bool(values.get("profile")))), source)
    given = {"run_dir": run_dir_arg or str(store.path.resolve()), **values, **extra}
    parameters = {k: v for k, v in given.items() if k in declared}
    failures_before = measured.failures_so_far(store)
    try:
        with masked_notebook_writes(partial):  # every save of the executed notebook is masked as it is written
            papermill.execute_notebook(
                str(source), str(partial), parameters=parameters, kernel_name="python3",
                cwd=str(book_root()), progress_bar=False, execution_timeout=cell_timeout,
                report_mode=False,
            )
        status, error = "ok", None
        nothing = measured.nothing_measured(store, chapter.number, failures_before, whatif=bool(values.get("profile")))
        if nothing:  # every cell ran, and none measured what the chapter is for: not "ok"
            status, error = "failed", nothing
            store.record_failure(f"chapter {chapter.stem}", nothing)
    except PapermillExecutionError as exc:
        status, error = "failed", f"{exc.ename}: {exc.evalue}"  # whole: the page folds it, never cuts it
        store.record_failure(f"chapter {chapter.stem}", error, cell=exc.cell_index)
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a timeout: record and go on
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        store.record_failure(f"chapter {chapter.stem}", error)
    except BaseException:  # Ctrl-C: the finished notebook stays; the chapter's status says interrupted
        _interrupted(store, chapter)
        raise
    finally:
        source.unlink(missing_ok=True)
    if partial.exists():
        os.replace(partial, target)
    return status, error


def partial_notebook(executed_dir: Path, stem: str) -> Path:
    """Where a chapter's execution in progress is written: beside its finished notebook, moved over it at the end. Left
    behind, it says the last execution did not finish (interrupted, or the book was killed)."""
    return Path(executed_dir) / f"{stem}.partial.ipynb"


def _interrupted(store: RunStore, chapter: Chapter) -> None:
    """An execution stopped by Ctrl-C: recorded as ``interrupted``. The finished notebook of an earlier execution stays in
    place, the partial one beside it (with none finished, the partial one is the page, under the interrupted banner)."""
    try:
        store.append("chapters", {"chapter": chapter.stem, "title": chapter.title, "status": "interrupted",
                                  "error": "interrupted (Ctrl-C) before the chapter finished"})
    except ServebookError:
        pass


# -- rendering -----------------------------------------------------------------

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


def _answers(store: RunStore) -> dict[str, list[str]]:
    """Each chapter's answer for this run, as chapter 06 states it (``servebook.findings``, computed from the run's
    tables): shown first on every page, so a reader meets the result before the method."""
    try:
        from .findings import collect

        found = collect(store)
    except Exception:  # noqa: BLE001 - a run too old or too partial for the findings: its pages render without the box
        return {}
    out: dict[str, list[str]] = {}
    for c in found.claims:
        out.setdefault(c.chapter, []).append(c.plain())  # the box is checked whole: its figures are not tagged
    out["06"] = [f"Launch for {lc['engine']}: {lc['command']}" for lc in found.launch] + out.get("06", [])
    return out


def answer_boxes(store: RunStore) -> dict[str, str]:
    """The box "This run, in short" at the top of each chapter's page, by chapter number (``"03"``): its HTML, the
    chapter's answer as chapter 06 states it. ``servebook.stated`` checks a rendered page's box against it."""
    return {number: _answer_box(lines) for number, lines in _answers(store).items() if lines}


def _answer_box(lines: list[str]) -> str:
    code = lambda t: re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(t))  # noqa: E731 - the claims' markdown spans
    items = "".join(f"<li>{code(t)}</li>" for t in lines[:6])
    more = f"<li>... {len(lines) - 6} more in chapter 06</li>" if len(lines) > 6 else ""
    return (f'<div class="sb-answer"><b>This run, in short</b> (computed from its tables; the cells below show how)'
            f"<ul>{items}{more}</ul></div>")


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


# Chapters that read code and recorded tables and measure nothing: they can be executed again on a recorded run anywhere.
_OFFLINE = {"01": "detect_capabilities", "02": "read_backend_selection", "03": "force_each_backend", "04": "tune_nccl",
            "05": "benchmark_single_stream", "06": "findings"}
_OFFLINE_FIXED = {n: {"measure": False} for n in ("01", "03", "04", "05")}  # they measure; executed again, they re-read the tables


def refresh_findings(run_dir: str | os.PathLike, compare_with: str = "", cell_timeout: int | None = 600) -> dict:
    """Execute chapter 06 again on a recorded run (it reads the run's tables and measures nothing)."""
    return refresh_chapter(run_dir, "06", {"compare_with": compare_with} if compare_with else {}, cell_timeout)


def refresh_chapter(run_dir: str | os.PathLike, number: str, extra: dict | None = None, cell_timeout: int | None = 600) -> dict:
    """Execute a chapter again on a recorded run; ``extra``: chapter parameters (``-p``).

    Its executed notebook replaces ``run_dir/notebooks/<chapter>.ipynb``; the outcome is appended to
    the run's ``chapters`` table. Chapters 01, 03, 04 and 05 measure nothing then (``measure=False``): their prose and
    verdicts are computed again from what the host recorded (chapter 01 from its ``probe.json`` and tables).
    """
    store = RunStore(Path(run_dir))
    if not store.manifest_path.exists():
        raise ParameterError("run_dir", str(run_dir), "a run directory with manifest.json (servebook book writes one)")
    if number not in _OFFLINE:
        raise ParameterError("chapter", number, f"one of {', '.join(_OFFLINE)}: the others measure, so they run on their host "
                                                "(servebook book --run-id ID --only NN resumes a run there)")
    chapter = next(c for c in chapters() if c.slug == _OFFLINE[number])
    declared = notebook_parameters(chapter.source)
    params = store.manifest.get("parameters") or {}
    values = {k: params[k] for k in PARAMS if k in params}
    unknown = sorted(set(extra or {}) - set(declared))
    if unknown:
        raise ParameterError(unknown[0], (extra or {})[unknown[0]], f"chapter {number} declares {', '.join(sorted(declared))}")
    extra = {k: _coerce_declared(k, v, declared[k]) for k, v in (extra or {}).items() if v != ""}
    extra = {**(store.manifest.get("chapter_defaults") or {}).get(chapter.stem, {}), **extra}  # as the run measured
    extra.update(_OFFLINE_FIXED.get(number, {}))
    executed_dir = store.path / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # Chapter 06 runs with the book's root as its working directory: a run inside the book is named relative
    # to it, so the rendered page shows a path that means something on any checkout.
    try:
        run_dir_arg = str(store.path.resolve().relative_to(book_root().resolve()))
    except ValueError:
        run_dir_arg = None
    status, error = _execute(chapter, declared, values, extra, store, executed_dir, cell_timeout, run_dir_arg)
    row = {"chapter": chapter.stem, "title": chapter.title, "status": status, "error": error,
           "seconds": round(time.monotonic() - t0, 1), "refreshed": True, "git_revision": record_code(store)}
    store.append("chapters", row)
    return row


def check_run_dir(run_dir: str | os.PathLike) -> Path:
    """``run_dir`` when it is a run's directory (it holds the ``manifest.json`` that ``servebook book`` writes), else a
    one-line ``ParameterError`` naming what is there instead."""
    path = Path(run_dir)
    if (path / "manifest.json").is_file():
        return path
    what = ("does not exist" if not path.exists() else "is not a directory" if not path.is_dir() else
            "holds runs, not one run" if any(path.glob("*/manifest.json")) or any(path.glob("*/*/manifest.json")) else
            "has no manifest.json")
    raise ParameterError("run_dir", str(run_dir), f"it {what}; give one run's directory, runs/<host>/<run-id> "
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
    superseded = pages_frame.banner_html(shelf.superseded_by(out, whatif=bool((manifest.get("parameters") or {}).get("profile"))))
    glossary.write_glossary(out.parent)  # beside the book, as rendered/glossary.html: every page links ../glossary.html
    shelved = (out.parent / "index.html").exists()  # a front page beside the book (rendered/): the pages link it
    errors: dict[str, int] = {}
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
        body = _shared_stylesheet(mask_known(body), out)
        (out / f"{chapter.stem}.html").write_text(body, encoding="utf-8")
    index = pages_frame.index_frame(_index_html(store, pages, status, errors), superseded, shelved)
    (out / "index.html").write_text(mask_known(glossary.link_first_uses(index)), encoding="utf-8")
    (out / "run.json").write_text(json.dumps({"run_dir": str(run_dir), "manifest": manifest}, indent=2, default=str))
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


def _index_html(store: RunStore, pages, status: dict, errors: dict) -> str:
    from .findings import host_summary, versions_read

    manifest = store.manifest
    params = manifest.get("parameters", {})
    versions = manifest.get("versions", {})
    h = host_summary(store)
    if h.get("gpu"):
        gpus = f"{h.get('gpu_count')} x {h['gpu']}, capability {h.get('capability')}" + (f", {'/'.join(h['links'])}" if h.get("links") else "")
    else:
        gpus = ", ".join((manifest.get("host_fingerprint") or {}).get("gpus") or []) or "no GPU"
    engines = ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("transformers", "sglang", "vllm") and v)
    studied = ", ".join(f"{e['engine']} {e.get('version')}" for e in h.get("engines", []) if e.get("status") == "ok")
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
        rows.append(f'<li>{html.escape(c.title)} <small class="sb-status">not run in this run</small></li>')
    date = str(manifest.get("started") or manifest.get("created") or "?")
    card = (
        f"<table class=\"sb-card\"><tr><th>host</th><td>{html.escape(str(h.get('hostname') or '?'))} ({html.escape(gpus)})</td></tr>"
        + (f"<tr><th>what-if</th><td>hardware profile {html.escape(str(params.get('profile')))}: nothing on it was measured; "
           f"chapters 03-05 plan and predict</td></tr>" if params.get("profile") else "")
        + f"<tr><th>engine under study</th><td>{html.escape(str(params.get('engine')))} &middot; model {html.escape(str(params.get('model')))}</td></tr>"
        f"<tr><th>engines</th><td>{html.escape(studied or engines or 'none')}"
        + (" (each engine environment's own version, chapter 01's engines table; the chapters' versions line is the "
           "kernel's that executed them)" if studied else "") + "</td></tr>"
        + (f"<tr><th>code read</th><td>chapter 02 read {html.escape(', '.join(read))} (their selection code, read and run on this CPU with GPU-only libraries stubbed - the [run] of chapter 02; no server of them was started)</td></tr>"
           if read else "") +
        f"<tr><th>software</th><td>driver {html.escape(str(h.get('driver')))} &middot; CUDA {html.escape(str(h.get('cuda')))} &middot; "
        f"torch {html.escape(str(h.get('torch') or versions.get('torch')))} &middot; NCCL {html.escape(str(h.get('nccl')))}</td></tr>"
        f"<tr><th>date</th><td>{html.escape(date)} (finished {html.escape(str(manifest.get('finished')))})</td></tr>"
        f"<tr><th>run</th><td>{html.escape(_book_name(store))} &middot; servebook "
        f"{html.escape(str(manifest.get('servebook_version')))}</td></tr>"
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
