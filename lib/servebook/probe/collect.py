"""The probe itself: ``probe()`` gathers GPUs, versions, topology, P2P, env and engine helpers (or a profile's what-if)."""

from __future__ import annotations

import json
import platform
import shutil
import socket
import time
from typing import Any

from ..errors import ParameterError
from ..profiles import load_profile
from ..secrets import mask_value
from .common import ENGINE_NAMES, SCHEMA, _now
from .gpus import _finish_gpu, detect_gpus
from .versions import collect_env, detect_p2p, detect_topology, detect_versions
from .engines import _ask_engines, engine_helpers
from .verdicts import _judge_engines, version_tuple


def _profile_gpus(prof: dict, count: int) -> list[dict]:
    major, minor = (int(x) for x in prof["capability"].split("."))
    gpus = []
    for i in range(count):
        g = {"index": i, "host_index": i, "name": prof.get("gpu_name") or prof["name"], "capability": prof["capability"],
             "sm_count": prof.get("sm_count"), "memory_total_mib": None, "memory_gib": prof.get("memory_gib"),
             "memory_bandwidth_tbs": prof.get("memory_bandwidth_tbs"), "power_limit_w": prof.get("tdp_w"),
             "clocks": {}, "mig_mode": None, "ecc_mode": None, "busy": False, "source": "profile"}
        _finish_gpu(g)
        g["memory_gib"] = prof.get("memory_gib")
        gpus.append(g)
    return gpus


def _profile_topology(prof: dict, count: int) -> dict:
    ic = prof.get("interconnect") or {}
    if count < 2:
        return {"source": "profile", "labels": ["GPU0"], "row_labels": ["GPU0"], "matrix": [["X"]], "affinity": {},
                "note": "one GPU"}
    if ic.get("kind") == "NVLink":
        code = {4: "NV18", 5: "NV18", 3: "NV12"}.get(ic.get("generation"), "NV#")
        note = f"assumed: every pair on NVLink gen {ic.get('generation')} ({ic.get('bandwidth_gbs')} GB/s per GPU) as on an HGX baseboard"
    else:
        code = "SYS"
        note = ("assumed worst case for PCIe-only GPUs: pairs across CPU sockets (SYS); on a real host pairs under one "
                "PCIe switch show PIX/PXB and pairs in one socket NODE")
    labels = [f"GPU{i}" for i in range(count)]
    return {"source": "profile", "labels": labels, "row_labels": labels,
            "matrix": [["X" if a == b else code for b in range(count)] for a in range(count)], "affinity": {}, "note": note}


def probe(profile: str | None = None, *, host="local", python: str | dict | None = None,
          engines=ENGINE_NAMES, measure_p2p: bool = True, p2p_bytes: int = 256 * 2**20, gpu_count: int | None = None,
          cuda: str | None = None, timeout: float = 180.0) -> dict:
    """The whole chapter-01 report as a dict (schema in ``servebook.probe.cli``'s docstring).

    ``profile="rtx-pro-6000"`` describes a GPU from data/hardware instead of this host (``source: "profile"``): the
    engines' helpers are then asked with torch's capability faked to the profile's in their subprocess.
    ``gpu_count`` sets the GPU count of a profile (default 8); ``cuda`` the faked ``torch.version.cuda``
    (default: this torch's CUDA if it is at least the profile's minimum, else the profile's minimum).
    """
    for e in engines:
        if e not in ENGINE_NAMES:
            raise ParameterError("engine", e, f"valid engines: {', '.join(ENGINE_NAMES)}")
    if not isinstance(host, str) or host not in ("", "local"):
        return _probe_on_host(host, profile=profile, python=python, engines=engines, measure_p2p=measure_p2p,
                              p2p_bytes=p2p_bytes, gpu_count=gpu_count, cuda=cuda, timeout=timeout)
    warnings: list[str] = []
    t0 = time.perf_counter()
    report: dict[str, Any] = {"schema": SCHEMA, "created": _now(), "host": host or "local", "hostname": socket.gethostname(),
                              "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
                              "source": "measured", "profile": None}
    if profile:
        _from_profile(report, warnings, profile, gpu_count, cuda, engines, python, timeout)
    else:
        _from_this_host(report, warnings, engines, python, timeout, measure_p2p, p2p_bytes)
    for e in report["engines"]:
        if e.get("status") == "import failed":
            warnings.append(f"{e['engine']} {e.get('version') or ''} is installed but failed to import: {e.get('error')}".replace("  ", " "))
        for msg in e.get("mismatches", []) + e.get("gaps", []):
            warnings.append(f"{e['engine']}: {msg}")
    report["warnings"] = warnings
    report["elapsed_s"] = round(time.perf_counter() - t0, 2)
    return mask_value(report)


def _from_profile(report: dict, warnings: list[str], profile: str, gpu_count, cuda, engines, python, timeout) -> None:
    """The report of a profile's GPUs (datasheet facts, nothing measured), the engines' helpers asked under the fake."""
    prof = load_profile(profile)
    count = int(gpu_count or 8)
    report.update(source="profile", profile=prof["profile"], profile_data=prof)
    gpus = _profile_gpus(prof, count)
    versions = detect_versions({}, warnings)
    versions["driver"] = None
    versions["cuda"] = None
    wanted = cuda or prof.get("cuda_version") or "12.8"
    mine = versions.get("torch_cuda")
    if cuda is None and mine and version_tuple(mine) >= version_tuple(wanted):
        wanted = mine
    fake = {"major": gpus[0]["major"], "minor": gpus[0]["minor"], "name": gpus[0]["name"], "count": count,
            "cuda": wanted, "sm_count": prof.get("sm_count"), "memory_gib": prof.get("memory_gib")}
    nvlink = (prof.get("interconnect") or {}).get("kind") == "NVLink"
    report.update(gpu_count=count, gpus=gpus, versions=versions, topology=_profile_topology(prof, count),
                  p2p={"access": [[None if a == b else True for b in range(count)] for a in range(count)] if nvlink else [],
                       "pairs": [], "measured": False, "method": None,
                       "note": "profile: nothing measured; " + ("P2P over NVLink assumed" if nvlink else
                               "PCIe-only GPUs: whether P2P works depends on the host's PCIe topology and IOMMU/ACS settings")},
                  env=collect_env(), tools={"method": "profile"}, fake=fake)
    warnings.insert(0, f"what-if from the profile '{prof['profile']}' (data/hardware/{prof['profile']}.json): datasheet "
                       f"facts, nothing measured; engine helpers were asked with torch faked to capability "
                       f"{prof['capability']} and CUDA {wanted}")
    report["engines"] = engine_helpers(gpus, engines, python, fake=fake, timeout=timeout)


def _from_this_host(report: dict, warnings: list[str], engines, python, timeout, measure_p2p: bool, p2p_bytes: int) -> None:
    """The report of this host, measured: GPUs, versions, topology, P2P, environment, and the engines' own verdicts."""
    asked = _ask_engines(engines, python, None, timeout)  # engines import while the hardware is probed
    gpus, info = detect_gpus(warnings)
    report.update(gpu_count=len(gpus), gpus=gpus, tools={"method": info.get("method"), "errors": info.get("errors", []),
                                                        "nvidia_smi": shutil.which("nvidia-smi")})
    report["versions"] = detect_versions(info, warnings)
    report["topology"] = detect_topology(gpus, warnings)
    report["p2p"] = detect_p2p(gpus, measure=measure_p2p, nbytes=p2p_bytes, warnings=warnings)
    report["env"] = collect_env()
    report["engines"] = _judge_engines(asked(), gpus, None)
    if len({g.get("capability") for g in gpus}) > 1:
        warnings.append("GPUs of different capabilities on one host: engines decide from GPU 0 (" + gpus[0]["capability"] + ")")


def _probe_on_host(host, **kw) -> dict:
    """The probe run on a ``servebook.hosts`` host (ssh://..., a recording, a replay): servebook travels
    with the call and runs under the host's interpreter (``python`` when it is one path), so every command,
    NVML and torch query and engine helper happens there; the report comes back as JSON."""
    from ..hosts import Host, get_host

    h = host if isinstance(host, Host) else get_host(host)
    if h.in_process:
        return probe(host="local", **kw)
    python = kw.pop("python")
    interp = python if isinstance(python, str) and python else None
    kw["engines"] = list(kw["engines"])
    report = h.call("servebook.probe:probe", {**kw, "python": python}, python=interp,
                    timeout=kw["timeout"] * 2 + 120, label="probe " + json.dumps({**kw, "python": python}, sort_keys=True))
    report["host"] = h.spec if not h.spec.startswith("replay:") else getattr(h, "recorded_host", None) or h.spec
    return mask_value(report)
