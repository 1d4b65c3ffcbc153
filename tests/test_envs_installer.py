"""The installer of the engine environments (servebook.selection._installer): uv with pip's own sources where uv is
at hand, pip where it is not or fails, torch always the local CPU wheel."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile

import pytest

from servebook.selection import _installer
from servebook.selection._installer import Installer

TORCH_PIN = "torch==2.13.0"


def _tiny_wheel(d, name="sbtiny", version="1.0"):
    """A real, minimal pure-Python wheel (one module, ``VALUE = 42``) in ``d``."""
    path = d / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{f},sha256={digest},{len(text.encode())}")
        z.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
    return path


def test_pip_config_is_read_as_pip_reads_it(tmp_path, monkeypatch):
    """find-links and the extra indexes come from pip's own view: a PIP_* variable wins over the config files."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /from/global\nextra-index-url = file:///a/simple file:///b/simple\n"
                    "[install]\nfind-links = /from/install\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    cfg = _installer._pip_config(sys.executable)
    assert cfg["find-links"] == ["/from/install"]
    assert cfg["extra-index-url"] == ["file:///a/simple", "file:///b/simple"]
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/env")
    assert _installer._pip_config(sys.executable)["find-links"] == ["/from/env"]


def test_the_torch_wheel_is_the_file_for_this_python(tmp_path):
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    other = "cp39" if tag != "cp39" else "cp310"
    for f in (f"torch-2.13.0+cpu-{other}-{other}-manylinux_2_28_x86_64.whl", f"torch-2.12.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl",
              f"torchvision-2.13.0-{tag}-{tag}-manylinux_2_28_x86_64.whl"):
        (tmp_path / f).write_bytes(b"")
    assert _installer._local_wheel([str(tmp_path)], TORCH_PIN) is None
    mine = tmp_path / f"torch-2.13.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    mine.write_bytes(b"")
    assert _installer._local_wheel(["/no/such/dir", f"file://{tmp_path}"], TORCH_PIN) == mine
    inst = Installer(TORCH_PIN, uv="uv", uv_version="uv", torch_wheel=mine)
    assert inst.uv_args(("--prefer-binary", "-c", "pins.txt", TORCH_PIN, "triton", "fastapi==1.0")) == \
        ["-c", "pins.txt", "triton", "fastapi==1.0", "torch==2.13.0+cpu"]
    assert inst.uv_args(("--no-deps", "sglang==0.5.9")) == ["--no-deps", "sglang==0.5.9"]


def _uv_or_skip():
    uv, why = _installer._find_uv()
    if uv is None:
        pytest.skip(why)
    return uv


def test_pip_builds_where_uv_is_not_to_be_had(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_INSTALLER", "pip")
    inst = Installer.find(TORCH_PIN)
    assert inst.uv is None and inst.name == "pip (SERVEBOOK_INSTALLER=pip)"
    monkeypatch.delenv("SERVEBOOK_INSTALLER")
    monkeypatch.setenv("PATH", str(tmp_path))  # no uv on PATH
    beside = _installer.Path(sys.executable).parent / "uv"
    uv, why = _installer._find_uv()
    if beside.exists():  # make env put uv beside this python: that one is found
        assert uv == str(beside)
    else:  # nowhere: pip, and the reason names both places
        assert uv is None
        inst = Installer.find(TORCH_PIN)
        assert inst.uv is None and inst.name == f"pip (uv not found next to {sys.executable} nor on PATH)"


def test_pip_builds_where_no_local_torch_wheel_is(tmp_path, monkeypatch):
    """uv is here, but pip's find-links hold no torch wheel of the pin: uv would fetch torch from the index (a CUDA
    build), so pip builds, as before uv, and says why."""
    _uv_or_skip()
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    inst = Installer.find(TORCH_PIN)
    assert inst.uv is None and f"no {TORCH_PIN} wheel for this python in pip's find-links ({tmp_path / 'links'})" in inst.name
    assert "CUDA" in inst.name


def test_uv_installs_and_pip_takes_over_when_uv_fails(tmp_path):
    """A real install by uv into a ``uv venv`` environment; then a call uv refuses (an option only pip has): pip repeats
    it in the same environment (putting pip there first), and says why."""
    _uv_or_skip()
    inst = Installer.find(TORCH_PIN)
    if inst.uv is None:
        pytest.skip(inst.name)
    wheel = _tiny_wheel(tmp_path)
    inst.new_venv(tmp_path / "env")
    py = str(tmp_path / "env" / "bin" / "python")
    heard = []
    p = inst.install(py, "--no-deps", str(wheel), say=heard.append)
    assert p.returncode == 0 and p.installer.startswith("uv") and not heard and not inst.fallbacks, p.stderr
    assert subprocess.run([py, "-c", "import sbtiny; print(sbtiny.VALUE)"], capture_output=True, text=True).stdout.strip() == "42"
    wheel2 = _tiny_wheel(tmp_path, version="2.0")
    p = inst.install(py, "--progress-bar", "off", "--no-deps", str(wheel2), say=heard.append)
    assert p.returncode == 0 and p.installer == "pip", p.stderr
    assert len(inst.fallbacks) == 1 and inst.fallbacks[0].startswith("--progress-bar off")
    assert any("trying pip" in h for h in heard), heard
    out = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('sbtiny'))"], capture_output=True, text=True)
    assert out.stdout.strip() == "2.0"


@pytest.mark.slow
@pytest.mark.envs
def test_an_engine_environment_has_the_local_cpu_torch_and_no_gpu_library():
    """Whichever installer built it (the metadata says which): torch is the CPU wheel of the pin, and no distribution
    the plan drops (GPU-only kernels, CUDA bindings, nvidia-*) is installed."""
    from servebook.selection import add_engine
    from servebook.engines.envs import _meta_path
    from servebook.selection.envs import _TORCH_PIN
    from servebook.selection.requires import _dropped

    env = add_engine("sglang==0.5.9", progress=None)
    meta = json.loads(_meta_path(_installer.Path(env.python).parent.parent).read_text())
    assert meta["importable"], meta.get("import_error")
    code = "import importlib.metadata as m, json; print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"
    names = json.loads(subprocess.run([env.python, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert not [n for n in names if _dropped(n) and n.lower() != "torch"], names
    version = subprocess.run([env.python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True).stdout.strip()
    assert version.startswith(_TORCH_PIN.split("==")[1]) and version.endswith("+cpu"), version
    if "installer" in meta:  # environments built before servebook recorded the installer say nothing
        assert meta["installer"].startswith(("uv", "pip ("))
