"""Run ``sglang.bench_serving`` inside the engine's environment, patched for a fair comparison with servebook's client.

    SERVEBOOK_PIN_CPU=0 SERVEBOOK_DROP_FIELDS=ignore_eos python bench_serving_shim.py --backend sglang ... [--servebook-next ...]

(1) pins the process to one CPU when asked; (2) drops request fields the server would refuse from every aiohttp
POST, and lowers a ``min_tokens`` above the request's ``max_tokens`` to it (bench_serving's warm-up request asks at most
32 tokens but carries the same ``--extra-request-body``, and SGLang refuses ``min_new_tokens > max_new_tokens`` with
HTTP 400, which stops bench_serving before it measures: seen on SGLang 0.5.16, benchmark/serving.py:1390-1413); then runs bench_serving's own ``__main__`` with the remaining arguments, once per group of arguments between
``--servebook-next`` markers (one process, so its imports, some seconds, are paid once). A run that fails is reported
on stderr and the next one runs; the exit status is 1 when any failed. Started by ``servebook.bench.bench_serving``.

    ... python bench_serving_shim.py --servebook-turns      (stdin: one JSON list of arguments per line)

runs on request instead (``servebook.bench.bench_serving._BenchServingTurns``, so that its runs can take turns with
another client's): it pays bench_serving's imports, prints a ``@@servebook-turn@@ ready`` line, then waits on a blocking
read of stdin (no CPU while it waits); each line is one run's arguments, and after the run (its result file written)
it prints ``@@servebook-turn@@ done I RC``. An empty line or the end of stdin ends it.
"""
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("compare_patches"):
    sys.path.pop(0)

import json, os, runpy, traceback

MARK = "@@servebook-turn@@"


def fix_body(j, drop):
    """The JSON body of one request as the server should get it: ``drop`` fields removed, ``min_tokens`` at most
    ``max_tokens``."""
    if isinstance(j, dict):
        for f in drop:
            j.pop(f, None)
        if isinstance(j.get("min_tokens"), int) and isinstance(j.get("max_tokens"), int) and j["min_tokens"] > j["max_tokens"]:
            j["min_tokens"] = j["max_tokens"]
    return j


def main() -> int:
    cpu = int(os.environ.get("SERVEBOOK_PIN_CPU", "-1"))
    if cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    drop = [f for f in os.environ.get("SERVEBOOK_DROP_FIELDS", "").split(",") if f]
    import aiohttp
    _post = aiohttp.ClientSession.post

    def post(self, url, *, data=None, **kw):
        fix_body(kw.get("json"), drop)
        return _post(self, url, data=data, **kw)
    aiohttp.ClientSession.post = post
    if sys.argv[1:] == ["--servebook-turns"]:
        return turns()
    groups = [[]]
    for a in sys.argv[1:]:
        if a == "--servebook-next":
            groups.append([])
        else:
            groups[-1].append(a)
    return 1 if sum(run(g) for g in groups) else 0


def run(args) -> int:
    """One bench_serving run (its ``__main__``) with ``args``: 0, or 1 when it failed (reported on stderr)."""
    sys.argv = ["sglang.bench_serving", *args]
    try:
        runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"servebook shim: bench_serving exited with {exc.code}", file=sys.stderr, flush=True)
            return 1
    except Exception:  # noqa: BLE001 - reported, and the next run goes on
        traceback.print_exc()
        return 1
    return 0


def turns() -> int:
    """Runs on request: one JSON list of arguments per stdin line, a marker line on stdout after each."""
    import sglang.bench_serving  # noqa: F401 - its imports, paid before the first turn
    sys.modules.pop("sglang.bench_serving", None)  # each run executes it afresh as __main__ (its imports stay cached)
    print(f"\n{MARK} ready", flush=True)
    failed, i = 0, 0
    while True:
        line = sys.stdin.readline()  # blocks: no CPU between turns
        if not line.strip():
            break
        rc = run(json.loads(line))
        failed += rc
        sys.stderr.flush()
        print(f"\n{MARK} done {i} {rc}", flush=True)
        i += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
