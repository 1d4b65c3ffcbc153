"""The report in words: a paragraph about the host, the findings, a readable table, and the run's tables."""

from __future__ import annotations

import json
import re
from typing import Any

from .parse import describe_link, link_rank


def describe_host(report: dict, tagged: bool = False) -> str:
    """'What this host is': one paragraph generated from the report. ``tagged``: each figure of the host (count,
    capability, memory, SMs, CUDA versions) as ``servebook.stated.q`` tags it, for a page (chapter 01), where the check
    recomputes it from the run's tables ``gpus`` and ``versions``."""
    gpus = report.get("gpus") or []
    if not gpus:
        return _no_gpu_paragraph(report)
    from ..stated.tags import quoter

    q = quoter(tagged)
    parts = [_gpu_sentence(report, gpus, q)]
    parts += _blackwell_line(gpus[0])
    parts += _link_sentences(report, gpus, q)
    parts += _p2p_sentences(report, q)
    parts += _software_sentence(report, q)
    return " ".join(parts)


def _no_gpu_paragraph(report: dict) -> str:
    """The paragraph of a host without a GPU: what it runs, and that the book continues on the CPU."""
    v = report.get("versions") or {}
    torch_s = f"torch {v.get('torch')}" + (f" (built for CUDA {v['torch_cuda']})" if v.get("torch_cuda") else " (a CPU-only build)") if v.get("torch") else "no torch"
    return (f"This host ({report.get('hostname')}) has no NVIDIA GPU that NVML, nvidia-smi or torch can see, so there is no compute "
            f"capability to reason about: the engines' GPU paths cannot run here. It runs Python {v.get('python')} with {torch_s}. "
            "The book continues on the CPU; GPU chapters say what they skip.")


def _gpu_sentence(report: dict, gpus: list[dict], q) -> str:
    """How many GPUs of which kind: capability, family, memory each (a profile's in the datasheet's unit), SMs."""
    src = "This profile describes" if report.get("source") == "profile" else "This host has"
    g = gpus[0]
    names = {x["name"] for x in gpus}
    head = (f"{src} {q('host_gpu_count', len(gpus), 'd')} x {', '.join(sorted(names))}: compute capability "
            f"{q('host_capability', g['capability'])} ({g['family']})")
    mem = f"{q('host_gpu_memory_gib', g['memory_gib'])} GiB each" if g.get("memory_gib") else "unknown memory each"
    if g.get("memory_gib") and report.get("source") == "profile":  # a datasheet's figure, in the datasheet's unit
        mem = f"{q('host_gpu_memory_gib', g['memory_gib'])} GB each ({_memory_source(report)})"
    return head + f", {mem}" + (f", {q('host_sm_count', g['sm_count'], 'd')} SMs" if g.get("sm_count") else "") + "."


def _blackwell_line(g: dict) -> list[str]:
    """Which Blackwell line the GPU is of, and which capability checks include it (none for an older GPU)."""
    if g.get("major") == 12:
        return ["It is a Blackwell GPU of the workstation/consumer line (sm_12x), not the datacenter line (sm_10x): "
                "a check for `major == 10` does not include it, and kernels built only for sm_100a do not run on it."]
    if g.get("major") == 10:
        return [f"It is a datacenter Blackwell GPU ({g['sm']}): checks for `major == 10` include it; checks for exactly "
                "`(10, 0)` miss sm_103."]
    return []


def _link_sentences(report: dict, gpus: list[dict], q) -> list[str]:
    """How the GPUs are linked (the best and worst pair of nvidia-smi's matrix), or that the links are unknown."""
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
        def words(code: str) -> str:  # an NVLink's count of bonded links tagged (nvlink_links, recomputed from table topology)
            m = re.fullmatch(r"NV(\d+)", str(code).strip())
            return f"NVLink, {q('nvlink_links', int(m.group(1)), 'd', of=code)} bonded links" if m else describe_link(code)

        link = f"GPUs are linked by {words(best)} ({best})" if best == worst else \
            f"GPU pairs range from {words(best)} ({best}) down to {words(worst)} ({worst})"
        return [link + (" (assumed from the datasheet)" if topo.get("source") == "profile" else "") + "."]
    if len(gpus) >= 2 and not codes:
        return ["The GPU-to-GPU links are unknown (nvidia-smi topo -m did not answer)."]
    return []


def _p2p_sentences(report: dict, q) -> list[str]:
    """Whether peer access is available between every pair, and the measured copy bandwidth and latency ranges."""
    out = []
    p2p = report.get("p2p") or {}
    bw = [p["bandwidth_gbs"] for p in p2p.get("pairs", []) if p.get("bandwidth_gbs")]
    if p2p.get("access"):
        allp = all(x for row in p2p["access"] for x in row if x is not None)
        out.append("Peer-to-peer access is " + ("available between every pair" if allp else "missing for some pairs") + ".")
    if bw:
        lat = [p["latency_us"] for p in p2p["pairs"] if p.get("latency_us")]
        out.append(f"A measured GPU-to-GPU copy moved {q('p2p_gbs', min(bw), '.0f', of='min')}-{q('p2p_gbs', max(bw), '.0f', of='max')} "
                   "GB/s one way" + (f", with {q('p2p_latency_us', min(lat), '.1f', of='min')}-"
                                     f"{q('p2p_latency_us', max(lat), '.1f', of='max')} us per small copy" if lat else "") + ".")
    return out


def _software_sentence(report: dict, q) -> list[str]:
    """The driver, CUDA, torch and NCCL versions of the machine (for a profile, of the machine that ran the what-if)."""
    v = report.get("versions") or {}
    sw = [f"driver {v['driver']}" if v.get("driver") else None, f"CUDA {q('host_cuda', v['cuda'], of='driver')} (driver)" if v.get("cuda") else None,
          (f"torch {v['torch']} (CUDA {q('host_cuda', v['torch_cuda'], of='torch')})" if v.get("torch_cuda") else f"torch {v['torch']} (CPU-only build)") if v.get("torch") else None,
          f"NCCL {((v.get('nccl_loaded') or {}).get('version') or v.get('nccl'))}" if (v.get("nccl") or (v.get("nccl_loaded") or {}).get("version")) else None]
    sw = [s for s in sw if s]
    if not sw:
        return []
    return [("Software of the machine that ran this what-if: " if report.get("source") == "profile" else "Software: ")
            + ", ".join(sw) + "."]


def _memory_source(report: dict) -> str:
    """Where a profile's memory figure comes from: the datasheet, quoted in data/hardware with its address. A measured
    host's figure is NVML's (or nvidia-smi's) MiB / 1024, hence GiB; a datasheet states GB."""
    src = ((report.get("profile_data") or {}).get("sources") or {}).get("memory_gib")
    return (f"the datasheet's figure in the datasheet's unit, GB, quoted in `data/hardware/{report.get('profile')}.json`"
            + (f" from {src}" if src else "") + "; the profile's field `memory_gib` holds that figure unconverted")


# each verdict of ``verdicts.judge_helper`` in the words chapter 01 defines it with
_VERDICT_WORDS = {
    "gap": "the answer is the hardware's, but it keeps this GPU out of paths written for the other Blackwell line: a gap",
    "mismatch": "the answer contradicts the hardware: a mismatch",
    "error": "the helper raised an error",
}


def say_helper_verdicts(rows: list[dict], engines: list[str]) -> str:
    """The engine helpers chapter 01 asked (table ``engine_helpers``), in the words its verdicts are defined with: how
    many were asked and judged, and each one that leaves this GPU out (gap: consistent with the hardware) or contradicts
    it (mismatch), with the answer beside what the hardware says. Counts tagged (``engine_helpers_count``)."""
    from ..stated.tags import q

    if not rows:
        return "No engine helper was recorded in this run (no engine could be asked)."
    judged = [r for r in rows if r.get("verdict") not in (None, "unknown")]
    flagged = [r for r in judged if r.get("verdict") != "agrees"]
    head = (f"{q('engine_helpers_count', len(rows), 'd', of='asked')} helpers asked in {', '.join(engines) or 'no engine'}; "
            f"{q('engine_helpers_count', len(judged), 'd', of='judged')} could be judged against the hardware")
    if not flagged:
        return head + " and all agree with it. The rest depend on installed packages, not on the GPU."
    one = len(flagged) == 1
    kinds = " or ".join(dict.fromkeys({"gap": "leaves this GPU out" if one else "leave this GPU out",
                                       "mismatch": "contradicts it" if one else "contradict it"}.get(r["verdict"], "failed")
                                      for r in flagged))
    items = "; ".join(f"`{r.get('helper')}` -> {r.get('answer')}, the hardware says {r.get('expected')} "
                      f"({_VERDICT_WORDS.get(r['verdict'], r['verdict'])})" for r in flagged[:4])
    return (head + f"; {q('engine_helpers_count', len(flagged), 'd', of='disagreed')} of them {kinds}: {items}. "
            "The rest depend on installed packages, not on the GPU.")


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
    tag = f"PROFILE {report['profile']} (datasheet, not measured)" if report.get("source") == "profile" else f"host {report.get('hostname')}"
    out = [f"servebook probe: {tag}    {report.get('created')}", ""]
    out.append(_gpu_table(report))
    out += ["", _software_table(report.get("versions") or {})]
    out += _topology_lines(report.get("topology") or {})
    out += _p2p_lines(report.get("p2p") or {})
    env = report.get("env") or {}
    out.append("")
    out.append("environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) if env else "no NCCL_/CUDA_/TORCH_/SGLANG_/VLLM_/HF_ variables set"))
    for e in report.get("engines", []):
        out += _engine_lines(e)
    if report.get("warnings"):
        out += ["", "warnings:"]
        out.extend(f"  - {w}" for w in report["warnings"])
    out.append("")
    out.append("What this host is: " + describe_host(report))
    return "\n".join(out)


def _gpu_table(report: dict) -> str:
    """One row a GPU: name, capability, family, SMs, memory, clocks, power, MIG, ECC, busy."""
    gpus = report.get("gpus") or []
    if not gpus:
        return "GPUs: none found"
    return _fmt_table(["#", "name", "cap", "family", "SMs", "mem GB" if report.get("source") == "profile" else "mem GiB", "SM/max MHz", "power W", "MIG", "ECC", "busy"], [
        [g["index"], g["name"], g["capability"], g["family"], g.get("sm_count"), g.get("memory_gib"),
         f"{(g.get('clocks') or {}).get('sm_mhz') or '-'}/{(g.get('clocks') or {}).get('max_sm_mhz') or '-'}",
         g.get("power_limit_w"), g.get("mig_mode"), g.get("ecc_mode"), "yes" if g.get("busy") else ""] for g in gpus])


def _software_table(v: dict) -> str:
    """Driver, CUDA, torch, NCCL (built with and loaded) and the engine packages, one row each."""
    loaded = v.get("nccl_loaded") or {}
    return _fmt_table(["software", "version"], [
        ["driver", v.get("driver")], ["CUDA (driver)", v.get("cuda")], ["CUDA runtime", v.get("cuda_runtime")],
        ["CUDA toolkit (nvcc)", v.get("cuda_toolkit")], ["torch", v.get("torch")], ["torch CUDA", v.get("torch_cuda")],
        ["NCCL (torch built with)", v.get("nccl")], ["NCCL (loaded)", f"{loaded.get('version')} {loaded.get('path') or ''}".strip() if loaded.get("version") else loaded.get("note")],
        *[[k, val] for k, val in (v.get("packages") or {}).items() if val and k != "torch"],
    ])


def _topology_lines(topo: dict) -> list[str]:
    """nvidia-smi's link matrix with each row's CPU/NUMA affinity (nothing when there is no matrix)."""
    if not topo.get("matrix"):
        return []
    labels = topo["labels"]
    aff_keys = sorted({k for a in topo.get("affinity", {}).values() for k in a})
    rows = []
    for r, row in enumerate(topo["matrix"]):
        rl = (topo.get("row_labels") or labels)[r]
        aff = topo.get("affinity", {}).get(rl, {})
        rows.append([rl, *row, *[aff.get(k) for k in aff_keys]])
    return ["", f"topology ({topo.get('source')}{'; ' + topo['note'] if topo.get('note') else ''}):",
            _fmt_table(["", *labels, *aff_keys], rows)]


def _p2p_lines(p2p: dict) -> list[str]:
    """The measured GPU-to-GPU copies with their method, or the note saying why there are none."""
    if p2p.get("pairs"):
        return ["", _fmt_table(["P2P src->dst", "peer access", "GB/s", "latency us"], [
            [f"GPU{p['src']}->GPU{p['dst']}", p.get("peer_access"), p.get("bandwidth_gbs", p.get("error")), p.get("latency_us")]
            for p in p2p["pairs"]]), f"method: {p2p.get('method')}"]
    if p2p.get("note"):
        return ["", f"P2P: {p2p['note']}"]
    return []


def _engine_lines(e: dict) -> list[str]:
    """One engine: its version, status and Python, what was faked, its error, and each helper's answer and verdict."""
    out = [""]
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
    return out


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
