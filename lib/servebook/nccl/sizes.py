"""All-reduce message sizes: the model's decode sizes (hidden size x batch x bytes) and a standard sweep."""

from __future__ import annotations

from ..errors import ServebookError

__all__ = ["STANDARD_SWEEP", "model_dims", "decode_message_sizes", "message_sizes"]

# A standard sweep next to the model's own sizes: latency region up to bandwidth region.
STANDARD_SWEEP = (1024, 4096, 65536, 262144, 1048576, 16777216)


def model_dims(config: dict) -> dict:
    """hidden_size and num_hidden_layers of a model config (multimodal cards keep them in text_config)."""
    config = config.get("config", config)
    for c in (config, config.get("text_config") or {}, config.get("language_config") or {}, config.get("llm_config") or {}):
        if c.get("hidden_size"):
            return {"hidden_size": int(c["hidden_size"]), "num_hidden_layers": int(c.get("num_hidden_layers") or 0),
                    "dtype": str(c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or "bfloat16")}
    raise ServebookError("the model config has no hidden_size (looked at the top level and text_config); "
                         "give a Hugging Face config or a model card with one")


def decode_message_sizes(hidden_size: int, dtype_bytes: int = 2, batches: list[int] | tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> list[dict]:
    """One all-reduce of the residual stream per decode step: hidden_size x batch x bytes."""
    return [{"batch": b, "bytes": int(hidden_size) * int(b) * int(dtype_bytes), "source": "model"} for b in batches]


def message_sizes(hidden_size: int, dtype_bytes: int = 2, batches=(1, 2, 4, 8, 16, 32, 64), sweep=STANDARD_SWEEP) -> list[dict]:
    """The model's decode sizes plus the standard sweep, sorted, without duplicates."""
    rows = {s["bytes"]: s for s in decode_message_sizes(hidden_size, dtype_bytes, batches)}
    for b in sweep or ():
        rows.setdefault(int(b), {"batch": None, "bytes": int(b), "source": "sweep"})
    return [rows[k] for k in sorted(rows)]

