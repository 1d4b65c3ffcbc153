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


def _running_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (zombies, dead and waiting for their reaper, left out)."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # process group, state
            out.append(int(d))
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
    assert _gone(pid) and not _running_in_group(pid) and not _shims()


# A stand-in for the shim that speaks its --servebook-turns protocol (no sglang: it costs no imports): ready, then per
# stdin line a result file (first run) or a failure on stderr with no result (later runs), each followed by the marker.
_FAKE_SHIM = """
import json, sys
print("starting"); print("\\n@@servebook-turn@@ ready", flush=True)
for i, line in enumerate(iter(sys.stdin.readline, "")):
    if not line.strip():
        break
    args = json.loads(line)
    if i == 0:
        res = {"completed": 4, "mean_ttft_ms": 1.0, "mean_itl_ms": 1.0, "output_throughput": 1.0,
               "total_output_tokens": 32, "duration": 1.0, "itls": [[1.0]]}
        open(args[args.index("--output-file") + 1], "w").write(json.dumps(res) + "\\n")
        print("note 0", file=sys.stderr, flush=True)
    else:
        print("Traceback (most recent call last):\\nValueError: boom", i, file=sys.stderr, flush=True)
    print("\\n@@servebook-turn@@ done", i, int(i > 0), flush=True)
"""


def test_a_failed_turn_mid_way_surfaces_and_stops_the_process(embedded_model, tmp_path, monkeypatch):
    """bench_serving's second turn fails: agreement() raises with its log (as a failed run_bench_serving does), and
    the process is gone. (The driver's side, against a stand-in shim.)"""
    import sys

    tok = bench.load_tokenizer(embedded_model)
    fake_shim = tmp_path / "fake_shim.py"
    fake_shim.write_text(_FAKE_SHIM)
    monkeypatch.setattr(bs_mod, "SHIM", fake_shim)
    pids, real_run = [], bs_mod._BenchServingTurns.run

    def bs(self, *a, **kw):
        pids.append(self.pid)
        return real_run(self, *a, **kw)

    monkeypatch.setattr(bs_mod._BenchServingTurns, "run", bs)
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=0.001) as fake:
        with pytest.raises(RuntimeError, match=r"(?s)sglang.bench_serving failed \(rc=1\):.*ValueError: boom 1") as exc:
            bench_compare.agreement(sys.executable, fake.url, "fake-sse", embedded_model, tok, input_len=16,
                                    output_len=8, concurrency=1, num_prompts=4, engine="", repeats=3, workdir=tmp_path)
    assert "note 0" not in str(exc.value) and "starting" not in str(exc.value)  # that run's log only
    assert len(pids) == 2 and pids[0] == pids[1] and pids[0] is not None, pids
    assert _gone(pids[0]) and not _running_in_group(pids[0]) and not _shims()


def test_start_timeout_and_early_end(tmp_path):
    """Without bench_serving itself (no engine environment needed): an interpreter that never gets ready times out
    and its whole group is stopped; one that ends before it is ready says why."""
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nsleep 300 &\nwait\n")  # a child in its group too
    hang.chmod(0o755)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    bs = bs_mod._BenchServingTurns(str(hang), tmp_path / "tok", timeout=1.0, workdir=tmp_path / "a")
    with pytest.raises(subprocess.TimeoutExpired):
        with bs:
            pid = bs.pid
            bs.wait_ready()
    assert _gone(pid)
    assert not _running_in_group(pid)  # its child too
    end = tmp_path / "end.sh"
    end.write_text("#!/bin/sh\necho no bench_serving here >&2\nexit 3\n")
    end.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"(?s)rc=3, before its first run.*no bench_serving here"):
        with bs_mod._BenchServingTurns(str(end), tmp_path / "tok", timeout=30.0, workdir=tmp_path / "b") as bs:
            bs.wait_ready()
