"""Shared fixtures: the real embedded model, built once per session into a test cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    from servebook.embedded import build_embedded_model

    return build_embedded_model(progress=None)


@pytest.fixture
def no_leftover_servers():
    """Fail the test if a server process it started is still running afterwards."""
    import psutil

    import os

    import servebook

    # Only this checkout's servers: another checkout's tests on the same machine start their own at any time.
    launcher = os.path.join(os.path.dirname(servebook.__file__), "engines", "launchers", "transformers_serve.py")
    before = {p.pid for p in psutil.process_iter()}
    yield
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if p.info["pid"] in before:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if launcher in cmd or ("transformers serve" in cmd and p.info["cwd"] == os.getcwd()):
            left.append((p.info["pid"], cmd))
    assert not left, f"servers left running: {left}"
