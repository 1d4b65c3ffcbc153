"""Decode steps inside a trace, and what each step's time is made of.

    kernels = kernel_events(load_trace(path))
    b = step_breakdown(kernels)
    b["step_ms"], b["steps"], b["categories"]["attention"]     # ms per step, by category; "gpu idle" included

A decode step of one stream runs the same kernels in the same order every time. The *anchor* is the kernel that
marks a step: among kernels seen at least ``min_steps`` times, those whose starts are evenly spaced (coefficient of
variation of the gaps below ``max_cv``), the one with the longest period - a once-per-step kernel; a per-layer kernel
repeats faster, or unevenly. Steps run from one anchor start to the next; the window holds whole steps only.
Per step: each category's kernel time, the GPU's busy time (the union of kernel intervals: overlapping streams
counted once) and the GPU-idle time (step minus busy).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable, Sequence

from .kernels import CATEGORIES, Kernel, TraceError, classify

__all__ = ["find_anchor", "step_breakdown", "busy_time"]


def find_anchor(kernels: Sequence[Kernel], min_steps: int = 8, max_cv: float = 0.35) -> dict:
    """The kernel that marks one decode step: ``{'name', 'count', 'period_us', 'cv'}``; :class:`TraceError` when
    no kernel repeats evenly at least ``min_steps`` times (too few steps profiled, or not a steady decode)."""
    starts: dict[str, list[float]] = defaultdict(list)
    for k in kernels:
        starts[k.name].append(k.ts)
    best = None
    for name, ts in starts.items():
        if len(ts) < min_steps + 1:
            continue
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        mean = statistics.fmean(gaps)
        if mean <= 0:
            continue
        cv = statistics.pstdev(gaps) / mean
        if cv > max_cv:
            continue
        cand = {"name": name, "count": len(ts), "period_us": statistics.median(gaps), "cv": cv}
        # the longest even period is the step; among equal periods the most regular, then the first to appear
        key = (round(math.log(max(cand["period_us"], 1e-3)) / math.log(1.05)), -cv)   # periods within 5% tie
        if best is None or key > best[0]:
            best = (key, cand)
    if best is None:
        raise TraceError(f"no kernel repeats evenly {min_steps} times or more in this trace ({len(kernels)} kernels): "
                         "profile more decode steps of one steady stream")
    return best[1]


def busy_time(kernels: Iterable[Kernel], lo: float, hi: float) -> float:
    """Microseconds within [lo, hi) during which at least one kernel runs (the union of their intervals)."""
    total, cur_s, cur_e = 0.0, None, None
    for k in sorted(kernels, key=lambda k: k.ts):
        s, e = max(k.ts, lo), min(k.end, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def step_breakdown(kernels: Sequence[Kernel], anchor: dict | None = None, min_steps: int = 8,
                   marks: Sequence[float] | None = None) -> dict:
    """Per-step time by category over the whole steps of ``kernels``.

    Steps are found from the anchor kernel (:func:`find_anchor`), or given as ``marks``: the start of each step
    and the end of the last (e.g. the annotation a decode loop put around each step).

    Returns ``{'steps', 'step_ms', 'step_ms_sd', 'busy_ms', 'kernel_ms', 'overlap_ms', 'categories': {cat: ms},
    'anchor', 'step_ms_each'}``: ``categories`` sums to ``step_ms`` (its "gpu idle" is ``step_ms - busy_ms``;
    kernels that overlap on several streams are counted at their share of the busy time).
    """
    if not kernels:
        raise TraceError("the trace holds no GPU kernels (was the GPU activity recorded? SGLang: activities GPU; "
                         "vLLM: --profiler-config with profiler torch)")
    if marks is not None:
        marks = sorted(marks)
        if len(marks) < 2:
            raise TraceError("at least two step marks are needed (the start of a step and its end)")
        anchor = {"name": "(step marks given)"}
    else:
        anchor = anchor or find_anchor(kernels, min_steps=min_steps)
        marks = [k.ts for k in kernels if k.name == anchor["name"]]
    lo, hi, steps = marks[0], marks[-1], len(marks) - 1
    inside = [k for k in kernels if lo <= k.ts < hi]
    per_cat: dict[str, float] = defaultdict(float)
    for k in inside:
        per_cat[classify(k.name, k.cat)] += min(k.end, hi) - k.ts
    kernel_us = sum(per_cat.values())
    busy_us = busy_time(inside, lo, hi)
    scale = busy_us / kernel_us if kernel_us else 0.0   # overlapping streams: categories share the busy time
    span_us = hi - lo
    cats = {c: per_cat.get(c, 0.0) * scale / steps / 1e3 for c in CATEGORIES if c != "gpu idle"}
    cats["gpu idle"] = (span_us - busy_us) / steps / 1e3
    each = [(b - a) / 1e3 for a, b in zip(marks, marks[1:])]
    return {
        "steps": steps, "step_ms": span_us / steps / 1e3, "step_ms_sd": statistics.pstdev(each) if len(each) > 1 else 0.0,
        "busy_ms": busy_us / steps / 1e3, "kernel_ms": kernel_us / steps / 1e3,
        "overlap_ms": (kernel_us - busy_us) / steps / 1e3, "categories": cats, "anchor": anchor["name"],
        "step_ms_each": each, "kernels_per_step": len(inside) / steps,
    }
