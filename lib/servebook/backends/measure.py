"""Chapter 03's sweep: force each attention backend in turn, check it really ran and gave the default's tokens, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)
    rows = force_each_backend(eng, model_dir, [None, "eager"], store, host=get_host("ssh://gpu-box"), host_model=path_there)

For each backend: start the server with it forced, read the engine's own report of what
it loaded, run greedy completions of a fixed prompt set and compare their tokens with the
engine's default, compare its decode-step token ids with the default's (``agreement.py``: the
check that runs the forced decode kernel), take a short single-stream measurement, stop the
server, and check the port is free again. Each outcome (ok, rejected, failed to start, crashed, wrong output, and no
rate: every check passed but no decode rate was timed, with why) is a row in the run's ``backends`` table; "ok" means
measured; a failure never stops the sweep.

With a ``host`` that is not this process (``servebook.hosts``: SSH, or a recording) every server
starts on the host (``host.serve``), and everything that talks to it runs there too: the greedy
completions and the server-info request (servebook functions called on the host), the single-stream
measurement (chapter 05's client, ``bench.single_stream(host=...)``), the port check after stop and
the check for servers an earlier run left running. Nothing is timed across the network. The engine's
log is fetched from the host into the run directory. The tokenizer (for comparing tokens) stays here.

Here the sweep's plan (what runs, what a run already measured, the engine's own validation first); one configuration
started, checked and measured is ``serve``, its further starts and the servers started together ``restarts``, what
its outcome is read from ``checks``, ``outputs`` and ``agreement``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable

from ..engines import EngineAdapter
from ..errors import EngineError
from ..results import RunStore
from ..servers import leftover_servers, starts_overlap_here
from .agreement import prompt_ids
from .checks import _remote
from .outputs import PROBE_PROMPTS
from .restarts import _overlapped, _restarts
from .serve import NO_RATE, _mode_args, _record_row, _run_one, _Sweep

__all__ = ["force_each_backend"]


_IMPORT_LOCK = threading.Lock()


def _load_tokenizer(model_dir):
    """The model's tokenizer. Under a lock: transformers resolves its names lazily, and two sweeps importing it at
    once from threads (one engine per GPU) failed on an H200 with "cannot import name 'AutoTokenizer'"."""
    with _IMPORT_LOCK:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))


def force_each_backend(
    engine: EngineAdapter,
    model_dir: Path,
    backends: list[str | None],
    store: RunStore,
    *,
    max_tokens: int = 32,
    runs: int = 3,
    ready_timeout: float = 300,
    progress: Callable[[str], None] | None = print,
    host=None,
    host_model: str | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
    modes: list[str] | tuple[str, ...] = ("default",),
    preflight: bool = True,
    env: dict[str, str] | None = None,
    eager_only: list[str] | tuple[str, ...] = (),
    starts: int = 1,
    overlap_starts: bool | None = None,
) -> list[dict]:
    """Run the sweep; ``None`` in ``backends`` means the engine's default (auto).

    ``host``: where the servers and everything that talks to them run (default: here, as ``Server``);
    ``host_model``: the model directory as that host sees it (default ``model_dir``); ``model_dir``
    is still read here for the tokenizer. ``extra_args``: server flags added to every launch.
    ``modes``: "graph" (the engine's default, CUDA graphs), "eager" (its own flag that turns them off),
    "default" (the engine as it starts). ``preflight``: first ask the engine's own argument and backend
    validation about every candidate, in one process; a candidate it refuses is recorded as rejected
    with its reason, and no server is started for it. ``env``: added to every server's environment
    (``CUDA_VISIBLE_DEVICES`` to give each engine of a parallel sweep its own GPU). ``eager_only``: the
    backends ("auto" for the default) that also run in "eager" mode; empty: all of them. ``starts``: server starts per
    configuration whose output was correct: after the first (every check and the rate), the server is stopped, started
    again and only the rate measured, ``starts - 1`` times; each start's rate is in the row's ``starts`` list and
    ``decode_tok_s`` / ``decode_tok_s_ci95`` are the mean and 95% t-interval over the per-start means (with one start,
    the interval within it; ``ci_over`` says which).

    ``overlap_starts``: start the sweep's servers together and measure them one at a time (``starts_overlap_here``; None:
    when the servers run on this machine's CPU, False: one after the other as on a GPU, True: together wherever they
    run here). No server is ever starting while another is measured: all the first starts are launched at once and
    waited for until each is ready or failed, then each is checked and measured in turn and stopped right after; the
    further starts (``starts``) of the correct ones are launched together the same way afterwards. Each row's
    ``ready_s`` is still its own server's time to ready (from its own launch, on a CPU shared with the others that
    start beside it), and ``started_with`` names the configurations whose servers started beside it.
    """
    say = progress or (lambda _m: None)
    ctx = _Sweep(engine=engine, store=store, say=say, host=host, remote=_remote(host), max_tokens=max_tokens, runs=runs,
                 ready_timeout=ready_timeout, tokenizer=_load_tokenizer(model_dir),
                 served_from=str(host_model or model_dir), version=engine.version(), extra=list(extra_args), env=dict(env or {}),
                 starts=max(1, int(starts)))
    _references(ctx)
    _report_stale(ctx)
    modes = [m for m in modes if m != "eager" or engine.eager_args is not None] or ["default"]
    checked = _preflight(ctx, backends, modes) if preflight else {}
    plan = _plan(ctx, backends, modes, eager_only)
    measured = _measure(ctx, [p for p in plan if isinstance(p, tuple)], checked, model_dir, overlap_starts)
    rows = []
    for p in plan:
        rows.extend([measured[p]] if isinstance(p, tuple) else p)
    return rows


def _references(ctx: _Sweep) -> None:
    """The prompts' token ids, and the default's outputs where this run already checked them (the reference of the rest:
    a default whose rate was not timed, ``NO_RATE``, served them all the same)."""
    ctx.prompt_ids = prompt_ids(ctx.tokenizer, PROBE_PROMPTS)
    for prior in ctx.store.find("backends", engine=ctx.engine.name, attention="auto"):
        if prior.get("outcome") not in ("ok", NO_RATE):
            continue
        ctx.reference = prior.get("completions")
        ctx.reference_lp = prior.get("teacher_forced")
        ctx.reference_decode = prior.get("decode_reference")


def _plan(ctx: _Sweep, backends: list[str | None], modes: list[str], eager_only) -> list:
    """Per configuration, in sweep order: its rows already measured in this run, or ``(backend, mode)`` to run."""
    engine, plan = ctx.engine, []
    for backend in backends:
        for mode in modes:
            label = backend or "auto"
            if mode == "eager" and eager_only and label not in eager_only:
                continue
            done = ctx.store.find("backends", engine=engine.name, attention=label, mode=mode) or (
                ctx.store.find("backends", engine=engine.name, attention=label) if mode == "default" else [])
            if done:
                ctx.say(f"{engine.name} {label} ({mode}): already measured in this run, skipped")
            plan.append(done or (backend, mode))
    return plan


def _measure(ctx: _Sweep, todo: list[tuple], checked: dict, model_dir, overlap_starts: bool | None) -> dict:
    """Each configuration to run, measured over its starts and recorded: ``{(backend, mode): row}``; one at a time, or
    each round's servers started together where they run on this machine's CPU (``starts_overlap_here``)."""
    overlap, why = ((overlap_starts, "overlap_starts=True") if overlap_starts is not None
                    else starts_overlap_here(len(todo), model_dir, env=ctx.env, remote=ctx.remote))
    measured: dict = {}
    if overlap and len(todo) > 1 and not ctx.remote:
        ctx.say(f"{ctx.engine.name}: {why}: the servers of each round start together, then are measured one at a time")
        _overlapped(ctx, todo, checked, measured)
        return measured
    for backend, mode in todo:
        row = _run_one(ctx, backend, mode, checked.get(backend or "auto"))
        _restarts(ctx, backend, mode, row)
        measured[(backend, mode)] = _record_row(ctx, row)
    return measured


def _report_stale(ctx: _Sweep) -> None:
    registry = ctx.store.path / "servers.jsonl"
    for stale in (_leftovers_on(ctx.host, registry) if ctx.remote else leftover_servers(registry)):
        # A server an earlier, crashed run of this same run id started and never stopped. It is reported,
        # not killed: its pid may since have been reused by an unrelated program.
        note = {"engine": stale.get("engine"), "pid": stale.get("pid"), "pgid": stale.get("pgid"), "port": stale.get("port"),
                "cmd": stale.get("cmd"), "action": "reported, not stopped"}
        if not ctx.store.done("stale_servers", pid=note["pid"], port=note["port"]):
            ctx.store.append("stale_servers", note)
        ctx.say(f"warning: a server from an earlier run of {ctx.store.path.name} still runs (pid {note['pid']}, port {note['port']}): "
                f"servebook leaves it alone; stop it with `kill -- -{note['pgid']}` once you have checked it is yours")


def _preflight(ctx: _Sweep, backends: list[str | None], modes: list[str]) -> dict:
    """The engine's own verdict on each candidate (``EngineAdapter.preflight``), recorded in ``backends_preflight``."""
    if ctx.remote or type(ctx.engine).preflight is EngineAdapter.preflight:
        return {}
    launches = {}
    for b in backends:
        try:
            launch = ctx.engine.launch(ctx.served_from, attention=b, extra=ctx.extra + _mode_args(ctx.engine, modes[0]))
        except EngineError:
            continue  # refused by the parser: the sweep records it
        launches[b or "auto"] = launch.cmd[ctx.engine._args_start:]
    if not launches:
        return {}
    t0 = time.monotonic()
    ctx.say(f"{ctx.engine.name}: asking its own validation about {len(launches)} candidates (no server started) ...")
    res = ctx.engine.preflight(ctx.served_from, launches)
    secs = round(time.monotonic() - t0, 1)
    for label, verdict in res.get("results", {}).items():
        judged = [r for r in ctx.store.find("backends_preflight", engine=ctx.engine.name, attention=label) if r.get("ok") is not None]
        if not judged:  # first asked, or asked before only by a harness that could not judge it
            ctx.store.append("backends_preflight", {"engine": ctx.engine.name, "attention": label, "method": res.get("method"),
                                                    "seconds": secs, **verdict})
    if res.get("error"):
        ctx.store.record_failure("backend preflight", res["error"], engine=ctx.engine.name)
        ctx.say(f"{ctx.engine.name}: its validation could not be asked ({res['error']}); every candidate is started")
    return res.get("results", {})


def _group_alive_on(host, pgid: int) -> bool:
    return host.run(["kill", "-0", "--", f"-{int(pgid)}"], timeout=15, label=f"alive pgid {pgid}").rc == 0


def _leftovers_on(host, registry: Path) -> list[dict]:
    """``servers.leftover_servers`` for servers started on ``host``: alive is asked there."""
    if not Path(registry).exists():
        return []
    state: dict[int, dict] = {}
    for line in Path(registry).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("host", "local") != host.spec:
            continue
        if row.get("event") == "started":
            state[row["pgid"]] = row
        elif row.get("event") == "stopped":
            state.pop(row.get("pgid"), None)
    return [r for pgid, r in state.items() if _group_alive_on(host, pgid)]
