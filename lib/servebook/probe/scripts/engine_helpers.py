"""Ask one engine, in its own interpreter, what it concludes about this GPU: its capability helpers' answers.

    python engine_helpers.py '{"engine": "sglang", "fake": null}'    # prints one line: @@SERVEBOOK@@{...json...}

``fake`` (a what-if) patches torch's device queries to a profiled GPU before the engine is imported.
Started by ``servebook.probe.engines`` under the engine's interpreter; standard library and the engine only.
"""
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("scripts"):
    sys.path.pop(0)

import json, sys, re, inspect, types, importlib
import importlib.metadata as md
req = json.loads(sys.argv[1])
engine, fake = req["engine"], req.get("fake")
out = {"engine": engine, "python": sys.executable, "python_version": sys.version.split()[0], "status": "ok",
       "error": None, "version": None, "helpers": [], "patched": [], "capability_seen": None}
MARK = "@@SERVEBOOK@@"
def emit():
    sys.stdout.write("\n" + MARK + json.dumps(out, default=repr) + "\n"); sys.stdout.flush()
def jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None: return v
    if isinstance(v, tuple) and hasattr(v, "_fields"): return list(v)
    if isinstance(v, (list, tuple)): return [jsonable(x) for x in v]
    return repr(v)
for dist in {"sglang": ["sglang"], "vllm": ["vllm"], "transformers": ["transformers"]}[engine]:
    try:
        out["version"] = md.version(dist); break
    except md.PackageNotFoundError:
        pass
if out["version"] is None:
    out["status"] = "not installed"; emit(); sys.exit(0)
if fake:
    try:
        import torch
        maj, mi = int(fake["major"]), int(fake["minor"])
        props = types.SimpleNamespace(name=fake["name"], major=maj, minor=mi, multi_processor_count=fake.get("sm_count") or 0,
                                      total_memory=int((fake.get("memory_gib") or 0) * 2**30))
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: int(fake["count"])
        torch.cuda.current_device = lambda: 0
        torch.cuda.is_initialized = lambda: True  # so helpers ask torch, not NVML (which would report the real GPU)
        torch.cuda.get_device_capability = lambda device=None: (maj, mi)
        torch.cuda.get_device_name = lambda device=None: fake["name"]
        torch.cuda.get_device_properties = lambda device=None: props
        torch.version.cuda = fake["cuda"]
        out["patched"] = ["torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.current_device",
                          "torch.cuda.is_initialized", "torch.cuda.get_device_capability", "torch.cuda.get_device_name",
                          "torch.cuda.get_device_properties", "torch.version.cuda=" + str(fake["cuda"])]
    except Exception as exc:
        out["status"] = "error"; out["error"] = "cannot fake the capability: %s: %s" % (type(exc).__name__, exc); emit(); sys.exit(0)
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["capability_seen"] = list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)

def call(label, fn, *args):
    rec = {"name": label, "answer": None, "error": None}
    try:
        rec["answer"] = jsonable(fn(*args))
    except Exception as exc:
        rec["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    out["helpers"].append(rec)

def zero_arg(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values())

def module_helpers(modname, pattern, extra=()):
    try:
        # by name: the engine's helper modules differ by engine and release; engine modules only (no servebook here)
        mod = importlib.import_module(modname)
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, str(exc)[:300])
    names = sorted(n for n in dir(mod) if re.match(pattern, n)) + [n for n in extra if hasattr(mod, n)]
    for n in dict.fromkeys(names):
        fn = getattr(mod, n)
        if callable(fn) and zero_arg(fn):
            call(modname + "." + n + "()", fn)
    return None

failures = []
if engine == "transformers":
    err = module_helpers("transformers.utils.import_utils",
        r"^(is_torch_cuda_available|is_torch_bf16_gpu_available|is_torch_tf32_available|is_torch_flex_attn_available|"
        r"is_flash_attn_[234]_available|is_kernels_available|is_triton_available|is_torch_greater_or_equal_than_2_\d)$")
    if err: failures.append(err)
elif engine == "sglang":
    pat = r"^(is_sm\d+\w*|is_blackwell\w*|is_hopper\w*|is_ampere\w*|get_device_sm|get_device_capability|is_cuda|is_flashinfer_available)$"
    errs = []
    for m in ("sglang.srt.utils.common", "sglang.srt.utils"):  # newer releases keep them in utils/common.py
        errs.append(module_helpers(m, pat))
        if errs[-1] is None:
            break
    if all(errs): failures.append(errs[0])
    for modname in ("sglang.srt.platforms", "sglang.srt.platforms.interface"):
        try:
            mod = importlib.import_module(modname)  # by name: SGLang's platform module moved between releases
        except Exception:
            continue
        plat = getattr(mod, "current_platform", None)
        if plat is None and callable(getattr(mod, "get_platform", None)):
            try:
                plat = mod.get_platform()
            except Exception as exc:
                failures.append("get_platform(): %s: %s" % (type(exc).__name__, exc)); plat = None
        if plat is None:
            continue
        for n in sorted(dir(plat)):
            if re.match(r"^(is_sm\d+\w*|is_blackwell\w*|is_hopper\w*|is_cuda|get_device_capability|get_device_sm|device_name)$", n):
                a = getattr(plat, n)
                if callable(a):
                    if zero_arg(a):
                        call("platform." + n + "()", a)
                else:
                    out["helpers"].append({"name": "platform." + n, "answer": jsonable(a), "error": None})
        break
elif engine == "vllm":
    try:
        from vllm.platforms import current_platform as plat
        if fake:
            # vLLM's CUDA platform answers from NVML (the real GPU, or none); ask its torch-based CUDA platform instead
            from vllm.platforms import cuda as _c
            plat = getattr(_c, "NonNvmlCudaPlatform", None) or getattr(_c, "CudaPlatform")
            out["patched"].append("platform: vllm.platforms.cuda.%s (no NVML device here)" % plat.__name__)
        out["platform"] = type(plat).__name__ if not isinstance(plat, type) else plat.__name__
        call("current_platform.is_cuda()", plat.is_cuda)
        call("current_platform.get_device_capability()", plat.get_device_capability)
        call("current_platform.get_device_name()", plat.get_device_name)
        caps = (80, 86, 89, 90, 100, 103, 110, 120, 121)
        for c in caps:
            call("current_platform.has_device_capability(%d)" % c, plat.has_device_capability, c)
        for c in caps:
            call("current_platform.is_device_capability(%d)" % c, plat.is_device_capability, c)
        if hasattr(plat, "is_device_capability_family"):
            for c in (90, 100, 110, 120):
                call("current_platform.is_device_capability_family(%d)" % c, plat.is_device_capability_family, c)
    except Exception as exc:
        failures.append("%s: %s" % (type(exc).__name__, str(exc)[:300]))
if failures and not out["helpers"]:
    out["status"] = "import failed"; out["error"] = failures[0]
elif failures:
    out["warnings"] = failures
emit()
