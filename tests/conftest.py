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

    before = {p.pid for p in psutil.process_iter()}
    yield
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] in before:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if "transformers_serve.py" in cmd or "transformers serve" in cmd:
            left.append((p.info["pid"], cmd))
    assert not left, f"servers left running: {left}"
