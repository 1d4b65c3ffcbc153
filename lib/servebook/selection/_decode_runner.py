"""Runs inside an engine's own interpreter: the decode-path settings, with the engine's own code (see ``decode_path.py``).

    python _decode_runner.py < request.json      # prints one line: SERVEBOOK_RESULT {json}

Standalone on purpose (no servebook import). The GPU is faked as in ``_runner.py`` (capability, count, memory);
the topology is faked below the engine: NVML answers "no NVLink" for every pair (``nvmlDeviceGetP2PStatus`` with
the NVLink capability index -> not supported) and ``torch.distributed`` answers for rank 0 of a world of ``tp_size``
(``get_rank``, ``get_world_size``, ``get_backend`` -> gloo, ``all_gather`` -> the device ids 0..N-1), and
``in_the_same_node_as`` answers "one node". Each probe is one engine function called as the engine calls it; the line
at which it returned is traced, and its log lines kept. A probe that fails says why and the caller reads the code instead.
"""

import json
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _runner  # noqa: E402  (the sibling: stubs, fake GPU, log collection)

MARK = "SERVEBOOK_RESULT "
NVLINK_INDEX = 6  # NVML_P2P_CAPS_INDEX_NVLINK; NVML_P2P_STATUS_OK = 0, NVML_P2P_STATUS_NOT_SUPPORTED = 5


def _no_nvlink(nvml):
    """NVML's P2P status: no NVLink between any two GPUs; PCIe peer access (read/write) reported OK."""
    ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    no = getattr(nvml, "NVML_P2P_STATUS_NOT_SUPPORTED", 5)
    nvlink = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", NVLINK_INDEX)
    nvml.nvmlDeviceGetP2PStatus = lambda a, b, index: no if index == nvlink else ok
    nvml.nvmlDeviceGetNvLinkState = lambda h, link: 0
    return [f"{nvml.__name__}.nvmlDeviceGetP2PStatus: NVLink not supported"]


def _fake_world(world):
    """torch.distributed as rank 0 of ``world`` processes on one node (no process group is created)."""
    import torch
    import torch.distributed as dist

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        for i, t in enumerate(tensor_list):
            t.fill_(i)

    fakes = {"get_rank": lambda group=None: 0, "get_world_size": lambda group=None: world,
             "get_backend": lambda group=None: "gloo", "all_gather": all_gather, "is_initialized": lambda: True,
             "barrier": lambda *a, **k: None, "broadcast_object_list": lambda *a, **k: None}
    for k, v in fakes.items():
        setattr(dist, k, v)
    torch.cuda.can_device_access_peer = lambda a, b: True
    patched = [f"torch.distributed.{k}" for k in fakes]
    acc = getattr(torch, "accelerator", None)
    if acc is not None:  # binding a device (symmetric memory does, before asking the capability)
        acc.set_device_index = lambda *a, **k: None
        patched.append("torch.accelerator.set_device_index")
    return patched


def _traced_return(fn, code, *a, **k):
    """Call ``fn``; the [file, line] at which ``code`` (the engine function that decides) returned or raised."""
    where = []

    def local(frame, event, arg):
        if event in ("return", "exception") and frame.f_code is code:
            where[:] = [os.path.realpath(code.co_filename), frame.f_lineno, event]
        return local

    def glob(frame, event, arg):
        return local if frame.f_code is code else None

    sys.settrace(glob)
    try:
        out = fn(*a, **k)
    except BaseException as exc:
        exc.servebook_traced_at = list(where)  # where the deciding function was when it raised
        raise
    finally:
        sys.settrace(None)
    return out, where


def _returned_class(where):
    """The class a ``return Cls(...)`` at ``where`` constructs (read from that line), or None."""
    import ast

    if len(where) < 2:
        return None
    with open(where[0], encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.lineno <= where[1] <= node.end_lineno and isinstance(node.value, ast.Call):
            return ast.unparse(node.value.func) + " (constructor not run)"
    return None


def _logs_since(logs, n, words=()):
    out = []
    for r in logs[n:]:
        if not words or any(w.lower() in r["message"].lower() for w in words):
            out.append({"message": r["message"][:300], "file": os.path.realpath(r["file"]), "line": r["line"], "level": r["level"]})
    return out


def _probe(name, fn, results):
    try:
        results[name] = fn()
    except BaseException as exc:  # noqa: BLE001 - a probe that fails is reported, and read statically instead
        sys.settrace(None)
        results[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300], "detail": " ".join(str(exc).split())[:800],
                         "traceback": traceback.format_exc()[-1500:]}


def _scalar(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str, bool)) for x in v):
        return list(v)
    return str(v)


def _experts_target(cfg):
    """The class name under which the engine's compressed-tensors config matches its fused experts layer
    (``_add_fused_moe_to_target_scheme_map`` adds it: FusedMoE, RoutedExperts ...)."""
    before = set(cfg.target_scheme_map)
    cfg._add_fused_moe_to_target_scheme_map()
    added = [k for k in cfg.target_scheme_map if k not in before]
    return added[0] if added else next((k for k in cfg.target_scheme_map if "MoE" in k or "Experts" in k), "FusedMoE")


# -- SGLang ---------------------------------------------------------------------------------------
_SG_ARGS = ("cuda_graph_bs", "cuda_graph_max_bs", "disable_cuda_graph", "enable_torch_compile", "sampling_backend",
            "disable_custom_all_reduce", "enable_torch_symm_mem", "enable_mscclpp", "enable_flashinfer_allreduce_fusion",
            "moe_runner_backend", "quantization", "attention_backend", "enable_dp_attention", "moe_a2a_backend",
            "cuda_graph_config")


def _sglang(req, logs, out):
    import pynvml

    out["patched"] += _no_nvlink(pynvml)
    from sglang.srt.server_args import ServerArgs

    _probe("server_args", lambda: _sg_server_args(ServerArgs, req, out), out["probes"])
    sa = out.pop("_sa", None)
    out["patched"] += _fake_world(int(req["tp_size"]))
    _probe("custom_all_reduce", lambda: _sg_custom_ar(req, logs), out["probes"])
    _probe("moe", lambda: _sg_moe(req, logs, out, sa), out["probes"])


def _sg_server_args(ServerArgs, req, out):
    """SGLang's server arguments as it resolves them for the model at ``tp_size`` (the record itself kept in ``out``)."""
    sa = ServerArgs(model_path=req["model_dir"], tp_size=int(req["tp_size"]), skip_server_warmup=True)
    resolved = {}
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
        resolved = sa.resolved_dict() if hasattr(sa, "resolved_dict") else {}
    vals = {k: _scalar(resolved.get(k, getattr(sa, k, None))) for k in _SG_ARGS if k in resolved or hasattr(sa, k)}
    graphs = resolved.get("cuda_graph_config", getattr(sa, "cuda_graph_config", None))
    decode = graphs.get("decode") if isinstance(graphs, dict) else getattr(graphs, "decode", None)
    if decode is not None:  # newer: per-phase CUDA-graph configuration (decode: bs list, max_bs, backend)
        get = decode.get if isinstance(decode, dict) else (lambda k, d=decode: getattr(d, k, None))
        vals["cuda_graph_decode"] = {k: _scalar(get(k)) for k in ("bs", "max_bs", "backend", "enabled") if get(k) is not None}
        vals.pop("cuda_graph_config", None)
    out["_sa"] = sa
    return vals


def _sg_custom_ar(req, logs):
    """SGLang's custom all-reduce as GroupCoordinator builds it: the implementation dispatched, then its constructor."""
    import inspect

    import torch

    import sglang.srt.distributed.device_communicators.custom_all_reduce as car

    try:  # newer versions' JIT implementation, imported lazily by the dispatch: patched like the rest
        import sglang.srt.distributed.device_communicators.custom_all_reduce_v2  # noqa: F401
    except ImportError:
        pass
    same_node = lambda group, source_rank=0: [True] * int(req["tp_size"])  # noqa: E731
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang.srt.distributed") and hasattr(mod, "in_the_same_node_as"):
            mod.in_the_same_node_as = same_node
    group, device = object(), torch.device("cuda", 0)
    n = len(logs)
    cls, dispatched_at = car.CustomAllreduce, []
    dispatch = getattr(car, "dispatch_custom_allreduce", None)
    if dispatch is not None:  # the choice of implementation GroupCoordinator makes first
        params = inspect.signature(dispatch).parameters
        kw = {"group": group, "device": device} if "group" in params else {}
        cls, dispatched_at = _traced_return(dispatch, dispatch.__code__, **kw)
    obj, where = _traced_return(cls, cls.__init__.__code__, group=group, device=device)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "disabled": bool(getattr(obj, "disabled", True)),
            "returned_at": where, "dispatched_at": dispatched_at,
            "logs": _logs_since(logs, n, ("allreduce", "all-reduce", "all_reduce", "nvlink", "p2p"))}


def _sg_moe(req, logs, out, sa):
    """The MoE scheme SGLang's compressed-tensors config picks for the routed experts (traced return)."""
    import torch

    from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig

    if sa is not None:  # the MoE flags the scheduler seeds from the resolved arguments (older: passed; newer: published)
        try:
            import inspect

            from sglang.srt.layers.moe import initialize_moe_config

            initialize_moe_config(*([sa] if inspect.signature(initialize_moe_config).parameters else []))
        except Exception as exc:  # noqa: BLE001 - the engine's default flags then apply; said in the answer
            out["probes"]["moe_config_note"] = f"initialize_moe_config failed: {type(exc).__name__}: {exc}"[:300]
    cfg = CompressedTensorsConfig.from_config(req["quantization_config"])
    layer = type(_experts_target(cfg), (torch.nn.Module,), {})()  # matched by class name, as the engine's FusedMoE is
    n = len(logs)
    fn = CompressedTensorsConfig.get_moe_scheme
    scheme, where = _traced_return(fn, fn.__code__, cfg, layer=layer, layer_name=req["experts_prefix"])
    cls = type(scheme)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "returned_at": where, "logs": _logs_since(logs, n, ("using",)),
            "scheme_file": os.path.realpath(sys.modules[cls.__module__].__file__)}


# -- vLLM -----------------------------------------------------------------------------------------
class _Op:
    """A stubbed custom op with overloads: ``torch.ops._C.name.default`` is the same stub (modules take it at import)."""

    def __init__(self, fn):
        self._fn = fn

    def __call__(self, *a, **k):
        return self._fn(*a, **k)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self


def _op_overloads():
    import torch._ops as ops

    real = ops._OpNamespace.__getattr__

    def getattr_(self, name):
        f = real(self, name)
        return _Op(f) if isinstance(f, types.FunctionType) else f

    ops._OpNamespace.__getattr__ = getattr_
    return ["torch.ops stubs of vLLM's unloadable extensions: overloads (.default) answer the same stub"]


def _vllm(req, logs, out):
    import _vllm_runner

    out["patched"] += _vllm_runner.prepare(req) or []
    out["patched"] += _op_overloads()
    import vllm.third_party.pynvml as nvml

    out["patched"] += _no_nvlink(nvml)
    import vllm.envs as envs

    _probe("config", lambda: _vl_config(_vllm_runner, envs, req, out), out["probes"])
    c = out.pop("_config", None)
    out["patched"] += _fake_world(int(req["tp_size"]))
    _probe("custom_all_reduce", lambda: _vl_custom_ar(req, logs), out["probes"])
    _probe("symm_mem", lambda: _vl_symm_mem(logs), out["probes"])
    if (c is not None and out["probes"].get("config", {}).get("VLLM_ALLREDUCE_USE_FLASHINFER")):  # built only when switched on
        _probe("flashinfer_all_reduce", lambda: _vl_flashinfer_ar(logs), out["probes"])
    if c is None:  # the experts' shapes come from the resolved model config
        out["probes"]["moe"] = {"error": "needs the resolved VllmConfig, which failed: " + out["probes"]["config"]["error"][:200],
                                "detail": out["probes"]["config"].get("detail", "")}
    else:
        _probe("moe", lambda: _vl_moe(req, logs, c), out["probes"])


def _vl_config(_vllm_runner, envs, req, out):
    """vLLM's resolved configuration for the decode path (the VllmConfig itself kept in ``out``)."""
    c = _vllm_runner._config(req)
    cc, pc = c.compilation_config, c.parallel_config
    out["_config"] = c
    vals = {"cudagraph_capture_sizes": _scalar(getattr(cc, "cudagraph_capture_sizes", None)),
            "max_cudagraph_capture_size": _scalar(getattr(cc, "max_cudagraph_capture_size", None)),
            "cudagraph_mode": _scalar(getattr(cc, "cudagraph_mode", None)), "compilation_mode": _scalar(getattr(cc, "mode", None)),
            "disable_custom_all_reduce": _scalar(getattr(pc, "disable_custom_all_reduce", None)),
            "moe_backend": _scalar(getattr(getattr(c, "kernel_config", None), "moe_backend", None)),
            "quantization": _scalar(c.model_config.quantization)}
    for name in ("VLLM_ALLREDUCE_USE_SYMM_MEM", "VLLM_ALLREDUCE_USE_FLASHINFER", "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC",
                 "VLLM_USE_FLASHINFER_SAMPLER"):
        if name in getattr(envs, "environment_variables", {}):
            vals[name] = _scalar(getattr(envs, name))
    return vals


def _constructed(cls, logs, words):
    """Construct the communicator ``cls`` for a faked group on device 0: whether it came out disabled, the line its
    constructor returned at, and the log lines since that name one of ``words``."""
    n = len(logs)
    obj, where = _traced_return(cls, cls.__init__.__code__, group=object(), device=0)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "disabled": bool(getattr(obj, "disabled", True)),
            "returned_at": where, "logs": _logs_since(logs, n, words)}


def _vl_custom_ar(req, logs):
    import vllm.distributed.device_communicators.custom_all_reduce as car

    car.in_the_same_node_as = lambda group, source_rank=0: [True] * int(req["tp_size"])
    return _constructed(car.CustomAllreduce, logs, ("allreduce", "all-reduce", "nvlink", "p2p"))


def _vl_symm_mem(logs):
    import vllm.distributed.device_communicators.symm_mem as sm

    return _constructed(sm.SymmMemCommunicator, logs, ("symm",))


def _vl_flashinfer_ar(logs):
    import vllm.distributed.device_communicators.flashinfer_all_reduce as fa

    if hasattr(fa, "_node_count"):
        fa._node_count = lambda group: 1  # one node
    return _constructed(fa.FlashInferAllReduce, logs, ("flashinfer",))


def _vl_moe(req, logs, c):
    """The MoE method vLLM's compressed-tensors config picks for the routed experts (traced return; its constructor
    needs a real FusedMoEConfig, so a raise after the choice is kept as ``error_after_choice``)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import CompressedTensorsMoEMethod

    qc = CompressedTensorsConfig.from_config(req["quantization_config"])
    hf = c.model_config.hf_text_config
    tp = int(req["tp_size"])
    moe_config = types.SimpleNamespace(intermediate_size_per_partition_unpadded=hf.moe_intermediate_size // tp,
                                       intermediate_size_per_partition=hf.moe_intermediate_size // tp,
                                       hidden_dim=hf.hidden_size, num_experts=hf.n_routed_experts,
                                       experts_per_token=hf.num_experts_per_tok, moe_backend="auto")
    layer = type(_experts_target(qc), (), {})()  # matched by class name, as the engine's experts layer is
    layer.__dict__.update(hidden_size=hf.hidden_size, apply_router_weight_on_input=False, moe_config=moe_config,
                          ckpt_gate_proj_name="gate_proj", ckpt_up_proj_name="up_proj", ckpt_down_proj_name="down_proj")
    fn = CompressedTensorsMoEMethod.get_moe_method
    fn = getattr(fn, "__func__", fn)
    n = len(logs)
    with set_current_vllm_config(c):
        try:
            method, where = _traced_return(fn, fn.__code__, qc, layer, req["experts_prefix"])
            name = f"{type(method).__module__}.{type(method).__qualname__}"
            err = None
        except BaseException as exc:  # noqa: BLE001 - the method's constructor needs a real FusedMoEConfig
            method, name, err = None, None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            where = getattr(exc, "servebook_traced_at", [])  # the return line whose constructor raised
            name = _returned_class(where)
    return {"class": name, "returned_at": where, "error_after_choice": err, "logs": _logs_since(logs, n, ("using", "moe"))}


def main():
    req = json.loads(sys.stdin.read())
    logs = _runner._collect_logs()
    finder = _runner._install_stubs(req.get("present_modules") or [], set(req.get("absent_modules") or []),
                                    req.get("visible_modules") or [])
    out = {"ok": False, "probes": {}, "patched": []}
    try:
        out["patched"] += _runner._fake_gpu(req.get("gpu"))
        {"sglang": _sglang, "vllm": _vllm}[req["engine"]](req, logs, out)
        out["ok"] = True
    except BaseException as exc:  # noqa: BLE001
        sys.settrace(None)
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400] if str(exc) else type(exc).__name__
        out["traceback"] = traceback.format_exc()[-2000:]
    out.pop("_sa", None), out.pop("_config", None)
    out["stubbed_modules"] = sorted(finder.used)
    sys.stdout.write("\n" + MARK + json.dumps(out, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
