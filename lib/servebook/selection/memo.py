"""The per-run memo of the engine's answers to what-if requests (chapter 02 asks the same one more than once).

    remember_answers()          # on, for the rest of this process (chapter 02 turns it on)
    remember_answers(False)     # off, and forgotten
    remembered()                # {'asked': 2, 'reused': 1, 'kept': 2}

An answer is kept under a key made of everything that goes into it (``_memo_key``): a request that differs in anything
is asked again; a failure is never kept.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from pathlib import Path

from ..engines.envs import EngineEnv

__all__ = ["remember_answers", "remembered"]

_RUNNER_DIR = Path(__file__).parent  # the runner's own files (``_runner.py`` and its siblings) are part of every key


class _Memo:
    def __init__(self):
        self.on, self.answers, self.asked, self.reused = False, {}, 0, 0
        self.lock = threading.Lock()


_MEMO = _Memo()


def remember_answers(on: bool = True) -> None:
    """Keep (``on``) or stop keeping and forget the engine's answers to identical what-if requests in this process."""
    with _MEMO.lock:
        if not on:
            _MEMO.answers.clear()
            _MEMO.asked = _MEMO.reused = 0
        _MEMO.on = bool(on)


def remembered() -> dict:
    """How many requests went to the engine, how many were answered from the memo, how many answers are kept."""
    with _MEMO.lock:
        return {"asked": _MEMO.asked, "reused": _MEMO.reused, "kept": len(_MEMO.answers)}


def _files_state(path: str | None) -> list:
    """Name, size and mtime of each file directly in ``path`` (a model directory, the runner's folder)."""
    try:
        return sorted([e.name, e.stat().st_size, e.stat().st_mtime_ns] for e in os.scandir(path) if e.is_file())
    except OSError:
        return []


def _memo_key(env: EngineEnv, request: dict) -> str:
    """Everything an answer depends on: the engine's interpreter and install (path, version, when it was written),
    the whole request (faked GPU and CUDA, kernel libraries, stubs, traced sites, helpers, model directory, server
    args, TP size), the model directory's files, the runner's own files and this process's environment variables."""
    def stat(p):
        try:
            st = os.stat(p)
            return [st.st_size, st.st_mtime_ns]
        except OSError:
            return None

    parts = {"env": env.as_dict(), "python": stat(env.python), "package": stat(env.package_dir), "request": request,
             "model_files": _files_state(request.get("model_dir")), "runner_files": _files_state(str(_RUNNER_DIR)),
             "environ": sorted(os.environ.items())}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _recall(key: str):
    with _MEMO.lock:
        if not _MEMO.on or key not in _MEMO.answers:
            return None
        _MEMO.reused += 1
        return copy.deepcopy(_MEMO.answers[key])


def _keep(key: str, r: dict, seconds: float) -> None:
    """Keep a resolved answer; a failure (timeout, an error) is asked again next time."""
    with _MEMO.lock:
        _MEMO.asked += 1
        if _MEMO.on and r.get("ok"):
            _MEMO.answers[key] = (copy.deepcopy(r), seconds)
