"""vLLM: launch command checked against its own CLI, and the backend its log says it loaded.

How a backend is forced depends on the version, and is decided from the installed code, not a table:

- ``--attention-backend`` when the version's own parser defines it (vLLM PR #26315, "Add AttentionConfig and
  change attention env vars to CLI arguments", which also deprecated the variable; 0.33.0 has the flag:
  engine/arg_utils.py:1114);
- else the ``VLLM_ATTENTION_BACKEND`` environment variable when the version's ``vllm/envs.py`` reads it
  (0.10.2: envs.py:478; its parser has no attention flag); 0.33.0 no longer mentions the variable anywhere;
- else an :class:`EngineError`.

Where the version is not installed (a recorded run rendered on a laptop), :func:`attention_mechanism_of` gives the
same answer from the version number, by the releases read for it (see ``FLAG_SINCE``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import EngineError
from ._base import CLIRejected, EngineAdapter

ENV_VAR = "VLLM_ATTENTION_BACKEND"

# The first release whose parser defines --attention-backend, read in the released wheels:
#   0.10.2 envs.py:478, 0.11.2 envs.py:637 and 0.12.0 envs.py:652 read VLLM_ATTENTION_BACKEND; their
#          engine/arg_utils.py defines no attention option;
#   0.13.0 engine/arg_utils.py:727 adds "--attention-backend" (PR #26315; envs.py:671 still reads the variable,
#          deprecated); 0.33.0 has the flag (engine/arg_utils.py:1114) and no longer reads the variable.
FLAG_SINCE = (0, 13)


def attention_mechanism_of(version: str | None) -> str:
    """"flag" or "env": how vLLM ``version`` takes a forced backend, for a version not installed here
    (None or unreadable: the current form, the flag). Where it is installed, ask
    :meth:`VLLMEngine.attention_mechanism` (its own parser and ``envs.py``)."""
    try:
        release = Version(str(version)).release if version else None
    except InvalidVersion:
        release = None
    return "env" if release is not None and release[:2] < FLAG_SINCE else "flag"

# What the workers log once the backend is chosen (cuda platform):
#   0.33.0 vllm/platforms/cuda.py:448  logger.info("Using %s backend.", selected_backend)   (forced; an enum member:
#          "Using AttentionBackendEnum.FLASH_ATTN backend.")
#   0.33.0 vllm/platforms/cuda.py:509  "Using %s attention backend out of potential backends: %s."  (automatic)
#   0.33.0 vllm/platforms/cpu.py:174,186 "Using %s backend." with the enum's name
#   0.10.2 vllm/platforms/cuda.py:252-328 human names: "Using FlashInfer backend on V1 engine." etc.
_AUTO = re.compile(r"Using (?P<name>[A-Z0-9_]+) attention backend out of potential backends")
# 0.10.2's human names (vllm/platforms/cuda.py:252-328) -> the _Backend member a user forces
_HUMAN = {
    "FlashInfer": "FLASHINFER", "FlexAttention": "FLEX_ATTENTION", "Triton": "TRITON_ATTN",
    "Flash Attention": "FLASH_ATTN", "Tree Attention": "TREE_ATTN", "XFormers": "XFORMERS",
    "Cutlass MLA": "CUTLASS_MLA", "FlashInfer MLA": "FLASHINFER_MLA", "FlashMLA": "FLASHMLA",
    "FlashAttention MLA": "FLASH_ATTN_MLA", "Triton MLA": "TRITON_MLA",
}
_FORCED = re.compile(r"Using (?:AttentionBackendEnum\.|_Backend\.)?(?P<name>[A-Z0-9_]+|"
                     + "|".join(sorted(map(re.escape, _HUMAN), key=len, reverse=True)) + r") backend(?: on V1 engine)?\.")


def _norm(name: str) -> str:
    n = name.strip().upper()
    return re.sub(r"_VLLM_V1$", "", n)


def reported_from_log(text: str) -> str | None:
    """The last backend vLLM's log says it is using, as the enum name a user would force."""
    found = None
    for line in text.splitlines():
        m = _AUTO.search(line)
        if m:
            found = m.group("name")
            continue
        m = _FORCED.search(line)
        if m and "vit attention" not in line:
            name = m.group("name").strip()
            found = _HUMAN.get(name, name)
    return _norm(found) if found else None


class VLLMEngine(EngineAdapter):
    name = "vllm"
    package = "vllm"
    module = "vllm"
    attention_flag = "--attention-backend"
    ready_path = "/health"
    checks_cli = True
    _args_start = 4  # [python, "-m", "vllm.entrypoints.cli.main", "serve", model, ...]
    # /server_info exists only with VLLM_SERVER_DEV_MODE=1 (0.10.2 entrypoints/openai/api_server.py:1054;
    # 0.33.0 entrypoints/serve/dev/server_info/api_router.py:43) and holds the config, not the chosen
    # backend: the log is the source.
    info_paths = ()
    eager_args = ("--enforce-eager",)
    # 0.26.0 v1/engine/core.py "EngineCore encountered a fatal error." / "EngineCore failed to start." and
    # v1/executor "WorkerProc hit an exception" / "Engine core initialization failed"
    fatal_log = (r"[^\n]*(?:EngineCore encountered a fatal error|EngineCore failed to start|Engine core initialization failed"
                 r"|WorkerProc hit an exception|EngineDeadError)[^\n]*")

    def preflight(self, model, launches):
        return self._run_preflight({"model": str(model), "backends": [b for b in launches if b != "auto"]})

    # `vllm serve` (vllm/entrypoints/cli/main.py in 0.10.2 and 0.33.0; the `vllm` console script runs its main);
    # the api_server module is deprecated in 0.33.0 (entrypoints/openai/api_server.py:50).
    public_command = ("vllm", "serve")
    tp_flag = "--tensor-parallel-size"

    def _command(self, model, *, port, host, attention, tp):
        cmd = [self.python, "-m", "vllm.entrypoints.cli.main", "serve", str(model), *self._where_args(host, port, tp)]
        forced, env = self._attention_args(attention) if attention else ([], {})
        return cmd + forced, env

    def _attention_args(self, attention, how=None, check=True):
        """``how`` None: this installation decides (:meth:`attention_mechanism`); ``check``: a value for the variable
        must be a member of the installed version's enum."""
        if (how or self.attention_mechanism()) == "flag":
            return [self.attention_flag, attention], {}  # its value is checked with the parser's choices
        if check:  # the variable is read late, by the workers: check the value against the version's own enum now
            choices = self.attention_choices()
            if attention not in choices:
                raise CLIRejected(f"vllm {self.version()} has no attention backend {attention} ({ENV_VAR} takes one of "
                                  f"{', '.join(choices)}); pick one of those")
        return [], {ENV_VAR: attention}

    def user_attention(self, attention, version=None):
        """The installed code decides when it is ``version`` (or no version is given); a version not installed here
        is answered by :func:`attention_mechanism_of`, without checking the value."""
        installed = self.version()
        if installed is not None and version in (None, installed):
            return self._attention_args(attention)
        return self._attention_args(attention, how=attention_mechanism_of(version), check=False)

    def attention_mechanism(self) -> str:
        """"flag" or "env": how this installed version takes a forced backend (see the module docstring)."""
        if self.attention_flag in self.cli_options()["options"]:
            return "flag"
        envs_py = self.package_dir() / "envs.py"
        if envs_py.is_file() and f'"{ENV_VAR}"' in envs_py.read_text(errors="replace"):
            return "env"
        raise EngineError(f"vllm {self.version()} neither defines {self.attention_flag} nor reads {ENV_VAR}; "
                          "servebook cannot force its attention backend: use another vLLM version")

    def package_dir(self) -> Path:
        code = "import importlib.util, json; s = importlib.util.find_spec('vllm'); print(json.dumps(s.origin if s else None))"
        origin = self._py_json(code, "could not locate vllm", timeout=60)
        if not origin:
            raise EngineError(f"vllm is not installed in {self.python}; pass --engine-python of an environment that has it")
        return Path(origin).parent

    def _read_cli(self) -> dict:
        try:
            return self._parser_cli()
        except EngineError as exc:
            static = self._static_cli()
            static["parser_error"] = str(exc)
            return static

    def _static_cli(self) -> dict:
        """The option strings read from vLLM's source, for an environment where its parser cannot be built
        (installed without its requirements): literal ``add_argument("--x", ...)`` calls of the engine and
        frontend argument modules, and the frontend dataclass fields that ``FrontendArgs.add_cli_args`` turns
        into ``--field-name``. No choices (those come from enums at run time)."""
        pkg = self.package_dir()
        files = [pkg / "engine" / "arg_utils.py", pkg / "entrypoints" / "openai" / "cli_args.py",
                 pkg / "entrypoints" / "common" / "cli_args.py"]
        options: dict[str, dict] = {}
        remote = self.host is not None and not self.host.in_process  # the files are on the host
        for f in files:
            text = self.host.read_text(str(f), missing_ok=True, label=f"engine vllm source {f.relative_to(pkg)}") if remote else (
                f.read_text(errors="replace") if f.is_file() else "")
            if not text:
                continue
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                    names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
                    store_true = any(k.arg == "action" and isinstance(k.value, ast.Constant) and k.value.value in ("store_true", "store_false")
                                     for k in node.keywords)
                    for n in names:
                        options[n] = {"dest": names[0].lstrip("-").replace("-", "_"), "choices": None, "takes_value": not store_true}
                if isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
                    for item in node.body:
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            opt = "--" + item.target.id.replace("_", "-")
                            options.setdefault(opt, {"dest": item.target.id, "choices": None, "takes_value": True})
        if not options:
            raise EngineError(f"could not read vLLM's options from {pkg}; is it a vLLM installation?")
        return {"method": "source", "options": options}

    @staticmethod
    def _option_name(opt: str) -> str:
        # FlexibleArgumentParser.parse_args rewrites "--a_b" to "--a-b" and reads "--x.key" as a key of the
        # config option --x (0.33.0 vllm/utils/argparse_utils.py:374-392 and :450-470).
        if not opt.startswith("--"):
            return opt
        return "--" + opt[2:].split(".", 1)[0].replace("_", "-")

    def reported_backend(self, server_info, log_text):
        name = reported_from_log(log_text)
        # MLA models also choose a prefill backend (0.26.0 v1/attention/backends/mla/prefill/selector.py:137,174)
        pre = re.findall(r"Using ([A-Z0-9_]+) MLA prefill backend", log_text)
        return {"attention": name, "source": "startup log (Using ... backend)" if name else None,
                "mla_prefill": pre[-1] if pre else None}

    @staticmethod
    def same_backend(asked: str, reported: str) -> bool:
        return _norm(asked) == _norm(reported)

    def attention_choices(self) -> list[str]:
        """The members of vLLM's own backend enum."""
        if self._choices is None:
            self._choices = self._read_choices()
        return self._choices

    _choices: list[str] | None = None

    def _read_choices(self) -> list[str]:
        script = str(Path(__file__).parent / "launchers" / "vllm_backends.py")
        names = self._script_json([script], "could not read vLLM's attention backends", timeout=300)
        if names is None:
            raise EngineError(f"vLLM's attention backend enum could not be imported in {self.python}; install its requirements there")
        return names
