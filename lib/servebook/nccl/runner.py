"""The grid runner: every setting measured by one bounded launch each, rows into the run's tables, resumable.

    run_grid(store, sizes, builtin_grid(), timeout_s=120, host=h)   # {'measured', 'failed', 'not_run'}
"""

from __future__ import annotations

import time

from ..hosts import host_policy_env
from .debug import debug_excerpt, parse_nccl_debug
from .grid import Setting
from .launch import available_backend, launch

__all__ = ["run_grid"]

_SHAPE_STUDY = [(1, 400), (50, 8), (400, 1)]
_SMOKE_KNOBS = dict(iters=5, launches=4, eager_iters=10, warmup=2, repeats=3)


def run_grid(store, sizes: list[dict], settings: list[Setting], timeout_s: float = 120, backend: str | None = None,
             world_size: int | None = None, single_process: bool = True, raw: bool = True, deadline_s: float | None = None,
             all_reduce_perf: str | None = None, smoke: bool = False, say=print, host=None) -> dict:
    """Measure every setting (one bounded launch each) into ``store``: tables allreduce, nccl_used, failures.

    Resumable: a setting already in the allreduce table is skipped. ``deadline_s`` stops starting
    new settings once that much wall time has passed (recorded as not measured). With ``host``
    (``servebook.hosts``) every launch runs on that host; ``all_reduce_perf`` is then a path there.
    The host's policy env (``servebook.hosts.host_policy_env``) goes with every launch and into the manifest.
    """
    auto_backend, auto_world = available_backend(host) if backend is None or world_size is None else (backend, world_size)
    backend = backend or auto_backend
    world_size = world_size or auto_world
    policy = host_policy_env()
    store.write_manifest({"host_policy_env": policy})
    t0 = time.monotonic()
    settings = _applicable(store, settings, backend)
    summary: dict[str, list] = {"measured": [], "failed": [], "not_run": []}
    excerpts: list[str] = []
    for i, setting in enumerate(settings):
        if store.done("allreduce", setting=setting.label) or store.done("failures", setting=setting.label):
            continue
        if deadline_s is not None and time.monotonic() - t0 > deadline_s:
            store.record_failure(f"allreduce {setting.label}", "not measured: the session's device-time budget ran out first",
                                 setting=setting.label, kind="not_run")
            summary["not_run"].append(setting.label)
            continue
        say(f"[{i + 1}/{len(settings)}] {setting.label}: {backend}, {world_size} processes")
        parts = _measure(host, setting, sizes, timeout_s, backend, world_size, raw, single_process, smoke, policy)
        for part, name in zip(parts, ["torch", "raw-single-process"]):
            excerpts += _store_part(store, setting, sizes, part, name, say)
        _check_sums(store, setting, parts, say)
        (summary["failed"] if parts[0]["error"] else summary["measured"]).append(setting.label)
    if excerpts:
        store.write_text("nccl_debug_excerpt.log", "\n".join(excerpts) + "\n")
    if all_reduce_perf:
        _nccl_tests(store, host, settings, all_reduce_perf, [s["bytes"] for s in sizes], world_size, timeout_s, policy)
    return summary


def _applicable(store, settings: list[Setting], backend: str) -> list[Setting]:
    """The settings that apply to ``backend``: NCCL variables mean nothing to gloo (recorded as skipped)."""
    if backend == "nccl":
        return settings
    for s in settings:
        if s and not store.done("skipped", setting=s.label, reason=f"NCCL settings do not apply to {backend}"):  # resumed: once
            store.append("skipped", {"setting": s.label, "reason": f"NCCL settings do not apply to {backend}"})
    return [s for s in settings if not s] or [Setting()]


def _measure(host, setting: Setting, sizes: list[dict], timeout_s: float, backend: str, world_size: int, raw: bool,
             single_process: bool, smoke: bool, policy: dict) -> list[dict]:
    """The torchrun launch for one setting, and the single-process launch next to it on NCCL."""
    size_list = [s["bytes"] for s in sizes]
    shapes = _SHAPE_STUDY if not setting and not smoke else None
    shape_size = min([s["bytes"] for s in sizes if s.get("source", "model") == "model"] or size_list)
    knobs = dict(_SMOKE_KNOBS) if smoke else {}
    common = dict(sizes_bytes=size_list, env=dict(setting), shape_study=shapes, shape_size=shape_size, policy_env=policy, **knobs)
    parts = [launch(host, "allreduce_bench", timeout_s, world_size=world_size, backend=backend, raw=raw and backend == "nccl",
                    **common)]
    if backend == "nccl" and single_process:
        parts.append(launch(host, "single_process_bench", min(timeout_s, 90), ndev=world_size, **common))
    return parts


def _store_part(store, setting: Setting, sizes: list[dict], part: dict, path: str, say) -> list[str]:
    """One launch's rows, NCCL's choices, launch info and failures into ``store``; its debug excerpt lines."""
    batch_of = {s["bytes"]: s.get("batch") for s in sizes}
    source_of = {s["bytes"]: s.get("source", "model") for s in sizes}
    launch_name = path if path != "torch" else "torchrun"
    for r in part["rows"]:
        if r.get("mode") == "error":
            store.record_failure(f"allreduce {setting.label} {r.get('path')} {r.get('bytes')}", r["error"],
                                 setting=setting.label, path=r.get("path"), bytes=r.get("bytes"))
            continue
        store.append("allreduce", {**r, "setting": setting.label, "batch": batch_of.get(r.get("bytes")),
                                   "size_source": source_of.get(r.get("bytes"), "sweep")})
    parsed = parse_nccl_debug(part["debug"])
    for c in parsed["choices"]:
        if c["func"] not in ("", "AllReduce"):
            continue
        store.append("nccl_used", {"setting": setting.label, "launch": launch_name,
                                   "bytes": c["bytes"], "algo": c["algo"], "proto": c["proto"], "channels": c["channels"],
                                   "count": c["count"], "nccl_version": parsed["version"],
                                   "env_seen": ",".join(f"{k}={v}" for k, v in sorted(parsed["env"].items()))})
    excerpt = [f"# setting {setting.label} ({launch_name})"] + debug_excerpt(part["debug"], limit=12) if part["debug"] else []
    if part.get("info", {}).get("raw_error"):
        store.record_failure(f"allreduce {setting.label} raw-per-process", part["info"]["raw_error"],
                             setting=setting.label, path="raw-per-process")
    if part.get("info"):
        store.append("launch_info", {"setting": setting.label, "launch": path, **part["info"]})
    if part["error"]:
        store.record_failure(f"allreduce {setting.label} {path}", part["error"], setting=setting.label,
                             path=path, rows_kept=len(part["rows"]))
        say(f"   failed: {part['error'][:300]}")
    return excerpt


def _check_sums(store, setting: Setting, parts: list[dict], say) -> None:
    """A wrong sum anywhere is a row of ``wrong_sums``: such a setting is never recommended."""
    bad = [r for p in parts for r in p["rows"] if r.get("sum_ok") is False]
    if bad:
        store.append("wrong_sums", {"setting": setting.label, "points": len(bad),
                                    "paths": sorted({r["path"] for r in bad}), "bytes": sorted({r["bytes"] for r in bad})})
        say(f"   WRONG SUM under {setting.label}: {len(bad)} points; this setting is never recommended")


def _nccl_tests(store, host, settings: list[Setting], binary: str, sizes: list[int], world_size: int, timeout_s: float,
                policy: dict) -> None:
    """nccl-tests' all_reduce_perf under each setting, into table ``nccl_tests``."""
    for setting in settings:
        if store.done("nccl_tests", setting=setting.label):
            continue
        got = launch(host, "run_all_reduce_perf", timeout_s, binary=binary, sizes=sizes, ngpus=world_size, env=dict(setting),
                     policy_env=policy)
        for r in got["rows"]:
            store.append("nccl_tests", {**r, "setting": setting.label})
        if got["error"]:
            store.record_failure(f"nccl-tests {setting.label}", got["error"], setting=setting.label, path="nccl-tests")
