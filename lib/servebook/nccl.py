"""Chapter 04: all-reduce latency at the model's real decode message sizes, over a grid of NCCL settings.

    dims = model_dims(card["config"])                      # hidden size, layers (text_config aware)
    sizes = message_sizes(dims["hidden_size"], batches=[1, 8, 64])
    grid = parse_grid("NCCL_PROTO=LL;NCCL_PROTO=LL128,NCCL_ALGO=Ring")
    result = run_grid(store, sizes, builtin_grid() + grid, timeout_s=120)

Method. Every setting is one bounded ``torchrun`` launch (one process per GPU, NCCL bound to
its device with ``device_id``; a worker writes its rows after every size and leaves with
``os._exit`` because teardown can hang). Per message size it checks the sum (eagerly and
through a captured graph), then times

* ``graph``: ``iters`` all-reduces captured into one CUDA graph, the graph launched
  ``launches`` times back to back after a barrier; per-call time = elapsed / (iters x launches),
  from CUDA events on rank 0's stream and from the host clock (the nccl-tests ``-G`` method);
* ``eager``: a Python loop of calls (includes launch overhead).

Three paths share that method, so their difference is the finding:

* ``torch``: ``torch.distributed.all_reduce`` through ProcessGroupNCCL (what engines call);
* ``raw-per-process``: ``ncclAllReduce`` through CuPy's bindings on torch's stream, same
  processes (isolates what ProcessGroupNCCL adds);
* ``raw-single-process``: one process drives every GPU (``ncclCommInitAll``, group calls,
  one graph per GPU), the shape of nccl-tests ``all_reduce_perf -g N -G``.

``NCCL_DEBUG=INFO`` is written to a file per process and parsed for the algorithm and
protocol NCCL actually chose (its ``AllReduce: N Bytes -> Algo X proto Y`` lines). A setting
that fails, hangs, or returns a wrong sum is recorded as such; the grid goes on.
Without two CUDA GPUs the torch path runs with gloo on the CPU, labelled so.

On a ``host`` that is not this process (``servebook.hosts``: SSH, or a recording), every launch
runs there: ``run_grid(..., host=h)`` calls this module's launchers on the host (servebook travels
with each call, workers included), bounded by the same timeout, torchrun in its own process group
that is stopped on timeout or when the call is stopped; only result rows and NCCL's debug lines
come back. ``available_backend(h)`` and ``find_all_reduce_perf(path, h)`` ask the host.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .errors import ServebookError
from .servers import free_port, run_bounded

__all__ = [
    "decode_message_sizes", "message_sizes", "model_dims", "available_backend", "allreduce_bench",
    "parse_grid", "builtin_grid", "Setting", "parse_nccl_debug", "run_grid", "find_all_reduce_perf",
    "run_all_reduce_perf", "per_token_prediction", "recommend", "env_block", "STANDARD_SWEEP",
]

# A standard sweep next to the model's own sizes: latency region up to bandwidth region.
STANDARD_SWEEP = (1024, 4096, 65536, 262144, 1048576, 16777216)

# NCCL variables a grid may set. NCCL_DEBUG* are servebook's own (it parses them);
# NCCL_NVLS_ENABLE stays 0 on the lent machines.
KNOWN_VARS = {
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
    "NCCL_LL128_NTHREADS", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_NET_GDR_LEVEL",
    "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_CROSS_NIC", "NCCL_CGA_CLUSTER_SIZE", "NCCL_LAUNCH_MODE",
    "NCCL_TUNER_PLUGIN", "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER",
    "NCCL_NVLS_ENABLE", "NCCL_NET_GDR_READ", "NCCL_PXN_DISABLE", "NCCL_MNNVL_ENABLE", "NCCL_CHECKS_DISABLE",
}
_PROTOS = {"LL", "LL128", "SIMPLE"}
_ALGOS = {"RING", "TREE", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT"}
_P2P_LEVELS = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"}
_INT_VARS = {"NCCL_P2P_DISABLE", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
             "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_LL128_NTHREADS", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
             "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_NVLS_ENABLE", "NCCL_CGA_CLUSTER_SIZE",
             "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER", "NCCL_IB_DISABLE"}


# -- message sizes ---------------------------------------------------------------------------
def model_dims(config: dict) -> dict:
    """hidden_size and num_hidden_layers of a model config (multimodal cards keep them in text_config)."""
    config = config.get("config", config)
    for c in (config, config.get("text_config") or {}, config.get("language_config") or {}, config.get("llm_config") or {}):
        if c.get("hidden_size"):
            return {"hidden_size": int(c["hidden_size"]), "num_hidden_layers": int(c.get("num_hidden_layers") or 0),
                    "dtype": str(c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or "bfloat16")}
    raise ServebookError("the model config has no hidden_size (looked at the top level and text_config); "
                         "give a Hugging Face config or a model card with one")


def decode_message_sizes(hidden_size: int, dtype_bytes: int = 2, batches: list[int] | tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> list[dict]:
    """One all-reduce of the residual stream per decode step: hidden_size x batch x bytes."""
    return [{"batch": b, "bytes": int(hidden_size) * int(b) * int(dtype_bytes), "source": "model"} for b in batches]


def message_sizes(hidden_size: int, dtype_bytes: int = 2, batches=(1, 2, 4, 8, 16, 32, 64), sweep=STANDARD_SWEEP) -> list[dict]:
    """The model's decode sizes plus the standard sweep, sorted, without duplicates."""
    rows = {s["bytes"]: s for s in decode_message_sizes(hidden_size, dtype_bytes, batches)}
    for b in sweep or ():
        rows.setdefault(int(b), {"batch": None, "bytes": int(b), "source": "sweep"})
    return [rows[k] for k in sorted(rows)]


def available_backend(host=None) -> tuple[str, int]:
    """('nccl', n_gpus) with two or more CUDA GPUs, else ('gloo', 2) on the CPU; of ``host`` when given."""
    if _remote(host):
        backend, n = host.call("servebook.nccl:available_backend", {}, timeout=120, label="nccl available_backend")
        return str(backend), int(n)
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        n = 0
    return ("nccl", n) if n >= 2 else ("gloo", 2)


# -- the grid ----------------------------------------------------------------------------------
class Setting(dict):
    """An NCCL env setting: a dict of variables with a label ('default' when empty)."""

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.items()) or "default"

    def __hash__(self):  # settings are compared by label
        return hash(self.label)


def _check_var(name: str, value: str) -> None:
    if name.startswith("NCCL_DEBUG"):
        raise ServebookError(f"{name} is set by servebook itself (it parses NCCL's debug output); leave it out of the grid")
    if name not in KNOWN_VARS:
        close = difflib.get_close_matches(name, sorted(KNOWN_VARS), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ServebookError(f"unknown NCCL variable {name!r} in the grid{hint}")
    if value == "":
        raise ServebookError(f"{name} has no value in the grid; write {name}=VALUE")
    if name == "NCCL_NVLS_ENABLE" and value != "0":
        raise ServebookError("NCCL_NVLS_ENABLE must stay 0 on these machines (it is preset); leave it out of the grid")
    if name == "NCCL_PROTO":
        bad = [t for t in value.lstrip("^").split(",") if t.upper() not in _PROTOS]
        if bad:
            raise ServebookError(f"NCCL_PROTO value {value!r}: {bad[0]!r} is not a protocol (LL, LL128, Simple)")
    if name == "NCCL_ALGO":
        bad = [t for t in value.lstrip("^").split(",") if t.upper() not in _ALGOS]
        if bad:
            raise ServebookError(f"NCCL_ALGO value {value!r}: {bad[0]!r} is not an algorithm (Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT)")
    if name == "NCCL_P2P_LEVEL" and value.upper() not in _P2P_LEVELS and not value.isdigit():
        raise ServebookError(f"NCCL_P2P_LEVEL value {value!r} is not one of LOC, NVL, PIX, PXB, PHB, SYS")
    if name in _INT_VARS and not re.fullmatch(r"-?\d+", value):
        raise ServebookError(f"{name} takes an integer, not {value!r}")


def parse_grid(text: str) -> list[Setting]:
    """'A=1,B=2;C=3' -> [Setting(A=1,B=2), Setting(C=3)]; 'default' or an empty item is the default.

    Settings are separated by ';', variables by ','. A value may itself be a comma list
    (NCCL_PROTO=LL,LL128): a comma-separated piece without '=' continues the previous value.
    """
    out: list[Setting] = []
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        s = Setting()
        last = None
        if item.lower() == "default":
            out.append(s)
            continue
        for piece in item.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if "=" in piece:
                k, v = (p.strip() for p in piece.split("=", 1))
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                    raise ServebookError(f"{k!r} in the grid is not a variable name; write NAME=VALUE pairs")
                k = k.upper() if k.upper().startswith("NCCL_") else k
                s[k] = v
                last = k
            elif last is not None:
                s[last] = f"{s[last]},{piece}"
            else:
                raise ServebookError(f"{piece!r} in the grid is not NAME=VALUE; settings look like NCCL_PROTO=LL,NCCL_ALGO=Ring")
        for k, v in s.items():
            _check_var(k, v)
        if s.label not in {o.label for o in out}:
            out.append(s)
    return out


SEED_RECIPE = "NCCL_PROTO=LL,NCCL_ALGO=Ring,NCCL_P2P_LEVEL=SYS,NCCL_MAX_NCHANNELS=16,NCCL_BUFFSIZE=16777216,NCCL_NTHREADS=512"


def builtin_grid() -> list[Setting]:
    """Defaults first, then the settings nccl-tests was run with, then the other knobs and the seed recipe."""
    return parse_grid(";".join([
        "default", "NCCL_PROTO=LL", "NCCL_PROTO=LL128", "NCCL_PROTO=Simple", "NCCL_P2P_DISABLE=1",
        "NCCL_ALGO=Ring", "NCCL_ALGO=Tree", "NCCL_P2P_LEVEL=SYS", "NCCL_MAX_NCHANNELS=2",
        "NCCL_MAX_NCHANNELS=16", "NCCL_BUFFSIZE=16777216", "NCCL_NTHREADS=512", SEED_RECIPE,
    ]))


# -- NCCL's own debug output -------------------------------------------------------------------
_ALGO_IDS = {0: "TREE", 1: "RING", 2: "COLLNET_DIRECT", 3: "COLLNET_CHAIN", 4: "NVLS", 5: "NVLS_TREE", 6: "PAT"}
_PROTO_IDS = {0: "LL", 1: "LL128", 2: "SIMPLE"}
_CHOICE = re.compile(
    r"NCCL INFO (?:(?P<func>[A-Za-z]+):\s+)?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?(?: time (?P<time>[-\d.]+))?")
_VERSION = re.compile(r"NCCL INFO NCCL version (?P<version>\S+)")
_ENVSET = re.compile(r"NCCL INFO (?P<var>NCCL_\w+) set by environment to (?P<value>\S+)")


def parse_nccl_debug(text: str) -> dict:
    """NCCL_DEBUG=INFO output -> {'version', 'env': {var: value}, 'choices': [{func, bytes, algo, proto, channels, count, line}]}.

    Choices are deduplicated by (function, bytes, algo, proto, channels) with a count; numeric
    algorithm/protocol ids (older NCCL prints 'Algo 1 proto 0') are named.
    """
    version, env, seen = None, {}, {}
    for line in (text or "").splitlines():
        m = _CHOICE.search(line)
        if m:
            algo, proto = m["algo"], m["proto"]
            algo = _ALGO_IDS.get(int(algo), algo) if algo.isdigit() else algo.upper()
            proto = _PROTO_IDS.get(int(proto), proto) if proto.isdigit() else proto.upper()
            channels = int(m["hi"]) - int(m["lo"]) + 1 if m["lo"] is not None else None
            key = (m["func"] or "", int(m["bytes"]), algo, proto, channels)
            if key in seen:
                seen[key]["count"] += 1
            else:
                seen[key] = {"func": m["func"] or "", "bytes": int(m["bytes"]), "algo": algo, "proto": proto,
                             "channels": channels, "count": 1, "line": line.strip()}
            continue
        m = _VERSION.search(line)
        if m and version is None:
            version = m["version"]
            continue
        m = _ENVSET.search(line)
        if m:
            env[m["var"]] = m["value"]
    return {"version": version, "env": env, "choices": list(seen.values())}


def _debug_excerpt(text: str, limit: int = 40) -> list[str]:
    """Lines worth keeping as evidence: version, env echo, and one line per distinct choice."""
    keep, seen = [], set()
    for line in (text or "").splitlines():
        if _VERSION.search(line) or _ENVSET.search(line):
            key = line.split("NCCL INFO", 1)[-1]
        else:
            m = _CHOICE.search(line)
            if not m:
                continue
            key = (m["func"], m["bytes"], m["algo"], m["proto"], m["lo"], m["hi"])
        if key in seen:
            continue
        seen.add(key)
        keep.append(line.rstrip())
        if len(keep) >= limit:
            break
    return keep


# -- workers -----------------------------------------------------------------------------------
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
if cfg.get("fault") == "hang" and rank == world - 1:
    time.sleep(10 ** 6)  # fault injection for tests: one rank never joins the collectives
dtype = getattr(torch, cfg["dtype"])
esize = torch.tensor([], dtype=dtype).element_size()
expect = float(sum(range(1, world + 1)))
cuda = backend == "nccl"
rows, info = [], {"rank": rank, "world": world, "backend": backend, "torch": torch.__version__}
if cuda:
    try:
        v = torch.cuda.nccl.version(); info["nccl_torch"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        info["nccl_torch"] = repr(exc)
    info["gpu"] = torch.cuda.get_device_name(dev)

def dump():
    tmp = cfg["out"] + f".rank{rank}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"rows": rows, "info": info}, fh)
    os.replace(tmp, cfg["out"] + f".rank{rank}.json")

def sync():
    if cuda: torch.cuda.synchronize()

# The raw path: ncclAllReduce through CuPy on torch's stream, in these same processes.
raw = None
if cuda and cfg.get("raw"):
    try:
        import cupy
        from cupy.cuda import nccl as cnccl
        cupy.cuda.Device(rank).use()
        uid = [cnccl.get_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(uid, src=0)
        comm = cnccl.NcclCommunicator(world, uid[0], rank)
        info["nccl_cupy"] = str(cnccl.get_version()); info["cupy"] = cupy.__version__
        bf16 = getattr(cnccl, "NCCL_BFLOAT16", 9)
        dt = {"bfloat16": bf16, "float16": cnccl.NCCL_FLOAT16, "float32": cnccl.NCCL_FLOAT32}[cfg["dtype"]]
        def raw(t):
            comm.allReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, cnccl.NCCL_SUM, torch.cuda.current_stream().cuda_stream)
    except Exception as exc:
        info["raw_error"] = f"{type(exc).__name__}: {exc}"
        raw = None

def pg(t):
    dist.all_reduce(t)

def barrier():
    if cuda:
        dist.barrier(device_ids=[rank]); torch.cuda.synchronize()
    else:
        dist.barrier()

def time_eager(op, x, iters, repeats):
    ev, wall = [], []
    for _ in range(repeats):
        barrier()
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); s.record()
        t0 = time.perf_counter()
        for _ in range(iters):
            op(x)
        if cuda:
            e.record(); torch.cuda.synchronize()
            ev.append(s.elapsed_time(e) * 1000 / iters)
        wall.append((time.perf_counter() - t0) * 1e6 / iters)
    return ev or wall, wall

def capture(op, x, iters):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            op(x)
    torch.cuda.synchronize()
    return g

def time_graph(g, iters, launches, repeats):
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    ev, wall = [], []
    for _ in range(repeats):
        barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); t0 = time.perf_counter()
        for _ in range(launches):
            g.replay()
        e.record(); torch.cuda.synchronize(); t1 = time.perf_counter()
        ev.append(s.elapsed_time(e) * 1000 / (iters * launches))
        wall.append((t1 - t0) * 1e6 / (iters * launches))
    return ev, wall

def summary(ev, wall):
    return {"us_median": statistics.median(ev), "us_min": min(ev), "us_wall": statistics.median(wall)}

paths = [("torch", pg)] + ([("raw-per-process", raw)] if raw else [])
for size in cfg["sizes"]:
    n = max(1, size // esize)
    for path, op in paths:
        base = {"bytes": n * esize, "elements": n, "path": path}
        try:
            y = torch.full((n,), float(rank + 1), dtype=dtype, device=dev)
            op(y); sync()
            ok = bool(torch.equal(y.float(), torch.full_like(y.float(), expect)))
            x = torch.zeros((n,), dtype=dtype, device=dev)
            for _ in range(cfg["warmup"]):
                op(x)
            sync()
            ev, wall = time_eager(op, x, cfg["eager_iters"], cfg["repeats"])
            rows.append({**base, "mode": "eager", **summary(ev, wall), "sum_ok": ok, "iters": cfg["eager_iters"],
                         "launches": 1, "repeats": cfg["repeats"]})
            dump()
            if cuda and cfg.get("graph", True):
                z = torch.zeros((n,), dtype=dtype, device=dev)
                gz = capture(op, z, 1)  # the captured path must reduce correctly too
                z.fill_(float(rank + 1)); sync(); barrier(); gz.replay(); sync()
                gok = bool(torch.equal(z.float(), torch.full_like(z.float(), expect)))
                del gz
                shapes = [(cfg["iters"], cfg["launches"])]
                if cfg.get("shape_study") and size == cfg.get("shape_size"):
                    shapes += [tuple(s) for s in cfg["shape_study"]]
                for it, la in shapes:
                    g = capture(op, x, it)
                    ev, wall = time_graph(g, it, la, cfg["repeats"])
                    rows.append({**base, "mode": "graph", **summary(ev, wall), "sum_ok": ok and gok, "graph_sum_ok": gok,
                                 "iters": it, "launches": la, "repeats": cfg["repeats"],
                                 "shape_study": (it, la) != (cfg["iters"], cfg["launches"])})
                    del g
                dump()
        except Exception as exc:
            rows.append({**base, "mode": "error", "error": f"{type(exc).__name__}: {exc}"[:500]})
            dump()
            if path == "torch":
                raise
info["done"] = True
dump()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)  # teardown (destroy_process_group / interpreter exit) can hang after the work is done
'''

_SINGLE = r'''
import ctypes, glob, json, os, statistics, struct, sys, time
cfg = json.loads(sys.argv[1])
rows, info = [], {"path": "raw-single-process"}
def dump():
    tmp = cfg["out"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"rows": rows, "info": info}, fh)
    os.replace(tmp, cfg["out"] + ".json")
# Use the NCCL that torch ships (same library as the torch path) when CuPy would otherwise not find one.
try:
    import nvidia.nccl
    for p in sorted(glob.glob(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so*"))):
        ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL); info["libnccl"] = p; break
except Exception as exc:
    info["libnccl"] = f"not preloaded ({type(exc).__name__})"
import cupy as cp
from cupy.cuda import nccl, runtime
ndev = cfg["ndev"]; devs = list(range(ndev))
info.update(cupy=cp.__version__, nccl_cupy=str(nccl.get_version()), ndev=ndev)
dump()
comms = nccl.NcclCommunicator.initAll(devs)
streams = []
for d in devs:
    with cp.cuda.Device(d):
        streams.append(cp.cuda.Stream(non_blocking=True))
BF16 = getattr(nccl, "NCCL_BFLOAT16", 9)
def bits(v):
    return struct.unpack("<I", struct.pack("<f", float(v)))[0] >> 16
expect = bits(sum(range(1, ndev + 1)))
def op(bufs):
    nccl.groupStart()
    for d, c, b, s in zip(devs, comms, bufs, streams):
        c.allReduce(b.data.ptr, b.data.ptr, b.size, BF16, nccl.NCCL_SUM, s.ptr)
    nccl.groupEnd()
def sync():
    for s in streams:
        s.synchronize()
def alloc(n, value):
    out = []
    for d in devs:
        with cp.cuda.Device(d):
            out.append(cp.full((n,), value, dtype=cp.uint16))
    return out
class Graphs:
    """One captured graph per GPU, as nccl-tests -G builds them."""
    def __init__(self, bufs, iters):
        self.execs, self.graphs = [], []
        self.low = hasattr(runtime, "streamBeginCapture") and hasattr(runtime, "graphInstantiate")
        info["capture_api"] = "cupy.cuda.runtime" if self.low else "cupy.cuda.Stream.begin_capture"
        for d, s in zip(devs, streams):
            with cp.cuda.Device(d):
                if self.low:
                    runtime.streamBeginCapture(s.ptr, 1)  # cudaStreamCaptureModeThreadLocal
                else:
                    s.begin_capture()
        for _ in range(iters):
            op(bufs)
        for d, s in zip(devs, streams):
            with cp.cuda.Device(d):
                if self.low:
                    g = runtime.streamEndCapture(s.ptr)
                    self.graphs.append(g); self.execs.append(runtime.graphInstantiate(g))
                else:
                    self.execs.append(s.end_capture())
    def launch(self):
        for d, e, s in zip(devs, self.execs, streams):
            if self.low:
                runtime.graphLaunch(e, s.ptr)
            else:
                e.launch(s)
    def close(self):
        if not self.low:
            self.execs = []
            return
        for d, e, g in zip(devs, self.execs, self.graphs):
            with cp.cuda.Device(d):
                runtime.graphExecDestroy(e); runtime.graphDestroy(g)
def timed(fn, per, repeats):
    ev, wall = [], []
    for _ in range(repeats):
        sync()
        with cp.cuda.Device(0):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record(streams[0])
        t0 = time.perf_counter()
        fn()
        with cp.cuda.Device(0):
            e.record(streams[0])
        sync(); t1 = time.perf_counter()
        ev.append(cp.cuda.get_elapsed_time(s, e) * 1000 / per)
        wall.append((t1 - t0) * 1e6 / per)
    return {"us_median": statistics.median(ev), "us_min": min(ev), "us_wall": statistics.median(wall)}
for size in cfg["sizes"]:
    n = max(1, size // 2)
    base = {"bytes": n * 2, "elements": n, "path": "raw-single-process"}
    try:
        y = [b for b in alloc(n, 0)]
        for d, b in zip(devs, y):
            with cp.cuda.Device(d):
                b.fill(bits(d + 1))
        op(y); sync()
        ok = all(bool((b == expect).all()) for b in y)
        x = alloc(n, 0)
        for _ in range(cfg["warmup"]):
            op(x)
        sync()
        it = cfg["eager_iters"]
        def eager():
            for _ in range(it):
                op(x)
        rows.append({**base, "mode": "eager", **timed(eager, it, cfg["repeats"]), "sum_ok": ok, "iters": it, "launches": 1,
                     "repeats": cfg["repeats"]})
        dump()
        z = alloc(n, 0)
        gz = Graphs(z, 1)
        for d, b in zip(devs, z):
            with cp.cuda.Device(d):
                b.fill(bits(d + 1))
        sync(); gz.launch(); sync()
        gok = all(bool((b == expect).all()) for b in z)
        gz.close()
        shapes = [(cfg["iters"], cfg["launches"])]
        if cfg.get("shape_study") and size == cfg.get("shape_size"):
            shapes += [tuple(s) for s in cfg["shape_study"]]
        for gi, gl in shapes:
            g = Graphs(x, gi)
            g.launch(); g.launch(); sync()
            def replay():
                for _ in range(gl):
                    g.launch()
            rows.append({**base, "mode": "graph", **timed(replay, gi * gl, cfg["repeats"]), "sum_ok": ok and gok,
                         "graph_sum_ok": gok, "iters": gi, "launches": gl, "repeats": cfg["repeats"],
                         "shape_study": (gi, gl) != (cfg["iters"], cfg["launches"])})
            g.close()
        dump()
    except Exception as exc:
        import traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        rows.append({**base, "mode": "error", "error": f"{type(exc).__name__}: {exc} (at line {where.lineno}: {where.line})"[:500]})
        dump()
        break
info["done"] = True
dump()
sys.stdout.flush()
os._exit(0)
'''


def _nccl_env(env: dict | None, debug_dir: Path | None) -> dict:
    run_env = {"OMP_NUM_THREADS": "1", **(env or {})}
    run_env["NCCL_NVLS_ENABLE"] = "0"  # preset on the lent machines; NVLS stays off
    if debug_dir is not None:
        run_env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,TUNING,COLL",
                       NCCL_DEBUG_FILE=str(debug_dir / "nccl.%h.%p.log"))
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
) -> dict:
    """One bounded torchrun launch: {'rows', 'info', 'debug' (NCCL lines), 'error' (None or why it failed)}.

    Rows that finished before a failure or hang are kept (workers write after every size).
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
        worker = tmp / "allreduce_worker.py"
        worker.write_text(_WORKER)
        out = tmp / "result"
        cfg = {"backend": backend, "sizes": list(sizes_bytes), "dtype": dtype, "iters": iters, "launches": launches,
               "eager_iters": eager_iters, "warmup": warmup, "repeats": repeats, "out": str(out),
               "timeout_s": int(timeout_s), "raw": raw, "shape_study": shape_study, "fault": fault,
               "shape_size": shape_size}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               f"--master-port={free_port()}", str(worker), json.dumps(cfg)]
        debug_dir = tmp if (backend == "nccl" and debug) else None
        res = run_bounded(cmd, timeout=timeout_s, env=_nccl_env(env, debug_dir) if backend == "nccl" else {"OMP_NUM_THREADS": "1"})
        per_rank = {}
        for p in sorted(tmp.glob("result.rank*.json")):
            try:
                per_rank[int(p.stem.split("rank")[1])] = json.loads(p.read_text())
            except (ValueError, json.JSONDecodeError):
                pass
        debug_text = _read_debug(tmp) if debug_dir else ""
    rank0 = per_rank.get(0, {"rows": [], "info": {}})
    rows = rank0["rows"]
    # the sum check counts on every rank
    for r in rows:
        if "sum_ok" in r:
            others = [o for k, v in per_rank.items() if k != 0 for o in v["rows"]
                      if (o.get("bytes"), o.get("path"), o.get("mode"), o.get("iters")) == (r["bytes"], r["path"], r["mode"], r["iters"])]
            r["sum_ok"] = bool(r["sum_ok"]) and all(o.get("sum_ok", False) for o in others) and len(others) == world_size - 1
        r.update(backend=backend, world_size=world_size, dtype=dtype, env=label,
                 device="cuda" if backend == "nccl" else "cpu")
    complete = all(v["info"].get("done") for v in per_rank.values()) and len(per_rank) == world_size
    error = None
    if not complete:
        error = _failure_reason(res, f"the all-reduce launch ({backend}, {world_size} processes, {label})")
    return {"rows": rows, "info": rank0.get("info", {}), "debug": debug_text, "error": error, "returncode": res.returncode}


def single_process_bench(sizes_bytes: list[int], ndev: int = 2, env: dict | None = None, iters: int = 20, launches: int = 20,
                         eager_iters: int = 50, warmup: int = 10, repeats: int = 5, timeout_s: float = 90,
                         shape_study=None, shape_size: int | None = None, debug: bool = True) -> dict:
    """One process drives all GPUs through CuPy's NCCL bindings (the nccl-tests -g N shape), bounded."""
    label = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())) or "default"
    with tempfile.TemporaryDirectory(prefix="servebook-nccl1-") as tmp:
        tmp = Path(tmp)
        worker = tmp / "single_worker.py"
        worker.write_text(_SINGLE)
        out = tmp / "single"
        cfg = {"sizes": list(sizes_bytes), "ndev": ndev, "iters": iters, "launches": launches, "eager_iters": eager_iters,
               "warmup": warmup, "repeats": repeats, "out": str(out), "shape_study": shape_study, "shape_size": shape_size}
        res = run_bounded([sys.executable, str(worker), json.dumps(cfg)], timeout=timeout_s,
                          env=_nccl_env(env, tmp if debug else None))
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
        return host.call("servebook.nccl:find_all_reduce_perf", {"path": path}, timeout=60, label="nccl find all_reduce_perf")
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


def run_all_reduce_perf(binary: str, sizes: list[int], ngpus: int, env: dict | None, timeout_s: float = 120) -> dict:
    """all_reduce_perf -g N -G 20 -d bfloat16 -c 1 over the sizes (one launch per size), bounded."""
    rows, errors = [], []
    for size in sizes:
        cmd = [binary, "-b", str(size), "-e", str(size), "-g", str(ngpus), "-G", "20", "-d", "bfloat16", "-c", "1"]
        res = run_bounded(cmd, timeout=timeout_s, env=_nccl_env(env, None))
        got = parse_all_reduce_perf(res.stdout or "")
        if res.returncode != 0 or not got:
            errors.append(_failure_reason(res, f"all_reduce_perf at {size} bytes"))
        rows += got
    return {"rows": rows, "error": "; ".join(errors) or None}


# -- on a host ----------------------------------------------------------------------------------------
def _remote(host) -> bool:
    """A host whose work does not run in this process (SSH, a recording, a replay)."""
    return host is not None and not getattr(host, "in_process", True)


_LAUNCHERS = ("allreduce_bench", "single_process_bench", "run_all_reduce_perf")


def _hosted(fn: str, kwargs: dict) -> dict:
    """Runs on the host (``host.call``): one launcher, with SIGTERM/SIGHUP turned into an exit so that
    ``run_bounded`` stops the launch's process group when the call itself is stopped (its timeout)."""
    import signal

    if fn not in _LAUNCHERS:
        raise ServebookError(f"{fn} is not one of the NCCL launchers {_LAUNCHERS}")

    def _leave(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _leave)
    return globals()[fn](**kwargs)


def _launch(host, fn: str, timeout_s: float, **kwargs) -> dict:
    """``fn(**kwargs)`` here, or on ``host`` (bounded there by the launcher's own timeout, and by the call's)."""
    if not _remote(host):
        return globals()[fn](timeout_s=timeout_s, **kwargs)
    from .hosts import HostError

    what = kwargs.get("env") or {}
    label = f"nccl {fn} " + (" ".join(f"{k}={v}" for k, v in sorted(what.items())) or "default")
    # the launcher stops its process group at timeout_s (per size for all_reduce_perf); the call ends after it
    n = len(kwargs.get("sizes", [])) if fn == "run_all_reduce_perf" else 1
    try:
        return host.call("servebook.nccl:_hosted", {"fn": fn, "kwargs": {"timeout_s": timeout_s, **kwargs}},
                         timeout=timeout_s * n + 120, label=label)
    except HostError as exc:
        return {"rows": [], "info": {}, "debug": "", "error": f"{fn} on {host.spec}: {exc}", "returncode": None}


# -- the grid runner --------------------------------------------------------------------------------
def run_grid(store, sizes: list[dict], settings: list[Setting], timeout_s: float = 120, backend: str | None = None,
             world_size: int | None = None, single_process: bool = True, raw: bool = True, deadline_s: float | None = None,
             all_reduce_perf: str | None = None, smoke: bool = False, say=print, host=None) -> dict:
    """Measure every setting (one bounded launch each) into ``store``: tables allreduce, nccl_used, failures.

    Resumable: a setting already in the allreduce table is skipped. ``deadline_s`` stops starting
    new settings once that much wall time has passed (recorded as not measured). With ``host``
    (``servebook.hosts``) every launch runs on that host; ``all_reduce_perf`` is then a path there.
    """
    auto_backend, auto_world = available_backend(host) if backend is None or world_size is None else (backend, world_size)
    backend = backend or auto_backend
    world_size = world_size or auto_world
    t0 = time.monotonic()
    batch_of = {s["bytes"]: s.get("batch") for s in sizes}
    source_of = {s["bytes"]: s.get("source", "model") for s in sizes}
    size_list = [s["bytes"] for s in sizes]
    excerpts: list[str] = []
    shape_study = [(1, 400), (50, 8), (400, 1)] if not smoke else None
    knobs = dict(iters=5, launches=4, eager_iters=10, warmup=2, repeats=3) if smoke else {}
    if backend != "nccl":
        kept = [s for s in settings if not s]
        for s in settings:
            if s:
                store.append("skipped", {"setting": s.label, "reason": f"NCCL settings do not apply to {backend}"})
        settings = kept or [Setting()]
    summary = {"measured": [], "failed": [], "not_run": []}
    for i, setting in enumerate(settings):
        if store.done("allreduce", setting=setting.label) or store.done("failures", setting=setting.label):
            continue
        if deadline_s is not None and time.monotonic() - t0 > deadline_s:
            store.record_failure(f"allreduce {setting.label}", "not measured: the session's device-time budget ran out first",
                                 setting=setting.label, kind="not_run")
            summary["not_run"].append(setting.label)
            continue
        say(f"[{i + 1}/{len(settings)}] {setting.label}: {backend}, {world_size} processes")
        shapes = shape_study if not setting else None
        shape_size = min([s["bytes"] for s in sizes if s.get("source", "model") == "model"] or size_list)
        res = _launch(host, "allreduce_bench", timeout_s, sizes_bytes=size_list, world_size=world_size, backend=backend,
                      env=dict(setting), raw=raw and backend == "nccl", shape_study=shapes, shape_size=shape_size, **knobs)
        parts = [res]
        if backend == "nccl" and single_process:
            parts.append(_launch(host, "single_process_bench", min(timeout_s, 90), sizes_bytes=size_list, ndev=world_size,
                                 env=dict(setting), shape_study=shapes, shape_size=shape_size, **knobs))
        for part, path_default in zip(parts, ["torch", "raw-single-process"]):
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
                store.append("nccl_used", {"setting": setting.label, "launch": path_default if path_default != "torch" else "torchrun",
                                           "bytes": c["bytes"], "algo": c["algo"], "proto": c["proto"], "channels": c["channels"],
                                           "count": c["count"], "nccl_version": parsed["version"],
                                           "env_seen": ",".join(f"{k}={v}" for k, v in sorted(parsed["env"].items()))})
            if part["debug"]:
                ex = _debug_excerpt(part["debug"], limit=12)
                excerpts += [f"# setting {setting.label} ({path_default if path_default != 'torch' else 'torchrun'})"] + ex
            if part.get("info", {}).get("raw_error"):
                store.record_failure(f"allreduce {setting.label} raw-per-process", part["info"]["raw_error"],
                                     setting=setting.label, path="raw-per-process")
            if part.get("info"):
                store.append("launch_info", {"setting": setting.label, "launch": path_default, **{k: v for k, v in part["info"].items()}})
            if part["error"]:
                store.record_failure(f"allreduce {setting.label} {path_default}", part["error"], setting=setting.label,
                                     path=path_default, rows_kept=len(part["rows"]))
                say(f"   failed: {part['error'][:300]}")
        bad = [r for p in parts for r in p["rows"] if r.get("sum_ok") is False]
        if bad:
            store.append("wrong_sums", {"setting": setting.label, "points": len(bad),
                                        "paths": sorted({r["path"] for r in bad}), "bytes": sorted({r["bytes"] for r in bad})})
            say(f"   WRONG SUM under {setting.label}: {len(bad)} points; this setting is never recommended")
        (summary["failed"] if res["error"] else summary["measured"]).append(setting.label)
    if excerpts:
        store.write_text("nccl_debug_excerpt.log", "\n".join(excerpts) + "\n")
    if all_reduce_perf:
        for setting in settings:
            if store.done("nccl_tests", setting=setting.label):
                continue
            got = _launch(host, "run_all_reduce_perf", timeout_s, binary=all_reduce_perf, sizes=size_list, ngpus=world_size,
                          env=dict(setting))
            for r in got["rows"]:
                store.append("nccl_tests", {**r, "setting": setting.label})
            if got["error"]:
                store.record_failure(f"nccl-tests {setting.label}", got["error"], setting=setting.label, path="nccl-tests")
    return summary


# -- from microseconds to tokens --------------------------------------------------------------------------
def _graph_points(ar):
    """Standard-shape graph rows of the torch path (what an engine's captured decode step issues)."""
    g = ar[(ar["mode"] == "graph") & (ar["path"] == "torch")]
    if "shape_study" in g:
        g = g[g["shape_study"] != True]  # noqa: E712
    return g


def per_token_prediction(ar, layers: int, batches: list[dict], allreduces_per_layer: int = 2):
    """Per-token communication time for each setting: all-reduces per token x graph latency at the model's size."""
    import pandas as pd

    g = _graph_points(ar)
    out = []
    default = g[g["setting"] == "default"]
    for s in batches:
        for setting, grp in g.groupby("setting"):
            pt = grp[grp["bytes"] == s["bytes"]]
            if pt.empty:
                continue
            lat = float(pt["us_median"].iloc[0])
            base = default[default["bytes"] == s["bytes"]]
            base_lat = float(base["us_median"].iloc[0]) if len(base) else float("nan")
            n = allreduces_per_layer * layers
            out.append({"setting": setting, "batch": s["batch"], "bytes": s["bytes"], "us_per_allreduce": lat,
                        "allreduces_per_token": n, "ms_per_token": n * lat / 1000,
                        "delta_ms_vs_default": n * (lat - base_lat) / 1000, "sum_ok": bool(pt["sum_ok"].all())})
    return pd.DataFrame(out)


def recommend(pred, noise: float = 0.05) -> dict:
    """The setting with the lowest batch-1 per-token time, if it beats default by more than ``noise``; else default.

    A setting whose sum check failed anywhere is never recommended.
    """
    if pred is None or len(pred) == 0:
        return {"setting": None, "reason": "nothing was measured"}
    b1 = pred[pred["batch"] == pred["batch"].min()]
    ok = b1[b1["sum_ok"]]
    bad = sorted(set(b1[~b1["sum_ok"]]["setting"]))
    if ok.empty:
        return {"setting": None, "reason": "no setting passed the sum check", "excluded": bad}
    best = ok.sort_values("ms_per_token").iloc[0]
    default = ok[ok["setting"] == "default"]
    if default.empty:
        return {"setting": best["setting"], "reason": "default was not measured", "excluded": bad}
    # no regression: a setting slower than default by more than the noise at any measured decode size is out
    worse = set()
    for setting, grp in pred[pred["sum_ok"]].groupby("setting"):
        if (grp["delta_ms_vs_default"] > grp["ms_per_token"] * noise).any():
            worse.add(setting)
    ok = ok[~ok["setting"].isin(worse - {"default"})]
    best = ok.sort_values("ms_per_token").iloc[0]
    d = default.iloc[0]
    if best["setting"] == "default" or best["ms_per_token"] > d["ms_per_token"] * (1 - noise):
        return {"setting": "default", "reason": (f"no setting beats NCCL's own choice by more than {noise:.0%} at batch {int(d['batch'])} "
                                                  f"({d['ms_per_token']:.3f} ms/token default; best {best['setting']} {best['ms_per_token']:.3f})"),
                "excluded": bad}
    return {"setting": best["setting"], "reason": (f"{best['ms_per_token']:.3f} ms/token vs {d['ms_per_token']:.3f} default at batch "
                                                    f"{int(best['batch'])} ({-best['delta_ms_vs_default']:.3f} ms/token saved), "
                                                    "and no slower than default at any measured decode batch"),
            "excluded": bad, "slower_somewhere": sorted(worse)}


def env_block(setting_label: str | None, model_ref: str = "<model>", tp: int = 2) -> str:
    """A shell env block and launch commands per engine for the recommended setting."""
    s = parse_grid(setting_label) if setting_label and setting_label != "default" else [Setting()]
    env = {"NCCL_NVLS_ENABLE": "0", **(s[0] if s else {})}
    lines = [f"export {k}={v}" for k, v in env.items()]
    if len(env) == 1:
        lines.insert(0, "# NCCL's own choices measured best here: nothing to force beyond the preset")
    lines += ["", "# vLLM (its custom all-reduce serves small messages on NVLink unless --disable-custom-all-reduce)",
              f"vllm serve {model_ref} --tensor-parallel-size {tp}",
              "# SGLang (same note: --disable-custom-all-reduce routes decode all-reduces through NCCL)",
              f"python -m sglang.launch_server --model-path {model_ref} --tp {tp}"]
    return "\n".join(lines)


# -- command line (how the recorded H200 run was made) ---------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """python -m servebook.nccl --out DIR [--model CARD] [--grid TEXT] [--deadline S]: the whole grid into one run."""
    import argparse
    import platform
    import subprocess

    from .params import resolve_model
    from .results import RunStore

    ap = argparse.ArgumentParser(prog="python -m servebook.nccl", description=main.__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="kimi-k2.5")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--grid", default="", help="extra settings, e.g. 'NCCL_PROTO=LL;NCCL_ALGO=Tree'")
    ap.add_argument("--no-builtin", action="store_true")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--deadline", type=float, default=None, help="start no new setting after this many seconds")
    ap.add_argument("--all-reduce-perf", default="")
    args = ap.parse_args(argv)
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

    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception as exc:  # noqa: BLE001
            return f"unavailable: {type(exc).__name__}"

    arp = find_all_reduce_perf(args.all_reduce_perf)
    store.write_manifest({
        "chapter": "04_tune_nccl", "model": args.model, "hidden_size": dims["hidden_size"],
        "num_hidden_layers": dims["num_hidden_layers"], "batches": batches, "sizes": sizes,
        "settings": [s.label for s in settings], "backend": backend, "world_size": world,
        "python": platform.python_version(), "host": platform.node(),
        "gpus": sh(["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"]),
        "topology": sh(["nvidia-smi", "topo", "-m"]),
        "nccl_nvls_enable": "0", "all_reduce_perf": arp or "not found on PATH",
        "method": ("one bounded torchrun launch per setting (one process per GPU, NCCL with device_id, os._exit after "
                   "writing results) plus one bounded single-process CuPy launch per setting (ncclCommInitAll, group calls, "
                   "one CUDA graph per GPU). graph: iters all-reduces captured per graph, the graph launched `launches` times "
                   "after a barrier; per-call latency = elapsed / (iters x launches), median of repeats; us_median from CUDA "
                   "events on rank 0 / GPU 0, us_wall from the host clock after synchronizing (the nccl-tests -G method). "
                   "eager: a Python loop of calls. Sum checked eagerly and through a 1-call captured graph on every rank. "
                   "Algorithm/protocol from NCCL_DEBUG=INFO (subsystems INIT,ENV,TUNING,COLL) written to per-process files."),
    })
    if not arp:
        store.record_failure("nccl-tests", "all_reduce_perf is not on PATH on this host and there is no internet to fetch and "
                             "build nccl-tests; the reference figures come from shared/measurements-h200.md",
                             setting="nccl-tests", kind="not_available")
    t0 = time.monotonic()
    summary = run_grid(store, sizes, settings, timeout_s=args.timeout, deadline_s=args.deadline, all_reduce_perf=arp)
    if backend == "nccl" and (args.deadline is None or time.monotonic() - t0 < args.deadline):
        # control: the logging cost. NCCL_DEBUG=INFO prints a line per call, which an eager loop pays for.
        res = allreduce_bench([s["bytes"] for s in sizes if s["batch"] in (1, 16)], backend=backend, world_size=world,
                              timeout_s=args.timeout, debug=False)
        for r in res["rows"]:
            store.append("allreduce_control", {**r, "setting": "default", "nccl_debug": "unset"})
        if res["error"]:
            store.record_failure("allreduce control without NCCL_DEBUG", res["error"], setting="default-control")
    store.write_manifest({"summary": summary, "elapsed_s": round(time.monotonic() - t0, 1)})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
