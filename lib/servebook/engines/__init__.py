"""Engine adapters: one interface, three engines.

    eng = get_engine("transformers")           # or "sglang", "vllm", "vllm==0.11.0"
    eng.version()                              # installed version in this interpreter, or None
    launch = eng.launch(model_dir, attention="sdpa")   # a servers.Launch on 127.0.0.1:<free port>
    eng.attention_choices()                    # the engine's own list of valid backends
    user_command("sglang", "org/model", attention="flashinfer", tp=2)
    # 'python -m sglang.launch_server --model-path org/model --tensor-parallel-size 2 --attention-backend flashinfer'
    forcing("vllm", "FLASHINFER", version="0.10.2")   # 'VLLM_ATTENTION_BACKEND=FLASHINFER'

Every command a chapter shows a user comes from :func:`user_command`, built by the adapter that launches the
engine's servers (``_command``), so the two cannot disagree.

``python=`` names another interpreter where the engine is installed (how GPU hosts are
usually laid out); without it, ``SERVEBOOK_PYTHON_SGLANG`` / ``SERVEBOOK_PYTHON_VLLM`` (see
:func:`python_from_env`), then a prepared environment, then the interpreter running servebook.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ParameterError
from ..interpreters import python_from_env
from ._base import CLIRejected, EngineAdapter, EngineSpec, parse_engine_spec, prose_name
from .sglang import SGLangEngine
from .transformers import TransformersEngine
from .vllm import VLLMEngine

__all__ = ["CLIRejected", "EngineAdapter", "EngineSpec", "ENGINES", "get_engine", "parse_engine_spec", "prose_name", "python_from_env", "args_for",
           "user_command", "forcing", "listed_for", "unknown_backends", "check_backends"]

ENGINES: dict[str, type[EngineAdapter]] = {
    "transformers": TransformersEngine,
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
}


def get_engine(spec: str, python: str | None = None) -> EngineAdapter:
    """The adapter for ``spec`` ("name" or "name==VERSION").

    Without ``python``, SGLang and vLLM run in the interpreter that has them: this one when the engine is
    installed here (at the pinned version, if one is given), else a cached environment prepared with
    ``servebook engines add`` (chapter 02); failing both, this interpreter, whose ``require()`` then says
    how to install it. A static-only build (the engine without its requirements) is taken only when a bare name finds
    no full build or when its version is asked by name; the adapter then reads its files but refuses, in one line
    naming the build and the command that builds a full one, whatever must import it (``static_only``).
    """
    parsed = parse_engine_spec(spec)
    if parsed.name not in ENGINES:
        raise ParameterError("engine", spec, f"valid engines: {', '.join(ENGINES)}")
    if python is None:
        python = python_from_env(parsed.name)
    static_only = None
    if python is None and parsed.name != "transformers":
        python, static_only = _prepared(parsed)
    eng = ENGINES[parsed.name](python=python, wanted_version=parsed.version)
    eng.static_only = static_only
    return eng


def user_command(engine: str, model_ref: str, *, attention: str | None = None, tp: int = 1, env: dict[str, str] | None = None,
                 extra_args: Sequence[str] = (), version: str | None = None, host: str | None = None, port: int | None = None,
                 python: str | None = None, check: bool = False) -> str:
    """The ready-to-paste launch of ``engine``'s server (``"name"`` or ``"name==VERSION"``): the engine's own
    command (``python -m sglang.launch_server``, ``vllm serve``, ``transformers serve``), ``env`` as a sorted
    prefix, every word shell-quoted.

    ``attention`` is forced the way ``version`` takes it (:func:`forcing`); ``tp`` 1, ``host`` and ``port`` None
    are left to the engine's defaults; ``extra_args`` go last. ``check``: every option must exist in the installed
    version's own parser (:meth:`EngineAdapter.check_command`); leave it off for a recorded run rendered where the
    engine is not installed.
    """
    from ..servers import shell_line

    eng, version = _for_user(engine, version, python)
    argv, cmd_env = eng.user_argv(str(model_ref), attention=attention, tp=tp, host=host, port=port, version=version)
    argv += [str(a) for a in extra_args]
    if check and eng.checks_cli:
        eng.check_command(argv[len(eng.public_command):], version or eng.version())
    return shell_line(argv, {**cmd_env, **(env or {})})


def forcing(engine: str, attention: str, *, version: str | None = None, python: str | None = None) -> str:
    """How a user forces ``attention`` on ``engine`` at ``version``: the words :func:`user_command` adds for it
    (``--attention-backend flashinfer``; ``VLLM_ATTENTION_BACKEND=FLASHINFER`` for vLLM before 0.13)."""
    from ..servers import shell_line

    eng, version = _for_user(engine, version, python)
    args, env = eng.user_attention(attention, version)
    return shell_line(args, env)


def _for_user(engine: str, version: str | None, python: str | None) -> tuple[EngineAdapter, str | None]:
    """The adapter for a user's command and the version it is for (``version``, else the one ``engine`` pins)."""
    parsed = parse_engine_spec(engine)
    version = version or parsed.version
    return get_engine(f"{parsed.name}=={version}" if version else parsed.name, python=python), version


def _prepared(parsed: EngineSpec) -> tuple[str | None, str | None]:
    """The python of the prepared environment for ``parsed`` and, when that is a static-only build, the line that
    refuses it to whatever must import the engine (the adapter's launch, preflight, parser, ``require``); its files
    stay readable through the adapter (the version, vLLM's options read from source). A bare name takes the newest
    full build over a newer static-only one. (None, None) when nothing is prepared."""
    from ..errors import EngineError
    from .envs import StaticOnlyBuild, resolve_engine, static_only_error

    spec = f"{parsed.name}=={parsed.version}" if parsed.version else parsed.name
    try:
        try:
            env = resolve_engine(spec)
        except StaticOnlyBuild:
            env = resolve_engine(spec, static=True)
    except EngineError:
        return None, None
    return env.python, (static_only_error(env.engine, [env.version], env.python) if env.static_only else None)


def args_for(text: str, name: str) -> list[str]:
    """Server flags for engine ``name`` from a book parameter: plain flags apply to every engine;
    ``"sglang: --mem-fraction-static 0.6; vllm: --gpu-memory-utilization 0.6"`` gives each engine its own."""
    import shlex

    text = (text or "").strip()
    if not text:
        return []
    parts = [p.strip() for p in text.split(";") if p.strip()]
    tagged = [p for p in parts if p.split(":", 1)[0].strip().lower() in ENGINES and ":" in p]
    if not tagged:
        return shlex.split(text)
    out: list[str] = []
    for p in parts:
        head, sep, rest = p.partition(":")
        if sep and head.strip().lower() in ENGINES:
            if head.strip().lower() == name:
                out += shlex.split(rest)
        else:
            out += shlex.split(p)
    return out


def listed_for(text: str, name: str) -> list[str] | None:
    """The backends the ``backends`` parameter names for engine ``name``: "a,b" for every engine, or per engine
    "sglang: triton,flashmla; vllm: FLASHMLA"; None when it names none for this engine."""
    parts = [p.strip() for p in (text or "").split(";") if p.strip()]
    tagged = {p.split(":", 1)[0].strip().lower(): p.split(":", 1)[1] for p in parts if ":" in p}
    if tagged:
        return [b.strip() for b in tagged[name].split(",") if b.strip()] if name in tagged else None
    return [b.strip() for b in text.split(",") if b.strip()] if parts else None


def unknown_backends(listed: list[str], choices: list[str], engine: str) -> list[str]:
    """The names of ``listed`` that are not among the engine's own ``choices`` (compared without case; for transformers
    a hub kernel ``org/name`` is a value its own resolution accepts)."""
    known = {c.lower() for c in choices}
    return [b for b in listed if b.lower() not in known and not (engine == "transformers" and "/" in b)]


def check_backends(backends: str, specs: list[str], python: str | None = None) -> None:
    """Before a local book starts any server: every backend the ``backends`` parameter names must be a value the engine
    it is for accepts (its own list, read in its interpreter); else a one-line ``ParameterError`` with that list. An
    engine not installed here is left to chapter 03, which records it."""
    from ..errors import ServebookError

    for i, spec in enumerate(specs):
        try:
            eng = get_engine(spec, python=python if i == 0 else None)
            listed = listed_for(backends, eng.name)
            if listed is None or eng.version() is None:
                continue
            choices = eng.attention_choices()
        except ServebookError:
            continue
        bad = unknown_backends(listed, choices, eng.name)
        if bad:
            raise ParameterError("backends", bad[0], f"not a backend {eng.name} {eng.version()} accepts; its own list: "
                                                     f"{', '.join(choices)}")
