"""Chapter 05's decode-step profiles: start each server of a plan, time its decode without the profiler,
profile tens of its decode steps, break each step down by kernel category, and keep the trace.

    specs = load_plan("plan.json")                 # [{"label", "engine", "model_dir", "backend", "mode", "role", ...}]
    run_plan(store, specs, budget_gb=120)          # tables profile_runs, decode_breakdown; traces/ in the run dir

Servers whose memory fits the budget together are started at the same time (their starts overlap), then measured
one at a time while the others sit idle (an idle server launches no GPU work), then stopped. A server that fails
to start beside others is tried again alone; a failure is a row with the engine's own error, and the plan goes on.
Entries with a ``batch`` key are grouped by it instead (in the order the keys first appear); an entry with ``lead``
is started, and waited for, before the rest of its batch (a first start that compiles kernels into a cache the
others then find). Every row carries the machine's identity (``machines.machine_identity``) and the run's id.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from ..bench.sse import DECODE_TIMED_TO
from ..errors import ServebookError
from .capture import ProfilerUnavailable, capture, keep_trace, profiler_launch
from .kernels import TraceError, kernel_events, load_trace, trace_slug
from .linearity import kernel_table
from .steps import step_breakdown

__all__ = ["load_plan", "run_plan", "server_memory_gb"]

_KEYS = ("label", "engine", "model_dir")


def load_plan(path: str | os.PathLike) -> list[dict]:
    """The servers to profile, from a JSON list; each needs label, engine and model_dir."""
    specs = json.loads(Path(path).read_text())
    for i, s in enumerate(specs):
        missing = [k for k in _KEYS if not s.get(k)]
        if missing:
            raise ServebookError(f"plan entry {i} lacks {', '.join(missing)}: each entry needs {', '.join(_KEYS)}")
    return specs


def _model_meta(model_dir: str) -> dict:
    p = Path(model_dir) / "servebook_model.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def server_memory_gb(spec: dict) -> float:
    """GPU memory a server of ``spec`` is given room for: its weights plus KV cache and working space."""
    meta = _model_meta(spec["model_dir"])
    weights = float(meta.get("facts", meta).get("slice_total_bytes") or meta.get("weight_bytes") or 0) / 1e9
    return weights + (10.0 if spec["engine"] == "vllm" else 8.0)


def _batches(specs: Sequence[dict], budget_gb: float) -> list[list[dict]]:
    if any("batch" in s for s in specs):
        keys: dict = {}
        for s in specs:
            keys.setdefault(str(s.get("batch", "")), []).append(s)
        return list(keys.values())
    out: list[list[dict]] = []
    cur, used = [], 0.0
    for s in specs:
        need = server_memory_gb(s)
        if cur and (used + need > budget_gb or s.get("alone")):
            out.append(cur)
            cur, used = [], 0.0
        cur.append(s)
        used += need
        if s.get("alone"):
            out.append(cur)
            cur, used = [], 0.0
    if cur:
        out.append(cur)
    return out


def _memory_args(engine: str, kv_gb: float) -> list[str]:
    # several servers share one GPU: each gets a fixed KV cache instead of a share of free memory
    if engine == "vllm":
        return ["--gpu-memory-utilization", "0.08", "--kv-cache-memory-bytes", str(int(kv_gb * (1 << 30)))]
    if engine == "sglang":
        return ["--mem-fraction-static", "0.88", "--max-total-tokens", "16384"]
    return []


def run_plan(store, specs: Sequence[dict], *, budget_gb: float = 120.0, tpot_runs: int = 5, tpot_tokens: int = 128,
             warmup: int = 2, steps: int = 40, ready_timeout: float = 600.0, trace_cap_mb: float = 0.75,
             say: Callable[[str], None] = print) -> list[dict]:
    """Profile every server of ``specs`` (see the module docstring); returns the ``profile_runs`` rows."""
    from ..servers import Server
    from .machines import machine_identity

    try:
        ident = {**machine_identity(), "run_id": store.path.name}
        say(f"profile: machine {ident['machine']} ({ident.get('machine_gpus')} x {ident.get('machine_gpu_name')})")
    except Exception as exc:  # noqa: BLE001 - rows without identity are never subtracted across runs
        ident = {"machine": None, "machine_error": f"{type(exc).__name__}: {exc}"[:300], "run_id": store.path.name}
        say(f"profile: machine identity unknown ({ident['machine_error']})")
    specs = [{**s, "_ident": ident} for s in specs]
    done = {r["label"] for r in store.rows("profile_runs") if r.get("ok")}
    todo = [s for s in specs if s["label"] not in done]
    if len(todo) < len(specs):
        say(f"profile: {len(specs) - len(todo)} of {len(specs)} already recorded in this run")
    rows, retry = [], []
    for bi, batch in enumerate(_batches(todo, budget_gb)):
        say(f"profile: batch {bi + 1}: {', '.join(s['label'] for s in batch)} (started together)")
        started = _start_all(store, batch, ready_timeout, say, Server)
        try:
            for s in batch:
                srv = started.get(s["label"])
                if isinstance(srv, BaseException):
                    if len(batch) > 1:
                        retry.append(s)
                        say(f"  {s['label']}: did not start beside others ({str(srv).splitlines()[0][:160]}); tried alone later")
                    else:
                        rows.append(_record_failure(store, s, srv, "start"))
                    continue
                rows.append(_measure(store, s, srv, tpot_runs=tpot_runs, tpot_tokens=tpot_tokens, warmup=warmup,
                                     steps=steps, trace_cap_mb=trace_cap_mb, say=say))
        finally:
            for srv in started.values():
                if not isinstance(srv, BaseException):
                    srv.stop()
    for s in retry:
        say(f"profile: {s['label']} alone")
        srv = _start_all(store, [s], ready_timeout, say, Server)[s["label"]]
        if isinstance(srv, BaseException):
            rows.append(_record_failure(store, s, srv, "start (alone)"))
            continue
        try:
            rows.append(_measure(store, s, srv, tpot_runs=tpot_runs, tpot_tokens=tpot_tokens, warmup=warmup, steps=steps,
                                 trace_cap_mb=trace_cap_mb, say=say))
        finally:
            srv.stop()
    return rows


def _launch(store, s: dict):
    from ..engines import get_engine
    from ..models import engine_args_of

    engine = get_engine(s["engine"])
    trace_dir = store.path / "traces" / "raw" / trace_slug(s["label"])
    try:
        prof_args, prof_env = profiler_launch(engine, trace_dir)
    except ProfilerUnavailable as exc:   # timed all the same; the profile is a one-line finding
        prof_args, prof_env, trace_dir = [], {}, exc
    extra = (engine_args_of(s["model_dir"], engine.name) + _memory_args(engine.name, s.get("kv_gb", 4.0))
             + list(s.get("extra") or []) + (list(engine.eager_args or ()) if s.get("mode") == "eager" else []) + prof_args)
    launch = engine.launch(s["model_dir"], attention=s.get("backend") or None, extra=extra, env=prof_env)
    return engine, launch, trace_dir


def _start_all(store, batch: Sequence[dict], ready_timeout: float, say, Server) -> dict:
    out: dict = {}

    def one(s):
        try:
            engine, launch, trace_dir = _launch(store, s)
            log = store.path / "logs" / f"profile-{s['label'].replace(' ', '_').replace('/', '_')}.log"
            srv = Server.start(launch, log, ready_timeout=ready_timeout, registry=store.path / "servers.jsonl",
                               progress=lambda m, s=s: say(f"  {s['label']}: {m}"))
            srv._sb = (engine, trace_dir)
            out[s["label"]] = srv
        except BaseException as exc:  # noqa: BLE001 - recorded per server
            out[s["label"]] = exc

    lead = [s for s in batch if s.get("lead")]
    for s in lead:        # its first start compiles what the others then find in the cache
        say(f"  {s['label']}: started first (lead), the others after it is ready")
        one(s)
    threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in batch if not s.get("lead")]
    for i, t in enumerate(threads):
        t.start()
        time.sleep(2.0 if i + 1 < len(threads) else 0)
    for t in threads:
        t.join()
    return out


def _base_row(s: dict) -> dict:
    meta = _model_meta(s["model_dir"])
    facts = meta.get("facts", meta)
    return {"label": s["label"], "engine": s["engine"], "backend": s.get("backend") or "auto", "mode": s.get("mode", "graph"),
            "card": s.get("card") or meta.get("card"), "role": s.get("role", "slice"), "quant": s.get("quant", "bf16"),
            "layers": facts.get("slice_layers"), "full_layers": facts.get("full_layers"), "dense_layers": facts.get("dense_layers"),
            "model": Path(s["model_dir"]).name, **{k: s[k] for k in ("start", "reference") if k in s},
            **{k: v for k, v in (s.get("_ident") or {}).items()}}


def _record_failure(store, s: dict, exc: BaseException, phase: str) -> dict:
    row = {**_base_row(s), "ok": False, "phase": phase, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    store.append("profile_runs", row)
    return row


def _measure(store, s: dict, srv, *, tpot_runs: int, tpot_tokens: int, warmup: int, steps: int, trace_cap_mb: int, say) -> dict:
    from ..bench import build_prompts, load_tokenizer, mean_ci

    engine, trace_dir = srv._sb
    row = {**_base_row(s), "ready_s": srv.ready_s, "version": engine.version(), "taken_at": round(time.time(), 3)}
    name = engine.served_model_name(s["model_dir"])
    row.update(_reported(engine, srv))
    tok = load_tokenizer(s["model_dir"])
    prompts = build_prompts(tok, input_len=128, n=warmup + tpot_runs + 1, seed=0)
    tpots = _unprofiled_tpots(srv, engine, name, tok, prompts, warmup, tpot_runs, tpot_tokens)
    if not tpots:
        return _fail_row(store, row, "measure", "no request of the unprofiled timing succeeded")
    ci = mean_ci(tpots)
    row.update({"tpot_ms": statistics.fmean(tpots), "tpot_ci_ms": ci.get("half_width") if isinstance(ci, dict) else None,
                "tpot_runs": len(tpots), "tpot_tokens": tpot_tokens, "decode_timed_to": DECODE_TIMED_TO})
    say(f"  {s['label']}: unprofiled {row['tpot_ms']:.3f} ms per token ({1e3 / row['tpot_ms']:.1f} tok/s)")
    slug = trace_slug(s["label"])
    if isinstance(trace_dir, ProfilerUnavailable):
        return _fail_row(store, row, "profile", str(trace_dir))
    try:
        path = capture(engine.name, srv.base_url, name, prompts[-1].text, trace_dir, tpot_s=row["tpot_ms"] / 1e3,
                       steps=steps, say=say)
    except (TraceError, ServebookError, OSError) as exc:
        return _fail_row(store, row, "profile", f"{type(exc).__name__}: {exc}")
    try:
        kernels = kernel_events(load_trace(path))
        b = step_breakdown(kernels)
        lo = next(k.ts for k in kernels if k.name == b["anchor"])
        window = (lo, lo + b["step_ms"] * 1e3 * b["steps"])
    except (TraceError, ServebookError, OSError) as exc:
        b, window = None, None
        error = f"{type(exc).__name__}: {exc}"
    kept = keep_trace(path, store.path / "traces" / f"{slug}.trace.json.gz", cap_bytes=int(trace_cap_mb * (1 << 20)), window=window)
    row.update({"trace": os.path.relpath(kept["path"], store.path), "trace_bytes": kept["bytes"], "trace_kept": kept["kept"]})
    if b is None:
        return _fail_row(store, row, "breakdown", error)
    _write_excerpt(store.path / "traces" / f"{slug}.excerpt.json", kernels, b, s, row)
    row.update(_write_kernel_table(store.path / "traces", slug, kernels, b["anchor"], s["label"]))
    _record_breakdown(store, s, row, b)
    say(f"  {s['label']}: profiled step {b['step_ms']:.3f} ms over {b['steps']} steps (GPU busy {b['busy_ms']:.3f} ms)")
    return row


def _reported(engine, srv) -> dict:
    """The attention backend the engine reports (server info and log) and the MoE method its log names, or the error."""
    try:
        log_text = Path(srv.log_path).read_text(errors="replace")
        reported = engine.reported_backend(engine.server_info(srv.base_url), log_text)
        return {"reported_backend": reported.get("attention") if isinstance(reported, dict) else reported,
                "moe_kernel": _moe_method(log_text)}
    except Exception as exc:  # noqa: BLE001
        return {"reported_backend": None, "reported_error": str(exc)[:300]}


def _unprofiled_tpots(srv, engine, name: str, tok, prompts: list, warmup: int, tpot_runs: int, tpot_tokens: int) -> list[float]:
    """ms per output token of ``tpot_runs`` single requests without the profiler, after ``warmup`` untimed ones."""
    from ..bench import run_requests

    run_requests(srv.base_url, name, prompts[:warmup], max_tokens=32, engine=engine.name, tokenizer=tok)
    tpots = []
    for p in prompts[warmup:warmup + tpot_runs]:
        r = run_requests(srv.base_url, name, [p], max_tokens=tpot_tokens, engine=engine.name, tokenizer=tok)[0]
        if r.ok and r.tpot_s:
            tpots.append(r.tpot_s * 1e3)
    return tpots


def _record_breakdown(store, s: dict, row: dict, b: dict) -> None:
    """The profiled step's figures into the row, appended to ``profile_runs``; a row a category to ``decode_breakdown``."""
    row.update({"ok": True, "steps": b["steps"], "step_ms": b["step_ms"], "step_ms_sd": b["step_ms_sd"], "busy_ms": b["busy_ms"],
                "idle_ms": b["categories"]["gpu idle"], "kernel_ms": b["kernel_ms"], "overlap_ms": b["overlap_ms"],
                "kernels_per_step": b["kernels_per_step"], "anchor": b["anchor"][:200],
                "profiler_overhead_pct": 100 * (b["step_ms"] / row["tpot_ms"] - 1)})
    store.append("profile_runs", row)
    for cat, ms in b["categories"].items():
        store.append("decode_breakdown", {"label": s["label"], "engine": s["engine"], "backend": row["backend"],
                                          "reported_backend": row.get("reported_backend"), "mode": row["mode"],
                                          "card": row["card"], "layers": row["layers"], "quant": row["quant"],
                                          "category": cat, "ms_per_step": ms, "share": ms / b["step_ms"],
                                          "steps": b["steps"], "tpot_unprofiled_ms": row["tpot_ms"], "step_ms": b["step_ms"],
                                          "taken_at": row["taken_at"], "machine": row.get("machine"), "run_id": row.get("run_id")})


def _write_kernel_table(traces: Path, slug: str, kernels, anchor: str, label: str) -> dict:
    """Each kernel of the step with its median duration over the whole steps (the kernels matched between depths:
    ``linearity.kernel_table``) to ``traces/<slug>.kernels.json``; the row's fields that name it, or the error."""
    try:
        kt = kernel_table(kernels, anchor)
        (traces / f"{slug}.kernels.json").write_text(json.dumps({**kt, "label": label}))
        return {"kernel_table": f"traces/{slug}.kernels.json", "kernel_table_steps": kt["steps_used"]}
    except (TraceError, ValueError) as exc:
        return {"kernel_table_error": f"{type(exc).__name__}: {exc}"[:300]}


def _moe_method(log_text: str) -> str | None:
    """The quantized MoE method an engine names in its log (e.g. SGLang's CompressedTensorsWNA16MarlinMoEMethod)."""
    import re

    used = re.findall(r"\bUsing (\w*(?:MoEMethod|MoeMethod))\b", log_text)   # SGLang: "Using CompressedTensorsWNA16MarlinMoEMethod"
    if used:
        return used[-1]
    found = re.findall(r"\b(\w*(?:MoEMethod|MoeMethod|MarlinMoE|FusedMoE\w*Method))\b", log_text)
    return found[-1] if found else None


def _fail_row(store, row: dict, phase: str, error: str) -> dict:
    row.update({"ok": False, "phase": phase, "error": error[:2000]})
    store.append("profile_runs", row)
    return row


def _write_excerpt(path: Path, kernels, b: dict, s: dict, row: dict, n_steps: int = 2) -> None:
    """The kernels of ``n_steps`` whole steps, for the classifier's tests and for reading without Perfetto."""
    marks = [k.ts for k in kernels if k.name == b["anchor"]]
    lo, hi = marks[0], marks[min(n_steps, len(marks) - 1)]
    ks = [{"name": k.name, "ts": round(k.ts - lo, 3), "dur": k.dur, "cat": k.cat, "stream": k.stream}
          for k in kernels if lo <= k.ts < hi]
    path.write_text(json.dumps({"engine": s["engine"], "version": row.get("version"), "backend": row.get("backend"),
                                "card": row.get("card"), "layers": row.get("layers"), "mode": row.get("mode"),
                                "steps": n_steps, "anchor": b["anchor"], "kernels": ks}, indent=0))
