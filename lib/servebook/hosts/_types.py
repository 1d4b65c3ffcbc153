"""The shapes every host returns: a finished command, a long-running process, and the host's error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ServebookError

__all__ = ["Completed", "HostError", "HostProcess"]


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

    host: Any  # the Host that started it
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
