"""The GPUs: NVML first, nvidia-smi as fallback, torch for SM counts; CUDA_VISIBLE_DEVICES respected."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from ..profiles import sm_family
from .common import _run
from .parse import parse_query_csv, parse_smi_xml


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


def _torch_properties(torch, i: int, g: dict, method: str | None, warnings: list[str]) -> None:
    """What torch reads of GPU ``i`` into its row ``g``: the SM count, the opt-in shared memory per block (the largest a
    kernel may ask: what decides whether a Triton tile fits; data/hardware quotes the CUDA guide's figure for GPUs not
    here) and the capability, checked against what ``method`` (NVML or nvidia-smi) said."""
    try:
        p = torch.cuda.get_device_properties(i)
        g["sm_count"] = p.multi_processor_count
        g["shared_memory_per_block_optin_bytes"] = getattr(p, "shared_memory_per_block_optin", None)
        if not g.get("capability"):
            g["capability"] = f"{p.major}.{p.minor}"
        elif g["capability"] != f"{p.major}.{p.minor}":
            warnings.append(f"GPU {i}: {method} says capability {g['capability']} but torch says {p.major}.{p.minor}")
    except Exception as exc:  # noqa: BLE001 - a busy/faulty device
        warnings.append(f"GPU {i}: torch could not read its properties ({type(exc).__name__}: {exc})")


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
            _torch_properties(torch, i, g, info.get("method"), warnings)
    for i, g in enumerate(gpus):
        g.setdefault("index", i)
        g.setdefault("sm_count", None)
        g.setdefault("shared_memory_per_block_optin_bytes", None)
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
