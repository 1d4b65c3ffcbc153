"""Run ``sglang.bench_serving`` inside the engine's environment, patched for a fair comparison with servebook's client.

    SERVEBOOK_PIN_CPU=0 SERVEBOOK_DROP_FIELDS=ignore_eos python bench_serving_shim.py --backend sglang ... [--servebook-next ...]

(1) pins the process to one CPU when asked; (2) drops request fields the server would refuse from every aiohttp
POST; then runs bench_serving's own ``__main__`` with the remaining arguments, once per group of arguments between
``--servebook-next`` markers (one process, so its imports, some seconds, are paid once). A run that fails is reported
on stderr and the next one runs; the exit status is 1 when any failed. Started by ``servebook.bench.bench_serving``.
"""
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("bench_compare_patches"):
    sys.path.pop(0)

import os, sys, runpy, traceback
cpu = int(os.environ.get("SERVEBOOK_PIN_CPU", "-1"))
if cpu >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})
drop = [f for f in os.environ.get("SERVEBOOK_DROP_FIELDS", "").split(",") if f]
if drop:
    import aiohttp
    _post = aiohttp.ClientSession.post
    def post(self, url, *, data=None, **kw):
        j = kw.get("json")
        if isinstance(j, dict):
            for f in drop:
                j.pop(f, None)
        return _post(self, url, data=data, **kw)
    aiohttp.ClientSession.post = post
groups, failed = [[]], 0
for a in sys.argv[1:]:
    if a == "--servebook-next":
        groups.append([])
    else:
        groups[-1].append(a)
for g in groups:
    sys.argv = ["sglang.bench_serving", *g]
    try:
        runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            failed += 1
            print(f"servebook shim: bench_serving exited with {exc.code}", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - reported, and the next run goes on
        failed += 1
        traceback.print_exc()
sys.exit(1 if failed else 0)
