"""Chapter 02's decode path, read from the engine's source: source text in, facts with their lines out.

    conditions_at(source, 120)                 # the if/elif chain (outermost first) under which line 120 runs
    read_custom_ar_rule(source, rel)           # custom all-reduce's PCIe rule: where, condition, message
    read_env_flags({rel: source}), read_collectives(source, rel), read_greedy_sampling(source, rel)

No engine runs here (``decode_path.py`` runs the engine's own functions and falls back on these readers); they are
tested on excerpts of the engines' wheels (``tests/data/decode_path/``).
"""

from __future__ import annotations

import ast
import re

from .static import _negate

__all__ = ["conditions_at", "read_custom_ar_rule", "read_env_flags", "read_collectives", "read_greedy_sampling",
           "read_mla_core_split", "read_mla_cache_writes", "read_mla_query_cats"]

_COLLECTIVE = re.compile(r"(all_reduce|all_gather|reduce_scatter)")
# An environment variable that switches an all-reduce path for PCIe-only GPUs (its name says PCIe and all-reduce/IPC)
_PCIE_FLAG = re.compile(r"\b((?:SGLANG|VLLM)_[A-Z0-9_]*PCIE[A-Z0-9_]*)\b")
_AR_WORD = re.compile(r"ALLREDUCE|ALL_REDUCE|_AR\b|_AR_|IPC")
_AR_FLAG = re.compile(r"\b((?:SGLANG|VLLM)_[A-Z0-9_]*(?:ALLREDUCE|ALL_REDUCE|SYMM_MEM|CUSTOM_AR)[A-Z0-9_]*)\b")


# Functions that are not on a CUDA TP decode step: CPU/NPU/ROCm paths, context parallel, prefill-only, weight loading
_NOT_DECODE = r"cpu|npu|hip|rocm|_cp$|_cp_|^cp_|rebuild|prefill|load_weights|weight_loader"


# -- static readers (source text in, facts with lines out) ----------------------------------------
def _seg(node: ast.AST, source: str) -> str:
    return " ".join((ast.get_source_segment(source, node) or ast.unparse(node)).split())


def conditions_at(source: str, line: int) -> list[str]:
    """The if/elif/else chain (outermost first) under which ``line`` of ``source`` runs; else branches negated."""
    out: list[str] = []

    def inside(nodes, ln):
        return bool(nodes) and nodes[0].lineno <= ln <= max(getattr(n, "end_lineno", n.lineno) for n in nodes)

    def walk(body):
        for node in body:
            if not (node.lineno <= line <= getattr(node, "end_lineno", node.lineno)):
                continue
            if isinstance(node, ast.If):
                if inside(node.body, line):
                    out.append(_seg(node.test, source))
                    walk(node.body)
                elif inside(node.orelse, line):
                    out.append(_negate(_seg(node.test, source)))
                    walk(node.orelse)
                return
            for field in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(node, field, None)
                if isinstance(sub, list) and sub and inside(sub, line):
                    walk(sub)
                    return
            return

    walk(ast.parse(source).body)
    return out


def _function_at(source: str, line: int) -> str | None:
    best = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno:
                best = node
    return best.name if best else None


def read_custom_ar_rule(source: str, rel: str) -> dict | None:
    """The rule that turns custom all-reduce off on PCIe-only GPUs: the ``if world_size > 2 and not <nvlink>`` in
    ``custom_all_reduce.py``; its line, its test and the message it logs. None when the file has no such rule."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If):
            test = _seg(node.test, source)
            if re.search(r"world_size\s*>\s*2", test) and re.search(r"nvlink|fully_connected", test, re.I):
                msg = ""
                for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                    if isinstance(sub, ast.Call) and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in sub.args):
                        msg = "".join(a.value for a in sub.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
                        break
                return {"where": f"{rel}:{node.lineno}", "condition": test, "message": " ".join(msg.split()),
                        "function": _function_at(source, node.lineno)}
    return None


def read_env_flags(files: dict[str, str], pcie_only: bool = True) -> list[dict]:
    """Environment variables that switch all-reduce paths, first definition of each: ``files`` maps a relative path to its
    source. ``pcie_only``: only names that say PCIe and all-reduce/IPC (the PCIe paths); else every all-reduce switch."""
    found: dict[str, dict] = {}
    for rel, source in sorted(files.items()):
        for i, text in enumerate(source.splitlines(), 1):
            names = [m for m in _PCIE_FLAG.findall(text) if _AR_WORD.search(m)] if pcie_only else _AR_FLAG.findall(text)
            for name in names:
                defines = re.search(rf"\b{name}\b\s*(:[^=]*)?=|[\"']{name}[\"']\s*:|getenv\(\s*[\"']{name}|get_bool_env_var\(\s*[\"']{name}", text)
                cur = found.get(name)
                if cur is None or (defines and not cur["defines"]):
                    found[name] = {"name": name, "where": f"{rel}:{i}", "text": " ".join(text.split())[:200], "defines": bool(defines)}
    return sorted(found.values(), key=lambda r: r["name"])


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def read_collectives(source: str, rel: str, classes: str = r"MLP|MoE|Attention|DecoderLayer|AllReduce|Communicat") -> list[dict]:
    """Collective calls (all_reduce / all_gather / reduce_scatter) and output projections that reduce
    (``RowParallelLinear(..., reduce_results=...)``) inside the classes whose names match ``classes``: each with its
    class.function, line, the call as written and the if-chain around it."""
    tree = ast.parse(source)
    out = []
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and re.search(classes, n.name)]:
        if re.search(r"Vision|NextN|MTP|Indexer", cls.name):
            continue
        for fn in [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            if re.search(_NOT_DECODE, fn.name):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                name = _call_name(node)
                row = None
                if _COLLECTIVE.search(name) and not name.startswith("_get") and "should" not in name:
                    row = {"kind": _COLLECTIVE.search(name).group(1), "call": _seg(node, source)[:160]}
                elif name == "RowParallelLinear":
                    kw = {k.arg: _seg(k.value, source) for k in node.keywords if k.arg == "reduce_results"}
                    row = {"kind": "row-parallel output (all-reduce when reduce_results)",
                           "call": f"RowParallelLinear(reduce_results={kw.get('reduce_results', 'True (default)')})"}
                if row:
                    out.append(row | {"where": f"{rel}:{node.lineno}", "function": f"{cls.name}.{fn.name}",
                                      "conditions": conditions_at(source, node.lineno)})
    return sorted(out, key=lambda r: int(r["where"].rsplit(":", 1)[1]))


def read_greedy_sampling(source: str, rel: str) -> dict | None:
    """The greedy path of a sampler: the ``argmax`` call a greedy batch takes, with its if-chain (the first argmax under a
    condition that names greedy, else the body of a function whose name says greedy)."""
    tree = ast.parse(source)
    cands = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "argmax":
            conds = conditions_at(source, node.lineno)
            fn = _function_at(source, node.lineno) or ""
            cands.append((not any("greedy" in c for c in conds), "greedy" not in fn, node.lineno, conds, fn, _seg(node, source)))
    cands = [c for c in cands if not (c[0] and c[1])]
    if not cands:
        return None
    _, _, line, conds, fn, call = sorted(cands)[0]
    return {"where": f"{rel}:{line}", "function": fn, "call": call, "conditions": conds}


def _module_list(tree: ast.Module, name: str) -> tuple[list[str], int] | None:
    """The last module-level ``name = [str, ...]`` of a parsed module (the binding a use in it sees) and its line."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            found = ([e.value for e in node.value.elts if isinstance(e, ast.Constant)], node.lineno)
    return found


def _imported_from(tree: ast.Module, name: str) -> str | None:
    """The module a module-level ``from X import name`` of a parsed module takes ``name`` from (dotted), or None."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name and not a.asname for a in node.names):
            return node.module
    return None


def read_mla_core_split(files: dict[str, str]) -> dict | None:
    """SGLang's MLA decode split (``files``: relative path -> source of the model code): the ``if
    self.current_attention_backend in NAME`` of an ``*absorb_core*`` function, the backends ``NAME`` holds where that
    module binds it (its own module-level list, else the module it imports the name from) and the ``torch.cat`` calls the
    other branch makes. ``{"where", "function", "name", "backends", "list_at", "cat_at"}``; None when no such branch."""
    for rel, source in sorted(files.items()):
        if "absorb_core" not in source:
            continue
        tree = ast.parse(source)
        for fn in ast.walk(tree):
            if not (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and "absorb_core" in fn.name):
                continue
            for node in ast.walk(fn):
                t = getattr(node, "test", None)
                if not (isinstance(node, ast.If) and isinstance(t, ast.Compare) and isinstance(t.ops[0], ast.In)
                        and "current_attention_backend" in _seg(t.left, source) and isinstance(t.comparators[0], ast.Name)):
                    continue
                name = t.comparators[0].id
                bound, at, module = _module_list(tree, name), rel, _imported_from(tree, name)
                if bound is None and module:
                    at = module.replace(".", "/") + ".py"
                    bound = _module_list(ast.parse(files[at]), name) if at in files else None
                cats = [n.lineno for sub in node.orelse for n in ast.walk(sub)
                        if isinstance(n, ast.Call) and _seg(n.func, source) == "torch.cat"]
                return {"where": f"{rel}:{node.lineno}", "function": fn.name, "name": name,
                        "backends": bound[0] if bound else None, "list_at": f"{at}:{bound[1]}" if bound else None,
                        "cat_at": [f"{rel}:{ln}" for ln in cats]}
    return None


def read_mla_cache_writes(files: dict[str, str]) -> list[dict]:
    """vLLM's MLA cache write: each ``concat_and_cache_mla(...)`` call (``files``: relative path -> source) with its
    class.function and line; the op's own definition and wrappers named for it are left out."""
    out = []
    for rel, source in sorted(files.items()):
        if "concat_and_cache_mla" not in source:
            continue
        tree = ast.parse(source)
        for cls in [None, *[n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]]:
            for fn in (cls.body if cls else tree.body):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or "concat_and_cache_mla" in fn.name:
                    continue
                for n in ast.walk(fn):
                    if isinstance(n, ast.Call) and _call_name(n) == "concat_and_cache_mla":
                        out.append({"where": f"{rel}:{n.lineno}",
                                    "function": f"{cls.name}.{fn.name}" if cls else fn.name})
    return out


def read_mla_query_cats(files: dict[str, str], decode: str = r"^(forward_mqa|_forward_decode)$") -> dict[str, list[str]]:
    """vLLM's MLA backends at decode (``files``: relative path -> source): per class with a decode function (name matching
    ``decode``), the lines where it joins the query's parts with ``torch.cat`` ([] where it hands them on apart)."""
    out: dict[str, list[str]] = {}
    for rel, source in sorted(files.items()):
        if "forward_mqa" not in source and "_forward_decode" not in source:
            continue
        for cls in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]:
            for fn in [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and re.match(decode, f.name)]:
                out.setdefault(cls.name, []).extend(f"{rel}:{n.lineno}" for n in ast.walk(fn)
                                                    if isinstance(n, ast.Call) and _seg(n.func, source) == "torch.cat")
    return out
