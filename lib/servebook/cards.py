"""Model cards: facts about a model (its config.json, parameter counts, bytes per parameter), no weights.

    list_cards()                      # ['deepseek-v3', 'embedded', 'gpt-oss-120b', 'kimi-k2.5', ...]
    card = load_card("kimi-k2.5")     # {'config': {...}, 'parameters': {'total': ..., 'active': ...}, 'sources': {...}}
    path = materialize("kimi-k2.5")   # a directory holding only config.json (what engines read to choose)
    path = materialize("/models/x")   # a model directory: returned as is once it has a config.json

Cards live in ``data/models/<name>.json``. ``embedded`` is generated from
``servebook.embedded.EMBEDDED_CONFIG`` (never copied), its parameter counts computed by
building the model on the meta device.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from .errors import ModelError
from .paths import cache_dir, data_dir

__all__ = ["list_cards", "load_card", "materialize", "model_config", "cards_dir", "architecture_of", "uses_mla"]


def cards_dir() -> Path:
    return data_dir() / "models"


def list_cards() -> list[str]:
    return sorted({p.stem for p in cards_dir().glob("*.json")} | {"embedded"})


@lru_cache(maxsize=1)
def _embedded_card() -> dict:
    from .embedded import EMBEDDED_CONFIG

    total, active = _count_parameters(dict(EMBEDDED_CONFIG))
    return {
        "card_version": 1,
        "name": "embedded",
        "description": "servebook's built-in tiny DeepSeek-V3-architecture model (MLA + MoE), random weights.",
        "config": dict(EMBEDDED_CONFIG),
        "parameters": {"total": total, "active": active, "note": "counted on the meta device by transformers"},
        "bytes_per_param": 4.0,
        "bytes_per_param_note": "float32 (torch_dtype of EMBEDDED_CONFIG)",
        "sources": {"config": "servebook.embedded.EMBEDDED_CONFIG", "parameters": "transformers, meta-device instantiation"},
    }


def _count_parameters(config: dict) -> tuple[int, int]:
    """(total, active) parameters of a config, by instantiating it on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    hf = AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    total = expert = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if ".mlp.experts." in name or name.endswith(".mlp.experts") or ".experts." in name:
            expert += p.numel()
    n = config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
    k = config.get("num_experts_per_tok") or 0
    active = total - expert + (expert * k // n if n else expert)
    return int(total), int(active)


def load_card(name: str) -> dict:
    """A card by name; ``ModelError`` listing the cards when there is none."""
    if name == "embedded":
        return json.loads(json.dumps(_embedded_card()))
    path = cards_dir() / f"{name}.json"
    if not path.is_file():
        raise ModelError(f"no model card {name!r}; cards: {', '.join(list_cards())} (or pass a model directory)")
    return _read_json(path, f"model card {path}", "; fix or restore it")


def model_config(card_or_path: str | os.PathLike) -> dict:
    """The config.json content of a card name or a model directory."""
    p = Path(card_or_path)
    if p.is_dir() or os.sep in str(card_or_path):
        cfg = p / "config.json"
        if not cfg.is_file():
            raise ModelError(f"{p} has no config.json; pass a model directory (with config.json) or a card: {', '.join(list_cards())}")
        return _read_json(cfg, str(cfg))
    return load_card(str(card_or_path))["config"]


def _read_json(path: Path, what: str, fix: str = "") -> dict:
    """The JSON in ``path``; a ``ModelError`` naming ``what`` (and how to ``fix`` it) when it does not parse."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelError(f"{what} is not valid JSON ({exc}){fix}") from exc


def architecture_of(config: dict) -> str:
    archs = config.get("architectures") or []
    return archs[0] if archs else config.get("model_type", "?")


def uses_mla(config: dict) -> bool:
    """Does the config describe MLA attention (a kv_lora_rank, here or in text_config)?"""
    text = config.get("text_config") or {}
    return bool(config.get("kv_lora_rank") or text.get("kv_lora_rank"))


def materialize(card_or_path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """A directory holding only the model's config.json (cached by content); model dirs pass through."""
    p = Path(card_or_path)
    if p.is_dir() or os.sep in str(card_or_path):
        model_config(p)  # validates: exists, has a config.json
        return p.resolve()
    config = load_card(str(card_or_path))["config"]
    blob = json.dumps(config, sort_keys=True, indent=2) + "\n"
    key = hashlib.sha256(blob.encode()).hexdigest()[:10]
    target = Path(root or cache_dir() / "model-configs") / f"{card_or_path}-{key}"
    if not (target / "config.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        # A private temporary file beside the directory, renamed into place: several threads of a what-if
        # matrix may materialize the same card at once, and the directory must only ever hold config.json.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".json", dir=target.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(blob)
        os.replace(tmp, target / "config.json")
    return target
