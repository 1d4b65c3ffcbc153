"""Chapter 03's sweep on a CPU host: its servers start together, are measured one at a time, and are all stopped.

The real engine (``transformers serve``) on the embedded model. ``force_each_backend`` starts every server of a round at
once when they run on this machine's CPU (``servers.starts_overlap_here``); these tests check, from the run's own server
registry and timestamps taken around each configuration's turn, that (a) the servers were started together, (b) none
was starting while another was measured, and the ready ones that waited used next to no CPU meanwhile, and (c) every
process is gone afterwards, also when the sweep ends in an exception or an interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from servebook.processes import _group_alive
from servebook.results import RunStore
from servebook.servers import leftover_servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# What each start's rate is taken over: 2 timed requests of 32 tokens (max_tokens x 2), as in tests/test_starts.py. With
# 1 request of 8 tokens, CI on 2 loaded cores once got all 8 in one network read (transformers serve writes what its
# generation thread queued since its last write at once): no time to take a rate by, and the start was `ok` with
# decode_tok_s None (now `no rate`, tests/test_drills.py). Here, 4 busy loops and the client and server at nice 15 left
# untimed 29 of 80 requests of 8 tokens, 12 of 80 of 16, none of 80 of 32.
RATE = dict(max_tokens=16, runs=2)


def _events(registry) -> list[dict]:
    return [json.loads(line) for line in open(registry)] if os.path.exists(registry) else []


def _live_pgids(registry) -> list[int]:
    state: dict = {}
    for e in _events(registry):
        if e["event"] == "started":
            state[e["pgid"]] = e
        else:
            state.pop(e["pgid"], None)
    return list(state)


def _cpu_s(pgids) -> float:
    """CPU seconds (user + system) used so far by the live processes of these process groups."""
    total = 0.0
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in pgids:
                t = p.cpu_times()
                total += t.user + t.system
        except (psutil.Error, OSError):
            continue
    return total


@pytest.fixture
def on_cpu(embedded_model, tmp_path):
    """Skips where the servers would start one at a time (a GPU visible); gives the engine and a store."""
    from servebook.servers import starts_overlap_here
    from servebook.engines import get_engine

    store = RunStore.at(tmp_path / "run")
    ok, why = starts_overlap_here(3, embedded_model)
    if not ok:
        pytest.skip(f"the servers start one at a time here: {why}")
    return get_engine("transformers"), store


def _watch_turns(monkeypatch, registry, fault=None) -> list[dict]:
    """Record each configuration's turn (its start and end, and the CPU the other live servers used meanwhile);
    ``fault(label, srv)`` runs at the start of a turn."""
    import servebook.backends.serve as backends

    turns: list[dict] = []
    real = backends._exercise

    def exercise(ctx, srv, backend, row):
        others = [g for g in _live_pgids(registry) if g != srv.pgid]
        turn = {"label": backend or "auto", "pgid": srv.pgid, "others": others, "cpu0": _cpu_s(others), "t0": time.time()}
        turns.append(turn)
        try:
            if fault:
                fault(turn["label"], srv)
            real(ctx, srv, backend, row)
        finally:
            turn["t1"], turn["others_cpu_s"] = time.time(), _cpu_s(others) - turn["cpu0"]

    monkeypatch.setattr(backends, "_exercise", exercise)
    return turns


def _all_gone(registry) -> None:
    started = [e for e in _events(registry) if e["event"] == "started"]
    assert started
    deadline = time.time() + 20
    while time.time() < deadline and any(_group_alive(e["pgid"]) for e in started):
        time.sleep(0.2)
    assert not [e["pgid"] for e in started if _group_alive(e["pgid"])]
    assert not leftover_servers(registry)


def test_cpu_sweep_starts_its_servers_together_and_measures_them_one_at_a_time(on_cpu, embedded_model, monkeypatch,
                                                                                 no_leftover_servers):
    from servebook.backends import force_each_backend

    eng, store = on_cpu
    registry = store.path / "servers.jsonl"
    turns = _watch_turns(monkeypatch, registry)
    said: list[str] = []
    rows = force_each_backend(eng, embedded_model, [None, "sdpa", "eager"], store, **RATE, ready_timeout=240,
                              progress=said.append, preflight=False)
    assert [r["attention"] for r in rows] == ["auto", "sdpa", "eager"]
    for r in rows:
        assert r["outcome"] == "ok", (r["attention"], r.get("outcome"), r.get("error"))
        assert r["port_free_after"] is True and r["ready_s"] > 0 and r["decode_tok_s"] > 0
        assert sorted(r["started_with"]) == sorted({"auto", "sdpa", "eager"} - {r["attention"]})
    assert any("start together" in m for m in said) and sum("ready after" in m for m in said) == 3
    events = _events(registry)
    started = [e for e in events if e["event"] == "started"]
    stopped = {e["pgid"]: e["time"] for e in events if e["event"] == "stopped"}
    # (a) started together: every server launched before the first turn, and before any was stopped
    assert len(started) == 3 and len(turns) == 3
    assert max(e["time"] for e in started) < min(turns[0]["t0"], *stopped.values())
    # (b) no server starting while another is measured: each one's own ready time (its launch + its ready_s) lies
    # before the first turn; turns follow one another, each server stopped before the next turn begins
    ready_at = {e["pgid"]: e["time"] + r["ready_s"] for e, r in zip(started, rows)}
    assert max(ready_at.values()) <= turns[0]["t0"] + 0.5
    for a, b in zip(turns, turns[1:]):
        assert a["t1"] <= stopped[a["pgid"]] <= b["t0"]
    # the ready servers that waited their turn used next to no CPU while another one was measured: 5% of the turn, and
    # never less than 3 clock ticks each (CPU time is counted in 10 ms ticks: CI saw 2 ticks over a 0.33 s turn)
    for t in turns:
        assert t["others_cpu_s"] <= max(0.05 * (t["t1"] - t["t0"]), 0.03) * max(1, len(t["others"])), t
    # (c) every process gone
    _all_gone(registry)


def test_cpu_sweep_records_a_crash_stops_everything_on_an_exception_and_resumes(on_cpu, embedded_model, monkeypatch,
                                                                                no_leftover_servers):
    from servebook.backends import force_each_backend

    eng, store = on_cpu
    registry = store.path / "servers.jsonl"

    def fault(label, srv):
        if label == "sdpa":  # dies at its turn: a crash, recorded, and the sweep goes on
            os.killpg(srv.pgid, signal.SIGKILL)
        elif label == "eager":
            raise RuntimeError("mid-sweep failure")

    turns = _watch_turns(monkeypatch, registry, fault)
    with pytest.raises(RuntimeError, match="mid-sweep failure"):
        force_each_backend(eng, embedded_model, [None, "sdpa", "eager"], store, **RATE, ready_timeout=240,
                           progress=None, preflight=False)
    assert [t["label"] for t in turns] == ["auto", "sdpa", "eager"]
    assert [(r["attention"], r["outcome"]) for r in store.rows("backends")] == [("auto", "ok"), ("sdpa", "crashed")]
    assert store.rows("backends")[1]["port_free_after"] is True
    _all_gone(registry)

    monkeypatch.undo()  # the same run again: the two recorded are skipped, only eager starts (alone)
    said: list[str] = []
    rows = force_each_backend(eng, embedded_model, [None, "sdpa", "eager"], RunStore.at(store.path), **RATE,
                              ready_timeout=240, progress=said.append, preflight=False)
    assert [r["outcome"] for r in rows] == ["ok", "crashed", "ok"] and "started_with" not in rows[2]
    assert sum("already measured" in m for m in said) == 2
    _all_gone(registry)


def test_an_interrupt_while_the_servers_start_stops_them_all(on_cpu, embedded_model, no_leftover_servers):
    from servebook.backends import force_each_backend

    eng, store = on_cpu
    registry = store.path / "servers.jsonl"

    def progress(msg: str) -> None:
        if "ready after" in msg:  # the first server ready, the others still starting
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        force_each_backend(eng, embedded_model, [None, "sdpa", "eager"], store, **RATE, ready_timeout=240,
                           progress=progress, preflight=False)
    assert len([e for e in _events(registry) if e["event"] == "started"]) == 3
    assert not store.rows("backends")
    _all_gone(registry)
