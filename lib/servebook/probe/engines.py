"""What the engines conclude: each engine's own capability helpers, asked in its own interpreter (``scripts/engine_helpers.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import ENGINE_NAMES, _MARK
from .verdicts import _judge_engines


_SCRIPT = Path(__file__).parent / "scripts" / "engine_helpers.py"


def _engine_subprocess(name: str, python: str, fake: dict | None, timeout: float) -> dict:
    base = {"engine": name, "python": python, "status": "error", "version": None, "helpers": [], "error": None}
    if not (os.path.exists(python) or shutil.which(python)):
        base["error"] = f"no Python interpreter at {python}; pass python= (CLI: --engine-python) with the interpreter where {name} is installed"
        return base
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    if fake:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a what-if must not touch a real GPU here
    try:
        res = subprocess.run([python, str(_SCRIPT), json.dumps({"engine": name, "fake": fake})],
                             capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        base["error"] = f"{name} did not answer within {timeout:.0f} s (importing it hung?)"
        return base
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        base["status"] = "import failed"
        base["error"] = f"the {name} check crashed (exit {res.returncode}): " + " | ".join(tail)[-500:]
        return base
    return json.loads(line[len(_MARK):])



def _interp(python, name: str) -> str:
    from ..interpreters import python_from_env

    if isinstance(python, dict):
        return python.get(name) or python_from_env(name) or sys.executable
    return python or python_from_env(name) or sys.executable


def _ask_engines(engines, python, fake, timeout):
    """Start one subprocess per engine (in threads); returns a function that waits for the raw answers."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(engines)))
    futs = [pool.submit(_engine_subprocess, n, _interp(python, n), fake, timeout) for n in engines]
    pool.shutdown(wait=False)
    return lambda: [f.result() for f in futs]


def engine_helpers(gpus: list[dict], engines=ENGINE_NAMES, python: str | dict | None = None,
                   fake: dict | None = None, timeout: float = 180.0) -> list[dict]:
    """Each engine's own capability helpers, called in its interpreter, each judged against the hardware truth."""
    return _judge_engines(_ask_engines(engines, python, fake, timeout)(), gpus, fake)
