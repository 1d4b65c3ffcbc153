"""Runs inside an engine's own interpreter: fake the GPU, run the engine's own resolution.

    python _runner.py < request.json      # prints one line: SERVEBOOK_RESULT {json}

Standalone on purpose (the engine's environment does not have servebook installed).
It never edits engine files; it patches, in memory, only what reports the hardware
(torch.cuda queries, torch.version.cuda, pynvml) and, for kernel libraries the request
says are installed but that this machine lacks (GPU-only wheels), it provides empty
import stubs so that ``importlib.util.find_spec`` finds them as it would on a GPU host.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import shlex
import sys
import traceback
import types

MARK = "SERVEBOOK_RESULT "


# -- import stubs -------------------------------------------------------------------------
class _Anything(types.ModuleType):
    """A module (and attribute) that is anything: callable, indexable, iterable, falsy."""

    __path__ = []  # a package, so submodules import too

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _Dummy(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Dummy:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:  # used as a decorator
            return a[0]
        return _Dummy(self._name + "()")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy(f"{self._name}.{name}")

    def __getitem__(self, key):
        return _Dummy(f"{self._name}[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __mro_entries__(self, bases):
        return (object,)

    def __or__(self, other):  # a stub used in a type annotation: ``StubClass | OtherClass``
        return self

    __ror__ = __or__

    def __repr__(self):
        return f"<stub {self._name}>"


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names, visible=()):
        self.names = set(names)
        self.visible = set(visible)  # also answer availability probes (importlib.util.find_spec)
        self.used = set()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top in self.names:
            caller = sys._getframe(1)
            while caller is not None and caller.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
                caller = caller.f_back
            fn = caller.f_code.co_filename if caller is not None else ""
            probe = fn == "<frozen importlib.util>" or fn.endswith(os.path.join("importlib", "util.py"))
            if probe and top not in self.visible:
                return None  # "is X installed?" -> no; only an actual import gets the stub
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        self.used.add(spec.name.split(".")[0])
        mod = _Anything(spec.name)
        mod.__version__ = "0.0.0+servebook-stub"
        return mod

    def exec_module(self, module):
        pass


def _install_stubs(present, absent, visible=()):
    """present: modules imports may get as stubs; visible: kernel libraries the host is assumed to
    have (availability checks see them); absent: modules to hide."""
    stub = [m for m in set(present) | set(visible) if importlib.util.find_spec(m) is None]
    finder = _StubFinder(stub, visible)
    sys.meta_path.insert(0, finder)

    try:  # ops of a stubbed kernel library do not exist: registering their fake kernels becomes a no-op
        import torch.library as tl

        real = tl.register_fake

        def register_fake(op, *a, **k):
            if isinstance(op, str) and op.split("::")[0] in set(stub):
                return (lambda fn: fn) if not a else a[0]
            return real(op, *a, **k)

        tl.register_fake = register_fake
    except Exception:
        pass
    for name in absent:  # None in sys.modules: import fails, importlib.util.find_spec returns None
        sys.modules[name] = None
    return finder


# -- the fake GPU ---------------------------------------------------------------------------
def _fake_gpu(gpu):
    """Make torch (and pynvml, and nvidia-smi on PATH) report the profile's GPU; the names of what was patched."""
    import torch

    if not gpu:
        return []
    major, minor = (int(x) for x in str(gpu["capability"]).split("."))
    total = int(float(gpu.get("memory_gib", 80)) * (1 << 30))
    count = int(gpu.get("count", 1))
    name = gpu.get("gpu_name", "NVIDIA GPU")
    sms = int(gpu.get("sm_count") or 132)
    cuda = str(gpu.get("cuda_version", "12.8"))
    props = types.SimpleNamespace(
        name=name, major=major, minor=minor, total_memory=total, multi_processor_count=sms,
        is_integrated=False, is_multi_gpu_board=False, uuid="GPU-servebook-whatif",
        L2_cache_size=50 << 20, gcnArchName="", warp_size=32,
    )
    patched = []

    def setp(obj, attr, value):
        setattr(obj, attr, value)
        patched.append(f"{getattr(obj, '__name__', type(obj).__name__)}.{attr}")

    _fake_nvidia_smi(name, major, minor, total, count)
    patched.append("PATH: nvidia-smi stand-in")
    c = torch.cuda
    setp(c, "is_available", lambda: True)
    setp(c, "device_count", lambda: count)
    setp(c, "current_device", lambda: 0)
    setp(c, "set_device", lambda *a, **k: None)
    setp(c, "get_device_capability", lambda device=None: (major, minor))
    setp(c, "get_device_name", lambda device=None: name)
    setp(c, "get_device_properties", lambda device=None: props)
    setp(c, "mem_get_info", lambda device=None: (total - (1 << 30), total))
    setp(c, "is_bf16_supported", lambda *a, **k: True)
    setp(c, "get_arch_list", lambda: [f"sm_{major}{minor}"])
    setp(torch.version, "cuda", cuda)
    torch.version.hip = None
    _fake_pynvml(setp, name, major, minor, total, count, cuda)
    return patched


def _fake_nvidia_smi(name, major, minor, total, count):
    """nvidia-smi, when the engine asks it (SGLang reads total memory that way): a stand-in first on PATH."""
    import tempfile

    fake_bin = tempfile.mkdtemp(prefix="servebook-nvsmi-")
    values = {"memory.total": str(total >> 20), "memory.used": "1024", "memory.free": str((total >> 20) - 1024),
              "name": name, "compute_cap": f"{major}.{minor}", "driver_version": "999.0", "count": str(count),
              "index": "{i}", "pci.bus_id": "00000000:{i:02d}:00.0", "uuid": "GPU-servebook-{i}"}
    os.environ["SERVEBOOK_FAKE_NVIDIA_SMI"] = json.dumps({"values": values, "count": count})
    stand_in = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fake_nvidia_smi.py")
    script = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(stand_in)} \"$@\"\n"  # the program is a file
    path = os.path.join(fake_bin, "nvidia-smi")
    with open(path, "w") as fh:
        fh.write(script)
    os.chmod(path, 0o755)
    os.environ["PATH"] = fake_bin + os.pathsep + os.environ.get("PATH", "")


def _fake_pynvml(setp, name, major, minor, total, count, cuda):
    """pynvml, when the engine asks NVML directly (memory, topology); nothing when it is not installed."""
    try:
        import pynvml

        def _mem(_h):
            return types.SimpleNamespace(total=total, free=total - (1 << 30), used=1 << 30)

        fakes = {
            "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: count,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetName": lambda h: name,
            "nvmlDeviceGetMemoryInfo": _mem,
            "nvmlDeviceGetCudaComputeCapability": lambda h: (major, minor),
            "nvmlSystemGetDriverVersion": lambda: "999.0",
            "nvmlSystemGetCudaDriverVersion": lambda: int(cuda.split(".")[0]) * 1000 + int(cuda.split(".")[1]) * 10,
            "nvmlDeviceGetP2PStatus": lambda a, b, c: 0,
        }
        for k, v in fakes.items():
            setp(pynvml, k, v)
    except Exception:
        pass


# -- line tracing of the statically found sites --------------------------------------------
def _tracer(sites):
    by_file = {}
    for f, line in sites:
        by_file.setdefault(os.path.realpath(f), set()).add(int(line))
    fired = []
    seen = set()
    real = {}  # co_filename -> the site lines of that file (or None)

    def lines_of(filename):
        if filename not in real:
            real[filename] = by_file.get(os.path.realpath(filename))
        return real[filename]

    def local(frame, event, arg):
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            if frame.f_lineno in lines_of(frame.f_code.co_filename) and key not in seen:
                seen.add(key)
                fired.append([os.path.realpath(frame.f_code.co_filename), frame.f_lineno])
        return local

    def glob(frame, event, arg):
        return local if lines_of(frame.f_code.co_filename) else None

    return glob, fired


# -- engines ----------------------------------------------------------------------------------
_SG_FIELDS = ["attention_backend", "prefill_attention_backend", "decode_attention_backend",
              "moe_runner_backend", "sampling_backend", "quantization", "kv_cache_dtype", "page_size",
              "dtype", "mm_attention_backend",
              # the rest of the decode path: CUDA graphs, all-reduce, torch.compile
              "disable_cuda_graph", "cuda_graph_max_bs", "disable_custom_all_reduce", "enable_torch_compile"]


def _prepare_sglang(req):
    from sglang.srt.server_args import ServerArgs  # noqa: F401  (imported before tracing starts)


def _run_sglang(req):
    from sglang.srt.server_args import ServerArgs

    kwargs = dict(model_path=req["model_dir"], tp_size=int(req.get("tp_size") or 1), skip_server_warmup=True)
    kwargs.update(req.get("server_args") or {})
    sa = ServerArgs(**kwargs)  # <= ~0.5.10: __post_init__ resolves
    if hasattr(sa, "resolve_once"):
        # 0.5.2x: construction leaves the record unresolved; launchers call resolve_once() and the
        # resolution result is read through resolved_dict() (overrides are stashed, not written on fields)
        sa.resolve_once()
        resolved = sa.resolved_dict() if hasattr(sa, "resolved_dict") else {}
        return {k: resolved.get(k, getattr(sa, k, None)) for k in _SG_FIELDS if k in resolved or hasattr(sa, k)}
    return {k: getattr(sa, k, None) for k in _SG_FIELDS if hasattr(sa, k)}


def _prepare_transformers(req):
    import transformers.modeling_utils  # noqa: F401


def _run_transformers(req):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(req["model_dir"])
    kw = {}
    if req.get("attn_implementation"):
        kw["attn_implementation"] = req["attn_implementation"]
    if req.get("trace_only_resolution"):
        pass
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, **kw)
    out = {"attention_backend": model.config._attn_implementation, "transformers": transformers.__version__,
           "model_class": type(model).__name__}
    exp = getattr(model.config, "_experts_implementation", None)
    if exp is not None:
        out["moe_runner_backend"] = exp
    return out


def _prepare_vllm(req):
    import _vllm_runner  # the sibling file: vLLM's selection, its compiled extensions stubbed only where they fail

    return _vllm_runner.prepare(req)


def _run_vllm(req):
    import _vllm_runner

    return _vllm_runner.run(req)


def _stubbed_extensions():
    """{module: why}: an engine's compiled extensions that failed to load here and were stubbed (vLLM)."""
    mod = sys.modules.get("_vllm_runner")
    return dict(getattr(mod, "STUBBED", {}))


def _collect_logs():
    logs = []

    class _H(logging.Handler):
        def emit(self, record):
            try:
                msg = record.getMessage()
            except Exception:
                msg = str(record.msg)
            logs.append({"logger": record.name, "level": record.levelname, "message": msg[:500],
                         "file": record.pathname, "line": record.lineno})

    root = logging.getLogger()
    root.addHandler(_H())
    root.setLevel(logging.INFO)
    return logs


def _error(result, exc):
    result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:600] if str(exc) else type(exc).__name__
    why = [l.strip() for l in str(exc).splitlines() if l.strip().startswith("Value error,")]  # pydantic: the reason
    if why:
        result["error"] += ": " + why[0][len("Value error,"):].strip()[:300]
    result["traceback"] = traceback.format_exc()[-4000:]
    if isinstance(exc, ModuleNotFoundError):
        result["missing_module"] = exc.name


def _kernel_libs_seen():
    seen = {}
    for m in ("flashinfer", "sgl_kernel", "triton", "flash_attn", "kernels", "deep_gemm"):
        try:
            seen[m] = importlib.util.find_spec(m) is not None
        except (ValueError, ImportError):
            seen[m] = False
    return seen


def _one_case(req, case, logs, finder, trace, fired):
    """Run the engine's resolution for one case (in this process); the result dict."""
    result = {"ok": False}
    del logs[:]
    del fired[:]
    try:
        fn = globals()[f"_run_{req['engine']}"]
        sys.settrace(trace)
        try:
            result["resolved"] = fn(dict(req, **case))
        finally:
            sys.settrace(None)
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the caller
        sys.settrace(None)
        _error(result, exc)
    if req.get("helpers"):  # after the resolution, untraced: the same fake, the same process state
        import _helper_answers  # the sibling file (this folder is the script's own, first on the path)

        result["helpers"] = _helper_answers.eval_helpers(req["helpers"], req["engine"])
    result["fired"] = list(fired)
    result["logs"] = list(logs)
    result["stubbed_modules"] = sorted(finder.used | set(_stubbed_extensions()))
    result["kernel_libs_seen"] = _kernel_libs_seen()
    return result


def _forked(req, case, logs, finder, trace, fired):
    """The case in a forked child, so that one engine import serves many cases and no state (lru caches,
    class attributes the engine's resolution writes) leaks from one case into the next."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        try:
            data = json.dumps(_one_case(req, case, logs, finder, trace, fired), default=str).encode()
        except BaseException as exc:  # noqa: BLE001
            data = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}).encode()
        with os.fdopen(wfd, "wb") as fh:
            fh.write(data)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "error": f"the resolution process died (wait status {status})"}
    return json.loads(data)


def main():
    req = json.loads(sys.stdin.read())
    logs = _collect_logs()
    for k, v in (req.get("env") or {}).items():
        os.environ[k] = str(v)
    finder = _install_stubs(req.get("present_modules") or [], set(req.get("absent_modules") or []),
                            req.get("visible_modules") or [])
    result = {"ok": False}
    trace, fired = _tracer(req.get("sites") or [])
    try:
        result["patched"] = _fake_gpu(req.get("gpu"))
        prepare = globals().get(f"_prepare_{req['engine']}")
        if prepare is None:
            raise NotImplementedError(f"servebook has no dynamic what-if for {req['engine']}; answered by reading its code")
        result["patched"] += prepare(req) or []
        result["import_logs"] = list(logs)
        if req.get("mode") == "import":
            result["ok"] = True
        elif req.get("cases"):
            result["cases"] = [_forked(req, c, logs, finder, trace, fired) for c in req["cases"]]
            result["ok"] = True
        else:
            result.update(_one_case(req, {}, logs, finder, trace, fired))
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the caller
        sys.settrace(None)
        _error(result, exc)
    result.setdefault("fired", list(fired))
    result.setdefault("logs", list(logs))
    result["stubbed_modules"] = sorted(finder.used | set(_stubbed_extensions()))
    result["kernel_libs_seen"] = _kernel_libs_seen()
    sys.stdout.write("\n" + MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
