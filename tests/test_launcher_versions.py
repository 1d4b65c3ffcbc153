"""The transformers launcher is honest about the versions it serves (launchers/transformers_serve.py).

The locked version is served by every slow test that starts the embedded engine (test_servers, test_bench, the books);
here: the launcher's own version rule, and the real launcher under transformers 5.25.0 (installed from the package
index into a throwaway environment) refusing at start in one line, through the engine runner.
"""

import importlib.util
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from servebook.engines import get_engine
from servebook.errors import ServerError
from servebook.processes import port_listening
from servebook.servers import Server

LAUNCHER = Path(__file__).parents[1] / "lib/servebook/engines/launchers/transformers_serve.py"


def _launcher():
    spec = importlib.util.spec_from_file_location("transformers_serve", LAUNCHER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_launcher_serves_the_installed_version_and_refuses_5_25():
    mod = _launcher()
    assert mod.refusal(metadata.version("transformers")) is None  # the version this environment (the lock) installs
    for ok in ("5.17.0", "5.24.0", "5.24.1"):
        assert mod.refusal(ok) is None
    for bad in ("5.25.0", "5.25.0rc1", "5.30.2", "6.0.0", "5.16.3", "4.57.1"):
        line = mod.refusal(bad)
        assert line.startswith("[servebook] refused: ") and f"transformers {bad} " in line
        assert "supports transformers >=5.17,<5.25" in line and "\n" not in line
    assert "not installed" in mod.refusal(None)


def test_the_supported_range_is_the_pyprojects():
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"transformers[serving]>=5.17,<5.25"' in text
    assert _launcher().SUPPORTED_TEXT == "transformers >=5.17,<5.25"


@pytest.fixture(scope="module")
def transformers_5_25(tmp_path_factory) -> str:
    """A throwaway environment holding transformers 5.25.0 (without its dependencies: the launcher must refuse before
    importing any of it)."""
    venv = tmp_path_factory.mktemp("tf525") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    uv = Path(sys.executable).parent / "uv"
    uv = str(uv) if uv.exists() else shutil.which("uv")
    if uv:
        cmd = [uv, "pip", "install", "-q", "--system-certs", "--python", str(py), "--no-deps", "transformers==5.25.0"]
    else:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
               str(next((venv / "lib").glob("python*/site-packages"))), "transformers==5.25.0"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode:
        pytest.skip(f"transformers 5.25.0 could not be installed from the package index: {res.stderr.strip()[-300:]}")
    return str(py)


@pytest.mark.envs
def test_transformers_5_25_is_refused_at_start_in_one_line(transformers_5_25, embedded_model, tmp_path, no_leftover_servers):
    eng = get_engine("transformers", python=transformers_5_25)
    assert eng.version() == "5.25.0"
    launch = eng.launch(str(embedded_model), check=False)  # its CLI cannot be read without its dependencies
    with pytest.raises(ServerError) as info:
        Server.start(launch, tmp_path / "log", ready_timeout=60, progress=None)
    message = str(info.value)
    assert "exited with code 2 during start ([servebook] refused: transformers 5.25.0 is not supported" in message
    assert "it supports transformers >=5.17,<5.25" in message
    log = (tmp_path / "log").read_text()
    assert "Traceback" not in log
    said = [line for line in log.splitlines() if line.strip() and not line.startswith("$ ")]  # "$ CMD": the launch line
    assert len(said) == 1 and said[0].startswith("[servebook] refused: transformers 5.25.0 is not supported"), said
    assert not port_listening(launch.port)
