"""Both engines side by side: the decision matrix across engines and versions, and the seed case's two answers.

    side_by_side(rows)            # one row per (gpu, model): {'vllm 0.26.0': 'TRITON_MLA', 'sglang 0.5.9': 'triton', ...}
    disagreements(rows)           # cells where engines, or versions of one engine, pick differently (with file:line)
    seed_comparison(sg, vl)       # does the attention choice explain the gap; the other decode-path differences

``rows`` are ``decision_matrix`` rows of any engines. Only dynamically resolved cells are compared; a
static or failed cell is listed as "not comparable", never guessed. Backends of two engines are
compared by what the names say (a Triton kernel, FlashInfer, FlashAttention, ...), never as equal code:
two engines' Triton MLA kernels are different programs, which chapter 03 measures.
"""

from __future__ import annotations

import re

__all__ = ["side_by_side", "disagreements", "kernel_family", "seed_comparison", "DECODE_ASPECTS"]


def _label(r: dict) -> str:
    name, _, pinned = str(r.get("engine")).partition("==")
    return f"{name} {r.get('version') or pinned or '?'}"


def _name(backend) -> str | None:
    """vLLM 0.10 suffixes its V1 backends' names (``TRITON_MLA_VLLM_V1``); later versions dropped the suffix: a rename,
    not a different choice."""
    return re.sub(r"_VLLM_V1$", "", str(backend)) if backend else backend


def _where(r: dict):
    d = r.get("decided_by")
    return d.get("where") if isinstance(d, dict) else d  # a whatif answer holds a dict, a matrix row the file:line


def kernel_family(backend: str | None) -> str | None:
    """The kernel library a backend name says it uses (``TRITON_MLA`` and ``triton`` -> 'triton')."""
    if not backend:
        return None
    b = str(backend).lower()
    for fam, pat in (("trtllm", r"trtllm|tokenspeed"), ("flashinfer", r"flashinfer"), ("flashmla", r"flashmla|flash_mla"),
                     ("cutlass", r"cutlass"), ("flash-attention", r"^fa\d|flash_attn|flashattn"), ("triton", r"triton"),
                     ("aiter", r"aiter"), ("torch", r"torch_native|sdpa|flex")):
        if re.search(pat, b):
            return fam
    return b


def side_by_side(rows: list[dict]) -> list[dict]:
    """One row per (gpu, capability, model) with each engine version's cell: backend, or (static)/(error)."""
    cells: dict[tuple, dict] = {}
    for r in rows:
        key = (r.get("gpu"), r.get("model"))
        cell = r.get("attention_backend") if r.get("method") == "dynamic" else f"({r.get('method')})"
        row = cells.setdefault(key, {"gpu": key[0], "capability": None, "model": key[1], "mla": None})
        row["capability"] = row["capability"] or r.get("capability")
        row["mla"] = row["mla"] if row["mla"] is not None else r.get("mla")
        row[_label(r)] = cell
    return sorted(cells.values(), key=lambda c: (str(c["model"]), str(c["capability"])))


def disagreements(rows: list[dict]) -> list[dict]:
    """Per (gpu, model): engine versions whose resolved backends differ, between engines (different kernel families)
    or between versions of one engine (a different backend, renames aside). Versions that agree are grouped."""
    by_cell: dict[tuple, list[dict]] = {}
    for r in rows:
        by_cell.setdefault((r.get("gpu"), r.get("model")), []).append(r)
    out: dict[tuple, dict] = {}
    for (gpu, model), rs in by_cell.items():
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                same = str(a.get("engine")).split("==")[0] == str(b.get("engine")).split("==")[0]
                kind = "versions" if same else "engines"
                if a.get("method") != "dynamic" or b.get("method") != "dynamic":
                    key = (gpu, model, kind, "not comparable", _label(a), _label(b))
                    out[key] = {"gpu": gpu, "model": model, "between": kind, "kind": "not comparable", "a": [_label(a)],
                                "b": [_label(b)], "a_backend": a.get("attention_backend"), "b_backend": b.get("attention_backend")}
                    continue
                if (kind == "versions" and _name(a.get("attention_backend")) == _name(b.get("attention_backend"))) or \
                        (kind == "engines" and kernel_family(a.get("attention_backend")) == kernel_family(b.get("attention_backend"))):
                    continue
                key = (gpu, model, kind, "differs", _name(a.get("attention_backend")), _name(b.get("attention_backend")))
                d = out.setdefault(key, {"gpu": gpu, "capability": a.get("capability"), "model": model, "between": kind,
                                         "kind": "differs", "a": [], "b": [], "a_backend": a.get("attention_backend"),
                                         "b_backend": b.get("attention_backend"), "a_decided_by": _where(a), "b_decided_by": _where(b)})
                d["a"] += [_label(a)] if _label(a) not in d["a"] else []
                d["b"] += [_label(b)] if _label(b) not in d["b"] else []
    return [d | {"a": ", ".join(d["a"]), "b": ", ".join(d["b"])} for d in out.values()]


# What else on the decode path each engine's resolved configuration fixes, and the chapter that measures it.
DECODE_ASPECTS = [
    ("MoE runner", {"sglang": ("moe_runner_backend",), "vllm": ("moe_backend", "quantization")}, "05 (and a profile of the decode step)"),
    ("all-reduce", {"sglang": ("disable_custom_all_reduce",), "vllm": ("disable_custom_all_reduce", "all2all_backend")}, "04"),
    ("CUDA-graph capture", {"sglang": ("disable_cuda_graph", "cuda_graph_max_bs", "enable_torch_compile"),
                            "vllm": ("cudagraph_mode", "max_cudagraph_capture_size", "compilation_mode")}, "05"),
    ("sampling", {"sglang": ("sampling_backend",), "vllm": ("VLLM_USE_FLASHINFER_SAMPLER",)}, "05"),
]


def seed_comparison(a: dict, b: dict) -> dict:
    """Two ``whatif`` answers (two engines, one model, one GPU): can the attention choice explain a gap between them,
    and which other decode-path settings differ (hypotheses, each with the chapter that measures it)."""
    fa, fb = kernel_family(a.get("attention_backend")), kernel_family(b.get("attention_backend"))
    both = all(x.get("method") == "dynamic" for x in (a, b))
    if not both:
        verdict = "not comparable: " + "; ".join(f"{_label(x)} was not resolved dynamically ({x.get('reason')})"
                                                  for x in (a, b) if x.get("method") != "dynamic")
    elif fa == fb:
        verdict = (f"both engines' own code picks a {fa} attention backend here ({_label(a)}: `{a['attention_backend']}` at "
                   f"`{_where(a)}`; {_label(b)}: `{b['attention_backend']}` at "
                   f"`{_where(b)}`): the backend *choice* cannot explain a gap between them. "
                   f"The two {fa} kernels are different programs; chapter 03 times each engine's kernel.")
    else:
        verdict = (f"the engines pick different attention backends ({_label(a)}: `{a['attention_backend']}`, {_label(b)}: "
                   f"`{b['attention_backend']}`): a candidate explanation, which chapter 03 measures by forcing each.")
    hyps = []
    for aspect, fields, chapter in DECODE_ASPECTS:
        va = {f: (a.get("decode_path") or {}).get(f) for f in fields.get(a.get("engine"), ())}
        vb = {f: (b.get("decode_path") or {}).get(f) for f in fields.get(b.get("engine"), ())}
        hyps.append({"aspect": aspect, _label(a): va, _label(b): vb, "measure_in": chapter})
    return {"gpu": a.get("gpu"), "capability": a.get("capability"), "model": a.get("model"), "same_family": both and fa == fb,
            "families": [fa, fb], "verdict": verdict, "hypotheses": hyps}
