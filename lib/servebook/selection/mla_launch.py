"""The Triton MLA decode kernel's launch, read from an engine's own source (AST): what ``_decode_grouped_att_m_fwd``
passes to its stage-1 kernel for an MLA cache of kv_lora_rank 512 + rope 64 (Lk 576, Lv 512), and where it branches on
the platform or the GPU's capability.

    launch = read_mla_launch(env.package_dir, "sglang", env.version)
    launch["block_n"], launch["num_stages"], launch["where"]     # 32, 2, "sglang/srt/.../decode_attention.py:426-512"
    launch["platform_branches"]     # [{"line": 445, "test": "_is_hip and Lk >= 576", "rocm_only": True, "on_cuda": False}, ...]
    read_mla_launch_source(text, "x.py")                          # any source text (tests)

The function body is walked in order with Lk, Lv and the MLA flag given and the platform taken as CUDA (a name that
says hip or rocm is False): each assignment is evaluated where its value is a constant expression of known names
(``triton.next_power_of_2`` and ``triton.cdiv`` included), an ``if`` whose test is known follows its branch, one whose
test is not known keeps a name only where both branches agree. The launch is the call ``kernel[grid](...)`` with a
``BLOCK_DMODEL`` keyword; its keywords are evaluated where the call stands.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..errors import EngineError
from .static import _call_name, _glob, _parse

__all__ = ["FUNCTION", "KERNEL_FILES", "MLA_SHAPE", "SPLIT_CAP_RULES", "read_mla_launch", "read_mla_launch_source",
           "read_default_kv_splits", "read_split_rule", "split_cap", "capability_words"]

FUNCTION = "_decode_grouped_att_m_fwd"
# the Triton decode-attention module, per engine, newest layout first (relative to the package directory)
KERNEL_FILES = {
    "sglang": ["kernels/ops/attention/decode_attention.py", "srt/layers/attention/triton_ops/decode_attention.py"],
    "vllm": ["v1/attention/ops/triton_decode_attention.py", "attention/ops/triton_decode_attention.py"],
}
# the function that caps the MLA decode kernel's KV splits by the GPU's SM count, per engine (file relative to the package
# directory, function); the versions without it take the kv-split default uncapped (SGLang 0.5.9)
SPLIT_CAP_RULES = {
    "sglang": [("srt/layers/attention/triton_backend.py", "_mla_decode_kv_splits_cap")],
    "vllm": [("v1/attention/backends/mla/triton_mla.py", "_compute_num_kv_splits"),
             ("attention/backends/mla/triton_mla.py", "_compute_num_kv_splits")],
}
# what each of the rule's parameters is given: the SM count, the context (long enough not to bind), the kv-split default
_SPLIT_ARGS = {"sm_count": "sms", "max_seq_len": "context", "max_context_len": "context", "base_max_kv_splits": "default"}
_LONG = (1 << 40, 1 << 41)  # two contexts far above any model's: the cap is the rule's value where both agree
# Kimi-K2.5 / DeepSeek-V3 MLA: the cache row is kv_lora_rank 512 + qk_rope_head_dim 64; the value part is the 512
MLA_SHAPE = {"Lk": 576, "Lv": 512}
_MLA_FLAGS = ("is_mla", "has_mla", "use_mla")
_LAUNCH_KEYS = {"block_n": "BLOCK_N", "block_h": "BLOCK_H", "block_dmodel": "BLOCK_DMODEL", "block_dpe": "BLOCK_DPE",
                "num_warps": "num_warps", "num_stages": "num_stages"}
_ROCM = re.compile(r"hip|rocm", re.I)
_CUDA = re.compile(r"is_cuda", re.I)
_CAPABILITY = re.compile(r"capabilit|\bsm_?\d{2,3}|is_sm\d|is_blackwell|is_hopper|shared_mem|smem|multi_processor|"
                         r"get_device_properties|num_sms", re.I)


class _Unknown:
    def __repr__(self) -> str:
        return "unknown"


UNKNOWN = _Unknown()


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


_CALLS = {"next_power_of_2": _next_pow2, "cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "int": int}
_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def _eval(node: ast.AST, env: dict):
    """The value of ``node`` from the names in ``env``, or UNKNOWN (never raises on an expression it cannot follow)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str)):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _eval(node.operand, env)
        return UNKNOWN if v is UNKNOWN else (not v)
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env) for v in node.values]
        stop = isinstance(node.op, ast.Or)  # Or stops at a true value, And at a false one
        if any(v is not UNKNOWN and bool(v) == stop for v in vals):
            return stop
        return UNKNOWN if any(v is UNKNOWN for v in vals) else (not stop)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        a, b = _eval(node.left, env), _eval(node.comparators[0], env)
        return UNKNOWN if UNKNOWN in (a, b) else _CMP[type(node.ops[0])](a, b)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        a, b = _eval(node.left, env), _eval(node.right, env)
        return UNKNOWN if UNKNOWN in (a, b) else _BIN[type(node.op)](a, b)
    if isinstance(node, ast.IfExp):
        t = _eval(node.test, env)
        return UNKNOWN if t is UNKNOWN else _eval(node.body if t else node.orelse, env)
    if isinstance(node, ast.Call) and not node.keywords:
        name = _call_name(node)
        args = [_eval(a, env) for a in node.args]
        if name in _CALLS and UNKNOWN not in args:
            return _CALLS[name](*args)
    return UNKNOWN


def _platform_value(name: str):
    if _ROCM.search(name):
        return False
    if _CUDA.search(name):
        return True
    return UNKNOWN


class _Launch:
    """Walks the function body in order; ``found`` holds the launch's keywords evaluated where the call stands."""

    def __init__(self, env: dict, given: set[str]):
        self.env, self.given, self.found = env, given, None
        self.tests: dict[int, object] = {}   # each ``if`` reached: its test's value (UNKNOWN: both branches walked)

    def walk(self, body: list[ast.stmt]) -> None:
        for node in body:
            if self.found is None:
                self.stmt(node)

    def stmt(self, node: ast.stmt) -> None:
        call = next((c for c in ast.walk(node) if _is_launch(c)), None)
        if call is not None and not isinstance(node, ast.If):
            self.found = ({k.arg: _eval(k.value, self.env) for k in call.keywords if k.arg}, call.lineno)
            return
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    if t.id not in self.given:
                        self.env[t.id] = _eval(node.value, self.env)
                else:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and n.id not in self.given:
                            self.env[n.id] = UNKNOWN
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            if node.target.id not in self.given:
                self.env[node.target.id] = UNKNOWN if isinstance(node, ast.AugAssign) or node.value is None \
                    else _eval(node.value, self.env)
        elif isinstance(node, ast.If):
            t = self.tests[node.lineno] = _eval(node.test, self.env)
            if t is not UNKNOWN:
                self.walk(node.body if t else node.orelse)
                return
            before = dict(self.env)
            self.walk(node.body)
            one, self.env = self.env, dict(before)
            self.walk(node.orelse)
            self.env = {k: (v if one.get(k, UNKNOWN) == v else UNKNOWN) for k, v in self.env.items()}
            self.env.update({k: UNKNOWN for k in one if k not in self.env})


def _is_launch(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and any(k.arg == "BLOCK_DMODEL" for k in node.keywords))


def _module_constants(tree: ast.Module) -> dict:
    """Module-level names: simple constants, and the platform flags (``_is_hip = is_hip()``: False, CUDA's: True)."""
    env: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            v = _platform_value(name)
            env[name] = v if v is not UNKNOWN else _eval(node.value, env)
    return env


def _branches(fn: ast.FunctionDef, env: dict, source_lines: list[str], tests: dict) -> tuple[list[dict], list[dict]]:
    """Every ``if`` (and inline ``x if c else y``) in ``fn`` whose test names the platform, and every one that names the
    GPU's capability, shared memory or SM count: line, test as written, whether it is ROCm's alone."""
    plat, cap = [], []
    for node in ast.walk(fn):
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        text = ast.unparse(node.test)
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
        rocm = sorted(n for n in names if _ROCM.search(n))
        row = {"line": node.lineno, "test": text, "excerpt": source_lines[node.lineno - 1].strip()}
        if rocm or any(_CUDA.search(n) for n in names):
            # ROCm's alone: the test requires a ROCm name to be true; on_cuda: its value in the MLA launch on CUDA
            on_cuda = tests.get(node.lineno, UNKNOWN) if isinstance(node, ast.If) else UNKNOWN
            plat.append({**row, "rocm_only": _mentions_plainly(node.test, rocm),
                         "on_cuda": None if on_cuda is UNKNOWN else bool(on_cuda)})
        if _CAPABILITY.search(text):
            cap.append(row)
    return sorted(plat, key=lambda r: r["line"]), sorted(cap, key=lambda r: r["line"])


def _mentions_plainly(test: ast.AST, rocm: list[str]) -> bool:
    """The test requires a ROCm name to be true: it is that name, or an ``and`` with that name as one of its terms."""
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(isinstance(t, ast.Name) and t.id in rocm for t in terms)


def read_mla_launch_source(source: str, rel: str = "<source>", shape: dict = MLA_SHAPE) -> dict:
    """The MLA launch of ``FUNCTION`` in ``source`` (the module's text; ``rel`` names it in citations)."""
    try:
        tree = _parse(source)
    except SyntaxError as exc:
        raise EngineError(f"cannot parse {rel}: {exc.msg} (line {exc.lineno}); is it the engine's Python source?") from exc
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION), None)
    if fn is None:
        raise EngineError(f"{rel} defines no {FUNCTION}: not the Triton decode-attention module this reader knows; "
                          f"name the module that launches the grouped decode kernel")
    env = _module_constants(tree)
    given = {**shape, **{f: True for f in _MLA_FLAGS}}
    walker = _Launch({**env, **given}, set(given))
    walker.walk(fn.body)
    if walker.found is None:
        raise EngineError(f"{rel}:{fn.lineno} {FUNCTION} launches no kernel with BLOCK_DMODEL; the reader cannot see its launch")
    kw, call_line = walker.found
    lines = source.splitlines()
    plat, cap = _branches(fn, env, lines, walker.tests)
    out = {"where": f"{rel}:{fn.lineno}-{fn.end_lineno} ({FUNCTION})", "file": rel, "function_line": fn.lineno,
           "function_end": fn.end_lineno, "launch_line": call_line, "platform_branches": plat, "capability_branches": cap}
    for key, arg in _LAUNCH_KEYS.items():
        v = kw.get(arg, UNKNOWN)
        out[key] = None if v is UNKNOWN else v
    out["unread"] = [k for k in _LAUNCH_KEYS if out[k] is None]
    # the tests the code alone does not settle (a caller's argument): why a value above may be unread
    out["open_tests"] = [{"line": ln, "test": ast.unparse(n.test)} for n in ast.walk(fn) if isinstance(n, ast.If)
                         for ln in [n.lineno] if walker.tests.get(ln, None) is UNKNOWN]
    return out


def _source(f: Path) -> str:
    return f.read_text(encoding="utf-8", errors="replace")


def _kernel_file(pkg: Path, engine: str) -> tuple[Path, str]:
    """The first of the engine's kernel files (newest layout first) that defines the function, and its text."""
    if engine not in KERNEL_FILES:
        raise EngineError(f"no Triton decode-attention layout for engine {engine!r}; engines: {', '.join(KERNEL_FILES)}")
    for f in _glob(pkg, list(KERNEL_FILES[engine])):
        text = _source(f)
        if f"def {FUNCTION}(" in text:
            return f, text
    raise EngineError(f"{pkg} holds no {FUNCTION} in {' or '.join(KERNEL_FILES[engine])}; is it the {engine} package "
                      f"directory (servebook engines list)?")


def read_mla_launch(package_dir, engine: str, version: str = "") -> dict:
    """The MLA launch read in ``engine``'s package directory (an engine environment's ``package_dir``)."""
    pkg = Path(package_dir)
    f, text = _kernel_file(pkg, engine)
    out = read_mla_launch_source(text, f"{pkg.name}/{f.relative_to(pkg)}")
    return {"engine": engine, "version": version, **out}


def read_default_kv_splits(package_dir, engine: str = "sglang") -> dict | None:
    """SGLang's ``--triton-attention-num-kv-splits`` default, read from ``ServerArgs`` (a constant field): ``{"value",
    "where"}``, or None where the field or a constant default is not there."""
    if engine != "sglang":
        return None
    pkg = Path(package_dir)
    f = pkg / "srt" / "server_args.py"
    if not f.is_file():
        return None
    tree = _parse(_source(f))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"):
        for node in cls.body:
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and node.target.id == "triton_attention_num_kv_splits" and isinstance(node.value, ast.Constant)):
                return {"value": node.value.value, "where": f"{pkg.name}/{f.relative_to(pkg)}:{node.lineno}"}
    return None


def read_split_rule(package_dir, engine: str) -> dict | None:
    """The engine's SM-cap rule for the MLA KV splits (``SPLIT_CAP_RULES``) as read in its package directory: ``{"function",
    "where", "source"}`` (``source``: the module constants the function names, then the function's text), or None where
    no file of the engine defines it."""
    pkg = Path(package_dir)
    for rel, name in SPLIT_CAP_RULES.get(engine, []):
        f = pkg / rel
        if not f.is_file():
            continue
        text = _source(f)
        if f"def {name}(" not in text:
            continue
        tree = _parse(text)
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        used, lines = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}, text.splitlines()
        consts = [_segment(lines, n) for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id in used]
        return {"function": name, "where": f"{pkg.name}/{rel}:{fn.lineno}-{fn.end_lineno} ({name})",
                "source": "\n".join(consts + ["", _segment(lines, fn)])}
    return None


def _segment(lines: list[str], node: ast.stmt) -> str:
    """``ast.get_source_segment`` of a statement, from the module's lines split once (that one splits them per call)."""
    seg = lines[node.lineno - 1:node.end_lineno]
    seg[-1] = seg[-1].encode()[:node.end_col_offset].decode()
    seg[0] = seg[0].encode()[node.col_offset:].decode()
    return "\n".join(seg)


class _Fell:
    pass


def _run(body: list[ast.stmt], env: dict):
    """The value a function body returns with ``env`` bound: assignments and ``if`` on known tests followed; UNKNOWN
    where a statement or test cannot be followed; ``_Fell`` where the body ends without a return."""
    for node in body:
        if isinstance(node, ast.Return):
            return UNKNOWN if node.value is None else _eval(node.value, env)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            env[node.targets[0].id] = _eval(node.value, env)
        elif isinstance(node, ast.If):
            t = _eval(node.test, env)
            if t is UNKNOWN:
                return UNKNOWN
            r = _run(node.body if t else node.orelse, env)
            if r is not _Fell:
                return r
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):  # a docstring is passed over
            return UNKNOWN
    return _Fell


def split_cap(rule: dict, sm_count: int, default: int | None = None) -> int:
    """The KV-split cap ``rule`` (``read_split_rule``, or the same recorded) gives on a GPU of ``sm_count`` SMs: the rule
    evaluated at a context long enough not to bind (``_LONG``: two such contexts must agree), with the kv-split
    ``default`` where the rule takes one. EngineError where the rule cannot be followed."""
    tree = _parse(rule["source"])
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == rule["function"]), None)
    if fn is None:
        raise EngineError(f"the split rule at {rule['where']} defines no {rule['function']}")
    unknown = [a.arg for a in fn.args.args if a.arg not in _SPLIT_ARGS]
    if unknown or (default is None and any(_SPLIT_ARGS[a.arg] == "default" for a in fn.args.args)):
        raise EngineError(f"{rule['where']} takes {', '.join(unknown) or 'the kv-split default'}, which the reader cannot "
                          f"give; read the rule there and name its parameter in mla_launch._SPLIT_ARGS")
    values = []
    for context in _LONG:
        given = {"sms": sm_count, "context": context, "default": default}
        env = {**_module_constants(tree), **{a.arg: given[_SPLIT_ARGS[a.arg]] for a in fn.args.args}}
        values.append(_run(fn.body, env))
    if any(v is UNKNOWN or v is _Fell or not isinstance(v, int) for v in values) or values[0] != values[1]:
        raise EngineError(f"{rule['where']}: no cap by SM count could be followed at {sm_count} SMs (values {values} at "
                          f"contexts {_LONG})")
    return values[0]


def _lines(rows: list[dict], mark: bool = False) -> str:
    def one(r):
        if not mark or r.get("on_cuda") is None:
            return f":{r['line']}"
        return f":{r['line']} ({'taken' if r['on_cuda'] else 'not taken'} for MLA on CUDA)"
    cited = [one(r) for r in rows]
    if mark:
        return ", ".join(cited)
    return cited[0] if len(cited) == 1 else ", ".join(cited[:-1]) + " and " + cited[-1]


def capability_words(launch: dict) -> str:
    """What the launch keys on, in a line: the capability tests (none where the code has none), the branches for ROCm
    alone and the other tests on the platform, each with its line."""
    caps = launch["capability_branches"]
    rocm = [b for b in launch["platform_branches"] if b["rocm_only"]]
    other = [b for b in launch["platform_branches"] if not b["rocm_only"]]
    parts = ([f"a branch for ROCm only, {_lines(rocm)}"] if rocm else []) + \
        ([f"other tests on the platform: {_lines(other, mark=True)}"] if other else [])
    head = "none" if not caps else "on the capability at " + _lines(caps)
    return f"{head} ({'; '.join(parts)})" if parts else head
