"""The frame of a chapter's rendered page (``servebook.render.render_book`` calls these on the executed notebook):
the parameters the run used, chapter 06's verdict first, "run this yourself", and the banner of a superseded book.

    used = parameters_used(nb)                  # {name: value}: the notebook's defaults with papermill's injected values
    merge_parameters(nb)                        # one parameters cell showing those values (secrets masked)
    verdict_first(nb)                           # chapter 06: "## The verdict" and its output moved up to the title
    run_yourself(nb, manifest, "04", run_dir)   # the Markdown cell with the commands for this chapter
    link_present_chapters(page, {"01_detect_capabilities", ...})   # a link to a chapter the book lacks: its text, said so
"""

from __future__ import annotations

import ast
import html
import re
import shlex
from pathlib import Path
from typing import Any

from .recorded import SET_BY_REFRESH

__all__ = ["parameters_used", "merge_parameters", "verdict_first", "run_yourself", "commands", "banner_html", "figure_alts", "index_frame",
           "link_present_chapters", "GIVEN_ONLY"]

# Parameters servebook gives every chapter itself: never part of a command a reader types.
GIVEN_ONLY = SET_BY_REFRESH


def _tagged(nb, tag: str):
    return next((c for c in nb.cells if tag in c.metadata.get("tags", [])), None)


def _assignments(source: str) -> list[tuple[str, Any, ast.AST]]:
    """``NAME = literal`` (or ``NAME: T = literal``) statements of a cell: (name, value, the value's node)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                try:
                    out.append((targets[0].id, ast.literal_eval(node.value), node.value))
                except ValueError:
                    continue
    return out


def defaults_of(nb) -> dict[str, Any]:
    cell = _tagged(nb, "parameters")
    return {n: v for n, v, _ in _assignments(cell.source)} if cell is not None else {}


def injected_of(nb) -> dict[str, Any]:
    cell = _tagged(nb, "injected-parameters")
    return {n: v for n, v, _ in _assignments(cell.source)} if cell is not None else {}


def parameters_used(nb) -> dict[str, Any]:
    """The values the execution ran with: the parameters cell's defaults, papermill's injected values over them."""
    return {**defaults_of(nb), **injected_of(nb)}


def _shown(name: str, value: Any) -> str:
    from .secrets import MASK, is_secret_name, mask_value

    return repr(MASK if is_secret_name(name) and value not in ("", None) else mask_value(value))


def _kept_copy(value: Any) -> str:
    """Why a model path differs from the one on the book's index: an execution on the recorded tables reads the model's
    files kept with the run (``data/runs/<run>/models/<name>``), the index names the path on the recording host."""
    if isinstance(value, str) and re.search(r"(?:^|/)data/runs/[^/]+/models/[^/]+/?$", value):
        return "; the model's files kept with the run, the index names its path on the recording host"
    return ""


def merge_parameters(nb) -> int:
    """Rewrite the parameters cell to show the values this execution used (each default papermill replaced is swapped
    for the injected value and marked ``# given``; parameters given but not declared are appended), then drop the
    injected cell. Returns how many values were given. The cell keeps its ``parameters`` tag; the page folds it."""
    cell, injected = _tagged(nb, "parameters"), injected_of(nb)
    if cell is None:
        return 0
    lines = cell.source.splitlines()
    given = 0
    for name, default, node in reversed(_assignments(cell.source)):
        if name not in injected or node.lineno != node.end_lineno:
            continue
        value = injected[name]
        if value != default:
            given += 1
        line = lines[node.lineno - 1]
        rest = line[node.end_col_offset:]
        if value != default:
            note = f"this run; default {_shown(name, default)}" + _kept_copy(value)
            rest = (rest + f" ({note})") if rest.strip().startswith("#") else f"{rest}  # {note}"
        lines[node.lineno - 1] = line[:node.col_offset] + _shown(name, value) + rest
    extra = [n for n in injected if n not in defaults_of(nb)]
    given += len(extra)
    if extra:
        lines.append("# given by servebook for this execution:")
        lines += [f"{n} = {_shown(n, injected[n])}" for n in extra]
    cell.source = "\n".join(lines)
    cell.metadata["sb_given"] = given
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    return given


def verdict_first(nb) -> bool:
    """Chapter 06: move the markdown cell "## The verdict" and the code cell after it (its output is the verdict) to just
    after the title cell, before the parameters and the code. False where the notebook has no such section."""
    at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.lstrip().startswith("## The verdict")), None)
    if at is None or at + 1 >= len(nb.cells) or nb.cells[at + 1].cell_type != "code":
        return False
    moved = nb.cells[at:at + 2]
    rest = nb.cells[:at] + nb.cells[at + 2:]
    title = 1 if rest and rest[0].cell_type == "markdown" and rest[0].source.lstrip().startswith("# ") else 0
    for c in moved:
        c.metadata.setdefault("tags", []).append("sb-verdict-first")
    nb.cells = rest[:title] + moved + rest[title:]
    return True


def _model_arg(model: str, run_dir: Path) -> tuple[str, list[str]]:
    """The ``--model`` a reader gives, and the command that makes it first where the run's model is a built slice."""
    import json

    from .paths import book_root

    if not model or model == "embedded" or "/" not in model:
        return model, []
    path = Path(model) if Path(model).is_absolute() else book_root() / model
    info = next((p for p in (path / "servebook_model.json", run_dir / "models" / path.name / "servebook_model.json") if p.exists()), None)
    if info is None:
        return model, []
    m = json.loads(info.read_text())
    out = f"models/{path.name}"
    build = ["servebook", "model", "build", str(m.get("card")), "--layers", str(m.get("layers")), "--weights", str(m.get("weights"))]
    if m.get("scale", 1) != 1:
        build += ["--scale", str(m["scale"])]
    if m.get("quant") not in (None, "bf16"):
        build += ["--quant", str(m["quant"])]
    return out, [shlex.join(build + ["--out", out])]


def commands(nb, manifest: dict, number: str, run_dir: Path) -> dict[str, list[str]]:
    """``{"measure": [...], "tables": [...]}``: the commands that run chapter ``number`` on the reader's host as this run
    did, and that execute it again on these recorded tables (no GPU). The measure command gives the parameters of the
    execution that measured the chapter (``servebook.recorded.recorded_parameters``, the one reading ``--refresh`` reuses:
    for 01 and 03-05 its ``chapters`` row, else the invocation before it; the executed notebook for the others and for a
    run without rows), the page's values over them (what a refresh was given, such as the union of the backends several
    executions measured); defaults left out, a built slice named ``models/<name>`` with the command that builds it."""
    from .params import PARAMS
    from .paths import book_root

    defaults, injected = defaults_of(nb), injected_of(nb)
    reused = _reused(run_dir, number)
    values = {**reused, **injected}
    values = {k: v for k, v in values.items() if k not in GIVEN_ONLY and (k in defaults or k in PARAMS)}
    model, before = _model_arg(str(values.pop("model", "embedded")), run_dir)
    host = str(values.pop("host", "local"))
    argv = ["servebook", "book", "--only", number]
    if model != "embedded":
        argv += ["--model", model]
    for name, value in sorted(values.items(), key=lambda kv: (kv[0] not in PARAMS, kv[0])):  # --engine, --profile first
        if name in PARAMS:
            if value not in ("", False, None) and PARAMS[name].default != value:
                argv += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
        elif defaults.get(name) != value:
            argv += ["-p", f"{name}={value}"]
    if host.startswith("ssh://"):
        argv += ["--host", "ssh://USER@YOUR-HOST"]
    try:
        shown_dir = str(Path(run_dir).resolve().relative_to(book_root().resolve()))
    except ValueError:
        shown_dir = str(run_dir)
    again = ["servebook", "html", shown_dir, "--refresh", number]
    recorded = manifest.get("parameters") or {}
    for name, value in injected.items():  # the run's own parameters come from its manifest; the others as the page ran
        if name in GIVEN_ONLY or value == "" or (name in PARAMS and recorded.get(name) == value):
            continue
        if reused.get(name, defaults.get(name)) == value:  # what --refresh uses unasked: the run's own (recorded), else the default
            continue
        if name in PARAMS and name != "model":
            continue
        again += ["-p", f"{name}={value}"]
    return {"measure": before + [shlex.join(argv)], "tables": [shlex.join(again + ["--out", f"build/{Path(run_dir).name}"])]}


def _reused(run_dir: Path, number: str) -> dict:
    """The parameters ``servebook html RUN --refresh NUMBER`` reuses from the run without being given them."""
    from .chapters import chapters, notebook_parameters
    from .recorded import recorded_parameters
    from .results import RunStore

    chapter = next((c for c in chapters() if c.number == number), None)
    if chapter is None or not (Path(run_dir) / "manifest.json").exists():
        return {}
    return recorded_parameters(RunStore(Path(run_dir)), chapter, notebook_parameters(chapter.source))[0]


def run_yourself(nb, manifest: dict, number: str, run_dir: Path, whatif: bool):
    """The Markdown cell that ends a chapter's page: the commands for the reader's host (``commands``)."""
    import nbformat

    from .shelf import profiles_manifest

    cmds = commands(nb, manifest, number, run_dir)
    uses_tp = "tp" in defaults_of(nb)
    where = ("with no GPU (a what-if: the hardware profile stands in for the GPU)" if whatif else
             "on your own host, with this run's parameters (its engines installed; the model built first where the run used "
             "a slice)")
    if profiles_manifest(manifest):   # a run of profiles only: measured by `servebook profile run`, not by the book
        where = ("on a GPU host, where this run's rows come from: a profile run of a plan of servers (this run's plans: "
                 "`tools/gpu-stage/ref-plan*.json`, one per recording unit; its RECORDED.md says which ran where), then "
                 "the tables derived again")
        cmds["measure"] = [f"servebook profile run --plan PLAN.json --runs runs --run-id {manifest.get('run_id') or 'ID'}",
                           "servebook profile linearity runs/HOST/RUN_ID && servebook profile predict runs/HOST/RUN_ID"]
    text = (f"## Run this yourself\n\nChapter {number} {where}:\n\n```bash\n" + "\n".join(cmds["measure"]) + "\n```\n\n"
            + ("`tp=0` (the default) runs the end-to-end check at tensor parallelism over every GPU of your host; add "
               "`-p tp=2` for two.\n\n" if uses_tp else "")
            + "This chapter executed again on this run's recorded tables (nothing started or measured; chapter 02 reads the "
            "engines' code, which `servebook engines add` prepares):\n\n```bash\n" + "\n".join(cmds["tables"]) + "\n```\n")
    cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": ["sb-run-yourself"]})
    cell["id"] = "sb-run-yourself"
    return cell


def figure_alts(nb) -> None:
    """A figure executed before figures carried their own text (``servebook.pagefigures``): alternative text naming the
    section it sits in and its place there, so no two figures of a page share one."""
    section, n = "the chapter's opening", 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            head = next((l.lstrip("# ").strip() for l in cell.source.splitlines() if l.startswith("#")), None)
            section, n = (head, 0) if head else (section, n)
            continue
        for o in cell.get("outputs", []):
            if "image/png" in (o.get("data") or {}):
                n += 1
                md = o.setdefault("metadata", {}).setdefault("image/png", {})
                md.setdefault("alt", f"figure {n} of the section '{section}', drawn by the code above from this run's tables")


def index_frame(page: str, superseded: str, shelved: bool) -> str:
    """A book's index page with its frame: the superseded banner (``banner_html``), links to the glossary and, in a shelf,
    the front page, right after ``<body>``."""
    import re

    from .glossary import FILE

    css = ("<style>.sb-superseded{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:.6em 1em;"
           "margin:1em 0}</style>")
    links = ('<p>' + ('<a href="../index.html">all books</a> &middot; ' if shelved else "") + f'<a href="../{FILE}">glossary</a></p>')
    page = page.replace("</head>", css + "</head>", 1)
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + superseded + links, page, count=1)


def banner_html(superseded_by: str | None, only_here: list[str] | None = None) -> str:
    """The banner on every page of an earlier recording: kept as evidence, superseded by the reference book in what the
    reference measured too; ``only_here``: its chapters the reference book does not have, which nothing supersedes."""
    if not superseded_by:
        return ""
    s = html.escape(superseded_by)
    own = (f" Its chapter{'s' if len(only_here) > 1 else ''} {', '.join(only_here)} {'are' if len(only_here) > 1 else 'is'} not "
           f"in {s}: {'their' if len(only_here) > 1 else 'its'} numbers are this recording's own, superseded by no book."
           if only_here else "")
    return (f'<div class="sb-superseded" id="sb-superseded">An earlier recording, kept as evidence: its numbers for what the '
            f'reference book <a href="../{s}/index.html">{s}</a> measured too are superseded by it. Where both measured the same '
            f'configuration, the <a href="../index.html#same-configuration">front page\'s table</a> says why their numbers '
            f'differ.{own}</div>')


_CHAPTER_LINK = re.compile(r'<a\s+href="(0\d_[\w-]+)\.html(?:#[^"]*)?"[^>]*>(.*?)</a>', re.S)


def link_present_chapters(page: str, present: set[str]) -> str:
    """``page`` with each link to a chapter page of its own book that the book lacks (a book recorded without chapters
    02 and 04 still carries "Next: 04. Tune NCCL" and chapter 06's "(ch. 04)") replaced by the link's text and
    "(not in this book)": a reader never follows a link to a page that is not there. ``present``: the stems of the
    chapters the book has (``01_detect_capabilities``)."""
    def unlink(m: re.Match) -> str:
        return m.group(0) if m.group(1) in present else f'{m.group(2)} <small class="sb-absent">(not in this book)</small>'

    return _CHAPTER_LINK.sub(unlink, page)
