"""Parsers for what nvidia-smi prints (query CSV, topology matrix, P2P table, XML) and the link vocabulary."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .common import _ANSI


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
