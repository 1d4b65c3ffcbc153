"""One process drives every GPU through CuPy's NCCL bindings: the shape of nccl-tests ``all_reduce_perf -g N -G``.

    python single_worker.py '{"sizes": [...], "ndev": 2, "out": PREFIX, ...}'

``ncclCommInitAll``, group calls, one CUDA graph per GPU; rows to ``PREFIX.json`` after every size.
Started by ``servebook.nccl.launch.single_process_bench``.
"""
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
