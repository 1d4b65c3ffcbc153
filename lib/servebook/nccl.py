"""Chapter 04: all-reduce latency at the model's real decode message sizes.

    sizes = decode_message_sizes(hidden_size=7168, dtype_bytes=2, batches=[1, 8, 64])
    rows = allreduce_bench(sizes, world_size=2, env={"NCCL_PROTO": "LL"}, timeout_s=120)

One process per device under ``torchrun``, each bounded by a timeout (process-group
teardown can hang after the work is done, so workers write their result and exit at
once). With two or more CUDA GPUs the backend is NCCL and every size is timed twice:
eager (a Python loop, which also measures launch overhead) and graph-replayed (many
all-reduces captured into one CUDA graph, replayed and timed with CUDA events, the way
engines decode). Without GPUs the same method runs on the CPU with gloo, labelled so:
it teaches the method, not NCCL.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from .errors import ServebookError
from .servers import free_port, run_bounded

__all__ = ["decode_message_sizes", "allreduce_bench", "available_backend"]


def decode_message_sizes(hidden_size: int, dtype_bytes: int = 2, batches: list[int] | tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> list[dict]:
    """One all-reduce of the residual stream per decode step: hidden_size x batch x bytes."""
    return [{"batch": b, "bytes": int(hidden_size) * int(b) * int(dtype_bytes)} for b in batches]


def available_backend() -> tuple[str, int]:
    """('nccl', n_gpus) with two or more CUDA GPUs, else ('gloo', 2) on the CPU."""
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        n = 0
    return ("nccl", n) if n >= 2 else ("gloo", 2)


_WORKER = r'''
import json, os, sys, time, statistics, datetime
import torch, torch.distributed as dist
cfg = json.loads(sys.argv[1])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
backend = cfg["backend"]
if backend == "nccl":
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    # device_id binds the communicator eagerly; without it init has hung on H200 hosts.
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=cfg["timeout_s"]))
else:
    dev = torch.device("cpu")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=cfg["timeout_s"]))
dtype = getattr(torch, cfg["dtype"])
rows = []
for size in cfg["sizes"]:
    n = max(1, size // torch.tensor([], dtype=dtype).element_size())
    x = torch.full((n,), float(rank + 1), dtype=dtype, device=dev)
    expect = float(sum(range(1, world + 1)))
    # sum check: a forced protocol can be wrong or ignored
    y = x.clone(); dist.all_reduce(y)
    ok = bool(torch.allclose(y.float(), torch.full_like(y.float(), expect)))
    iters, warm = cfg["iters"], cfg["warmup"]
    for _ in range(warm):
        dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    samples = []
    for _ in range(cfg["repeats"]):
        if backend == "nccl":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                dist.all_reduce(x)
            e.record(); torch.cuda.synchronize()
            samples.append(s.elapsed_time(e) * 1000 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            samples.append((time.perf_counter() - t0) * 1e6 / iters)
    row = {"bytes": size, "elements": n, "mode": "eager", "us_median": statistics.median(samples),
           "us_min": min(samples), "sum_ok": ok, "iters": iters, "repeats": cfg["repeats"]}
    rows.append(row)
    if backend == "nccl" and cfg.get("graph", True):
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(iters):
                dist.all_reduce(x)
        for _ in range(warm):
            g.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(cfg["repeats"]):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); g.replay(); e.record(); torch.cuda.synchronize()
            samples.append(s.elapsed_time(e) * 1000 / iters)
        rows.append({**row, "mode": "graph", "us_median": statistics.median(samples), "us_min": min(samples)})
if rank == 0:
    with open(cfg["out"], "w") as fh:
        json.dump(rows, fh)
sys.stdout.flush()
os._exit(0)  # teardown (destroy_process_group / interpreter exit) can hang after the work is done
'''


def allreduce_bench(
    sizes_bytes: list[int],
    world_size: int | None = None,
    backend: str | None = None,
    env: dict[str, str] | None = None,
    dtype: str = "bfloat16",
    iters: int = 50,
    warmup: int = 10,
    repeats: int = 5,
    timeout_s: float = 180,
) -> list[dict]:
    """All-reduce latency per message size under one torchrun launch."""
    auto_backend, auto_world = available_backend()
    backend = backend or auto_backend
    world_size = world_size or auto_world
    if backend == "nccl" and auto_backend != "nccl":
        raise ServebookError("NCCL needs two or more CUDA GPUs and this host has fewer; use backend='gloo' to run the method on the CPU")
    if backend == "gloo" and dtype == "bfloat16":
        dtype = "float32"  # gloo's CPU all-reduce does not take bf16 on every build
    with tempfile.TemporaryDirectory(prefix="servebook-nccl-") as tmp:
        worker = Path(tmp) / "allreduce_worker.py"
        worker.write_text(_WORKER)
        out = Path(tmp) / "result.json"
        cfg = {"backend": backend, "sizes": list(sizes_bytes), "dtype": dtype, "iters": iters, "warmup": warmup,
               "repeats": repeats, "out": str(out), "timeout_s": int(timeout_s)}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               f"--master-port={free_port()}", str(worker), json.dumps(cfg)]
        run_env = {"OMP_NUM_THREADS": "1", **(env or {})}
        if backend == "nccl":
            run_env.setdefault("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE", "0"))
        res = run_bounded(cmd, timeout=timeout_s, env=run_env)
        if not out.exists():
            tail = "\n".join((res.stderr or res.stdout or "").strip().splitlines()[-8:])
            what = "timed out" if res.returncode == 124 else f"exited with code {res.returncode}"
            raise ServebookError(f"the all-reduce benchmark ({backend}, {world_size} processes) {what} without a result: {tail}")
        rows = json.loads(out.read_text())
    for r in rows:
        r.update(backend=backend, world_size=world_size, dtype=dtype,
                 env=" ".join(f"{k}={v}" for k, v in sorted((env or {}).items())) or "default",
                 device="cuda" if backend == "nccl" else "cpu")
    return rows
