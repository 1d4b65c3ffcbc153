"""Engine environments built: an interpreter where an engine version is installed, enough to read and what-if.

    env = add_engine("sglang==0.5.9")            # cached venv, no GPU-only dependencies
    env = resolve_engine("sglang==0.5.9")        # the cached one (EngineError if not prepared)
    env = resolve_engine("sglang", engine_python="/opt/sglang/bin/python")   # a real host's layout
    env.python, env.version, env.package_dir     # where the engine's own code lies

``add_engine`` installs the engine alone (``--no-deps``), then in one install the requirements
its own ``Requires-Dist`` pins, less the GPU-only and heavy ones, then, by trying to import the
engine's configuration module (SGLang's ``server_args``, vLLM's platform), any module that import
needs without declaring it. The installer is uv when it is at hand (next to this python or on
PATH), given pip's own sources (find-links, indexes, constraint files); pip otherwise, or when uv
fails, and the environment's metadata says which and why (``_installer``); what it installs and drops is read
from the engine's own metadata (``requires``). torch is the local CPU
wheel. GPU-only libraries (flashinfer, sgl-kernel, CUDA bindings ...) are never installed: the
what-if stands in for them with empty import stubs, and says so. Finding a prepared environment
(``resolve_engine``, ``list_engines``, ``EngineEnv``) is shared ground, ``engines/envs.py``: import them from there.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ..engines.envs import (EngineEnv, _env_dir, _meta_path, _package_dir, _wheel_requires, available_versions, engine_cuda,
                           parse_engine_spec, resolve_engine)
from ..errors import EngineError
from ..interpreters import GPU_ONLY
from ..interpreters import SELECTION_LIBS as _SELECTION_LIBS
from ..paths import build_lock
from ._installer import Installer
from .requires import _DIST_OF, install_plan

__all__ = ["DEFAULT_KERNEL_LIBS", "add_engine", "probe_import", "weaker_here"]

# The module whose import brings in the engine's selection logic.
_PROBE_MODULE = {"sglang": "sglang.srt.server_args", "vllm": "vllm.platforms.cuda", "transformers": "transformers.modeling_utils"}
# What a GPU host has by default: the kernel libraries each engine pins (and so installs) there.
DEFAULT_KERNEL_LIBS = {
    "sglang": {"flashinfer": True, "sgl_kernel": True, "flash_attn": False},
    "vllm": {"flashinfer": True, "flash_attn": False},
    "transformers": {},  # this host as it is
}
_HEARTBEAT_S = 60  # while an environment is built, a "still preparing" line this often (the installer is quiet for minutes)
_TORCH_PIN = "torch==2.13.0"  # the CPU wheel in this machine's pip find-links (uv gets the file itself); never a CUDA download
_RUNNER = Path(__file__).with_name("_runner.py")


def _ask(python: str, runner: Path, req: dict, timeout: float, what: str, unset: tuple[str, ...] = ()) -> dict:
    """``runner`` run by the engine's ``python`` on ``req`` (its stdin): its ``SERVEBOOK_RESULT`` line, or
    ``{"ok": False, "error": ...}``. The runner has a process group of its own, stopped at ``timeout`` and when this
    process dies (``processes.run_bounded``: a killed kernel leaves no runner behind)."""
    from ..processes import run_bounded

    p = run_bounded([python, str(runner)], timeout=timeout, input=json.dumps(req), unset=unset)
    if p.returncode == 124:
        return {"ok": False, "error": f"{what} did not finish in {timeout:.0f}s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("SERVEBOOK_RESULT "):
            return json.loads(line[len("SERVEBOOK_RESULT "):])
    tail = [l for l in p.stderr.strip().splitlines() if l.strip()]
    return {"ok": False, "error": tail[-1] if tail else f"runner exited {p.returncode} without a result"}


# a probe leaves the bytecode of what the engine imports in its environment (uv installs none; pip compiled every
# module at install), so later what-ifs read it
_WRITE_BYTECODE = ("PYTHONDONTWRITEBYTECODE",)


def probe_import(python: str, engine: str) -> dict:
    """Import the engine's selection module under the what-if's default stubs; the runner's report."""
    visible = [m for m, v in DEFAULT_KERNEL_LIBS.get(engine, {}).items() if v]
    req = {"engine": engine, "mode": "import", "present_modules": [m for m in GPU_ONLY if m not in _SELECTION_LIBS],
           "visible_modules": visible, "gpu": None}
    return _ask(python, _RUNNER, req, 600, "the engine's import", unset=_WRITE_BYTECODE)


def _probe_resolve(python: str, engine: str) -> dict:
    """One full what-if (DeepSeek-V3 card, capability 9.0) under the default assumptions."""
    from ..cards import materialize

    visible = [m for m, v in DEFAULT_KERNEL_LIBS.get(engine, {}).items() if v]
    req = {"engine": engine, "model_dir": str(materialize("deepseek-v3")), "sites": [],
           "gpu": {"capability": "9.0", "gpu_name": "NVIDIA H200", "memory_gib": 141, "count": 1, "cuda_version": "12.8"},
           "present_modules": [m for m in GPU_ONLY if m not in _SELECTION_LIBS], "visible_modules": visible}
    return _ask(python, _RUNNER, req, 600, "the engine's resolution", unset=_WRITE_BYTECODE)


def _reprobe(meta_path: Path, engine: str, say) -> None:
    """An environment recorded as static-only although its requirements are installed: ask again (servebook's
    runner may have learnt to resolve this engine since it was built); the record follows the answer."""
    m = json.loads(meta_path.read_text())
    if m.get("importable", True) or not m.get("requires_installed"):
        return
    r = _probe_resolve(m["python"], engine)
    if r.get("ok"):
        m.update(importable=True, import_error=None, stubs=r.get("stubbed_modules", []))
        meta_path.write_text(json.dumps(m, indent=2) + "\n")
        say(f"[{engine} {m['version']}] resolves now; recorded as importable")


def add_engine(spec: str, progress: Callable[[str], None] | None = print, force: bool = False, max_rounds: int = 4,
               requirements: bool = True) -> EngineEnv:
    """Prepare (once) a cached environment for ``engine==version`` without GPU-only dependencies.

    Deterministic: the engine's own Requires-Dist, less :data:`_DROP_EXACT` (GPU-only and heavy, see the
    comments there), go to ONE install with the engine's pins, under a constraint that holds torch
    to the local CPU wheel; uv installs where it is at hand, pip otherwise (the metadata's ``installer``, and
    ``installer_fallbacks``: the uv calls that failed and pip repeated). ``requirements=False`` installs the engine
    alone (static reading only, seconds).
    A few rounds (``max_rounds``) then install modules the engine imports without
    declaring them; the metadata records each step and its time. While it builds, ``progress`` hears every
    minute that it is still working.
    """
    say = progress or (lambda _m: None)
    engine, version = parse_engine_spec(spec)
    if engine == "transformers":
        raise EngineError("transformers is servebook's own dependency; it needs no environment (use --engine transformers)")
    if not version:
        raise EngineError(f"say which version: servebook engines add {engine}==VERSION")
    d = _env_dir(engine, version)
    with build_lock(d):  # one builder per environment: a parallel one waits, then finds it built
        if _meta_path(d).is_file() and not force:
            _reprobe(_meta_path(d), engine, say)
            return resolve_engine(f"{engine}=={version}")
        with _heartbeat(spec, progress):
            return _build_env(d, engine, version, say, max_rounds, requirements)


@contextlib.contextmanager
def _heartbeat(spec: str, progress: Callable[[str], None] | None):
    """A line to ``progress`` every ``_HEARTBEAT_S`` while the block runs: "still preparing SPEC (Ns)"."""
    if progress is None:
        yield
        return
    done, t0 = threading.Event(), time.monotonic()

    def beat():
        while not done.wait(_HEARTBEAT_S):
            progress(f"      still preparing {spec} ({time.monotonic() - t0:.0f}s)")

    threading.Thread(target=beat, daemon=True).start()
    try:
        yield
    finally:
        done.set()


def _build_env(d: Path, engine: str, version: str, say, max_rounds: int, requirements: bool) -> EngineEnv:
    """A fresh environment in ``d``: the engine alone, then (``requirements``) what it needs to import."""
    t0 = time.monotonic()
    steps: dict = {}
    inst = Installer.find(_TORCH_PIN)
    say(f"[{engine} {version}] installing with {inst.name}")
    py, pin = _new_venv(inst, d, engine, version, say, steps)
    _install_engine_alone(inst, py, d, engine, version, say, steps)
    keep, drop = install_plan(_wheel_requires(py, engine))
    if not requirements:
        why = (f"static-only environment: built without the engine's requirements; `servebook engines add {engine}=={version} "
               "--force` builds one that resolves")
        meta = _write_meta(d, py, engine, t0, steps, {"installer": inst.name, "installer_fallbacks": inst.fallbacks,
                                                      "requires_installed": [], "requires_dropped": drop, "requires_not_installed": keep,
                                                      "stubs": [], "importable": False, "import_error": why})
        say(f"[{engine} {version}] static-only environment ready in {meta['built_seconds']}s")
        return EngineEnv(engine, meta["version"], py, meta["package_dir"], "cached", (), meta["cuda"], meta["cuda_source"], why,
                         static_only=True)
    say(f"[{engine} {version}] {len(keep)} requirements from its METADATA; dropped (GPU-only/heavy): {', '.join(drop)}")
    _install_requirements(inst, py, pin, engine, version, keep, say, steps)
    t = time.monotonic()
    installed, import_error, used_stubs = _install_until_it_resolves(inst, py, pin, engine, version, max_rounds, say)
    steps["probe"] = round(time.monotonic() - t, 1)
    meta = _write_meta(d, py, engine, t0, steps, {"installer": inst.name, "installer_fallbacks": inst.fallbacks,
                                                  "requires_installed": keep, "requires_dropped": drop, "installed_for_import": installed,
                                                  "stubs": used_stubs, "torch": _TORCH_PIN, "importable": import_error is None,
                                                  "import_error": import_error})
    say(f"[{engine} {version}] ready in {meta['built_seconds']}s {steps}; stubbed GPU-only modules: {', '.join(used_stubs) or 'none'}")
    return EngineEnv(engine, meta["version"], py, meta["package_dir"], "cached", tuple(used_stubs), meta["cuda"], meta["cuda_source"])


def _new_venv(inst: Installer, d: Path, engine: str, version: str, say, steps: dict) -> tuple[str, Path]:
    """A fresh virtual environment in ``d`` (its python) and the constraint file holding torch to the CPU wheel."""
    if d.exists():
        shutil.rmtree(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    say(f"[{engine} {version}] creating {d}")
    t = time.monotonic()
    inst.new_venv(d)
    pin = d / "servebook-constraints.txt"
    # torch held to the local CPU wheel for every package that asks for torch (never a CUDA download)
    pin.write_text(_TORCH_PIN + "\n")
    steps["venv"] = round(time.monotonic() - t, 1)
    return str(d / "bin" / "python"), pin


def _install_engine_alone(inst: Installer, py: str, d: Path, engine: str, version: str, say, steps: dict) -> None:
    """``install --no-deps engine==version``; on failure the environment is removed and the error lists the versions."""
    t = time.monotonic()
    p = inst.install(py, "--no-deps", f"{engine}=={version}", say=say)
    if p.returncode:
        versions = available_versions(engine)
        shutil.rmtree(d, ignore_errors=True)
        raise EngineError(f"{engine}=={version} could not be installed; versions on the index: "
                          f"{', '.join(versions[:40]) or 'none found (is the index reachable?)'}")
    steps["engine_no_deps"] = round(time.monotonic() - t, 1)


def _install_requirements(inst: Installer, py: str, pin: Path, engine: str, version: str, keep: list[str], say, steps: dict) -> None:
    """The kept requirements in one install; if that fails, one by one (the failures are recorded in ``steps``)."""
    t = time.monotonic()
    # triton: not declared by the engines (the CUDA torch wheel brings it on a GPU host), but imported by
    # their kernels modules at import time; it installs and imports without a GPU.
    extra = ["triton"] if engine in ("sglang", "vllm") else []
    p = inst.install(py, "--prefer-binary", "-c", str(pin), _TORCH_PIN, *extra, *keep, say=say)
    if p.returncode:
        # one requirement without a wheel for this machine must not sink the rest: install one by one
        say(f"[{engine} {version}] one-shot install failed; installing requirement by requirement")
        inst.install(py, "--prefer-binary", "-c", str(pin), _TORCH_PIN, say=say)
        failed = [r for r in keep if inst.install(py, "--prefer-binary", "-c", str(pin), r, say=lambda _m: None).returncode]
        steps["failed_requirements"] = failed
    steps["requirements"] = round(time.monotonic() - t, 1)


def _install_until_it_resolves(inst: Installer, py: str, pin: Path, engine: str, version: str, max_rounds: int, say) -> tuple[list[str], str | None, list[str]]:
    """Import the engine and run its resolution; install each undeclared module it misses, up to ``max_rounds``.
    Returns (modules installed, the last error or None, the GPU-only modules stubbed)."""
    installed: list[str] = []
    import_error = None
    r: dict = {}
    for _ in range(max_rounds + 1):
        r = probe_import(py, engine)
        if r.get("ok"):
            r = _probe_resolve(py, engine)
            if r.get("ok") or not r.get("missing_module"):
                break
        missing = r.get("missing_module")
        top = (missing or "").split(".")[0]
        if not missing or top == engine or top in installed or len(installed) >= max_rounds:
            import_error = r.get("error")
            say(f"[{engine} {version}] does not resolve without a GPU here ({import_error}); kept for static reading")
            break
        dist = _DIST_OF.get(top, top)
        say(f"[{engine} {version}] imports undeclared {top!r}: install {dist}")
        inst.install(py, "--prefer-binary", "-c", str(pin), dist, say=say)
        installed.append(top)
    return installed, import_error, r.get("stubbed_modules", [])


def _write_meta(d: Path, py: str, engine: str, t0: float, steps: dict, fields: dict) -> dict:
    """Write the environment's metadata: what it holds (the engine's version, package dir, CUDA pin), ``fields``
    (what was installed, dropped, stubbed; whether it imports), and the build times; returns it."""
    found, pkg = _package_dir(py, engine)
    cuda, cuda_source = engine_cuda(py, engine)
    meta = {"engine": engine, "version": found, "python": py, "package_dir": pkg, "cuda": cuda, "cuda_source": cuda_source,
            **fields, "built_seconds": round(time.monotonic() - t0, 1), "build_steps_seconds": steps,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _meta_path(d).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def weaker_here(store) -> list[str]:
    """The engine versions (``engine==version``) whose answers a run's chapter 02 recorded from the engine's code run
    (method ``dynamic``, in table ``selection`` or ``selection_matrix``) and whose environment prepared on this machine is
    a static-only build: executed again here, the chapter would answer them from the source alone, and a later answer
    stands (``standing.standing_answers``), so it would replace a stronger reading with a weaker one."""
    specs = {f"{r['engine']}=={r['version']}" for r in store.rows("selection")
             if r.get("method") == "dynamic" and r.get("engine") and r.get("version")}
    specs |= {r["engine_spec"] for r in store.rows("selection_matrix") if r.get("method") == "dynamic" and r.get("engine_spec")}
    out = []
    for spec in sorted(specs):
        try:
            if resolve_engine(spec).static_only:
                out.append(spec)
        except EngineError:   # not prepared here: chapter 02 skips it, and no answer of it is recorded again
            continue
    return out
