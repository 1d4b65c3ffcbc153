"""Cassettes: every host interaction of a run, in order, in ``<run_dir>/cassette.jsonl``.

    h = RecordingHost(LocalHost(), run_dir)      # what `servebook book --record` makes each chapter use
    h = ReplayHost("runs/<host>/<run-id>")        # the same answers again, with no host at all

One JSON line per interaction: ``kind`` (run, spawn, stop, alive), ``key`` (what was asked: the command
line, or the caller's label for calls whose command carries volatile parts), the masked command, the
exit status, stdout, stderr and the elapsed time; stdin is kept only as its size and sha256. Secrets are
masked (``servebook.secrets``) before anything is written. The first line is a header.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Sequence

from ..secrets import mask_value
from ._base import Host
from ._types import Completed, HostError, HostProcess

__all__ = ["CASSETTE", "SCHEMA", "RecordingHost", "ReplayHost", "start_recording", "is_recording"]

CASSETTE = "cassette.jsonl"
SCHEMA = "servebook.cassette/1"


def _short(arg: str) -> str:
    if len(arg) <= 300:
        return arg
    return f"<{len(arg)} chars sha256:{hashlib.sha256(arg.encode()).hexdigest()[:16]}>"


def _key(argv: Sequence[str], label: str | None) -> str:
    return label or " ".join(shlex.quote(_short(a)) for a in argv)


def start_recording(run_dir: str | Path, host_spec: str) -> Path:
    """Mark ``run_dir`` as recording: chapters that open their host there record into its cassette."""
    path = Path(run_dir) / CASSETTE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"schema": SCHEMA, "host": mask_value(host_spec), "created": time.time()}) + "\n")
    return path


def is_recording(run_dir: str | Path | None) -> bool:
    return bool(run_dir) and (Path(run_dir) / CASSETTE).exists()


class RecordingHost(Host):
    """Wraps a host and appends each interaction to the run's cassette (masked)."""

    in_process = False

    def __init__(self, inner: Host, run_dir: str | Path):
        self.inner = inner
        self.spec = inner.spec
        self.python_exe = inner.python_exe
        self.default_timeout = inner.default_timeout
        self.path = start_recording(run_dir, inner.spec)
        self._lock = threading.Lock()

    def _write(self, row: dict) -> None:
        row = mask_value(row)
        with self._lock, open(self.path, "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")

    def run(self, argv, *, input=None, timeout=None, env=None, label=None) -> Completed:
        data = input.encode() if isinstance(input, str) else input
        t = time.time()
        try:
            res = self.inner.run(argv, input=data, timeout=timeout, env=env, label=label)
        except HostError as exc:
            self._write({"kind": "run", "key": _key(argv, label), "error": str(exc), "t": t})
            raise
        self._write({"kind": "run", "key": _key(argv, label), "argv": [_short(str(a)) for a in argv],
                     "stdin": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} if data is not None else None,
                     "env": sorted(env or {}), "rc": res.rc, "stdout": res.stdout, "stderr": res.stderr,
                     "elapsed_s": res.elapsed_s, "t": t})
        return res

    def _spawn(self, argv, env, log_path, shell, label) -> HostProcess:
        proc = self.inner._spawn(argv, env, log_path, shell, label)
        self._write({"kind": "spawn", "key": label, "shell": shell, "pgid": proc.pgid, "log_path": log_path, "t": time.time()})
        return HostProcess(self, proc.pgid, label, log_path, handle=proc)

    def _stop(self, proc: HostProcess, grace_s: float) -> None:
        proc.handle.stop(grace_s)
        self._write({"kind": "stop", "key": proc.label, "pgid": proc.pgid, "t": time.time()})

    def _alive(self, proc: HostProcess) -> bool:
        value = proc.handle.alive()
        self._write({"kind": "alive", "key": proc.label, "value": value, "t": time.time()})
        return value

    def close(self) -> None:
        self.inner.close()


class ReplayHost(Host):
    """Answers every interaction from a recorded run's cassette; no host is contacted.

    Interactions are matched by kind and key, in recorded order; one that was never recorded is an
    error naming it.
    """

    in_process = False

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        path = self.run_dir / CASSETTE
        self.spec = f"replay:{run_dir}"
        if not path.exists():
            raise HostError(f"no cassette at {path}: record the run first with `servebook book --record` "
                            "(it writes cassette.jsonl in the run directory), then replay that directory")
        lines = path.read_text().splitlines()
        try:
            self.header = json.loads(lines[0])
            rows = [json.loads(ln) for ln in lines[1:] if ln.strip()]
        except (json.JSONDecodeError, IndexError) as exc:
            raise HostError(f"{path} is not a servebook cassette ({exc}); record the run again") from None
        if self.header.get("schema") != SCHEMA:
            raise HostError(f"{path} has schema {self.header.get('schema')!r}, this servebook reads {SCHEMA!r}; record the run again")
        self.recorded_host = self.header.get("host")
        if str(self.recorded_host or "").startswith("ssh://"):  # the recorded interpreter, so launch commands read as recorded
            from ..errors import ParameterError
            from ._ssh import parse_ssh

            try:
                self.python_exe = parse_ssh(self.recorded_host)["python"] or self.python_exe
            except ParameterError:
                pass
        self._queues: dict[tuple[str, str], deque] = defaultdict(deque)
        self._asked: dict[tuple[str, str], int] = defaultdict(int)
        for row in rows:
            self._queues[(row["kind"], row["key"])].append(row)
        self._total = {k: len(v) for k, v in self._queues.items()}
        self._lock = threading.Lock()

    def _next(self, kind: str, key: str, strict: bool = True) -> dict | None:
        key = mask_value(key)  # keys were masked when recorded
        with self._lock:
            self._asked[(kind, key)] += 1
            q = self._queues.get((kind, key))
            if q:
                return q.popleft()
        if not strict:
            return None
        n, have = self._asked[(kind, key)], self._total.get((kind, key), 0)
        similar = sorted({k for (kd, k) in self._total if kd == kind and k.split(" ")[0] == key.split(" ")[0]})[:3]
        raise HostError(
            f"replay of {self.run_dir}: the cassette has no {kind} {key!r} "
            + (f"(asked {n} times, recorded {have})" if have else "(never recorded)")
            + (f"; recorded ones like it: {similar}" if similar else "")
            + "; the book asked for something the recorded run did not do: replay the same chapters and parameters, or record again with --record")

    def run(self, argv, *, input=None, timeout=None, env=None, label=None) -> Completed:
        row = self._next("run", _key([str(a) for a in argv], label))
        if "error" in row:
            raise HostError(row["error"])
        return Completed(row["rc"], row.get("stdout", ""), row.get("stderr", ""), row.get("elapsed_s", 0.0))

    def _spawn(self, argv, env, log_path, shell, label) -> HostProcess:
        row = self._next("spawn", label)
        return HostProcess(self, int(row["pgid"]), label, log_path)

    def _stop(self, proc: HostProcess, grace_s: float) -> None:
        self._next("stop", proc.label, strict=False)

    def _alive(self, proc: HostProcess) -> bool:
        row = self._next("alive", proc.label, strict=False)
        return bool(row and row.get("value"))
