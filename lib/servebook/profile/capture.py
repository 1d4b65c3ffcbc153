"""Asking a running engine server for a profile of its decode steps.

    args, env = profiler_launch(engine, trace_dir)          # add to the server's launch
    path = capture(engine.name, base_url, model, tokenizer, trace_dir, tpot_s=0.002, steps=40)

SGLang: ``SGLANG_TORCH_PROFILER_DIR`` set for the server, then ``POST /start_profile`` (activities GPU) and
``POST /stop_profile`` (``sglang/srt/entrypoints/http_server.py``: ``/start_profile`` takes a ``ProfileReq``).
vLLM: ``--profiler-config '{"profiler": "torch", "torch_profiler_dir": ...}'`` (``vllm/config/profiler.py``; older
versions read ``VLLM_TORCH_PROFILER_DIR``), then the same two endpoints (``vllm/entrypoints/serve/profile``).
While one long greedy request decodes, the profile is started once the request is past its prefill and stopped
after about ``steps`` decode steps; the request then runs to its end. The trace the engine wrote is returned.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from .kernels import TraceError, kernel_events, load_trace

__all__ = ["ProfilerUnavailable", "profiler_launch", "capture", "keep_trace"]


class ProfilerUnavailable(TraceError):
    """The engine (or this version of it) offers no profiler servebook can drive."""


def profiler_launch(engine, trace_dir: str | os.PathLike) -> tuple[list[str], dict[str, str]]:
    """Server arguments and environment that let ``engine`` write torch-profiler traces to ``trace_dir``."""
    d = str(Path(trace_dir).resolve())
    name = engine.name
    if name == "sglang":
        return [], {"SGLANG_TORCH_PROFILER_DIR": d}
    if name == "vllm":
        options = {}
        try:
            options = engine.cli_options() or {}
        except Exception:  # noqa: BLE001 - the version's parser could not be read: the environment variable of older versions
            options = {}
        flags = set(options.get("options") or options) if isinstance(options, dict) else set(options)
        if not flags or "--profiler-config" in flags:
            cfg = {"profiler": "torch", "torch_profiler_dir": d, "torch_profiler_with_stack": False, "ignore_frontend": True}
            return ["--profiler-config", json.dumps(cfg)], {}
        return [], {"VLLM_TORCH_PROFILER_DIR": d}
    raise ProfilerUnavailable(f"{name} has no profiler endpoint (no /start_profile) in its server: chapter 05 profiles "
                              "its model decoding in the notebook's process instead (servebook.profile.inprocess_profiles)")


def _post(url: str, body: dict | None, timeout: float) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _traces(trace_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in trace_dir.rglob("*") if p.is_file() and (p.name.endswith(".json.gz") or p.name.endswith(".json"))}


def capture(engine: str, base_url: str, model: str, prompt: str, trace_dir: str | os.PathLike, *, tpot_s: float,
            steps: int = 40, lead_s: float = 1.5, tail_s: float = 3.0, write_timeout_s: float = 180.0, say=print) -> Path:
    """Profile about ``steps`` decode steps of one greedy stream; the path of the trace with the most kernels.

    ``tpot_s``: the unprofiled time per token, to size the request (``lead_s`` before the profile starts, the window,
    ``tail_s`` after it: both engines stop the profile before /stop_profile answers) and the profiling window. Raises
    :class:`TraceError` (with the engine's own answer) when the profiler cannot be started, stopped, or wrote nothing.
    """
    from ..bench import run_requests

    trace_dir = Path(trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    before = _traces(trace_dir)
    window_s = max(0.3, steps * tpot_s * 1.5)
    max_tokens = int(min(8000, max(64, (lead_s + window_s + tail_s) / max(tpot_s, 1e-4))))
    result: dict = {}

    def stream():
        try:
            result["r"] = run_requests(base_url, model, [prompt], max_tokens=max_tokens, concurrency=1, engine=engine,
                                       request_timeout=600.0)
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    time.sleep(lead_s)
    body = {"activities": ["GPU"], "with_stack": False, "record_shapes": False} if engine == "sglang" else None
    code, text = _post(base_url + "/start_profile", body, 60)
    if code != 200:
        t.join(timeout=600)
        raise TraceError(f"{engine} refused /start_profile (HTTP {code}): {text.strip()[:300]}")
    time.sleep(window_s)
    code, text = _post(base_url + "/stop_profile", None, write_timeout_s)
    if code != 200:
        raise TraceError(f"{engine} refused /stop_profile (HTTP {code}): {text.strip()[:300]}")
    t.join(timeout=600)
    if result.get("error") is not None:
        raise TraceError(f"the profiled request failed: {result['error']}")
    # the engine writes its trace after stop returns (SGLang: "This will take some time"): wait until the sizes settle
    deadline, last = time.monotonic() + write_timeout_s, None
    while time.monotonic() < deadline:
        now = {p: s for p, s in _traces(trace_dir).items() if before.get(p) != s}
        if now and now == last:
            break
        last = now
        time.sleep(3.0)
    new = last or {}
    if not new:
        raise TraceError(f"{engine} wrote no trace to {trace_dir} within {write_timeout_s:.0f} s of /stop_profile")
    scored = []
    for p in new:
        try:
            scored.append((len(kernel_events(load_trace(p))), p))
        except TraceError:
            continue
    if not scored or max(scored)[0] == 0:
        raise TraceError(f"{engine}'s traces in {trace_dir} ({', '.join(p.name for p in new)}) hold no GPU kernels")
    say(f"  profile: {max(scored)[1].name} ({max(scored)[0]} kernels, request of {max_tokens} tokens)")
    return max(scored)[1]


def keep_trace(src: str | os.PathLike, dest: str | os.PathLike, cap_bytes: int = 8 << 20, window: tuple[float, float] | None = None) -> dict:
    """Copy a trace into the run directory, gzip-compressed and at most ``cap_bytes``: past the cap only the events
    inside ``window`` (start, end in the trace's microseconds; the measured steps) are kept, then the window is
    shortened until it fits. The copy opens in Perfetto (ui.perfetto.dev) or chrome://tracing."""
    data = load_trace(src)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    blob = gzip.compress(json.dumps(data).encode(), compresslevel=6)
    kept = "whole trace"
    if len(blob) > cap_bytes:
        events = [e for e in data["traceEvents"] if isinstance(e, dict)]
        meta = [e for e in events if e.get("ph") == "M"]
        timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
        lo, hi = window if window else (min(e["ts"] for e in timed), max(e["ts"] for e in timed))
        frac = 1.0
        while True:
            end = lo + (hi - lo) * frac
            out = {k: v for k, v in data.items() if k != "traceEvents"}
            out["traceEvents"] = meta + [e for e in timed if lo <= e["ts"] <= end]
            blob = gzip.compress(json.dumps(out).encode(), compresslevel=6)
            if len(blob) <= cap_bytes or frac < 0.02:
                break
            frac /= 2
        kept = f"events of the measured steps only (first {frac:.0%} of them), to stay under {cap_bytes / (1 << 20):.2f} MiB"
    dest.write_bytes(blob)
    return {"path": str(dest), "bytes": len(blob), "kept": kept, "source_bytes": Path(src).stat().st_size}
