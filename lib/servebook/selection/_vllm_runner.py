"""Runs inside vLLM's own interpreter (imported by ``_runner.py``): vLLM's attention-backend selection, for real.

    prepare(req)   # stubs only the compiled extensions that fail to load here, then imports vllm.platforms
    run(req)       # EngineArgs -> VllmConfig, then vllm.v1.attention.selector.get_attn_backend as the layer calls it

What runs is vLLM's own code: ``EngineArgs.create_engine_config`` (with the CUDA platform's
``check_and_update_config``), ``get_attn_backend`` -> ``CudaPlatform.get_attn_backend_cls`` ->
``_get_backend_priorities`` and each candidate's ``validate_configuration``. What is stubbed: a
``vllm.*`` compiled extension (``_C_stable_libtorch``, ``_moe_C``, ``_flashmla_C`` ...) whose real
load fails on this machine (built against a CUDA torch) gets an empty module; each one is listed with
the loader's error. Standalone on purpose: no servebook import.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys

STUBBED = {}  # module name -> why its real load failed
OPS_CALLED = []  # [phase, "torch.ops._C.name"]: custom ops of a stubbed extension that vLLM's code called (answered None)
PHASE = ["import"]


def _stub_ops():
    """``torch.ops._C.<op>`` (registered by the stubbed extensions): a callable that answers None and is recorded,
    so that a module calling one at import time loads; whether any was called while choosing is reported."""
    import torch._ops as ops

    real = ops._OpNamespace.__getattr__

    def getattr_(self, name):
        try:
            return real(self, name)
        except (AttributeError, RuntimeError):
            if name.startswith("__") or not STUBBED or not self.name.startswith("_"):
                raise  # only vLLM's own extension namespaces (_C, _moe_C, _C_cache_ops ...), never aten
            qual = f"torch.ops.{self.name}.{name}"

            def stub(*a, **k):
                OPS_CALLED.append([PHASE[0], qual])
                return None

            return stub

    ops._OpNamespace.__getattr__ = getattr_
    import torch.library as tl

    for fn in ("register_fake", "impl_abstract"):  # fake kernels for ops that were never registered: no-ops
        real_reg = getattr(tl, fn, None)
        if real_reg is None:
            continue

        def reg(op, *a, _real=real_reg, **k):
            qual = op if isinstance(op, str) else ""
            if STUBBED and qual.split("::")[0].startswith("_"):
                return (lambda f: f) if not a else a[0]
            return _real(op, *a, **k)

        setattr(tl, fn, reg)


class _NvmlFake(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """vLLM's own copy of NVML bindings (``vllm.third_party.pynvml``), faked as soon as it is imported
    (``import vllm`` already asks it which platform this is)."""

    NAME = "vllm.third_party.pynvml"

    def __init__(self, gpu):
        self.gpu, self.patched = gpu, []

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname.rpartition(".")[2], path)
        if spec is None:
            return None
        self.real = spec.loader
        return importlib.util.spec_from_file_location(fullname, spec.origin, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        importlib.machinery.SourceFileLoader(self.NAME, module.__spec__.origin).exec_module(module)
        self.patched = _fake_nvml(module, self.gpu)


class _ExtensionFallback(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``vllm.<ext>`` compiled extensions: load the real .so; where that fails, an empty module (recorded)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("vllm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return None
        self.real = spec.loader
        return importlib.machinery.ModuleSpec(fullname, self, origin=spec.origin)

    def create_module(self, spec):
        try:
            real = importlib.machinery.ExtensionFileLoader(spec.name, spec.origin)
            return real.create_module(importlib.machinery.ModuleSpec(spec.name, real, origin=spec.origin))
        except ImportError as exc:
            import types

            STUBBED[spec.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            return types.ModuleType(spec.name)

    def exec_module(self, module):
        if module.__name__ not in STUBBED:
            importlib.machinery.ExtensionFileLoader(module.__name__, module.__spec__.origin).exec_module(module)


UNLOADABLE = {}  # backend module -> why it cannot execute here (e.g. allocates on the GPU at import)


class _BackendModuleGuard(importlib.abc.MetaPathFinder):
    """A backend module that needs a real GPU to *import* (cutlass_mla.py allocates a CUDA workspace) fails here with
    something vLLM does not expect; it is turned into the ImportError vLLM's selection already handles, and recorded.
    ``run`` then refuses to answer if such a backend ranks above the one chosen (the answer would be a guess)."""

    PREFIX = ("vllm.v1.attention.backends.", "vllm.attention.backends.")

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.PREFIX):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        real = spec.loader.exec_module

        def exec_module(module, _real=real, _name=fullname):
            try:
                _real(module)
            except ImportError:
                raise
            except Exception as exc:  # noqa: BLE001
                UNLOADABLE[_name] = f"{type(exc).__name__}: {exc}"[:200]
                raise ImportError(f"{_name} cannot load without a GPU: {exc}") from exc

        spec.loader.exec_module = exec_module
        return spec


def _fake_nvml(nvml, gpu):
    """vLLM asks NVML (its own ``import_pynvml``) for the device: answer with the profile."""
    if not gpu:
        return []
    import types

    major, minor = (int(x) for x in str(gpu["capability"]).split("."))
    total = int(float(gpu.get("memory_gib", 80)) * (1 << 30))
    fakes = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: int(gpu.get("count", 1)),
        "nvmlDeviceGetHandleByIndex": lambda i: i, "nvmlDeviceGetName": lambda h: gpu.get("gpu_name", "NVIDIA GPU"),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (major, minor),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(total=total, free=total - (1 << 30), used=1 << 30),
        "nvmlDeviceGetP2PStatus": lambda a, b, c: 0, "nvmlSystemGetDriverVersion": lambda: "999.0",
    }
    for k, v in fakes.items():
        setattr(nvml, k, v)
    return [f"{nvml.__name__}.{k}" for k in fakes]


def prepare(req):
    if "vllm" in sys.modules:
        raise RuntimeError("vllm was imported before the GPU was faked")
    _stub_ops()
    nvml = _NvmlFake(req.get("gpu"))
    sys.meta_path[:0] = [nvml, _ExtensionFallback(), _BackendModuleGuard()]
    from vllm.platforms import current_platform

    patched = nvml.patched
    if req.get("gpu"):  # vLLM counts devices with torch's CUDA binding (0 on a CPU torch): the profile's count instead
        import vllm.platforms.cuda as vcuda

        count = int(req["gpu"].get("count", 1))
        vcuda._cuda_device_count_stateless = lambda cuda_visible_devices=None: count
        patched.append("vllm.platforms.cuda._cuda_device_count_stateless")
    # vLLM inspects a model class in a fresh interpreter "to avoid initializing CUDA"; there is no CUDA here, and a
    # fresh interpreter would not have the fake GPU: the same inspection runs in this process instead.
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()
    patched.append("vllm.model_executor.models.registry._run_in_subprocess: in-process")

    import logging

    logging.getLogger("vllm").propagate = True  # its own handler keeps records from the root logger the runner reads
    if req.get("gpu") is not None and not current_platform.is_cuda():
        raise RuntimeError(f"vLLM's platform detection chose {type(current_platform).__name__}, not CUDA, under the fake GPU")
    try:  # (imported before tracing starts) 0.1x: v1/attention/selector.py; 0.10: attention/selector.py
        import vllm.v1.attention.selector  # noqa: F401
    except ModuleNotFoundError:
        import vllm.attention.selector  # noqa: F401
    return patched


def _where(fn):
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    lines, first = inspect.getsourcelines(fn)
    skip = next((i for i, l in enumerate(lines) if l.lstrip().startswith("def ")), 0)  # the def line, not the decorator
    return [os.path.realpath(inspect.getsourcefile(fn)), first + skip, " ".join("".join(lines[skip:skip + 4]).split())[:300]]


def _check(enum, cap, sel):
    """One backend's own verdict on this configuration: its validate_configuration and supports_compute_capability."""
    row = {"backend": enum.name, "class": None, "valid": False, "reasons": [], "supports_capability": None,
           "capability_check_at": None, "capability_check": None}
    try:
        cls = enum.get_class()
    except Exception as exc:  # noqa: BLE001 - ValueError: a placeholder with no class; others: it cannot load here
        row["reasons"] = [f"{type(exc).__name__}: {exc}"[:200]]
        row["import_failed_here"] = not isinstance(exc, ValueError)
        if row["import_failed_here"]:
            row.update(_read_check(enum, cap))
        return row
    row["class"] = f"{cls.__module__}.{cls.__qualname__}"
    try:
        row["supports_capability"] = bool(cls.supports_compute_capability(cap))
        owner = next(k for k in cls.__mro__ if "supports_compute_capability" in vars(k))
        row["capability_check_is_default"] = owner.__module__ == "vllm.v1.attention.backend"  # the base class: no claim
        row["capability_check_at"], row["capability_check"] = _where(cls.supports_compute_capability)[:2], \
            _where(cls.supports_compute_capability)[2]
        row["reasons"] = list(cls.validate_configuration(device_capability=cap, **sel._asdict()))
        row["valid"] = not row["reasons"]
    except Exception as exc:  # noqa: BLE001 - a check that raises is its answer
        row["reasons"] = [f"{type(exc).__name__}: {exc}"[:200]]
    return row


def _read_check(enum, cap):
    """A backend class that cannot load here: its own ``supports_compute_capability``, read from its source and
    evaluated on the capability when it is one ``return <expression>`` of the capability alone."""
    import ast

    try:
        module, _, name = enum.get_path().rpartition(".")
        path = importlib.util.find_spec(module).origin
        tree = ast.parse(open(path, encoding="utf-8").read())
        cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
        fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "supports_compute_capability")
        body = [n for n in fn.body if not isinstance(n, ast.Expr)]
        if len(body) != 1 or not isinstance(body[0], ast.Return):
            return {}
        arg = fn.args.args[-1].arg
        answer = eval(compile(ast.Expression(body[0].value), path, "eval"), {"__builtins__": {}}, {arg: cap})
        return {"supports_capability": bool(answer), "capability_check_at": [os.path.realpath(path), fn.lineno],
                "capability_check": f"def supports_compute_capability(...): {ast.unparse(body[0])} (read, not imported)"}
    except Exception:  # noqa: BLE001 - nothing read: no evidence either way
        return {}


_DECODE_PATH = {  # what else decides a decode step, read from the resolved VllmConfig
    "cudagraph_mode": "compilation_config.cudagraph_mode", "compilation_mode": "compilation_config.mode",
    "max_cudagraph_capture_size": "compilation_config.max_cudagraph_capture_size",
    "disable_custom_all_reduce": "parallel_config.disable_custom_all_reduce",
    "all2all_backend": "parallel_config.all2all_backend", "moe_backend": "kernel_config.moe_backend",
    "quantization": "model_config.quantization", "kv_cache_dtype": "cache_config.cache_dtype",
    "block_size": "cache_config.block_size", "enforce_eager": "model_config.enforce_eager",
}


def _get(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj if obj is None or isinstance(obj, (bool, int, float, str)) else str(obj)


def _layer_args(config):
    """The arguments the model's attention layer passes the selector (model_executor/layers/attention/{mla_,}attention.py)."""
    mc, pc = config.model_config, config.parallel_config
    hf = mc.hf_text_config
    args = dict(head_size=mc.get_head_size(), dtype=mc.dtype, kv_cache_dtype=config.cache_config.cache_dtype,
                use_mla=bool(mc.use_mla), num_heads=mc.get_num_attention_heads(pc))
    if mc.use_mla:
        args["use_sparse"] = hasattr(hf, "index_topk")
    else:
        args["has_sliding_window"] = False  # a full-attention layer; models mixing windows have those too
    return args


def _outside_priorities(prio, cap, sel, num_heads):
    """The backends vLLM's CUDA platform lists for some capability but not in ``prio``, each with its own checks on
    ``cap`` (the others are CPU/ROCm/XPU backends)."""
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    trace = sys.gettrace()
    sys.settrace(None)  # these calls are servebook's questions, not the engine's path: untraced
    cuda_listed = {b for c in ((7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1))
                   for m in (True, False) for b in _get_backend_priorities(m, DeviceCapability(*c), num_heads,
                                                                         sel.kv_cache_dtype, sel.use_non_causal)}
    others = [_check(b, cap, sel) for b in AttentionBackendEnum if b in cuda_listed and b not in prio]
    sys.settrace(trace)
    return others


def run(req):
    try:
        import vllm.v1.attention.selector  # noqa: F401
    except ModuleNotFoundError:
        return _run_010(req)
    import torch

    import vllm.envs as envs
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig, _cached_get_attn_backend, get_attn_backend

    PHASE[0] = "config"
    config = _config(req)
    PHASE[0] = "selection"
    mc = config.model_config
    args = _layer_args(config)
    _cached_get_attn_backend.cache_clear()
    with set_current_vllm_config(config):
        prev = torch.get_default_dtype()
        torch.set_default_dtype(mc.dtype)  # as during model initialization
        try:
            backend = get_attn_backend(**args)
        finally:
            torch.set_default_dtype(prev)
        from vllm.platforms.cuda import _get_backend_priorities

        cap = current_platform.get_device_capability()
        sel = AttentionSelectorConfig(head_size=args["head_size"], dtype=mc.dtype, kv_cache_dtype=args["kv_cache_dtype"],
                                      block_size=(config.cache_config.block_size if config.cache_config.user_specified_block_size
                                                  else None), use_mla=args["use_mla"], use_sparse=args.get("use_sparse", False))
        prio = _get_backend_priorities(sel.use_mla, cap, args["num_heads"], sel.kv_cache_dtype, sel.use_non_causal)
        checked = [dict(_check(b, cap, sel), priority=i) for i, b in enumerate(prio)]
        others = _outside_priorities(prio, cap, sel, args["num_heads"])
    name = next((b.name for b in AttentionBackendEnum if _safe_class(b) is backend), backend.__name__)
    above = [c["backend"] for c in checked if c["backend"] != name and c.get("import_failed_here")
             and c["priority"] < next((x["priority"] for x in checked if x["backend"] == name), 99)]
    if above:
        raise RuntimeError(f"vLLM would try {', '.join(above)} before {name}, but that backend's module cannot load without a "
                           f"GPU ({'; '.join(f'{k}: {v}' for k, v in UNLOADABLE.items())}); its answer is not known here")
    return {"attention_backend": name, "backend_class": f"{backend.__module__}.{backend.__qualname__}",
            "capability": [cap.major, cap.minor], "selector_args": {k: str(v) for k, v in args.items()},
            "priorities": [b.name for b in prio], "candidates": checked,
            "outside_priorities": others,
            "moe_runner_backend": _get(config, "kernel_config.moe_backend"),
            "decode_path": {k: _get(config, p) for k, p in _DECODE_PATH.items()}
            | {"VLLM_USE_FLASHINFER_SAMPLER": envs.VLLM_USE_FLASHINFER_SAMPLER},
            "stubbed_extensions": dict(STUBBED), "stub_ops_called": OPS_CALLED, "unloadable_here": dict(UNLOADABLE)}


def _config(req):
    from vllm.engine.arg_utils import EngineArgs

    kw = dict(model=req["model_dir"], skip_tokenizer_init=True, tensor_parallel_size=int(req.get("tp_size") or 1),
              load_format="dummy")
    kw.update(req.get("server_args") or {})
    return EngineArgs(**kw).create_engine_config()


def _run_010(req):
    """vLLM 0.10: ``vllm.attention.selector.get_attn_backend`` -> ``CudaPlatform.get_attn_backend_cls``, an if/elif chain
    that returns the class path (no priority list; the traced ``return`` is the deciding line)."""
    import torch

    import vllm.envs as envs
    from vllm.attention.selector import _cached_get_attn_backend, get_attn_backend
    from vllm.config import set_current_vllm_config

    PHASE[0] = "config"
    config = _config(req)
    PHASE[0] = "selection"
    mc = config.model_config
    args = dict(head_size=mc.get_head_size(), dtype=mc.dtype, kv_cache_dtype=config.cache_config.cache_dtype,
                block_size=config.cache_config.block_size, use_mla=bool(mc.use_mla))
    _cached_get_attn_backend.cache_clear()
    with set_current_vllm_config(config):
        backend = get_attn_backend(**args)
    return {"attention_backend": backend.get_name(), "backend_class": f"{backend.__module__}.{backend.__qualname__}",
            "selector_args": {k: str(v) for k, v in args.items()},
            "decode_path": {k: _get(config, p) for k, p in _DECODE_PATH.items()}
            | {"VLLM_USE_FLASHINFER_SAMPLER": getattr(envs, "VLLM_USE_FLASHINFER_SAMPLER", None)},
            "stubbed_extensions": dict(STUBBED), "stub_ops_called": OPS_CALLED, "unloadable_here": dict(UNLOADABLE)}


def _safe_class(b):
    try:
        return b.get_class()
    except Exception:  # noqa: BLE001
        return None
