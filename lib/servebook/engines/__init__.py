"""Engine adapters: one interface, three engines.

    eng = get_engine("transformers")           # or "sglang", "vllm", "vllm==0.11.0"
    eng.version()                              # installed version in this interpreter, or None
    launch = eng.launch(model_dir, attention="sdpa")   # a servers.Launch on 127.0.0.1:<free port>
    eng.attention_choices()                    # the engine's own list of valid backends

``python=`` names another interpreter where the engine is installed (how GPU hosts are
usually laid out); without it, ``SERVEBOOK_PYTHON_SGLANG`` / ``SERVEBOOK_PYTHON_VLLM`` (see
:func:`python_from_env`), then a prepared environment, then the interpreter running servebook.
"""

from __future__ import annotations

from ..errors import ParameterError
from ._base import CLIRejected, EngineAdapter, EngineSpec, parse_engine_spec
from .sglang import SGLangEngine
from .transformers import TransformersEngine
from .vllm import VLLMEngine

__all__ = ["CLIRejected", "EngineAdapter", "EngineSpec", "ENGINES", "get_engine", "parse_engine_spec", "python_from_env", "args_for"]

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
    how to install it.
    """
    parsed = parse_engine_spec(spec)
    if parsed.name not in ENGINES:
        raise ParameterError("engine", spec, f"valid engines: {', '.join(ENGINES)}")
    if python is None:
        python = python_from_env(parsed.name)
    if python is None and parsed.name != "transformers":
        python = _prepared_python(parsed)
    return ENGINES[parsed.name](python=python, wanted_version=parsed.version)


def _prepared_python(parsed: EngineSpec) -> str | None:
    from ..errors import EngineError
    from ..selection.envs import resolve_engine

    try:
        return resolve_engine(f"{parsed.name}=={parsed.version}" if parsed.version else parsed.name).python
    except EngineError:
        return None


def python_from_env(name: str) -> str | None:
    """The interpreter ``SERVEBOOK_PYTHON_<ENGINE>`` names, for hosts where each engine has its own environment
    (``SERVEBOOK_PYTHON_SGLANG=/opt/sglang/bin/python SERVEBOOK_PYTHON_VLLM=/opt/vllm/bin/python servebook book ...``);
    every chapter, and the servers it starts, use it. None when unset."""
    import os

    from ..errors import EngineError

    path = os.environ.get(f"SERVEBOOK_PYTHON_{name.upper()}", "").strip()
    if not path:
        return None
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise EngineError(f"SERVEBOOK_PYTHON_{name.upper()}={path} is not an executable interpreter; point it at the python of "
                          f"the environment where {name} is installed, or unset it")
    return path


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
