"""One bounded launch per measurement: torchrun workers, the single-process CuPy worker, nccl-tests; here or on a host.

    allreduce_bench([1024, 14336], backend="gloo", world_size=2)   # {'rows', 'info', 'debug', 'error', 'returncode'}
    launch(host, "allreduce_bench", 120, sizes_bytes=[...], env={"NCCL_PROTO": "LL"})

The workers are real files in ``nccl/workers/``; every launch carries the host's policy env
(``servebook.hosts.host_policy_env``) under the setting being measured.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ..errors import ServebookError
from ..hosts import host_policy_env
from ..processes import free_port, run_bounded

__all__ = ["DEBUG_ENV", "available_backend", "allreduce_bench", "single_process_bench", "find_all_reduce_perf", "parse_all_reduce_perf",
           "run_all_reduce_perf", "launch"]

_WORKERS = Path(__file__).parent / "workers"


def available_backend(host=None) -> tuple[str, int]:
    """('nccl', n_gpus) with two or more CUDA GPUs, else ('gloo', 2) on the CPU; of ``host`` when given."""
    if _remote(host):
        backend, n = host.call("servebook.nccl.launch:available_backend", {}, timeout=120, label="nccl available_backend")
        return str(backend), int(n)
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        n = 0
    return ("nccl", n) if n >= 2 else ("gloo", 2)



DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING,COLL"}
"""NCCL's debug output the book captures: its version, the settings it read, and per collective the algorithm and
protocol it picked (``AllReduce: N Bytes -> Algo X proto Y``, parsed by ``nccl.debug.parse_nccl_debug``)."""


def _nccl_env(env: dict | None, debug_dir: Path | None, policy_env: dict | None = None) -> dict:
    """The launch's environment: the setting under the host's policy (``policy_env``, default this host's), NCCL's debug files."""
    run_env = {"OMP_NUM_THREADS": "1", **(env or {})}
    run_env.update(host_policy_env() if policy_env is None else policy_env)
    if debug_dir is not None:
        run_env.update(DEBUG_ENV, NCCL_DEBUG_FILE=str(debug_dir / "nccl.%h.%p.log"))
    return run_env


def _read_debug(debug_dir: Path) -> str:
    parts = []
    for p in sorted(debug_dir.glob("nccl.*.log")):
        try:
            parts.append(p.read_text(errors="replace"))
        except OSError:
            pass
    return "\n".join(parts)


def _failure_reason(res, what: str) -> str:
    tail = [ln for ln in (res.stderr or "").strip().splitlines() + (res.stdout or "").strip().splitlines() if ln.strip()]
    why = "timed out and was killed with its process group" if res.returncode == 124 else f"exited with code {res.returncode}"
    interesting = [ln for ln in tail if re.search(r"Error|error|WARN|Traceback|Exception|killed", ln)] or tail
    return f"{what} {why}: " + " | ".join(interesting[-3:])[:600]


def allreduce_bench(
    sizes_bytes: list[int],
    world_size: int | None = None,
    backend: str | None = None,
    env: dict[str, str] | None = None,
    dtype: str = "bfloat16",
    iters: int = 20,
    launches: int = 20,
    eager_iters: int = 50,
    warmup: int = 10,
    repeats: int = 5,
    timeout_s: float = 180,
    raw: bool = False,
    debug: bool = True,
    shape_study: list[tuple[int, int]] | None = None,
    shape_size: int | None = None,
    fault: str | None = None,
    policy_env: dict | None = None,
) -> dict:
    """One bounded torchrun launch: {'rows', 'info', 'debug' (NCCL lines), 'error' (None or why it failed)}.

    Rows that finished before a failure or hang are kept (workers write after every size). ``policy_env``:
    the host's policy env (default: ``host_policy_env()`` here).
    """
    auto_backend, auto_world = available_backend()
    backend = backend or auto_backend
    world_size = world_size or auto_world
    if backend == "nccl" and auto_backend != "nccl":
        raise ServebookError("NCCL needs two or more CUDA GPUs and this host has fewer; use backend='gloo' to run the method on the CPU")
    if backend == "gloo" and dtype == "bfloat16":
        dtype = "float32"  # gloo's CPU all-reduce does not take bf16 on every build
    label = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())) or "default"
    with tempfile.TemporaryDirectory(prefix="servebook-nccl-") as tmp:
        tmp = Path(tmp)
        worker = _WORKERS / "allreduce_worker.py"
        out = tmp / "result"
        cfg = {"backend": backend, "sizes": list(sizes_bytes), "dtype": dtype, "iters": iters, "launches": launches,
               "eager_iters": eager_iters, "warmup": warmup, "repeats": repeats, "out": str(out),
               "timeout_s": int(timeout_s), "raw": raw, "shape_study": shape_study, "fault": fault,
               "shape_size": shape_size}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               f"--master-port={free_port()}", str(worker), json.dumps(cfg)]
        debug_dir = tmp if (backend == "nccl" and debug) else None
        res = run_bounded(cmd, timeout=timeout_s, env=_nccl_env(env, debug_dir, policy_env) if backend == "nccl" else {"OMP_NUM_THREADS": "1"})
        per_rank = _per_rank(tmp)
        debug_text = _read_debug(tmp) if debug_dir else ""
    rank0 = per_rank.get(0, {"rows": [], "info": {}})
    rows = _rank0_rows(per_rank, rank0["rows"], backend, world_size, dtype, label)
    complete = all(v["info"].get("done") for v in per_rank.values()) and len(per_rank) == world_size
    error = None
    if not complete:
        error = _failure_reason(res, f"the all-reduce launch ({backend}, {world_size} processes, {label})")
    return {"rows": rows, "info": rank0.get("info", {}), "debug": debug_text, "error": error, "returncode": res.returncode}


def _per_rank(tmp: Path) -> dict[int, dict]:
    """Each rank's results file (rows and info) by rank; a file cut short by a failure is left out."""
    per_rank = {}
    for p in sorted(tmp.glob("result.rank*.json")):
        try:
            per_rank[int(p.stem.split("rank")[1])] = json.loads(p.read_text())
        except (ValueError, json.JSONDecodeError):
            pass
    return per_rank


def _rank0_rows(per_rank: dict[int, dict], rows: list[dict], backend: str, world_size: int, dtype: str, label: str) -> list[dict]:
    """Rank 0's rows, each tagged with the launch (backend, world size, dtype, env, device); the sum check counts on
    every rank: a row's ``sum_ok`` holds only where every other rank checked the same call and found it right."""
    for r in rows:
        if "sum_ok" in r:
            others = [o for k, v in per_rank.items() if k != 0 for o in v["rows"]
                      if (o.get("bytes"), o.get("path"), o.get("mode"), o.get("iters")) == (r["bytes"], r["path"], r["mode"], r["iters"])]
            r["sum_ok"] = bool(r["sum_ok"]) and all(o.get("sum_ok", False) for o in others) and len(others) == world_size - 1
        r.update(backend=backend, world_size=world_size, dtype=dtype, env=label,
                 device="cuda" if backend == "nccl" else "cpu")
    return rows


def single_process_bench(sizes_bytes: list[int], ndev: int = 2, env: dict | None = None, iters: int = 20, launches: int = 20,
                         eager_iters: int = 50, warmup: int = 10, repeats: int = 5, timeout_s: float = 90,
                         shape_study=None, shape_size: int | None = None, debug: bool = True,
                         policy_env: dict | None = None) -> dict:
    """One process drives all GPUs through CuPy's NCCL bindings (the nccl-tests -g N shape), bounded."""
    label = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())) or "default"
    with tempfile.TemporaryDirectory(prefix="servebook-nccl1-") as tmp:
        tmp = Path(tmp)
        worker = _WORKERS / "single_worker.py"
        out = tmp / "single"
        cfg = {"sizes": list(sizes_bytes), "ndev": ndev, "iters": iters, "launches": launches, "eager_iters": eager_iters,
               "warmup": warmup, "repeats": repeats, "out": str(out), "shape_study": shape_study, "shape_size": shape_size}
        res = run_bounded([sys.executable, str(worker), json.dumps(cfg)], timeout=timeout_s,
                          env=_nccl_env(env, tmp if debug else None, policy_env))
        data = {"rows": [], "info": {}}
        if (tmp / "single.json").exists():
            data = json.loads((tmp / "single.json").read_text())
        debug_text = _read_debug(tmp) if debug else ""
    for r in data["rows"]:
        r.update(backend="nccl", world_size=ndev, dtype="bfloat16", env=label, device="cuda")
    error = None if data["info"].get("done") else _failure_reason(res, f"the single-process all-reduce ({ndev} GPUs, {label})")
    return {"rows": data["rows"], "info": data["info"], "debug": debug_text, "error": error, "returncode": res.returncode}


# -- nccl-tests ----------------------------------------------------------------------------------
def find_all_reduce_perf(path: str = "", host=None) -> str | None:
    """nccl-tests' all_reduce_perf: the given path, else PATH, else None (on ``host`` when given)."""
    if _remote(host):
        return host.call("servebook.nccl.launch:find_all_reduce_perf", {"path": path}, timeout=60, label="nccl find all_reduce_perf")
    if path:
        p = Path(path).expanduser()
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which("all_reduce_perf")


_NT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def parse_all_reduce_perf(text: str) -> list[dict]:
    """Rows of all_reduce_perf's table: size, out-of-place time/algbw/busbw/#wrong, in-place the same."""
    rows = []
    for line in text.splitlines():
        m = _NT_ROW.match(line)
        if m:
            rows.append({"bytes": int(m[1]), "type": m[3], "us_out_of_place": float(m[6]), "busbw_out": float(m[8]),
                         "wrong_out": m[9], "us_in_place": float(m[10]), "busbw_in": float(m[12]), "wrong_in": m[13]})
    return rows


def run_all_reduce_perf(binary: str, sizes: list[int], ngpus: int, env: dict | None, timeout_s: float = 120,
                        policy_env: dict | None = None) -> dict:
    """all_reduce_perf -g N -G 20 -d bfloat16 -c 1 over the sizes (one launch per size), bounded."""
    rows, errors = [], []
    for size in sizes:
        cmd = [binary, "-b", str(size), "-e", str(size), "-g", str(ngpus), "-G", "20", "-d", "bfloat16", "-c", "1"]
        res = run_bounded(cmd, timeout=timeout_s, env=_nccl_env(env, None, policy_env))
        got = parse_all_reduce_perf(res.stdout or "")
        if res.returncode != 0 or not got:
            errors.append(_failure_reason(res, f"all_reduce_perf at {size} bytes"))
        rows += got
    return {"rows": rows, "error": "; ".join(errors) or None}


def _remote(host) -> bool:
    """A host whose work does not run in this process (SSH, a recording, a replay)."""
    return host is not None and not getattr(host, "in_process", True)


def _hosted(fn: str, kwargs: dict) -> dict:
    """Runs on the host (``host.call``): one launcher, with SIGTERM/SIGHUP turned into an exit so that
    ``run_bounded`` stops the launch's process group when the call itself is stopped (its timeout)."""
    if fn not in _LAUNCHERS:
        raise ServebookError(f"{fn} is not one of the NCCL launchers {sorted(_LAUNCHERS)}")

    def _leave(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _leave)
    return _LAUNCHERS[fn](**kwargs)


def launch(host, fn: str, timeout_s: float, **kwargs) -> dict:
    """``fn(**kwargs)`` here, or on ``host`` (bounded there by the launcher's own timeout, and by the call's).

    The host's policy env is resolved here, where the book runs, and travels with the call."""
    kwargs.setdefault("policy_env", host_policy_env())
    if not _remote(host):
        return _LAUNCHERS[fn](timeout_s=timeout_s, **kwargs)
    from ..hosts import HostError

    what = kwargs.get("env") or {}
    label = f"nccl {fn} " + (" ".join(f"{k}={v}" for k, v in sorted(what.items())) or "default")
    # the launcher stops its process group at timeout_s (per size for all_reduce_perf); the call ends after it
    n = len(kwargs.get("sizes", [])) if fn == "run_all_reduce_perf" else 1
    try:
        return host.call("servebook.nccl.launch:_hosted", {"fn": fn, "kwargs": {"timeout_s": timeout_s, **kwargs}},
                         timeout=timeout_s * n + 120, label=label)
    except HostError as exc:
        return {"rows": [], "info": {}, "debug": "", "error": f"{fn} on {host.spec}: {exc}", "returncode": None}


_LAUNCHERS = {"allreduce_bench": allreduce_bench, "single_process_bench": single_process_bench,
              "run_all_reduce_perf": run_all_reduce_perf}
