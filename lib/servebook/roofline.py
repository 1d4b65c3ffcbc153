"""How fast single-stream decode could be: the memory-bandwidth roofline (chapter 05).

    bw = measure_memory_bandwidth()                    # this host (CPU): {'read_gbs': ..., 'method': ...}
    w = weight_bytes(model_dir)                        # from the safetensors headers: total and per-token bytes
    r = decode_roofline(w["bytes_per_token"], bandwidth_tbs=bw["read_gbs"] / 1000)
    r["tok_s"]                                         # the bandwidth-bound limit, tokens/s
    card = load_model_card("kimi-k2.5")                # data/models/<name>.json
    r = decode_roofline(card_bytes_per_token(card), 1.792, tp=8, allreduce_us=24.0,
                        allreduces_per_token=allreduces_per_token(card))

At batch 1 every generated token reads every active weight once (plus the KV cache of
the context), so ``time per token >= bytes per token / memory bandwidth``. With tensor
parallelism each GPU reads its share in parallel, but each layer ends in all-reduces
whose latency adds up serially: ``time per token >= bytes / (tp * bw) + n_allreduce * latency``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
from pathlib import Path

from .errors import ModelError, ParameterError
from .paths import data_dir

__all__ = [
    "measure_gpu_bandwidth",
    "measure_memory_bandwidth",
    "host_memory_bandwidth",
    "weight_bytes",
    "kv_bytes_per_token",
    "allreduces_per_token",
    "load_model_card",
    "list_model_cards",
    "card_bytes_per_token",
    "config_bytes_per_token",
    "decode_roofline",
    "time_breakdown",
    "gpu_profile_named",
    "weights_on_gpus",
    "REFERENCE_GPU_READ",
]

_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U16": 2, "U32": 4,
    "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


# -- this host's memory bandwidth ------------------------------------------------
def measure_memory_bandwidth(size_mib: int = 512, repeats: int = 5) -> dict:
    """Measure the host's memory bandwidth with torch on a buffer far larger than any CPU cache.

    Read bandwidth: ``x.sum()`` over a float32 tensor of ``size_mib`` MiB (bytes read / time);
    copy bandwidth: ``y.copy_(x)`` counted as read + write. Best of ``repeats`` after one
    untimed pass, using torch's default intra-op threads (all cores). Decode streams
    weights, so the roofline uses the read figure.
    """
    import torch

    if size_mib < 64:
        raise ParameterError("size_mib", size_mib, "use at least 64 MiB so the buffer does not fit in a CPU cache")
    n = size_mib * 1024 * 1024 // 4
    x = torch.ones(n, dtype=torch.float32)
    y = torch.empty_like(x)
    nbytes = x.numel() * 4
    x.sum()
    y.copy_(x)
    read, copy = [], []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        x.sum()
        read.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        y.copy_(x)
        copy.append(time.perf_counter() - t0)
    del x, y
    return {
        "read_gbs": nbytes / min(read) / 1e9,
        "copy_gbs": 2 * nbytes / min(copy) / 1e9,
        "size_mib": size_mib,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "method": (f"torch float32 tensor of {size_mib} MiB: read = x.sum(), copy = y.copy_(x) counted as read+write; "
                   f"best of {repeats} after a warm-up pass, {torch.get_num_threads()} threads"),
    }


def measure_gpu_bandwidth(size_gib: float = 4.0, repeats: int = 10, device: int = 0) -> dict:
    """The GPU's read bandwidth, measured: ``x.sum()`` over a bf16 tensor of ``size_gib`` GiB timed with CUDA
    events (bytes read / time, best of ``repeats`` after a warm-up), and a copy counted as read + write."""
    import torch

    if not torch.cuda.is_available():
        raise ParameterError("device", "cuda", "a CUDA GPU: this host has none (the CPU's bandwidth: measure_memory_bandwidth)")
    dev = torch.device("cuda", device)
    n = int(size_gib * (1 << 30)) // 2
    x = torch.ones(n, dtype=torch.bfloat16, device=dev)
    y = torch.empty_like(x)
    nbytes = x.numel() * 2
    x.sum(dtype=torch.float32)
    y.copy_(x)
    torch.cuda.synchronize(dev)
    read, copy = [], []
    for _ in range(max(1, repeats)):
        for fn, out in ((lambda: x.sum(dtype=torch.float32), read), (lambda: y.copy_(x), copy)):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
    name = torch.cuda.get_device_name(dev)
    del x, y
    torch.cuda.empty_cache()
    return {"device": name, "read_tbs": nbytes / min(read) / 1e12, "copy_tbs": 2 * nbytes / min(copy) / 1e12,
            "size_gib": size_gib, "repeats": repeats,
            "method": f"torch bf16 tensor of {size_gib:g} GiB on {name}: read = x.sum() (fp32 accumulate), copy = y.copy_(x) "
                      f"counted as read+write; CUDA events, best of {repeats} after a warm-up"}


def host_memory_bandwidth(size_mib: int = 512, repeats: int = 5) -> dict:
    """This host's memory bandwidth for the roofline: the datasheet of its GPU, else measured on the CPU.

    On a CUDA host the GPU's name is matched to a profile in data/hardware (``source`` says which);
    without a GPU the CPU's read bandwidth is measured (:func:`measure_memory_bandwidth`).
    Returns ``{'bandwidth_tbs', 'device', 'count', 'source', 'method', ...}``.
    """
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        has_gpu = False
    if has_gpu:
        from .profiles import list_profiles, load_profile

        name = torch.cuda.get_device_name(0)
        for p in list_profiles():
            prof = load_profile(p)
            if (prof.get("gpu_name") or "").lower() == name.lower() and prof.get("memory_bandwidth_tbs"):
                return {"bandwidth_tbs": float(prof["memory_bandwidth_tbs"]), "device": name, "count": torch.cuda.device_count(),
                        "source": f"profile {p}", "method": f"datasheet bandwidth of {name} (data/hardware/{p}.json)"}
        return {"bandwidth_tbs": None, "device": name, "count": torch.cuda.device_count(), "source": None,
                "method": f"no profile in data/hardware has gpu_name {name!r}; add one to get a roofline"}
    m = measure_memory_bandwidth(size_mib, repeats)
    import os as _os

    return {"bandwidth_tbs": m["read_gbs"] / 1000.0, "device": "CPU", "count": 1, "source": "measured",
            "read_gbs": m["read_gbs"], "copy_gbs": m["copy_gbs"], "method": m["method"],
            "cpus": len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity") else _os.cpu_count()}


# -- a model directory's real bytes ---------------------------------------------------
def _safetensors_header(path: Path) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ModelError(f"{path} is not a safetensors file (too short); rebuild or re-download the model")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise ModelError(f"{path} has an implausible safetensors header ({n} bytes); the file is damaged")
        return json.loads(fh.read(n))


def weight_bytes(model_dir: str | os.PathLike) -> dict:
    """Count a model directory's parameters and bytes from its safetensors headers (no weights loaded).

    ``bytes_per_token`` is what one decode step at batch 1 reads: every weight except the
    routed experts and the input embedding, plus ``num_experts_per_tok / n_routed_experts``
    of the routed-expert bytes, plus one embedding row.
    """
    d = Path(model_dir)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ModelError(f"no *.safetensors files in {d}; pass a model directory with safetensors weights")
    try:
        config = json.loads((d / "config.json").read_text())
    except FileNotFoundError:
        config = {}
    total = params = expert = embed = 0
    embed_row = 0.0
    for f in files:
        for name, meta in _safetensors_header(f).items():
            if name == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            nbytes = end - start
            count = 1
            for s in meta["shape"]:
                count *= s
            total += nbytes
            params += count
            if _EXPERT.search(name) and ".shared_experts." not in name:
                expert += nbytes
            elif "embed_tokens" in name or name.endswith("wte.weight"):
                embed += nbytes
                rows = meta["shape"][0] if meta["shape"] else 1
                embed_row += nbytes / max(rows, 1)
    n_routed = config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
    k = config.get("num_experts_per_tok")
    active_fraction = (k / n_routed) if (n_routed and k and expert) else 1.0
    dense = total - expert - embed
    per_token = dense + expert * active_fraction + embed_row
    return {
        "model_dir": str(d),
        "files": len(files),
        "total_bytes": total,
        "total_params": params,
        "bytes_per_param": total / params if params else None,
        "routed_expert_bytes": expert,
        "embedding_bytes": embed,
        "expert_active_fraction": active_fraction,
        "bytes_per_token": per_token,
        "method": "safetensors headers: bytes = data_offsets span per tensor; routed experts scaled by num_experts_per_tok/n_routed_experts; embedding counted as one row",
    }


def kv_bytes_per_token(config: dict, bytes_per_element: float = 2.0) -> float:
    """KV-cache bytes one token of context occupies (and every later decode step reads).

    MLA (``kv_lora_rank`` present): one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer;
    otherwise keys and values of ``num_key_value_heads * head_dim`` per layer.
    """
    cfg = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    layers = cfg.get("num_hidden_layers")
    if not layers:
        raise ModelError("the model config has no num_hidden_layers; cannot size the KV cache")
    if cfg.get("kv_lora_rank"):
        per_layer = cfg["kv_lora_rank"] + (cfg.get("qk_rope_head_dim") or 0)
    else:
        heads = cfg.get("num_key_value_heads") or cfg.get("num_attention_heads")
        head_dim = cfg.get("head_dim") or (cfg["hidden_size"] // cfg["num_attention_heads"])
        per_layer = 2 * heads * head_dim
    return float(layers * per_layer * bytes_per_element)


def allreduces_per_token(config: dict) -> int:
    """All-reduces per decode step under tensor parallelism: two per layer (after attention, after the MLP)."""
    cfg = config.get("config", config) if isinstance(config.get("config"), dict) else config
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    layers = cfg.get("num_hidden_layers")
    if not layers:
        raise ModelError("the model card/config has no num_hidden_layers; pass allreduces_per_token explicitly")
    return 2 * int(layers)


# -- model cards (data/models/<name>.json) -----------------------------------------------
def list_model_cards() -> list[str]:
    """The model cards in data/models (``servebook.cards``)."""
    from .cards import list_cards

    return list_cards()


def load_model_card(name: str) -> dict:
    """The card ``data/models/<name>.json`` (or ``embedded``) as a dict."""
    from .cards import load_card

    return load_card(name)


def _find(card: dict, *names: str):
    """The first of ``names`` found at the top level or one level down (cards nest facts in groups)."""
    for n in names:
        if card.get(n) is not None:
            return card[n]
    for v in card.values():
        if isinstance(v, dict):
            for n in names:
                if v.get(n) is not None:
                    return v[n]
    return None


def card_bytes_per_token(card: dict) -> dict:
    """Bytes one batch-1 decode step reads for a model card: active parameters x bytes per parameter."""
    active = _find(card, "active_parameters", "active_params", "parameters_active", "active")
    total = _find(card, "total_parameters", "total_params", "parameters_total", "total")
    bpp = _find(card, "bytes_per_parameter", "bytes_per_param", "weight_bytes_per_param")
    if active is None or bpp is None:
        raise ModelError(
            f"model card {card.get('name', '?')!r} lacks active parameters or bytes per parameter "
            f"(keys found: {', '.join(sorted(card))}); add them to the card with their source"
        )
    return {"active_params": float(active), "total_params": float(total) if total is not None else None,
            "bytes_per_param": float(bpp), "bytes_per_token": float(active) * float(bpp),
            "method": "model card: active parameters x bytes per parameter"}


def _text_config(config: dict) -> dict:
    cfg = config.get("config", config) if isinstance(config.get("config"), dict) else config
    return cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg


def _quant_bytes(cfg: dict) -> float | None:
    """Bytes per quantized weight from a compressed-tensors/GPTQ-style quantization_config (bits/8 + one 2-byte scale per group)."""
    q = cfg.get("quantization_config") or {}
    groups = q.get("config_groups") or {}
    for g in groups.values():
        w = (g or {}).get("weights") or {}
        if w.get("num_bits"):
            gs = w.get("group_size") or 0
            return w["num_bits"] / 8 + (2.0 / gs if gs else 0.0)
    if str(q.get("quant_method", "")).lower() == "fp8":
        block = q.get("weight_block_size") or []
        return 1.0 + (4.0 / (block[0] * block[1]) if len(block) == 2 else 0.0)
    if q.get("bits"):
        gs = q.get("group_size") or 0
        return q["bits"] / 8 + (2.0 / gs if gs and gs > 0 else 0.0)
    return None


def config_bytes_per_token(config: dict, dense_bytes: float = 2.0, expert_bytes: float | None = None) -> dict:
    """Parameters and batch-1 decode bytes counted layer by layer from a model config (card or config.json).

    Attention (MLA when ``kv_lora_rank`` is set, else q/k/v/o projections), dense MLPs for the first
    ``first_k_dense_replace`` layers, then MoE layers: router, shared experts and
    ``num_experts_per_tok`` of ``n_routed_experts`` routed experts (3 matrices each); the LM head in
    full and one embedding row. ``dense_bytes`` per weight for everything but routed experts;
    ``expert_bytes`` for routed experts (default: from ``quantization_config``, else ``dense_bytes``).
    Norms and biases are ignored (well under 1%).
    """
    c = _text_config(config)
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    if c.get("kv_lora_rank"):
        qk = c.get("qk_nope_head_dim", 0) + c.get("qk_rope_head_dim", 0)
        q = (h * c["q_lora_rank"] + c["q_lora_rank"] * heads * qk) if c.get("q_lora_rank") else h * heads * qk
        attn = (q + h * (c["kv_lora_rank"] + c.get("qk_rope_head_dim", 0))
                + c["kv_lora_rank"] * heads * (c.get("qk_nope_head_dim", 0) + c["v_head_dim"]) + heads * c["v_head_dim"] * h)
    else:
        hd = c.get("head_dim") or h // heads
        kv = c.get("num_key_value_heads") or heads
        attn = h * heads * hd * 2 + h * kv * hd * 2
    n_routed = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0
    k = c.get("num_experts_per_tok") or 0
    moe_inter = c.get("moe_intermediate_size") or c.get("intermediate_size")
    dense_layers = min(layers, c.get("first_k_dense_replace", 0 if n_routed else layers))
    moe_layers = layers - dense_layers if n_routed else 0
    dense_layers = layers - moe_layers
    shared = (c.get("n_shared_experts") or 0) * 3 * h * moe_inter + 3 * h * (c.get("shared_expert_intermediate_size") or 0)
    expert = 3 * h * moe_inter
    dense_mlp = 3 * h * c["intermediate_size"]
    vocab = c["vocab_size"]
    eb = expert_bytes if expert_bytes is not None else (_quant_bytes(c) or dense_bytes)
    dense_params = layers * attn + dense_layers * dense_mlp + moe_layers * (shared + n_routed * h) + vocab * h  # + lm head
    routed_total = moe_layers * n_routed * expert
    routed_active = moe_layers * k * expert
    embed = 0 if c.get("tie_word_embeddings") else vocab * h
    total = dense_params + routed_total + embed
    per_token = (dense_params + h) * dense_bytes + routed_active * eb  # one embedding row
    return {"total_params": total, "active_params": dense_params + routed_active + h, "routed_expert_params": routed_total,
            "dense_bytes_per_param": dense_bytes, "expert_bytes_per_param": eb,
            "total_bytes": (dense_params + embed) * dense_bytes + routed_total * eb, "bytes_per_token": per_token,
            "method": (f"counted from the config layer by layer: attention, {dense_layers} dense MLP layers, {moe_layers} MoE layers "
                       f"({k} of {n_routed} routed experts active), LM head, one embedding row; {dense_bytes} B per dense weight, "
                       f"{eb:.4g} B per routed-expert weight")}


# A GPU's read bandwidth measured by measure_gpu_bandwidth's method with other tensors, on another machine of the kind:
# what a run's own measurement is set against (chapter 05 states the gap). H200: 8 GiB bf16 tensors, best of 10, on a
# lent nvidia-h200 machine on 2026-12-01 (the team's reference notes for H200 hosts; copy 4.28 TB/s read + write).
REFERENCE_GPU_READ = {"NVIDIA H200": {"read_tbs": 4.34, "copy_tbs": 4.28, "size_gib": 8.0, "repeats": 10,
                                      "where": "another nvidia-h200 machine, 2026-12-01"}}


def gpu_profile_named(gpu_name: str | None) -> str | None:
    """The hardware profile (data/hardware) whose ``gpu_name`` is ``gpu_name`` as the driver reports it, else None."""
    from .profiles import list_profiles, load_profile

    for name in list_profiles():
        if gpu_name and (load_profile(name).get("gpu_name") or "").lower() == gpu_name.lower():
            return name
    return None


def weights_on_gpus(card_name: str, quant: str, profile: str) -> dict:
    """How many GPUs of ``profile`` a model card's weights need at least (weights alone: no KV cache, no activations):
    ``quant`` "bf16" counts every weight at 2 bytes, "card" the card's own quantization of the routed experts (as the
    slices' ``full_bytes_per_token_card``). Returns ``weights_gb`` (10^9 bytes), ``weights_gib`` (2^30 bytes, the unit of
    ``gpu_memory_gib``: a sentence that compares the two states both in GiB) and ``gpus_to_hold``."""
    import math

    from .profiles import load_profile

    card = load_model_card(card_name)
    counted = config_bytes_per_token(card, expert_bytes=2.0) if quant == "bf16" else config_bytes_per_token(card)
    mem_gib = float(load_profile(profile)["memory_gib"])
    return {"weights_gb": counted["total_bytes"] / 1e9, "weights_gib": counted["total_bytes"] / (1 << 30), "gpu_memory_gib": mem_gib,
            "gpus_to_hold": math.ceil(counted["total_bytes"] / (mem_gib * (1 << 30)))}


# -- the roofline ----------------------------------------------------------------------
def decode_roofline(
    bytes_per_token: float,
    bandwidth_tbs: float,
    *,
    tp: int = 1,
    allreduce_us: float | None = None,
    allreduces_per_token: int | None = None,
    context_tokens: int = 0,
    kv_bytes_per_token: float = 0.0,
) -> dict:
    """The single-stream decode limit.

    ``bytes_per_token``: weight bytes one step reads; ``bandwidth_tbs``: one device's memory
    bandwidth (TB/s); ``tp``: devices splitting every layer. With ``tp > 1`` and an
    all-reduce latency, the communication floor ``allreduces_per_token * allreduce_us`` is
    added to the bandwidth time (at batch 1 the two cannot overlap: each layer waits for its
    all-reduce).
    """
    if bandwidth_tbs is None or bandwidth_tbs <= 0:
        raise ParameterError("bandwidth_tbs", bandwidth_tbs, "a positive memory bandwidth in TB/s")
    if tp < 1:
        raise ParameterError("tp", tp, "1 or more devices")
    read = float(bytes_per_token) + float(context_tokens) * float(kv_bytes_per_token)
    t_mem = read / (tp * bandwidth_tbs * 1e12)
    t_comm = 0.0
    if tp > 1:
        if allreduce_us is None or allreduces_per_token is None:
            raise ParameterError("allreduce_us", allreduce_us,
                                 "with tp > 1 give the per-all-reduce latency (chapter 04 measures it) and allreduces_per_token")
        t_comm = allreduces_per_token * allreduce_us * 1e-6
    return {
        "bytes_per_token": read,
        "bandwidth_tbs": bandwidth_tbs,
        "tp": tp,
        "t_mem_ms": t_mem * 1e3,
        "t_comm_ms": t_comm * 1e3,
        "tok_s_bandwidth": 1.0 / t_mem,
        "tok_s": 1.0 / (t_mem + t_comm),
        "allreduce_us": allreduce_us,
        "allreduces_per_token": allreduces_per_token if tp > 1 else 0,
    }


def time_breakdown(measured_tok_s: float, roofline: dict, **measured_ms: float) -> list[dict]:
    """Where one token's time goes: the bandwidth floor, the communication floor, named measured parts, the rest.

    ``measured_ms`` are further per-token times that were measured (e.g. ``client=0.01``,
    ``serving=1.2``); whatever is left is reported as "unexplained".
    """
    if not measured_tok_s or measured_tok_s <= 0:
        raise ParameterError("measured_tok_s", measured_tok_s, "a positive measured decode rate")
    total = 1e3 / measured_tok_s
    parts = [("memory bandwidth floor", roofline["t_mem_ms"]), ("communication floor", roofline["t_comm_ms"])]
    parts += [(k.replace("_", " "), float(v)) for k, v in measured_ms.items()]
    rest = total - sum(v for _, v in parts)
    parts.append(("unexplained (compute, kernel launches, framework overhead)", rest))
    return [{"part": k, "ms_per_token": v, "share": v / total} for k, v in parts]
