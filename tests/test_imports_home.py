"""The notebooks import each name from the module that is its home: one that defines it or lists it in ``__all__`` (a
package's face), never one that only imports it for them (a hand-on shim kept for a notebook, like
``servebook.book.excerpt_html`` and ``servebook.selection.envs.parse_engine_spec`` were)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib"


def _file(module: str) -> Path | None:
    base = PKG.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _home_names(path: Path) -> set[str]:
    """What a module offers as its own: its top-level definitions and assignments, and the names of its ``__all__``."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    out.add(t.id)
                if isinstance(t, ast.Name) and t.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                    out |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return out


def _notebook_imports() -> list[tuple[str, str, str]]:
    """(notebook, module, name) for every ``from servebook... import name`` in the chapters' sources."""
    out = []
    for nb in sorted((ROOT / "notebooks").glob("0*.py")):
        for node in ast.walk(ast.parse(nb.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servebook"):
                out += [(nb.name, node.module, a.name) for a in node.names]
    return out


@pytest.mark.parametrize("nb, module, name", _notebook_imports(), ids=lambda v: str(v))
def test_a_notebook_imports_a_name_from_its_home(nb, module, name):
    path = _file(module)
    assert path is not None, f"{nb}: no module {module}"
    if _file(f"{module}.{name}"):  # a submodule
        return
    assert name in _home_names(path), (f"{nb}: `from {module} import {name}`: {module} only hands {name} on; import it "
                                       "from the module that defines it")
