"""All-reduce message sizes: the model's decode sizes (hidden size x batch x bytes) and a standard sweep."""

from __future__ import annotations

from ..errors import ServebookError

__all__ = ["STANDARD_SWEEP", "DECODE_BATCHES", "model_dims", "decode_message_sizes", "message_sizes", "nccl_tests_command"]

# A standard sweep next to the model's own sizes: latency region up to bandwidth region.
STANDARD_SWEEP = (1024, 4096, 65536, 262144, 1048576, 16777216)
# The decode batches whose all-reduce sizes the book measures (chapter 04's grid, the plan's nccl-tests command).
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
# nccl-tests' -d names of a model's dtypes, and their bytes per element.
_NCCL_TESTS_DTYPE = {"bfloat16": ("bfloat16", 2), "bf16": ("bfloat16", 2), "float16": ("half", 2), "fp16": ("half", 2),
                     "half": ("half", 2), "float32": ("float", 4), "float": ("float", 4)}


def model_dims(config: dict) -> dict:
    """hidden_size and num_hidden_layers of a model config (multimodal cards keep them in text_config)."""
    config = config.get("config", config)
    for c in (config, config.get("text_config") or {}, config.get("language_config") or {}, config.get("llm_config") or {}):
        if c.get("hidden_size"):
            return {"hidden_size": int(c["hidden_size"]), "num_hidden_layers": int(c.get("num_hidden_layers") or 0),
                    "dtype": str(c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or "bfloat16")}
    raise ServebookError("the model config has no hidden_size (looked at the top level and text_config); "
                         "give a Hugging Face config or a model card with one")


def decode_message_sizes(hidden_size: int, dtype_bytes: int = 2, batches: list[int] | tuple[int, ...] = DECODE_BATCHES) -> list[dict]:
    """One all-reduce of the residual stream per decode step: hidden_size x batch x bytes."""
    return [{"batch": b, "bytes": int(hidden_size) * int(b) * int(dtype_bytes), "source": "model"} for b in batches]


def message_sizes(hidden_size: int, dtype_bytes: int = 2, batches=DECODE_BATCHES, sweep=STANDARD_SWEEP) -> list[dict]:
    """The model's decode sizes plus the standard sweep, sorted, without duplicates."""
    rows = {s["bytes"]: s for s in decode_message_sizes(hidden_size, dtype_bytes, batches)}
    for b in sweep or ():
        rows.setdefault(int(b), {"batch": None, "bytes": int(b), "source": "sweep"})
    return [rows[k] for k in sorted(rows)]



def nccl_tests_command(config: dict, gpus: int, env: dict[str, str] | None = None) -> str:
    """The one nccl-tests command for the model's decode all-reduces (every chapter that names one prints this): from the
    batch-1 size to the batch-64 size of ``config``'s residual stream (``decode_message_sizes``; the batches double, so
    ``-f 2`` lands on each), in the model's dtype, ``gpus`` ranks in one process, CUDA-graph launched (``-G 20``: as the
    engines issue decode all-reduces); ``env`` (NCCL variables) as a sorted prefix.

        nccl_tests_command(load_card("kimi-k2.5"), 8)
        # 'all_reduce_perf -b 14336 -e 917504 -f 2 -g 8 -G 20 -d bfloat16'
    """
    import shlex

    dims = model_dims(config)
    # a dtype nccl-tests has no name for here (a quantized checkpoint's): its activations, what decode all-reduces, are bf16
    name, width = _NCCL_TESTS_DTYPE.get(dims["dtype"].replace("torch.", ""), _NCCL_TESTS_DTYPE["bfloat16"])
    sizes = [s["bytes"] for s in decode_message_sizes(dims["hidden_size"], width)]
    prefix = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((env or {}).items()))
    cmd = f"all_reduce_perf -b {min(sizes)} -e {max(sizes)} -f 2 -g {int(gpus)} -G 20 -d {name}"
    return f"{prefix} {cmd}" if prefix else cmd
