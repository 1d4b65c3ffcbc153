"""The interface every engine adapter implements."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError, ParameterError
from ..interpreters import GPU_ONLY, SELECTION_LIBS
from ..processes import free_port
from ..servers import Launch

# (host, python, engine) -> the engine's CLI as read once per process (reading it imports the engine: seconds)
_CLI_CACHE: dict[tuple[str, str], dict] = {}
_CLI_SCRIPT = Path(__file__).parent / "launchers" / "cli_options.py"
_RUNNER = Path(__file__).parent.parent / "selection" / "_runner.py"

_SPEC = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(?:==\s*([0-9][0-9A-Za-z.+-]*))?\s*$")


_PROSE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


def prose_name(engine: str) -> str:
    """An engine's name in a sentence (SGLang, vLLM); an engine without one keeps its key (transformers)."""
    return _PROSE_NAMES.get(engine, engine)


class CLIRejected(EngineError):
    """The installed engine's own CLI does not know an option, or does not accept its value."""


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

    # Set by get_engine when ``python`` is a static-only build it picked (engines.envs.is_static_only): the line that
    # refuses whatever must import the engine there (launch, its parser, require; preflight answers it as its error). None: nothing known.
    static_only: str | None = None

    def _needs_import(self) -> None:
        """Refuse, in one line, what must import the engine, where it is a static-only build."""
        if self.static_only:
            from .envs import StaticOnlyBuild

            raise StaticOnlyBuild(self.static_only)

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
        from ..processes import run_bounded

        return run_bounded([self.python, "-c", code], timeout=timeout)

    def _py_json(self, code: str, failure: str, timeout: float = 60.0):
        """Run ``code`` in the engine's interpreter and parse the JSON of its last output line."""
        return _last_json(self._py(code, timeout=timeout), failure)

    def _script_json(self, argv: list[str], failure: str, timeout: float = 60.0):
        """Run one of servebook's scripts (``argv``, shipped to a remote host) in the engine's interpreter and parse
        the JSON of its last output line."""
        return _last_json(self._py_script(argv, timeout=timeout), failure)

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
        self._needs_import()
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

    # -- the engine's real CLI ---------------------------------------------------
    def cli_options(self) -> dict:
        """The server's options as this installed version's own argparse parser defines them.

        ``{"method": "parser", "options": {"--port": {"dest": "port", "choices": None, "takes_value": True}, ...}}``;
        read once per interpreter and process. Engines whose parser cannot be built here may fall back
        to reading it from source (``method`` says which).
        """
        key = (getattr(self.host, "spec", "local"), self.python, self.name)
        if key not in _CLI_CACHE:
            _CLI_CACHE[key] = self._read_cli()
        return _CLI_CACHE[key]

    def _read_cli(self) -> dict:
        return self._parser_cli()

    def _parser_cli(self) -> dict:
        self._needs_import()
        # the same import stubs as chapter 02's what-if uses to import the engine (kernel libraries it tests for stay absent)
        stubs = [m for m in GPU_ONLY if m not in SELECTION_LIBS]
        res = self._py_script([str(_CLI_SCRIPT), self.name, str(_RUNNER), json.dumps(stubs)], timeout=300)
        for line in reversed(res.stdout.splitlines()):
            if line.startswith("SERVEBOOK_CLI "):
                return json.loads(line[len("SERVEBOOK_CLI "):])
        err = [l for l in res.stderr.strip().splitlines() if l.strip()]
        raise EngineError(f"could not build {self.name}'s own argument parser in {self.python} "
                          f"({(err or ['no output'])[-1][:300]}); install the engine's requirements in that environment")

    def _py_script(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        if self.host is not None and not self.host.in_process:  # the scripts travel to the host, the engine runs there
            from ..hosts._serve import ship_scripts

            import hashlib

            parts = [Path(a).name if Path(a).is_absolute() else a for a in argv]  # the same key wherever servebook lives
            label = f"engine {self.name} script {parts[0]} {hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]}"
            res = self.host.run([self.python, *ship_scripts(self.host, list(argv))], timeout=timeout, label=label)
            return subprocess.CompletedProcess([self.python, *argv], res.rc, res.stdout, res.stderr)
        if not Path(self.python).exists():
            raise EngineError(f"no Python interpreter at {self.python}; pass --engine-python with the path of the environment where {self.name} is installed")
        from ..processes import run_bounded

        return run_bounded([self.python, *argv], timeout=timeout)

    def check_command(self, args: list[str], version: str | None = None) -> None:
        """Every option in ``args`` must exist in this version's CLI, and a value with choices must be one of them.

        Raises :class:`EngineError` naming the option, the installed version and the fix.
        """
        cli = self.cli_options()
        options = cli["options"]
        version = version or self.version() or "?"
        i = 0
        while i < len(args):
            tok = args[i]
            if not tok.startswith("-") or tok in ("-", "--"):
                i += 1
                continue
            opt, eq, inline = tok.partition("=")
            opt = self._option_name(opt)
            spec = options.get(opt)
            if spec is None:
                near = sorted(o for o in options if o.lstrip("-").split("-")[0] == opt.lstrip("-").split("-")[0])[:6]
                raise CLIRejected(
                    f"{self.name} {version} has no option {opt} (its own parser, read by {cli.get('method')}, does not define it); "
                    f"drop it or use a version that has it" + (f" (options of this version that start alike: {', '.join(near)})" if near else ""))
            value = inline if eq else (args[i + 1] if spec.get("takes_value") and i + 1 < len(args) else None)
            if spec.get("choices") and value is not None and value not in spec["choices"]:
                raise CLIRejected(
                    f"{self.name} {version} does not accept {opt} {value}: its parser allows {', '.join(spec['choices'])}; "
                    f"pick one of those or use a version that has {value}")
            i += 1 if eq or not spec.get("takes_value") else 2

    @staticmethod
    def _option_name(opt: str) -> str:
        """The option as the engine's parser looks it up (engines that rewrite names before parsing override this)."""
        return opt

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
        check: bool = True,
    ) -> Launch:
        """The launch of this engine's server; with ``check`` (default) every option is first checked
        against the installed version's own CLI (:meth:`check_command`)."""
        self._needs_import()
        port = port or free_port(host if host not in ("0.0.0.0", "") else "127.0.0.1")
        version = self.wanted_version or self.version()
        cmd, cmd_env = self._command(model, port=port, host=host, attention=attention, tp=tp)
        cmd = cmd + list(extra)
        if check and self.checks_cli:
            self.check_command(cmd[self._args_start:], version)
        launch_env = {**self._server_env(), **cmd_env, **(env or {})}
        return Launch(cmd=cmd, port=port, host=host, env=launch_env, ready_path=self.ready_path,
                      engine=self.name, description=f"{self.name} attention={attention or 'auto'}", fatal_log=self.fatal_log)

    ready_path = "/health"
    # The server flags that turn CUDA-graph capture off ("eager"); None: the engine has no such mode.
    eager_args: tuple[str, ...] | None = None
    # A regex for the engine's own log line saying a child process died (the server may linger after it).
    fatal_log = ""

    def preflight(self, model: str, launches: dict[str, list[str]]) -> dict:
        """The engine's own validation of each candidate without starting a server (``launchers/preflight.py``).

        ``launches``: label -> the backend name (vLLM) or the server's argument list (SGLang). Returns
        ``{"method": ..., "results": {label: {"ok": True|False|None, "error"?: ..., "resolved"?: {...}}}}``;
        engines without one return no results (every candidate is then started)."""
        return {"method": None, "results": {}}

    def _run_preflight(self, request: dict, timeout: float = 300) -> dict:
        if self.static_only:  # its validation imports the engine: said as every failure to ask it is
            return {"method": None, "results": {}, "error": self.static_only}
        script = str(Path(__file__).parent / "launchers" / "preflight.py")
        res = self._py_script([script, self.name, json.dumps(request)], timeout=timeout)
        for line in reversed(res.stdout.splitlines()):
            if line.startswith("SERVEBOOK_PREFLIGHT "):
                return json.loads(line[len("SERVEBOOK_PREFLIGHT "):])
        err = [l for l in res.stderr.strip().splitlines() if l.strip()]
        return {"method": None, "results": {}, "error": (err or [f"exit code {res.returncode}"])[-1][:300]}
    checks_cli = False  # whether launch() checks the command against the engine's own parser
    _args_start = 3  # where the server's own arguments begin in the command ([python, "-m", module, ...])

    # -- what the running server says it loaded --------------------------------------
    info_paths: tuple[str, ...] = ()  # endpoints that describe the running server, tried in order

    def reported_backend(self, server_info: dict | None, log_text: str) -> dict:
        """What the engine itself reports: ``{"attention": ..., "source": ..., ...}`` (attention None when silent)."""
        return {"attention": None, "source": None}

    def server_info(self, base_url: str, timeout: float = 10) -> dict | None:
        """The first of :attr:`info_paths` that answers JSON, or None."""
        return fetch_server_info(base_url, list(self.info_paths), timeout)

    @staticmethod
    def same_backend(asked: str, reported: str) -> bool:
        return asked.strip().lower() == reported.strip().lower()

    # -- the command, as servebook runs it and as a user types it -----------------------------
    # What a user types in place of the first ``_args_start`` words of the command (the interpreter and the
    # module or script servebook runs), e.g. ("python", "-m", "sglang.launch_server").
    public_command: tuple[str, ...] = ()
    tp_flag: str | None = None  # the server flag for the tensor-parallel size; None: the engine has none
    # Options servebook adds for its own reading of the server (log level, ...), each with its value: left out of
    # a user's command.
    servebook_options: tuple[str, ...] = ()

    def _command(self, model: str, *, port: int | None, host: str | None, attention: str | None,
                 tp: int | None) -> tuple[list[str], dict]:
        """The server's command and the environment it needs; ``host``, ``port`` and ``tp`` None: not written
        (the engine's default)."""
        raise NotImplementedError

    def _where_args(self, host: str | None, port: int | None, tp: int | None) -> list[str]:
        """``--host``, ``--port`` and the tensor-parallel flag, each only when given."""
        out = ["--host", host] if host is not None else []
        out += ["--port", str(port)] if port is not None else []
        return out + ([self.tp_flag, str(tp)] if self.tp_flag and tp is not None else [])

    def _attention_args(self, attention: str) -> tuple[list[str], dict[str, str]]:
        """The flags and environment that force ``attention`` in this installation."""
        return [self.attention_flag, attention], {}

    def _server_env(self) -> dict[str, str]:
        """Environment servebook gives its own servers of this engine (not part of a user's command)."""
        return {}

    def user_attention(self, attention: str, version: str | None = None) -> tuple[list[str], dict[str, str]]:
        """How a user forces ``attention`` on a server of ``version``: (flags, environment). Engines whose spelling
        changed between versions override this (see :mod:`.vllm`)."""
        return self._attention_args(attention)

    def user_argv(self, model: str, *, attention: str | None = None, tp: int = 1, host: str | None = None,
                  port: int | None = None, version: str | None = None) -> tuple[list[str], dict[str, str]]:
        """The server's command as a user types it (:attr:`public_command`, no servebook options) and the
        environment it needs; ``tp`` 1, ``host`` and ``port`` None: left to the engine's default."""
        cmd, env = self._command(model, port=port, host=host, attention=None, tp=tp if tp and tp > 1 else None)
        args = cmd[self._args_start:]
        for opt in self.servebook_options:
            while opt in args:
                i = args.index(opt)
                del args[i:i + 2]
        forced, forced_env = self.user_attention(attention, version) if attention else ([], {})
        return [*self.public_command, *args, *forced], {**env, **forced_env}

    def served_model_name(self, model: str) -> str:
        """The name requests must carry in their ``model`` field."""
        return model

    def __repr__(self) -> str:
        return f"{type(self).__name__}(python={self.python!r})"


def _last_json(res: subprocess.CompletedProcess, failure: str):
    """The JSON of a finished run's last output line; an :class:`EngineError` saying ``failure`` when it failed."""
    if res.returncode != 0:
        raise EngineError(f"{failure}: {res.stderr.strip()[-300:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def fetch_server_info(base_url: str, paths: list[str], timeout: float = 10) -> dict | None:
    """The first of ``paths`` on the server that answers a JSON object (with ``_path`` added), or None.

    A plain function so that it can also run on a remote host (``host.call``)."""
    import urllib.error
    import urllib.request

    for path in paths:
        try:
            with urllib.request.urlopen(base_url + path, timeout=timeout) as resp:
                data = json.loads(resp.read())
                if isinstance(data, dict):
                    return {"_path": path, **data}
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return None
