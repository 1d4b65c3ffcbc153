"""The helper verdicts: each engine helper's answer judged against the hardware ('agrees', 'mismatch', 'gap', ...).

Kept as one unit (``_helper_kind``, ``judge_helper``, ``_judge_engines``) so that its rules can change in one place.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version


def _helper_kind(name: str) -> tuple[str, Any]:
    base = name.split(".")[-1]
    m = re.search(r"\((\d+)\)$", base)
    arg = int(m.group(1)) if m else None
    fn = re.sub(r"\(.*\)$", "", base)
    return fn, arg


def judge_helper(helper: dict, gpu: dict | None, gpu_count: int, cuda: str | None = None) -> dict:
    """Add ``expected``, ``verdict`` ('agrees' | 'mismatch' | 'gap' | 'unknown' | 'error') and ``meaning`` to one helper answer.

    'mismatch': the answer contradicts the hardware. 'gap': consistent, but a Blackwell GPU is kept out of
    paths whose name sounds like they cover it (the seed case: capability 12.0, is_sm100_supported False).
    """
    h = dict(helper)
    fn, arg = _helper_kind(h["name"])
    ans = h.get("answer")
    h.update(expected=None, verdict="unknown", meaning="")
    if h.get("error"):
        h["verdict"] = "error"
        h["meaning"] = f"the helper raised {h['error']}"
        return h
    major, minor = (gpu or {}).get("major"), (gpu or {}).get("minor")
    cap = f"{major}.{minor}" if major is not None else None
    arch = (gpu or {}).get("arch") or "no GPU"
    who = f"this GPU is {arch}, capability {cap}" if cap else "this host has no usable GPU"
    expected = None
    nums = [int(x) for x in re.findall(r"sm(\d+)", fn)] if fn.startswith("is_sm") else []
    m = bool(nums)
    need_cuda = re.search(r"with_cuda_(\d+)_(\d+)", fn)
    if nums:
        # SGLang's convention: is_smNNN_supported() matches the major (sm100 covers 10.x), is_smNNN() the exact capability
        exact = not fn.endswith("_supported")
        if major is None:
            expected = False
        else:
            expected = any(((major, minor) == divmod(n, 10)) if (exact or n % 10) else major == n // 10 for n in nums)
    elif fn.startswith("is_blackwell"):
        expected = major in (10, 11, 12) if major is not None else False
    elif fn.startswith("is_hopper"):
        expected = (major == 9) if major is not None else False
    elif fn.startswith("is_ampere"):
        expected = (major == 8) if major is not None else False
    if expected and need_cuda:
        want = (int(need_cuda.group(1)), int(need_cuda.group(2)))
        expected = _vtuple(cuda)[:2] >= want if cuda else None
    elif fn in ("get_device_sm",):
        expected = major * 10 + minor if major is not None else None
    elif fn == "get_device_capability":
        expected = [major, minor] if major is not None else None
        if isinstance(ans, list) and len(ans) >= 2:
            ans = ans[:2]
    elif fn == "has_device_capability" and arg is not None:
        expected = (major * 10 + minor) >= arg if major is not None else False
    elif fn == "is_device_capability" and arg is not None:
        expected = (major * 10 + minor) == arg if major is not None else False
    elif fn == "is_device_capability_family" and arg is not None:
        expected = (major == arg // 10) if major is not None else False
    elif fn in ("is_torch_cuda_available", "is_cuda"):
        expected = gpu_count > 0
    elif fn in ("is_hip", "is_rocm", "is_npu", "is_xpu", "is_hpu", "is_musa", "is_mps") and major is not None:
        expected = False  # another vendor's platform: an NVIDIA GPU (a capability major) is none of them
    elif fn in ("is_torch_bf16_gpu_available", "is_torch_tf32_available"):
        expected = (major is not None and major >= 8)
    h["expected"] = expected
    if expected is None:
        h["verdict"] = "unknown"
        h["meaning"] = "depends on more than the GPU (installed packages, versions); not judged"
        return h
    label = h["name"]
    fams = ", ".join(f"sm_{n}" for n in nums)
    if isinstance(expected, bool) and not isinstance(ans, bool) and isinstance(ans, (str, int, float, type(None))):
        # e.g. SGLang's is_cuda() returns `torch.cuda.is_available() and torch.version.cuda`: a version string
        # when true; the engine's code uses it as a condition, so its truthiness is the answer
        ans = bool(ans)
    if ans == expected:
        h["verdict"] = "agrees"
        other_line = (lambda n: (n // 10 in (10, 11)) if major == 12 else (n // 10 == 12))
        if ans is False and m and major in (10, 11, 12) and any(other_line(n) for n in nums):
            h["verdict"] = "gap"
            h["meaning"] = (f"{who}, but {label} answers False: code paths guarded by it will not run here "
                            f"({fams} is not {gpu.get('sm')}, although both are Blackwell)")
        elif ans is False and m:
            h["meaning"] = f"code guarded by {fn} ({fams} paths) will not run here"
        elif ans is True and m:
            h["meaning"] = f"code guarded by {fn} runs here"
        return h
    h["verdict"] = "mismatch"
    if isinstance(ans, bool):
        h["meaning"] = (f"{who}, but {label} answers {ans}: code paths guarded by it will "
                        f"{'not run' if ans is False else 'run'} here")
        if ans is False and (m or fn.startswith(("is_blackwell", "is_hopper", "is_ampere"))) and cuda is not None:
            h["meaning"] += f" (such helpers often also require a minimum CUDA; torch here reports CUDA {cuda})"
    else:
        h["meaning"] = f"{who}, but {label} answers {ans!r} (the hardware says {expected!r})"
    return h



def _judge_engines(results: list[dict], gpus: list[dict], fake: dict | None) -> list[dict]:
    gpu0 = gpus[0] if gpus else None
    for r in results:
        cuda = (fake or {}).get("cuda") or r.get("torch_cuda")
        r["helpers"] = [judge_helper(h, gpu0, len(gpus), cuda) for h in r.get("helpers", [])]
        r["mismatches"] = [h["meaning"] for h in r["helpers"] if h["verdict"] == "mismatch"]
        r["gaps"] = [h["meaning"] for h in r["helpers"] if h["verdict"] == "gap"]
        seen = r.get("capability_seen")
        if gpu0 and seen and list(seen[:2]) != [gpu0["major"], gpu0["minor"]]:
            r["mismatches"].insert(0, f"{r['engine']}'s torch sees capability {seen[0]}.{seen[1]}, the hardware is {gpu0['capability']}")
    return results


def version_tuple(v: str) -> tuple[int, ...]:
    """``'12.8'`` -> ``(12, 8)``: the release numbers of a version (packaging's reading; its leading numbers otherwise)."""
    try:
        return Version(str(v)).release[:3]
    except InvalidVersion:
        return tuple(int(x) for x in re.findall(r"\d+", str(v))[:3])


_vtuple = version_tuple  # the name judge_helper uses
