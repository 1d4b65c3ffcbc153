"""Chapter 05's measuring: each engine started (its starts together where they run on this machine's CPU), checked,
measured single stream and over the concurrency sweep, and stopped; the method the chapter describes.

    w = Workload(max_tokens=128, input_len=128, runs=5, ...).sized(smoke)     # the chapter's parameters, smoke-sized
    measure_engines(store, ["sglang", "vllm"], host=on_host, model="...", model_dir=d, prompts=p, tokenizer=tok, w=w)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ServebookError

__all__ = ["Workload", "measure_engines"]


@dataclass(frozen=True)
class Workload:
    """The chapter's benchmark parameters (see the notebook's parameters cell)."""

    max_tokens: int = 128
    input_len: int = 128
    runs: int = 5
    starts: int = 2
    warmup: int = 2
    requests_per_run: int = 1
    max_concurrency: int = 128
    requests_per_level: int = 5
    level_time_budget_s: int = 120
    saturation_patience: int = 2
    api: str = "completions"
    attention: str = ""
    engine_args: str = ""
    client_check: bool = True
    smoke: bool = False
    seed: int = 0

    @classmethod
    def of(cls, params: dict) -> "Workload":
        """The workload from the notebook's parameters (a dict holding at least every field's name, e.g. ``globals()``)."""
        return cls(**{f: params[f] for f in cls.__dataclass_fields__})

    def sized(self, smoke: bool) -> "Workload":
        """Small and fast for ``smoke`` (tests, CI), still real streamed tokens; unchanged otherwise."""
        if not smoke:
            return self
        return replace(self, smoke=True, max_tokens=min(self.max_tokens, 32), input_len=min(self.input_len, 32), runs=min(self.runs, 3),
                       warmup=min(self.warmup, 1), requests_per_run=1, starts=min(self.starts, 2),
                       max_concurrency=min(self.max_concurrency, 2), requests_per_level=1, level_time_budget_s=20)

    def n_prompts(self) -> int:
        """Prompts to build: enough for the single stream and the sweep's largest level, at most 256."""
        return min(max(8, self.warmup + self.runs * self.requests_per_run, self.requests_per_level * self.max_concurrency), 256)


def _tail(text: str, n: int) -> str:
    """The last whole lines of ``text`` that fit in about ``n`` characters (the last line alone when it is longer)."""
    lines = text.rstrip().splitlines() or [""]
    out = [lines.pop()]
    while lines and sum(len(x) + 1 for x in out) + len(lines[-1]) <= n:
        out.insert(0, lines.pop())
    return "\n".join(out)


# -- measuring (a live host) ------------------------------------------------------------------------------------------
def _log_path(store, engine: str, start: int):
    """The server log of ``engine``'s start ``start`` in this run: ``server-ENGINE.log`` for start 0,
    ``server-ENGINE-startK.log`` for start K."""
    return store.path / (f"server-{engine}.log" if start == 0 else f"server-{engine}-start{start}.log")


def _recorded_ceiling(store, label: str) -> float | None:
    """The hardware's ceiling for one stream of ``label`` where this run knows one: the bandwidth roofline (tok/s) of its
    last "measured here" row of ``bench_roofline`` (an execution before this one computed it; the first computes it only
    after measuring). A decode rate above it is not the server's (``sse.implausible``). It holds for one token per read of
    the weights from the memory whose bandwidth it used: speculative decoding (several tokens accepted per step), which
    no launch of chapter 05 asks for, or weights small enough to stay in a cache could pass it."""
    rows = [r for r in store.rows("bench_roofline") if r.get("source") == "measured here"
            and str(r.get("case", "")).startswith(f"{label} on ") and r.get("roofline_tok_s")]
    return float(rows[-1]["roofline_tok_s"]) if rows else None


def _check_client(store, eng, url: str, name: str, label: str, *, model_dir, tokenizer, w: Workload) -> None:
    """servebook's client and SGLang's own (``sglang.bench_serving``, run in the engine's interpreter) taking turns on this
    live server and workload; each metric's difference, both directions kept (table ``bench_client_check``)."""
    from . import compare as bench_compare

    for c in (1, 8):
        have = {r["metric"] for r in store.find("bench_client_check", label=label, concurrency=c) if not r.get("harness_fault")}
        if {"ttft_ms", "itl_ms", "output_tok_s"} <= have:  # a metric servebook measured wrongly is measured again
            continue
        try:
            a = bench_compare.agreement(eng.python, url, name, model_dir, tokenizer, input_len=w.input_len, output_len=w.max_tokens,
                                        concurrency=c, num_prompts=max(4, 2 * c), engine=eng.name, repeats=1,
                                        workdir=store.path / "bench_serving")
        except (RuntimeError, ServebookError) as exc:
            store.record_failure(f"bench_serving check {label} C={c}", _tail(str(exc), 400))
            print(f"sglang.bench_serving at C={c} failed: {_tail(str(exc), 200)}")
            continue
        for metric, m in a["metrics"].items():
            store.append("bench_client_check", {"label": label, "engine": eng.name, "concurrency": c, "metric": metric,
                                                "servebook": m["servebook"], "bench_serving": m["bench_serving"], "rel_diff": m["rel_diff"],
                                                "servebook_runs": m["servebook_runs"], "bench_serving_runs": m["bench_serving_runs"],
                                                "servebook_spread": m["servebook_spread"],
                                                "method": "servebook, then bench_serving, then servebook on the same server, prompts and "
                                                          "output length; servebook's value is the mean of its two runs"})


def _bench_engine(store, spec: str, *, on_host, model: str, model_dir, prompts, tokenizer, w: Workload) -> None:
    """One engine: started, warmed up, single stream, the concurrency sweep (and, on a live SGLang, the client check),
    then started again ``w.starts - 1`` times for the single stream only. A failure is recorded; the chapter goes on."""
    from ..engines import args_for, get_engine
    from ..hosts import model_on_host
    from ..models import engine_args_of

    eng = get_engine(spec, python=None if on_host.in_process else on_host.python_exe)
    eng.host = on_host
    extra_args = args_for(w.engine_args, eng.name)
    label = f"{eng.name}/{w.attention or 'default'}" + (f" {' '.join(extra_args)}" if extra_args else "")
    try:
        eng.require()
        host_model = model_on_host(on_host, model, model_dir)

        def launch_one():
            return eng.launch(host_model, attention=w.attention or None, extra=extra_args + engine_args_of(model_dir, eng.name),
                              port=0 if on_host.in_process else on_host.free_port())

        launch = launch_one()
        ahead, launches = _starts_ahead(store, eng, label, launch, launch_one, on_host, model_dir, w)
        try:
            _measure_starts(store, eng, label, launch, launch_one, ahead, launches, on_host=on_host, host_model=host_model,
                            model_dir=model_dir, prompts=prompts, tokenizer=tokenizer, w=w)
        finally:
            for srv in ahead.values():  # started ahead and not used (a start before failed): stopped here
                if hasattr(srv, "stop"):
                    srv.stop()
    except ServebookError as exc:
        store.record_failure(f"bench {label}", exc)
        print(f"{label}: not measured: {exc}")


def _starts_ahead(store, eng, label: str, launch, launch_one, on_host, model_dir, w: Workload) -> tuple[dict, dict]:
    """On a host whose CPU runs the servers (``servers.starts_overlap_here``), the servers of every start still to
    measure, started together up front and waited for until ready (``servers.start_together``): ``({start: Server or
    its start's error}, {start: launch})``; elsewhere (a GPU, another host) ``({}, {})``, each started in its turn.
    They are measured one at a time, each stopped after its measurement, so none is starting while another is measured;
    a ready server waiting its turn takes next to no CPU (``backends``)."""
    from ..servers import starts_overlap_here
    from ..servers import start_together
    from .runs import first_start, start_measured

    first = first_start(store, label, w.max_tokens, w.warmup)
    more = [k for k in range(first + 1, first + w.starts) if not start_measured(store, label, k, w.max_tokens, w.warmup)]
    if not more or not on_host.in_process:
        return {}, {}
    try:
        ok, why = starts_overlap_here(1 + len(more), model_dir)
    except (TypeError, OSError):  # not a model directory here
        return {}, {}
    if not ok:
        return {}, {}
    launches = {first: launch, **{k: launch_one() for k in more}}  # distinct ports: servers.free_port
    print(f"{label}: {why}: the servers of its {len(launches)} starts are launched together, then measured one at a time")
    logs = {k: _log_path(store, eng.name, k) for k in launches}
    return start_together([(k, launches[k], logs[k]) for k in launches], registry=store.path / "servers.jsonl", ready_timeout=600,
                          name=lambda k: f"{label} start {k}"), launches


def _first_start(store, eng, label: str, launch, ahead: dict, launches: dict, first: int, name: str, common: dict, *,
                 host_model, on_host, model_dir, prompts, tokenizer, w: Workload) -> None:
    """Start ``first`` of ``_measure_starts``: the single stream (unless recorded), the concurrency sweep (the levels it
    lacks), the client check, the server's row (``bench_servers``) and the start's (``bench_starts``)."""
    from ..servers import take_started
    from .client import check_server
    from .runs import concurrency_sweep, record_start, single_stream, start_measured

    with (take_started(ahead, first) if first in ahead else
          on_host.serve(launch, log_path=_log_path(store, eng.name, first), registry=store.path / "servers.jsonl", ready_timeout=600)) as srv:
        try:
            check_server(srv.base_url, host=on_host)
        except ServebookError as exc:  # the model list is a courtesy endpoint: note it, measure anyway
            store.record_failure(f"bench {label} model list", exc)
            print(f"note: {exc}")
        done = start_measured(store, label, first, w.max_tokens, w.warmup)
        if done:  # resuming this run: the single-stream measurement is already recorded
            single = done
        else:
            single = single_stream(srv.base_url, name, prompts, runs=w.runs, warmup=w.warmup,
                                   requests_per_run=w.requests_per_run, start=first, **common)
        if single.get("decode_tok_s_mean") is None:  # the server died or refused every request: recorded in `failures`
            print(f"{label}: no single-stream request succeeded ({single['failed']} failed): {(single.get('errors') or ['?'])[0]}")
        else:
            print(f"{label}: {single['decode_tok_s_mean']:.1f} ± {single['decode_tok_s_ci95'] or 0:.1f} tok/s single stream")
        concurrency_sweep(srv.base_url, name, prompts, max_concurrency=w.max_concurrency,
                          requests_per_level=w.requests_per_level, level_time_budget_s=w.level_time_budget_s,
                          saturation_patience=w.saturation_patience, **common)
        if w.client_check and eng.name == "sglang" and on_host.in_process and not w.smoke:
            _check_client(store, eng, srv.base_url, name, label, model_dir=model_dir, tokenizer=tokenizer, w=w)
        loaded = getattr(eng, "loaded_from_log", lambda _t: [])(srv.log_path.read_text(errors="replace"))
        store.append("bench_servers", {"label": label, "engine": eng.name, "version": eng.version(), "launch": launch.shell(),
                                       "ready_s": srv.ready_s, "loaded": loaded,
                                       **({"started_with": [f"start {k}" for k in launches if k]} if launches else {})})
        record_start(store, single, model=host_model, launch=launch.shell(), ready_s=srv.ready_s)


def _measure_starts(store, eng, label: str, launch, launch_one, ahead: dict, launches: dict, *, on_host, host_model, model_dir,
                    prompts, tokenizer, w: Workload) -> None:
    """``_bench_engine``'s measurements: start 0 (single stream, the sweep), then each further start's single stream;
    each start's server taken from ``ahead`` when started there, else started in its turn; what this run recorded is
    not measured again (a start whose single stream and server row are recorded starts no server)."""
    from ..servers import take_started
    from .runs import first_start, record_start, single_stream, start_measured

    first = first_start(store, label, w.max_tokens, w.warmup)  # 0; measured again (--again): after the earlier starts
    name = eng.served_model_name(host_model)
    common = dict(store=store, tokenizer=tokenizer, engine=eng.name, attention=w.attention, label=label, api=w.api,
                  max_tokens=w.max_tokens, host=on_host, ceiling_tok_s=_recorded_ceiling(store, label))
    if start_measured(store, label, first, w.max_tokens, w.warmup) and store.done("bench_servers", label=label):
        print(f"{label}: start {first} (single stream and sweep) is recorded in this run: not measured again")
    else:
        _first_start(store, eng, label, launch, ahead, launches, first, name, common, host_model=host_model, on_host=on_host,
                     model_dir=model_dir, prompts=prompts, tokenizer=tokenizer, w=w)
    for k in range(first + 1, first + w.starts):  # stopped and started again: only the single stream, so the interval covers restarts
        if start_measured(store, label, k, w.max_tokens, w.warmup):
            continue
        again = launches.get(k) or launch_one()
        with (take_started(ahead, k) if k in ahead else
              on_host.serve(again, log_path=_log_path(store, eng.name, k), registry=store.path / "servers.jsonl",
                            ready_timeout=600)) as srv:
            single = single_stream(srv.base_url, name, prompts, runs=w.runs, warmup=w.warmup, requests_per_run=w.requests_per_run,
                                   start=k, **common)
            record_start(store, single, model=host_model, launch=again.shell(), ready_s=srv.ready_s)
            print(f"{label} start {k}: {single['decode_tok_s_mean'] or 0:.1f} ± {single['decode_tok_s_ci95'] or 0:.1f} tok/s single stream")


def measure_engines(store, engines, *, on_host, model: str, model_dir, prompts, tokenizer, w: Workload) -> None:
    """Each engine in turn (``_bench_engine``): servebook's launcher, warm-up, single stream over ``w.starts`` server
    starts, the concurrency sweep; every row to the run's tables."""
    for spec in engines:
        _bench_engine(store, spec, on_host=on_host, model=model, model_dir=model_dir, prompts=prompts, tokenizer=tokenizer, w=w)
