"""Kernels of a profiler trace, and the rule that puts each one in a category of a decode step.

    events = kernel_events(load_trace("run/traces/sglang-fa3.trace.json.gz"))
    classify("void flash::flash_fwd_splitkv_mla_kernel<...>")   # -> "attention"
    rules_table()                                                 # the rule as the chapter shows it

A trace is the Chrome-trace JSON that torch's profiler writes (SGLang's ``/start_profile``, vLLM's
``--profiler-config``, ``torch.profiler`` in process), plain or gzip-compressed. GPU kernels are the events of
category ``kernel`` (plus ``gpu_memcpy``/``gpu_memset``); kernels replayed from a CUDA graph appear one by one.
On a CPU-only trace the "kernels" are the outermost ``cpu_op`` events (the operators the model's code called:
``aten::linear``, ``aten::scaled_dot_product_attention``, ...; what they call inside is part of them).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServebookError

__all__ = ["CATEGORIES", "RULES", "Kernel", "classify", "kernel_events", "load_trace", "rules_table", "TraceError", "trace_slug"]


class TraceError(ServebookError):
    """A trace that cannot be read, or holds no kernels."""


# The categories of a decode step, in the order the chapter stacks them. "gpu idle" is not a kernel: it is the
# time inside a step when no kernel runs (host scheduling, launch gaps, waiting for the sampled token).
CATEGORIES = ("attention", "moe experts", "moe routing", "dense gemm", "communication", "norm/rope/elementwise",
              "sampling", "other", "gpu idle")

# First match wins (lower-cased kernel name, searched, not anchored; a leading ^ anchors). Order matters: communication and
# routing are tested before the broad "moe" and "gemm" words, sampling before the elementwise catch-all, norms and
# rope (flashinfer's among them) before attention's broad "flash".
RULES: tuple[tuple[str, str], ...] = (
    # kernels torch.compile generated name the operators they fuse: a norm fused with its neighbours is a norm
    ("norm/rope/elementwise", r"^triton_(?:poi|red|per)_fused\w*(?:rms_norm|layer_norm|rotary|rope)"),
    # SGLang's top-k sum of the experts' outputs (moe_sum_reduce_torch_compile: torch.sum over top-k, then x scaling,
    # compiled by torch.compile): an expert kernel like the Marlin path's moe_sum_reduce_kernel, not an elementwise one
    ("moe experts", r"^triton_(?:poi|red|per)_fused\w*_mul_sum"),
    # the router's GEMV (hidden x experts logits): its bytes are a dense GEMM's, so its time is too
    ("dense gemm", r"router_gemm"),
    ("communication", r"nccl|all_?reduce|allgather|all_gather|reduce_scatter|cross_device_reduce|custom_?ar|one_?shot|"
                      r"two_?shot|multimem|symm_mem|lamport|trtllm_allreduce"),
    ("sampling", r"argmax|argmin|sampl|top_p|topp|multinomial|exponential_|gumbel|penalt|log_softmax|cunn_softmax"),
    ("moe routing", r"topk|top_k_gating|moe_align|align_block|count_and_sort|moe_sort|sort_tokens|grouped_topk|"
                    r"biased_grouped|moe_fused_gate|fused_gate|router|expert_map|compute_expert|moe_permute|"
                    r"moe_unpermute|prepare_moe|shuffle_rows|expand_idx|compute_arg_sorts|routing"),
    ("moe experts", r"fused_moe|moe_wna16|marlin_moe|moe_marlin|cutlass_moe|grouped_gemm|group_gemm|grouped_mm|moe_mm|"
                    r"fused_experts|moe_sum|expert|moe"),
    # flashinfer ships norm, rope and activation kernels beside its attention: their names say "flash" too
    ("norm/rope/elementwise", r"flashinfer::(?:norm|activation|rope|pos_enc)|rms_?norm|layer_?norm|rotary"),
    ("attention", r"flash|fmha|mla|attn|attention|paged|decode_kernel|_fwd_kernel|_fwd_grouped|merge_state|"
                  r"merge_attn|cascade|reshape_and_cache|cache_kernel|set_kv|store_kv|kv_buffer|concat_and_cache|"
                  r"splitkv|combine_kernel|num_kv_splits"),
    ("dense gemm", r"gemm|gemv|cublas|cutlass|xmma|nvjet|matmul|wgmma|splitk|bmm|dot_kernel|mm_kernel|marlin|"
                   r"sm90_|sm80_|ampere_|hopper|deep_gemm|\bmm\b|_mm_|_mm$|addmm|aten::mm|aten::linear|aten::matmul"),
    ("norm/rope/elementwise", r"norm|rms|rotary|rope|silu|gelu|swiglu|act_and_mul|activation|elementwise|vectorized|"
                              r"unrolled|copy|cat_|catarray|fill|index|embedding|gather|scatter|reduce_kernel|add|mul|"
                              r"triton_|fused_|where|clamp|cast|convert|transpose|permute|aten::"),
)
_COMPILED = tuple((cat, re.compile(rx)) for cat, rx in RULES)


def classify(name: str, category_hint: str = "") -> str:
    """The decode-step category of one kernel name (``RULES``, first match wins; else "other").

    ``category_hint`` is the trace's own event category: memory copies and sets are "other" whatever their name.
    """
    if category_hint in ("gpu_memcpy", "gpu_memset"):
        return "other"
    low = name.lower()
    for cat, rx in _COMPILED:
        if rx.search(low):
            return cat
    return "other"


def rules_table() -> list[dict]:
    """The classification rule as rows (category, pattern), in the order it is applied."""
    return [{"order": i + 1, "category": c, "pattern": rx} for i, (c, rx) in enumerate(RULES)] + [
        {"order": len(RULES) + 1, "category": "other", "pattern": "(no pattern matched; memcpy/memset)"},
        {"order": len(RULES) + 2, "category": "gpu idle", "pattern": "(time inside a step with no kernel running)"}]


@dataclass(frozen=True)
class Kernel:
    """One kernel (or innermost CPU operator) of a trace: start and duration in microseconds."""

    name: str
    ts: float
    dur: float
    stream: int | str = 0
    cat: str = "kernel"

    @property
    def end(self) -> float:
        return self.ts + self.dur


def trace_slug(label: str) -> str:
    """A profiled configuration's label as the file and folder name of its traces (``traces/<slug>.excerpt.json``,
    ``traces/raw/<slug>``)."""
    return label.replace(" ", "_").replace("/", "_")


def load_trace(path: str | os.PathLike) -> dict:
    """A Chrome-trace JSON file (``.json`` or ``.json.gz``) as a dict; :class:`TraceError` naming the file otherwise."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"no trace at {p}: the profiler wrote nothing there (look at the server's log for its error)")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, ValueError, EOFError) as exc:
        raise TraceError(f"{p} is not a readable Chrome trace ({type(exc).__name__}: {exc}); it may have been cut off "
                         "while the profiler was still writing it") from exc
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{p} has no traceEvents list: not a torch profiler trace")
    return data


def kernel_events(trace: dict, device: int | None = None) -> list[Kernel]:
    """The GPU kernels (and memcpy/memset) of ``trace`` sorted by start; on a trace without any, the outermost
    CPU operators (a CPU-only profile). ``device``: keep one GPU's kernels (default: the GPU with most kernels)."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
              and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if gpu:
        devices: dict = {}
        for e in gpu:
            d = (e.get("args") or {}).get("device", 0)
            devices[d] = devices.get(d, 0) + 1
        keep = device if device is not None else max(devices, key=devices.get)
        out = [Kernel(str(e.get("name", "")), float(e["ts"]), float(e["dur"]), (e.get("args") or {}).get("stream", 0),
                      str(e.get("cat"))) for e in gpu if (e.get("args") or {}).get("device", 0) == keep]
        return sorted(out, key=lambda k: k.ts)
    cpu = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    return _outermost(cpu)


def _outermost(ops: list[dict]) -> list[Kernel]:
    """CPU operators not inside another operator of the same thread (the roots of each call tree)."""
    out: list[Kernel] = []
    by_tid: dict = {}
    for e in ops:
        by_tid.setdefault(e.get("tid"), []).append(e)
    for tid, evs in by_tid.items():
        end = float("-inf")
        for e in evs:
            if e["ts"] < end:          # starts inside the current root: part of it
                continue
            end = e["ts"] + e["dur"]
            out.append(Kernel(str(e.get("name", "")), float(e["ts"]), float(e["dur"]), tid, "cpu_op"))
    return sorted(out, key=lambda k: k.ts)
