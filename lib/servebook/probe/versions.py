"""Versions (driver, CUDA, NCCL, packages), topology and measured P2P, and the environment variables that matter."""

from __future__ import annotations

import ctypes
import importlib.metadata as _md
import os
import platform
import re
import sys
from typing import Any

from ..secrets import mask_env
from .common import ENV_PREFIXES, PACKAGES, _run
from .parse import parse_topo_matrix, parse_topo_p2p
from .gpus import _torch_cuda


def _nccl_loaded() -> dict:
    """The NCCL shared library this process actually loaded (after torch touched NCCL), and its version."""
    paths = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "libnccl" in line:
                    p = line.split()[-1]
                    if p not in paths:
                        paths.append(p)
    except OSError:
        return {"path": None, "version": None, "note": "/proc/self/maps is not readable here"}
    if not paths:
        return {"path": None, "version": None, "note": "no libnccl mapped in this process (NCCL linked statically into torch, or not used)"}
    out = {"path": paths[0], "version": None}
    try:
        lib = ctypes.CDLL(paths[0])
        v = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(v)) == 0:
            code = v.value
            major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
            out["version"] = f"{major}.{rest // 100}.{rest % 100}"
            out["code"] = code
    except Exception as exc:  # noqa: BLE001
        out["note"] = f"ncclGetVersion failed: {exc}"
    return out


def _pkg_versions(names=PACKAGES) -> dict:
    out = {}
    for n in names:
        try:
            out[n] = _md.version(n)
        except _md.PackageNotFoundError:
            out[n] = None
        except Exception as exc:  # noqa: BLE001
            out[n] = f"error: {exc}"
    return out


def detect_versions(info: dict | None = None, warnings: list[str] | None = None) -> dict:
    """Driver, CUDA (driver, torch runtime, nvcc toolkit), torch and its NCCL, the NCCL actually loaded, packages."""
    warnings = warnings if warnings is not None else []
    info = info or {}
    v: dict[str, Any] = {"python": platform.python_version(), "python_executable": sys.executable,
                         "driver": info.get("driver_version"), "cuda": info.get("cuda_version"),
                         "cuda_runtime": None, "cuda_toolkit": None, "torch": None, "torch_cuda": None,
                         "nccl": None, "nccl_loaded": None, "packages": _pkg_versions()}
    rc, out, _ = _run(["nvcc", "--version"], timeout=15)
    if rc == 0:
        m = re.search(r"release ([0-9.]+)", out)
        v["cuda_toolkit"] = m.group(1) if m else None
    try:
        import torch

        v["torch"] = torch.__version__
        v["torch_cuda"] = torch.version.cuda
        v["cuda_runtime"] = torch.version.cuda
        try:
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception as exc:  # noqa: BLE001 - CPU builds have no NCCL
            v["nccl_error"] = f"{type(exc).__name__}: {exc}"
        if torch.cuda.is_available():
            try:
                rt = ctypes.c_int(0)
                lib = ctypes.CDLL("libcudart.so" + (f".{torch.version.cuda.split('.')[0]}" if torch.version.cuda else ""))
                if lib.cudaRuntimeGetVersion(ctypes.byref(rt)) == 0:
                    v["cuda_runtime"] = f"{rt.value // 1000}.{(rt.value % 1000) // 10}"
            except OSError:
                pass
        v["nccl_loaded"] = _nccl_loaded()
    except Exception as exc:  # noqa: BLE001
        v["torch_error"] = f"{type(exc).__name__}: {exc}"
    loaded = (v.get("nccl_loaded") or {}).get("version")
    if loaded and v.get("nccl") and loaded != v["nccl"]:
        warnings.append(f"torch was built against NCCL {v['nccl']} but this process loaded NCCL {loaded} from "
                        f"{v['nccl_loaded']['path']}: the loaded one is what runs")
    return v


# ---------------------------------------------------------------------------------------------
# topology and P2P
# ---------------------------------------------------------------------------------------------
def _restrict_topology(topo: dict, gpus: list[dict]) -> dict:
    """Keep the rows/columns of visible GPUs (and NICs) when CUDA_VISIBLE_DEVICES hides some."""
    keep_gpu = {f"GPU{g['host_index']}" for g in gpus if "host_index" in g}
    if not keep_gpu or all(lbl in keep_gpu for lbl in topo["labels"] if lbl.startswith("GPU")):
        return topo
    idx = [k for k, lbl in enumerate(topo["labels"]) if not lbl.startswith("GPU") or lbl in keep_gpu]
    rows = [k for k, lbl in enumerate(topo["row_labels"]) if not lbl.startswith("GPU") or lbl in keep_gpu]
    topo = dict(topo)
    topo["matrix"] = [[topo["matrix"][r][c] if c < len(topo["matrix"][r]) else None for c in idx] for r in rows]
    topo["labels"] = [topo["labels"][c] for c in idx]
    topo["row_labels"] = [topo["row_labels"][r] for r in rows]
    topo["affinity"] = {k: v for k, v in topo["affinity"].items() if not k.startswith("GPU") or k in keep_gpu}
    topo["note"] = "host GPU numbering (GPU<host index>); CUDA_VISIBLE_DEVICES hides the others"
    return topo


def detect_topology(gpus: list[dict], warnings: list[str] | None = None) -> dict:
    """``nvidia-smi topo -m`` and ``topo -p2p r`` parsed; ``{'source', 'matrix', 'labels', 'affinity', ...}``."""
    warnings = warnings if warnings is not None else []
    if not gpus:
        return {"source": None, "labels": [], "matrix": [], "affinity": {}, "note": "no GPU"}
    rc, out, err = _run(["nvidia-smi", "topo", "-m"])
    if rc != 0:
        warnings.append(f"nvidia-smi topo -m failed ({(err or out).strip()[:200] or rc}); the link matrix is unknown")
        return {"source": None, "labels": [], "matrix": [], "affinity": {}, "note": (err or out).strip()[:300]}
    topo = parse_topo_matrix(out)
    topo = _restrict_topology(topo, gpus)
    topo["source"] = "nvidia-smi topo -m"
    topo["raw"] = out
    rc, out2, _ = _run(["nvidia-smi", "topo", "-p2p", "r"])
    if rc == 0:
        topo["p2p_read"] = parse_topo_p2p(out2)
    return topo


def _p2p_measure(torch, i: int, j: int, nbytes: int, iters: int) -> dict:
    src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
    tiny_s = torch.empty(4, dtype=torch.uint8, device=f"cuda:{i}")
    tiny_d = torch.empty(4, dtype=torch.uint8, device=f"cuda:{j}")
    with torch.cuda.device(i):
        for _ in range(3):  # warm-up: peer mappings, first-copy costs
            dst.copy_(src, non_blocking=True)
            tiny_d.copy_(tiny_s, non_blocking=True)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        torch.cuda.synchronize(j)
        ms = start.elapsed_time(end)
        n_small = 200
        start.record()
        for _ in range(n_small):
            tiny_d.copy_(tiny_s, non_blocking=True)
        end.record()
        end.synchronize()
        lat_ms = start.elapsed_time(end)
    del src, dst, tiny_s, tiny_d
    return {"src": i, "dst": j, "bytes": nbytes, "iters": iters, "time_ms": round(ms, 3),
            "bandwidth_gbs": round(nbytes * iters / (ms / 1e3) / 1e9, 1),
            "latency_us": round(lat_ms * 1e3 / n_small, 2)}


P2P_METHOD = ("unidirectional copy dst.copy_(src) of a {mib} MiB uint8 tensor from cuda:i to cuda:j, {iters} copies after 3 warm-ups, "
              "timed with CUDA events on cuda:i's current stream (GB/s = bytes x copies / elapsed, 1 GB = 1e9 B); "
              "latency = mean of 200 back-to-back 4-byte copies timed the same way (includes launch cost)")


def detect_p2p(gpus: list[dict], measure: bool = True, nbytes: int = 256 * 2**20, iters: int = 20,
               warnings: list[str] | None = None) -> dict:
    """P2P access matrix (torch.cuda.can_device_access_peer) and, with >= 2 GPUs, measured copy bandwidth/latency per pair."""
    warnings = warnings if warnings is not None else []
    res: dict[str, Any] = {"access": [], "pairs": [], "method": None, "measured": False, "note": None}
    if len(gpus) < 2:
        res["note"] = "fewer than 2 GPUs: no GPU-to-GPU path to test" if gpus else "no GPU"
        return res
    torch, why = _torch_cuda()
    if torch is None:
        res["note"] = f"P2P not tested: {why}"
        return res
    n = torch.cuda.device_count()
    res["access"] = [[(None if a == b else bool(torch.cuda.can_device_access_peer(a, b))) for b in range(n)] for a in range(n)]
    if any((g.get("mig_mode") or "").lower() == "enabled" for g in gpus):
        res["note"] = "MIG mode: P2P copies between slices are not meaningful; not measured"
        return res
    if not measure:
        res["note"] = "measurement skipped (measure=False)"
        return res
    res["method"] = P2P_METHOD.format(mib=nbytes // 2**20, iters=iters)
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            try:
                row = _p2p_measure(torch, a, b, nbytes, iters)
                row["peer_access"] = res["access"][a][b]
                res["pairs"].append(row)
            except Exception as exc:  # noqa: BLE001 - out of memory on a busy GPU, etc.
                res["pairs"].append({"src": a, "dst": b, "error": f"{type(exc).__name__}: {exc}"})
                warnings.append(f"P2P copy GPU{a}->GPU{b} failed: {type(exc).__name__}: {exc}")
    res["measured"] = any("bandwidth_gbs" in p for p in res["pairs"])
    return res


# ---------------------------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------------------------
def collect_env(environ: dict | None = None, prefixes=ENV_PREFIXES) -> dict:
    """The variables that steer NCCL, CUDA, torch and the engines, secrets masked (``secrets.mask_env``)."""
    environ = dict(os.environ if environ is None else environ)
    picked = {k: v for k, v in environ.items() if k.startswith(prefixes)}
    return dict(sorted(mask_env(picked).items()))
