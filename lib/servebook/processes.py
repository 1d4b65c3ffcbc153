"""Processes and ports on this machine: the shared ground under servers, hosts and every chapter that starts something.

    port = free_port()                                   # a port nothing listens on, not handed out lately
    p = run_bounded(cmd, timeout=60)                     # its own process group, killed whole on timeout (rc 124)
    stop_process_group(pgid)                             # TERM, a grace period, then KILL what is left
    w, copier = start_log_copier(log_path, env)          # a pipe whose lines reach the log with secrets masked

A reaper process (``hosts/scripts/reaper.py``) watches this process for what it starts: when this process dies without
cleaning up (a kernel killed on a cell timeout, kill -9), the reaper stops the started process group.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from . import secrets as _secrets
from .secrets import mask_value

__all__ = ["free_port", "port_is_free", "port_listening", "port_owner", "stop_process_group", "run_bounded",
           "start_log_copier"]

_HANDED_OUT: "collections.deque[int]" = collections.deque(maxlen=64)
_PORT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, and not one of the last 64 this process handed out: servers launched
    together (``start_together``) each pick a port before any of them binds one, so those picks must differ."""
    with _PORT_LOCK:
        for _ in range(50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                break
        _HANDED_OUT.append(port)
        return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def port_owner(port: int) -> dict | None:
    """The process listening on ``port`` (``{"pid", "cmd"}``), when this user may see it; else None."""
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                try:
                    cmd = " ".join(psutil.Process(conn.pid).cmdline())
                except psutil.Error:
                    cmd = "?"
                return {"pid": conn.pid, "cmd": mask_value(cmd)}
    except Exception:  # noqa: BLE001 - who holds a port is a courtesy in an error message
        return None
    return None


def _group_alive(pgid: int) -> bool:
    """True while a process of the group runs (zombies awaiting their reaper do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        import psutil
    except ImportError:
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def stop_process_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.1)


def _descendants(pid: int) -> list:
    """The processes below ``pid`` (psutil handles; none when psutil is missing or ``pid`` has gone)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - gone already, or no psutil: the group stop is all there is
        return []


def _stop_tree(pid: int, grace_s: float = 10.0) -> None:
    """``stop_process_group`` for the group ``pid`` leads, then the same for its descendants that left the group.

    torchrun starts each worker in a session of its own and stops them from its SIGTERM handler; a torchrun killed
    before that handler finishes (the group's SIGKILL after ``grace_s``) leaves its workers running. Their pids are
    taken before the first signal, so they are found after their parent has gone."""
    tree = _descendants(pid)
    stop_process_group(pid, grace_s=grace_s)
    left = [p for p in tree if _alive(p)]
    if not left:
        return
    import psutil

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for p in left:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        _gone, left = psutil.wait_procs(left, timeout=wait)
        if not left:
            return


def _alive(proc) -> bool:
    try:
        import psutil

        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001
        return False


# The watcher that stops a server's process group once this process dies (a real file, run by this interpreter).
_REAPER = Path(__file__).parent / "hosts" / "scripts" / "reaper.py"


def _start_reaper(pgid: int) -> subprocess.Popen:
    """A watcher that stops process group ``pgid`` once this process dies (kill -9 included)."""
    return subprocess.Popen(
        [sys.executable, str(_REAPER), str(os.getpid()), str(pgid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop_reaper(reaper: subprocess.Popen | None) -> None:
    if reaper is None:
        return
    try:
        reaper.kill()
        reaper.wait(timeout=5)
    except Exception:  # noqa: BLE001
        pass


# The log copier: secrets.py (after _secret_patterns.py) run from its source, which imports only the standard library,
# isolated (-I) from this environment's paths, its stdin the server's output; ``_copier_main`` ignores TERM/INT/HUP and
# ends at end of file.


def start_log_copier(log_path: str | os.PathLike, env: dict | None = None, values: list[str] | None = None) -> tuple[int, subprocess.Popen]:
    """A masking copier appending to ``log_path``: returns the write end of its pipe (give it to the server as
    stdout/stderr, then close it here) and the copier. It runs in a session of its own, so a signal to this
    process's group does not end it before the server; it masks the credential values of ``env`` (the server's),
    this process's registered values and ``values`` too (handed over in its environment, never on its command line)."""
    env = dict(os.environ if env is None else env)
    env[_secrets.VALUES_VAR] = json.dumps(sorted(set(_secrets.registered()) | set(values or [])))
    r, w = os.pipe()
    try:
        copier = subprocess.Popen([sys.executable, "-I", "-c", _secrets.masker_source() + "\n_copier_main()\n", str(log_path)],
                                  stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=env, start_new_session=True)
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return w, copier


def run_bounded(cmd: Sequence[str], timeout: float, env: dict | None = None, cwd: str | None = None, *,
                input: str | None = None, unset: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run a command in its own process group; on timeout kill the whole group.

    Returns the CompletedProcess; ``returncode`` is 124 on timeout (stdout/stderr hold
    what was printed before). A reaper stops the group if this process is killed meanwhile
    (torchrun's agent is the group; its workers, each in a session of its own, are stopped by its SIGTERM handler,
    and here after it if it was killed first).
    ``env`` is added to this process's environment, less the names in ``unset``; ``input`` goes to its stdin.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    full_env.update(env or {})
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd,
                            start_new_session=True, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE)
    reaper = _start_reaper(proc.pid)
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        _stop_tree(proc.pid, grace_s=3)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, 124, out, (err or "") + f"\n[servebook] killed after {timeout:.0f}s timeout")
    except BaseException:
        _stop_tree(proc.pid, grace_s=3)
        raise
    finally:
        _stop_reaper(reaper)
