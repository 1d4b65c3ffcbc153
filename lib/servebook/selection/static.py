"""Static reading: where an engine chooses its attention backend, read from its own source (AST).

    reading = read_selection("/venv/lib/python3.11/site-packages/sglang", "sglang")
    reading.sites          # [Site(file='sglang/srt/server_args.py', line=1283, function='ServerArgs._handle_model_specific_adjustments',
                           #       target='attention_backend', value="'trtllm_mla'", conditions=[...]), ...]
    print(render_tree(reading.sites))          # a decision tree with source excerpts
    reading.helpers["is_sm100_supported"]       # how a hardware predicate is defined, from the same code
    find_sites(source_text, targets={"attention_backend"})   # any source text (tests, snippets)

Nothing here knows what an engine decides: the reader is given *where to look* (files,
the names that hold a backend choice, functions whose results become one) and reports
every place the code assigns them, with the chain of if/elif conditions that leads there.
Conditions are tagged ``hardware`` (capability / platform checks), ``model`` (MLA,
architecture lists, model config), ``kernel-lib`` (is a kernel library importable),
``user`` (server flags) or ``env`` (environment variables), by the words they use.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import threading
from pathlib import Path

from ..errors import EngineError

__all__ = ["Condition", "Site", "StaticReading", "ENGINE_LAYOUT", "find_sites", "read_selection", "render_tree", "classify"]


# CPython 3.11 (and early 3.12) can fail ast.parse called from several threads at once with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython gh-106905); the
# what-if matrix reads engines from threads, so every parse here goes through one lock.
_AST_LOCK = threading.Lock()


def _parse(source: str, mode: str = "exec") -> ast.AST:
    with _AST_LOCK:
        return ast.parse(source, mode=mode)


def _negate(text: str) -> str:
    """The negation of a source condition, written as a reader would: not (not x) -> x."""
    text = text.strip()
    try:
        node = _parse(text, mode="eval").body
    except SyntaxError:
        return f"not ({text})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ast.unparse(node.operand)
    if isinstance(node, (ast.Call, ast.Attribute, ast.Name, ast.Subscript)):
        return f"not {text}"
    return f"not ({text})"


@dataclasses.dataclass
class Condition:
    text: str            # the test as written in the source
    line: int
    negated: bool        # True on the else/elif side: the site is reached when ``text`` is false
    kinds: list[str]

    def __str__(self) -> str:
        return _negate(self.text) if self.negated else self.text


@dataclasses.dataclass
class Site:
    file: str            # relative to the site-packages dir, e.g. "sglang/srt/server_args.py"
    path: str            # absolute path (what the line tracer matches)
    line: int
    function: str        # Class.method or function
    function_line: int
    target: str          # the name that receives the choice (attention_backend, ...)
    value: str           # the source of the chosen value
    kind: str            # assign | return | dict-key | keyword | priority-list
    conditions: list[Condition]
    excerpt: str = ""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def hardware(self) -> bool:
        return any("hardware" in c.kinds for c in self.conditions)

    @property
    def model(self) -> bool:
        return any("model" in c.kinds for c in self.conditions)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["where"] = self.where
        return d


@dataclasses.dataclass
class StaticReading:
    engine: str
    version: str
    package_dir: str
    files: list[str]
    sites: list[Site]
    helpers: dict[str, dict]

    def attention_sites(self) -> list[Site]:
        return [s for s in self.sites if "attention" in s.target or s.target in ("applicable_attention", "backend_priorities")]


# Where to look, per engine: files (globs under the package dir), the names that hold a
# backend choice, functions whose return value is a choice, and files that define helpers.
ENGINE_LAYOUT = {
    "sglang": {
        # model_runner.py: up to ~0.5.5 the default backend is chosen there, at model load, not in ServerArgs
        "files": ["srt/server_args.py", "srt/arg_groups/*.py", "srt/arg_groups/model_overrides/*.py", "srt/platforms/*.py",
                  "srt/model_executor/model_runner.py"],
        "targets": {"attention_backend", "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend"},
        "returns": r"default_attn_backend|default_attention_backend",
        "helpers": ["srt/utils/common.py", "srt/utils.py", "srt/runtime_context.py", "srt/platforms/*.py", "srt/arg_groups/*.py"],
    },
    "vllm": {
        "files": ["platforms/cuda.py", "platforms/interface.py", "attention/selector.py", "v1/attention/selector.py",
                  "v1/attention/backends/registry.py"],
        "targets": {"selected_backend", "attn_backend", "backend_priorities", "backend_class"},
        "returns": r"backend_priorit|get_attn_backend_cls|get_valid_backends",
        "helpers": ["platforms/cuda.py", "platforms/interface.py", "utils/__init__.py"],
    },
    "transformers": {
        "files": ["modeling_utils.py"],
        "targets": {"applicable_attention", "applicable_attn_implementation", "attn_implementation", "_attn_implementation"},
        "returns": r"^get_correct_attn_implementation$",
        "helpers": ["utils/import_utils.py", "modeling_utils.py"],
    },
}

_KIND_WORDS = [
    ("hardware", r"\bis_sm\d+|\bsm\d{2,3}\b|is_blackwell|is_hopper|is_ampere|capability|is_cuda\b|is_hip\b|is_npu\b|is_xpu\b|"
                 r"is_cpu\b|is_mps\b|is_musa\b|is_hpu\b|get_platform\(|current_platform|platform\.|is_device_capability|"
                 r"cuda_version|is_rocm|is_tpu|get_device_type|torch\.cuda"),
    ("model", r"use_mla|\bmla\b|_mla\b|model_arch|architectures|ForCausalLM|ForConditionalGeneration|hf_config|model_config|"
              r"is_deepseek|head_num|num_kv_heads|kv_lora_rank|attention_sinks|has_sink|sliding|model_type|head_size|"
              r"is_attention_free|is_multimodal|has_asymmetric_kv|_supports_sdpa|_supports_flash_attn|_supports_flex_attn|requires_"),
    ("kernel-lib", r"flashinfer_available|has_flashinfer|is_flashinfer|find_spec|_available\(|is_kernels_available|"
                   r"general_availability_check|is_flash_attn|has_deep_gemm|import"),
    ("env", r"\benvs\.|os\.environ|getenv|get_bool_env_var|envs\b"),
    ("user", r"self\.(?!model)|server_args\.|\bcfg\.|requested_|speculative|page_size|kv_cache_dtype|enable_|disable_"),
]


def classify(text: str) -> list[str]:
    kinds = [k for k, pat in _KIND_WORDS if re.search(pat, text)]
    return kinds or ["other"]


_LINES: dict[int, list[bytes]] = {}


def _src(node: ast.AST, source: str) -> str:
    """The node's source text on one line (ast.get_source_segment re-splits the file on every call: too slow)."""
    lines = _LINES.get(id(source))
    if lines is None:
        lines = _LINES[id(source)] = [l.encode() for l in source.splitlines(True)]
    try:
        a, b = node.lineno - 1, node.end_lineno - 1
        if a == b:
            text = lines[a][node.col_offset:node.end_col_offset].decode()
        else:
            text = (lines[a][node.col_offset:] + b"".join(lines[a + 1:b]) + lines[b][:node.end_col_offset]).decode()
    except (AttributeError, IndexError, TypeError, UnicodeDecodeError):
        text = ast.unparse(node)
    return " ".join(text.split())


def _target_names(t: ast.AST) -> list[str]:
    if isinstance(t, ast.Attribute):
        return [t.attr]
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
        return [t.slice.value]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return None


class _Walker:
    def __init__(self, source: str, rel: str, path: str, targets: set[str], returns_re: str | None, lines: list[str]):
        self.source, self.rel, self.path, self.targets = source, rel, path, targets
        self.returns_re = re.compile(returns_re) if returns_re else None
        self.lines = lines
        self.sites: list[Site] = []
        self.calls: set[str] = set()  # functions whose results are assigned to a target

    def excerpt(self, line: int, before: int = 0, after: int = 0) -> str:
        lo, hi = max(1, line - before), min(len(self.lines), line + after)
        return "\n".join(self.lines[lo - 1:hi])

    def add(self, node, target, value_node, kind, func, conds):
        name, fline = func
        value = _src(value_node, self.source) if value_node is not None else ""
        end = getattr(node, "end_lineno", node.lineno)
        self.sites.append(Site(self.rel, self.path, node.lineno, name, fline, target, value[:200], kind, list(conds),
                               self.excerpt(node.lineno, 0, min(end - node.lineno, 4))))
        if value_node is not None:
            for sub in ast.walk(value_node):
                n = _call_name(sub)
                if n:
                    self.calls.add(n)

    def walk(self, body, conds, func, cls):
        for node in body:
            self.stmt(node, conds, func, cls)

    def cond(self, test, negated):
        text = _src(test, self.source)
        return Condition(text[:300], test.lineno, negated, classify(text))

    def stmt(self, node, conds, func, cls):
        if isinstance(node, ast.ClassDef):
            self.walk(node.body, [], func, node.name)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{cls}.{node.name}" if cls else node.name
            self.walk(node.body, [], (name, node.lineno), None if cls is None else cls)
            return
        if isinstance(node, ast.If):
            self.walk(node.body, conds + [self.cond(node.test, False)], func, cls)
            self.walk(node.orelse, conds + [self.cond(node.test, True)], func, cls)
            return
        if isinstance(node, (ast.For, ast.AsyncFor)):
            c = Condition(f"for {_src(node.target, self.source)} in {_src(node.iter, self.source)}"[:300], node.lineno, False,
                          classify(_src(node.iter, self.source)))
            self.walk(node.body, conds + [c], func, cls)
            self.walk(node.orelse, conds, func, cls)
            return
        if isinstance(node, ast.While):
            self.walk(node.body, conds + [self.cond(node.test, False)], func, cls)
            return
        if isinstance(node, (ast.With, ast.AsyncWith)):
            self.walk(node.body, conds, func, cls)
            return
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self.walk(node.body, conds, func, cls)
            for h in node.handlers:
                c = Condition(f"except {_src(h.type, self.source) if h.type else ''}".strip(), h.lineno, False, ["other"])
                self.walk(h.body, conds + [c], func, cls)
            self.walk(node.orelse, conds, func, cls)
            self.walk(node.finalbody, conds, func, cls)
            return
        if isinstance(node, ast.Match):
            for case in node.cases:
                c = Condition(f"match {_src(node.subject, self.source)}: case {_src(case.pattern, self.source)}"[:300],
                              case.pattern.lineno, False, classify(_src(node.subject, self.source)))
                self.walk(case.body, conds + [c], func, cls)
            return
        # -- statements that may choose a backend --
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            tlist = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for t in tlist:
                for name in _target_names(t):
                    if name in self.targets and value is not None:
                        kind = "dict-key" if isinstance(t, ast.Subscript) else "assign"
                        self._value_sites(node, name, value, kind, func, conds)
            if isinstance(value, ast.Dict):
                self._dict_sites(node, value, func, conds)
        elif isinstance(node, ast.Return) and node.value is not None and func[0] != "<module>":
            short = func[0].split(".")[-1]
            if self.returns_re and self.returns_re.search(short):
                self._value_sites(node, f"return of {short}", node.value, "return", func, conds)
        # keyword arguments naming a target: replace(args, attention_backend="x"), dict(attention_backend=...)
        if isinstance(node, (ast.Expr, ast.Assign, ast.Return, ast.AnnAssign)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    for kw in sub.keywords:
                        if kw.arg in self.targets and not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                            self.add(sub, kw.arg, kw.value, "keyword", func, conds)

    def _dict_sites(self, node, d: ast.Dict, func, conds):
        for k, v in zip(d.keys, d.values):
            if isinstance(k, ast.Constant) and k.value in self.targets and not (isinstance(v, ast.Constant) and v.value is None):
                self.add(node, k.value, v, "dict-key", func, conds)

    def _value_sites(self, node, name, value, kind, func, conds):
        if isinstance(value, ast.Constant) and value.value is None:
            return  # resetting to "unset" is not a choice
        if isinstance(value, ast.IfExp):  # a = x if c else y: two sites under the inline condition
            self.add(node, name, value.body, kind, func, conds + [self.cond(value.test, False)])
            self.add(node, name, value.orelse, kind, func, conds + [self.cond(value.test, True)])
            return
        if isinstance(value, (ast.List, ast.Tuple)) and value.elts and kind == "return":
            kind = "priority-list"
        self.add(node, name, value, kind, func, conds)


def find_sites(source: str, targets: set[str] | frozenset[str], returns: str | None = None, rel: str = "<source>",
               path: str = "<source>", follow_calls: bool = True) -> list[Site]:
    """Every assignment of a ``targets`` name in ``source`` (plus the returns of functions matching
    ``returns`` and, with ``follow_calls``, of functions whose result is assigned to a target)."""
    sites, _calls = _scan([(rel, path, source)], set(targets), returns, follow_calls)
    return sites


def _scan(files, targets, returns, follow_calls):
    trees = []
    for rel, path, source in files:
        try:
            tree = _parse(source)
        except SyntaxError as exc:
            raise EngineError(f"cannot parse {path}: {exc.msg} (line {exc.lineno}); is it the engine's Python source?") from exc
        trees.append((rel, path, source, tree))
    pattern = returns
    seen_calls: set[str] = set()
    _LINES.clear()
    for _round in range(4):  # follow calls: a function whose result becomes a choice is a choice site too
        sites, calls = [], set()
        for rel, path, source, tree in trees:
            w = _Walker(source, rel, path, targets, pattern, source.splitlines())
            w.walk(tree.body, [], ("<module>", 0), None)
            sites.extend(w.sites)
            calls |= w.calls
        if not follow_calls:
            break
        defined = {n.name for _r, _p, _s, t in trees for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        new = (calls & defined) - seen_calls - {"getattr", "get", "resolving_view", "resolved_view"}
        new = {n for n in new if re.search(r"backend|attn|attention", n)}
        if not new:
            break
        seen_calls |= new
        extra = "|".join(f"^{re.escape(n)}$" for n in sorted(seen_calls))
        pattern = f"{returns}|{extra}" if returns else extra
    sites.sort(key=lambda s: (s.file, s.line))
    # one site per (file, line, target, value)
    uniq, keys = [], set()
    for s in sites:
        k = (s.file, s.line, s.target, s.value, tuple(str(c) for c in s.conditions))
        if k not in keys:
            keys.add(k)
            uniq.append(s)
    return uniq, seen_calls


def _glob(package_dir: Path, patterns: list[str]) -> list[Path]:
    out = []
    for pat in patterns:
        for p in sorted(package_dir.glob(pat)):
            if p.is_file() and p not in out:
                out.append(p)
    return out


def _helpers(package_dir: Path, patterns: list[str], names: set[str]) -> dict[str, dict]:
    """How the predicates used in hardware/kernel-lib conditions are defined (def, assignment or a name map)."""
    found: dict[str, dict] = {}
    files = _glob(package_dir, patterns)
    aliases: dict[str, str] = {}
    for _ in range(2):
        for f in files:
            try:
                source = f.read_text()
                tree = _parse(source)
            except (OSError, SyntaxError, UnicodeDecodeError):
                continue
            lines = source.splitlines()
            rel = f"{package_dir.name}/{f.relative_to(package_dir)}"
            for node in ast.walk(tree):
                name = None
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                    name = node.name
                elif isinstance(node, ast.Assign):
                    hit = [n for t in node.targets for n in _target_names(t) if n in names and isinstance(t, ast.Name)]
                    name = hit[0] if hit else None
                elif isinstance(node, ast.Dict):  # "is_sm100": "is_sm100_supported" (a platform flag map)
                    for k, v in zip(node.keys, node.values):
                        if (isinstance(k, ast.Constant) and k.value in names and isinstance(v, ast.Constant)
                                and isinstance(v.value, str) and k.value not in found):
                            found[k.value] = {"where": f"{rel}:{k.lineno}", "excerpt": lines[k.lineno - 1].strip(), "means": v.value}
                            aliases[v.value] = k.value
                if name and name not in found:
                    end = min(getattr(node, "end_lineno", node.lineno), node.lineno + 9)
                    found[name] = {"where": f"{rel}:{node.lineno}", "excerpt": "\n".join(lines[node.lineno - 1:end])}
        more = set(aliases) - set(found)
        # a helper defined through functools.partial of another: follow that one too
        for info in list(found.values()):
            for callee in re.findall(r"\b(_check_\w+|_is_\w+)\b", info.get("excerpt", "")):
                more.add(callee)
        more -= set(found)
        if not more:
            break
        names = names | more
    return found


def read_selection(package_dir: str | os.PathLike, engine: str, version: str = "") -> StaticReading:
    """Read where ``engine`` (its package directory) chooses its attention backend."""
    if engine not in ENGINE_LAYOUT:
        raise EngineError(f"no static layout for engine {engine!r}; engines: {', '.join(ENGINE_LAYOUT)}")
    layout = ENGINE_LAYOUT[engine]
    pkg = Path(package_dir)
    files = _glob(pkg, layout["files"])
    if not files:
        raise EngineError(f"{pkg} holds none of {engine}'s selection files ({', '.join(layout['files'])}); is it the {engine} package directory?")
    src = [(f"{pkg.name}/{f.relative_to(pkg)}", str(f.resolve()), f.read_text()) for f in files]
    sites, _ = _scan(src, set(layout["targets"]), layout["returns"], True)
    pred = set()
    for s in sites:
        for c in s.conditions:
            if {"hardware", "kernel-lib"} & set(c.kinds):
                pred |= set(re.findall(r"\b([A-Za-z_]\w*)\b(?=\s*\(|\s*(?:and|or|\)|$))", c.text))
                pred |= set(re.findall(r"\.(is_\w+|has_\w+)", c.text))
    pred = {p for p in pred if p.startswith(("is_", "has_", "_is_", "get_device")) or "capab" in p}
    helpers = _helpers(pkg, layout["helpers"], pred)
    return StaticReading(engine, version, str(pkg), [r for r, _p, _s in src], sites, helpers)



def _shorten(text: str, width: int) -> str:
    """``text`` within ``width`` characters, cut only between words (at a space or after a comma) and marked " [...]"."""
    if len(text) <= width:
        return text
    room = max(width - 6, 1)
    cut = max(text.rfind(" ", 0, room), text.rfind(",", 0, room) + 1)
    return text[: cut if cut > 0 else room].rstrip() + " [...]"

def render_tree(sites: list[Site], only_targets: set[str] | None = None, excerpts: bool = True, width: int = 110) -> str:
    """The sites as a decision tree: per function, the if/elif chain down to each choice."""
    out = []
    by_func: dict[tuple[str, str], list[Site]] = {}
    for s in sites:
        if only_targets and s.target not in only_targets and not s.target.startswith("return of"):
            continue
        by_func.setdefault((s.file, s.function), []).append(s)
    for (file, func), group in by_func.items():
        out.append(f"{func}  ({file}:{group[0].function_line})")
        printed: list[str] = []
        for s in group:
            path = [str(c) for c in s.conditions]
            common = 0
            while common < min(len(path), len(printed)) and path[common] == printed[common]:
                common += 1
            for depth in range(common, len(path)):
                c = s.conditions[depth]
                tags = ",".join(k for k in c.kinds if k != "other")
                text = path[depth]
                text = _shorten(text, width - 4 * depth)
                out.append("    " * (depth + 1) + f"{'elif/else: ' if c.negated else 'if '}{text}" + (f"   [{tags}]" if tags else "") + f"  @{c.line}")
            printed = path
            out.append("    " * (len(path) + 1) + f"=> {s.target} = {_shorten(s.value, 80)}   ({s.file}:{s.line})")
            if excerpts and s.excerpt and s.kind not in ("return", "priority-list"):
                pass
        out.append("")
    return "\n".join(out)
