"""This machine as a host: commands as subprocesses in their own process groups.

``LocalHost()`` is the plain local host: the book's code may run in its own process (``in_process``),
exactly as without hosts. Under recording, the same calls go through subprocesses so that each one is
an interaction the cassette can hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Sequence

from ._base import Host, watchdog_command
from ._types import Completed, HostError, HostProcess

__all__ = ["LocalHost"]


class LocalHost(Host):
    spec = "local"
    in_process = True

    def __init__(self, python: str | None = None):
        self.python_exe = python or sys.executable
        self._procs: list[HostProcess] = []

    def _run(self, argv: Sequence[str], input: bytes | None, timeout: float, env: dict | None) -> Completed:
        import os

        from ..processes import stop_process_group

        full_env = dict(os.environ)
        full_env.update(env or {})
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, start_new_session=True)
        except FileNotFoundError:
            return Completed(127, "", f"{argv[0]}: not found", 0.0)
        except OSError as exc:
            return Completed(126, "", f"{argv[0]}: {exc}", 0.0)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            stop_process_group(proc.pid, grace_s=3)
            out, err = proc.communicate()
            rc, err = 124, (err or b"") + f"\n[servebook] killed after {timeout:.0f} s".encode()
        except BaseException:
            stop_process_group(proc.pid, grace_s=3)
            raise
        return Completed(rc, out.decode(errors="replace"), err.decode(errors="replace"), round(time.monotonic() - t0, 4))

    def _spawn(self, argv, env, log_path, shell, label) -> HostProcess:
        cmd, spec = watchdog_command(self.python_exe, argv, env, log_path, shell)
        # The watchdog's stdin is a pipe held by this process: when this process dies, the pipe closes
        # and the watchdog stops the group (the same path a dropped SSH connection takes).
        wd = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        wd.stdin.write(spec)
        wd.stdin.flush()
        first = wd.stdout.readline().decode()
        try:
            info = json.loads(first)
        except json.JSONDecodeError:
            wd.kill()
            raise HostError(f"could not start {label} on this host: the watchdog answered {first!r}") from None
        if "error" in info:
            wd.wait(timeout=5)
            raise HostError(f"could not start {label}: {info['error']}; is it installed on this host?")
        proc = HostProcess(self, int(info["pgid"]), label, log_path, handle=wd)
        self._procs.append(proc)
        return proc

    def _stop(self, proc: HostProcess, grace_s: float) -> None:
        wd = proc.handle
        try:
            wd.stdin.write(f"stop {grace_s}\n".encode())
            wd.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            wd.wait(timeout=grace_s + 15)
        except subprocess.TimeoutExpired:
            from ..processes import stop_process_group

            stop_process_group(proc.pgid, grace_s=1)
            wd.kill()
        if proc in self._procs:
            self._procs.remove(proc)

    def _alive(self, proc: HostProcess) -> bool:
        from ..processes import _group_alive

        return _group_alive(proc.pgid)

    def forward(self, remote_port: int, local_port: int = 0) -> int:
        return remote_port  # the host is here

    def close(self) -> None:
        for p in list(self._procs):
            p.stop()
