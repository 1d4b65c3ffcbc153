"""Chapter 02, beyond attention: what else each engine's own code fixes on a decode step, and the line that decides.

    rows = decode_path("sglang==0.5.9", "kimi-k2.5", gpu="rtx-pro-6000", tp_size=8)
    rows[0]["setting"], rows[0]["choice"], rows[0]["where"], rows[0]["condition"], rows[0]["source"]
    decode_path_table(["sglang==0.5.9", "vllm==0.26.0"])   # both engines, one list of rows

One row per setting: the MoE method/kernel for the card's quantized routed experts, the all-reduce path at
``tp_size`` (custom all-reduce, symmetric memory, FlashInfer, PyNCCL) with the condition that decides it, the PCIe
all-reduce options the version's code carries behind environment variables, the collectives a decoder layer issues,
the CUDA-graph capture sizes, the sampling path at batch 1, and how the MLA decode step builds its query and writes the
cache per attention backend. ``source`` says how the row was established:

- ``run``: the engine's own function ran in its interpreter (``_decode_runner.py``) with the GPU faked from the
  profile and the topology faked below the engine (NVML: no NVLink between any two GPUs; torch.distributed: rank 0 of
  ``tp_size`` on one node); ``where`` is the line at which the deciding function returned (traced).
- ``read``: a static reading of the version's source (AST), with the reason it did not run (``why``).
- ``not read``: neither; ``why`` says what is missing. Nothing is guessed.

``condition`` is the if/elif chain around ``where``, as written in the source. The static readers (``decode_read.py``)
take source text, so they are tested on excerpts of the engines' wheels (``tests/data/decode_path/``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from pathlib import Path

from ..cards import materialize, model_config
from ..engines.envs import resolve_engine
from ..errors import ParameterError, ServebookError
from .decode_read import (_seg, conditions_at, read_collectives, read_custom_ar_rule, read_env_flags, read_greedy_sampling,
                          read_mla_cache_writes, read_mla_core_split, read_mla_query_cats)
from .envs import _SELECTION_LIBS, DEFAULT_KERNEL_LIBS, GPU_ONLY, _ask

__all__ = ["decode_path", "decode_path_table", "SETTINGS", "conditions_at", "read_custom_ar_rule", "read_env_flags",
           "read_collectives", "read_greedy_sampling"]

_RUNNER = Path(__file__).with_name("_decode_runner.py")
SETTINGS = ("MoE runner", "all-reduce path", "PCIe all-reduce options", "collectives per decoder layer",
            "CUDA-graph capture sizes", "sampling at batch 1", "MLA query and cache write")

# -- the engine's files ---------------------------------------------------------------------------
_FILES = {
    "sglang": {"custom_ar": ["sglang/srt/distributed/device_communicators/custom_all_reduce.py"],
               "dispatch": "sglang/srt/distributed/parallel_state.py",
               "model": ["sglang/srt/models/deepseek_v2.py"],
               "communicator": [("sglang/srt/layers/communicator.py", r"AllReduce|Communicat")],
               "sampler": "sglang/srt/layers/sampler.py", "env_roots": ["sglang/srt"],
               "graph_sizes": ("sglang/srt/server_args.py", r"def _generate_cuda_graph_batch_sizes|def parse_cuda_graph_config"),
               "graph_roots": ["sglang/srt/server_args.py", "sglang/srt/arg_groups"],
               "mla_roots": ["sglang/srt/models"], "registry": "sglang/srt/layers/attention/attention_registry.py"},
    "vllm": {"custom_ar": ["vllm/distributed/device_communicators/custom_all_reduce.py"],
             "dispatch": "vllm/distributed/device_communicators/cuda_communicator.py",
             "model": ["vllm/model_executor/models/deepseek_v2.py"],
             "communicator": [("vllm/model_executor/layers/fused_moe/runner/moe_runner.py", r"Runner"),
                              ("vllm/model_executor/layers/fused_moe/layer.py", r"FusedMoE|RoutedExperts")],
             "sampler": "vllm/v1/sample/sampler.py", "env_roots": ["vllm"],
             "graph_sizes": ("vllm/config/vllm.py", r"def _set_cudagraph_sizes|def _set_compile_ranges|cudagraph_capture_sizes ="),
             "graph_roots": ["vllm/config/vllm.py", "vllm/config/compilation.py"], "mla_roots": ["vllm/v1/attention"]},
}


def _site_packages(package_dir: str) -> Path:
    return Path(os.path.realpath(package_dir)).parent


def _read(root: Path, rel: str) -> str | None:
    p = root / rel
    return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None


def _rel(path: str, root: Path) -> str:
    try:
        return str(Path(os.path.realpath(path)).relative_to(root))
    except ValueError:
        return path


def _py_files(root: Path, roots: list[str]) -> dict[str, str]:
    out = {}
    for r in roots:
        p = root / r
        for f in ([p] if p.is_file() else sorted(p.rglob("*.py")) if p.is_dir() else []):
            out[str(f.relative_to(root))] = f.read_text(encoding="utf-8", errors="replace")
    return out


def _quant_config(cfg: dict) -> dict | None:
    return (cfg.get("text_config") or {}).get("quantization_config") or cfg.get("quantization_config")


def _request(env, gpu, tp_size, model) -> dict:
    from .whatif import assumed_cuda, gpu_from

    hw = assumed_cuda(env, gpu_from(gpu))
    if hw is None:
        raise ParameterError("gpu", gpu, "a hardware profile in data/hardware (e.g. rtx-pro-6000): the decode path is read for a "
                             "faked GPU and topology")
    hw["count"] = max(int(hw.get("count") or 1), int(tp_size))
    libs = dict(DEFAULT_KERNEL_LIBS.get(env.engine, {}))
    cfg = model_config(model)
    n_layers = (cfg.get("text_config") or cfg).get("first_k_dense_replace", 0)
    return {"engine": env.engine, "gpu": hw, "tp_size": int(tp_size), "model_dir": str(materialize(model)),
            "present_modules": [m for m in GPU_ONLY if m not in _SELECTION_LIBS],
            "visible_modules": [m for m, v in libs.items() if v], "absent_modules": [m for m, v in libs.items() if not v],
            "quantization_config": _quant_config(cfg), "experts_prefix": f"model.layers.{n_layers}.mlp.experts",
            "server_args": {}}


def _run(env, req: dict, timeout: int) -> dict:
    if env.import_error:
        return {"ok": False, "error": env.import_error}
    return _ask(env.python, _RUNNER, req, timeout, "the engine's code")


# -- rows -----------------------------------------------------------------------------------------
def _row(env, setting, choice, where=None, condition=None, source="read", why=None, **extra) -> dict:
    return {"engine": env.engine, "version": env.version, "setting": setting, "choice": choice, "where": where,
            "condition": condition, "source": source, "why": why} | extra


def _ran_at(probe: dict, root: Path) -> tuple[str | None, str | None]:
    """file:line where the deciding function returned, and the if-chain there (read from that file)."""
    w = probe.get("returned_at") or []
    if len(w) < 2:
        return None, None
    rel = _rel(w[0], root)
    src = _read(root, rel)
    conds = conditions_at(src, int(w[1])) if src else []
    return f"{rel}:{w[1]}", " and ".join(conds) or None


def _why_not_run(r: dict, name: str) -> str | None:
    if not r.get("ok"):
        return f"the engine's code could not run here: {r.get('error')}"
    p = (r.get("probes") or {}).get(name) or {}
    if not p.get("error"):
        return None
    unknown = re.search(r"architectures? \[?'?(\w+)'?\]? (are|is) not supported", p.get("detail", "") + p.get("traceback", ""))
    return f"{name} probe failed: {p['error']}" + (f" (this version does not know {unknown.group(1)})" if unknown else "")


def _moe_rows(env, root: Path, r: dict, qc: dict | None) -> list[dict]:
    setting = SETTINGS[0]
    if not qc:
        return [_row(env, setting, "no quantized experts: the model card has no quantization_config", source="not read",
                     why="this row reads the method for quantized routed experts")]
    p = (r.get("probes") or {}).get("moe") or {}
    kind = _quant_kind(qc)
    if p.get("class"):
        where, cond = _ran_at(p, root)
        cls = p["class"].rsplit(".", 1)[-1]
        kernel = _moe_kernel(root, p, env.engine)
        note = f"; then: {p['error_after_choice']}" if p.get("error_after_choice") else ""
        return [_row(env, setting, f"{cls} ({kind}){kernel}", where, cond, "run" if where else "read",
                     why=("the method's constructor needs the layer's real FusedMoEConfig (GPU model load); the choice "
                          "is the traced return" + note) if p.get("error_after_choice") else None,
                     logs=[l["message"] for l in p.get("logs", [])])]
    # static: the returns of the WNA16 branch in the compressed-tensors MoE selection (all of them: which one a host
    # takes depends on conditions that need the layer or the platform, so none is picked here)
    why = _why_not_run(r, "moe")
    for rel in _glob(root, env.engine, "compressed_tensors"):
        src = _read(root, rel)
        cands = []
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and re.search(
                    r"WNA16.*MoE", _seg(node.value.func, src)):
                conds = conditions_at(src, node.lineno)
                if any(re.search(r"wNa16", c, re.I) for c in conds) and not any(
                        re.match(r"(current_platform\.)?(is_rocm|is_xpu|is_cpu)\(\)$|_is_hip$|_is_npu$", c) for c in conds):
                    cands.append((node.lineno, _seg(node.value.func, src), conds))
        if cands:
            choice = (f"{cands[0][1]} ({kind})" if len(cands) == 1 else
                      f"one of {', '.join(c[1] for c in cands)} ({kind}): the conditions decide, and need the model load")
            return [_row(env, setting, choice, f"{rel}:{cands[0][0]}",
                         " | ".join(f"{rel}:{ln} {name} if {' and '.join(conds)}" for ln, name, conds in cands), "read", why)]
    return [_row(env, setting, None, source="not read", why=(why or "") + "; no WNA16 MoE return found in the source")]


def _glob(root: Path, engine: str, part: str) -> list[str]:
    base = root / engine
    files = [p for p in base.rglob("*.py") if part in str(p.parent) or part in p.name]
    return sorted((str(p.relative_to(root)) for p in files), key=lambda f: ("moe" not in f, f))


def _quant_kind(qc: dict) -> str:
    w = next(iter((qc.get("config_groups") or {}).values()), {}).get("weights") or {}
    return f"{qc.get('quant_method')} {qc.get('format', '')} int{w.get('num_bits', '?')} g{w.get('group_size', '?')}".replace("  ", " ")


def _moe_kernel(root: Path, p: dict, engine: str) -> str:
    """The experts kernel the chosen method names in its own source (read): Marlin, Triton, an oracle ..."""
    rel = _rel(p.get("scheme_file") or "", root) if p.get("scheme_file") else None
    if engine == "vllm":
        rel = next(iter(sorted(str(p.relative_to(root)) for p in (root / "vllm/model_executor/layers/fused_moe").rglob("*wna16*.py")
                               if "_AVAILABLE_BACKENDS" in p.read_text(encoding="utf-8", errors="replace"))), None)
        src = _read(root, rel) if rel else None
        if src:
            m = re.search(r"_AVAILABLE_BACKENDS = \[(.*?)\]", src, re.S)
            if m:
                order = ", ".join(x.strip().rsplit(".", 1)[-1] for x in m.group(1).split(",") if x.strip())
                line = src[:m.start()].count("\n") + 1
                return (f"; experts kernel: the first of [{order}] whose is_supported_config passes "
                        f"({rel}:{line}, read: each kernel's check needs "
                        "the layer's FusedMoEConfig, built at model load)")
        return ""
    src = _read(root, rel) if rel else None
    if not src:
        return ""
    cls = p["class"].rsplit(".", 1)[-1]
    node = next((n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:
        return ""
    body = _seg(node, src)
    kernels = sorted(set(re.findall(r"fused_marlin_moe|MoeRunnerBackend\.\w+|fused_experts|triton_kernels", body)))
    return f"; experts kernel named in {rel}:{node.lineno}: {', '.join(kernels)}" if kernels else ""


def _allreduce_rows(env, root: Path, r: dict, tp_size: int) -> list[dict]:
    """The all-reduce path at ``tp_size``: custom all-reduce's PCIe rule (run, or read), then what each engine falls
    through to (its resolved flags, symmetric memory, FlashInfer, PyNCCL)."""
    files = _FILES[env.engine]
    rule = None
    for rel in files["custom_ar"]:
        src = _read(root, rel)
        rule = rule or (read_custom_ar_rule(src, rel) if src else None)
    probes = r.get("probes") or {}
    ca = probes.get("custom_all_reduce") or {}
    parts, source, why = [], "read", _why_not_run(r, "custom_all_reduce")
    where, cond = (rule or {}).get("where"), (rule or {}).get("condition")
    if "disabled" in ca:
        where, cond = _custom_ar_ran(ca, root, parts, tp_size, where, cond)
        source = "run"
    elif rule:
        parts.append(f"custom all-reduce OFF at TP={tp_size} on PCIe only (the rule's condition holds: world_size {tp_size} > 2, "
                     "no NVLink)")
    else:
        parts.append("no PCIe rule found in custom_all_reduce.py")
    falls = _sglang_allreduce if env.engine == "sglang" else _vllm_allreduce
    extra = falls(root, probes, ca, rule, parts)
    disp = _read(root, files["dispatch"])
    if disp:
        sites = [s for s in read_collectives(disp, files["dispatch"], classes=r".") if "pynccl" in s["call"]]
        if sites:
            extra["pynccl_at"] = sites[0]["where"]
    return [_row(env, SETTINGS[1], "; ".join(parts), where, cond, source, why if source != "run" else None,
                 rule=rule, logs=[l["message"] for l in ca.get("logs", [])], **extra)]


def _custom_ar_ran(ca: dict, root: Path, parts: list[str], tp_size: int, where, cond) -> tuple[str | None, str | None]:
    """Custom all-reduce as the engine's own constructor decided it (``parts`` hears the words); where and under what."""
    w, c = _ran_at(ca, root)
    off = [l for l in ca.get("logs", []) if "disabled" in l["message"]]
    if off:  # the engine's own warning names the rule; its if-chain is the condition
        rel = _rel(off[-1]["file"], root)
        src = _read(root, rel)
        w, c = f"{rel}:{off[-1]['line']}", " and ".join(conditions_at(src, int(off[-1]["line"]))) if src else c
    cls = ca.get("class", "").rsplit(".", 1)[-1]
    parts.append(f"custom all-reduce ({cls}) {'OFF' if ca['disabled'] else 'ON'} at TP={tp_size}, no NVLink")
    if ca.get("dispatched_at"):
        d, _ = _ran_at({"returned_at": ca["dispatched_at"]}, root)
        parts.append(f"dispatch_custom_allreduce returned {cls} at {d}")
    return w or where, c or cond


def _sglang_allreduce(root: Path, probes: dict, ca: dict, rule: dict | None, parts: list[str]) -> dict:
    """SGLang's resolved server args for the all-reduce, and where it switches the FlashInfer fusion on by itself."""
    sa = probes.get("server_args") or {}
    flags = {k: sa.get(k) for k in ("disable_custom_all_reduce", "enable_torch_symm_mem", "enable_mscclpp",
                                    "enable_flashinfer_allreduce_fusion") if k in sa}
    extra: dict = {"flags": flags}
    if flags:
        parts.append("server args resolved: " + ", ".join(f"{k}={v}" for k, v in flags.items()))
    if flags and not any(flags.get(k) for k in ("enable_torch_symm_mem", "enable_mscclpp")) and ca.get("disabled", rule is not None):
        parts.append("so the in-place all-reduce goes to PyNCCL")
    fusion = _fusion_rule(root, _FILES["sglang"]["graph_roots"])
    if fusion and not flags.get("enable_flashinfer_allreduce_fusion"):
        parts.append(f"FlashInfer all-reduce+norm fusion is switched on only at {fusion['where']}, under "
                     f"`{fusion['condition'][:300]}`")
        extra["fusion_rule"] = fusion
    elif not fusion and "enable_flashinfer_allreduce_fusion" in flags:
        parts.append("no line of this version switches the FlashInfer all-reduce+norm fusion on by itself")
    return extra


def _vllm_allreduce(root: Path, probes: dict, ca: dict, rule: dict | None, parts: list[str]) -> dict:
    """vLLM's resolved config for the all-reduce, and what its symmetric-memory and FlashInfer communicators decided."""
    cfg = probes.get("config") or {}
    sm = probes.get("symm_mem") or {}
    flags = {k: cfg.get(k) for k in ("disable_custom_all_reduce", "VLLM_ALLREDUCE_USE_SYMM_MEM", "VLLM_ALLREDUCE_USE_FLASHINFER",
                                     "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC") if k in cfg}
    extra: dict = {}
    if flags:
        parts.append("resolved: " + ", ".join(f"{k}={v}" for k, v in flags.items()))
    if "disabled" in sm:
        w, c = _ran_at(sm, root)
        parts.append(f"symmetric memory {'OFF' if sm['disabled'] else 'ON'} (SymmMemCommunicator returned at {w}"
                     + (f" under `{c}`" if c else "") + ")")
        extra["symm_mem_logs"] = [l["message"] for l in sm.get("logs", [])]
    fi = probes.get("flashinfer_all_reduce") or {}
    if "disabled" in fi:
        w, c = _ran_at(fi, root)
        parts.append(f"FlashInfer all-reduce {'OFF' if fi['disabled'] else 'ON'} (FlashInferAllReduce returned at {w}"
                     + (f" under `{c}`" if c else "") + ")")
        extra["flashinfer_logs"] = [l["message"] for l in fi.get("logs", [])]
    elif fi.get("error"):
        parts.append(f"FlashInfer all-reduce not run here ({fi['error'][:120]})")
    extra["flags"] = flags
    if ca.get("disabled") and sm.get("disabled") and (not flags.get("VLLM_ALLREDUCE_USE_FLASHINFER") or fi.get("disabled")) \
            and not flags.get("VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"):
        parts.append("so all_reduce falls through to PyNCCL")
    return extra


def _fusion_rule(root: Path, roots: list[str]) -> dict | None:
    """Where SGLang switches its FlashInfer all-reduce fusion on by itself (``enable_flashinfer_allreduce_fusion = True``)
    and the if-chain there (read)."""
    for rel, src in _py_files(root, roots).items():
        for i, text in enumerate(src.splitlines(), 1):
            if re.search(r"\benable_flashinfer_allreduce_fusion\b\s*=\s*True", text):
                return {"where": f"{rel}:{i}", "condition": " and ".join(conditions_at(src, i))}
    return None


def _pcie_rows(env, root: Path) -> list[dict]:
    flags = read_env_flags(_py_files(root, _FILES[env.engine]["env_roots"]))
    if not flags:
        return [_row(env, SETTINGS[2], "none: no PCIe all-reduce switch in this version's code", source="read",
                     why=f"searched {', '.join(_FILES[env.engine]['env_roots'])} for SGLANG_/VLLM_ names with PCIE and "
                         "ALLREDUCE/AR/IPC")]
    return [_row(env, SETTINGS[2], ", ".join(f["name"] for f in flags), flags[0]["where"],
                 "; ".join(f"{f['where']}: {f['text']}" for f in flags), "read",
                 why="environment variables are read where they are defined; their default is in the cited text",
                 flags=flags)]


def _collective_rows(env, root: Path) -> list[dict]:
    files = _FILES[env.engine]
    sites = []
    for rel in files["model"]:
        src = _read(root, rel)
        sites += read_collectives(src, rel, r"DecoderLayer|MLP|MoE|Attention") if src else []
    model_read = bool(sites)
    for rel, classes in files["communicator"]:  # where the layer's reductions happen outside the model file (all-reduces only)
        src = _read(root, rel)
        sites += [s for s in read_collectives(src, rel, classes) if "all_reduce" in s["call"]] if src else []
    if not model_read:
        return [_row(env, SETTINGS[3], None, source="not read", why="the model file is not in this version: "
                     + ", ".join(files["model"]))]
    roles = {"attention output": [s for s in sites if re.search(r"Attention|Communicat|AllReduce", s["function"])],
             "MLP/MoE output": [s for s in sites if re.search(r"MLP|MoE|Runner|Experts", s["function"])]}
    found = [k for k, v in roles.items() if v]
    choice = (f"{len(found)} reductions per decoder layer at TP ({', '.join(found)}), each an all-reduce unless a fusion or "
              f"reduce-scatter condition below holds; {len(sites)} collective sites read")
    return [_row(env, SETTINGS[3], choice, sites[0]["where"],
                 "; ".join(f"{s['where']} {s['function']}: {s['call']}" + (f" if {' and '.join(s['conditions'])}" if s["conditions"] else "")
                           for s in sites)[:3000],
                 "read", why="counting collectives needs the model built on the GPU with a process group; read from the model code",
                 sites=sites)]


def _graph_rows(env, root: Path, r: dict) -> list[dict]:
    probes = r.get("probes") or {}
    rel, pat = _FILES[env.engine]["graph_sizes"]
    where = None
    for f, src in _py_files(root, _FILES[env.engine]["graph_roots"]).items():
        m = re.search(pat, src)
        if m:
            where = f"{f}:{src[:m.start()].count(chr(10)) + 1}"
            break
    if env.engine == "sglang":
        sa = probes.get("server_args") or {}
        dec = sa.get("cuda_graph_decode") or {}
        if "cuda_graph_bs" in sa or "cuda_graph_max_bs" in sa or dec:
            sizes = sa.get("cuda_graph_bs") if "cuda_graph_bs" in sa else dec.get("bs")
            sizes = json.loads(sizes) if isinstance(sizes, str) and sizes.startswith("[") else sizes
            off = sa.get("disable_cuda_graph") or dec.get("enabled") is False
            one = ("captured" if isinstance(sizes, list) and 1 in sizes else "not in the list" if isinstance(sizes, list)
                   else "the list is made at model load (not resolved by the arguments)")
            choice = (f"{'disabled' if off else 'on'}; max bs {sa.get('cuda_graph_max_bs', dec.get('max_bs'))}; sizes "
                      f"{_sizes(sizes)}; batch 1 {one}" + (f"; decode backend {dec['backend']}" if dec.get("backend") else ""))
            return [_row(env, SETTINGS[4], choice, where, None, "run", None, sizes=sizes)]
    else:
        cfg = probes.get("config") or {}
        if "cudagraph_capture_sizes" in cfg:
            sizes = cfg["cudagraph_capture_sizes"]
            sizes = json.loads(sizes) if isinstance(sizes, str) and sizes.startswith("[") else sizes
            choice = (f"mode {cfg.get('cudagraph_mode')} (compilation {cfg.get('compilation_mode')}); max "
                      f"{cfg.get('max_cudagraph_capture_size')}; sizes {_sizes(sizes)}; batch 1 "
                      f"{'captured' if isinstance(sizes, list) and 1 in sizes else 'not in the list'}; the attention backend "
                      "may lower the mode at model load (its cudagraph support)")
            return [_row(env, SETTINGS[4], choice, where, None, "run", None, sizes=sizes)]
    why = _why_not_run(r, "server_args" if env.engine == "sglang" else "config")
    return [_row(env, SETTINGS[4], None, where, None, "not read",
                 why or "the engine's resolved arguments carry no CUDA-graph sizes in this version")]


def _sizes(sizes) -> str:
    if not isinstance(sizes, list):
        return str(sizes)
    return str(sizes) if len(sizes) <= 8 else f"{sizes[:5]} ... {sizes[-1]} ({len(sizes)} sizes)"


def _sampling_rows(env, root: Path, r: dict) -> list[dict]:
    rel = _FILES[env.engine]["sampler"]
    src = _read(root, rel)
    g = read_greedy_sampling(src, rel) if src else None
    probes = r.get("probes") or {}
    if env.engine == "sglang":
        backend = (probes.get("server_args") or {}).get("sampling_backend")
        other = f"non-greedy: sampling_backend={backend} (run)" if backend else "non-greedy backend not resolved"
    else:
        fi = (probes.get("config") or {}).get("VLLM_USE_FLASHINFER_SAMPLER")
        other = f"non-greedy top-k/top-p: VLLM_USE_FLASHINFER_SAMPLER={fi} (run)" if fi is not None else "non-greedy path not resolved"
    if not g:
        return [_row(env, SETTINGS[5], other, source="not read", why=f"no greedy argmax found in {rel}")]
    return [_row(env, SETTINGS[5], f"greedy: {g['call']} in {g['function']}; {other}", g["where"], " and ".join(g["conditions"]) or None,
                 "read", why="the sampler runs on GPU tensors at decode; its greedy branch is read from the source")]


def _mla_rows(env, root: Path) -> list[dict]:
    """How the MLA decode step builds its query and writes the cache, per backend (read): SGLang hands the rope parts apart
    only to the backends of one list and joins q and k with ``torch.cat`` for the rest; vLLM's cache-write call sites."""
    roots = _FILES[env.engine]["mla_roots"]
    if env.engine == "sglang":
        split = read_mla_core_split(_py_files(root, roots))
        if not split or not split["backends"]:
            return [_row(env, SETTINGS[6], None, source="not read", why=f"no absorb-core backend split found in {roots[0]}")]
        known = re.findall(r'register_attention_backend\(\s*"(\w+)"', _read(root, _FILES["sglang"]["registry"]) or "")
        others = [b for b in known if b not in split["backends"]]
        choice = (f"q's and k's rope parts handed to the backend apart for {', '.join(split['backends'])} "
                  f"({split['name']}, {split['list_at']}); q and k joined by torch.cat ({', '.join(split['cat_at'])}) for "
                  + (f"the other registered backends: {', '.join(others)}" if others else "every other backend"))
        return [_row(env, SETTINGS[6], choice, split["where"], f"self.current_attention_backend in {split['name']}", "read",
                     why="the branch is taken per layer at decode; read from the model code", backends=split["backends"],
                     others=others)]
    files = _py_files(root, roots)
    sites = read_mla_cache_writes(files)
    if not sites:
        return [_row(env, SETTINGS[6], None, source="not read", why=f"no concat_and_cache_mla call found in {roots[0]}")]
    cats = read_mla_query_cats(files)
    joined, apart = sorted(c for c, w in cats.items() if w), sorted(c for c, w in cats.items() if not w)
    choice = ("MLA cache written by concat_and_cache_mla in " + "; ".join(f"{s['function']} ({s['where']})" for s in sites)
              + ("; q's parts joined by torch.cat in the decode function of "
                 + ", ".join(f"{c} ({cats[c][0]})" for c in joined) if joined else "")
              + (f"; handed on apart in {', '.join(apart)}" if apart else ""))
    return [_row(env, SETTINGS[6], choice, sites[0]["where"], None, "read", joined=joined, apart=apart,
                 why="the cache write and each backend's decode function are read from the attention code")]


def decode_path(engine: str, model: str = "kimi-k2.5", gpu: str | dict = "rtx-pro-6000", tp_size: int = 8,
                timeout: int = 300) -> list[dict]:
    """The decode-path settings of one engine version for ``model`` on ``gpu`` at tensor parallel ``tp_size`` (rows:
    setting, choice, where, condition, source, why). See the module docstring."""
    if not isinstance(tp_size, int) or isinstance(tp_size, bool) or tp_size < 1:
        raise ParameterError("tp_size", tp_size, "a positive integer, e.g. 8")
    env = resolve_engine(engine)
    if env.engine not in _FILES:
        raise ParameterError("engine", engine, "sglang==VERSION or vllm==VERSION: the decode path is read for SGLang and vLLM")
    root = _site_packages(env.package_dir)
    req = _request(env, gpu, tp_size, model)
    t0 = time.monotonic()
    r = _run(env, req, timeout)
    rows = (_moe_rows(env, root, r, req["quantization_config"]) + _allreduce_rows(env, root, r, tp_size) + _pcie_rows(env, root)
            + _collective_rows(env, root) + _graph_rows(env, root, r) + _sampling_rows(env, root, r) + _mla_rows(env, root))
    common = {"model": str(model), "gpu": req["gpu"].get("profile") or req["gpu"].get("name"),
              "capability": req["gpu"].get("capability"), "tp_size": tp_size, "seconds": round(time.monotonic() - t0, 1),
              "faked": {"topology": "no NVLink (NVML P2P NVLink status: not supported); PCIe P2P OK",
                        "patched": r.get("patched", []), "stubbed_modules": r.get("stubbed_modules", [])}}
    return [row | common for row in rows]


def decode_path_table(engines: list[str], model: str = "kimi-k2.5", gpu: str = "rtx-pro-6000", tp_size: int = 8,
                      on_error=None, workers: int = 2) -> list[dict]:
    """``decode_path`` for several engine versions (``workers`` engine processes side by side), one list in the order
    given; a version that cannot be read gives one row saying why (``on_error(engine, exc)`` hears it too)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(e):
        try:
            return decode_path(e, model, gpu, tp_size)
        except ServebookError as exc:
            if on_error:
                on_error(e, exc)
            name, _, version = str(e).partition("==")
            return [{"engine": name, "version": version or None, "setting": "(all)", "choice": None, "where": None,
                     "condition": None, "source": "not read", "why": " ".join(str(exc).split()), "model": str(model),
                     "gpu": gpu, "tp_size": tp_size}]

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return [row for rows in pool.map(one, engines) for row in rows]
