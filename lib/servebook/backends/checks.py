"""What a start's outcome is read from: whether a backend can run here at all, what the engine itself says it loaded,
whether it refused the backend, and whether the server died while it was asked (its own error line: servers.engine_error).

    runnable_here("flash_attention_2")        # (False, "needs a CUDA GPU") on a host without one
    _reported_backend(engine, srv, host)       # the engine's server-info endpoint, else its log
"""

from __future__ import annotations

import re

from ..engines import EngineAdapter
from ..errors import ServebookError
from ..servers import Server

# -- on a host ---------------------------------------------------------------------------------------
def _remote(host) -> bool:
    """A host whose work does not run in this process (SSH, a recording, a replay)."""
    return host is not None and not getattr(host, "in_process", True)


# transformers' flash-attention implementations and the package each one imports.
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface", "flash_attention_4": "flash_attn"}


def runnable_here(name: str, smoke: bool = False, host=None) -> tuple[bool, str]:
    """Whether a backend can run on this host at all, and if not, why (recorded as 'not run here').

    With a ``host`` that is not this process, the question is answered on that host."""
    import importlib.util

    if _remote(host):
        ok, why = host.call("servebook.backends.checks:runnable_here", {"name": name, "smoke": smoke}, timeout=120,
                            label=f"runnable_here {name}")
        return bool(ok), str(why)

    if name.startswith("flash_attention"):
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            return False, "needs a CUDA GPU"
        pkg = _FLASH_PACKAGES.get(name, "flash_attn")
        if importlib.util.find_spec(pkg) is None:
            return False, f"needs the {pkg} package"
    if "/" in name:  # a hub kernel (e.g. kernels-community/flash-attn2): fetched from the Hugging Face Hub at load
        if importlib.util.find_spec("kernels") is None:
            return False, "a hub kernel: needs the kernels package, and the Hub to fetch the kernel from"
    if name == "flex_attention" and smoke:
        return False, "skipped in smoke mode (compiles kernels on first use)"
    return True, ""


def _overridden(engine: EngineAdapter, backend: str | None, reported: dict) -> bool:
    """A forced backend the engine reports it did not use (decode, and prefill where it says)."""
    if not backend:
        return False
    seen = [reported.get("attention"), reported.get("prefill")]
    return any(r and not engine.same_backend(backend, r) for r in seen)


def _rejection(log_tail: str, backend: str) -> str | None:
    """The engine's own error line when it refused ``backend`` at start, else None."""
    for line in reversed(log_tail.splitlines()):
        # an import failure that happens to name the backend's kernel package is not a refusal of the flag
        if "Error" in line and backend in line and not re.search(r"ModuleNotFoundError|ImportError|No module named", line):
            return line.strip()[:400]
    return None


def _exited(srv: Server, wait_s: float = 3.0) -> bool:
    """Whether the server died; a process killed mid-request may take a moment to finish exiting."""
    import subprocess

    try:
        srv.proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _reported_backend(engine: EngineAdapter, srv: Server, host=None) -> dict:
    """What the engine itself says it loaded: its server-info endpoint where it has one, else its log."""
    if _remote(host):  # the endpoint is asked on the host; the log is fetched from there into the run directory
        text = srv.log_tail(10 ** 7)
        info = host.call("servebook.engines._base:fetch_server_info", {"base_url": srv.base_url, "paths": list(engine.info_paths)},
                         timeout=120, label=f"server info {engine.name}") if engine.info_paths else None
        return engine.reported_backend(info, text)
    text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
    return engine.reported_backend(engine.server_info(srv.base_url), text)


def _watched(srv, fn, poll_s: float = 0.5):
    """``fn()`` (requests to ``srv``), given up as soon as the server dies or logs its own fatal line: a backend
    that fails at its first decode must not hold the sweep while the engine lingers (SGLang waits for core dumps)."""
    import concurrent.futures as cf

    if not hasattr(srv, "fatal_line"):
        return fn()
    pool = cf.ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(fn)
    try:
        while True:
            try:
                return fut.result(timeout=poll_s)
            except cf.TimeoutError:
                fatal = srv.fatal_line()
                if fatal or not srv.alive():
                    raise ServebookError(f"the server {'logged a fatal error' if fatal else 'exited'} during the request: "
                                         f"{(fatal or '')[:200]}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
