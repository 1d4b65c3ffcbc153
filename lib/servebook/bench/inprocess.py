"""Decode rate of the model itself, in this process, without any server (``model.generate``)."""

from __future__ import annotations

import os
import time

from ..errors import ParameterError

__all__ = ["inprocess_decode_rate"]


def inprocess_decode_rate(model_dir: str | os.PathLike, prompt: str, max_tokens: int = 64, attention: str | None = None,
                          repeats: int = 3, device: str | None = None, threads: int | None = None) -> dict:
    """Decode tok/s of the model itself, in this process, without any server (``model.generate``).

    Method: greedy ``generate`` of exactly 1 and of ``max_tokens`` new tokens (``min_new_tokens``
    set), best of ``repeats`` each after one warm-up; rate = (max_tokens - 1) / (t_N - t_1), so
    prefill cancels. Compared with the served rate it separates the model from the serving path.
    ``threads`` sets torch's intra-op threads for the measurement (restored afterwards); on a
    small CPU model one thread can beat several.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if max_tokens < 2:
        raise ParameterError("max_tokens", max_tokens, "at least 2")
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    kwargs = {"attn_implementation": attention} if attention else {}
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, **kwargs).to(dev).eval()
    ids = tok(prompt, return_tensors="pt").to(dev)

    def timed(n: int) -> float:
        best = float("inf")
        for i in range(repeats + 1):
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.inference_mode():
                model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
            if dev == "cuda":
                torch.cuda.synchronize()
            if i:  # the first call is the warm-up
                best = min(best, time.perf_counter() - t0)
        return best

    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        used = torch.get_num_threads()
        t1, tn = timed(1), timed(max_tokens)
    finally:
        torch.set_num_threads(before)
    impl = getattr(model.config, "_attn_implementation", None)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    del model
    return {"tok_s": (max_tokens - 1) / (tn - t1), "t_first_s": t1, "t_all_s": tn, "max_tokens": max_tokens,
            "device": dev, "attention": impl, "dtype": dtype, "threads": used,
            "method": (f"model.generate in-process on {dev} ({used} torch threads), greedy, best of {repeats}: "
                       f"(N-1)/(t(N)-t(1)) with N={max_tokens}")}


