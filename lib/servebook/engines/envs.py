"""Engine environments: the interpreter where an engine version is installed, and where its own code lies.

    env = resolve_engine("sglang==0.5.9")        # the prepared one (EngineError if not prepared)
    env = resolve_engine("sglang", engine_python="/opt/sglang/bin/python")   # a real host's layout
    env = resolve_engine("sglang", static=True)   # a reader of the engine's files: a static-only build may answer
    env.python, env.version, env.package_dir     # where the engine's own code lies
    list_engines()                                # [{'engine': 'sglang', 'version': '0.5.9', ...}, ...]

Shared ground: the engines' adapters, chapter 02's what-if and the benchmarks find an engine here. Building an
environment (``servebook engines add``) is chapter 02's ``selection.envs.add_engine``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ..errors import EngineError
from ..interpreters import python_from_env
from ..paths import cache_dir

__all__ = ["SUPPORTED_ENGINES", "EngineEnv", "StaticOnlyBuild", "resolve_engine", "list_engines", "engines_root",
           "parse_engine_spec", "available_versions", "engine_cuda", "is_static_only", "static_only_error"]

SUPPORTED_ENGINES = ("transformers", "sglang", "vllm")


@dataclasses.dataclass
class EngineEnv:
    engine: str
    version: str
    python: str
    package_dir: str
    source: str  # "cached" | "engine-python" | "this-python"
    stubs: tuple[str, ...] = ()
    cuda: str | None = None        # the CUDA the engine's own pins bring on a GPU host (see engine_cuda)
    cuda_source: str = ""
    import_error: str | None = None  # set when the environment is known not to resolve (static reading only)
    static_only: bool = False      # built from the engine alone, without its requirements (is_static_only)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class StaticOnlyBuild(EngineError):
    """The prepared environments that would answer are static-only builds, and the caller needs one that imports."""


def is_static_only(meta: dict) -> bool:
    """Whether a prepared environment's metadata records a static-only build: the engine alone, installed without
    its requirements (``add_engine(..., requirements=False)``, which CI uses for versions whose source is all it
    reads). Its files can be read; the engine cannot be imported there, so no server or helper runs in it."""
    return not meta.get("importable", True) and meta.get("requires_installed") == []


def static_only_error(engine: str, versions: list[str], python: str | None = None) -> str:
    """The one line that refuses static-only builds where an importable engine is needed, with the command that
    builds a full one (of the newest of ``versions``)."""
    newest = max(versions, key=_vkey)
    found = ", ".join(f"{engine}=={v}" for v in sorted(versions, key=_vkey))
    where = f" at {python}" if python else ""
    return (f"{engine}: the prepared environment{'s' if len(versions) > 1 else ''} {found}{where} "
            f"{'are' if len(versions) > 1 else 'is a'} static-only build{'s' if len(versions) > 1 else ''} "
            f"(the engine without its requirements: its source can be read, it cannot be imported), and this needs "
            f"one that imports; build a full one: servebook engines add {engine}=={newest} --force (or pass --engine-python)")


def engines_root() -> Path:
    return cache_dir() / "engines"


def parse_engine_spec(spec: str) -> tuple[str, str | None]:
    """``"sglang==0.5.9"`` -> ``("sglang", "0.5.9")``; ``"vllm"`` -> ``("vllm", None)``."""
    spec = (spec or "").strip()
    name, _, version = spec.partition("==")
    name = name.strip().lower()
    if name not in SUPPORTED_ENGINES:
        raise EngineError(f"unknown engine {name!r}; engines: {', '.join(SUPPORTED_ENGINES)} (optionally ==VERSION)")
    return name, (version.strip() or None)


def _env_dir(engine: str, version: str) -> Path:
    return engines_root() / f"{engine}-{version}-py{sys.version_info.major}{sys.version_info.minor}"


def _meta_path(d: Path) -> Path:
    return d / "servebook_env.json"


def list_engines() -> list[dict]:
    """Prepared (cached) engine environments."""
    out = []
    for meta in sorted(engines_root().glob("*/servebook_env.json")):
        try:
            out.append(json.loads(meta.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def available_versions(engine: str) -> list[str]:
    """Versions the package index offers (``pip index versions``)."""
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", engine], capture_output=True, text=True, timeout=120)
    m = re.search(r"Available versions:\s*(.+)", p.stdout)
    return [v.strip() for v in m.group(1).split(",")] if m else []


def _package_dir(python: str, engine: str) -> tuple[str, str]:
    code = (f"import importlib.util, importlib.metadata as m, os; s = importlib.util.find_spec({engine!r}); "
            f"print(m.version({engine!r})); print(os.path.dirname(s.origin) if s and s.origin else '')")
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        raise EngineError(f"cannot run {python}: {exc.strerror}; pass --engine-python the interpreter where {engine} is installed") from exc
    lines = p.stdout.strip().splitlines()
    if p.returncode or len(lines) < 2 or not lines[1]:
        raise EngineError(f"{engine} is not installed for {python}; pass --engine-python an interpreter that has it, "
                          f"or prepare one: servebook engines add {engine}==VERSION")
    return lines[0], lines[1]


def _named_by_host(engine: str, version: str | None) -> EngineEnv | None:
    """The environment a host names with ``SERVEBOOK_PYTHON_<ENGINE>`` (the one its servers run in), when no prepared
    environment answers ``spec``: used only if it holds ``version`` (any version when None)."""
    py = python_from_env(engine)
    if py is None:
        return None
    found, pkg = _package_dir(py, engine)
    if version and found != version:
        return None
    return EngineEnv(engine, found, py, pkg, "engine-python", (), *engine_cuda(py, engine))


def resolve_engine(spec: str, engine_python: str | os.PathLike | None = None, *, static: bool = False) -> EngineEnv:
    """Find the interpreter for ``spec`` (``engine[==version]``).

    Without a version: the engine installed beside servebook, else the newest prepared environment, else the one the
    host names (``SERVEBOOK_PYTHON_<ENGINE>``). A static-only build (:func:`is_static_only`) is picked there only for
    a ``static`` reader (one that reads the engine's files and never imports it); anyone else gets the newest full
    build, or :class:`StaticOnlyBuild` when static-only builds are all there is. A version asked by name is returned
    as prepared, its ``static_only`` set."""
    engine, version = parse_engine_spec(spec)
    if engine_python:
        py = str(engine_python)
        if not (os.path.isfile(py) and os.access(py, os.X_OK)):
            raise EngineError(f"--engine-python {py}: no such interpreter; pass the python of the environment where {engine} is installed")
        found, pkg = _package_dir(py, engine)
        if version and found != version:
            raise EngineError(f"{py} has {engine} {found}, not {version}; drop ==VERSION or pass another --engine-python")
        return EngineEnv(engine, found, py, pkg, "engine-python", (), *engine_cuda(py, engine))
    if version is None:
        try:  # installed beside servebook?
            found, pkg = _package_dir(sys.executable, engine)
            return EngineEnv(engine, found, sys.executable, pkg, "this-python")
        except EngineError:
            try:
                version = _newest_prepared(engine, static)
            except EngineError as exc:  # no usable prepared environment: the host's own interpreter, if it names one
                if (named := _named_by_host(engine, None)) is not None:
                    return named
                raise exc from None
    if engine == "transformers":
        found, pkg = _package_dir(sys.executable, engine)
        if found == version:
            return EngineEnv(engine, found, sys.executable, pkg, "this-python")
    d = _env_dir(engine, version)
    meta = _meta_path(d)
    if not meta.is_file() and (named := _named_by_host(engine, version)) is not None:
        return named
    if not meta.is_file():
        have = [f"{e['engine']}=={e['version']}" for e in list_engines()]
        raise EngineError(f"{engine}=={version} is not prepared (prepared: {', '.join(have) or 'none'}); "
                          f"run: servebook engines add {engine}=={version}")
    m = json.loads(meta.read_text())
    if "cuda" not in m:  # environments built before servebook recorded it
        m["cuda"], m["cuda_source"] = engine_cuda(m["python"], engine)
    return EngineEnv(engine, m["version"], m["python"], m["package_dir"], "cached", tuple(m.get("stubs", ())),
                     m.get("cuda"), m.get("cuda_source", ""), None if m.get("importable", True) else m.get("import_error"),
                     is_static_only(m))


def _newest_prepared(engine: str, static: bool) -> str:
    """The version a bare ``engine`` spec resolves to among the prepared environments (a static-only build only for a
    ``static`` reader). :class:`StaticOnlyBuild` when only static-only builds are prepared and the caller is no static
    reader; :class:`EngineError` when none is."""
    cached = [e for e in list_engines() if e["engine"] == engine]
    usable = cached if static else [e for e in cached if not is_static_only(e)]
    if usable:
        return max((e["version"] for e in usable), key=_vkey)
    if cached:
        raise StaticOnlyBuild(static_only_error(engine, [e["version"] for e in cached]))
    raise EngineError(f"{engine} is not installed here and no environment is prepared; "
                      f"run: servebook engines add {engine}==VERSION (or pass --engine-python)")


def _vkey(v: str):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]|post", v))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_requires(python: str, dist: str) -> list[str]:
    code = f"import importlib.metadata as m; print('\\n'.join(m.requires({dist!r}) or []))"
    p = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return [l for l in p.stdout.splitlines() if l.strip()]


def engine_cuda(python: str, engine: str) -> tuple[str | None, str]:
    """The CUDA version a GPU host running this engine has, read from the engine's own pins:
    (``"12.9"``, ``"sglang Requires-Dist: cuda-python==12.9"``), or (None, why not).

    A hardware profile's ``cuda_version`` is the first toolkit that targets that SM (11.8 for Hopper),
    not what the engine runs on; the engine's checks (``is_hopper_with_cuda_12_3``, CUDA >= 12.8 for
    SM100) must see the CUDA its own torch / cuda-python pins bring."""
    for r in _wheel_requires(python, engine):
        if "extra ==" in r:
            continue
        name = re.split(r"[<>=!~; \[(]", r.strip(), maxsplit=1)[0]
        if _norm(name) in ("cuda-python", "cuda-bindings"):
            m = re.search(r"(==|>=|~=)\s*(\d+)(?:\.(\d+))?", r)
            if m:
                return f"{m.group(2)}.{m.group(3) or 0}", f"{engine} Requires-Dist: {r.split(';')[0].strip()}"
    for r in _wheel_requires(python, engine):
        m = re.search(r"\bcu(1[1-9])(\d)?\b", r)
        if m and "extra ==" not in r:
            return f"{m.group(1)}.{m.group(2) or 0}", f"{engine} Requires-Dist: {r.split(';')[0].strip()}"
    return None, f"{engine}'s Requires-Dist pins no CUDA package"
