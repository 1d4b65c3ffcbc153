"""Shared fixtures: the real embedded model, built once per session into a test cache; and how the suite is
spread over processes (``make test`` runs ``pytest -n 2 --dist loadfile --no-loadscope-reorder``).

Each test file runs whole on one worker, so a file's module fixtures (a book run, a server, an sshd) are built once;
the files that take longest are handed out first. Caches that several files build (the embedded model, engine
environments) are built by one process while the others wait (``servebook.paths.build_lock``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# The long files first (whole books, engine environments, drills, a browser), so that neither worker is left with a
# long file at the end; the others follow in their usual order. The order is what `make test` measured
# (--durations=30 on 2 busy cores: the slowest test or fixture of each, in seconds): test_hosts (SSH books 190, 130),
# test_whatif_book (two what-if books, 245 and 223), test_book (the smoke book, 386), test_selection (two SGLang
# matrices, 298), test_provenance (an SGLang environment built in a fresh cache, 278), test_bench_fidelity (102, 85),
# test_drills (96, 86), test_whatif_vllm (41 each). `make test` passes --no-loadscope-reorder: without it xdist hands out
# files by their number of tests (the rendered-page checks first) and this order is lost.
_LONGEST_FIRST = ("test_hosts.py", "test_whatif_book.py", "test_book.py", "test_selection.py", "test_provenance.py",
                  "test_bench_fidelity.py", "test_drills.py", "test_whatif_vllm.py", "test_engines_cli.py", "test_starts.py",
                  "test_agreement.py", "test_nccl_e2e.py", "test_profile.py", "test_rendered_book.py", "test_bench.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: file order otherwise kept


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    from servebook.embedded import build_embedded_model

    return build_embedded_model(progress=None)


@pytest.fixture(scope="session")
def cache_without_engines(embedded_model, tmp_path_factory) -> Path:
    """The servebook cache as a machine without engine environments sees it: every entry of the real cache (the
    embedded model, model configs) linked, ``engines/`` left out.

    A smoke book asks whatever SGLang/vLLM environments are cached (chapter 02's what-ifs and decision matrix, chapter
    05's sglang.bench_serving ceiling): with SGLang 0.5.9 and 0.5.23 and vLLM 0.26.0 cached, chapter 02 of the smoke book
    took 172 s, without them 26 s (2 busy cores). Pointed here, the smoke books run the same with or without them. The
    engine paths themselves are tested against the cached environments in tests/test_selection.py, test_whatif_book.py,
    test_whatif_vllm.py and test_bench_fidelity.py.
    """
    from servebook.paths import cache_dir

    real = cache_dir()
    view = tmp_path_factory.getbasetemp() / "cache-without-engines"
    view.mkdir(exist_ok=True)
    for entry in real.iterdir():
        if entry.name != "engines" and not (view / entry.name).exists():
            (view / entry.name).symlink_to(entry)
    return view


@pytest.fixture
def no_engine_envs(cache_without_engines, monkeypatch) -> Path:
    """This test, and the books and servers it starts, see no cached engine environment (``cache_without_engines``)."""
    monkeypatch.setenv("SERVEBOOK_CACHE", str(cache_without_engines))
    return cache_without_engines


@pytest.fixture(scope="module")
def no_engine_envs_in_module(cache_without_engines) -> Path:
    """``no_engine_envs`` for a whole module and its module fixtures (a book run once per module):
    ``pytestmark = pytest.mark.usefixtures("no_engine_envs_in_module")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVEBOOK_CACHE", str(cache_without_engines))
        yield cache_without_engines


@pytest.fixture
def no_leftover_servers():
    """Fail the test if a server process it started is still running afterwards."""
    import psutil

    import os

    import servebook

    # Only this checkout's servers: another checkout's tests on the same machine start their own at any time.
    launcher = os.path.join(os.path.dirname(servebook.__file__), "engines", "launchers", "transformers_serve.py")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    before = {p.pid for p in psutil.process_iter()}
    yield
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if p.info["pid"] in before:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if launcher in cmd or ("transformers serve" in cmd and p.info["cwd"] == os.getcwd()):
            try:  # another test worker's server (servers inherit the environment) is not this test's
                if p.environ().get("PYTEST_XDIST_WORKER", worker) != worker:
                    continue
            except psutil.Error:  # gone meanwhile, or not ours to read
                continue
            left.append((p.info["pid"], cmd))
    assert not left, f"servers left running: {left}"



@pytest.fixture
def host_named_sglang(tmp_path, monkeypatch):
    """Make a host-named SGLang interpreter (``SERVEBOOK_PYTHON_SGLANG``): a wrapper of this Python whose path holds an
    ``sglang`` package of ``version`` (its METADATA plus ``metadata`` lines); returns ``(site, wrapper)``. The cache is
    tmp_path's."""
    import sys

    def make(version: str = "0.5.16", metadata: str = "") -> tuple:
        site = tmp_path / "site"
        (site / "sglang").mkdir(parents=True, exist_ok=True)
        (site / "sglang" / "__init__.py").write_text("")
        dist = site / f"sglang-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n{metadata}")
        py = tmp_path / "py-sglang"
        py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
        py.chmod(0o755)
        monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("SERVEBOOK_PYTHON_SGLANG", str(py))
        return site, py

    return make


@pytest.fixture
def ref_before_unit_3(tmp_path) -> Path:
    """data/runs/h200x1-ref as it stood with units 1 and 2: a copy (traces, logs, rendered notebooks and the tables its
    rendering wrote left out) whose every table drops the rows of unit 3 (run id h200x1-ref-vllm2) and of the units
    after it (h200x1-ref-backends, h200x1-ref-backends2, h200x1-ref-backends3), the state where vLLM's ladder ended at 4 MoE layers on another machine than SGLang's."""
    from servebook.paths import data_dir

    dest = tmp_path / "h200x1-ref-before-unit-3"
    shutil.copytree(data_dir() / "runs" / "h200x1-ref", dest, ignore=shutil.ignore_patterns(
        "*.trace.json.gz", "logs", "notebooks", "chapters.jsonl", "bench_roofline.jsonl", "bench_breakdown.jsonl"))
    for t in dest.glob("*.jsonl"):
        lines = [ln for ln in t.read_text().splitlines() if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln).get("run_id") not in ("h200x1-ref-vllm2", "h200x1-ref-backends",
                                                                 "h200x1-ref-backends2", "h200x1-ref-backends3")]
        if t.name == "profile_runs.jsonl":
            assert len(kept) < len(lines)          # the real unit 3 is in the reference run
        t.write_text("".join(ln + "\n" for ln in kept))
    return dest
