"""Start an inference server, wait until it answers, and always stop it.

    with Server.start(launch, log_path=store.path / "server.log", ready_timeout=300) as srv:
        srv.base_url          # "http://127.0.0.1:41234"
        ...                   # stopped on success, exception, KeyboardInterrupt

The server runs in its own process group, so stopping it stops every worker it forked.
Its output reaches the log through a pipe and a small copier process (``secrets.copy_masked``) that masks
secrets line by line as it writes, so the log in the run directory never holds a raw secret, also while the
server runs or after the process that started it was killed (the copier ends when the server's output ends).
A small reaper process watches the Python process that started the server: if that
process dies without cleaning up (a kernel killed on a cell timeout, kill -9), the reaper
stops the server's process group. Every start and stop is logged to ``servers.jsonl``
in the run directory when one is given, so leftovers can be found by pid.
Ports, process groups, the reaper, bounded runs and the log copier live in ``processes.py``; import them from there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import secrets as _secrets
from .errors import ServerError
from .processes import (_group_alive, _start_reaper, _stop_reaper, port_is_free, port_listening, port_owner, start_log_copier,
                        stop_process_group)
from .secret_refs import resolve_refs
from .secrets import mask_argv, mask_text, mask_value

__all__ = ["Launch", "Server", "start_together", "take_started", "shell_line", "leftover_servers", "starts_overlap_here",
           "gpu_visible", "engine_error"]


@dataclass
class Launch:
    """How to start one server: the command, extra environment, and where it answers."""

    cmd: list[str]
    port: int
    host: str = "127.0.0.1"
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/health"
    engine: str = ""
    description: str = ""
    # a log line by which the engine says it is dying (its child crashed); the server may take a minute more to
    # exit (SGLang waits for CUDA core dumps), so such a line ends the wait at once
    fatal_log: str = ""

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def shell(self) -> str:
        """The launch as a copy-pasteable shell line (secrets masked)."""
        return shell_line(self.cmd, self.env)


def shell_line(cmd: list[str], env: dict[str, str] | None = None) -> str:
    """``cmd`` as one copy-pasteable shell line, ``env`` as a sorted prefix (secrets masked, words quoted)."""
    import shlex

    words = [f"{k}={shlex.quote(v)}" for k, v in sorted(mask_value(env or {}).items())]
    return mask_text(" ".join(words + [shlex.quote(str(c)) for c in mask_argv([str(c) for c in cmd])]))




_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation", re.I)


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


class Server:
    """A running server; use :meth:`start` as a context manager."""

    def __init__(self, launch: Launch, proc: subprocess.Popen, log_path: Path, registry: Path | None):
        self.launch = launch
        self.proc = proc
        self.pgid = proc.pid
        self.log_path = log_path
        self._registry = registry
        self.started_at = time.time()
        self._spawned = time.monotonic()
        self._stopped = False
        self.ready_s: float | None = None
        self._reaper: subprocess.Popen | None = None
        self._copier: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @classmethod
    def start(
        cls,
        launch: Launch,
        log_path: str | os.PathLike,
        ready_timeout: float = 300.0,
        registry: str | os.PathLike | None = None,
        progress: Callable[[str], None] | None = print,
        ready_check: Callable[["Server"], bool] | None = None,
    ) -> "Server":
        """Start ``launch`` and wait until its ready path answers 200.

        Raises :class:`ServerError` (with the log tail) when the port is taken, the
        command is missing, the process dies during start, or it is not ready in time;
        the process group is stopped before raising.
        """
        srv = cls.spawn(launch, log_path, registry=registry)
        srv.wait_ready(ready_timeout, progress, ready_check)
        return srv

    @classmethod
    def spawn(cls, launch: Launch, log_path: str | os.PathLike, registry: str | os.PathLike | None = None) -> "Server":
        """Start ``launch`` without waiting for it (:meth:`wait_ready` waits; :meth:`start` does both). Raises
        :class:`ServerError` when the port is taken or the command is missing."""
        if not port_is_free(launch.port, "127.0.0.1" if launch.host in ("0.0.0.0", "") else launch.host):
            owner = port_owner(launch.port)
            who = f" (pid {owner['pid']}: {owner['cmd'][:120]})" if owner else ""
            raise ServerError(
                f"port {launch.port} on {launch.host} is already in use by another program{who}; servebook does not "
                "stop programs it did not start: stop it yourself if it is a leftover, or let servebook pick a free port (port=0)"
            )
        _secrets.register(*_secrets.argv_secret_values(resolve_refs([str(c) for c in launch.cmd])),
                          *_secrets.credential_values(resolve_refs(dict(launch.env))))
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(resolve_refs(dict(launch.env)))
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(log_path, "ab") as log:
            log.write(f"$ {launch.shell()}\n".encode())
            log_start = log.tell()  # the engine's own output starts here (the command line above may quote anything)
        out, copier = start_log_copier(log_path, env)
        try:
            proc = subprocess.Popen(
                resolve_refs([str(c) for c in launch.cmd]), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise ServerError(f"cannot start {launch.engine or 'the server'}: {launch.cmd[0]!r} was not found; is the engine installed in this environment?") from exc
        finally:
            os.close(out)  # the server (and its workers) hold the pipe now: the copier ends when they all have ended
        srv = cls(launch, proc, log_path, Path(registry) if registry else None)
        srv._copier = copier
        srv._scan_from = log_start
        srv._reaper = _start_reaper(srv.pgid)
        srv._record("started")
        return srv

    def wait_ready(self, ready_timeout: float = 300.0, progress: Callable[[str], None] | None = print,
                   ready_check: Callable[["Server"], bool] | None = None) -> None:
        """Wait until the server's ready path answers 200; ``ready_s`` and the timeout count from its spawn. On any
        failure (it exited, logged a fatal line, was not ready in time, an interrupt) it is stopped and the error raised."""
        try:
            self._wait_ready(ready_timeout, progress or (lambda _m: None), ready_check)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float, say: Callable[[str], None], ready_check) -> None:
        t0 = self._spawned
        url = self.base_url + self.launch.ready_path
        next_note = 10.0
        say(f"starting {self.launch.engine or 'server'} on {self.base_url} (log: {self.log_path}) ...")
        while True:
            code = self.proc.poll()
            if code is not None:
                self._drain(3.0)
                tail = _tail(self.log_path)
                oom = "the GPU ran out of memory: free it (nvidia-smi lists what holds it) or lower the engine's memory use; " \
                    if _OOM.search(tail) else ""
                fatal = self.fatal_line()  # the engine's own last word (a launcher refusing a version says why)
                why = f" ({fatal.strip()[:300]})" if fatal else ""
                raise ServerError(
                    f"{self.launch.engine or 'the server'} exited with code {code} during start{why}; "
                    f"{oom}see its log {self.log_path} (tail below)",
                    log_tail=tail,
                )
            fatal = self.fatal_line()
            if fatal:
                raise ServerError(f"{self.launch.engine or 'the server'} reported a fatal error during start ({fatal[:200]}); "
                                  f"it was stopped; see its log {self.log_path}", log_tail=_tail(self.log_path))
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200 and (ready_check is None or ready_check(self)):
                        self.ready_s = round(time.monotonic() - t0, 2)
                        say(f"ready after {self.ready_s}s")
                        return
            except (urllib.error.URLError, ConnectionError, OSError, TimeoutError):
                pass
            elapsed = time.monotonic() - t0
            if elapsed > timeout:
                raise ServerError(
                    f"{self.launch.engine or 'the server'} did not answer {url} within {timeout:.0f}s; "
                    f"it was stopped. Raise the start timeout or read its log {self.log_path}",
                    log_tail=_tail(self.log_path),
                )
            if elapsed > next_note:
                say(f"  still starting ({elapsed:.0f}s) ...")
                next_note += 10.0
            time.sleep(0.25)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        return _tail(self.log_path, n)

    def fatal_line(self) -> str | None:
        """The engine's own line saying it is dying (``launch.fatal_log``), if its log has one since start."""
        if not self.launch.fatal_log:
            return None
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._scan_from)
                chunk = fh.read()
        except OSError:
            return None
        m = re.search(self.launch.fatal_log, chunk.decode(errors="replace"))
        return m.group(0).strip() if m else None

    _scan_from = 0

    def _drain(self, timeout: float) -> None:
        """Wait until the copier wrote the server's last output (it ends when every process holding the pipe has
        ended; one that left the process group keeps it running, and it is left to finish then)."""
        if self._copier is not None:
            try:
                self._copier.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the whole process group and wait until the port is free (once: a second call returns at once)."""
        if self._stopped:
            return
        self._stopped = True
        stop_process_group(self.pgid, grace_s)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _stop_reaper(self._reaper)
        self._drain(10.0)
        deadline = time.monotonic() + 15
        host = "127.0.0.1" if self.launch.host in ("0.0.0.0", "") else self.launch.host
        while port_listening(self.launch.port, host) and time.monotonic() < deadline:
            time.sleep(0.2)
        self._record("stopped")

    def _record(self, event: str) -> None:
        if self._registry is None:
            return
        row = {"event": event, "pid": self.proc.pid, "pgid": self.pgid, "port": self.launch.port,
               "engine": self.launch.engine, "cmd": self.launch.shell(), "time": time.time()}
        try:
            with open(self._registry, "a") as fh:
                fh.write(json.dumps(mask_value(row)) + "\n")
        except OSError:
            pass

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def take_started(started: dict, key):
    """From :func:`start_together`'s result, the ready server of ``key``, taken out (its caller stops it); the error its
    start raised is raised again, and a key that was never started is a :class:`ServerError`."""
    got = started.pop(key, None)
    if isinstance(got, BaseException):
        raise got
    if got is None:
        raise ServerError("its server was not started")
    return got


def start_together(group: Sequence[tuple], registry: str | os.PathLike | None = None, ready_timeout: float = 300.0,
                   progress: Callable[[str], None] | None = print, name: Callable = str) -> dict:
    """Launch every ``(key, launch, log_path)`` at once and wait until each is ready or failed, each waited for by a
    thread of its own (its messages passed to ``progress`` from this thread, prefixed ``name(key)``). Returns per key
    the ready :class:`Server` (its ``ready_s`` its own, from its own launch) or the error its start raised (that
    server stopped, as :meth:`Server.start` does). On an interrupt or any other exception meanwhile, every one is
    stopped. For a host whose CPU starts servers: several ready servers there wait together at next to no cost."""
    import queue

    say = progress or (lambda _m: None)
    out: dict = {}
    servers: dict = {}
    notes: queue.Queue = queue.Queue()
    threads: list = []

    def wait(key, srv):
        try:
            srv.wait_ready(ready_timeout, progress=lambda m: notes.put(f"{name(key)}: {m}"))
            out[key] = srv
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, per key
            out[key] = exc

    try:
        for key, launch, log_path in group:
            try:
                servers[key] = Server.spawn(launch, log_path, registry=registry)
            except ServerError as exc:
                out[key] = exc
        threads.extend(threading.Thread(target=wait, args=item, daemon=True) for item in servers.items())
        for t in threads:
            t.start()
        while True:
            while not notes.empty():
                say(notes.get())
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(0.25)
        while not notes.empty():
            say(notes.get())
    except BaseException:
        for srv in servers.values():
            srv.stop()
        for t in threads:  # each sees its server gone and ends
            t.join(15)
        raise
    return out


def leftover_servers(registry: str | os.PathLike) -> list[dict]:
    """Servers a run's registry says were started and never stopped, still alive."""
    path = Path(registry)
    if not path.exists():
        return []
    state: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("event") == "started":
            state[row["pgid"]] = row
        elif row.get("event") == "stopped":
            state.pop(row.get("pgid"), None)
    return [r for pgid, r in state.items() if _group_alive(pgid)]


# -- servers started together on a CPU host ---------------------------------------------------------------------------
# A ready server waiting for requests takes next to no CPU: an idle, ready `transformers serve` (the embedded model, on
# this book's 2-core CPU host) used 0.02-0.04 s of CPU time per 10 s (user + system of its process group, psutil, three
# 10 s windows), and tests/test_backends_overlap.py checks that the servers waiting their turn use under 5% of a core
# each while another one is measured. A server that is *starting* (imports, model load) takes a whole core: that is
# why no server starts while another is measured.
_OVERLAP_MEMORY_SHARE = 0.5  # all the servers' weights, counted twice (loaded copy, load buffers), within this share of free memory


def starts_overlap_here(n: int, model_dir, env: dict | None = None, remote: bool = False) -> tuple[bool, str]:
    """Whether ``n`` servers of ``model_dir`` may start together (and why): only when they run on this machine's CPU,
    that is the host is this process's own (not ``remote``), neither this process's torch nor ``nvidia-smi`` (within
    the servers' ``CUDA_VISIBLE_DEVICES``, from ``env`` or this process) sees a GPU, and ``n`` copies of the model's
    weights fit in memory. A GPU's memory does not hold several servers (each takes its share as it starts): there,
    and on any other host, they start one after the other. Used by chapters 03 (``force_each_backend``) and 05."""
    env = dict(env or {})
    if remote or n < 2:
        return False, "one server at a time"
    visible = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is None or visible.strip() not in ("", "-1"):
        try:
            import torch

            if torch.cuda.is_available():
                return False, "a GPU is visible: one server at a time"
        except ImportError:
            pass
        if gpu_visible(Launch(cmd=[], port=0, env=env)):
            return False, "a GPU is visible: one server at a time"
    try:
        import psutil

        weights = sum(f.stat().st_size for f in Path(model_dir).iterdir() if f.suffix in (".safetensors", ".bin", ".pt", ".gguf"))
        free = psutil.virtual_memory().available
    except (ImportError, OSError):
        return False, "free memory unknown: one server at a time"
    if 2 * n * weights > _OVERLAP_MEMORY_SHARE * free:
        return False, f"{n} copies of {weights / 1e9:.1f} GB of weights do not fit in {free / 1e9:.1f} GB free: one server at a time"
    return True, "the servers run on this machine's CPU"


def gpu_visible(launch) -> bool:
    """Whether the server's environment sees an NVIDIA GPU (nvidia-smi -L, limited by its CUDA_VISIBLE_DEVICES)."""
    import shutil
    import subprocess

    visible = launch.env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not shutil.which("nvidia-smi"):
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU " in out.stdout


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def engine_error(log_tail: str) -> str | None:
    """The engine's own error in a log tail: the last exception line of its traceback, else its last ERROR line."""
    lines = [l.strip() for l in (log_tail or "").splitlines() if l.strip()]
    for line in reversed(lines):
        if _EXC_LINE.match(line):
            return line[:400]
    for line in reversed(lines):
        if " ERROR " in f" {line} " or line.startswith("ERROR"):
            return line[:400]
    return None
