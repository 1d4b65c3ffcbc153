"""``python -m servebook.nccl --out DIR``: chapter 04's whole grid into one run (how the recorded H200 run was made)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..errors import ServebookError
from ..hosts import host_policy_env
from .grid import builtin_grid, parse_grid
from .launch import allreduce_bench, available_backend, find_all_reduce_perf
from .runner import run_grid
from .sizes import message_sizes, model_dims

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """python -m servebook.nccl --out DIR [--model CARD] [--grid TEXT] [--deadline S]: the whole grid into one run."""
    from ..params import resolve_model
    from ..results import RunStore

    args = _parser().parse_args(argv)
    try:
        settings = ([] if args.no_builtin else builtin_grid()) + parse_grid(args.grid)
    except ServebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store = RunStore.at(args.out)
    card = resolve_model(args.model, build=False)
    dims = model_dims(card if isinstance(card, dict) else json.loads((Path(card) / "config.json").read_text()))
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= args.max_batch]
    sizes = message_sizes(dims["hidden_size"], 2, batches)
    backend, world = available_backend()
    arp = find_all_reduce_perf(args.all_reduce_perf)
    store.write_manifest(_manifest(args.model, dims, batches, sizes, settings, backend, world, arp))
    if not arp:
        store.record_failure("nccl-tests", "all_reduce_perf is not on PATH on this host and there is no internet to fetch and "
                             "build nccl-tests; the reference figures come from shared/measurements-h200.md",
                             setting="nccl-tests", kind="not_available")
    t0 = time.monotonic()
    summary = run_grid(store, sizes, settings, timeout_s=args.timeout, deadline_s=args.deadline, all_reduce_perf=arp)
    if backend == "nccl" and (args.deadline is None or time.monotonic() - t0 < args.deadline):
        _logging_control(store, sizes, backend, world, args.timeout)
    store.write_manifest({"summary": summary, "elapsed_s": round(time.monotonic() - t0, 1)})
    print(json.dumps(summary))
    return 0


def _parser():
    import argparse

    ap = argparse.ArgumentParser(prog="python -m servebook.nccl", description=main.__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="kimi-k2.5")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--grid", default="", help="extra settings, e.g. 'NCCL_PROTO=LL;NCCL_ALGO=Tree'")
    ap.add_argument("--no-builtin", action="store_true")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--deadline", type=float, default=None, help="start no new setting after this many seconds")
    ap.add_argument("--all-reduce-perf", default="")
    return ap


def _sh(cmd) -> str:
    """A command's output, or why it is unavailable (no nvidia-smi, a timeout)."""
    import subprocess

    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {type(exc).__name__}"


def _manifest(model: str, dims: dict, batches: list[int], sizes: list[dict], settings, backend: str, world: int,
              arp) -> dict:
    """The run's manifest before the grid: the model's sizes, the settings, the host (GPUs, topology, policy) and the method."""
    import platform

    return {
        "chapter": "04_tune_nccl", "model": model, "hidden_size": dims["hidden_size"],
        "num_hidden_layers": dims["num_hidden_layers"], "batches": batches, "sizes": sizes,
        "settings": [s.label for s in settings], "backend": backend, "world_size": world,
        "python": platform.python_version(), "host": platform.node(),
        "gpus": _sh(["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"]),
        "topology": _sh(["nvidia-smi", "topo", "-m"]),
        "host_policy_env": host_policy_env(), "all_reduce_perf": arp or "not found on PATH",
        "method": ("one bounded torchrun launch per setting (one process per GPU, NCCL with device_id, os._exit after "
                   "writing results) plus one bounded single-process CuPy launch per setting (ncclCommInitAll, group calls, "
                   "one CUDA graph per GPU). graph: iters all-reduces captured per graph, the graph launched `launches` times "
                   "after a barrier; per-call latency = elapsed / (iters x launches), median of repeats; us_median from CUDA "
                   "events on rank 0 / GPU 0, us_wall from the host clock after synchronizing (the nccl-tests -G method). "
                   "eager: a Python loop of calls. Sum checked eagerly and through a 1-call captured graph on every rank. "
                   "Algorithm/protocol from NCCL_DEBUG=INFO (subsystems INIT,ENV,TUNING,COLL) written to per-process files."),
    }


def _logging_control(store, sizes: list[dict], backend: str, world: int, timeout: float) -> None:
    """The control for the logging cost: NCCL_DEBUG=INFO prints a line per call, which an eager loop pays for; the
    batch-1 and batch-16 sizes again at the defaults without it (table ``allreduce_control``)."""
    res = allreduce_bench([s["bytes"] for s in sizes if s["batch"] in (1, 16)], backend=backend, world_size=world,
                          timeout_s=timeout, debug=False)
    for r in res["rows"]:
        store.append("allreduce_control", {**r, "setting": "default", "nccl_debug": "unset"})
    if res["error"]:
        store.record_failure("allreduce control without NCCL_DEBUG", res["error"], setting="default-control")
