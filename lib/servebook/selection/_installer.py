"""The installer behind the engine environments (private to ``envs``): uv where it is at hand, pip otherwise.

    inst = Installer.find(torch_pin="torch==2.13.0")  # uv next to this python or on PATH, with pip's sources
    inst.name                                         # "uv 0.13.9" | "pip (uv not found next to ... nor on PATH)"
    p = inst.install(py, "--no-deps", "sglang==0.5.9", say=print)   # falls back to pip, saying why, if uv fails

uv resolves the same requirements (the engine's pins, the same constraint files) from the same sources pip has:
pip's find-links, index and extra indexes (``pip config list``, ``PIP_*`` variables included), every index
weighed together as pip does (``--index-strategy unsafe-best-match``). torch is the one exception to "same
requirement": uv gets the exact version of the wheel file of ``torch_pin`` in a find-links directory (the local
CPU build: ``torch==2.13.0+cpu``, a version no index serves), so a CUDA build is never downloaded; where no such file
exists, the environment is built with pip, as before. torch goes last on uv's command line: uv decides the
requirements in the order given, and with torch (or the wheel's path, a URL requirement uv decides first) ahead of the
engine's own requirements it took torch's fsspec first and resolved other versions than pip does (sglang 0.5.9:
datasets 2.14.4 with fsspec 2026.9.0, where pip installs datasets 5.0.1 with fsspec 2026.6.0); with torch last the
installed versions are pip's, every one (compared for sglang 0.5.9 and 0.5.23). The environment ``uv venv`` makes
has no pip (the fallback puts it there first), and uv compiles no bytecode: the engine's first import writes it
(``envs``' probes do, whatever ``PYTHONDONTWRITEBYTECODE`` says). ``SERVEBOOK_INSTALLER=pip`` builds with pip alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable


def _pip_config(python: str) -> dict[str, list[str]]:
    """pip's effective settings as ``pip config list`` shows them (config files and ``PIP_*`` variables):
    key -> values (space-separated lists split). A variable (``:env:``) wins over ``install.`` over ``global.``."""
    p = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120)
    rank = {":env:": 2, "install": 1, "global": 0}
    best: dict[str, tuple[int, list[str]]] = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^(:env:|[\w-]+)\.([\w-]+)=(.*)$", line.strip())
        if not m or m.group(1) not in rank:
            continue
        section, key, value = m.groups()
        value = value.strip().strip("'\"")
        if key not in best or rank[section] >= best[key][0]:
            best[key] = (rank[section], value.split())
    return {k: v for k, (_r, v) in best.items()}


def _local_wheel(dirs: list[str], pin: str) -> Path | None:
    """The wheel file of ``pin`` (``name==version``) for this interpreter in one of the find-links ``dirs``
    (``torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl`` for ``torch==2.13.0``), or None."""
    name, _, version = pin.partition("==")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pattern = re.compile(rf"^{re.escape(name)}-{re.escape(version)}(\+[\w.]+)?-{tag}-{tag}-[\w.]+\.whl$")
    for d in dirs:
        d = d.removeprefix("file://")
        if os.path.isdir(d):
            found = sorted(f for f in os.listdir(d) if pattern.match(f))
            if found:
                return Path(d) / found[-1]
    return None


def _find_uv() -> tuple[str | None, str]:
    """uv next to this python (``make env`` puts it into the project's environment), else on PATH: (path, "")
    or (None, why not)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside), ""
    on_path = shutil.which("uv")
    if on_path:
        return on_path, ""
    return None, f"uv not found next to {sys.executable} nor on PATH"


def _last_error(stderr: str) -> str:
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and not l.startswith("WARNING: Location")]
    return (lines or ["?"])[-1][:200]


class Installer:
    """Installs into an environment's python: ``uv pip install`` with pip's sources, or ``pip install``."""

    def __init__(self, torch_pin: str, uv: str | None = None, uv_version: str = "", why_pip: str = "",
                 sources: list[str] | None = None, torch_wheel: Path | None = None):
        self.torch_pin, self.uv, self.uv_version, self.why_pip = torch_pin, uv, uv_version, why_pip
        self.sources, self.torch_wheel = sources or [], torch_wheel
        self.fallbacks: list[str] = []  # "ARGS: uv's error" for each uv call that failed and pip repeated

    @property
    def name(self) -> str:
        return self.uv_version if self.uv else f"pip ({self.why_pip})"

    @classmethod
    def find(cls, torch_pin: str) -> "Installer":
        """uv when it is here and can take torch from a local wheel; pip (and why) otherwise."""
        if os.environ.get("SERVEBOOK_INSTALLER", "").strip().lower() == "pip":
            return cls(torch_pin, why_pip="SERVEBOOK_INSTALLER=pip")
        uv, why = _find_uv()
        if uv is None:
            return cls(torch_pin, why_pip=why)
        try:
            v = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as exc:
            return cls(torch_pin, why_pip=f"{uv} does not run: {exc.strerror}")
        if v.returncode:
            return cls(torch_pin, why_pip=f"{uv} --version failed: {_last_error(v.stderr)}")
        cfg = _pip_config(sys.executable)
        links = cfg.get("find-links", [])
        wheel = _local_wheel(links, torch_pin)
        if wheel is None:
            return cls(torch_pin, why_pip=f"no {torch_pin} wheel for this python in pip's find-links "
                                          f"({', '.join(links) or 'none set'}); uv would download a CUDA build")
        sources = ["--index-strategy", "unsafe-best-match"]
        for link in links:
            sources += ["--find-links", link]
        for url in cfg.get("index-url", []):
            sources += ["--index-url", url]
        for url in cfg.get("extra-index-url", []):
            sources += ["--extra-index-url", url]
        for c in cfg.get("constraint", []):
            sources += ["--constraint", c]
        if cfg.get("cert"):
            sources += ["--system-certs"]  # pip reads a certificate bundle here; uv the system's store
        return cls(torch_pin, uv, v.stdout.strip().split(" (")[0] or "uv", "", sources, wheel)

    @property
    def torch_requirement(self) -> str:
        """``torch==2.13.0+cpu``: the pin, with the local wheel file's full version (its local label included)."""
        name = self.torch_pin.partition("==")[0]
        return f"{name}=={self.torch_wheel.name.split('-')[1]}" if self.torch_wheel else self.torch_pin

    def uv_args(self, args: tuple[str, ...]) -> list[str]:
        """pip's arguments as uv's: the torch pin becomes the local wheel file's exact version, and goes last (see the
        module's docstring); ``--prefer-binary`` (pip's) has no uv spelling (uv takes the highest version that fits,
        as pip does when a wheel exists)."""
        out = [a for a in args if a not in ("--prefer-binary", self.torch_pin)]
        return out + [self.torch_requirement] if self.torch_pin in args else out

    def install(self, python: str, *args: str, say: Callable[[str], None]) -> subprocess.CompletedProcess:
        """``pip install ARGS`` into ``python``'s environment, by uv when there is one. When uv fails, pip is tried
        with the same arguments (and ``say`` hears why); the installer that answered is returned's ``installer``."""
        if self.uv:
            cmd = [self.uv, "pip", "install", "-q", "--python", python, *self.sources, *self.uv_args(args)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            p.installer = self.uv_version  # type: ignore[attr-defined]
            if not p.returncode:
                return p
            self.fallbacks.append(f"{' '.join(args)}: {_last_error(p.stderr)}")
            say(f"  uv pip install {' '.join(args)} failed ({_last_error(p.stderr)}); trying pip")
            _ensure_pip(python)
        cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
        p = subprocess.run(cmd, capture_output=True, text=True)
        p.installer = "pip"  # type: ignore[attr-defined]
        if p.returncode:
            say(f"  pip {' '.join(args)} failed: {_last_error(p.stderr)}")
        return p

    def new_venv(self, d: Path) -> None:
        """A virtual environment in ``d`` for this python: ``uv venv`` (no pip: seconds), else ``python -m venv``."""
        if self.uv:
            p = subprocess.run([self.uv, "venv", "-q", "--python", sys.executable, str(d)], capture_output=True, text=True)
            if not p.returncode:
                return
            shutil.rmtree(d, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, capture_output=True)


def _ensure_pip(python: str) -> None:
    """pip in an environment ``uv venv`` made (it has none), for the fallback."""
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode:
        subprocess.run([python, "-m", "ensurepip", "--default-pip"], capture_output=True)
