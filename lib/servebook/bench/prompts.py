"""Prompts of an exact token length, from text that ships with CPython (no downloads), and the model's tokenizer."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from ..errors import ParameterError

__all__ = ["Prompt", "load_tokenizer", "build_prompts"]


@dataclass(frozen=True)
class Prompt:
    """A prompt and its length in the model's tokens."""

    text: str
    tokens: int
    seed: int = 0
    index: int = 0


def load_tokenizer(path: str | os.PathLike):
    """The model's tokenizer from a local directory (never downloads)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ParameterError("tokenizer", str(path), f"a local model directory with a tokenizer ({type(exc).__name__}: {str(exc)[:200]})") from exc


_CORPUS_IDS: dict[int, list[int]] = {}


def _corpus_ids(tokenizer) -> list[int]:
    key = id(tokenizer)
    if key not in _CORPUS_IDS:
        import pydoc_data.topics as topics  # the language reference: ships with every CPython

        text = "\n".join(v for _, v in sorted(topics.topics.items()))
        _CORPUS_IDS[key] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return _CORPUS_IDS[key]


def build_prompts(tokenizer, input_len: int, n: int, seed: int = 0) -> list[Prompt]:
    """``n`` prompts of ``input_len`` tokens each: seeded windows of local text, no downloads.

    The text is CPython's language reference (``pydoc_data``), tokenized with the model's
    tokenizer; a window of ``input_len`` tokens is decoded and re-encoded, and trimmed or
    extended until it re-encodes to exactly ``input_len`` tokens (the real count is kept if a
    window cannot be made exact).
    """
    if input_len < 1 or n < 1:
        raise ParameterError("input_len/n", (input_len, n), "both at least 1")
    ids = _corpus_ids(tokenizer)
    if len(ids) < input_len + 8:
        raise ParameterError("input_len", input_len, f"at most {len(ids) - 8} tokens (the local text is that long)")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        start = rng.randrange(0, len(ids) - input_len - 8)
        want = input_len
        best = None
        for _ in range(6):
            text = tokenizer.decode(ids[start:start + want], skip_special_tokens=True)
            got = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if best is None or abs(got - input_len) < abs(best[1] - input_len):
                best = (text, got)
            if got == input_len:
                break
            want += input_len - got
            if want < 1:
                break
        out.append(Prompt(text=best[0], tokens=best[1], seed=seed, index=i))
    return out


