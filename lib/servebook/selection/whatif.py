"""What-if: which attention backend would this engine pick for this model on that GPU, and which rule decides.

    r = whatif("sglang==0.5.9", "kimi-k2.5", gpu="rtx-pro-6000")
    r["attention_backend"]      # 'triton'  (what the engine's own ServerArgs resolved)
    r["decided_by"]             # {'where': 'sglang/srt/server_args.py:1833', 'function': 'ServerArgs._handle_...', ...}
    r["conditions"]             # the if/elif chain that led there, tagged hardware/model/...
    r["logs"], r["method"]      # the engine's own log lines; 'dynamic' or 'static'
    r["helper_answers"]         # the hardware helpers on that path, as the engine answered them under the fake
    r["alternatives"]           # what the other side of each skipped hardware branch would have written
    whatif("transformers", "embedded")                  # this host, servebook's own transformers
    whatif("sglang==0.5.9", "deepseek-v3", capability="12.0", kernel_libs={"flashinfer": False})
    decision_matrix("sglang==0.5.9", ["h200", "b200", "rtx-pro-6000"], ["kimi-k2.5", "llama-3.1-8b"])
    matrix_diff(matrix_a, matrix_b)

The engine's resolution runs in a subprocess under the engine's own interpreter (see
``_runner.py``; vLLM's part is ``_vllm_runner.py``): the GPU is faked from the hardware profile, the
model is a directory holding only its config.json, and the lines reached are traced against the sites
that the static reading found. If the engine cannot be imported there, the answer falls back to the
static reading, says why, and is marked ``method="static"``.

    v = whatif("vllm==0.26.0", "kimi-k2.5", gpu="rtx-pro-6000")
    v["attention_backend"], v["decided_by"]["where"]   # 'TRITON_MLA', 'vllm/platforms/cuda.py:131' (the list returned)
    v["candidates_checked"]                              # that list in order, each backend's own validation verdict
    v["decode_path"]                                     # CUDA graphs, custom all-reduce, MoE backend, sampler
    v["assumptions"]["stubbed_extensions"]               # vLLM's compiled modules that could not load here, and why

Within one run (a chapter's kernel) the same what-if is often asked more than once (the book's own case, the seed case,
a matrix cell). ``remember_answers()`` keeps the engine's raw answer to each request while on, keyed by everything
that goes into it (see ``memo.py``); a request that differs in anything is asked again. Off by default.

    remember_answers()          # on, for the rest of this process (chapter 02 turns it on)
    remember_answers(False)     # off, and forgotten
    remembered()                # {'asked': 2, 'reused': 1, 'kept': 2}
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from ..cards import architecture_of, materialize, model_config, uses_mla
from ..engines.envs import EngineEnv, resolve_engine
from ..errors import EngineError, ModelError, ParameterError, ServebookError
from .envs import _SELECTION_LIBS, DEFAULT_KERNEL_LIBS, GPU_ONLY, _ask
from .memo import _keep, _memo_key, _recall, remember_answers, remembered
from .rootcause import explain, helper_requests
from .static import Site, read_selection, render_tree

__all__ = ["SelectionError", "whatif", "whatif_many", "decision_matrix", "matrix_diff", "gpu_from", "DEFAULT_KERNEL_LIBS", "static_reading",
           "remember_answers", "remembered"]

_RUNNER = Path(__file__).with_name("_runner.py")
_ATTN_TARGETS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "applicable_attention",
                 "applicable_attn_implementation", "attn_implementation", "selected_backend", "backend_priorities")


# SGLang's resolved fields that shape a decode step besides attention (what chapters 03-05 measure)
_SG_DECODE = ("moe_runner_backend", "sampling_backend", "quantization", "kv_cache_dtype", "page_size", "disable_cuda_graph",
              "cuda_graph_max_bs", "disable_custom_all_reduce", "enable_torch_compile")


class SelectionError(ServebookError):
    """The backend selection could not be read or resolved."""


def gpu_from(gpu: str | dict | None = None, capability: str | None = None) -> dict | None:
    """A hardware profile (name or dict), or a bare capability "X.Y"; None = this host as it is."""
    if isinstance(gpu, dict):
        return gpu
    if gpu:
        from ..profiles import load_profile

        try:
            return load_profile(gpu)
        except ParameterError as exc:  # named as the caller's option (--gpu), not the book's 'profile'
            raise ParameterError("gpu", gpu, exc.expected) from None
    if capability:
        if not re.fullmatch(r"\d{1,2}\.\d", str(capability)):
            raise ParameterError("capability", capability, "expected X.Y, e.g. 9.0 (H100/H200), 10.0 (B200), 12.0 (RTX PRO 6000)")
        major = int(str(capability).split(".")[0])
        return {"name": f"sm_{str(capability).replace('.', '')}", "gpu_name": f"NVIDIA GPU (capability {capability})",
                "capability": str(capability), "memory_gib": 80, "count": 1, "sm_count": 132,
                "cuda_version": None}  # no profile: the engine's own CUDA pin decides (assumed_cuda)
    return None


_READINGS: dict[tuple[str, str], object] = {}


def static_reading(env: EngineEnv):
    key = (env.engine, env.package_dir)
    if key not in _READINGS:
        _READINGS[key] = read_selection(env.package_dir, env.engine, env.version)
    return _READINGS[key]


def _run(env: EngineEnv, request: dict, timeout: int) -> dict:
    if env.import_error:  # known beforehand: this environment cannot run the engine's resolution
        return {"ok": False, "error": env.import_error}
    return _ask(env.python, _RUNNER, request, timeout, "the engine's resolution")


def _unknown_arch(error: str, cfg: dict | None = None) -> bool:
    """The engine's own words for 'I do not know this model' (a KeyError counts only when it names the model)."""
    if re.search(r"Unrecognized model|does not recognize this architecture|model type .* not|Unrecognized configuration class|"
                 r"not supported for now|Model architectures .* (are|is) not supported|"
                 r"checkpoint you are trying to load has model type", error):
        return True
    names = {str((cfg or {}).get("model_type")), *[str(a) for a in (cfg or {}).get("architectures") or []]}
    return any(f"KeyError: '{n}'" in error for n in names if n and n != "None")


def _decide(sites: list[Site], fired: list[list], resolved: dict) -> tuple[Site | None, list[Site]]:
    by_key = {}
    for s in sites:
        by_key.setdefault((s.path, s.line), []).append(s)
    hits: list[Site] = []
    for path, line in fired:
        for s in by_key.get((os.path.realpath(path), int(line)), []) + by_key.get((path, int(line)), []):
            if s not in hits:
                hits.append(s)
    backend = resolved.get("attention_backend")
    attn = [s for s in hits if s.target in _ATTN_TARGETS or s.target.startswith("return of")]
    literal = [s for s in attn if backend and s.value.strip("\"'") == str(backend)]
    chosen = (literal or attn or [None])[-1]
    return chosen, hits


def _vt(v):
    return tuple(int(x) for x in re.findall(r"\d+", str(v))[:2])


def assumed_cuda(env: EngineEnv, hw: dict | None, cuda_version: str | None = None) -> dict | None:
    """The hardware dict with the CUDA version the what-if fakes, and where it comes from.

    A profile's ``cuda_version`` is the first toolkit that targets its SM (11.8 for H200), not the CUDA
    an engine runs on; the engine's checks compare against 12.3 / 12.8. So: the caller's ``cuda_version``,
    else the engine's own pin (cuda-python / cu1x packages in its Requires-Dist), never below the profile's
    minimum; the profile's minimum only when the engine pins nothing."""
    if hw is None:
        return None
    hw = dict(hw)
    floor = hw.get("cuda_version")
    if cuda_version:
        chosen, source = str(cuda_version), "given by the caller"
    elif env.cuda:
        chosen, source = env.cuda, env.cuda_source
    else:
        # An assumption, said so: PyPI's default torch wheels of the engines' torch pins (2.8, 2.9) are CUDA 12.8 builds.
        chosen, source = "12.8", (f"ASSUMED: {env.cuda_source or 'the engine pins no CUDA'}; 12.8 is the CUDA of PyPI's "
                                  "default torch 2.8/2.9 wheels; pass cuda_version / --cuda to change")
    if floor and _vt(floor) > _vt(chosen):
        chosen, source = floor, f"the profile's minimum CUDA for this GPU ({source} is older)"
    hw["cuda_version"], hw["cuda_source"] = chosen, source
    return hw


def _setup(engine, gpu, capability, engine_python, kernel_libs, cuda_version=None, tp_size=1):
    if cuda_version and not re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d{1,3})?", str(cuda_version)):
        raise ParameterError("cuda", cuda_version, "a CUDA version X.Y, e.g. 12.8")
    env = resolve_engine(engine, engine_python)
    hw = assumed_cuda(env, gpu_from(gpu, capability), cuda_version)
    if hw is not None and int(hw.get("count") or 1) < int(tp_size or 1):  # a TP-N launch needs N GPUs to see
        hw["count"] = int(tp_size)
    # A cached environment has no GPU libraries: assume what a GPU host installs (the engine's pins).
    # A real interpreter (--engine-python) is taken as it is, unless the caller says otherwise.
    libs = dict(DEFAULT_KERNEL_LIBS.get(env.engine, {})) if env.source == "cached" else {}
    libs.update(kernel_libs or {})
    reading = static_reading(env)
    request = {"engine": env.engine, "gpu": hw, "present_modules": [m for m in GPU_ONLY if m not in _SELECTION_LIBS],
               "visible_modules": [m for m, v in libs.items() if v], "absent_modules": [m for m, v in libs.items() if not v],
               "sites": [[s.path, s.line] for s in reading.sites],
               # after resolving, the engine answers its own hardware helpers under the same fake (root causes)
               "helpers": helper_requests(reading, set(_ATTN_TARGETS))}
    return env, hw, libs, reading, request


def _case(model, server_args, tp_size):
    cfg = model_config(model)
    return cfg, {"model_dir": str(materialize(model)), "server_args": server_args or {}, "tp_size": tp_size}


def _answer(env, hw, libs, reading, model, cfg, r, server_args, tp_size, seconds, import_result=None) -> dict:
    import_result = import_result or r
    out = {
        "engine": env.engine, "version": env.version, "python": env.python, "env_source": env.source,
        "model": str(model), "architecture": architecture_of(cfg), "mla": uses_mla(cfg),
        "gpu": (hw or {}).get("profile") or (hw or {}).get("name") or ("this host" if hw is None else "?"),
        "capability": (hw or {}).get("capability"), "gpu_name": (hw or {}).get("gpu_name"),
        "assumptions": {"kernel_libs": libs, "cuda_version": (hw or {}).get("cuda_version"),
                        "cuda_source": (hw or {}).get("cuda_source"),
                        "stubbed_modules": r.get("stubbed_modules", import_result.get("stubbed_modules", [])),
                        "kernel_libs_seen": r.get("kernel_libs_seen", {}), "patched": import_result.get("patched", []),
                        "tp_size": tp_size, "server_args": server_args or {}},
        "seconds": seconds,
    }
    if r.get("ok") and env.engine == "sglang" and r.get("resolved", {}).get("attention_backend") is None:
        # The engine's own resolution ran and left the choice open: this version chooses at model load
        # (ModelRunner), which needs the GPU and the weights. Say so; give the static reading of that code.
        resolved = r.get("resolved", {})
        later = [s for s in reading.sites if "model_runner" in s.file and s.target in _ATTN_TARGETS]
        out.update(method="static", resolved=resolved, attention_backend=None,
                   moe_runner_backend=resolved.get("moe_runner_backend"), decided_by=None, conditions=[],
                   reason=("dynamic resolution ran: ServerArgs left attention_backend unset; this version picks the default "
                           "at model load (" + ", ".join(sorted({f"{s.file} {s.function}" for s in later}) or ["outside ServerArgs"])
                           + "), which needs a GPU and the weights, so only the static reading answers"),
                   candidates=[{"where": s.where, "function": s.function, "value": s.value,
                                "conditions": [str(c) for c in s.conditions]} for s in later],
                   logs=_engine_logs(r.get("logs", []), env.engine))
        return out
    if r.get("ok") and env.engine == "vllm" and "priorities" in r.get("resolved", {}):
        out.update(_vllm_answer(reading, r, env.package_dir))
        out["assumptions"]["stubbed_extensions"] = r.get("resolved", {}).get("stubbed_extensions", {})
        out["assumptions"]["stub_ops_called"] = r.get("resolved", {}).get("stub_ops_called", [])
        return out
    if r.get("ok"):
        resolved = r.get("resolved", {})
        site, hits = _decide(reading.sites, r.get("fired", []), resolved)
        out["decode_path"] = resolved.get("decode_path") or {k: resolved.get(k) for k in _SG_DECODE if k in resolved}
        out.update(method="dynamic", resolved=resolved, attention_backend=resolved.get("attention_backend"),
                   prefill_attention_backend=resolved.get("prefill_attention_backend"),
                   decode_attention_backend=resolved.get("decode_attention_backend"),
                   moe_runner_backend=resolved.get("moe_runner_backend"),
                   decided_by=({"where": site.where, "function": site.function, "value": site.value, "target": site.target}
                               if site else None),
                   conditions=[{"text": str(c), "kinds": c.kinds, "line": c.line} for c in (site.conditions if site else [])],
                   fired=[s.where + f" {s.target} = {s.value}" for s in hits],
                   logs=_engine_logs(r.get("logs", []), env.engine))
        out.update(explain(site, reading.sites, r.get("helpers"), env.package_dir))
        return out
    err = r.get("error", "?")
    if _unknown_arch(err, cfg):
        raise ModelError(f"{env.engine} {env.version} does not know architecture {architecture_of(cfg)!r} "
                         f"(model_type {cfg.get('model_type')!r}): {err[:200]}")
    # fall back: the static reading, marked as such
    cands = [s for s in reading.sites if s.target in _ATTN_TARGETS or s.target.startswith("return of")]
    out.update(method="static", attention_backend=None, decided_by=None, conditions=[],
               reason=f"dynamic resolution failed: {err}", traceback=r.get("traceback", "")[-1500:],
               candidates=[{"where": s.where, "function": s.function, "value": s.value,
                            "conditions": [str(c) for c in s.conditions]} for s in cands],
               logs=_engine_logs(r.get("logs", []), env.engine))
    return out


def _rel_site(path_line, package_dir: str) -> str | None:
    if not path_line:
        return None
    root = os.path.dirname(os.path.realpath(package_dir))
    return f"{os.path.relpath(path_line[0], root)}:{path_line[1]}"


def _listed_backends(site) -> list[str]:
    """The ``AttentionBackendEnum.X`` names of a priority list, in order, read from the whole ``return [...]``."""
    import ast

    tree = ast.parse(Path(site.path).read_text())
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.Return) and n.lineno == site.line), None)
    return re.findall(r"AttentionBackendEnum\.(\w+)", ast.unparse(node.value)) if node is not None else []


def _vllm_answer(reading, r: dict, package_dir: str) -> dict:
    """vLLM: the priority list its platform returned for this GPU (the traced ``return [...]``), the candidates in
    order with each one's own validation, and the skipped capability branches with the backends they list."""
    import types

    resolved = r.get("resolved", {})
    fired = {(os.path.realpath(p), int(l)) for p, l in r.get("fired", [])}
    lists = [s for s in reading.sites if s.kind == "priority-list" and s.target == "return of _get_backend_priorities"]
    site = next((s for s in lists if (os.path.realpath(s.path), s.line) in fired), None)
    major, minor = (resolved.get("capability") or [None, None])[:2]
    helpers, alts = [], []
    for c in (site.conditions if site else []):
        if "hardware" not in c.kinds:
            continue
        try:  # the engine's own condition, on the capability its platform reported
            answer = bool(eval(c.text, {"__builtins__": {}}, {"device_capability": types.SimpleNamespace(major=major, minor=minor)}))
            error = None
        except Exception as exc:  # noqa: BLE001
            answer, error = None, f"{type(exc).__name__}: {exc}"
        helpers.append({"condition": str(c), "condition_line": c.line, "negated": c.negated, "helper": c.text, "answer": answer,
                        "error": error, "defined_at": None, "definition": None})
        if c.negated:
            other = [s for s in lists if any(o.line == c.line and not o.negated for o in s.conditions)]
            # missed: what that list ranks above the chosen backend and the list this GPU got does not have at all
            # (a backend this GPU's list has, lower down, is an ordering choice, not a fallback)
            names = []
            for s in other:
                listed = _listed_backends(s)
                head = listed[:listed.index(resolved.get("attention_backend"))] if resolved.get("attention_backend") in listed else listed
                names += [n for n in head if n not in (resolved.get("priorities") or []) and n not in names]
            if names:
                alts.append({"condition": c.text, "condition_line": c.line, "would_write": names, "at": [s.where for s in other]})
    chosen = next((c for c in resolved.get("candidates", []) if c["backend"] == resolved.get("attention_backend")), None)
    return {"method": "dynamic", "resolved": resolved, "attention_backend": resolved.get("attention_backend"),
            "moe_runner_backend": resolved.get("moe_runner_backend"), "decode_path": resolved.get("decode_path", {}),
            "decided_by": ({"where": site.where, "function": site.function, "value": site.value, "target": site.target,
                            "validated_at": _rel_site(chosen and chosen.get("capability_check_at"), package_dir)} if site else None),
            "conditions": [{"text": str(c), "kinds": c.kinds, "line": c.line} for c in (site.conditions if site else [])],
            "candidates_checked": [{k: c.get(k) for k in ("priority", "backend", "valid", "reasons", "supports_capability")}
                                   for c in resolved.get("candidates", [])],
            "fired": [f"{p}:{l}" for p, l in sorted(fired)], "helper_answers": helpers, "alternatives": alts,
            "logs": _engine_logs(r.get("logs", []), "vllm")}


def whatif(engine: str = "transformers", model: str | os.PathLike = "embedded", gpu: str | dict | None = None,
           capability: str | None = None, engine_python: str | None = None, kernel_libs: dict | None = None,
           server_args: dict | None = None, tp_size: int = 1, timeout: int = 300, cuda_version: str | None = None) -> dict:
    """Resolve the attention backend with the engine's own code; see the module docstring."""
    env, hw, libs, reading, request = _setup(engine, gpu, capability, engine_python, kernel_libs, cuda_version, tp_size)
    cfg, case = _case(model, server_args, tp_size)
    key = _memo_key(env, request | case)
    known = _recall(key)
    if known is not None:
        r, seconds = known
        return _answer(env, hw, libs, reading, model, cfg, r, server_args, tp_size, seconds) | {"reused": True}
    t0 = time.monotonic()
    r = _run(env, request | case, timeout)
    seconds = round(time.monotonic() - t0, 2)
    _keep(key, r, seconds)
    return _answer(env, hw, libs, reading, model, cfg, r, server_args, tp_size, seconds)


def whatif_many(engine: str, models: list, gpu: str | dict | None = None, capability: str | None = None,
                engine_python: str | None = None, kernel_libs: dict | None = None, server_args: dict | None = None,
                tp_size: int = 1, timeout: int = 600, on_error=None, cuda_version: str | None = None) -> list[dict]:
    """``whatif`` for several models on one GPU: the engine is imported once (with that GPU faked) and each
    model resolves in a forked child of that process. Per-model errors (bad card, unknown architecture) are
    passed to ``on_error(model, exc)`` and left out; with no ``on_error`` they raise."""
    env, hw, libs, reading, request = _setup(engine, gpu, capability, engine_python, kernel_libs, cuda_version, tp_size)
    cases, cfgs, ok_models = [], [], []
    for m in models:
        try:
            cfg, case = _case(m, server_args, tp_size)
        except ServebookError as exc:
            if on_error is None:
                raise
            on_error(m, exc)
            continue
        cases.append(case), cfgs.append(cfg), ok_models.append(m)
    if not cases:
        return []
    keys = [_memo_key(env, request | c) for c in cases]
    known = {}
    for i, k in enumerate(keys):
        if (hit := _recall(k)) is not None:
            known[i] = hit
    ask = [i for i in range(len(cases)) if i not in known]
    answers = {}  # index -> (result, the process's import result, seconds)
    if ask:
        t0 = time.monotonic()
        r = _run(env, request | {"cases": [cases[i] for i in ask]}, timeout)
        seconds = round((time.monotonic() - t0) / len(ask), 2)
        results = r.get("cases") if r.get("ok") else [r] * len(ask)
        for i, rc in zip(ask, results):
            answers[i] = (rc, r, seconds)
            # kept as whatif's own single-case answer looks: the case's result with the import's patches
            _keep(keys[i], rc | {"patched": r.get("patched", []), "import_logs": r.get("import_logs", [])}, seconds)
    for i, (rk, sk) in known.items():
        answers[i] = (rk, rk, sk)
    out = []
    for i, (m, cfg) in enumerate(zip(ok_models, cfgs)):
        rc, imported, seconds = answers[i]
        try:
            out.append(_answer(env, hw, libs, reading, m, cfg, rc, server_args, tp_size, seconds, import_result=imported)
                       | ({"reused": True} if i in known else {}))
        except ServebookError as exc:
            if on_error is None:
                raise
            on_error(m, exc)
    return out


def _engine_logs(logs: list[dict], engine: str) -> list[str]:
    keep = []
    for l in logs:
        if not l.get("logger", "").startswith(engine) and engine not in l.get("file", ""):
            continue
        msg = l.get("message", "")
        if re.search(r"backend|attention|attn|sm\d+|MLA|moe|quantiz", msg, re.I):
            keep.append(f"{l.get('level', '')}: {msg}")
    return keep


def decision_matrix(engine: str, gpus: list[str], models: list[str], engine_python: str | None = None,
                    kernel_libs: dict | None = None, on_error=None, cuda_version: str | None = None,
                    workers: int = 1) -> list[dict]:
    """One row per (gpu, model): the engine's resolved backend (errors recorded as rows, never raised).
    One engine import per GPU (see ``whatif_many``)."""
    rows = []

    def one_gpu(g):
        errors = {}
        try:
            answers = {r["model"]: r for r in whatif_many(engine, models, gpu=g, engine_python=engine_python,
                                                          kernel_libs=kernel_libs, cuda_version=cuda_version,
                                                          on_error=lambda m, e: errors.__setitem__(m, e))}
        except ServebookError as exc:
            answers, errors = {}, {m: exc for m in models}
        return answers, errors

    if workers > 1 and len(gpus) > 1:  # one engine process per GPU profile, side by side
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            per_gpu = list(pool.map(one_gpu, gpus))
    else:
        per_gpu = [one_gpu(g) for g in gpus]
    for g, (answers, errors) in zip(gpus, per_gpu):
        for m in models:
            r = answers.get(m)
            if r is None:
                exc = errors.get(m) or SelectionError("no answer")
                if on_error:
                    on_error(g, m, exc)
                rows.append({"engine": engine, "gpu": g, "model": m, "attention_backend": None, "method": "error", "error": str(exc)})
                continue
            rows.append({"engine": engine, "version": r["version"], "gpu": g, "capability": r["capability"],
                         "cuda": r["assumptions"]["cuda_version"], "model": m,
                         "architecture": r["architecture"], "mla": r["mla"], "attention_backend": r["attention_backend"],
                         "prefill_attention_backend": r.get("prefill_attention_backend"),
                         "decode_attention_backend": r.get("decode_attention_backend"),
                         "moe_runner_backend": r.get("moe_runner_backend"), "method": r["method"],
                         "decided_by": (r.get("decided_by") or {}).get("where"),
                         "decided_in": (r.get("decided_by") or {}).get("function"),
                         "because": [c["text"] for c in r.get("conditions", [])],
                         "logs": r.get("logs", []), "error": r.get("reason")})
    return rows


def matrix_diff(a: list[dict], b: list[dict], include_unresolved: bool = False) -> list[dict]:
    """Cells (gpu, model) whose resolved backends differ between two matrices. Only cells that both
    versions resolved dynamically are compared; with ``include_unresolved`` the others come back too,
    marked ``kind="not comparable"`` (a static or failed cell says nothing about a change)."""
    idx = {(r["gpu"], r["model"]): r for r in b}
    fields = ["attention_backend", "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend"]
    out = []
    for r in a:
        o = idx.get((r["gpu"], r["model"]))
        if not o:
            continue
        base = {"gpu": r["gpu"], "model": r["model"], "a_version": r.get("version"), "b_version": o.get("version"),
                "a_decided_by": r.get("decided_by"), "b_decided_by": o.get("decided_by"),
                "a_method": r.get("method"), "b_method": o.get("method")}
        if r.get("method") != "dynamic" or o.get("method") != "dynamic":
            if include_unresolved:
                out.append(base | {"kind": "not comparable", "changed": [], "a": {"attention_backend": r.get("attention_backend")},
                                   "b": {"attention_backend": o.get("attention_backend")}})
            continue
        changed = [f for f in fields if r.get(f) != o.get(f)]
        if changed:
            out.append(base | {"kind": "changed", "changed": changed,
                               "a": {f: r.get(f) for f in changed}, "b": {f: o.get(f) for f in changed}})
    return out
