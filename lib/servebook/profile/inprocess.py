"""The decode step of a model run in this process, profiled with torch's profiler: for an engine with no profiler
endpoint (``transformers serve``), and for the CPU book.

    rows = inprocess_profiles(model_dir, depths=[2, 3, None], steps=24)   # None: every layer of the model

The model is loaded once; a slice keeps its first N decoder layers (the same weights). Each depth decodes greedily
with its KV cache, one token per step; every step runs inside ``record_function("servebook::decode_step")``, which
marks the steps in the trace. Time per token without the profiler is taken first, over the same steps.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from .kernels import kernel_events, load_trace
from .steps import step_breakdown

__all__ = ["inprocess_profiles", "STEP_MARK"]

STEP_MARK = "servebook::decode_step"


class _quiet_stderr:
    """The profiler's C++ side prints a line to file descriptor 2 at each start and stop: keep it off the page."""

    def __enter__(self):
        import sys

        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        return False


def _decode(model, ids, steps: int, mark: bool):
    import torch

    out = model(input_ids=ids, use_cache=True)
    cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        if mark:
            with torch.profiler.record_function(STEP_MARK):
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
        else:
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        cache = out.past_key_values
        times.append(time.perf_counter() - t0)
    return times


def inprocess_profiles(model_dir: str | os.PathLike, depths=(None,), *, steps: int = 24, prompt_tokens: int = 32,
                       threads: int | None = None, trace_dir: str | os.PathLike | None = None, say=print) -> list[dict]:
    """Profile ``steps`` decode steps at each depth (a number of layers, None for all); one row per depth with the
    unprofiled time per token, the profiled step and its breakdown (``categories``), and the trace's path."""
    import warnings

    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()   # the 5.x rename of past_key_values is logged at every call
    warnings.filterwarnings("ignore", message=".*past_key_values.*")   # the 5.x rename; the old name works on every 5.x
    if threads:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    model.eval()
    layers = model.model.layers
    total = len(layers)
    ids = torch.arange(3, 3 + prompt_tokens).unsqueeze(0) % model.config.vocab_size
    rows = []
    trace_dir = Path(trace_dir or tempfile.mkdtemp(prefix="servebook-prof-"))
    trace_dir.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        with _quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            _decode(model, ids, 2, mark=True)   # the profiler's first session in a process pays its own start-up
        for depth in depths:
            n = total if depth is None else int(depth)
            if not 1 <= n <= total:
                raise ValueError(f"depth {depth}: the model has {total} layers")
            model.model.layers = layers[:n]
            model.config.num_hidden_layers = n
            _decode(model, ids, 4, mark=False)                        # warm-up
            tpots = _decode(model, ids, steps, mark=False)[2:]        # unprofiled
            with _quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                _decode(model, ids, steps, mark=True)
            path = trace_dir / f"inprocess-L{n}.trace.json"
            prof.export_chrome_trace(str(path))
            trace = load_trace(path)
            marks = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in trace["traceEvents"]
                           if isinstance(e, dict) and e.get("name") == STEP_MARK and e.get("ph") == "X")
            kernels = [k for k in kernel_events(trace) if k.name != STEP_MARK]
            # the step marks are the step's boundaries; the last end closes the window
            b = step_breakdown(kernels, marks=[m[0] for m in marks] + [marks[-1][1]])
            rows.append({"layers": n, "full_layers": total, "tpot_ms": 1e3 * statistics.fmean(tpots),
                         "tpot_ms_sd": 1e3 * statistics.pstdev(tpots), "tpot_runs": len(tpots), "breakdown": b,
                         "trace": str(path), "threads": torch.get_num_threads()})
            say(f"  in process, {n} of {total} layers: {rows[-1]['tpot_ms']:.2f} ms per token unprofiled, "
                f"{b['step_ms']:.2f} ms profiled ({b['busy_ms']:.2f} ms in operators)")
    model.model.layers = layers
    model.config.num_hidden_layers = total
    hf_logging.set_verbosity(verbosity)
    return rows
