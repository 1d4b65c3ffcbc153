"""The house (issues #30, #43): no import circle in the package, imports inside functions included; every chapter is prose
over the package (at most 400 lines, no code cell over 40 lines); modules a reader can hold (at most 500 lines, no
function over 60); imports the tools can see (no ``__import__``/``import_module`` of the package's own modules);
chapter 03 in a package like the others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib" / "servebook"
MAX_LINES, MAX_CELL = 400, 40
MAX_MODULE, MAX_FUNCTION = 500, 60

# Each rule below is a function of a package's folder, run on lib/servebook (it must find nothing) and on a small tree
# made in a temporary folder with one file that breaks it (it must find that file): a rule that cannot fail is no rule.


def _module_of(path: Path, pkg: Path = PKG) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(pkg: Path = PKG) -> dict[str, Path]:
    return {_module_of(p, pkg): p for p in pkg.rglob("*.py")}


@pytest.fixture
def broken(tmp_path):
    """A package ``servebook`` in a temporary folder, one file of it breaking each rule: a module over 500 lines, a
    function over 60, an import of the package by name, a stated/ module importing a chapter."""
    pkg = tmp_path / "servebook"
    (pkg / "stated").mkdir(parents=True)
    (pkg / "bench").mkdir()
    for d in (pkg, pkg / "stated", pkg / "bench"):
        (d / "__init__.py").write_text("")
    (pkg / "long.py").write_text("x = 1\n" * (MAX_MODULE + 1))
    (pkg / "fine.py").write_text("def short():\n    return 1\n\n\nclass A:\n    def long(self):\n"
                                 + "        x = 1\n" * MAX_FUNCTION + "        return x\n")
    (pkg / "by_name.py").write_text("def load():\n    return __import__('servebook.bench')\n")
    (pkg / "stated" / "check.py").write_text("from ..bench import figures\n")
    (pkg / "bench" / "figures.py").write_text("RATE = 1\n")
    return pkg


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
    assert graph["servebook.quantities"], "the import reader found nothing: it is broken, not the house clean"
    circles = import_circles(graph)
    assert not circles, "import circles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in circles)


# What stands above stated/ in the house (lib/servebook/README.md): the chapters' packages and the book's floor.
ABOVE_STATED = ("probe", "selection", "backends", "nccl", "bench", "profile", "findings", "quantities", "book", "chapters", "render",
                "frontpage", "frontpage_answer", "frontpage_same", "plan", "cli", "pages", "glossary", "shelf", "pagefigures")


def _stated_up(pkg: Path) -> dict[str, list[str]]:
    """The modules of stated/ that import above it (a chapter or the book), each with what it imports."""
    known = _modules(pkg)
    up = {m: sorted(t for t in _imports(m, p, known) if (t.split(".") + [""])[1] in ABOVE_STATED)
          for m, p in known.items() if m.startswith("servebook.stated")}
    return {m: ts for m, ts in up.items() if ts}


def test_stated_imports_nothing_above_it():
    """The stated-number registry and its check know no chapter: each chapter registers its own quantities
    (``<chapter>/quantities.py``) and ``servebook.quantities`` gathers them, so plain imports close no circle."""
    up = _stated_up(PKG)
    assert not up, f"stated/ imports above it (a chapter or the book): {up}; declare a chapter's quantities in its own package"


def test_the_rules_find_what_breaks_them(broken):
    assert _stated_up(broken) == {"servebook.stated.check": ["servebook.bench", "servebook.bench.figures"]}
    assert _long_modules(broken) == ["long.py"]
    assert _long_functions(broken) == [f"fine.py:A.long ({MAX_FUNCTION + 2} lines)"]
    assert list(_imports_by_name(broken)) == ["by_name.py"]


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


def _sources(pkg: Path = PKG) -> dict[str, tuple[Path, str]]:
    return {str(p.relative_to(pkg)): (p, p.read_text()) for p in sorted(pkg.rglob("*.py"))}


def _functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function, methods and nested functions included (``Class.method``, ``f.inner``)."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + n.name, n.end_lineno - n.lineno + 1))
                visit(n, f"{prefix}{n.name}.")
            elif isinstance(n, ast.ClassDef):
                visit(n, f"{prefix}{n.name}.")
            else:
                visit(n, prefix)

    visit(tree, "")
    return out


def test_the_function_reader_names_methods_and_nested_functions():
    tree = ast.parse("class A:\n    def f(self):\n        def g():\n            pass\n        return g\n\n\nasync def h():\n    pass\n")
    assert _functions(tree) == [("A.f", 4), ("A.f.g", 2), ("h", 2)]


def _long_modules(pkg: Path) -> list[str]:
    return sorted(rel for rel, (_p, text) in _sources(pkg).items() if len(text.splitlines()) > MAX_MODULE)


def _long_functions(pkg: Path) -> list[str]:
    return sorted(f"{rel}:{name} ({n} lines)" for rel, (_p, text) in _sources(pkg).items()
                  for name, n in _functions(ast.parse(text)) if n > MAX_FUNCTION)


def test_no_module_over_500_lines():
    over = _long_modules(PKG)
    assert not over, f"modules over {MAX_MODULE} lines: {over}; split them by what they do (see lib/servebook/README.md)"


def test_no_function_over_60_lines():
    over = _long_functions(PKG)
    assert not over, f"functions over {MAX_FUNCTION} lines: {over}; split them by what they do (see lib/servebook/README.md)"


def _by_name(text: str) -> list[tuple[int, str]]:
    """(line, why) of each ``__import__``/``import_module`` call that loads the package's own modules, or that loads a
    module named at run time without a ``# by name:`` comment (on its line or the one above) saying why it must."""
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name not in ("__import__", "import_module"):
            continue
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value.startswith(("servebook", ".")):
                out.append((node.lineno, f"{name}({arg.value!r}): import it plainly"))
        elif not any("# by name:" in lines[i - 1] for i in (node.lineno, node.lineno - 1) if i >= 1):
            out.append((node.lineno, f"{name} of a name known at run time, with no '# by name:' comment saying why"))
    return out


def _imports_by_name(pkg: Path) -> dict[str, list[tuple[int, str]]]:
    return {rel: hits for rel, (_p, text) in _sources(pkg).items() if (hits := _by_name(text))}


def test_no_import_of_the_package_by_name():
    found = _imports_by_name(PKG)
    assert not found, f"imports by name the structure tools cannot see (plain imports, please): {found}"


def test_the_import_by_name_reader_finds_one():
    assert _by_name("import importlib\nimportlib.import_module('servebook.probe')\n")
    assert _by_name("m = __import__(name)\n")
    assert not _by_name("m = __import__(name)  # by name: runs in the engine's interpreter, no servebook there\n")
    assert not _by_name("import importlib\nimportlib.import_module('sglang.srt.utils')\n")


def test_chapter_03_is_a_package():
    loose = [n for n in ("backends.py", "backends_report.py", "backends_figures.py", "agreement.py") if (PKG / n).exists()]
    assert not loose, f"chapter 03's modules stand loose at the top of lib/servebook: {loose}"
    assert (PKG / "backends" / "__init__.py").is_file(), "chapter 03 has no package (lib/servebook/backends/)"
