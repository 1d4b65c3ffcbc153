"""A server on a host: started under the watchdog, waited for on the host, stopped on every path.

    with host.serve(launch, log_path=store.path / "server.log", registry=store.path / "servers.jsonl") as srv:
        srv.base_url   # as the host sees it: the benchmark client runs there too
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from ..errors import ServerError
from ._types import HostError

__all__ = ["HostServer", "serve", "ship_scripts"]

_WAIT_READY = Path(__file__).parent / "scripts" / "wait_ready.py"


class HostServer:
    """What ``Server`` offers the chapters (base_url, ready_s, log_path, stop), for a server on a host."""

    def __init__(self, host, launch, log_path: Path, registry: Path | None):
        self.host, self.launch, self.log_path, self._registry = host, launch, Path(log_path), registry
        self.proc = None
        self.ready_s: float | None = None
        name = launch.engine or "server"
        self._label = f"server {name} {launch.description}".strip()
        self._remote_log = str(self.log_path) if host.spec == "local" else f"/tmp/servebook-{name}-{launch.port}-{os.getpid()}.log"

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    def _fetch_log(self) -> None:
        if self._remote_log == str(self.log_path):  # this machine: the watchdog writes the run's log itself, masked
            return
        try:
            text = self.host.read_text(self._remote_log, missing_ok=True, label=f"log {self._label}")
        except HostError:
            return
        from ..secrets import env_secret_values, mask_text

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # the watchdog masked the log as it wrote it; masked again here, so no copy path can bring a secret in
        # (the server's secret variables included: this process may not have them)
        values = sorted(set(env_secret_values({k: str(v) for k, v in self.launch.env.items()})) | set(env_secret_values()),
                        key=len, reverse=True)
        self.log_path.write_text(mask_text(text, values))

    def log_tail(self, n: int = 40) -> str:
        self._fetch_log()
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _record(self, event: str) -> None:
        if self._registry is None or self.proc is None:
            return
        row = {"event": event, "host": self.host.spec, "pgid": self.proc.pgid, "port": self.launch.port,
               "engine": self.launch.engine, "cmd": self.launch.shell(), "time": time.time()}
        from ..secrets import mask_value

        with open(self._registry, "a") as fh:
            fh.write(json.dumps(mask_value(row)) + "\n")

    def _ship(self, argv: list[str]) -> list[str]:
        return ship_scripts(self.host, argv)

    def start(self, ready_timeout: float, say: Callable[[str], None]) -> "HostServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.proc = self.host.spawn(self._ship(list(self.launch.cmd)), log_path=self._remote_log, env=self.launch.env, label=self._label)
        except HostError as exc:
            raise ServerError(f"cannot start {self.launch.engine or 'the server'} on {self.host.spec}: {exc}") from exc
        self._record("started")
        say(f"starting {self.launch.engine or 'server'} on {self.host.spec} at {self.base_url} (log: {self.log_path}) ...")
        try:
            res = self.host.python(_WAIT_READY.read_text(), [self.base_url + self.launch.ready_path, str(self.proc.pgid), str(ready_timeout)],
                                   timeout=ready_timeout + 30, label=f"wait ready {self._label}")
            ans = json.loads(res.stdout.strip().splitlines()[-1]) if res.rc == 0 and res.stdout.strip() else {"ready": False, "why": res.stderr[-300:]}
            self._fetch_log()
            if not ans.get("ready"):
                why = {"exited": "exited during start", "timeout": f"did not answer within {ready_timeout:.0f} s"}.get(ans.get("why"), ans.get("why"))
                raise ServerError(f"{self.launch.engine or 'the server'} on {self.host.spec} {why}; see its log {self.log_path} (tail below)",
                                  log_tail=self.log_tail())
            self.ready_s = ans.get("elapsed_s")
            say(f"ready after {self.ready_s}s")
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None or self.proc.stopped:
            return
        self.proc.stop(grace_s)
        self._fetch_log()
        self._record("stopped")

    def __enter__(self) -> "HostServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def ship_scripts(host, argv: list[str]) -> list[str]:
    """``argv`` with servebook's own script files (e.g. engines/launchers/*.py) copied to a remote host
    (also under recording) and their paths replaced by the copies'; unchanged for other hosts."""
    if not getattr(getattr(host, "inner", host), "separate_files", False):
        return argv
    pkg = Path(__file__).resolve().parents[1]
    out = []
    for a in argv:
        p = Path(a)
        if p.is_absolute() and p.is_file() and pkg in p.resolve().parents:
            dest = f"/tmp/servebook-launchers-{os.getpid()}/{p.name}"
            host.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", dest], input=p.read_bytes(),
                     timeout=60, label=f"ship {p.name}").check(f"copying {p.name} to {host.spec}")
            a = dest
        out.append(a)
    return out


def serve(host, launch, log_path, registry=None, ready_timeout: float = 300.0, progress=print):
    """``Server.start`` on the plain local host; otherwise a :class:`HostServer` on ``host``."""
    if host.in_process:
        from ..servers import Server

        return Server.start(launch, log_path=log_path, ready_timeout=ready_timeout, registry=registry, progress=progress)
    return HostServer(host, launch, Path(log_path), Path(registry) if registry else None).start(ready_timeout, progress or (lambda _m: None))
