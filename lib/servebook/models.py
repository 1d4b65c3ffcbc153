"""Model builder: a model directory the real engines' kernels accept, made from a card in data/models.

    path = build_model("kimi-k2.5", layers=2)                       # full width, 2 layers, random bf16 weights
    path = build_model("kimi-k2.5", layers=2, weights="dummy")      # config + tokenizer only: engines' --load-format dummy
    path = build_model("deepseek-v3", layers=2, scale=28)           # width / 28 (MLA head dims kept), small hosts and CPUs
    servebook model build kimi-k2.5 --layers 2 --out /models/kimi-slice

The card's real architecture and dimensions (heads, MLA ranks and head dims, experts, vocabulary) with fewer
layers: a *slice*. Its decode kernels see the shapes of the full model, so a per-layer time measured on the
slice is representative; ``servebook_model.json`` states the bytes one decode token reads in the slice and in
the full model, and the layer counts to extrapolate with (a prediction, labelled so where it is used).

Weights are random with a fixed seed (normal, std 0.02; norms 1; router bias 0), written as safetensors under
the checkpoint names the engines' loaders read (the original DeepSeek-V3 / Llama layouts), generated on a GPU
when there is one. ``weights="dummy"`` writes none: the engines then need ``--load-format dummy`` (their own
random init, values around 1e-3: logits are near-ties, so output agreement says little on such a model).
The tokenizer is the embedded model's (trained here on CPython's own text), its vocabulary padded with
never-produced tokens up to the card's size so every id the model can emit decodes. The card's quantization
is not reproduced: the slice is bf16 throughout (the full-model figures give both).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import ModelError, ParameterError
from .paths import cache_dir

__all__ = ["build_model", "slice_config", "checkpoint_shapes", "model_facts", "engine_args_of", "register"]

_BUILDER_VERSION = 1
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Fields SGLang's DeepSeek-V3 model reads that transformers' DeepseekV3Config does not always write
# (../shared/gpu-engines/README.md: "AttributeError: 'DeepseekV3Config' object has no attribute 'moe_layer_freq'").
_DSV3_DEFAULTS = {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "ep_size": 1,
                  "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "rope_theta": 10000.0, "attention_bias": False,
                  "hidden_act": "silu", "rms_norm_eps": 1e-6}


def _family(cfg: dict) -> str:
    if cfg.get("kv_lora_rank"):
        return "deepseek_v3"
    if (cfg.get("model_type") or "").startswith(("llama", "mistral", "qwen2")) or "LlamaForCausalLM" in cfg.get("architectures", []):
        return "llama"
    raise ModelError(f"the model builder knows DeepSeek-V3-style (MLA) and Llama-style configs; this card is "
                     f"{cfg.get('model_type')!r} ({', '.join(cfg.get('architectures') or [])}): use a card of those families")


def _text_config(card: dict) -> dict:
    cfg = card.get("config", card)
    return dict(cfg.get("text_config", cfg)) if isinstance(cfg.get("text_config"), dict) else dict(cfg)


# The card's quantization applied to the routed experts only (what the card's bytes_per_param_note says of Kimi-K2.5:
# INT4 routed experts, BF16 attention, shared experts and dense layers): compressed-tensors' own ignore syntax.
_ROUTED_ONLY_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj$",
                       "re:.*mlp\\.gate$"]


def slice_config(card: dict, layers: int | None = None, scale: int = 1, max_positions: int = 8192, quant: str = "bf16") -> dict:
    """The config.json of a slice of ``card``: ``layers`` layers (default: the dense ones plus one MoE layer,
    or 2), width divided by ``scale`` (hidden and intermediate sizes, heads and experts; MLA ranks and head
    dims kept), bf16; ``quant="card"`` keeps the card's quantization config for the routed experts (the
    engines' own quantized MoE kernels then run; only with dummy weights)."""
    full = _text_config(card)
    family = _family(full)
    if scale < 1:
        raise ParameterError("scale", scale, "an integer >= 1 that divides the width (1 = full width)")
    cfg = {k: v for k, v in full.items() if k not in ("quantization_config", "auto_map", "rope_scaling")}
    dense = int(full.get("first_k_dense_replace") or 0) if family == "deepseek_v3" else 0
    n_layers = layers if layers is not None else (dense + 1 if family == "deepseek_v3" else 2)
    if n_layers < 1 or n_layers > full["num_hidden_layers"]:
        raise ParameterError("layers", layers, f"1 to {full['num_hidden_layers']} (the card's layer count)")
    cfg["num_hidden_layers"] = n_layers
    if scale > 1:
        for key in ("hidden_size", "intermediate_size", "moe_intermediate_size"):
            if cfg.get(key):
                if cfg[key] % scale:
                    raise ParameterError("scale", scale, f"{key}={cfg[key]} is not divisible by it")
                cfg[key] //= scale
        for key, floor in (("num_attention_heads", 4), ("n_routed_experts", 8)):
            if cfg.get(key):
                cfg[key] = max(floor, cfg[key] // scale)
        if cfg.get("num_key_value_heads"):
            cfg["num_key_value_heads"] = min(cfg["num_attention_heads"], max(1, cfg["num_key_value_heads"] // scale))
        if cfg.get("num_experts_per_tok") and cfg.get("n_routed_experts"):
            cfg["num_experts_per_tok"] = min(cfg["num_experts_per_tok"], cfg["n_routed_experts"])
        if family == "llama" and "head_dim" in cfg:
            cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    if family == "deepseek_v3":
        cfg["architectures"], cfg["model_type"] = ["DeepseekV3ForCausalLM"], "deepseek_v3"
        for k, v in _DSV3_DEFAULTS.items():
            cfg.setdefault(k, v)
    else:
        cfg["architectures"], cfg["model_type"] = ["LlamaForCausalLM"], "llama"
    cfg["max_position_embeddings"] = min(int(full.get("max_position_embeddings") or max_positions), max_positions)
    cfg["torch_dtype"] = "bfloat16"
    if quant == "card":
        q = full.get("quantization_config")
        if not q:
            raise ParameterError("quant", quant, "'bf16': this card has no quantization config")
        cfg["quantization_config"] = {**q, "ignore": list(q.get("ignore") or _ROUTED_ONLY_IGNORE)}
    elif quant != "bf16":
        raise ParameterError("quant", quant, "'bf16' (default) or 'card' (the card's quantization for the routed experts)")
    cfg["tie_word_embeddings"] = False
    cfg.pop("dtype", None)
    return cfg


def checkpoint_shapes(cfg: dict) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """``(name, shape, init)`` of every tensor, named as the original checkpoints of the family are
    (what SGLang's and vLLM's loaders map); init is "normal", "ones" or "zeros"."""
    h, v, n_layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    yield "model.embed_tokens.weight", (v, h), "normal"
    for i in range(n_layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,), "ones"
        yield p + "post_attention_layernorm.weight", (h,), "ones"
        if _family(cfg) == "deepseek_v3":
            qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
            if cfg.get("q_lora_rank"):
                yield p + "self_attn.q_a_proj.weight", (cfg["q_lora_rank"], h), "normal"
                yield p + "self_attn.q_a_layernorm.weight", (cfg["q_lora_rank"],), "ones"
                yield p + "self_attn.q_b_proj.weight", (heads * qk, cfg["q_lora_rank"]), "normal"
            else:
                yield p + "self_attn.q_proj.weight", (heads * qk, h), "normal"
            yield p + "self_attn.kv_a_proj_with_mqa.weight", (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h), "normal"
            yield p + "self_attn.kv_a_layernorm.weight", (cfg["kv_lora_rank"],), "ones"
            yield p + "self_attn.kv_b_proj.weight", (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]), "normal"
            yield p + "self_attn.o_proj.weight", (h, heads * cfg["v_head_dim"]), "normal"
            if i < int(cfg.get("first_k_dense_replace") or 0) or not cfg.get("n_routed_experts"):
                yield from _mlp(p + "mlp.", h, cfg["intermediate_size"])
            else:
                e, inter = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
                yield p + "mlp.gate.weight", (e, h), "normal"
                if cfg.get("topk_method") == "noaux_tc":
                    yield p + "mlp.gate.e_score_correction_bias", (e,), "zeros"
                for j in range(e):
                    yield from _mlp(f"{p}mlp.experts.{j}.", h, inter)
                if cfg.get("n_shared_experts"):
                    yield from _mlp(p + "mlp.shared_experts.", h, inter * cfg["n_shared_experts"])
        else:
            hd = cfg.get("head_dim") or h // heads
            kv = cfg.get("num_key_value_heads") or heads
            yield p + "self_attn.q_proj.weight", (heads * hd, h), "normal"
            yield p + "self_attn.k_proj.weight", (kv * hd, h), "normal"
            yield p + "self_attn.v_proj.weight", (kv * hd, h), "normal"
            yield p + "self_attn.o_proj.weight", (h, heads * hd), "normal"
            yield from _mlp(p + "mlp.", h, cfg["intermediate_size"])
    yield "model.norm.weight", (h,), "ones"
    yield "lm_head.weight", (v, h), "normal"


def _mlp(prefix: str, h: int, inter: int):
    yield prefix + "gate_proj.weight", (inter, h), "normal"
    yield prefix + "up_proj.weight", (inter, h), "normal"
    yield prefix + "down_proj.weight", (h, inter), "normal"


def model_facts(card: dict, cfg: dict) -> dict:
    """Bytes one batch-1 decode token reads, in the slice and in the full model, and how to extrapolate."""
    from .roofline import config_bytes_per_token

    full = _text_config(card)
    sl = config_bytes_per_token(cfg, dense_bytes=2.0, expert_bytes=None if cfg.get("quantization_config") else 2.0)
    full_bf16 = config_bytes_per_token(full, dense_bytes=2.0, expert_bytes=2.0)
    full_card = config_bytes_per_token(full, dense_bytes=2.0)
    lm_head = full["vocab_size"] * full["hidden_size"] * 2.0  # read once per token whatever the depth
    per_layer_slice = (sl["bytes_per_token"] - cfg["vocab_size"] * cfg["hidden_size"] * 2.0) / cfg["num_hidden_layers"]
    return {
        "slice_layers": cfg["num_hidden_layers"], "full_layers": full["num_hidden_layers"],
        "dense_layers": min(int(cfg.get("first_k_dense_replace") or 0), cfg["num_hidden_layers"]),
        "slice_total_bytes": sl["total_bytes"], "slice_bytes_per_token": sl["bytes_per_token"],
        "slice_bytes_per_token_per_layer_avg": per_layer_slice,
        "full_bytes_per_token_bf16": full_bf16["bytes_per_token"], "full_bytes_per_token_card": full_card["bytes_per_token"],
        "full_expert_bytes_per_param_card": full_card["expert_bytes_per_param"],
        "lm_head_bytes": lm_head,
        "method": "counted layer by layer from the config (servebook.roofline.config_bytes_per_token); the slice is bf16; "
                  "'card' applies the card's quantization to the full model's routed experts",
    }


def _cache_key(card_name: str, cfg: dict, weights: str, seed: int) -> str:
    blob = json.dumps({"card": card_name, "cfg": cfg, "weights": weights, "seed": seed, "v": _BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _pad_tokenizer(src: Path, dst: Path, vocab_size: int) -> int:
    """Copy the embedded tokenizer, its BPE vocabulary padded to ``vocab_size`` with tokens no merge produces."""
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
            shutil.copy2(f, dst / f.name)
    tj = json.loads((dst / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tj.get("added_tokens", [])}
    n = max(used) + 1
    if vocab_size < n:
        raise ModelError(f"the card's vocabulary ({vocab_size}) is smaller than the local tokenizer's ({n}); use a card with a larger vocabulary")
    for i in range(n, vocab_size):
        vocab[f"<|x{i}|>"] = i  # printable ASCII: the byte-level decoder maps it to itself
    (dst / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    return vocab_size - n


def _write_weights(cfg: dict, out: Path, seed: int, device: str, say, shard_bytes: int = 4 << 30) -> dict:
    import torch
    from safetensors.torch import save_file

    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    specs = list(checkpoint_shapes(cfg))
    total = sum(_numel(s) * 2 for _, s, _ in specs)
    index: dict[str, str] = {}
    shard: dict[str, "torch.Tensor"] = {}
    size = written = 0
    n_shard = 0
    t0 = time.monotonic()
    files = []

    def flush():
        nonlocal shard, size, n_shard
        if not shard:
            return
        n_shard += 1
        name = f"model-{n_shard:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        files.append(name)
        for k in shard:
            index[k] = name
        shard, size = {}, 0

    for name, shape, init in specs:
        if init == "ones":
            t = torch.ones(shape, dtype=torch.bfloat16)
        elif init == "zeros":
            t = torch.zeros(shape, dtype=torch.float32 if name.endswith("e_score_correction_bias") else torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen, device=dev, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
        nbytes = t.numel() * t.element_size()
        if size and size + nbytes > shard_bytes:
            flush()
        shard[name] = t.contiguous()
        size += nbytes
        written += nbytes
        if written and (written // (8 << 30)) != ((written - nbytes) // (8 << 30)):
            say(f"  weights: {written / 1e9:.1f} of {total / 1e9:.1f} GB ({time.monotonic() - t0:.0f}s)")
    flush()
    # name the shards as HF does (model-0000i-of-0000n) so every loader's glob finds them
    final = {}
    for i, name in enumerate(files, 1):
        new = f"model-{i:05d}-of-{len(files):05d}.safetensors"
        os.replace(out / name, out / new)
        final[name] = new
    index = {k: final[v] for k, v in index.items()}
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": written}, "weight_map": index}, indent=1))
    return {"device": dev, "bytes": written, "files": len(files), "seconds": round(time.monotonic() - t0, 1)}


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def build_model(card: str, *, layers: int | None = None, scale: int = 1, weights: str = "random", seed: int = 0, quant: str = "bf16",
                out: str | os.PathLike | None = None, device: str = "auto", force: bool = False,
                progress: Callable[[str], None] | None = print) -> Path:
    """Build (once; cached by its parameters) a model directory from the card ``card``; returns its path."""
    say = progress or (lambda _m: None)
    card_d = _checked_card(card, weights, quant)
    cfg = slice_config(card_d, layers=layers, scale=scale, quant=quant)
    target = Path(out) if out else cache_dir() / "models" / f"{card}-L{cfg['num_hidden_layers']}-s{scale}-{weights}-{_cache_key(card, cfg, weights, seed)}"
    meta_path = target / "servebook_model.json"
    if meta_path.exists() and not force:
        meta = json.loads(meta_path.read_text())
        # the tokenizer's token ids are written into the config at build time (_write_model): not a parameter
        built = {k: v for k, v in (meta.get("config") or {}).items() if k not in _TOKEN_IDS}
        if built == cfg and meta.get("weights") == weights and meta.get("seed") == seed:
            say(f"[model] {target} (built earlier)")
            return target
    from .embedded import build_embedded_model

    t0 = time.monotonic()
    tok_src = build_embedded_model(progress=None)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        meta = _write_model(tmp, tok_src, card, card_d, cfg, scale=scale, weights=weights, seed=seed, quant=quant,
                            device=device, say=say)
        meta["build_seconds"] = round(time.monotonic() - t0, 1)
        (tmp / "servebook_model.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; servers may run as another user
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        say(f"[model] ready: {target}")
        return target
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _checked_card(card: str, weights: str, quant: str) -> dict:
    """The card ``card``, after a one-line error for weights or a quantization a slice cannot be built with."""
    from .cards import load_card

    if weights not in ("random", "dummy"):
        raise ParameterError("weights", weights, "'random' (seeded safetensors written here) or 'dummy' (none: the engines' --load-format dummy)")
    try:
        card_d = load_card(card)
    except Exception as exc:  # an unknown card: the cards module's own message names the known ones
        raise ParameterError("card", card, str(exc)) from exc
    if quant != "bf16" and weights != "dummy":
        raise ParameterError("quant", quant, "'bf16' with random weights: quantized slices are built with weights='dummy' only")
    return card_d


def _write_model(tmp: Path, tok_src: Path, card: str, card_d: dict, cfg: dict, *, scale: int, weights: str, seed: int,
                 quant: str, device: str, say: Callable[[str], None]) -> dict:
    """The model's files in ``tmp``: the padded tokenizer, config and generation config, and (random weights) the
    seeded safetensors; returns the model's metadata (``build_seconds`` left to the caller's clock)."""
    padded = _pad_tokenizer(tok_src, tmp, cfg["vocab_size"])
    tok_cfg = json.loads((tok_src / "config.json").read_text())
    for k in _TOKEN_IDS:
        cfg[k] = tok_cfg.get(k)
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (tmp / "generation_config.json").write_text(json.dumps({k: cfg[k] for k in _TOKEN_IDS}) + "\n")
    facts = model_facts(card_d, cfg)
    say(f"[model] {card}: {cfg['num_hidden_layers']} of {facts['full_layers']} layers, width / {scale}; "
        f"{facts['slice_total_bytes'] / 1e9:.2f} GB of weights ({'bf16, routed experts in the card quantization' if quant == 'card' else 'bf16'}), "
        f"{facts['slice_bytes_per_token'] / 1e6:.0f} MB read per decode token")
    written = None
    if weights == "random":
        written = _write_weights(cfg, tmp, seed, device, say)
        say(f"[model] wrote {written['bytes'] / 1e9:.2f} GB in {written['files']} files on {written['device']} in {written['seconds']}s")
    return {"builder_version": _BUILDER_VERSION, "card": card, "layers": cfg["num_hidden_layers"], "scale": scale,
            "weights": weights, "seed": seed, "config": cfg, "tokenizer_padded_tokens": padded, "facts": facts,
            "written": written, "build_seconds": None,
            "engine_args": ["--load-format", "dummy"] if weights == "dummy" else [],
            "note": ("random weights (std 0.02, seeded): output text is meaningless; kernels see the card's real shapes"
                     if weights == "random" else "no weights: start engines with --load-format dummy")}


def engine_args_of(model_dir, engine: str) -> list[str]:
    """The server flags a built model needs (``--load-format dummy`` for one built without weights); [] for others."""
    meta = Path(model_dir) / "servebook_model.json"
    if not meta.is_file():
        return []
    args = list(json.loads(meta.read_text()).get("engine_args") or [])
    if args and engine == "transformers":
        raise ModelError(f"{model_dir} has no weights (built with weights='dummy' for the engines' --load-format dummy); "
                         "transformers serve cannot load it: build it with --weights random")
    return args


def register(sub) -> None:
    """``servebook model build CARD``."""
    p = sub.add_parser("model", help="build a model directory from a card (real dimensions, fewer layers, random weights)")
    msub = p.add_subparsers(dest="model_command", required=True)
    b = msub.add_parser("build", help="build a slice of a model card",
                        description="A model directory with the card's real architecture and dimensions and fewer layers.")
    b.add_argument("card", help="a model card in data/models, e.g. kimi-k2.5")
    b.add_argument("--layers", type=int, default=None, help="layers to keep (default: the dense ones plus one MoE layer)")
    b.add_argument("--scale", type=int, default=1, help="divide the width by this (MLA head dims kept; default 1: full width)")
    b.add_argument("--weights", choices=("random", "dummy"), default="random",
                   help="random: seeded bf16 safetensors; dummy: none, start the engine with --load-format dummy")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--quant", choices=("bf16", "card"), default="bf16",
                   help="card: keep the card's quantization for the routed experts (with --weights dummy)")
    b.add_argument("--device", default="auto", help="where random weights are generated (auto: a GPU if there is one)")
    b.add_argument("--out", default=None, help="the model directory (default: a cache directory named by the parameters)")
    b.add_argument("--force", action="store_true", help="build again even if built")
    b.set_defaults(func=_cmd_build)


def _cmd_build(args) -> int:
    path = build_model(args.card, layers=args.layers, scale=args.scale, weights=args.weights, seed=args.seed,
                       quant=args.quant, out=args.out, device=args.device, force=args.force)
    print(path)
    return 0
