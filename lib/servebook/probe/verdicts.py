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
    nums = [int(x) for x in re.findall(r"sm(\d+)", fn)] if fn.startswith("is_sm") else []
    if nums or fn.startswith(_FAMILY_HELPERS):
        expected = _family_expected(fn, nums, major, minor, cuda)
    else:
        expected = _capability_expected(fn, arg, major, minor, gpu_count)
    if fn == "get_device_capability" and isinstance(ans, list) and len(ans) >= 2:
        ans = ans[:2]
    h["expected"] = expected
    if expected is None:
        h["verdict"] = "unknown"
        h["meaning"] = "depends on more than the GPU (installed packages, versions); not judged"
        return h
    if isinstance(expected, bool) and not isinstance(ans, bool) and isinstance(ans, (str, int, float, type(None))):
        # e.g. SGLang's is_cuda() returns `torch.cuda.is_available() and torch.version.cuda`: a version string
        # when true; the engine's code uses it as a condition, so its truthiness is the answer
        ans = bool(ans)
    h["verdict"], h["meaning"] = _verdict(h["name"], fn, nums, ans, expected, gpu, cuda)
    return h


_FAMILY_HELPERS = ("is_blackwell", "is_hopper", "is_ampere")


def _family_expected(fn: str, nums: list[int], major: int | None, minor: int | None, cuda: str | None):
    """What a GPU-family helper (``is_sm100_supported``, ``is_hopper_with_cuda_12_3``, ...) should answer here."""
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
    else:  # is_ampere
        expected = (major == 8) if major is not None else False
    need_cuda = re.search(r"with_cuda_(\d+)_(\d+)", fn)
    if expected and need_cuda:
        want = (int(need_cuda.group(1)), int(need_cuda.group(2)))
        expected = _vtuple(cuda)[:2] >= want if cuda else None
    return expected


def _capability_expected(fn: str, arg: int | None, major: int | None, minor: int | None, gpu_count: int):
    """What a capability or platform helper (``get_device_capability``, ``is_cuda``, ...) should answer; None: not judged."""
    if fn in ("get_device_sm",):
        return major * 10 + minor if major is not None else None
    if fn == "get_device_capability":
        return [major, minor] if major is not None else None
    if fn == "has_device_capability" and arg is not None:
        return (major * 10 + minor) >= arg if major is not None else False
    if fn == "is_device_capability" and arg is not None:
        return (major * 10 + minor) == arg if major is not None else False
    if fn == "is_device_capability_family" and arg is not None:
        return (major == arg // 10) if major is not None else False
    if fn in ("is_torch_cuda_available", "is_cuda"):
        return gpu_count > 0
    if fn in ("is_hip", "is_rocm", "is_npu", "is_xpu", "is_hpu", "is_musa", "is_mps") and major is not None:
        return False  # another vendor's platform: an NVIDIA GPU (a capability major) is none of them
    if fn in ("is_torch_bf16_gpu_available", "is_torch_tf32_available"):
        return major is not None and major >= 8
    return None


def _verdict(label: str, fn: str, nums: list[int], ans, expected, gpu: dict | None, cuda: str | None) -> tuple[str, str]:
    """(verdict, meaning) of an answer against what the hardware says it should be."""
    major, minor = (gpu or {}).get("major"), (gpu or {}).get("minor")
    cap = f"{major}.{minor}" if major is not None else None
    arch = (gpu or {}).get("arch") or "no GPU"
    who = f"this GPU is {arch}, capability {cap}" if cap else "this host has no usable GPU"
    m = bool(nums)
    fams = ", ".join(f"sm_{n}" for n in nums)
    if ans == expected:
        other_line = (lambda n: (n // 10 in (10, 11)) if major == 12 else (n // 10 == 12))
        if ans is False and m and major in (10, 11, 12) and any(other_line(n) for n in nums):
            return "gap", (f"{who}, but {label} answers False: code paths guarded by it will not run here "
                           f"({fams} is not {gpu.get('sm')}, although both are Blackwell)")
        if ans is False and m:
            return "agrees", f"code guarded by {fn} ({fams} paths) will not run here"
        if ans is True and m:
            return "agrees", f"code guarded by {fn} runs here"
        return "agrees", ""
    if not isinstance(ans, bool):
        return "mismatch", f"{who}, but {label} answers {ans!r} (the hardware says {expected!r})"
    meaning = (f"{who}, but {label} answers {ans}: code paths guarded by it will "
               f"{'not run' if ans is False else 'run'} here")
    if ans is False and (m or fn.startswith(_FAMILY_HELPERS)) and cuda is not None:
        meaning += f" (such helpers often also require a minimum CUDA; torch here reports CUDA {cuda})"
    return "mismatch", meaning



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
