"""The book's parameters: one definition for the CLI and the notebooks.

    values = validate({"engine": "sglang", "smoke": True})   # defaults filled in, checked
    validate({"engine": "tgi"})   # ParameterError: parameter 'engine': invalid value 'tgi'; valid engines: ...

Every notebook declares the common parameters in its ``parameters`` cell with the
defaults below (a test checks they agree); chapter-specific parameters live in the
notebook that uses them and are passed through ``servebook book -p NAME=VALUE``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import ParameterError, ServebookError

__all__ = ["Param", "PARAMS", "MODEL_DEFAULTS", "validate", "coerce", "resolve_model", "check_chapter_param", "model_defaults",
           "check_engine_here", "check_here", "whole_numbers"]


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any
    help: str
    check: Callable[[Any], None] | None = None


def _check_host(value: str) -> None:
    from .hosts import check_host

    check_host(value)


def _check_engine(value: str) -> None:
    from .engines import ENGINES, parse_engine_spec

    spec = parse_engine_spec(value)
    if spec.name not in ENGINES:
        raise ParameterError("engine", value, f"valid engines: {', '.join(ENGINES)} (optionally NAME==VERSION)")
    if spec.version is not None:
        from packaging.version import InvalidVersion, Version

        try:
            Version(spec.version)
        except InvalidVersion:
            raise ParameterError("engine", value, f"{spec.version!r} is not a release version (PEP 440); give one such as "
                                                  f"{spec.name}==0.5.9, or {spec.name} alone for the installed one") from None


def check_here(values: dict, extra: dict) -> None:
    """What a local book can check about this host before chapter 01: the pinned engine version (``check_engine_here``)
    and the backends ``-p backends=`` names (each engine's own list; ``engines.check_backends``)."""
    host, profile = values.get("host") or "local", values.get("profile") or ""
    check_engine_here(values["engine"], host, extra.get("engine_python"), profile)
    if extra.get("backends") and host == "local" and not profile:
        from .engines import check_backends

        specs = [e.strip() for e in [values["engine"], *str(extra.get("compare_engines") or "").split(",")] if e.strip()]
        check_backends(str(extra["backends"]), specs, extra.get("engine_python"))


def check_engine_here(spec: str, host: str, python: str | None = None, profile: str = "") -> None:
    """Before a local book starts anything: a pinned ``NAME==VERSION`` must be the version this host runs (installed in
    the interpreter the book will use, or prepared with ``servebook engines add``); else a one-line error naming what is
    installed and how to add the version asked for. A what-if (``profile``) prepares its version itself, and a remote or
    replayed host answers for itself: neither is checked here."""
    from .engines import get_engine, parse_engine_spec

    parsed = parse_engine_spec(spec)
    if parsed.version is None or profile or (host or "local") != "local":
        return
    eng = get_engine(spec, python=python or None)
    try:
        found = eng.version()
    except ServebookError:
        found = None
    if found == parsed.version:
        return
    from .engines.envs import list_engines

    prepared = [f"{e['engine']}=={e['version']}" for e in list_engines() if e.get("engine") == parsed.name]
    have = f"{eng.python} has {parsed.name} {found}" if found else f"{parsed.name} is not installed in {eng.python}"
    how = ("pass -p engine_python= with an interpreter that has it" if parsed.name == "transformers" else
           f"prepare it with `servebook engines add {spec}` (or point SERVEBOOK_PYTHON_{parsed.name.upper()} at an "
           f"interpreter that has it)")
    raise ParameterError("engine", spec, f"{have}" + (f"; prepared: {', '.join(prepared)}" if prepared else "")
                         + f"; {how}, or drop ==VERSION")


def _check_model(value: str) -> None:
    resolve_model(value, build=False)


def _check_profile(value: str) -> None:
    if not value:
        return
    try:
        from .profiles import list_profiles
    except ImportError:  # profiles arrive with chapter 01
        return
    known = list_profiles()
    if value not in known:
        raise ParameterError("profile", value, f"known profiles: {', '.join(known)}")


def _check_run_id(value: str) -> None:
    if value and not re.fullmatch(r"[A-Za-z0-9._-]{1,80}", value):
        raise ParameterError("run_id", value, "use letters, digits, '.', '_' or '-' (at most 80)")


PARAMS: dict[str, Param] = {
    p.name: p
    for p in [
        Param("host", str, "local", "where the engines run: 'local', 'ssh://[user@]host[:port]' or 'replay:RUN_DIR'", _check_host),
        Param("engine", str, "transformers", "transformers | sglang | vllm, optionally ==VERSION", _check_engine),
        Param("model", str, "embedded", "'embedded', a model card in data/models, or a model directory", _check_model),
        Param("profile", str, "", "a hardware profile in data/hardware for what-if; '' = this host", _check_profile),
        Param("smoke", bool, False, "small workloads (tests, CI)"),
    ]
}


# Chapter parameters sized to a model. A notebook's own defaults are sized to a GPU host and a real model; on the
# embedded CPU model the same method (warm-ups, repeated runs, every sweep level up to the top, the client's ceiling)
# runs on workloads sized to it. ``-p NAME=VALUE`` always wins; a run records what was used in its manifest
# (``chapter_defaults``) and in each executed notebook's injected parameters.
MODEL_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "embedded": {
        # The decision matrix asks each cached engine version once per GPU profile, and every ask is one import of that
        # engine (10-20 s on 2 CPU cores): with every version of the notebook cached (2 SGLang, 3 vLLM) on 4 GPUs the CPU
        # book spent over 5 minutes here. The CPU book asks what the seed case turns on: the two SGLang versions whose
        # matrices section 4 compares, the seed's other engine (vLLM 0.26.0), on capability 10.0 (where SGLang's
        # is_sm100_supported holds) and 12.0 (the seed's GPU), for every model card. Same method, same questions per cell;
        # -p vllm_versions=0.26.0,0.33.0,0.10.2 -p matrix_profiles=a100,h200,b200,rtx-pro-6000 asks the whole grid (as the
        # what-if book and the GPU books do). Only versions already cached are asked either way.
        # None of them is asked unless -p cached_versions=true: the embedded book reads the engine of its own kernel, so
        # that it does the same work on a fresh machine and on one where engine environments are cached (its chapter 02
        # took 14 s with none cached and 155 s with them, 2026-12-04); on a fresh machine (CI) that is all it can read.
        "02": {"vllm_versions": "0.26.0", "matrix_profiles": "b200,rtx-pro-6000", "cached_versions": False},
        # 32 tokens in and out (the notebook's 128 are sized to a GPU): the in-process decode, the single stream (2 warm-ups,
        # 5 runs) and every sweep level (5 requests per stream, up to saturation) each took minutes on 2 CPU cores.
        # The sweep doubles concurrency up to 8, not 128: transformers serve on 2 CPU cores gains little past a few streams
        # (measured 55.0, 60.2, 56.3 tok/s at C=1, 2, 4, saturated there; on a busier machine 21.3, 15.6, 23.9, 27.4 at
        # C=1-8, where the noise kept the 10% saturation rule from stopping it), and every level costs 5 x C requests
        # (C=8 alone took 47 s there; each further level doubles it). Each level keeps its warm-up, its 5 requests per
        # stream and the saturation stop.
        # The client's ceiling (against the fake server, not an engine) is sized to this sweep too. The notebook's levels
        # (1, 64) with 2048 tokens a request stream 128 requests of 2048 tokens per client at C=64: 29 s of the chapter's
        # 106 s on the 2-core book host (65 s on a busy one, where 1, 8 and 1024 tokens took 22 s, the tokenizer's first
        # load included).
        # The ceiling need only stay far above what this engine can produce: at 1 event per write servebook's client
        # streamed 12,000-44,000 tok/s and httpx 7,000-11,000 with those sizes on 2 busy cores, while the embedded model
        # serves 20-70 tok/s, a few thousandths of it (the check warns at half). bench.ceiling_check compares each rate
        # with the ceiling at the nearest concurrency (log scale), so the top level is the sweep's top (8). Every client,
        # regime (1 and 64 events per write), warm-up and the 2 requests per stream stay; -p ceiling_concurrencies=1,64
        # -p ceiling_tokens=2048 measures the GPU hosts' ceiling here.
        # The in-process profile keeps 16 decode steps per depth: 8 (the smoke's) halved its time (20 s -> 11 s on a busy
        # host), but the prediction subtracts the step times of two slices a layer apart, and on 2 busy cores those moved
        # by more than a layer's time between runs at 16 steps already: with fewer the difference would be noise.
        "05": {"max_tokens": 32, "input_len": 32, "profile_steps": 16,   # in-process profile: 16 decode steps per depth
               "max_concurrency": 8, "ceiling_concurrencies": "1,8", "ceiling_tokens": 1024},
        # one start per forced backend: chapter 03 sweeps every transformers implementation, and a second start of each
        # doubles the chapter on 2 CPU cores; chapter 05 keeps its 2 starts (one engine, a short single stream each).
        # The forced backend is eager, the implementation besides the default's that runs as it is on a CPU: the default
        # is sdpa here (chapter 02 reads it from transformers' own code, and chapter 03's default row reports it), so a
        # forced sdpa started the same kernel a second time (a server start and its checks: ~20 s of a 84 s chapter on 2
        # cores); it is recorded as not in this run's list. -p backends=sdpa,eager forces it as well. flex_attention
        # compiles C++ kernels through torch inductor at its first request: in a fresh clone's environment that took 170 s
        # of a 275 s chapter on 2 busy cores, and in another it ran past the request timeout and was recorded as a failed
        # backend. It is recorded as not run ("not in this run's backends list", as are the flash-attention kernels, which
        # need a CUDA GPU); smoke runs leave it out too. -p backends=sdpa,eager,flex_attention forces it as well.
        "03": {"starts": 1, "backends": "eager"},
    },
}


def model_defaults(model: str, chapter: str) -> dict[str, Any]:
    """The chapter parameters sized to ``model`` for chapter ``chapter`` ("05"): {} where the notebook's own stand.

        model_defaults("embedded", "05")   # {'max_tokens': 32, ...}
    """
    return dict(MODEL_DEFAULTS.get(model, {}).get(chapter, {}))


def coerce(name: str, value: Any, typ: type) -> Any:
    """Turn a CLI string into ``typ``; a one-line error when it cannot."""
    if isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    if typ is bool:
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ParameterError(name, value, "expected true or false")
    if typ in (int, float):
        try:
            return typ(str(value).strip())
        except ValueError:
            raise ParameterError(name, value, f"expected {'an integer' if typ is int else 'a number'}") from None
    if typ is str:
        if not isinstance(value, (str, int, float)):
            raise ParameterError(name, value, "expected a string")
        return str(value)
    return value


def validate(values: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, types coerced, every value checked; unknown names rejected."""
    unknown = sorted(set(values) - set(PARAMS))
    if unknown:
        raise ParameterError(unknown[0], values[unknown[0]], f"unknown parameter; valid parameters: {', '.join(PARAMS)}")
    out = {}
    for name, p in PARAMS.items():
        value = coerce(name, values.get(name, p.default), p.type)
        if p.check is not None:
            p.check(value)
        out[name] = value
    return out


def resolve_model(model: str, build: bool = True, progress=print) -> Path | dict:
    """'embedded' -> the built model dir; a card name -> the card (dict); a directory -> itself.

    With ``build=False`` nothing is built (validation only).
    """
    from .paths import data_dir

    if not isinstance(model, str) or not model.strip():
        raise ParameterError("model", model, "give 'embedded', a model card name, or a model directory")
    if model == "embedded":
        if not build:
            return Path("embedded")
        from .embedded import build_embedded_model

        return build_embedded_model(progress=progress)
    cards = data_dir() / "models"
    if (cards / f"{model}.json").exists():
        from .cards import load_card

        return load_card(model)
    try:
        path = Path(model).expanduser()
    except RuntimeError:  # "~name" for a user this machine does not have
        raise ParameterError("model", model, "its ~user has no home directory here; give the model directory's full path") from None
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ParameterError("model", model, "the directory has no config.json; point at a Hugging Face model directory")
        _check_config(model, path / "config.json")
        return path.resolve()
    known = sorted(p.stem for p in cards.glob("*.json")) if cards.exists() else []
    raise ParameterError(
        "model", model,
        "not 'embedded', not a model card" + (f" (cards: {', '.join(known)})" if known else "") + ", and no such directory",
    )


def _check_config(model: str, config: Path) -> None:
    """A model directory's ``config.json`` must be a JSON object naming its architecture (``model_type``): what every
    engine reads first. A damaged one is named here, before chapter 01, not found by an engine's traceback later."""
    import json

    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError("model", model, f"{config} cannot be read ({exc}); restore it from the model's source") from None
    except json.JSONDecodeError as exc:
        raise ParameterError("model", model, f"{config} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                                             f"restore it from the model's source") from None
    if not isinstance(data, dict) or not data.get("model_type"):
        raise ParameterError("model", model, f"{config} has no model_type, so no engine can tell the architecture; restore it "
                                             f"from the model's source")


# Chapter parameters (``-p NAME=VALUE``) whose valid values are narrower than their type. The type itself is
# checked from the notebook's own declaration (servebook.chapters); these add the ranges and choices that the
# notebooks' comments state, so a bad value stops the book before anything runs.
_AT_LEAST_1 = {"max_tokens", "runs", "ready_timeout", "max_batch", "timeout_s", "input_len", "requests_per_run",
               "max_concurrency", "requests_per_level", "level_time_budget_s", "seed_tp", "starts", "ceiling_tokens"}
_AT_LEAST_0 = {"warmup", "saturation_patience", "seed"}
_CHOICES = {"api": ("completions", "chat")}


def check_chapter_param(name: str, value: Any) -> None:
    """Raise ParameterError when a chapter parameter's value is outside what the chapter accepts."""
    if name in _AT_LEAST_1 and isinstance(value, int) and value < 1:
        raise ParameterError(name, value, "a whole number of at least 1")
    if name in _AT_LEAST_0 and isinstance(value, int) and value < 0:
        raise ParameterError(name, value, "a whole number of at least 0")
    if name == "seed_allreduce_us" and isinstance(value, (int, float)) and not value >= 0:
        raise ParameterError(name, value, "a latency in microseconds, 0 or more (0: the latencies recorded in data/runs/h200x2-nccl)")
    if name == "ceiling_concurrencies":
        whole_numbers(value, name)  # whole numbers of at least 1, comma-separated (bench.ceiling.ceiling_levels reads them)
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ParameterError(name, value, "one of: " + ", ".join(_CHOICES[name]))
    if name in ("seed_profile", "matrix_profiles") and value:
        for item in str(value).split(","):
            try:
                _check_profile(item.strip())
            except ParameterError as exc:
                raise ParameterError(name, item.strip(), exc.expected) from None
    if name in ("seed_model", "matrix_models") and value:
        for item in str(value).split(","):
            try:
                resolve_model(item.strip(), build=False)
            except ServebookError as exc:
                raise ParameterError(name, item.strip(), str(exc)) from None


def whole_numbers(text, name: str) -> list[int]:
    """A parameter's comma-separated whole numbers of at least 1 (``"1,64"`` -> ``[1, 64]``); a ParameterError that names
    the parameter otherwise."""
    items = [x.strip() for x in str(text).split(",")]
    if not all(re.fullmatch(r"[0-9]{1,6}", x) and int(x) >= 1 for x in items):
        raise ParameterError(name, text, "comma-separated whole numbers of at least 1, e.g. 1,64")
    return [int(x) for x in items]
