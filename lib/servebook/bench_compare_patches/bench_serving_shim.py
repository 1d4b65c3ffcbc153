"""Run ``sglang.bench_serving`` inside the engine's environment, patched for a fair comparison with servebook's client.

    SERVEBOOK_PIN_CPU=0 SERVEBOOK_DROP_FIELDS=ignore_eos python bench_serving_shim.py --backend sglang ...

(1) pins the process to one CPU when asked; (2) drops request fields the server would refuse from every aiohttp
POST; then runs bench_serving's own ``__main__`` with the remaining arguments. Started by ``servebook.bench_compare``.
"""
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("bench_compare_patches"):
    sys.path.pop(0)

import os, sys, runpy
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
sys.argv = ["sglang.bench_serving", *sys.argv[1:]]
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
