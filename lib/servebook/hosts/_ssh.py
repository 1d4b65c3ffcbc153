"""A remote host over SSH, with asyncssh.

    h = SSHHost("ssh://me@gpu-box:22")        # or an alias from ~/.ssh/config: "ssh://gpu-box"
    h.run(["nvidia-smi", "-L"]).stdout

Why asyncssh: it reads OpenSSH's client configuration itself (``Host`` aliases, ``HostName``, ``User``,
``Port``, ``IdentityFile``, ``ProxyJump`` jump hosts, ``UserKnownHostsFile``), uses the agent and the
usual keys, verifies host keys against known_hosts and refuses unknown ones, keeps one connection for
many channels, and has a timeout on connect. paramiko needs ProxyJump and config handling written by
hand; fabric sits on paramiko. Its asyncio loop runs in a private thread, so this class is synchronous
and works inside Jupyter (whose loop is busy).

Security: no password is ever taken or sent (``password=None``, keyboard-interactive off); an unknown
host key is an error that says how to trust it. ``SERVEBOOK_SSH_CONFIG`` names an ssh_config to read
instead of ``~/.ssh/config`` (the tests use it for a throwaway server).

Long-running processes run under a watchdog whose stdin is the SSH channel: when the connection
drops, sshd closes that stdin and the watchdog stops the process group.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import threading
import time
from pathlib import Path
from typing import Sequence
from urllib.parse import parse_qs, urlsplit

from ..errors import ParameterError
from ._base import Host, watchdog_command
from ._types import Completed, HostError, HostProcess

__all__ = ["SSHHost", "parse_ssh"]


def parse_ssh(spec: str) -> dict:
    """``ssh://[user@]host[:port][?python=/path/python]`` -> ``{'user', 'host', 'port', 'python'}``."""
    parts = urlsplit(spec)
    if parts.scheme != "ssh" or not parts.hostname:
        raise ParameterError("host", spec, "expected ssh://[user@]host[:port], e.g. ssh://me@gpu-box or ssh://gpu-box:2222")
    if parts.password is not None:
        raise ParameterError("host", "ssh://***", "passwords are not accepted in the host; use a key (ssh-add) or IdentityFile in ~/.ssh/config")
    try:
        port = parts.port
    except ValueError:
        raise ParameterError("host", spec, "the port must be a number, e.g. ssh://me@gpu-box:2222") from None
    if parts.path not in ("", "/"):
        raise ParameterError("host", spec, "no path after the host; give ssh://[user@]host[:port]")
    query = parse_qs(parts.query)
    unknown = set(query) - {"python"}
    if unknown:
        raise ParameterError("host", spec, f"unknown option {sorted(unknown)[0]!r}; the only one is ?python=/path/to/python on the host")
    return {"user": parts.username, "host": parts.hostname, "port": port, "python": (query.get("python") or [None])[0]}


class SSHHost(Host):
    connect_timeout = 15.0
    separate_files = True  # its files are not this machine's: servebook's own scripts are copied there before use

    def __init__(self, spec: str, *, connect_timeout: float | None = None, config: str | None = None):
        import asyncssh  # noqa: F401 - fail early with the import error

        self.spec = spec
        self.target = parse_ssh(spec)
        self.python_exe = self.target["python"] or "python3"
        self.connect_timeout = float(connect_timeout or os.environ.get("SERVEBOOK_SSH_TIMEOUT") or self.connect_timeout)
        self.config = config or os.environ.get("SERVEBOOK_SSH_CONFIG") or None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="servebook-ssh", daemon=True)
        self._thread.start()
        self._conn = None
        self._procs: list[HostProcess] = []
        self._where = f"{self.target['user'] + '@' if self.target['user'] else ''}{self.target['host']}" + \
            (f":{self.target['port']}" if self.target["port"] else "")
        self._do(self._connect(), self.connect_timeout + 5, "connecting")

    # -- the loop ------------------------------------------------------------------------------
    def _do(self, coro, timeout: float, what: str):
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise HostError(f"{self._where} did not answer within {timeout:.0f} s while {what}; check the host is up "
                            "and reachable (ssh it by hand), or raise SERVEBOOK_SSH_TIMEOUT") from None

    async def _connect(self):
        import asyncssh

        kw = dict(port=self.target["port"] or (), username=self.target["user"] or (), connect_timeout=self.connect_timeout,
                  password=None, kbdint_auth=False, keepalive_interval=10, keepalive_count_max=3)
        if self.config:
            kw["config"] = [self.config]
        try:
            self._conn = await asyncssh.connect(self.target["host"], **kw)
        except asyncssh.HostKeyNotVerifiable as exc:
            port = self.target["port"] or 22
            raise HostError(
                f"the host key of {self._where} is not in your known_hosts ({exc.reason}); servebook never accepts an unknown "
                f"key. Check its fingerprint with the host's admin, then trust it: ssh-keyscan -p {port} {self.target['host']} "
                f">> ~/.ssh/known_hosts (or connect once with ssh and answer yes)") from None
        except asyncssh.PermissionDenied:
            raise HostError(
                f"authentication failed for {self._where}: servebook uses keys only (agent, IdentityFile, ~/.ssh/id_*); "
                "load the key with ssh-add or set IdentityFile for this host in ~/.ssh/config, and check `ssh` works") from None
        except (asyncio.TimeoutError, TimeoutError):
            raise HostError(f"cannot reach {self._where}: no answer within {self.connect_timeout:.0f} s; check the host "
                            "and port (ssh it by hand), or raise SERVEBOOK_SSH_TIMEOUT") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostError(f"cannot connect to {self._where}: {getattr(exc, 'reason', None) or exc}; check the host and "
                            "port and that `ssh` reaches it") from None

    # -- primitives ----------------------------------------------------------------------------
    def _run(self, argv: Sequence[str], input: bytes | None, timeout: float, env: dict | None) -> Completed:
        # `timeout` on the host kills the command there; the local wait is a little longer and also
        # notices a dead connection.
        env_s = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items())
        cmd = f"{'env ' + env_s + ' ' if env_s else ''}timeout -k 5 {max(1, int(timeout))} " + " ".join(shlex.quote(a) for a in argv)
        return self._do(self._exec(cmd, input, argv), timeout + 20, f"running {argv[0]}")

    async def _exec(self, cmd: str, input: bytes | None, argv) -> Completed:
        import asyncssh

        t0 = time.monotonic()
        if self._conn is None:
            raise HostError(f"the connection to {self._where} is closed; start the chapter again")
        try:
            res = await self._conn.run(cmd, input=input, encoding=None, check=False)
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError, BrokenPipeError, ConnectionError) as exc:
            self._conn = None
            raise HostError(f"the connection to {self._where} dropped while running {argv[0]} ({exc}); processes the book "
                            "started there are stopped by their watchdog; finished results are kept: run the book again "
                            "with the same --run-id to resume") from None
        if res.exit_status is None and not res.exit_signal:  # the channel closed without an exit status: the link dropped
            self._conn = None
            raise HostError(f"the connection to {self._where} dropped while running {argv[0]}; processes the book "
                            "started there are stopped by their watchdog; finished results are kept: run the book again "
                            "with the same --run-id to resume")
        rc = res.exit_status if res.exit_status is not None and res.exit_status >= 0 else 128 + 9
        out = (res.stdout or b"").decode(errors="replace")
        err = (res.stderr or b"").decode(errors="replace")
        if rc == 127 and "timeout" in err and "No such file" in err and argv:
            err = f"{argv[0]}: not found"
        return Completed(rc, out, err, round(time.monotonic() - t0, 4))

    def _spawn(self, argv, env, log_path, shell, label) -> HostProcess:
        cmd, spec = watchdog_command(self.python_exe, argv, env, log_path, shell)
        return self._do(self._spawn_async(cmd, spec, label, log_path), 60, f"starting {label}")

    async def _spawn_async(self, cmd, spec: bytes, label, log_path) -> HostProcess:
        proc = await self._conn.create_process(" ".join(shlex.quote(c) for c in cmd), encoding=None)
        proc.stdin.write(spec)
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        try:
            info = json.loads(line.decode())
        except json.JSONDecodeError:
            proc.close()
            err = (await proc.stderr.read(2000)).decode(errors="replace") if line == b"" else ""
            raise HostError(f"could not start {label} on {self._where}: the watchdog answered {line[:200]!r} {err.strip()[-300:]}") from None
        if "error" in info:
            proc.close()
            raise HostError(f"could not start {label} on {self._where}: {info['error']}; is it installed there?")
        hp = HostProcess(self, int(info["pgid"]), label, log_path, handle=proc)
        self._procs.append(hp)
        return hp

    def _stop(self, proc: HostProcess, grace_s: float) -> None:
        async def stop():
            ch = proc.handle
            try:
                ch.stdin.write(f"stop {grace_s}\n".encode())
                ch.stdin.write_eof()
                await asyncio.wait_for(ch.wait_closed(), grace_s + 15)
            except Exception:  # noqa: BLE001 - the connection may be gone: the watchdog then stops the group itself
                ch.close()
        try:
            self._do(stop(), grace_s + 20, f"stopping {proc.label}")
        except HostError:
            pass
        if proc in self._procs:
            self._procs.remove(proc)

    def close(self) -> None:
        for p in list(self._procs):
            p.stop()
        if self._conn is not None:
            conn, self._conn = self._conn, None

            async def shut():
                conn.close()
                await conn.wait_closed()
            try:
                self._do(shut(), 10, "closing")
            except HostError:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def forward(self, remote_port: int, local_port: int = 0) -> int:
        """Forward ``127.0.0.1:local_port`` here to ``127.0.0.1:remote_port`` on the host; the local port."""
        async def fwd():
            listener = await self._conn.forward_local_port("127.0.0.1", local_port, "127.0.0.1", remote_port)
            return listener.get_port()
        return self._do(fwd(), 30, f"forwarding port {remote_port}")
