"""One sglang.bench_serving process per ``agreement()``: its runs take turns with servebook's, it waits without CPU
between them, and it is stopped on every path (end, exception, failed run, timeout).

Needs the cached SGLang 0.5.9 environment, as tests/test_bench_fidelity.py does.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from servebook import bench
from servebook.bench import bench_serving as bs_mod
from servebook.bench import compare as bench_compare

pytestmark = [pytest.mark.slow, pytest.mark.envs]


@pytest.fixture(scope="module")
def sglang_env():
    return bench_compare.ensure_bench_serving("sglang==0.5.9", progress=None)


def _shims() -> dict[int, float]:
    """This process's bench_serving shims still running: pid -> CPU seconds (user + sys) used so far."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if b"bench_serving_shim.py" not in f.read():
                    continue
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == os.getpid():  # state, parent
            out[int(d)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_turns_alternate_in_one_idle_process(sglang_env, embedded_model, tmp_path, monkeypatch):
    tok = bench.load_tokenizer(embedded_model)
    events = []
    real_requests, real_run = bench_compare.run_requests, bs_mod._BenchServingTurns.run

    def sb(*a, **kw):
        before, t0 = _shims(), time.monotonic()
        out = real_requests(*a, **kw)
        events.append(("servebook", t0, time.monotonic(), before, _shims()))
        return out

    def bs(self, *a, **kw):
        t0 = time.monotonic()
        out = real_run(self, *a, **kw)
        events.append(("bench_serving", t0, time.monotonic(), self.pid, out))
        return out

    monkeypatch.setattr(bench_compare, "run_requests", sb)
    monkeypatch.setattr(bs_mod._BenchServingTurns, "run", bs)
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=0.01, ttft_s=0.02) as fake:
        a = bench_compare.agreement(sglang_env.python, fake.url, "fake-sse", embedded_model, tok, input_len=16,
                                    output_len=16, concurrency=2, num_prompts=4, engine="", repeats=3,
                                    workdir=tmp_path)
    # the warm-up, then servebook, then 3 x (bench_serving, servebook), one after the other
    assert [e[0] for e in events] == ["servebook"] * 2 + ["bench_serving", "servebook"] * 3
    assert all(e[1] >= prev[2] for prev, e in zip(events, events[1:]))
    pids = {e[3] for e in events if e[0] == "bench_serving"}
    assert len(pids) == 1 and None not in pids, pids
    (pid,) = pids
    assert {r["process_pid"] for r in a["bench_serving"]["runs"]} == {pid}
    assert all(r["completed"] == 4 and r["wall_s"] > 0 for r in a["bench_serving"]["runs"])
    # it was there for every servebook turn (the warm-up's start included), and idle during the measured ones
    assert all(set(e[3]) == set(e[4]) == {pid} for e in events if e[0] == "servebook"), [e[3:] for e in events]
    idle = [(e[4][pid] - e[3][pid], e[2] - e[1]) for e in events[1:] if e[0] == "servebook"]
    print("bench_serving CPU s during servebook's turns (cpu, wall):", idle)
    assert all(cpu <= 0.05 + 0.05 * wall for cpu, wall in idle), idle
    assert _gone(pid) and not _shims()


def test_stopped_after_an_exception_mid_way(sglang_env, embedded_model, tmp_path, monkeypatch):
    tok = bench.load_tokenizer(embedded_model)
    seen, real_requests = [], bench_compare.run_requests

    def sb(*a, **kw):
        seen.append(_shims())
        if len(seen) == 3:  # the warm-up, servebook, bench_serving's first turn, then this
            raise KeyboardInterrupt
        return real_requests(*a, **kw)

    monkeypatch.setattr(bench_compare, "run_requests", sb)
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=0.005) as fake:
        with pytest.raises(KeyboardInterrupt):
            bench_compare.agreement(sglang_env.python, fake.url, "fake-sse", embedded_model, tok, input_len=16,
                                    output_len=8, concurrency=1, num_prompts=4, engine="", repeats=3, workdir=tmp_path)
    assert len(seen) == 3 and len(seen[2]) == 1, seen
    (pid,) = seen[2]
    assert _gone(pid) and not _shims()


def test_failed_and_timed_out_runs(sglang_env, embedded_model, tmp_path):
    """A failed run says why (its log) and the next run goes on in the same process; a run past its timeout raises
    TimeoutExpired and the process is stopped."""
    from servebook.servers import free_port

    data = bs_mod.write_sharegpt(["hello there, " * 20] * 4, tmp_path / "sharegpt.json")
    run = {"model": "fake-sse", "dataset_path": data, "input_len": 8, "output_len": 8, "num_prompts": 2,
           "max_concurrency": 1}
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=0.05) as fake:
        with pytest.raises(subprocess.TimeoutExpired):
            with bs_mod._BenchServingTurns(sglang_env.python, embedded_model, drop_fields=(), workdir=tmp_path) as bs:
                dead = bs.run({**run, "url": f"http://127.0.0.1:{free_port()}"})
                assert isinstance(dead, str) and dead.startswith("sglang.bench_serving failed") and "Traceback" in dead, dead
                ok = bs.run({**run, "url": fake.url})
                assert isinstance(ok, dict) and ok["completed"] == 2 and ok["_process_pid"] == bs.pid, ok
                pid = bs.pid
                bs.run({**run, "url": fake.url, "output_len": 200}, timeout=1.0)  # 200 tokens at 50 ms each
    assert _gone(pid) and not _shims()
