"""The house (issue #30): no import circle in the package, imports inside functions included; every chapter is prose
over the package (at most 400 lines, no code cell over 40 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib" / "servebook"
MAX_LINES, MAX_CELL = 400, 40


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for p in PKG.rglob("*.py")}


def _imports(mod: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``mod`` imports anywhere in its file (module level and inside functions): the module named,
    and the submodule where the imported name is one (``from . import compare``)."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target in known:
                out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    out.discard(mod)
    return out


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_package():
    known = _modules()
    graph = {m: _imports(m, p, known) for m, p in known.items()}
    assert graph["servebook.stated.registry"], "the import reader found nothing: it is broken, not the house clean"
    circles = import_circles(graph)
    assert not circles, "import circles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("chapter", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_chapter_is_prose_over_the_package(chapter):
    import jupytext

    assert len(chapter.read_text().splitlines()) <= MAX_LINES, f"{chapter.name}: over {MAX_LINES} lines"
    long = [(c.source.splitlines()[0], len(c.source.splitlines())) for c in jupytext.read(chapter).cells
            if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []) and len(c.source.splitlines()) > MAX_CELL]
    assert not long, f"{chapter.name}: code cells over {MAX_CELL} lines: {long}"
