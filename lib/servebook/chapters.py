"""The book's chapters as notebooks: found in ``notebooks/``, their declared parameters read, executed with papermill.

    chapters()                          # [Chapter("01", "detect_capabilities", path), ...] in book order
    notebook_parameters(path)           # {name: (type, default, help)} from the notebook's ``parameters`` cell
    _execute(chapter, params, run_dir)  # run one chapter; its executed notebook is kept, partial if it was stopped

``servebook.book`` runs them in order, ``servebook.render`` renders what ran.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import measured
from .errors import ServebookError
from .pagefigures import install as _figures_install
from .params import coerce
from .paths import book_root, notebooks_dir
from .results import RunStore
from .secret_refs import masked_notebook_writes

__all__ = ["Chapter", "chapters", "notebook_parameters", "partial_notebook"]


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
# whole, so no table on a page is cut with "..." mid-word (the one place the book sets display options). It does not
# gather the stated-number registry (``servebook.quantities``, every chapter's quantities): a name a chapter states
# literally is checked against it by tests/test_stated_names.py, any other when the page is rendered (render_book).
# The kernel imports the figure hook by the module's own name (imported above, so the edge is one the tools see).
_SETUP = f"""import pandas as _pd
_pd.set_option("display.max_colwidth", None)
del _pd
try:  # every figure: its own alt text and caption, intervals cut at zero ({_figures_install.__module__})
    from {_figures_install.__module__} import install as _sb_figures
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
    from .profile.book import leave_out_for_profiles

    nb = _select_cells(_read_notebook(chapter.source), whatif=bool(values.get("profile")))
    nbformat.write(_with_setup(leave_out_for_profiles(nb, store.path)), source)   # a run of profiles only: no empty sections
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
