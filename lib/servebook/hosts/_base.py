"""What every host offers: commands, Python under a chosen interpreter, files, long-running processes.

Everything is built on three primitives an implementation provides (``_run``, ``_spawn`` and ``close``);
recording and replay hook in at ``run``/``spawn``, so every interaction has one shape in the cassette.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import ServebookError

__all__ = ["Host", "HostError", "Completed", "HostProcess"]

_MARK = "@@SERVEBOOK-HOST@@"


class HostError(ServebookError):
    """The host cannot be reached, refused us, dropped the connection, or a replay lacks an interaction."""


@dataclass
class Completed:
    """A finished command: exit status (124 on timeout), its output, and how long it took."""

    rc: int
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0

    def check(self, what: str) -> "Completed":
        if self.rc != 0:
            tail = (self.stderr or self.stdout).strip()[-600:]
            raise HostError(f"{what} failed with exit status {self.rc}: {tail or 'no output'}")
        return self


@dataclass
class HostProcess:
    """A long-running process on a host, in its own process group, watched by a watchdog that stops the
    group when the connection (or this Python process) goes away."""

    host: "Host"
    pgid: int
    label: str
    log_path: str
    handle: Any = field(default=None, repr=False)
    stopped: bool = False

    def alive(self) -> bool:
        return self.host._alive(self)

    def log_text(self) -> str:
        return self.host.read_text(self.log_path, missing_ok=True)

    def stop(self, grace_s: float = 10.0) -> None:
        if not self.stopped:
            self.stopped = True
            self.host._stop(self, grace_s)


# Runs on the host as `python3 -c WATCHDOG`; its first stdin line is the JSON spec (so the environment
# never shows in a process list). It starts the command in its own session (process group),
# output to the log, prints the group id, then waits on its own stdin. EOF on stdin (the caller asked
# to stop, closed the channel, or the connection dropped) stops the group: TERM, grace, KILL.
_WATCHDOG = r"""
import json, os, signal, subprocess, sys, time
spec = json.loads(sys.stdin.readline())
env = dict(os.environ); env.update(spec.get("env") or {}); env.setdefault("PYTHONUNBUFFERED", "1")
log = open(spec["log"], "ab")
log.write(("$ " + spec.get("shell", "") + "\n").encode()); log.flush()
try:
    p = subprocess.Popen(spec["argv"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
except OSError as exc:
    print(json.dumps({"error": f"{spec['argv'][0]}: {exc}"}), flush=True); sys.exit(127)
print(json.dumps({"pgid": p.pid}), flush=True)
def alive():
    try:
        os.killpg(p.pid, 0)
    except ProcessLookupError:
        return False
    p.poll()
    try:
        os.killpg(p.pid, 0); return True
    except ProcessLookupError:
        return False
def stop(grace):
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            p.poll()
            if not alive():
                return
            time.sleep(0.1)
line = sys.stdin.readline()
grace = float(line.split()[1]) if line.startswith("stop ") else 10.0
stop(grace)
p.poll()
print(json.dumps({"stopped": p.pid, "returncode": p.returncode}), flush=True)
"""

# Runs on the host as `python3 -`: unpacks servebook (a zip carried inside this script), calls one
# function with JSON arguments, prints its JSON answer after a marker line, removes the unpacked copy.
_CALL = r"""
import base64, io, json, os, shutil, sys, tempfile, zipfile
blob, target, kwargs = {blob!r}, {target!r}, json.loads({kwargs!r})
tmp = tempfile.mkdtemp(prefix="servebook-host-")
try:
    zipfile.ZipFile(io.BytesIO(base64.b64decode(blob))).extractall(tmp)
    os.environ["SERVEBOOK_HOME"] = tmp
    sys.path.insert(0, os.path.join(tmp, "lib"))
    import importlib
    mod, fn = target.split(":")
    value = getattr(importlib.import_module(mod), fn)(**kwargs)
    sys.stdout.flush()
    print("\n" + {mark!r}); print(json.dumps(value, default=str)); sys.stdout.flush()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
"""

_BUNDLE: dict[str, str] = {}


def _bundle() -> str:
    """servebook's package and hardware/model data as a base64 zip (built once per process)."""
    if "zip" not in _BUNDLE:
        from ..paths import book_root

        root = book_root()
        pkg = Path(__file__).resolve().parents[1]
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(pkg.rglob("*.py")):
                if "__pycache__" not in p.parts:
                    zf.write(p, "lib/servebook/" + p.relative_to(pkg).as_posix())
            for sub in ("hardware", "models"):
                for p in sorted((root / "data" / sub).glob("*.json")):
                    zf.write(p, f"data/{sub}/{p.name}")
        _BUNDLE["zip"] = base64.b64encode(buf.getvalue()).decode()
    return _BUNDLE["zip"]


class Host:
    """One host. ``get_host('local' | 'ssh://user@box[:port]' | 'replay:RUN_DIR')`` gives one.

        h.run(["nvidia-smi", "-L"], timeout=30)              # Completed(rc, stdout, stderr, elapsed_s)
        h.python("import torch; print(torch.__version__)")     # a snippet under h.python_exe
        h.call("servebook.probe:probe", {"profile": None})     # a servebook function run there, JSON back
        h.read_text("/etc/os-release")
        p = h.spawn(["python3", "-m", "http.server"], log_path="/tmp/x.log"); p.stop()
    """

    spec = "local"
    in_process = False  # True: the code may run in this Python process (plain local host, no recording)
    python_exe = "python3"
    default_timeout = 60.0

    # -- to implement ----------------------------------------------------------------------
    def _run(self, argv: Sequence[str], input: bytes | None, timeout: float, env: dict | None) -> Completed:
        raise NotImplementedError

    def _spawn(self, argv: Sequence[str], env: dict | None, log_path: str, shell: str, label: str) -> HostProcess:
        raise NotImplementedError

    def _stop(self, proc: HostProcess, grace_s: float) -> None:
        raise NotImplementedError

    def _alive(self, proc: HostProcess) -> bool:
        return self.run(["kill", "-0", "--", f"-{proc.pgid}"], timeout=15, label=f"alive {proc.label}").rc == 0

    def close(self) -> None:
        """Stop what this host object started and release the connection."""

    # -- the interface -------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, input: bytes | str | None = None, timeout: float | None = None,
            env: dict | None = None, label: str | None = None) -> Completed:
        """Run a command to completion; rc 124 when it outlives ``timeout`` (it is then killed)."""
        data = input.encode() if isinstance(input, str) else input
        return self._run([str(a) for a in argv], data, float(timeout or self.default_timeout), env)

    def spawn(self, argv: Sequence[str], *, log_path: str, env: dict | None = None, label: str | None = None) -> HostProcess:
        """Start a long-running process in its own process group (output to ``log_path`` on the host)."""
        from ..secrets import mask_value

        shell = " ".join(shlex.quote(str(a)) for a in argv)
        env_s = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(mask_value(dict(env or {})).items()))
        return self._spawn([str(a) for a in argv], env, log_path, (env_s + " " if env_s else "") + shell, label or shell)

    def python(self, code: str, args: Sequence[str] = (), *, python: str | None = None, timeout: float | None = None,
               label: str | None = None) -> Completed:
        """Run Python ``code`` (sent on stdin) under ``python`` (default: the host's interpreter)."""
        return self.run([python or self.python_exe, "-", *args], input=code, timeout=timeout, label=label)

    def call(self, target: str, kwargs: dict | None = None, *, python: str | None = None, timeout: float | None = None,
             label: str | None = None) -> Any:
        """Call ``module:function(**kwargs)`` of servebook on the host (the package travels with the call); its JSON answer."""
        kwargs = kwargs or {}
        code = _CALL.format(blob=_bundle(), target=target, kwargs=json.dumps(kwargs), mark=_MARK)
        res = self.python(code, python=python, timeout=timeout, label=label or f"call {target} {json.dumps(kwargs, sort_keys=True)}")
        if res.rc == 124:
            raise HostError(f"{target} on {self.spec} did not finish within {timeout or self.default_timeout:.0f} s")
        if _MARK not in res.stdout:
            tail = (res.stderr or res.stdout).strip()[-800:]
            raise HostError(f"{target} failed on {self.spec} (exit status {res.rc}): {tail or 'no output'}")
        return json.loads(res.stdout.split(_MARK, 1)[1].strip().splitlines()[0])

    def read_text(self, path: str, *, missing_ok: bool = False, timeout: float | None = None, label: str | None = None) -> str:
        """A text file on the host ('' when missing and ``missing_ok``)."""
        res = self.run(["cat", "--", str(path)], timeout=timeout, label=label or f"read {path}")
        if res.rc != 0:
            if missing_ok:
                return ""
            raise HostError(f"cannot read {path} on {self.spec}: {res.stderr.strip()[-300:]}")
        return res.stdout

    def free_port(self) -> int:
        """A TCP port nothing listens on right now, on the host's 127.0.0.1."""
        res = self.python("import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])",
                          timeout=30, label="free_port").check(f"choosing a free port on {self.spec}")
        return int(res.stdout.strip().splitlines()[-1])

    def serve(self, launch, log_path, registry=None, ready_timeout: float = 300.0, progress=print):
        """Start the server ``launch`` (a ``servers.Launch``) on this host and wait until it answers; a context manager.

        The plain local host uses ``servers.Server``; others run it under a watchdog on the host.
        """
        from ._serve import serve

        return serve(self, launch, log_path, registry=registry, ready_timeout=ready_timeout, progress=progress)

    def forward(self, remote_port: int, local_port: int = 0) -> int:
        """A port here that reaches ``127.0.0.1:remote_port`` on the host (for a client that must run here)."""
        raise HostError(f"{self.spec} cannot forward ports; use a local or ssh:// host")

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


def _watchdog(python: str, argv: Sequence[str], env: dict | None, log_path: str, shell: str) -> tuple[list[str], bytes]:
    """The watchdog's command line and the spec line to send on its stdin."""
    spec = json.dumps({"argv": list(argv), "env": dict(env or {}), "log": log_path, "shell": shell}) + "\n"
    return [python, "-c", _WATCHDOG], spec.encode()
