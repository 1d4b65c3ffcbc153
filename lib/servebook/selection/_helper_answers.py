"""Runs inside an engine's own interpreter, after ``_runner.py`` resolved a case: the engine's own hardware helpers
on the deciding path, asked under the same fake GPU, and where each is defined.

    eval_helpers([{"file": ".../server_args.py", "expr": "is_sm100_supported()"}], "sglang")
    # [{"file", "expr", "answer": False, "error": None, "defined_at": [file, line], "source": "def is_sm100_supported..."}]

Standalone on purpose (the engine's environment does not have servebook installed): standard library only, imported
by its sibling ``_runner.py`` from this folder.
"""

import ast
import inspect
import os
import sys


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)[:200]


def _assigned_in(name, obj, package):
    """[file, line, source] of the module-level ``name = ...`` or ``def name`` that made ``obj`` (partials, aliases)."""
    for m in list(sys.modules.values()):
        try:
            if not getattr(m, "__name__", "").startswith(package) or vars(m).get(name) is not obj:
                continue
            f = getattr(m, "__file__", None)
            if not f or not f.endswith(".py"):
                continue
            with open(f, encoding="utf-8") as fh:
                src = fh.read()
            tree = ast.parse(src)
        except Exception:
            continue
        for n in tree.body:
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                return [os.path.realpath(f), n.lineno, " ".join((ast.get_source_segment(src, n) or "").split())[:400]]
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                return [os.path.realpath(f), n.lineno, " ".join((ast.get_source_segment(src, n) or "").split())[:400]]
    return None


def _via_table(owner, attr, package):
    """``get_platform().is_sm100`` answered by ``__getattr__`` through a module-level table {"is_sm100": "is_sm100_supported"}:
    the probe function that table names, where it is defined."""
    home = sys.modules.get(type(owner).__module__)
    for table in (vars(home).values() if home else ()):
        if isinstance(table, dict) and isinstance(table.get(attr), str):
            probe = table[attr]
            for m in list(sys.modules.values()):
                fn = vars(m).get(probe) if getattr(m, "__name__", "").startswith(package) else None
                if callable(fn):
                    found = _assigned_in(probe, fn, package)
                    if found:
                        return [found[0], found[1], f"{type(owner).__name__}.{attr} reads {probe}: {found[2]}"[:400]]
    return None


def _definition(mod, node, package):
    """Where the helper an expression reads is defined, with its source: the function, property getter or
    module-level assignment (``is_sm100_supported = lru_cache(...)(partial(...))``) it calls."""
    obj, name = None, None
    try:
        target = node.func if isinstance(node, ast.Call) else node
        if isinstance(target, ast.Attribute):
            owner = eval(compile(ast.Expression(target.value), "<helper>", "eval"), dict(vars(mod)))
            try:
                obj = inspect.getattr_static(owner, target.attr)
            except AttributeError:  # served by __getattr__: a table of fact -> probe name next to the class?
                return _via_table(owner, target.attr, package)
            if isinstance(obj, property):
                obj = obj.fget
            elif isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
        elif isinstance(target, ast.Name):
            name = target.id
            obj = vars(mod).get(name)
        if obj is None or not callable(obj):
            return None
        if name:
            found = _assigned_in(name, obj, package)
            if found:
                return found
        fn = inspect.unwrap(getattr(obj, "__func__", obj))
        fn = getattr(fn, "func", fn)  # functools.partial
        lines, first = inspect.getsourcelines(fn)
        return [os.path.realpath(inspect.getsourcefile(fn)), first, " ".join("".join(lines[:8]).split())[:400]]
    except Exception:
        return None


def eval_helpers(helpers, package):
    """Evaluate helper expressions (``is_sm100_supported()``, ``get_platform().is_sm100``) in the namespace of
    the module whose file wrote the decision: what the engine itself answers on the faked GPU."""
    by_file = {}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f:
            by_file.setdefault(os.path.realpath(f), m)
    out = []
    for h in helpers:
        row = {"file": h["file"], "expr": h["expr"], "answer": None, "error": None, "defined_at": None, "source": None}
        mod = by_file.get(os.path.realpath(h["file"]))
        if mod is None:
            row["error"] = "module not imported"
            out.append(row)
            continue
        try:
            node = ast.parse(h["expr"], mode="eval").body
            found = _definition(mod, node, package)
            if found:
                row["defined_at"], row["source"] = found[:2], found[2]
            row["answer"] = _jsonable(eval(compile(h["expr"], "<helper>", "eval"), dict(vars(mod))))
        except BaseException as exc:  # noqa: BLE001 - a helper that fails is an answer too
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        out.append(row)
    return out
