"""The interface every engine adapter implements."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError, ParameterError
from ..servers import Launch, free_port

_SPEC = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(?:==\s*([0-9][0-9A-Za-z.+-]*))?\s*$")


@dataclass(frozen=True)
class EngineSpec:
    name: str
    version: str | None = None


def parse_engine_spec(spec: str) -> EngineSpec:
    m = _SPEC.match(spec or "")
    if not m:
        raise ParameterError("engine", spec, "expected NAME or NAME==VERSION, e.g. 'sglang==0.5.9'")
    return EngineSpec(m.group(1).lower(), m.group(2))


class EngineAdapter:
    """Version detection, launch commands and the engine's own backend list."""

    name = ""
    package = ""  # distribution name on the package index
    attention_flag = ""  # the server flag that forces the attention backend

    def __init__(self, python: str | None = None, wanted_version: str | None = None):
        self.python = python or sys.executable
        self.wanted_version = wanted_version

    # -- introspection in the engine's own interpreter -----------------------
    host = None  # a servebook.hosts host that is not this process: introspection runs there

    def _py(self, code: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        if self.host is not None and not self.host.in_process:
            import hashlib

            label = f"engine {self.name} {hashlib.sha256(code.encode()).hexdigest()[:12]}"
            res = self.host.run([self.python, "-c", code], timeout=timeout, label=label)
            return subprocess.CompletedProcess([self.python, "-c", code], res.rc, res.stdout, res.stderr)
        if not Path(self.python).exists():
            raise EngineError(f"no Python interpreter at {self.python}; pass --engine-python with the path of the environment where {self.name} is installed")
        from ..servers import run_bounded

        return run_bounded([self.python, "-c", code], timeout=timeout)

    def _py_json(self, code: str, failure: str, timeout: float = 60.0):
        """Run ``code`` in the engine's interpreter and parse the JSON of its last output line."""
        res = self._py(code, timeout=timeout)
        if res.returncode != 0:
            raise EngineError(f"{failure}: {res.stderr.strip()[-300:]}")
        return json.loads(res.stdout.strip().splitlines()[-1])

    def version(self) -> str | None:
        """The installed version in ``self.python``, or None when not installed."""
        code = (
            "import importlib.metadata as m, json\n"
            f"try:\n    print(json.dumps(m.version({self.package!r})))\n"
            "except m.PackageNotFoundError:\n    print('null')\n"
        )
        return self._py_json(code, f"could not ask {self.python} for the {self.name} version", timeout=30)

    def installed(self) -> bool:
        return self.version() is not None

    def require(self) -> str:
        """The installed version, or an error that says how to install it."""
        v = self.version()
        if v is None:
            raise EngineError(
                f"{self.name} is not installed in {self.python}; install it there (pip install {self.package}) "
                f"or pass --engine-python with the interpreter of the environment that has it"
            )
        if self.wanted_version and v != self.wanted_version:
            raise EngineError(
                f"{self.name}=={self.wanted_version} was asked for but {self.python} has {v}; "
                f"pass --engine-python of an environment with {self.wanted_version}"
            )
        return v

    def import_error(self) -> str | None:
        """None when the engine imports in its interpreter, else the error text."""
        res = self._py(f"import {self.module}", timeout=120)
        if res.returncode == 0:
            return None
        lines = [l for l in res.stderr.strip().splitlines() if l.strip()]
        return lines[-1] if lines else f"exit code {res.returncode}"

    module = ""

    def attention_choices(self) -> list[str]:
        """The engine's own list of valid attention backends (read from its code)."""
        raise NotImplementedError

    # -- launching -------------------------------------------------------------
    def launch(
        self,
        model: str,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        attention: str | None = None,
        tp: int = 1,
        extra: list[str] | tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> Launch:
        port = port or free_port(host if host not in ("0.0.0.0", "") else "127.0.0.1")
        cmd, launch_env = self._command(model, port=port, host=host, attention=attention, tp=tp)
        launch_env.update(env or {})
        return Launch(cmd=cmd + list(extra), port=port, host=host, env=launch_env, ready_path=self.ready_path,
                      engine=self.name, description=f"{self.name} attention={attention or 'auto'}")

    ready_path = "/health"

    def _command(self, model: str, *, port: int, host: str, attention: str | None, tp: int) -> tuple[list[str], dict]:
        raise NotImplementedError

    def served_model_name(self, model: str) -> str:
        """The name requests must carry in their ``model`` field."""
        return model

    def __repr__(self) -> str:
        return f"{type(self).__name__}(python={self.python!r})"
