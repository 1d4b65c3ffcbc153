"""Chapter 03: force each attention backend, check it really ran, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)
    rows = force_each_backend(eng, model_dir, [None, "eager"], store, host=get_host("ssh://gpu-box"), host_model=path_there)

For each backend: start the server with it forced, read the engine's own report of what
it loaded, run greedy completions of a fixed prompt set and compare their tokens with the
engine's default, compare its decode-step token ids with the default's (``agreement.py``: the
check that runs the forced decode kernel), take a short single-stream measurement, stop the
server, and check the port is free again. Each outcome (ok, rejected, failed to start, crashed, wrong output)
is a row in the run's ``backends`` table; a failure never stops the sweep.

With a ``host`` that is not this process (``servebook.hosts``: SSH, or a recording) every server
starts on the host (``host.serve``), and everything that talks to it runs there too: the greedy
completions and the server-info request (servebook functions called on the host), the single-stream
measurement (chapter 05's client, ``bench.single_stream(host=...)``), the port check after stop and
the check for servers an earlier run left running. Nothing is timed across the network. The engine's
log is fetched from the host into the run directory. The tokenizer (for comparing tokens) stays here.

Chapter 03's page: ``servebook.backends.figures`` (what the page states, computed from the tables; ``servebook.stated``
recomputes it) and ``servebook.backends.report`` (its candidates, table, plot and sentences, tagged).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from .agreement import MIN_AGREEMENT, decode_agreement, prompt_ids, reference_decodes
from ..engines import CLIRejected, EngineAdapter
from ..errors import EngineError, ServebookError, ServerError
from ..results import RunStore
from ..servers import Server, leftover_servers, port_listening, start_together, take_started

__all__ = ["PROBE_PROMPTS", "force_each_backend", "greedy_completions", "compare_tokens", "runnable_here", "engine_error"]

# A fixed, seeded prompt set: the same for every backend and engine.
PROBE_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Attention backends differ in",
    "In 1969, the first",
]


# transformers' flash-attention implementations and the package each one imports.
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface", "flash_attention_4": "flash_attn"}


def runnable_here(name: str, smoke: bool = False, host=None) -> tuple[bool, str]:
    """Whether a backend can run on this host at all, and if not, why (recorded as 'not run here').

    With a ``host`` that is not this process, the question is answered on that host."""
    import importlib.util

    if _remote(host):
        ok, why = host.call("servebook.backends.measure:runnable_here", {"name": name, "smoke": smoke}, timeout=120,
                            label=f"runnable_here {name}")
        return bool(ok), str(why)

    if name.startswith("flash_attention"):
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            return False, "needs a CUDA GPU"
        pkg = _FLASH_PACKAGES.get(name, "flash_attn")
        if importlib.util.find_spec(pkg) is None:
            return False, f"needs the {pkg} package"
    if "/" in name:  # a hub kernel (e.g. kernels-community/flash-attn2): fetched from the Hugging Face Hub at load
        if importlib.util.find_spec("kernels") is None:
            return False, "a hub kernel: needs the kernels package, and the Hub to fetch the kernel from"
    if name == "flex_attention" and smoke:
        return False, "skipped in smoke mode (compiles kernels on first use)"
    return True, ""


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:400]
        raise ServebookError(f"{url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:  # reset, refused, timed out, a torn answer
        raise ServebookError(f"{url} gave no answer ({type(exc).__name__}: {exc}); the server may have died, see its log") from exc


def greedy_completions(base_url: str, model: str, prompts: list[str], max_tokens: int, timeout: float = 120) -> list[str]:
    """Greedy (temperature 0) completions, one request per prompt."""
    out = []
    for prompt in prompts:
        data = _post(f"{base_url}/v1/completions",
                     {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": False},
                     timeout)
        out.append(data["choices"][0]["text"])
    return out


def compare_tokens(tokenizer, reference: list[str], candidate: list[str]) -> dict:
    """Token agreement between two sets of completions and the first divergence."""
    total = same = 0
    first = None
    for i, (a, b) in enumerate(zip(reference, candidate)):
        ta, tb = tokenizer.encode(a, add_special_tokens=False), tokenizer.encode(b, add_special_tokens=False)
        n = max(len(ta), len(tb))
        total += n
        for j in range(n):
            if j < len(ta) and j < len(tb) and ta[j] == tb[j]:
                same += 1
            elif first is None:
                first = {"prompt": i, "token": j}
    return {"agreement": round(same / total, 4) if total else None, "first_divergence": first}


RATE_INPUT_LEN = 32  # prompt tokens of chapter 03's short single-stream measurement (prompt seed 0)


def _decode_rate(base_url: str, model: str, engine: str, attention: str, max_tokens: int, runs: int, tokenizer, host=None) -> dict:
    """A short single-stream measurement with chapter 05's client (real streamed tokens), on ``host`` when given; with
    its method (``bench_*``: prompt tokens, seed and fingerprint, output tokens, warm-ups, runs) for comparing it with
    chapter 05's (``servebook.findings.default_methods``)."""
    from .. import bench

    prompts = bench.build_prompts(tokenizer, input_len=RATE_INPUT_LEN, n=max(2, runs + 1), seed=0)
    s = bench.single_stream(base_url, model, prompts, store=None, tokenizer=tokenizer, engine=engine, attention=attention,
                            max_tokens=max_tokens, runs=runs, warmup=1, progress=False, host=host if _remote(host) else None)
    return {
        "decode_tok_s": s["decode_tok_s_mean"],
        "decode_tok_s_ci95": s["decode_tok_s_ci95"],
        "ttft_ms": s["ttft_s_mean"] * 1000 if s["ttft_s_mean"] is not None else None,
        "bench_failed": s["failed"],
        "bench_method": s["method"],
        "bench_input_len": RATE_INPUT_LEN, "bench_max_tokens": max_tokens, "bench_prompt_seed": 0, "bench_runs": runs, "bench_warmup": 1,
        "bench_prompts_sha": s.get("prompts_sha"),
    }


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
    remote = _remote(host)
    ctx = _Sweep(engine=engine, store=store, say=say, host=host, remote=remote, max_tokens=max_tokens, runs=runs,
                 ready_timeout=ready_timeout, tokenizer=_load_tokenizer(model_dir),
                 served_from=str(host_model or model_dir), version=engine.version(), extra=list(extra_args), env=dict(env or {}),
                 starts=max(1, int(starts)))
    ctx.prompt_ids = prompt_ids(ctx.tokenizer, PROBE_PROMPTS)
    for prior in store.find("backends", engine=engine.name, attention="auto", outcome="ok"):
        ctx.reference = prior.get("completions")
        ctx.reference_lp = prior.get("teacher_forced")
        ctx.reference_decode = prior.get("decode_reference")
    _report_stale(ctx)
    modes = [m for m in modes if m != "eager" or engine.eager_args is not None] or ["default"]
    checked = _preflight(ctx, backends, modes) if preflight else {}
    plan: list = []  # per configuration, in sweep order: its rows already measured, or (backend, mode) to run
    for backend in backends:
        for mode in modes:
            label = backend or "auto"
            if mode == "eager" and eager_only and label not in eager_only:
                continue
            done = store.find("backends", engine=engine.name, attention=label, mode=mode) or (
                store.find("backends", engine=engine.name, attention=label) if mode == "default" else [])
            if done:
                say(f"{engine.name} {label} ({mode}): already measured in this run, skipped")
            plan.append(done or (backend, mode))
    todo = [p for p in plan if isinstance(p, tuple)]
    overlap, why = (overlap_starts, "overlap_starts=True") if overlap_starts is not None else starts_overlap_here(len(todo), model_dir, env=ctx.env, remote=ctx.remote)
    measured: dict = {}
    if overlap and len(todo) > 1 and not remote:
        say(f"{engine.name}: {why}: the servers of each round start together, then are measured one at a time")
        _overlapped(ctx, todo, checked, measured)
    else:
        for backend, mode in todo:
            row = _run_one(ctx, backend, mode, checked.get(backend or "auto"))
            _restarts(ctx, backend, mode, row)
            measured[(backend, mode)] = _record_row(ctx, row)
    rows = []
    for p in plan:
        rows.extend([measured[p]] if isinstance(p, tuple) else p)
    return rows


def _record_row(ctx: _Sweep, row: dict) -> dict:
    ctx.store.append("backends", row)
    ctx.say(f"{ctx.engine.name} {row['attention']} ({row['mode']}): {row.get('outcome')}"
            + (f" ({row.get('error')})" if row.get("error") else ""))
    return row


# -- servers started together on a CPU host ---------------------------------------------------------------------------
# A ready server waiting for requests takes next to no CPU: an idle, ready `transformers serve` (the embedded model, on
# this book's 2-core CPU host) used 0.02-0.04 s of CPU time per 10 s (user + system of its process group, psutil, three
# 10 s windows), and tests/test_backends_overlap.py checks that the servers waiting their turn use under 5% of a core
# each while another one is measured. A server that is *starting* (imports, model load) takes a whole core: that is
# why no server starts while another is measured.
_OVERLAP_MEMORY_SHARE = 0.5  # all the servers' weights, counted twice (loaded copy, load buffers), within this share of free memory


def starts_overlap_here(n: int, model_dir, env: dict | None = None, remote: bool = False) -> tuple[bool, str]:
    """Whether ``n`` servers of ``model_dir`` may start together (and why): only when they run on this machine's CPU,
    that is the host is this process's own (not ``remote``), neither this process's torch nor ``nvidia-smi`` (within
    the servers' ``CUDA_VISIBLE_DEVICES``, from ``env`` or this process) sees a GPU, and ``n`` copies of the model's
    weights fit in memory. A GPU's memory does not hold several servers (each takes its share as it starts): there,
    and on any other host, they start one after the other. Used by chapters 03 (``force_each_backend``) and 05."""
    env = dict(env or {})
    if remote or n < 2:
        return False, "one server at a time"
    visible = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is None or visible.strip() not in ("", "-1"):
        try:
            import torch

            if torch.cuda.is_available():
                return False, "a GPU is visible: one server at a time"
        except ImportError:
            pass
        from ..servers import Launch

        if _gpu_visible(Launch(cmd=[], port=0, env=env)):
            return False, "a GPU is visible: one server at a time"
    try:
        import psutil

        weights = sum(f.stat().st_size for f in Path(model_dir).iterdir() if f.suffix in (".safetensors", ".bin", ".pt", ".gguf"))
        free = psutil.virtual_memory().available
    except (ImportError, OSError):
        return False, "free memory unknown: one server at a time"
    if 2 * n * weights > _OVERLAP_MEMORY_SHARE * free:
        return False, f"{n} copies of {weights / 1e9:.1f} GB of weights do not fit in {free / 1e9:.1f} GB free: one server at a time"
    return True, "the servers run on this machine's CPU"


def _overlapped(ctx: _Sweep, todo: list[tuple], checked: dict, measured: dict) -> None:
    """``force_each_backend``'s sweep in two rounds of servers started together (``starts_overlap_here``): every
    configuration's first start, then the further starts of the correct ones. In each round every server is launched
    at once and waited for until ready or failed, then each in turn is checked and measured and stopped right after.
    A row is recorded as soon as it has all its starts; every server is stopped on every path."""
    rounds: list[dict] = []  # what each round started, for stopping whatever is left on the way out
    try:
        first = [(key, _prepare(ctx, key[0], key[1], checked.get(key[0] or "auto"))) for key in todo]
        rounds.append(_start_together(ctx, [(key, p) for key, p in first if p.get("launch")]))
        names = [_key_label(key) for key, p in first if p.get("launch")]
        rows, again = {}, []
        for key, p in first:
            if p.get("launch") is None:
                rows[key] = p["row"]
            else:
                p["row"]["started_with"] = [n for n in names if n != _key_label(key)]
                rows[key] = _finish(ctx, key[0], p, lambda key=key: take_started(rounds[0], key))
            more = [((key, k), None) for k in _more_starts(ctx, rows[key])]
            if more:
                again.extend(more)
            else:
                _restarts(ctx, key[0], key[1], rows[key], more=[])
                measured[key] = _record_row(ctx, rows[key])
        if not again:
            return
        second = [(key, _prepare_start(ctx, key[0][0], key[0][1], key[1])) for key, _ in again]
        rounds.append(_start_together(ctx, [(key, p) for key, p in second if p.get("launch")]))
        names = [_key_label(key) for key, p in second if p.get("launch")]
        entries: dict = {}
        for key, p in second:
            entries.setdefault(key[0], []).append(_one_more_start(
                ctx, key[0][0], key[0][1], rows[key[0]], key[1], prepared=p, started_with=[n for n in names if n != _key_label(key)],
                take=lambda key=key: take_started(rounds[1], key)))
        for key in todo:
            if key in entries:
                _restarts(ctx, key[0], key[1], rows[key], more=entries[key])
                measured[key] = _record_row(ctx, rows[key])
    finally:
        for started in rounds:
            for srv in started.values():
                if isinstance(srv, Server):
                    srv.stop()


def _start_together(ctx: _Sweep, group: list[tuple]) -> dict:
    """``servers.start_together`` for a round of the sweep: each server's messages named by its configuration."""
    return start_together([(key, p["launch"], p["log_path"]) for key, p in group], registry=ctx.store.path / "servers.jsonl",
                          ready_timeout=ctx.ready_timeout, progress=ctx.say, name=_key_label)


def _key_label(key: tuple) -> str:
    """``sdpa``, ``auto (eager)``, ``sdpa start 1``: a configuration (``(backend, mode)``) or one of its starts."""
    if isinstance(key[0], tuple):
        return f"{_key_label(key[0])} start {key[1]}"
    return (key[0] or "auto") + ("" if key[1] == "default" else f" ({key[1]})")


_IMPORT_LOCK = threading.Lock()


def _load_tokenizer(model_dir):
    """The model's tokenizer. Under a lock: transformers resolves its names lazily, and two sweeps importing it at
    once from threads (one engine per GPU) failed on an H200 with "cannot import name 'AutoTokenizer'"."""
    with _IMPORT_LOCK:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))


class _Sweep:
    """What every start of one sweep shares."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.reference: list[str] | None = None
        self.reference_lp: list | None = None
        self.reference_decode: list | dict | None = None  # the default backend's greedy decode by token ids (agreement.py)
        self.prompt_ids: list[list[int]] = []


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


def _mode_args(engine: EngineAdapter, mode: str) -> list[str]:
    return list(engine.eager_args or ()) if mode == "eager" else []


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


def _run_one(ctx: _Sweep, backend: str | None, mode: str, verdict: dict | None) -> dict:
    """One start: launch, confirm, greedy and teacher-forced agreement, a short measurement, stop."""
    p = _prepare(ctx, backend, mode, verdict)
    if p.get("launch") is None:
        return p["row"]
    registry = ctx.store.path / "servers.jsonl"
    launch, log_path = p["launch"], p["log_path"]
    return _finish(ctx, backend, p, lambda: (
        ctx.host.serve(launch, log_path, registry=registry, ready_timeout=ctx.ready_timeout, progress=ctx.say) if ctx.remote
        else Server.start(launch, log_path, ready_timeout=ctx.ready_timeout, registry=registry, progress=ctx.say)))


def _prepare(ctx: _Sweep, backend: str | None, mode: str, verdict: dict | None) -> dict:
    """A configuration's row and launch (``{"row", "launch", "log_path", "t0"}``); without a launch when nothing is to
    start: refused by the engine's own validation (preflight) or CLI, its row then complete."""
    engine = ctx.engine
    label = backend or "auto"
    row = {"engine": engine.name, "engine_version": ctx.version, "attention": label, "mode": mode}
    t0 = time.monotonic()
    if verdict and verdict.get("ok") is False:
        row.update(outcome="rejected", error=verdict.get("error"), rejected_by="the engine's own validation (preflight; no server started)",
                   seconds=0.0)
        return {"row": row}
    try:
        launch = engine.launch(ctx.served_from, attention=backend, extra=ctx.extra + _mode_args(engine, mode), env=ctx.env,
                               **({"port": ctx.host.free_port()} if ctx.remote else {}))
    except EngineError as exc:  # nothing was started: the engine's own CLI refuses the flag or value, or cannot be read
        row.update(outcome="rejected" if isinstance(exc, CLIRejected) else "failed", error=str(exc), seconds=round(time.monotonic() - t0, 1))
        return {"row": row}
    row["launch"] = launch.shell()
    log_path = ctx.store.path / "logs" / f"{engine.name}-{label.replace('/', '--')}{'' if mode == 'default' else '-' + mode}.log"
    return {"row": row, "launch": launch, "log_path": log_path, "t0": t0}


def _finish(ctx: _Sweep, backend: str | None, p: dict, start: Callable) -> dict:
    """Start (``start()``: the server, ready; used and stopped here) and exercise one configuration; its row.
    ``seconds``: from its launch to its stop; for a server started beside others, less the time it waited, ready, for
    its turn (its ``ready_s`` plus its turn)."""
    row, launch = p["row"], p["launch"]
    t0 = p["t0"]
    try:
        starting = start()
        if row.get("started_with") is not None:
            t0 = time.monotonic() - (starting.ready_s or 0.0)
        with starting as srv:
            _exercise(ctx, srv, backend, row)
    except _Recorded:
        pass
    except ServerError as exc:
        if row.get("started_with") is not None:
            t0 = time.monotonic()  # failed to start beside others: its own time is not told apart from theirs
        rejected = backend is not None and _rejection(exc.log_tail, backend)
        row.update(outcome="rejected" if rejected else "failed to start",
                   error=rejected or engine_error(exc.log_tail) or str(exc), server_error=str(exc), log_tail=exc.log_tail[-2000:])
    except ServebookError as exc:
        row.update(outcome="failed", error=str(exc))
    row["port_free_after"] = not _port_listening_on(ctx.host, launch.port) if ctx.remote else not port_listening(launch.port)
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _restarts(ctx: _Sweep, backend: str | None, mode: str, row: dict, more: list[dict] | None = None) -> None:
    """The rate over ``ctx.starts`` server starts: the first start's (from ``_run_one``), then the server started again
    and only the rate measured; each start in ``row["starts"]`` (field ``start``), the row's rate and interval taken
    over the per-start means (``bench.mean_ci``). A start that fails is recorded in the list with its error. ``more``:
    the further starts' entries when they were already taken (servers started together, ``_overlapped``)."""
    more = [_one_more_start(ctx, backend, mode, row, k) for k in _more_starts(ctx, row)] if more is None else more
    _rate_over_starts(ctx, row, more)


def _more_starts(ctx: _Sweep, row: dict) -> range:
    """The further starts ``k`` a measured configuration gets: ``1 .. starts - 1`` when its output was correct."""
    return range(1, ctx.starts if row.get("decode_tok_s") is not None and row.get("outcome") == "ok" else 1)


def _rate_over_starts(ctx: _Sweep, row: dict, more: list[dict]) -> None:
    from ..bench import mean_ci

    row["bench_model"] = ctx.served_from
    if row.get("decode_tok_s") is None:
        return
    first = {"start": 0, "decode_tok_s": row["decode_tok_s"], "decode_tok_s_ci95": row.get("decode_tok_s_ci95"), "ready_s": row.get("ready_s")}
    if row.get("started_with") is not None:
        first["started_with"] = row["started_with"]
    entries = [first, *more]
    earlier = _earlier_starts(ctx, row)
    if earlier:  # measured again (--again): further starts of this configuration and method, pooled with the earlier ones
        k0 = 1 + max(int(e.get("start") or 0) for e in earlier)
        mine = ctx.store.execution.get("id")
        entries = earlier + [{**e, "start": k0 + int(e.get("start") or 0), "execution": mine} for e in entries]
    rates = [e["decode_tok_s"] for e in entries if e.get("decode_tok_s") is not None]
    ci = mean_ci(rates)
    row["starts"] = entries
    row["decode_tok_s_ci95_within"] = first["decode_tok_s_ci95"]
    if len(rates) >= 2:
        row.update(decode_tok_s=ci["mean"], decode_tok_s_ci95=ci["half_width"], ci_over=f"{len(rates)} server starts")
    else:
        row["ci_over"] = "one start: interval within a start only"


def _earlier_starts(ctx: _Sweep, row: dict) -> list[dict]:
    """In an execution that measures a recorded run again (``servebook book --again``): the starts the last earlier
    execution recorded for this configuration (engine, backend, mode) with the same method (engine version, model,
    ``bench_method``), each with its ``execution``; [] otherwise, or where the method differs (the latest method stands)."""
    ex = ctx.store.execution
    if not ex.get("again"):
        return []
    method = lambda r: (r.get("bench_method"), r.get("engine_version"), r.get("bench_model"))  # noqa: E731
    same = lambda r: all((r.get(k) or d) == (row.get(k) or d) for k, d in (("engine", ""), ("attention", ""), ("mode", "default")))  # noqa: E731
    prior = [r for r in ctx.store.rows("backends", executions="all") if (r.get("execution") or 1) < ex["id"] and same(r)
             and r.get("outcome") == "ok" and r.get("decode_tok_s") is not None and method(r) == method(row)]
    if not prior:
        return []
    last = prior[-1]
    starts = last.get("starts") or [{"start": 0, "decode_tok_s": last["decode_tok_s"],
                                     "decode_tok_s_ci95": last.get("decode_tok_s_ci95_within", last.get("decode_tok_s_ci95"))}]
    return [{**e, "execution": e.get("execution", last.get("execution") or 1)} for e in starts]


def _prepare_start(ctx: _Sweep, backend: str | None, mode: str, k: int) -> dict:
    """Start ``k``'s launch and log (``{"launch", "log_path"}``), or the engine's refusal (``{"error"}``)."""
    engine, label = ctx.engine, backend or "auto"
    try:
        launch = engine.launch(ctx.served_from, attention=backend, extra=ctx.extra + _mode_args(engine, mode), env=ctx.env,
                               **({"port": ctx.host.free_port()} if ctx.remote else {}))
    except EngineError as exc:
        return {"error": exc}
    log_path = ctx.store.path / "logs" / (f"{engine.name}-{label.replace('/', '--')}{'' if mode == 'default' else '-' + mode}"
                                          f"-start{k}.log")
    return {"launch": launch, "log_path": log_path}


def _one_more_start(ctx: _Sweep, backend: str | None, mode: str, row: dict, k: int, prepared: dict | None = None,
                    started_with: list[str] | None = None, take: Callable | None = None) -> dict:
    """Start ``k`` of one configuration: launch, read its rate, stop (``_restarts``). With ``take``: its server was
    started beside others (``_overlapped``; ``prepared`` its launch, ``started_with`` the others)."""
    engine, label = ctx.engine, backend or "auto"
    out: dict = {"start": k}
    if started_with is not None:
        out["started_with"] = started_with
    try:
        p = prepared or _prepare_start(ctx, backend, mode, k)
        if p.get("error") is not None:
            raise p["error"]
        launch, log_path = p["launch"], p["log_path"]
        registry = ctx.store.path / "servers.jsonl"
        starting = (take() if take is not None else
                    ctx.host.serve(launch, log_path, registry=registry, ready_timeout=ctx.ready_timeout, progress=ctx.say) if ctx.remote
                    else Server.start(launch, log_path, ready_timeout=ctx.ready_timeout, registry=registry, progress=ctx.say))
        with starting as srv:
            out["ready_s"] = srv.ready_s
            r = _decode_rate(srv.base_url, engine.served_model_name(ctx.served_from), engine.name, label, ctx.max_tokens * 2, ctx.runs,
                             ctx.tokenizer, host=ctx.host)
            out.update(decode_tok_s=r["decode_tok_s"], decode_tok_s_ci95=r["decode_tok_s_ci95"])
    except (EngineError, ServebookError) as exc:
        out["error"] = str(exc)[:400]
        ctx.store.record_failure(f"backend {engine.name} {label} ({mode}) start {k}", exc, engine=engine.name)
    ctx.say(f"{engine.name} {label} ({mode}) start {k}: " + (f"{out['decode_tok_s']:.1f} tok/s" if out.get("decode_tok_s") is not None
                                                             else f"no rate ({out.get('error', 'no request succeeded')})"))
    return out


def _exercise(ctx: _Sweep, srv, backend: str | None, row: dict) -> None:
    engine = ctx.engine
    row["ready_s"] = srv.ready_s
    reported = _reported_backend(engine, srv, ctx.host)
    row["reported"], row["reported_source"] = reported.get("attention"), reported.get("source")
    row["reported_device"] = reported.get("device")
    if reported.get("mla_prefill"):
        row["reported_mla_prefill"] = reported["mla_prefill"]
    name = engine.served_model_name(ctx.served_from)
    try:
        if ctx.remote:  # the requests go out on the host, next to the server
            completions = ctx.host.call("servebook.backends.measure:greedy_completions",
                                        {"base_url": srv.base_url, "model": name, "prompts": PROBE_PROMPTS, "max_tokens": ctx.max_tokens},
                                        timeout=120 * len(PROBE_PROMPTS) + 60, label=f"greedy completions {engine.name} {row['attention']}")
        else:
            completions = _watched(srv, lambda: greedy_completions(srv.base_url, name, PROBE_PROMPTS, ctx.max_tokens))
    except ServebookError as exc:
        dying = None if ctx.remote else srv.fatal_line()
        row.update(outcome="crashed" if dying or _exited(srv) else "rejected",
                   error=(engine_error(srv.log_tail(400)) or dying) if dying else str(exc), log_tail=srv.log_tail(15))
        raise _Recorded() from exc
    row["completions"] = completions
    # teacher-forced: every position of prompt + the default's completion, fed to this backend (on the host, beside it)
    texts = [p + c for p, c in zip(PROBE_PROMPTS, ctx.reference or completions)]
    try:
        lp = (ctx.host.call("servebook.backends.measure:prompt_logprobs", {"base_url": srv.base_url, "model": name, "texts": texts},
                            timeout=120 * len(texts) + 60, label=f"teacher-forced {engine.name} {row['attention']}") if ctx.remote
              else _watched(srv, lambda: prompt_logprobs(srv.base_url, name, texts)))
    except ServebookError as exc:
        if (not ctx.remote and srv.fatal_line()) or not srv.alive():
            row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or str(exc), log_tail=srv.log_tail(15))
            raise _Recorded() from exc
        lp = {"unsupported": f"prompt log-probabilities failed: {str(exc)[:200]}"}
    row["teacher_forced"] = lp
    if backend is None and ctx.reference is None:
        ctx.reference_lp = lp
    row.update(teacher_forced_agreement(ctx.reference_lp, lp))
    if backend is None and ctx.reference is None:
        ctx.reference = completions
    if ctx.reference is not None:
        row.update(compare_tokens(ctx.tokenizer, ctx.reference, completions))
    _decode_check(ctx, srv, backend, row, name)
    row.update(_decode_rate(srv.base_url, name, engine.name, row["attention"], ctx.max_tokens * 2, ctx.runs, ctx.tokenizer, host=ctx.host))
    if not srv.alive() or (not ctx.remote and srv.fatal_line()):
        row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or "the server exited during the run", log_tail=srv.log_tail(15))
    elif str(reported.get("device") or "").startswith("cpu") and _gpu_visible(srv.launch):
        row.update(outcome="overridden", error="the engine loaded the model on the CPU although a GPU is visible "
                                               "(a full or busy GPU makes device 'auto' fall back silently)")
    elif _overridden(engine, backend, reported):
        row.update(outcome="overridden", error=f"asked for {backend}, the engine reports {row['reported']} (from its {row['reported_source']})")
    elif _disagrees(row):
        row.update(outcome="wrong output", error=_disagreement(row))
    else:
        row["outcome"] = "ok"


def _decode_check(ctx: _Sweep, srv, backend: str | None, row: dict, name: str) -> None:
    """The decode-path agreement (``agreement.py``): the default's greedy decode by token ids is the reference (asked
    once, from the first default start), and every start, the default's included, is compared with it."""
    engine = ctx.engine

    def ask(fn: Callable, kwargs: dict):
        kwargs = {"engine": engine.name, "base_url": srv.base_url, "model": name, "prompts": ctx.prompt_ids, **kwargs}
        if ctx.remote:
            return ctx.host.call(f"servebook.backends.agreement:{fn.__name__}", kwargs, timeout=120 * 10 * len(ctx.prompt_ids) + 60,
                                 label=f"decode {fn.__name__} {engine.name} {row['attention']}")
        return _watched(srv, lambda: fn(**kwargs))

    try:
        if backend is None and ctx.reference_decode is None:
            ctx.reference_decode = row["decode_reference"] = ask(reference_decodes, {"max_tokens": ctx.max_tokens})
        row.update(ask(decode_agreement, {"reference": ctx.reference_decode}))
    except ServebookError as exc:
        if (not ctx.remote and srv.fatal_line()) or not srv.alive():
            row.update(outcome="crashed", error=engine_error(srv.log_tail(400)) or str(exc), log_tail=srv.log_tail(15))
            raise _Recorded() from exc
        row.update(decode_agreement=None, decode_note=f"the decode check failed: {str(exc)[:300]}")


def _disagrees(row: dict) -> bool:
    """Wrong output: decode agreement under ``agreement.MIN_AGREEMENT`` or teacher-forced (prefill) top-1 agreement
    under 90%, where measured; where neither was, greedy agreement under 50%."""
    dec, tf = row.get("decode_agreement"), row.get("tf_top1_agreement")
    if dec is not None or tf is not None:
        return (dec is not None and dec < MIN_AGREEMENT) or (tf is not None and tf < 0.9)
    return row.get("agreement") is not None and row["agreement"] < 0.5


def _disagreement(row: dict) -> str:
    dec = row.get("decode_agreement")
    if dec is not None and dec < MIN_AGREEMENT:
        first = row.get("decode_first_divergence") or {}
        return (f"decode agreement with the default backend is {dec:.0%} over {row['decode_positions']} decode positions "
                f"(tolerance {row['decode_tolerance']} nats); first difference: prompt {first.get('prompt')} position "
                f"{first.get('position')}, token {first.get('forced')} where the default decoded {first.get('default')}")
    if row.get("tf_top1_agreement") is not None:
        return (f"teacher-forced top-1 agreement with the default backend is {row['tf_top1_agreement']:.0%} over {row['tf_positions']} "
                f"positions (mean |log-prob difference| {row.get('tf_logprob_mad')})")
    return f"only {row['agreement']:.0%} of greedy tokens agree with the default backend"


def _watched(srv, fn, poll_s: float = 0.5):
    """``fn()`` (requests to ``srv``), given up as soon as the server dies or logs its own fatal line: a backend
    that fails at its first decode must not hold the sweep while the engine lingers (SGLang waits for core dumps)."""
    import concurrent.futures as cf

    if not hasattr(srv, "fatal_line"):
        return fn()
    pool = cf.ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(fn)
    try:
        while True:
            try:
                return fut.result(timeout=poll_s)
            except cf.TimeoutError:
                fatal = srv.fatal_line()
                if fatal or not srv.alive():
                    raise ServebookError(f"the server {'logged a fatal error' if fatal else 'exited'} during the request: "
                                         f"{(fatal or '')[:200]}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def prompt_logprobs(base_url: str, model: str, texts: list[str], timeout: float = 120) -> list[dict] | dict:
    """Per text, the engine's own log-probabilities of every prompt position (OpenAI completions with ``echo`` and
    ``logprobs: 1``, one new token): ``{"tokens": [...], "lp": [...], "top": [...]}`` where ``lp[i]`` is the
    log-probability of ``tokens[i]`` given the ones before and ``top[i]`` the engine's top-1 token there.
    An engine that does not return prompt log-probabilities gives ``{"unsupported": reason}``."""
    out = []
    for text in texts:
        try:
            data = _post(f"{base_url}/v1/completions", {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0.0,
                                                         "echo": True, "logprobs": 1, "stream": False}, timeout)
        except ServebookError as exc:
            if "HTTP 4" in str(exc):
                return {"unsupported": str(exc)[:300]}
            raise
        lp = (data.get("choices") or [{}])[0].get("logprobs") or {}
        tokens, lps, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not tokens or not lps or not tops or len(tokens) < 3:
            return {"unsupported": "the engine returned no prompt log-probabilities for echo + logprobs"}
        top1 = [max(t.items(), key=lambda kv: kv[1])[0] if isinstance(t, dict) and t else None for t in tops]
        out.append({"tokens": tokens[:-1], "lp": lps[:-1], "top": top1[:-1]})  # the last entry is the one new token
    return out


def teacher_forced_agreement(reference, candidate) -> dict:
    """Top-1 agreement and mean |log-prob difference| of two backends over the same teacher-forced positions.

    Tolerates near-ties of random weights where greedy matching does not: one flipped argmax changes every later
    greedy token, but only one teacher-forced position."""
    if not isinstance(candidate, list) or not isinstance(reference, list):
        why = (candidate or {}).get("unsupported") if isinstance(candidate, dict) else None
        return {"tf_top1_agreement": None, "tf_note": why or "no reference log-probabilities"}
    same = total = 0
    diffs = []
    for r, c in zip(reference, candidate):
        if r["tokens"] != c["tokens"]:
            continue  # tokenised differently: not comparable position by position
        for i in range(1, len(r["tokens"])):
            if r["top"][i] is None or c["top"][i] is None:
                continue
            total += 1
            same += r["top"][i] == c["top"][i]
            if r["lp"][i] is not None and c["lp"][i] is not None:
                diffs.append(abs(r["lp"][i] - c["lp"][i]))
    if not total:
        return {"tf_top1_agreement": None, "tf_note": "no comparable positions"}
    return {"tf_top1_agreement": round(same / total, 4), "tf_positions": total,
            "tf_logprob_mad": round(sum(diffs) / len(diffs), 5) if diffs else None}


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def engine_error(log_tail: str) -> str | None:
    """The engine's own error in a log tail: the last exception line of its traceback, else its last ERROR line."""
    lines = [l.strip() for l in (log_tail or "").splitlines() if l.strip()]
    for line in reversed(lines):
        if _EXC_LINE.match(line):
            return line[:400]
    for line in reversed(lines):
        if " ERROR " in f" {line} " or line.startswith("ERROR"):
            return line[:400]
    return None


def _gpu_visible(launch) -> bool:
    """Whether the server's environment sees an NVIDIA GPU (nvidia-smi -L, limited by its CUDA_VISIBLE_DEVICES)."""
    import shutil
    import subprocess

    visible = launch.env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not shutil.which("nvidia-smi"):
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU " in out.stdout


def _overridden(engine: EngineAdapter, backend: str | None, reported: dict) -> bool:
    """A forced backend the engine reports it did not use (decode, and prefill where it says)."""
    if not backend:
        return False
    seen = [reported.get("attention"), reported.get("prefill")]
    return any(r and not engine.same_backend(backend, r) for r in seen)


def _rejection(log_tail: str, backend: str) -> str | None:
    """The engine's own error line when it refused ``backend`` at start, else None."""
    for line in reversed(log_tail.splitlines()):
        # an import failure that happens to name the backend's kernel package is not a refusal of the flag
        if "Error" in line and backend in line and not re.search(r"ModuleNotFoundError|ImportError|No module named", line):
            return line.strip()[:400]
    return None


def _exited(srv: Server, wait_s: float = 3.0) -> bool:
    """Whether the server died; a process killed mid-request may take a moment to finish exiting."""
    import subprocess

    try:
        srv.proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


class _Recorded(Exception):
    """The row already says what went wrong."""


def _reported_backend(engine: EngineAdapter, srv: Server, host=None) -> dict:
    """What the engine itself says it loaded: its server-info endpoint where it has one, else its log."""
    if _remote(host):  # the endpoint is asked on the host; the log is fetched from there into the run directory
        text = srv.log_tail(10 ** 7)
        info = host.call("servebook.engines._base:fetch_server_info", {"base_url": srv.base_url, "paths": list(engine.info_paths)},
                         timeout=120, label=f"server info {engine.name}") if engine.info_paths else None
        return engine.reported_backend(info, text)
    text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
    return engine.reported_backend(engine.server_info(srv.base_url), text)


# -- on a host ---------------------------------------------------------------------------------------
def _remote(host) -> bool:
    """A host whose work does not run in this process (SSH, a recording, a replay)."""
    return host is not None and not getattr(host, "in_process", True)


def _port_listening_on(host, port: int) -> bool:
    """``servers.port_listening`` on the host's 127.0.0.1."""
    return bool(host.call("servebook.servers:port_listening", {"port": int(port)}, timeout=60, label=f"port {port} listening"))


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
