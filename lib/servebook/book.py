"""Run the whole book: every chapter executed with papermill, rendered to HTML.

    result = run_book({"engine": "transformers", "smoke": True}, out="build/book")
    result.index        # build/book/index.html
    result.run_dir      # runs/<host>/<run-id>/ with manifest.json and the tidy tables

A chapter that fails does not stop the book: its executed notebook (with papermill's
failure banner) is rendered, the failure is recorded in the run, and the next chapter
runs. Re-running with the same ``run_id`` resumes: measurements already recorded in the
run directory are not taken again.

Here the run: its parameters checked and sized, its run directory opened, each chapter executed in turn
(``servebook.chapters``: the notebooks, their parameters, papermill), then rendered (``servebook.render``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .errors import EngineError, ParameterError, ServebookError
from .executions import executing
from .params import PARAMS, check_chapter_param, check_here, model_defaults, validate
from .paths import book_root
from .provenance import host_fingerprint, record_code, software_versions
from .results import RunStore, _now
from .secret_refs import hide_secrets
from .chapters import Chapter, _coerce_declared, _execute, chapters, notebook_parameters
from .recorded import MEASURING, ran_with, recorded_parameters
from .render import render_book

__all__ = ["BookResult", "run_book", "refresh_findings", "refresh_chapter"]


@dataclass
class BookResult:
    run_dir: Path
    out: Path
    index: Path
    chapters: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["status"] == "ok" for c in self.chapters)


def _require_notebook_tools() -> None:
    import importlib.util

    missing = [m for m in ("papermill", "jupytext", "nbformat", "nbconvert", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        raise ServebookError(f"running the book needs {', '.join(missing)} in this interpreter ({sys.executable}): "
                             f"install servebook with its dependencies (make env, or pip install -e .)")


def run_book(
    params: dict[str, Any] | None = None,
    out: str | os.PathLike = "build/book",
    runs_root: str | os.PathLike = "runs",
    run_id: str | None = None,
    only: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    cell_timeout: int | None = None,
    progress: Callable[[str], None] | None = print,
    record: bool = False,
    again: bool = False,
) -> BookResult:
    """Execute the chapters (``only``: numbers or slugs) and render the book under ``out``.

    ``run_id`` of a recorded run resumes it: what it recorded is not measured again. ``again``: measure it again, the rows
    of this execution kept apart from the earlier ones' (field ``execution``; the pages read what stands, never a row twice).

    ``record``: every host interaction of the chapters goes to ``<run_dir>/cassette.jsonl``, so that
    ``host='replay:<run_dir>'`` can rebuild the book later without the host. A what-if (``profile``) with a
    pinned engine (``sglang==0.5.9``) first prepares that version's cached environment, as
    ``servebook engines add`` does.
    """
    say = progress or (lambda _m: None)
    _require_notebook_tools()
    values = validate(params or {})
    from .paths import writable_dir

    writable_dir(out)  # the book's directory: a path that cannot be made is said now, not after the chapters ran
    selected = _select_chapters(only)
    # Check chapter-specific parameters before anything runs.
    declared = {c.stem: notebook_parameters(c.source) for c in selected}
    extra = _check_extra(dict(extra or {}), declared)
    if run_id and any(c.number == "02" for c in selected):   # a resumed run's recorded answers (a new id has none)
        _refuse_weaker_answers(RunStore.open(runs_root, host=values["host"], run_id=run_id))
    check_here(values, extra)  # a pinned engine version, the backends named: against this host, before anything starts
    values, extra = hide_secrets(values), hide_secrets(extra)  # a secret reaches the chapters as a reference (secret_refs)
    _prepare_engine(values, extra, say)
    sized = _sized_defaults(selected, declared, values, extra, say)
    store = _open_run(runs_root, run_id, {**values, **extra}, say, sized, again)
    if record:
        from .hosts import start_recording

        if values["host"].startswith("replay:"):
            raise ParameterError("record", True, "a replay is not recorded again; record with --host local or ssh://...")
        say(f"recording every host interaction in {start_recording(store.path, values['host'])}")
    if values["model"] == "embedded":  # built here too: the notebooks read its tokenizer and config
        from .embedded import build_embedded_model

        build_embedded_model(progress=say)
    results = _run_chapters(selected, declared, values, extra, store, cell_timeout, say, sized)
    store.write_manifest({"finished": _now(), "chapters": results})
    index = _render_run(store, Path(out))
    say(f"book: {index.resolve()}")
    return BookResult(run_dir=store.path, out=Path(out), index=index, chapters=results)


def _select_chapters(only: list[str] | None) -> list[Chapter]:
    """The chapters ``only`` names (numbers, slugs or stems), in reading order; all of them for none."""
    all_chapters = chapters()
    if not only:
        return all_chapters
    wanted = {str(o).strip() for o in only}
    known = {c.number for c in all_chapters} | {c.slug for c in all_chapters} | {c.stem for c in all_chapters}
    bad = sorted(wanted - known)
    if bad:
        raise ParameterError("only", bad[0], f"valid chapters: {', '.join(c.stem for c in all_chapters)}")
    return [c for c in all_chapters if {c.number, c.slug, c.stem} & wanted]


def _refuse_weaker_answers(store: RunStore) -> None:
    """Refuse to execute chapter 02 of a recorded run where a version it answered from the engine's code run has only a
    static-only environment here (``selection.envs.weaker_here``): the chapter's later answers stand, so a reading of the
    source alone would replace one the engine's code gave."""
    from .selection.envs import weaker_here

    weaker = weaker_here(store)
    if weaker:
        raise EngineError(f"chapter 02 of {store.path} recorded {', '.join(weaker)} answering from the engine's own code; "
                          "this machine's environment of it is a static-only build (its source alone), whose answers "
                          f"would stand over those: build a full one (servebook engines add {weaker[0]} --force) or "
                          "execute chapter 02 again where one is")


def _check_extra(extra: dict[str, Any], declared: dict[str, dict]) -> dict[str, Any]:
    """Chapter parameters (``-p NAME=VALUE``) coerced to the type a selected chapter declares, and checked."""
    known_extra = {name: spec for d in declared.values() for name, spec in d.items()}
    for name, value in list(extra.items()):
        if name in PARAMS:
            raise ParameterError(name, value, f"pass --{name.replace('_', '-')} instead of -p {name}=...")
        if name not in known_extra:
            raise ParameterError(name, value, f"no chapter declares it; chapter parameters: {', '.join(sorted(set(known_extra) - set(PARAMS) - {'run_dir'}))}")
        extra[name] = _coerce_declared(name, value, known_extra[name])
        check_chapter_param(name, extra[name])
    return extra


def _sized_defaults(selected: list[Chapter], declared: dict, values: dict, extra: dict,
                    say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Per chapter stem, the parameters sized to this run's model (``params.MODEL_DEFAULTS``) that ``-p`` leaves open."""
    sized = {}
    for c in selected:
        mine = {k: v for k, v in model_defaults(values["model"], c.number).items() if k in declared[c.stem] and k not in extra}
        if mine:
            sized[c.stem] = mine
            say(f"chapter {c.number}: sized to the {values['model']} model: "
                + ", ".join(f"{k}={v}" for k, v in mine.items()) + " (-p NAME=VALUE overrides)")
    return sized


def _prepare_engine(values: dict, extra: dict, say: Callable[[str], None]) -> None:
    """A what-if with a pinned engine version reads that version in its own cached environment: prepare it
    now, with pip's steps shown, so that chapter 01 finds it (a failure stops here, naming the command)."""
    spec = values["engine"]
    if not values.get("profile") or "==" not in spec or extra.get("engine_python"):
        return
    from .engines.envs import parse_engine_spec, resolve_engine
    from .selection.envs import add_engine

    if parse_engine_spec(spec)[0] == "transformers":
        return
    try:
        resolve_engine(spec)
        return
    except EngineError:
        pass
    say(f"{spec}: no environment prepared yet; preparing one (once per version, a few minutes) ...")
    try:
        add_engine(spec, progress=say)  # with a "still preparing" line every minute: pip is quiet for minutes at a time
    except ServebookError as exc:
        raise EngineError(f"the what-if reads {spec} in its own environment, and preparing it failed: {exc}; "
                          f"prepare it with `servebook engines add {spec}`, then run this command again") from exc


def _open_run(runs_root, run_id: str | None, parameters: dict, say: Callable[[str], None],
              sized: dict | None = None, again: bool = False) -> RunStore:
    """The run directory, new or resumed, with its manifest: where and with what code it runs, and which execution of
    the run id this is (``execution``: its number, and whether it measures ``again``)."""
    store = RunStore.open(runs_root, host=parameters["host"], run_id=run_id)
    previous = store.manifest
    resumed = "started" in previous
    executions = list(previous.get("executions") or [])
    number = (executions[-1]["id"] if executions else (1 if resumed else 0)) + 1  # unstamped rows are execution 1's
    execution = {"id": number, "again": bool(again and resumed), "at": _now()}
    store.write_manifest({"execution": execution, "executions": executions + [execution]})
    here = {"servebook_version": __version__, "git_revision": record_code(store), "versions": software_versions(),
            "host_fingerprint": host_fingerprint()}
    if sized:
        here["chapter_defaults"] = sized
    if not resumed:
        store.write_manifest({"parameters": parameters, **here, "started": _now(), "finished": None})
    else:
        # The run's identity (where and with what it was measured) stays as first recorded;
        # each resumption is logged with its own fingerprint.
        here.pop("chapter_defaults", None)
        resumptions = list(previous.get("resumptions", [])) + [{"at": _now(), "parameters": parameters, **here,
                                                                 **({"chapter_defaults": sized} if sized else {})}]
        store.write_manifest({"resumptions": resumptions, "finished": None})
    say(f"run directory: {store.path}" + ((f" (measuring again): execution {number}, earlier executions' rows kept apart"
                                             if execution["again"] else f" (resuming): execution {number}; what is recorded "
                                             f"is not measured again (--again measures it again)") if resumed else ""))
    return store


def _run_chapters(selected: list[Chapter], declared: dict, values: dict, extra: dict, store: RunStore,
                  cell_timeout: int | None, say: Callable[[str], None], sized: dict | None = None) -> list[dict]:
    """Execute each chapter in turn; a failed one is recorded and the next one runs."""
    executed_dir = store.path / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for i, chapter in enumerate(selected, 1):
        t0 = time.monotonic()
        say(f"[{i}/{len(selected)}] chapter {chapter.title} ...")
        mine = {**(sized or {}).get(chapter.stem, {}), **extra}
        with executing():  # one id on every row this chapter's execution writes, its kernel's and its outcome's
            status, error = _execute(chapter, declared[chapter.stem], values, mine, store, executed_dir, cell_timeout)
            seconds = round(time.monotonic() - t0, 1)
            results.append({"chapter": chapter.stem, "title": chapter.title, "status": status, "error": error, "seconds": seconds})
            store.append("chapters", {**results[-1], "parameters": ran_with(declared[chapter.stem], values, mine)})
        say(f"      {status} in {seconds}s" + (f": {error}" if error else ""))
    return results


def _render_run(store: RunStore, out: Path) -> Path:
    """``render_book`` for a run just executed: a render problem must not read as a lost run."""
    try:
        return render_book(store.path, out)
    except Exception as exc:  # the run's results are on disk
        store.record_failure("render book", exc)
        raise ServebookError(f"the chapters ran and their results are in {store.path}, but rendering the book failed: "
                             f"{type(exc).__name__}: {str(exc)[:300]}. Render it here once fixed, or on another machine, "
                             f"with: servebook html {store.path}") from exc


# Chapters that read code and recorded tables and measure nothing: they can be executed again on a recorded run anywhere.
_OFFLINE = {"01": "detect_capabilities", "02": "read_backend_selection", "03": "force_each_backend", "04": "tune_nccl",
            "05": "benchmark_single_stream", "06": "findings"}


_OFFLINE_FIXED = {n: {"measure": False} for n in MEASURING}  # they measure; executed again, they re-read the tables


def refresh_findings(run_dir: str | os.PathLike, compare_with: str = "", cell_timeout: int | None = 600) -> dict:
    """Execute chapter 06 again on a recorded run (it reads the run's tables and measures nothing)."""
    return refresh_chapter(run_dir, "06", {"compare_with": compare_with} if compare_with else {}, cell_timeout)


def refresh_chapter(run_dir: str | os.PathLike, number: str, extra: dict | None = None, cell_timeout: int | None = 600,
                    progress: Callable[[str], None] | None = print) -> dict:
    """Execute a chapter again on a recorded run; ``extra``: chapter parameters (``-p``), over the ones the chapter's
    recorded execution used (:func:`recorded_parameters`, reused and said through ``progress``).

    Its executed notebook replaces ``run_dir/notebooks/<chapter>.ipynb``; the outcome is appended to
    the run's ``chapters`` table. Chapters 01, 03, 04 and 05 measure nothing then (``measure=False``): their prose and
    verdicts are computed again from what the host recorded (chapter 01 from its ``probe.json`` and tables).
    """
    say = progress or (lambda _m: None)
    store = RunStore(Path(run_dir))
    if not store.manifest_path.exists():
        raise ParameterError("run_dir", str(run_dir), "a run directory with manifest.json (servebook book writes one)")
    if number not in _OFFLINE:
        raise ParameterError("chapter", number, f"one of {', '.join(_OFFLINE)}: the others measure, so they run on their host "
                                                "(servebook book --run-id ID --only NN resumes a run there)")
    if number == "02":
        _refuse_weaker_answers(store)
    chapter = next(c for c in chapters() if c.slug == _OFFLINE[number])
    declared = notebook_parameters(chapter.source)
    params = store.manifest.get("parameters") or {}
    values = {k: params[k] for k in PARAMS if k in params}
    unknown = sorted(set(extra or {}) - set(declared))
    if unknown:
        raise ParameterError(unknown[0], (extra or {})[unknown[0]], f"chapter {number} declares {', '.join(sorted(declared))}")
    given = {k: _coerce_declared(k, v, declared[k]) for k, v in (extra or {}).items() if v != ""}
    reused, source = recorded_parameters(store, chapter, declared)
    reused = {k: v for k, v in reused.items() if k not in given}
    said = {k: v for k, v in reused.items() if values.get(k, object()) != v}  # the run's own engine, model ... go without saying
    if said:
        say(f"chapter {number}: reusing the parameters {source} used: " + ", ".join(f"{k}={v!r}" for k, v in sorted(said.items()))
            + " (-p NAME=VALUE overrides)")
    extra = {**(store.manifest.get("chapter_defaults") or {}).get(chapter.stem, {}), **reused, **given}  # as the run measured
    extra.update(_OFFLINE_FIXED.get(number, {}))
    executed_dir = store.path / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # Chapter 06 runs with the book's root as its working directory: a run inside the book is named relative
    # to it, so the rendered page shows a path that means something on any checkout.
    try:
        run_dir_arg = str(store.path.resolve().relative_to(book_root().resolve()))
    except ValueError:
        run_dir_arg = None
    with executing():  # an execution of its own: what it records again is told from what it repeats within itself
        status, error = _execute(chapter, declared, values, extra, store, executed_dir, cell_timeout, run_dir_arg)
        row = {"chapter": chapter.stem, "title": chapter.title, "status": status, "error": error,
               "seconds": round(time.monotonic() - t0, 1), "refreshed": True, "git_revision": record_code(store),
               "parameters": ran_with(declared, values, extra)}
        store.append("chapters", row)
    return row
