"""The embedded default model: built here, downloaded from nowhere.

    path = build_embedded_model()          # cached; ~/.cache/servebook/models/embedded-dsv3-<key>
    path = build_embedded_model(seed=1, cache_dir="/tmp/m", progress=print)

A small DeepSeek-V3-architecture model (MLA attention and a mixture of experts, the
architecture of the case this book follows) with random weights, and a byte-level BPE
tokenizer trained on text found on this machine (the language reference that ships with
every CPython, ``pydoc_data/topics.py``). Weights are deterministic for a seed; the
directory records what it was built from in ``servebook_embedded.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from .errors import ModelError
from .paths import build_lock, cache_dir

__all__ = ["EMBEDDED_CONFIG", "build_embedded_model", "embedded_model_dir", "default_cache_dir"]

# Sized so that CPU decode runs at tens of tokens/s or better, while keeping every
# architectural feature the engines branch on: MLA (kv_lora_rank, q_lora_rank, rope/nope
# head split) and MoE (routed + shared experts, dense first layer).
EMBEDDED_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "kv_lora_rank": 64,
    "q_lora_rank": 96,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
_SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>"]
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>{% elif m['role'] == 'system' %}<|system|>{% else %}<|assistant|>{% endif %}"
    "{{ m['content'] if m['content'] is string else m['content'] | map(attribute='text') | join('') }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_BUILDER_VERSION = 1


def default_cache_dir() -> Path:
    return cache_dir() / "models"


def _corpus_files() -> list[Path]:
    import pydoc_data.topics as topics  # the language reference; part of every CPython

    return [Path(topics.__file__)]


def _corpus_digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _key(seed: int, corpus: str) -> str:
    blob = json.dumps({"config": EMBEDDED_CONFIG, "seed": seed, "corpus": corpus, "v": _BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def embedded_model_dir(seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the embedded model for ``seed`` lives (built or not)."""
    corpus = _corpus_digest(_corpus_files())
    return Path(cache_dir or default_cache_dir()) / f"embedded-dsv3-{_key(seed, corpus)}"


def _train_tokenizer(files: list[Path], out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=EMBEDDED_CONFIG["vocab_size"],
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(f) for f in files], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        model_max_length=EMBEDDED_CONFIG["max_position_embeddings"],
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_embedded_model(
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = print,
    force: bool = False,
) -> Path:
    """Build (once) and return the embedded model directory."""
    say = progress or (lambda _msg: None)
    target = embedded_model_dir(seed, cache_dir)
    if (target / "servebook_embedded.json").exists() and not force:
        return target
    with build_lock(target):  # a parallel builder (a test worker, a second book) waits, then finds it built
        if (target / "servebook_embedded.json").exists() and not force:
            return target
        return _build(target, seed, say)


def _build(target: Path, seed: int, say: Callable[[str], None]) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, DeepseekV3Config

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        t0 = time.monotonic()
        files = _corpus_files()
        say(f"[embedded model 1/3] training a {EMBEDDED_CONFIG['vocab_size']}-token BPE tokenizer on {files[0]} ...")
        _train_tokenizer(files, tmp)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tmp)
        cfg = dict(EMBEDDED_CONFIG)
        cfg.pop("model_type")
        cfg.pop("torch_dtype")
        config = DeepseekV3Config(
            **cfg,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        say(f"[embedded model 2/3] initialising DeepSeek-V3 architecture (MLA + MoE) with seed {seed} ...")
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        n_params = sum(p.numel() for p in model.parameters())
        say(f"[embedded model 3/3] saving {n_params / 1e6:.1f}M parameters to {target} ...")
        model.generation_config.bos_token_id = tokenizer.bos_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(tmp)
        meta = {
            "builder_version": _BUILDER_VERSION,
            "seed": seed,
            "architecture": "DeepseekV3ForCausalLM",
            "parameters": n_params,
            "tokenizer_corpus": [str(f) for f in files],
            "tokenizer_corpus_sha256_12": _corpus_digest(files),
            "build_seconds": round(time.monotonic() - t0, 2),
            "note": "random weights: output text is meaningless; it exercises the serving path, not quality",
        }
        (tmp / "servebook_embedded.json").write_text(json.dumps(meta, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)  # atomic: a half-built model never looks built
        say(f"[embedded model] ready in {meta['build_seconds']}s: {target}")
        return target
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"building the embedded model failed: {type(exc).__name__}: {exc}") from exc
