"""What every host offers: commands, Python under a chosen interpreter, files, long-running processes.

Everything is built on three primitives an implementation provides (``_run``, ``_spawn`` and ``close``);
recording and replay hook in at ``run``/``spawn``, so every interaction has one shape in the cassette.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import zipfile
from pathlib import Path
from typing import Any, Sequence

from ._types import Completed, HostError, HostProcess

__all__ = ["Host", "HostError", "Completed", "HostProcess"]

_MARK = "@@SERVEBOOK-HOST@@"


_SCRIPTS = Path(__file__).parent / "scripts"
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # a module path, as Host.call writes it into an import line


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
    separate_files = False  # True: the host does not see this machine's files (servebook's scripts are copied there)
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
        from ..secret_refs import resolve_refs
        from ..servers import shell_line

        shell = shell_line([str(a) for a in argv], {k: str(v) for k, v in (env or {}).items()})  # secrets masked
        env = resolve_refs({k: str(v) for k, v in env.items()}) if env else env  # the book's secret references: their values
        return self._spawn(resolve_refs([str(a) for a in argv]), env, log_path, shell, label or shell)

    def python(self, code: str, args: Sequence[str] = (), *, python: str | None = None, timeout: float | None = None,
               label: str | None = None) -> Completed:
        """Run Python ``code`` (sent on stdin) under ``python`` (default: the host's interpreter)."""
        return self.run([python or self.python_exe, "-", *args], input=code, timeout=timeout, label=label)

    def call(self, target: str, kwargs: dict | None = None, *, python: str | None = None, timeout: float | None = None,
             label: str | None = None) -> Any:
        """Call ``module:function(**kwargs)`` of servebook on the host (the package travels with the call); its JSON answer."""
        kwargs = kwargs or {}
        module, _, function = target.partition(":")
        if not (_DOTTED.fullmatch(module) and function.isidentifier()):
            raise HostError(f"{target!r} names no function: write module:function, e.g. servebook.probe:probe")
        code = ((_SCRIPTS / "host_call.py").read_text() + f"\nwith unpacked({_bundle()!r}):\n"
                f"    from {module} import {function} as target\n    answer(target, {json.dumps(kwargs)!r}, {_MARK!r})\n")
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


def watchdog_command(python: str, argv: Sequence[str], env: dict | None, log_path: str, shell: str) -> tuple[list[str], bytes]:
    """The watchdog's command line (``scripts/watchdog.py`` as ``python -c``) and the spec line to send on its stdin.

    The spec carries the masker's source (``secrets.masker_source``) as ``masker`` and this process's registered
    secret values (and the command's credential options) as ``values``: the watchdog writes the process's output to
    the log through it, masked as it is written (the host need not have servebook)."""
    from .. import secrets

    secrets.register(*secrets.argv_secret_values(list(argv)), *secrets.credential_values(dict(env or {})))
    spec = json.dumps({"argv": list(argv), "env": dict(env or {}), "log": log_path, "shell": shell,
                       "masker": secrets.masker_source(), "values": secrets.registered()}) + "\n"
    return [python, "-c", (_SCRIPTS / "watchdog.py").read_text()], spec.encode()
