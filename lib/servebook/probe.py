"""Chapter 01: what this host is, and what the engines conclude about it.

    report = probe()                         # this host: GPUs, versions, topology, P2P, env, engine helpers
    report = probe(profile="rtx-pro-6000")   # the same report for a GPU you do not have (source: "profile")
    print(format_report(report))             # a readable table
    describe_host(report)                    # "What this host is", one paragraph generated from the data
    findings(report)                         # the engine answers that disagree with the hardware, in words

Truth comes from the hardware (NVML, nvidia-smi as fallback, torch for SM counts and P2P), and each
engine's conclusions come from the engine's own helpers, called in the engine's own interpreter.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import importlib.metadata as _md
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .errors import ParameterError
from .profiles import load_profile, sm_family
from .secrets import mask_env, mask_value

__all__ = [
    "SCHEMA",
    "ENGINE_NAMES",
    "PACKAGES",
    "ENV_PREFIXES",
    "probe",
    "detect_gpus",
    "detect_versions",
    "detect_topology",
    "detect_p2p",
    "collect_env",
    "engine_helpers",
    "judge_helper",
    "parse_query_csv",
    "parse_topo_matrix",
    "parse_topo_p2p",
    "parse_smi_xml",
    "link_rank",
    "describe_link",
    "format_report",
    "describe_host",
    "findings",
    "record",
]

SCHEMA = "servebook.probe/1"
ENGINE_NAMES = ("transformers", "sglang", "vllm")
PACKAGES = ("torch", "sglang", "vllm", "transformers", "flashinfer-python", "flashinfer", "sgl-kernel", "flash-attn",
            "flash-attn-3", "triton", "xformers", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-ml-py", "deep-gemm")
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "SGLANG_", "VLLM_", "HF_", "NVSHMEM_")
_MARK = "@@SERVEBOOK@@"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
    """Run a command; (rc, stdout, stderr); rc 127 when it does not exist, 124 on timeout."""
    if not shutil.which(cmd[0]) and not os.path.exists(cmd[0]):
        return 127, "", f"{cmd[0]}: not found"
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(cmd)} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return 126, "", f"{cmd[0]}: {exc}"
    return res.returncode, res.stdout, res.stderr


# ---------------------------------------------------------------------------------------------
# parsers for nvidia-smi output (pure functions; tests feed them real captured outputs)
# ---------------------------------------------------------------------------------------------
def _num(value: str) -> Any:
    v = value.strip()
    if v == "" or v.startswith("[") or v in ("N/A", "Not Supported"):
        return None
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def parse_query_csv(text: str, fields: list[str]) -> list[dict]:
    """``nvidia-smi --query-gpu=F1,F2 --format=csv,noheader,nounits`` -> one dict per GPU.

    A header line, if present, is skipped. ``[N/A]``/``[Not Supported]`` become None, numbers become numbers.
    """
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.lower().startswith(fields[0].lower()):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        rows.append({f: (_num(v) if f not in ("name", "uuid", "pci.bus_id", "driver_version", "compute_cap") else
                         (None if v.startswith("[") or v == "N/A" else v)) for f, v in zip(fields, parts)})
    return rows


def _table_lines(text: str) -> tuple[list[str], list[list[str]], list[str]]:
    """Split an nvidia-smi topo table into (header cells, rows of cells, lines after the table)."""
    lines = [_ANSI.sub("", ln.rstrip("\n")) for ln in text.splitlines()]
    # the header's first tab-separated cell is blank; each row's first cell is its label (GPU0, NIC0, ...)
    header_i = next((i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln) and ln.split("\t")[0].strip() == ""), None)
    if header_i is None:
        return [], [], lines
    header = [c.strip() for c in lines[header_i].split("\t") if c.strip()]
    rows, end = [], len(lines)
    for j in range(header_i + 1, len(lines)):
        ln = lines[j]
        if not ln.strip():
            end = j
            break
        cells = [c.strip() for c in ln.split("\t")]
        while cells and cells[0] == "":
            cells.pop(0)
        rows.append(cells)
    return header, rows, lines[end:]


def parse_topo_matrix(text: str) -> dict:
    """``nvidia-smi topo -m`` -> ``{'labels', 'matrix', 'affinity', 'legend', 'nics'}``.

    ``labels`` are the device columns (GPU0.., NIC0..); ``matrix[i][j]`` the link code (X, NV18, PIX,
    PXB, PHB, NODE, SYS); ``affinity[label]`` holds CPU affinity, NUMA affinity and GPU NUMA ID.
    """
    header, rows, rest = _table_lines(text)
    labels = [h for h in header if re.fullmatch(r"(GPU|NIC|mlx\S*)\d*", h) or re.fullmatch(r"(GPU|NIC)\d+", h)]
    extra = [h for h in header if h not in labels]
    matrix, affinity = [], {}
    for cells in rows:
        if not cells:
            continue
        label, values = cells[0], cells[1:]
        links = [v for v in values[: len(labels)]]
        tail = [v for v in values[len(labels):] if v != ""]
        matrix.append(links)
        if label.startswith("GPU"):
            affinity[label] = {name.lower().replace(" ", "_"): (tail[k] if k < len(tail) else None) for k, name in enumerate(extra)}
        else:
            affinity.setdefault(label, {})
    legend, nics = {}, {}
    for ln in rest:
        m = re.match(r"\s*([A-Z]+#?)\s*=\s*(.+)", ln)
        if m:
            legend[m.group(1)] = m.group(2).strip()
        m = re.match(r"\s*(NIC\d+)\s*:\s*(\S+)", ln)
        if m:
            nics[m.group(1)] = m.group(2)
    row_labels = [cells[0] for cells in rows if cells]
    return {"labels": labels, "row_labels": row_labels, "matrix": matrix, "affinity": affinity, "legend": legend, "nics": nics}


def parse_topo_p2p(text: str) -> dict:
    """``nvidia-smi topo -p2p r|w|n|a`` -> ``{'labels', 'matrix', 'legend'}`` with codes X, OK, CNS, GNS, TNS, NS, U."""
    header, rows, rest = _table_lines(text)
    labels = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    matrix = [[v for v in cells[1: 1 + len(labels)]] for cells in rows if cells and cells[0].startswith("GPU")]
    legend = {}
    for ln in rest:
        m = re.match(r"\s*([A-Z]+)\s*=\s*(.+)", ln)
        if m:
            legend[m.group(1)] = m.group(2).strip()
    return {"labels": labels, "matrix": matrix, "legend": legend}


def _xml_text(node, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    if found is None or found.text is None:
        return None
    t = found.text.strip()
    return None if t in ("N/A", "") or t.startswith("[") else t


def _xml_num(node, path: str) -> float | None:
    t = _xml_text(node, path)
    if t is None:
        return None
    m = re.match(r"([0-9.]+)", t)
    return float(m.group(1)) if m else None


def parse_smi_xml(text: str) -> dict:
    """``nvidia-smi -q -x`` -> ``{'driver_version', 'cuda_version', 'gpus': [...]}`` (the fallback when NVML is missing)."""
    root = ET.fromstring(text)
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        mem = _xml_num(g, "fb_memory_usage/total")
        gpus.append({
            "index": int(_xml_text(g, "minor_number") or i) if (_xml_text(g, "minor_number") or "").isdigit() else i,
            "name": _xml_text(g, "product_name"),
            "uuid": _xml_text(g, "uuid"),
            "pci_bus_id": g.get("id") or _xml_text(g, "pci/pci_bus_id"),
            "memory_total_mib": int(mem) if mem is not None else None,
            "memory_used_mib": _xml_num(g, "fb_memory_usage/used"),
            "utilization_pct": _xml_num(g, "utilization/gpu_util"),
            "mig_mode": _xml_text(g, "mig_mode/current_mig"),
            "ecc_mode": _xml_text(g, "ecc_mode/current_ecc"),
            "power_limit_w": _xml_num(g, "gpu_power_readings/current_power_limit") or _xml_num(g, "power_readings/power_limit"),
            "clocks": {
                "sm_mhz": _xml_num(g, "clocks/sm_clock"),
                "mem_mhz": _xml_num(g, "clocks/mem_clock"),
                "max_sm_mhz": _xml_num(g, "max_clocks/sm_clock"),
                "max_mem_mhz": _xml_num(g, "max_clocks/mem_clock"),
            },
            "processes": len(g.findall("processes/process_info")),
            "pcie_gen_max": _xml_text(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
            "pcie_width_max": _xml_text(g, "pci/pci_gpu_link_info/link_widths/max_link_width"),
        })
    return {"driver_version": _xml_text(root, "driver_version"), "cuda_version": _xml_text(root, "cuda_version"), "gpus": gpus}


_LINK_RANK = {"X": None, "SYS": 0, "NODE": 1, "PHB": 2, "PXB": 3, "PIX": 4}
_LINK_WORDS = {
    "SYS": "PCIe across CPU sockets (through the SMP interconnect)",
    "NODE": "PCIe through host bridges within one NUMA node",
    "PHB": "PCIe through one host bridge (the CPU)",
    "PXB": "PCIe through several PCIe switches, not the CPU",
    "PIX": "PCIe through at most one PCIe switch",
}


def link_rank(code: str | None) -> float | None:
    """A number for a heatmap: SYS 0 < NODE 1 < PHB 2 < PXB 3 < PIX 4 < NV# (5 + links/100); None for X/unknown."""
    if not code:
        return None
    code = code.strip()
    m = re.fullmatch(r"NV(\d+)", code)
    if m:
        return 5 + int(m.group(1)) / 100
    return _LINK_RANK.get(code)


def describe_link(code: str | None) -> str:
    if not code:
        return "unknown"
    m = re.fullmatch(r"NV(\d+)", code.strip())
    if m:
        return f"NVLink, {m.group(1)} bonded links"
    return _LINK_WORDS.get(code.strip(), "self" if code.strip() == "X" else code)


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------
_QUERY = ["index", "name", "uuid", "pci.bus_id", "compute_cap", "memory.total", "memory.used", "utilization.gpu",
          "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.limit", "mig.mode.current",
          "ecc.mode.current", "driver_version"]


def _visible_selector() -> list[str] | None:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None
    return [s.strip() for s in env.split(",") if s.strip()]


def _apply_visible(gpus: list[dict], warnings: list[str]) -> list[dict]:
    sel = _visible_selector()
    if sel is None:
        return gpus
    chosen = []
    for s in sel:
        if s.lstrip("-").isdigit():
            n = int(s)
            if n < 0:
                break  # CUDA stops at the first invalid entry
            match = [g for g in gpus if g.get("host_index") == n]
        elif s.startswith("GPU-"):
            match = [g for g in gpus if (g.get("uuid") or "").startswith(s)]
        else:
            warnings.append(f"CUDA_VISIBLE_DEVICES entry {s!r} (MIG or unknown form) is not resolved here; all GPUs are listed")
            return gpus
        if not match:
            break
        chosen.extend(m for m in match if m not in chosen)
    if len(chosen) != len(gpus):
        warnings.append(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}: reporting {len(chosen)} of the "
                        f"{len(gpus)} GPUs on this host (as CUDA programs here see them)")
    for i, g in enumerate(chosen):
        g["index"] = i
    return chosen


def _nvml_gpus() -> tuple[list[dict], dict]:
    import pynvml as nv  # nvidia-ml-py

    nv.nvmlInit()
    try:
        def safe(fn, *a):
            try:
                return fn(*a)
            except Exception:  # noqa: BLE001 - NVML answers NotSupported per field
                return None

        def s(v):
            return v.decode() if isinstance(v, bytes) else v

        info = {"driver_version": s(safe(nv.nvmlSystemGetDriverVersion))}
        cv = safe(nv.nvmlSystemGetCudaDriverVersion_v2) or safe(nv.nvmlSystemGetCudaDriverVersion)
        info["cuda_version"] = f"{cv // 1000}.{(cv % 1000) // 10}" if cv else None
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            cap = safe(nv.nvmlDeviceGetCudaComputeCapability, h)
            mem = safe(nv.nvmlDeviceGetMemoryInfo, h)
            util = safe(nv.nvmlDeviceGetUtilizationRates, h)
            mig = safe(nv.nvmlDeviceGetMigMode, h)
            ecc = safe(nv.nvmlDeviceGetEccMode, h)
            plim = safe(nv.nvmlDeviceGetPowerManagementLimit, h)
            procs = safe(nv.nvmlDeviceGetComputeRunningProcesses, h)
            pci = safe(nv.nvmlDeviceGetPciInfo, h)
            clk = lambda kind, which=None: safe(nv.nvmlDeviceGetClockInfo, h, kind) if which is None else safe(nv.nvmlDeviceGetMaxClockInfo, h, kind)  # noqa: E731
            gpus.append({
                "host_index": i,
                "name": s(safe(nv.nvmlDeviceGetName, h)),
                "uuid": s(safe(nv.nvmlDeviceGetUUID, h)),
                "pci_bus_id": s(pci.busId) if pci is not None else None,
                "capability": f"{cap[0]}.{cap[1]}" if cap else None,
                "memory_total_mib": int(mem.total // 2**20) if mem else None,
                "memory_used_mib": int(mem.used // 2**20) if mem else None,
                "utilization_pct": util.gpu if util else None,
                "clocks": {"sm_mhz": clk(nv.NVML_CLOCK_SM), "mem_mhz": clk(nv.NVML_CLOCK_MEM),
                           "max_sm_mhz": clk(nv.NVML_CLOCK_SM, 1), "max_mem_mhz": clk(nv.NVML_CLOCK_MEM, 1)},
                "power_limit_w": plim / 1000 if plim else None,
                "mig_mode": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
                "ecc_mode": None if ecc is None else ("Enabled" if ecc[0] else "Disabled"),
                "processes": len(procs) if procs is not None else None,
                "pcie_gen_max": safe(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width_max": safe(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                "source": "nvml",
            })
        return gpus, info
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _smi_gpus(warnings: list[str]) -> tuple[list[dict], dict]:
    rc, out, err = _run(["nvidia-smi", f"--query-gpu={','.join(_QUERY)}", "--format=csv,noheader,nounits"])
    fields = list(_QUERY)
    if rc != 0 and "compute_cap" in (err + out):  # older drivers do not know this field
        fields.remove("compute_cap")
        rc, out, err = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    if rc != 0:
        raise RuntimeError((err or out).strip().splitlines()[-1] if (err or out).strip() else f"nvidia-smi exited {rc}")
    gpus, info = [], {}
    for row in parse_query_csv(out, fields):
        info["driver_version"] = row.get("driver_version")
        gpus.append({
            "host_index": int(row["index"]) if row.get("index") is not None else len(gpus),
            "name": row.get("name"), "uuid": row.get("uuid"), "pci_bus_id": row.get("pci.bus_id"),
            "capability": row.get("compute_cap"),
            "memory_total_mib": row.get("memory.total"), "memory_used_mib": row.get("memory.used"),
            "utilization_pct": row.get("utilization.gpu"),
            "clocks": {"sm_mhz": row.get("clocks.sm"), "mem_mhz": row.get("clocks.mem"),
                       "max_sm_mhz": row.get("clocks.max.sm"), "max_mem_mhz": row.get("clocks.max.mem")},
            "power_limit_w": row.get("power.limit"), "mig_mode": row.get("mig.mode.current"),
            "ecc_mode": row.get("ecc.mode.current"), "processes": None, "source": "nvidia-smi",
        })
    rc, xml, _ = _run(["nvidia-smi", "-q", "-x"])
    if rc == 0:
        try:
            parsed = parse_smi_xml(xml)
            info["cuda_version"] = parsed.get("cuda_version")
            for g, x in zip(gpus, parsed["gpus"]):
                g["processes"] = x.get("processes")
        except ET.ParseError as exc:
            warnings.append(f"nvidia-smi -q -x gave unreadable XML ({exc}); CUDA version and process counts unknown")
    return gpus, info


def _torch_cuda():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return None, f"torch cannot be imported: {type(exc).__name__}: {exc}"
    try:
        if not torch.cuda.is_available():
            built = torch.version.cuda
            return None, ("torch was built without CUDA (a CPU-only build)" if not built else
                          f"torch (CUDA {built}) sees no usable GPU")
        return torch, None
    except Exception as exc:  # noqa: BLE001
        return None, f"torch.cuda failed: {type(exc).__name__}: {exc}"


def _finish_gpu(g: dict) -> dict:
    cap = g.get("capability")
    if cap:
        major, minor = (int(x) for x in str(cap).split("."))
        fam = sm_family(major, minor)
        g.update({"major": major, "minor": minor, "sm": fam["sm"], "arch": fam["arch"], "family": fam["label"],
                  "family_names": fam["names"], "datacenter": fam["datacenter"]})
    else:
        g.update({"major": None, "minor": None, "sm": None, "arch": None, "family": None, "family_names": [], "datacenter": None})
    mib = g.get("memory_total_mib")
    g["memory_gib"] = round(mib / 1024, 1) if mib else g.get("memory_gib")
    return g


def detect_gpus(warnings: list[str] | None = None) -> tuple[list[dict], dict]:
    """This host's GPUs (NVML, else nvidia-smi, else torch) and ``{'driver_version', 'cuda_version', 'method'}``.

    No GPU gives ``([], {...})`` and a warning saying so; nothing here raises.
    """
    warnings = warnings if warnings is not None else []
    gpus, info, errors = [], {}, []
    try:
        gpus, info = _nvml_gpus()
        info["method"] = "nvml"
    except Exception as exc:  # noqa: BLE001 - NVML missing / driver not loaded
        errors.append(f"NVML: {type(exc).__name__}: {exc}")
        try:
            gpus, info = _smi_gpus(warnings)
            info["method"] = "nvidia-smi"
        except Exception as exc2:  # noqa: BLE001
            errors.append(f"nvidia-smi: {exc2}")
            info = {"method": None}
    gpus = _apply_visible(gpus, warnings)
    torch, why = _torch_cuda()
    if torch is not None:
        n = torch.cuda.device_count()
        if not gpus:  # NVML and nvidia-smi both failed but CUDA works (containers without the tools)
            info["method"] = "torch"
            for i in range(n):
                p = torch.cuda.get_device_properties(i)
                gpus.append({"host_index": i, "index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                             "memory_total_mib": int(p.total_memory // 2**20), "clocks": {}, "source": "torch"})
        for i, g in enumerate(gpus[:n]):
            try:
                p = torch.cuda.get_device_properties(i)
                g["sm_count"] = p.multi_processor_count
                if not g.get("capability"):
                    g["capability"] = f"{p.major}.{p.minor}"
                elif g["capability"] != f"{p.major}.{p.minor}":
                    warnings.append(f"GPU {i}: {info.get('method')} says capability {g['capability']} but torch says {p.major}.{p.minor}")
            except Exception as exc:  # noqa: BLE001 - a busy/faulty device
                warnings.append(f"GPU {i}: torch could not read its properties ({type(exc).__name__}: {exc})")
    for i, g in enumerate(gpus):
        g.setdefault("index", i)
        g.setdefault("sm_count", None)
        _finish_gpu(g)
        if (g.get("mig_mode") or "").lower() == "enabled":
            warnings.append(f"GPU {g['index']} ({g['name']}) is in MIG mode: CUDA programs see MIG slices, not the whole GPU; "
                            "P2P and NVLink do not work between slices, and engine benchmarks measure a slice")
        busy = (g.get("processes") or 0) > 0 or (g.get("utilization_pct") or 0) >= 10
        g["busy"] = bool(busy)
        if busy:
            warnings.append(f"GPU {g['index']} ({g['name']}) is busy ({g.get('processes') or 0} compute processes, "
                            f"{g.get('utilization_pct') or 0}% utilisation): timings on it will be disturbed")
    if not gpus:
        reasons = "; ".join(errors + ([why] if why else []))
        warnings.append(f"no NVIDIA GPU found on this host ({reasons}); the book continues without GPU measurements")
    elif why and torch is None:
        warnings.append(f"GPUs are present but {why}: SM counts and P2P cannot be measured from this interpreter")
    info["errors"] = errors
    return gpus, info


# ---------------------------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# what the engines conclude (each in its own interpreter)
# ---------------------------------------------------------------------------------------------
_ENGINE_SCRIPT = r'''
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
            mod = importlib.import_module(modname)
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
'''


def _engine_subprocess(name: str, python: str, fake: dict | None, timeout: float) -> dict:
    base = {"engine": name, "python": python, "status": "error", "version": None, "helpers": [], "error": None}
    if not (os.path.exists(python) or shutil.which(python)):
        base["error"] = f"no Python interpreter at {python}; pass python= (CLI: --engine-python) with the interpreter where {name} is installed"
        return base
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    if fake:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a what-if must not touch a real GPU here
    try:
        res = subprocess.run([python, "-c", _ENGINE_SCRIPT, json.dumps({"engine": name, "fake": fake})],
                             capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        base["error"] = f"{name} did not answer within {timeout:.0f} s (importing it hung?)"
        return base
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        base["status"] = "import failed"
        base["error"] = f"the {name} check crashed (exit {res.returncode}): " + " | ".join(tail)[-500:]
        return base
    return json.loads(line[len(_MARK):])


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


def _interp(python, name: str) -> str:
    if isinstance(python, dict):
        return python.get(name) or sys.executable
    return python or sys.executable


def _ask_engines(engines, python, fake, timeout):
    """Start one subprocess per engine (in threads); returns a function that waits for the raw answers."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(engines)))
    futs = [pool.submit(_engine_subprocess, n, _interp(python, n), fake, timeout) for n in engines]
    pool.shutdown(wait=False)
    return lambda: [f.result() for f in futs]


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


def engine_helpers(gpus: list[dict], engines=ENGINE_NAMES, python: str | dict | None = None,
                   fake: dict | None = None, timeout: float = 180.0) -> list[dict]:
    """Each engine's own capability helpers, called in its interpreter, each judged against the hardware truth."""
    return _judge_engines(_ask_engines(engines, python, fake, timeout)(), gpus, fake)


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
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
    """The whole chapter-01 report as a dict (schema in ``servebook.probe_cli``'s docstring).

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
    for e in engines:
        if e not in ENGINE_NAMES:
            raise ParameterError("engine", e, f"valid engines: {', '.join(ENGINE_NAMES)}")
    warnings: list[str] = []
    t0 = time.perf_counter()
    report: dict[str, Any] = {"schema": SCHEMA, "created": _now(), "host": host or "local", "hostname": socket.gethostname(),
                              "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
                              "source": "measured", "profile": None}
    if profile:
        prof = load_profile(profile)
        count = int(gpu_count or 8)
        report.update(source="profile", profile=prof["profile"], profile_data=prof)
        gpus = _profile_gpus(prof, count)
        versions = detect_versions({}, warnings)
        versions["driver"] = None
        versions["cuda"] = None
        wanted = cuda or prof.get("cuda_version") or "12.8"
        mine = versions.get("torch_cuda")
        if cuda is None and mine and _vtuple(mine) >= _vtuple(wanted):
            wanted = mine
        fake = {"major": gpus[0]["major"], "minor": gpus[0]["minor"], "name": gpus[0]["name"], "count": count,
                "cuda": wanted, "sm_count": prof.get("sm_count"), "memory_gib": prof.get("memory_gib")}
        report.update(gpu_count=count, gpus=gpus, versions=versions, topology=_profile_topology(prof, count),
                      p2p={"access": [[None if a == b else True for b in range(count)] for a in range(count)] if
                           (prof.get("interconnect") or {}).get("kind") == "NVLink" else [],
                           "pairs": [], "measured": False, "method": None,
                           "note": "profile: nothing measured; " + ("P2P over NVLink assumed" if (prof.get("interconnect") or {}).get(
                               "kind") == "NVLink" else "PCIe-only GPUs: whether P2P works depends on the host's PCIe topology and IOMMU/ACS settings")},
                      env=collect_env(), tools={"method": "profile"}, fake=fake)
        warnings.insert(0, f"what-if from the profile '{prof['profile']}' (data/hardware/{prof['profile']}.json): datasheet "
                           f"facts, nothing measured; engine helpers were asked with torch faked to capability "
                           f"{prof['capability']} and CUDA {wanted}")
        report["engines"] = engine_helpers(gpus, engines, python, fake=fake, timeout=timeout)
    else:
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
    for e in report["engines"]:
        if e.get("status") == "import failed":
            warnings.append(f"{e['engine']} {e.get('version') or ''} is installed but failed to import: {e.get('error')}".replace("  ", " "))
        for msg in e.get("mismatches", []) + e.get("gaps", []):
            warnings.append(f"{e['engine']}: {msg}")
    report["warnings"] = warnings
    report["elapsed_s"] = round(time.perf_counter() - t0, 2)
    return mask_value(report)


def _probe_on_host(host, **kw) -> dict:
    """The probe run on a ``servebook.hosts`` host (ssh://..., a recording, a replay): servebook travels
    with the call and runs under the host's interpreter (``python`` when it is one path), so every command,
    NVML and torch query and engine helper happens there; the report comes back as JSON."""
    from .hosts import Host, get_host

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


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(v))[:3])


# ---------------------------------------------------------------------------------------------
# words and tables
# ---------------------------------------------------------------------------------------------
def describe_host(report: dict) -> str:
    """'What this host is': one paragraph generated from the report."""
    src = "This profile describes" if report.get("source") == "profile" else "This host has"
    gpus = report.get("gpus") or []
    v = report.get("versions") or {}
    if not gpus:
        torch_s = f"torch {v.get('torch')}" + (f" (built for CUDA {v['torch_cuda']})" if v.get("torch_cuda") else " (a CPU-only build)") if v.get("torch") else "no torch"
        return (f"This host ({report.get('hostname')}) has no NVIDIA GPU that NVML, nvidia-smi or torch can see, so there is no compute "
                f"capability to reason about: the engines' GPU paths cannot run here. It runs Python {v.get('python')} with {torch_s}. "
                "The book continues on the CPU; GPU chapters say what they skip.")
    g = gpus[0]
    names = {x["name"] for x in gpus}
    parts = [f"{src} {len(gpus)} x {', '.join(sorted(names))}: compute capability {g['capability']} ({g['family']})"]
    mem = f"{g['memory_gib']} GiB" if g.get("memory_gib") else "unknown memory"
    parts[-1] += f", {mem} each" + (f", {g['sm_count']} SMs" if g.get("sm_count") else "") + "."
    if g.get("major") in (10, 11, 12):
        if g["major"] == 12:
            parts.append("It is a Blackwell GPU of the workstation/consumer line (sm_12x), not the datacenter line (sm_10x): "
                         "a check for major == 10 does not include it, and kernels built only for sm_100a do not run on it.")
        elif g["major"] == 10:
            parts.append(f"It is a datacenter Blackwell GPU ({g['sm']}): checks for major == 10 include it; checks for exactly "
                         "(10, 0) miss sm_103.")
    topo = report.get("topology") or {}
    codes = [c for row in topo.get("matrix", []) for c in row if c and c != "X" and not str(c).startswith("NIC")]
    gpu_codes = []
    labels = topo.get("labels", [])
    for r, row in enumerate(topo.get("matrix", [])):
        rl = (topo.get("row_labels") or labels)[r] if r < len(topo.get("row_labels") or labels) else ""
        for c, code in enumerate(row):
            if c < len(labels) and rl.startswith("GPU") and labels[c].startswith("GPU") and code != "X":
                gpu_codes.append(code)
    if len(gpus) >= 2 and gpu_codes:
        worst = min(gpu_codes, key=lambda c: link_rank(c) if link_rank(c) is not None else -1)
        best = max(gpu_codes, key=lambda c: link_rank(c) if link_rank(c) is not None else -1)
        link = f"GPUs are linked by {describe_link(best)} ({best})" if best == worst else \
            f"GPU pairs range from {describe_link(best)} ({best}) down to {describe_link(worst)} ({worst})"
        parts.append(link + (" (assumed from the datasheet)" if topo.get("source") == "profile" else "") + ".")
    elif len(gpus) >= 2 and not codes:
        parts.append("The GPU-to-GPU links are unknown (nvidia-smi topo -m did not answer).")
    p2p = report.get("p2p") or {}
    bw = [p["bandwidth_gbs"] for p in p2p.get("pairs", []) if p.get("bandwidth_gbs")]
    if p2p.get("access"):
        allp = all(x for row in p2p["access"] for x in row if x is not None)
        parts.append("Peer-to-peer access is " + ("available between every pair" if allp else "missing for some pairs") + ".")
    if bw:
        lat = [p["latency_us"] for p in p2p["pairs"] if p.get("latency_us")]
        parts.append(f"A measured GPU-to-GPU copy moved {min(bw):.0f}-{max(bw):.0f} GB/s one way"
                     + (f", with {min(lat):.1f}-{max(lat):.1f} us per small copy" if lat else "") + ".")
    sw = [f"driver {v['driver']}" if v.get("driver") else None, f"CUDA {v['cuda']} (driver)" if v.get("cuda") else None,
          (f"torch {v['torch']} (CUDA {v['torch_cuda']})" if v.get("torch_cuda") else f"torch {v['torch']} (CPU-only build)") if v.get("torch") else None,
          f"NCCL {((v.get('nccl_loaded') or {}).get('version') or v.get('nccl'))}" if (v.get("nccl") or (v.get("nccl_loaded") or {}).get("version")) else None]
    sw = [s for s in sw if s]
    if sw:
        parts.append(("Software of the machine that ran this what-if: " if report.get("source") == "profile" else "Software: ")
                     + ", ".join(sw) + ".")
    return " ".join(parts)


def findings(report: dict) -> list[str]:
    """The engine conclusions worth a newcomer's attention: mismatches first, then Blackwell gaps, then failures."""
    out = []
    for e in report.get("engines", []):
        for m in e.get("mismatches", []):
            out.append(f"{e['engine']} {e.get('version') or ''}: {m}")
    for e in report.get("engines", []):
        for m in e.get("gaps", []):
            out.append(f"{e['engine']} {e.get('version') or ''}: {m}")
    for e in report.get("engines", []):
        if e.get("status") in ("import failed", "error"):
            out.append(f"{e['engine']} could not be asked: {e.get('error')}")
    return [re.sub(r"\s+", " ", s) for s in out]


def _fmt_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def format_report(report: dict) -> str:
    """The readable form (``servebook probe`` without --json)."""
    out = []
    tag = f"PROFILE {report['profile']} (datasheet, not measured)" if report.get("source") == "profile" else f"host {report.get('hostname')}"
    out.append(f"servebook probe: {tag}    {report.get('created')}")
    out.append("")
    gpus = report.get("gpus") or []
    if gpus:
        out.append(_fmt_table(["#", "name", "cap", "family", "SMs", "mem GiB", "SM/max MHz", "power W", "MIG", "ECC", "busy"], [
            [g["index"], g["name"], g["capability"], g["family"], g.get("sm_count"), g.get("memory_gib"),
             f"{(g.get('clocks') or {}).get('sm_mhz') or '-'}/{(g.get('clocks') or {}).get('max_sm_mhz') or '-'}",
             g.get("power_limit_w"), g.get("mig_mode"), g.get("ecc_mode"), "yes" if g.get("busy") else ""] for g in gpus]))
    else:
        out.append("GPUs: none found")
    v = report.get("versions") or {}
    out.append("")
    loaded = v.get("nccl_loaded") or {}
    out.append(_fmt_table(["software", "version"], [
        ["driver", v.get("driver")], ["CUDA (driver)", v.get("cuda")], ["CUDA runtime", v.get("cuda_runtime")],
        ["CUDA toolkit (nvcc)", v.get("cuda_toolkit")], ["torch", v.get("torch")], ["torch CUDA", v.get("torch_cuda")],
        ["NCCL (torch built with)", v.get("nccl")], ["NCCL (loaded)", f"{loaded.get('version')} {loaded.get('path') or ''}".strip() if loaded.get("version") else loaded.get("note")],
        *[[k, val] for k, val in (v.get("packages") or {}).items() if val and k != "torch"],
    ]))
    topo = report.get("topology") or {}
    if topo.get("matrix"):
        out.append("")
        out.append(f"topology ({topo.get('source')}{'; ' + topo['note'] if topo.get('note') else ''}):")
        labels = topo["labels"]
        aff_keys = sorted({k for a in topo.get("affinity", {}).values() for k in a})
        rows = []
        for r, row in enumerate(topo["matrix"]):
            rl = (topo.get("row_labels") or labels)[r]
            aff = topo.get("affinity", {}).get(rl, {})
            rows.append([rl, *row, *[aff.get(k) for k in aff_keys]])
        out.append(_fmt_table(["", *labels, *aff_keys], rows))
    p2p = report.get("p2p") or {}
    if p2p.get("pairs"):
        out.append("")
        out.append(_fmt_table(["P2P src->dst", "peer access", "GB/s", "latency us"], [
            [f"GPU{p['src']}->GPU{p['dst']}", p.get("peer_access"), p.get("bandwidth_gbs", p.get("error")), p.get("latency_us")]
            for p in p2p["pairs"]]))
        out.append(f"method: {p2p.get('method')}")
    elif p2p.get("note"):
        out.append("")
        out.append(f"P2P: {p2p['note']}")
    env = report.get("env") or {}
    out.append("")
    out.append("environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) if env else "no NCCL_/CUDA_/TORCH_/SGLANG_/VLLM_/HF_ variables set"))
    for e in report.get("engines", []):
        out.append("")
        head = f"engine {e['engine']} {e.get('version') or ''} [{e.get('status')}] python={e.get('python')}"
        if e.get("patched"):
            head += "  (faked: " + ", ".join(e["patched"]) + ")"
        out.append(head)
        if e.get("error"):
            out.append(f"  error: {e['error']}")
        if e.get("helpers"):
            out.append(_fmt_table(["  helper", "answer", "hardware says", "verdict"], [
                ["  " + h["name"], h.get("answer") if not h.get("error") else "error", h.get("expected"), h.get("verdict")]
                for h in e["helpers"]]))
    if report.get("warnings"):
        out.append("")
        out.append("warnings:")
        out.extend(f"  - {w}" for w in report["warnings"])
    out.append("")
    out.append("What this host is: " + describe_host(report))
    return "\n".join(out)


def record(store, report: dict) -> dict:
    """Store a report in a run (``results.RunStore``): probe.json plus tidy tables, before anything is displayed.

    Tables: gpus, versions, topology (one row per GPU pair), p2p (one row per measured pair), engines,
    engine_helpers (one row per helper answer), warnings. Returns the manifest fields written.
    """
    store.write_text("probe.json", json.dumps(report, indent=2, default=str) + "\n")
    src, prof = report.get("source"), report.get("profile")
    base = {"source": src, "profile": prof}
    for g in report.get("gpus", []):
        store.append("gpus", {**base, **{k: g.get(k) for k in (
            "index", "host_index", "name", "capability", "sm", "arch", "family", "sm_count", "memory_gib", "power_limit_w",
            "mig_mode", "ecc_mode", "busy", "utilization_pct")}, "sm_mhz": (g.get("clocks") or {}).get("sm_mhz"),
            "max_sm_mhz": (g.get("clocks") or {}).get("max_sm_mhz")})
    v = report.get("versions") or {}
    store.append("versions", {**base, **{k: v.get(k) for k in ("driver", "cuda", "cuda_runtime", "cuda_toolkit", "torch", "torch_cuda", "nccl", "python")},
                              "nccl_loaded": (v.get("nccl_loaded") or {}).get("version"),
                              "nccl_loaded_path": (v.get("nccl_loaded") or {}).get("path"),
                              **{f"pkg_{k}": val for k, val in (v.get("packages") or {}).items()}})
    topo = report.get("topology") or {}
    labels, rows = topo.get("labels") or [], topo.get("row_labels") or topo.get("labels") or []
    for r, row in enumerate(topo.get("matrix") or []):
        for c, code in enumerate(row):
            if r < len(rows) and c < len(labels) and rows[r].startswith("GPU") and labels[c].startswith("GPU") and rows[r] != labels[c]:
                store.append("topology", {**base, "src": rows[r], "dst": labels[c], "link": code, "rank": link_rank(code),
                                          "meaning": describe_link(code), "from": topo.get("source")})
    for pair in (report.get("p2p") or {}).get("pairs", []):
        store.append("p2p", {**base, **pair, "method": (report.get("p2p") or {}).get("method")})
    for e in report.get("engines", []):
        store.append("engines", {**base, **{k: e.get(k) for k in ("engine", "version", "status", "error", "python", "torch", "capability_seen")},
                                 "helpers": len(e.get("helpers", [])), "mismatches": len(e.get("mismatches", [])), "gaps": len(e.get("gaps", []))})
        for h in e.get("helpers", []):
            store.append("engine_helpers", {**base, "engine": e["engine"], "version": e.get("version"), "helper": h["name"],
                                            "answer": h.get("answer"), "error": h.get("error"), "expected": h.get("expected"),
                                            "verdict": h.get("verdict"), "meaning": h.get("meaning"),
                                            "faked": bool(e.get("patched"))})
    for w in report.get("warnings", []):
        store.append("warnings", {**base, "warning": w})
    g0 = (report.get("gpus") or [{}])[0]
    fields = {"probe": {"schema": report.get("schema"), "source": src, "profile": prof, "gpu_count": report.get("gpu_count"),
                        "gpu": g0.get("name"), "capability": g0.get("capability"), "family": g0.get("family"),
                        "created": report.get("created"), "hostname": report.get("hostname"),
                        "findings": len(findings(report)), "warnings": len(report.get("warnings", []))}}
    store.write_manifest(fields)
    return fields
