"""Chapter 01's stated quantities read straight from its tables: the engine helpers asked and what they found, the
NVLink links and the GPU-to-GPU copies measured (registered into ``servebook.stated.registry``; ``servebook.quantities``
gathers every chapter's). The host's facts as chapter 06 reads them are ``servebook.findings.quantities``."""

from __future__ import annotations

import re
from typing import Any, Callable

from ..stated.registry import Quantity, register


def _helpers(store) -> dict:
    rows = store.rows("engine_helpers")
    return {"asked": len(rows), "judged": sum(1 for r in rows if r.get("verdict") not in (None, "unknown")),
            "disagreed": sum(1 for r in rows if r.get("verdict") not in (None, "unknown", "agrees"))} if rows else {}


def _nvlink(store) -> dict:
    links = {str(r.get("link")).strip() for r in store.rows("topology") if r.get("link")}
    return {c: int(m.group(1)) for c in links if (m := re.fullmatch(r"NV(\d+)", c))}


def _p2p(field_: str) -> Callable[[Any], dict]:
    def compute(store):
        xs = [r[field_] for r in store.rows("p2p") if isinstance(r.get(field_), (int, float)) and r[field_]]
        return {"min": min(xs), "max": max(xs)} if xs else {}
    return compute


register(
    Quantity("engine_helpers_count", "engine helpers chapter 01 asked, judged against the hardware, and that disagreed", _helpers,
             tables=("engine_helpers",)),
    Quantity("engine_findings", "an engine's helpers that disagree with the hardware (engine version | mismatches) or leave this "
             "GPU out (engine version | gaps), as chapter 01 recorded them (table engines)",
             lambda store: {f"{e.get('engine')} {e.get('version')} | {k}": e.get(k) or 0 for e in store.rows("engines")
                            for k in ("mismatches", "gaps")}, tables=("engines",)),
    Quantity("nvlink_links", "bonded NVLink links of a link code nvidia-smi reported between two GPUs (table topology; NV18 -> 18)",
             _nvlink, tables=("topology",)),
    Quantity("p2p_gbs", "measured GPU-to-GPU copy bandwidth (GB/s) over the pairs chapter 01 measured (min, max; table p2p)",
             _p2p("bandwidth_gbs"), tables=("p2p",)),
    Quantity("p2p_latency_us", "measured small-copy latency (us) over those pairs (min, max; table p2p)", _p2p("latency_us"),
             tables=("p2p",)),
)
