"""Every quantity name the book states literally is one the registry recomputes: read from the source, no kernel needed.

A chapter's kernel does not gather the registry (``servebook.quantities``, every chapter's quantities: about 0.2 s of
imports), so ``servebook.stated.q`` there refuses no name. This test reads the chapters (``notebooks/*.py``) and the
package (``lib/servebook``) instead: each call that states a figure names its quantity, and a name written as a literal
must be registered. The spellings are found, not listed: ``q`` itself (``servebook.stated.tags.q``), then every function
that hands one of its parameters to a spelling as the name (``separated(..., names=(...))``, ``frontpage._over``,
``quoter``'s ``say``, a ``q(*a, **k)`` that forwards), to a fixed point; a function's default counts as a literal given.
A name made at run time is checked when its page is rendered (``servebook.stated.tags.unregistered``, render_book).
The reader resolves a name the same way throughout its module (its imports, functions and ``x = quoter(...)``
aliases), which is how the book writes them; a plain text search for ``q("...`` checks it misses no call.

    spellings, stated = read_book(sources(LIB, NOTEBOOKS))
    [s for s in stated if s.name not in QUANTITIES]      # [] : each with its file and line
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from servebook.quantities import QUANTITIES

ROOT = Path(__file__).resolve().parents[1]
LIB, NOTEBOOKS = ROOT / "lib", ROOT / "notebooks"
Q = ("servebook.stated.tags", "q")
BASE = {Q: {(0, "name")}}  # the one tagging helper: its first argument, or name=, is the quantity


@dataclass(frozen=True)
class Named:
    """One literal quantity name a call gives a spelling."""

    where: str  # file:line
    name: str
    via: str  # the spelling called (module.function)


def sources(lib: Path, notebooks: Path) -> dict[str, tuple[str, ast.Module]]:
    """``{module: (path shown, tree)}`` for the package's files and the chapters (as ``notebooks.<stem>``)."""
    out = {}
    for p in sorted((lib / "servebook").rglob("*.py")):
        parts = list(p.relative_to(lib).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (str(p.relative_to(lib.parent)), ast.parse(p.read_text()))
    for p in sorted(notebooks.glob("*.py")):
        out[f"notebooks.{p.stem}"] = (f"{notebooks.name}/{p.name}", ast.parse(p.read_text()))
    return out


class _Book:
    """Names resolved across the files: a call's callee to the function it runs (module, name), through imports,
    re-exports (``from .tags import q`` in ``stated/__init__``) and local aliases (``q = quoter(tagged)``)."""

    def __init__(self, files: dict[str, tuple[str, ast.Module]]) -> None:
        self.files = files
        self.defs = {m: {n.name: n for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                     for m, (_, t) in files.items()}
        self.imports = {m: self._imports_of(m, t) for m, (_, t) in files.items()}
        self.aliases: dict[str, dict[str, tuple]] = {m: {} for m in files}

    def _imports_of(self, mod: str, tree: ast.Module) -> dict[str, tuple[str, str | None]]:
        package = mod if self.files[mod][0].endswith("__init__.py") else mod.rpartition(".")[0]
        out: dict[str, tuple[str, str | None]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update({(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0], None)
                            for a in node.names})
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                out.update({(a.asname or a.name): (base, a.name) for a in node.names})
        return out

    def follow(self, mod: str, name: str | None, depth: int = 0) -> tuple | None:
        """``("module", M)`` or ``("def", M, name)`` for ``name`` as module ``mod`` holds it (None: not the book's)."""
        if name is None or f"{mod}.{name}" in self.files:
            target = mod if name is None else f"{mod}.{name}"
            return ("module", target) if target in self.files else None
        if mod not in self.files or depth > 8:
            return None
        if name in self.aliases[mod]:
            return self.aliases[mod][name]
        if name in self.defs[mod]:
            return ("def", mod, name)
        if name in self.imports[mod]:
            return self.follow(*self.imports[mod][name], depth + 1)
        return None

    def resolve(self, mod: str, expr: ast.expr) -> tuple | None:
        if isinstance(expr, ast.Name):
            return self.follow(mod, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.resolve(mod, expr.value)
            return self.follow(base[1], expr.attr) if base and base[0] == "module" else None
        return None


def _params(fn) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args)]


def _given(call: ast.Call, fn_params: list[str] | None, index: int | None, kw: str) -> tuple[ast.expr | None, int | None]:
    """The expression ``call`` gives at a spelling's position, or (None, i) when ``*args`` starting at i carries it."""
    for j, arg in enumerate(call.args[: (index + 1) if index is not None else 0]):
        if isinstance(arg, ast.Starred):
            return None, j
    if index is not None and index < len(call.args):
        return call.args[index], None
    return next((k.value for k in call.keywords if k.arg == kw), None), None


def _own_calls(fn):
    """The calls in ``fn``'s body, not in the functions defined inside it (each is read as a function of its own)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _derive(book: _Book, spellings: dict) -> bool:
    """One pass: each function that hands a parameter of its own (or ``param[i]``, or ``*args``/``**kwargs``) to a
    spelling's position becomes a spelling at that parameter. True when something was added."""
    added = False
    for mod, defs in book.defs.items():
        for fname, fn in defs.items():
            params, mine = _params(fn), spellings.setdefault(("def", mod, fname)[1:], set())
            for call in _own_calls(fn):
                for index, kw in spellings.get((book.resolve(mod, call.func) or (None,))[1:], ()):
                    expr, star = _given(call, params, index, kw)
                    found: tuple | None = None
                    if star is not None and isinstance(call.args[star].value, ast.Name) and fn.args.vararg \
                            and call.args[star].value.id == fn.args.vararg.arg:
                        found = (len(params) + index - star, kw)
                    elif isinstance(expr, ast.Subscript):
                        expr = expr.value
                    if found is None and isinstance(expr, ast.Name):
                        p = expr.id
                        kwonly = [a.arg for a in fn.args.kwonlyargs]
                        if p in params or p in kwonly:
                            found = (params.index(p) if p in params else None, p)
                    if found is None and expr is None and fn.args.kwarg and any(
                            k.arg is None and isinstance(k.value, ast.Name) and k.value.id == fn.args.kwarg.arg for k in call.keywords):
                        found = (None, kw)
                    if found is not None and found not in mine:
                        mine.add(found)
                        added = True
    return added


def _aliases(book: _Book, spellings: dict) -> None:
    """``q = quoter(tagged)``: a name bound to what a function returns, where it returns a function defined in it."""
    for mod, (_, tree) in book.files.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Call):
                made = book.resolve(mod, node.value.func)
                if made and made[0] == "def":
                    fn = book.defs[made[1]][made[2]]
                    inner = {n.name for n in fn.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                    ret = [r.value.id for r in fn.body if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)]
                    if ret and ret[0] in inner:
                        book.aliases[mod][node.targets[0].id] = ("def", made[1], ret[0])


def _literals(expr: ast.expr | None) -> list[tuple[int, str]]:
    """The string literals an expression can give as a name: a constant, each element of a tuple or list, both arms of
    ``a if c else b``."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [(expr.lineno, expr.value)]
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [x for e in expr.elts for x in _literals(e)]
    if isinstance(expr, ast.IfExp):
        return _literals(expr.body) + _literals(expr.orelse)
    return []


def read_book(files: dict[str, tuple[str, ast.Module]]) -> tuple[dict, list[Named]]:
    """Every spelling (``{(module, function): {(position, keyword)}}``) and every literal name given to one."""
    book = _Book(files)
    spellings = {k: set(v) for k, v in BASE.items()}
    _aliases(book, spellings)
    while _derive(book, spellings):
        pass
    spellings = {k: v for k, v in spellings.items() if v}
    stated: list[Named] = []
    for mod, (shown, tree) in files.items():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            target = (book.resolve(mod, call.func) or (None,))[1:]
            for index, kw in spellings.get(target, ()):
                stated += [Named(f"{shown}:{line}", name, ".".join(target))
                           for line, name in _literals(_given(call, None, index, kw)[0])]
    for (mod, fname), positions in spellings.items():  # a default is a literal every call without the argument gives
        if (mod, fname) == Q:
            continue
        fn, shown = book.defs[mod][fname], files[mod][0]
        a = fn.args
        defaults = dict(zip(_params(fn)[len(_params(fn)) - len(a.defaults):], a.defaults))
        defaults.update({k.arg: d for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        for _index, kw in positions:
            stated += [Named(f"{shown}:{line}", name, f"{mod}.{fname} (default)") for line, name in _literals(defaults.get(kw))]
    return spellings, stated


@pytest.fixture(scope="module")
def book():
    return read_book(sources(LIB, NOTEBOOKS))


def test_every_name_the_book_states_literally_is_registered(book):
    _, stated = book
    unknown = [f"{s.where}: {s.via}({s.name!r}): no chapter registers {s.name!r}" for s in stated if s.name not in QUANTITIES]
    assert not unknown, ("quantity names no chapter recomputes (declare each beside the chapter that computes it, "
                         "servebook.<chapter>.quantities, or correct the name):\n" + "\n".join(unknown))


def test_the_reader_finds_the_spellings_and_every_chapters_names(book):
    """The reader is not blind: it finds the wrappers the book states figures through, and names in every chapter."""
    spellings, stated = book
    for wrapper in (("servebook.stated.intervals", "separated"), ("servebook.stated.intervals", "_tag"),
                    ("servebook.frontpage", "_over"), ("servebook.findings.questions", "q"), ("servebook.stated.tags", "say")):
        assert wrapper in spellings, f"{'.'.join(wrapper)} hands a quantity name to q; the reader missed it"
    assert {"single_vs_pct", "single_vs_starts", "vs_default_pct"} <= {s.name for s in stated if "separated" in s.via}
    # every line that calls q with a literal, as a plain text search finds them (docstrings and comments aside), is read
    found = {s.where for s in stated}
    for path in [*NOTEBOOKS.glob("[0-9][0-9]_*.py"), *(LIB / "servebook").rglob("*.py")]:
        text, shown = path.read_text(), str(path.relative_to(ROOT))
        prose = {i for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                 for i in range(n.lineno, n.end_lineno + 1)}
        lines = {f"{shown}:{i}" for i, line in enumerate(text.splitlines(), 1)
                 if i not in prose and re.search(r"(?<![\w.])q\(\s*['\"]", line.split("#")[0])}
        assert lines <= found, f"calls of q the reader did not read: {sorted(lines - found)}"


def test_an_unknown_name_fails_with_its_file_and_line(tmp_path):
    """A chapter that states a name nobody registers, directly, through ``separated`` and through a wrapper of its own,
    a quoter and a forwarding ``q(*a, **k)``: each is named with its file and line."""
    (tmp_path / "07_scratch.py").write_text(
        "from servebook.stated import q\n"
        "from servebook.stated.intervals import separated as sep; from servebook.stated.tags import quoter\n"
        "a = q('single_tok_s', 1.0)\n"
        "b = q('no_such_quantity', 1.0, ',.1f')\n"
        "c = sep(1, 0, 2, 0, starts=2, of='x', names=('single_vs_pct', 'no_such_pct'))\n"
        "def mine(value, name):\n"
        "    return q(name, value)\n"
        "d = mine(2, name='another_unknown' if a else 'single_ci95')\n"
        "say = quoter(True)\n"
        "e = say('said_unknown', 3)\n"
        "def fwd(*a, **k):\n"
        "    return q(*a, **k)\n"
        "f = fwd('forwarded_unknown', 4)\n")
    _, stated = read_book(sources(LIB, tmp_path))
    mine = sorted((s.where, s.name) for s in stated if s.where.startswith(tmp_path.name) and s.name not in QUANTITIES)
    at = f"{tmp_path.name}/07_scratch.py"
    assert mine == [(f"{at}:10", "said_unknown"), (f"{at}:13", "forwarded_unknown"), (f"{at}:4", "no_such_quantity"),
                    (f"{at}:5", "no_such_pct"), (f"{at}:8", "another_unknown")]


def test_a_name_made_at_run_time_is_refused_when_the_page_is_rendered(tmp_path):
    """The kernel does not gather the registry, so ``q(name, ...)`` with a name computed there tags anything: the render
    writes every page, then fails in one line naming the page, the name and the fix."""
    import nbformat

    from servebook.errors import ServebookError
    from servebook.render import render_book
    from servebook.results import RunStore
    from servebook.stated.tags import q

    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"parameters": {}})
    nb = nbformat.v4.new_notebook()
    good, bad = q("single_tok_s", 1.5, ".1f", of="x"), q("single_tok_s", 2.5, ".1f", of="y").replace("single_tok_s", "made_" + "up")
    nb.cells = [nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", {"text/markdown": f"{good} {bad}"})])]
    (store.path / "notebooks").mkdir()
    nbformat.write(nb, store.path / "notebooks" / "05_benchmark_single_stream.ipynb")
    with pytest.raises(ServebookError, match=r"05_benchmark_single_stream.html: 'made_up'.*servebook.<chapter>.quantities") as e:
        render_book(store.path, tmp_path / "book")
    assert "single_tok_s" not in str(e.value) and len(str(e.value).splitlines()) == 1
    assert (tmp_path / "book" / "05_benchmark_single_stream.html").is_file() and (tmp_path / "book" / "index.html").is_file()
