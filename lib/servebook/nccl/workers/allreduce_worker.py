"""One rank of chapter 04's all-reduce measurement; torchrun starts one per GPU (or two with gloo on the CPU).

    torchrun --standalone --nproc-per-node=N allreduce_worker.py '{"backend": "nccl", "sizes": [...], "out": PREFIX, ...}'

Per size: the sum checked eagerly and through a captured graph, then ``graph`` (iters calls per CUDA graph,
launched back to back) and ``eager`` timings, optionally ``ncclAllReduce`` through CuPy on the same stream
(``raw``). Each rank writes ``PREFIX.rankR.json`` after every size and leaves with ``os._exit``
(teardown can hang). Started by ``servebook.nccl.launch.allreduce_bench``.
"""
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
