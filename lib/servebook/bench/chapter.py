"""Chapter 05 as the notebook calls it: measure each engine, then the tables, plots and sentences the page shows.

    w = Workload(max_tokens=128, input_len=128, runs=5, ...).sized(smoke)     # the chapter's parameters, smoke-sized
    measure_engines(store, ["sglang", "vllm"], host=on_host, model="...", model_dir=d, prompts=p, tokenizer=tok, w=w)
    m = measured(store)                        # summary rows, single-stream and sweep frames (the last of each measurement)
    sweep_parameters(store)                    # what the sweep ran with (levels, requests per level) and why it stopped
    Markdown("\\n".join(found(store, m, ...)))  # "What we found", every figure tagged (servebook.stated.q) or in UNTAGGED

Every measurement's method is the one the chapter describes; the functions here only move the notebook's logic into the
package, so a recorded run re-executed with ``measure=False`` reads the same tables the same way. ``UNTAGGED`` lists the
figures the page states in prose without a tag, each with the reason it cannot carry one.
"""

from __future__ import annotations

import re

import json
from dataclasses import dataclass, replace
from typing import Any
from pathlib import Path

from ..errors import ServebookError
from ..stated.text import marked
from .figures import breakdowns, ceiling_tables, sweep_parameters

__all__ = ["Workload", "UNTAGGED", "ceiling_tables", "ceiling_sentence", "measure_engines", "measured", "starts_table",
           "plot_single_runs", "sweep_parameters", "say_sweep_stops", "plot_sweep", "plot_graph_vs_eager", "graph_eager_pairs", "client_check",
           "host_roofline", "roofline_shown", "extrapolation", "inprocess_breakdown", "say_breakdown", "seed_roofline", "say_prediction_tok_s",
           "found", "check_yourself", "whatif_found", "whatif_check_yourself", "show_ceiling_comparison", "ceiling_warnings", "what_if_line", "excerpt", "whole_block"]

# Figures stated in prose (Markdown output) that carry no servebook.stated tag, and why each cannot.
UNTAGGED = {
    "failure excerpts": "text of a recorded error, not a quantity",
    "Check yourself's worked example (4 tokens per chunk every 40 ms)": "a fixed example of the definitions, not a measurement",
    "the 95% of the intervals and half of the client's ceiling in the method text":
        "definitions of the method (servebook.stated.EXCEPTIONS names the 95%); the constants the verdicts use are tagged "
        "as method_constant where a sentence states them (bench.ceiling.ENGINE_REGIME, BOUND_AT), and the notebook names "
        "bench.runs.SATURATION_GROWTH instead of typing it",
    "the what-if page's GB per token, TB/s and all-reduce ms": "inputs from the data files (data/models, data/hardware) "
        "behind the tagged limits (card_roofline_tok_s, plan_roofline_tok_s)",
    "printed (not Markdown) lines: client ceiling, warnings, notes": "console output under a table, which the table itself shows",
}


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


def excerpt(text, n: int = 160) -> str:
    """``text`` on one line, at most about ``n`` characters, cut only between words (a cut says so: " [...]")."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    cut = text[:n].rsplit(" ", 1)[0] if " " in text[:n] else text[:n]
    return f"{cut} [...]"


def _tail(text: str, n: int) -> str:
    """The last whole lines of ``text`` that fit in about ``n`` characters (the last line alone when it is longer)."""
    lines = text.rstrip().splitlines() or [""]
    out = [lines.pop()]
    while lines and sum(len(x) + 1 for x in out) + len(lines[-1]) <= n:
        out.insert(0, lines.pop())
    return "\n".join(out)


FENCE = "`" * 3


def whole_block(title: str, texts) -> list[str]:
    """Markdown lines: ``texts`` whole, in a collapsed block under ``title`` (nothing when there is none)."""
    texts = [str(t) for t in texts if str(t).strip()]
    if not texts:
        return []
    body = "\n\n".join(t.replace(FENCE, "'" * 3) for t in texts)
    return ["", f"<details><summary>{title}</summary>", "", FENCE + "text", body, FENCE, "", "</details>"]


# -- the client's ceiling ---------------------------------------------------------------------------------------------
def ceiling_sentence(v: dict) -> str:
    """The verdict on servebook's own transport, every figure from the rows of `client_ceiling`."""
    from ..stated import q

    if not v["compared"]:
        return f"Not compared in this run: {v['reason_tagged']}."
    rates = ", ".join(f"{k} {q('client_ceiling_tok_s', t, ',.0f', of=k)}" for k, t in v["ceilings"].items())
    out = f"Client ceilings against the fake server: {rates} tok/s."
    if not v["bench_serving_measured"]:
        return f"{out} {v['reason_tagged']}: this run does not decide whether the hand-written transport is justified."
    for k in ("servebook", "httpx"):
        if v["ratios"][k] is not None:
            out += (f" At its best level {k}'s is {q('ceiling_ratio', v['ratios'][k], '.1f', of=k)}x bench_serving's "
                    f"({'above' if v['reaches'][k] else 'below'} the goal of {q('ceiling_goal', v['goal'], 'g')}x).")
    r = v["decided_in"] or {}
    if r.get("servebook_ratio") and r.get("httpx_ratio"):
        out += (f" The verdict is taken where engines stream, one token per network read ({q('method_constant', r['events_per_write'], 'd', of='ceiling_engine_regime')} event per "
                f"write): there servebook's is {q('ceiling_ratio_decided', r['servebook_ratio'], '.2f', of='servebook')}x and httpx's "
                f"{q('ceiling_ratio_decided', r['httpx_ratio'], '.2f', of='httpx')}x, their cores "
                f"{q('ceiling_busy_decided', r['servebook_busy'], '.0%', of='servebook')} and "
                f"{q('ceiling_busy_decided', r['httpx_busy'], '.0%', of='httpx')} busy.")
    if v["justified"] is None:
        return f"{out} Not decided here: {v['reason_tagged']}."
    return (f"{out} The hand-written transport is {q('fast_path_justified', v['justified'], 'justified|not justified')} on "
            f"this host: {v['reason_tagged']}.")


# -- measuring (a live host) ------------------------------------------------------------------------------------------
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
    """On a host whose CPU runs the servers (``backends.starts_overlap_here``), the servers of every start still to
    measure, started together up front and waited for until ready (``servers.start_together``): ``({start: Server or
    its start's error}, {start: launch})``; elsewhere (a GPU, another host) ``({}, {})``, each started in its turn.
    They are measured one at a time, each stopped after its measurement, so none is starting while another is measured;
    a ready server waiting its turn takes next to no CPU (``backends``)."""
    from ..backends import starts_overlap_here
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
    logs = {k: store.path / (f"server-{eng.name}.log" if k == 0 else f"server-{eng.name}-start{k}.log") for k in launches}
    return start_together([(k, launches[k], logs[k]) for k in launches], registry=store.path / "servers.jsonl", ready_timeout=600,
                          name=lambda k: f"{label} start {k}"), launches


def _first_start(store, eng, label: str, launch, ahead: dict, launches: dict, first: int, name: str, common: dict, *,
                 host_model, on_host, model_dir, prompts, tokenizer, w: Workload) -> None:
    """Start ``first`` of ``_measure_starts``: the single stream (unless recorded), the concurrency sweep (the levels it
    lacks), the client check, the server's row (``bench_servers``) and the start's (``bench_starts``)."""
    from ..servers import take_started
    from .client import check_server
    from .runs import concurrency_sweep, record_start, single_stream, start_measured

    log0 = store.path / (f"server-{eng.name}.log" if first == 0 else f"server-{eng.name}-start{first}.log")
    with (take_started(ahead, first) if first in ahead else
          on_host.serve(launch, log_path=log0, registry=store.path / "servers.jsonl", ready_timeout=600)) as srv:
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
                  max_tokens=w.max_tokens, host=on_host)
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
              on_host.serve(again, log_path=store.path / f"server-{eng.name}-start{k}.log", registry=store.path / "servers.jsonl",
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


# -- what was measured ------------------------------------------------------------------------------------------------
def measured(store) -> dict:
    """The recorded benchmark as the chapter shows it: the last of each measurement (``bench.current``; a resumed run that
    measured again with another method keeps the older rows) as rows and pandas frames: ``summary_rows``,
    ``request_rows``, ``summary``, ``single_all`` (every single-stream row), ``single_df`` (those with a rate, one per
    start), ``single_cfg`` (one per configuration, its rate over server starts), ``sweep_df``, ``sweep_ok``."""
    import pandas as pd

    from ..findings import throughput
    from .runs import current

    summary_rows, request_rows = current(store.rows("bench_summary"), store.rows("bench_requests"))
    summary = pd.DataFrame(summary_rows)
    single_all = summary[summary["phase"] == "single"] if len(summary) else summary
    single_df = single_all[single_all["decode_tok_s_mean"].notna()] if len(single_all) else single_all
    single_cfg = single_df.drop_duplicates("label").copy()
    if len(single_cfg):
        single_cfg["decode_tok_s_mean"] = single_cfg["label"].map({t["label"]: t["single_tok_s"] for t in throughput(store)})
    if len(single_df) and "start" not in single_df:
        single_df = single_df.assign(start=0)  # recorded before starts were counted: one start
    sweep_df = summary[summary["phase"] == "sweep"] if len(summary) else summary
    sweep_ok = sweep_df[sweep_df["throughput_tok_s"].notna()] if len(sweep_df) else sweep_df
    return {"summary_rows": summary_rows, "request_rows": request_rows, "summary": summary, "single_all": single_all,
            "single_df": single_df, "single_cfg": single_cfg, "sweep_df": sweep_df, "sweep_ok": sweep_ok}


def starts_table(store):
    """Per configuration: server starts, the per-start means, and the rate and 95% interval the verdicts use."""
    import pandas as pd

    from ..findings import throughput

    return pd.DataFrame([{"label": t["label"], "starts": t["starts"], "per_start_tok_s": t["start_tok_s"], "decode_tok_s": t["single_tok_s"],
                          "ci95": t["single_ci95"], "interval over": t["single_over"]} for t in throughput(store)])


def plot_single_runs(request_rows):
    """Single-stream decode tok/s run by run, one line per configuration (None when nothing was measured)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    req = pd.DataFrame(request_rows)
    if not len(req):
        return None
    single_req = req[(req["phase"] == "single") & req["ok"]]
    fig, ax = plt.subplots(figsize=(6, 3))
    for label, g in single_req.groupby("label"):
        ax.plot(g["run"], g["decode_tok_s"], "o-", label=label)
    ax.set_xlabel("run")
    ax.set_ylabel("decode tok/s")
    ax.set_title("single stream, run by run")
    ax.legend(fontsize=8)
    plt.tight_layout()
    return ax


# -- the sweep: what it ran with, why it stopped -------------------------------------------------------------------------
def say_sweep_stops(store) -> list[str]:
    """One Markdown bullet per configuration: the sweep's levels and requests as they ran, and why it stopped."""
    from ..stated import q

    lines = []
    for s in sweep_parameters(store):
        lab = s["label"]
        lines.append(f"- {lab}: the sweep ran C = {q('sweep_levels', s['levels'], of=lab)} with "
                     f"{q('sweep_requests_per_c', s['requests_per_level_x_C'], of=lab)} x C requests per level"
                     + (", each level warmed first" if s["warmed_levels"] else "") + "; it stopped on "
                     f"{q('sweep_stopped_by', s['stopped_by'], of=lab)}: {q('sweep_stop_why', s['why'], of=lab)}.")
    return lines


def plot_sweep(sweep_ok):
    """Throughput against per-user speed (labels C=n placed so they do not overlap) and TTFT percentiles by concurrency."""
    import matplotlib.pyplot as plt

    from .plots import plot_latency, plot_pareto

    if not len(sweep_ok):
        return None
    n = sweep_ok["label"].nunique()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2 + 0.25 * 3 * n))
    plot_pareto(sweep_ok, ax=axes[0])
    plot_latency(sweep_ok, "ttft_server_s", ax=axes[1])
    for ax in axes:  # legends below the axes, so no line, point or C=n label sits under one
        ax.margins(x=0.08, y=0.12)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=1)
    plt.tight_layout()
    _spread_labels(axes[0])
    return axes


def _spread_labels(ax, min_gap_pt: float = 10.0) -> None:
    """Move the C=n annotations of ``ax`` apart vertically (in display points) so that no two overlap."""
    texts = [t for t in ax.texts if t.get_text().startswith("C=")]
    if len(texts) < 2:
        return
    ax.figure.canvas.draw()
    placed: list[tuple[float, float, float]] = []  # (x0, x1, y) of labels already placed, display coordinates
    dpi_pt = ax.figure.dpi / 72.0
    for t in sorted(texts, key=lambda t: t.get_window_extent().y0):
        bb = t.get_window_extent()
        y, shift = bb.y0, 0.0
        while any(bb.x0 < x1 and bb.x1 > x0 and abs(y + shift - py) < min_gap_pt * dpi_pt for x0, x1, py in placed):
            shift += min_gap_pt * dpi_pt / 2
        if shift:
            dx, dy = t.xyann
            t.xyann = (dx, dy + shift / dpi_pt)
        placed.append((bb.x0, bb.x1, y + shift))


def graph_eager_pairs(store) -> dict[str, dict[str, float]]:
    """``{configuration: {"graph": ms, "eager": ms}}`` for each configuration measured both ways, like with like: a
    configuration is the engine, the model slice, its quantization and the backend (chapter 05's profiles, unprofiled
    time per token), or the engine, the model and the backend (chapter 03's forced backends, 1000 / decode tok/s), so a
    bf16 graph slice is never set against an INT4 eager one."""
    from ..profile.tables import latest_ok

    pairs: dict[str, dict[str, float]] = {}
    for r in latest_ok(store.rows("profile_runs")):
        key = (f"05 profile: {r['engine']} {r.get('card')}-{r.get('layers')}L {r.get('quant') or 'bf16'} "
               f"{r.get('backend') or 'auto'}")
        if r.get("tpot_ms"):
            pairs.setdefault(key, {})[r.get("mode")] = r["tpot_ms"]
    for r in store.rows("backends"):
        if r.get("outcome") == "ok" and r.get("decode_tok_s"):
            model = str(r.get("bench_model") or "").rstrip("/").rsplit("/", 1)[-1]
            key = f"03 forced: {r['engine']}{' ' + model if model else ''} {r.get('reported') or r.get('attention')}"
            pairs.setdefault(key, {})[r.get("mode")] = 1e3 / r["decode_tok_s"]
    return {k: v for k, v in pairs.items() if "eager" in v and "graph" in v}


def plot_graph_vs_eager(store):
    """Time per token with CUDA graphs and eagerly, for each configuration the run measured both ways
    (``graph_eager_pairs``: like with like). None when the run has no eager row."""
    import matplotlib.pyplot as plt

    both = graph_eager_pairs(store)
    if not both:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(both) + 1.2))
    ys = range(len(both))
    ax.barh([y - 0.2 for y in ys], [v["graph"] for v in both.values()], height=0.4, label="CUDA graphs", color="#4C72B0")
    ax.barh([y + 0.2 for y in ys], [v["eager"] for v in both.values()], height=0.4, label="eager", color="#DD8452")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(list(both), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per output token (single stream)")
    ax.set_title("CUDA graphs against eager, per configuration (engine, model slice, quantization, backend)")
    ax.legend(fontsize=8)
    plt.tight_layout()
    return ax


# -- servebook's client against SGLang's own, on the live server ------------------------------------------------------------
def client_check(store):
    """``bench_client_check`` as the page shows it: (the last row of each label, level and metric as a frame, the notes
    printed under it: a metric measured again after a harness fault, the largest difference, or why nothing ran)."""
    import pandas as pd

    cc = store.table("bench_client_check")
    notes = []
    if not len(cc):
        tried = [f for f in store.rows("failures") if str(f.get("step", "")).startswith("bench_serving check")]
        if tried:  # it ran and failed: say so with bench_serving's own last error line
            last = [ln.strip() for ln in str(tried[-1]["error"]).splitlines() if "Error" in ln] or [str(tried[-1]["error"])[-200:]]
            notes.append(f"sglang.bench_serving did not complete on the live server ({len(tried)} attempt(s), table `failures`): {last[-1]}")
        else:
            notes.append("not measured here: needs a live SGLang server (engine or compare_engines sglang) on this machine")
        return cc, notes
    if "harness_fault" not in cc:
        cc["harness_fault"] = None
    first = cc.drop_duplicates(["label", "concurrency", "metric"], keep="first")
    cc = cc.drop_duplicates(["label", "concurrency", "metric"], keep="last")  # a level measured again stands in its last form
    for (_, a), (_, b) in zip(first.iterrows(), cc.iterrows()):
        if pd.notna(a["harness_fault"]) and pd.isna(b["harness_fault"]):
            fault = re.sub(r",?\s*not measured again", ", not yet measured again when the correction was written", str(a["harness_fault"]))
            notes.append(f"{b['metric']} at C={int(b['concurrency'])}: measured again after a servebook fault was fixed ({fault}): "
                         f"servebook {a['servebook']:.3g} then, {b['servebook']:.3g} now; bench_serving {a['bench_serving']:.3g} then, {b['bench_serving']:.3g} now")
    judged = cc[cc["harness_fault"].isna()]  # a row servebook measured wrongly compares nothing
    for _, r in cc[cc["harness_fault"].notna()].drop_duplicates("metric").iterrows():
        notes.append(f"{r['metric']}: not compared, servebook's value is a harness fault: {r['harness_fault']}")
    if len(judged):
        worst = judged.loc[judged["rel_diff"].abs().idxmax()]
        notes.append(f"largest difference: {worst['metric']} at C={int(worst['concurrency'])}: {worst['rel_diff']:+.1%} "
                     f"(servebook's own run-to-run spread there: {worst['servebook_spread']:.1%})")
    return cc, notes


# -- the roofline ----------------------------------------------------------------------------------------------------------
def _derived_sources(store, single_cfg) -> tuple[dict, Any]:
    """The measurement each derived row (``bench_roofline``, ``model_extrapolation``) is keyed by: per configuration, its
    last single-stream row with its method (``results.derived_from``); and a test for rows written before derived rows
    named their source (they stand where their rate is the current one)."""
    from ..results import derived_from
    from .runs import current

    summary_rows, _ = current(store.rows("bench_summary"), store.rows("bench_requests"))
    sources = {r["label"]: derived_from(r, method={k: r.get(k) for k in ("warmup", "runs", "max_tokens", "input_len")})
               for r in summary_rows if r.get("phase") == "single"}
    rate_of = dict(zip(single_cfg["label"], single_cfg["decode_tok_s_mean"])) if len(single_cfg) else {}

    def stands(r, ms) -> bool:
        return any(str(r.get("case", "")).startswith(f"{lab} on ") and abs(ms(r) - 1e3 / tok) < 1e-6 * ms(r)
                   for lab, tok in rate_of.items() if tok)
    return sources, stands


def host_roofline(store, model_dir, single_cfg, *, measure: bool, w: Workload) -> dict:
    """This run's roofline rows (``bench_roofline``, source "measured here"): re-read as recorded (``measure=False``), or
    the model's bytes per token over this host's bandwidth, one row per measured configuration. Returns ``rows``,
    ``roof`` (the decode roofline, when computed here), ``weights`` and ``note`` (Markdown: which bandwidth)."""
    from .. import roofline

    from ..results import standing

    out = {"rows": [], "roof": None, "weights": None, "note": "", "sources": {}}
    if model_dir is None:
        return out
    # derived rows are keyed by the measurement they derive from (its method included): taken again, it supersedes them
    sources, stands = _derived_sources(store, single_cfg)
    out["sources"], out["stands"] = sources, stands
    if not measure:  # the rows this run recorded, with the bandwidth of the host that measured them
        out["rows"] = standing([r for r in store.rows("bench_roofline") if r.get("source") == "measured here"], sources.values(),
                               identity=("case",), legacy=lambda r: stands(r, lambda x: 1e3 / x["measured_tok_s"]))
        if out["rows"]:
            r0 = out["rows"][0]
            from ..stated import q

            out["note"] = (f"Bandwidth for this run's roofline: **{q('roofline_bandwidth_gbs', r0['bandwidth_tbs'] * 1e3, ',.1f', of=r0['case'])} "
                           f"GB/s**, the {r0['bandwidth_source']} (as recorded on the host)." + _bandwidth_note(store, out["rows"]))
        return out
    if list(model_dir.glob("*.safetensors")):
        weights = roofline.weight_bytes(model_dir)
    else:  # built without weights (the engines' --load-format dummy): the same count from the config, layer by layer
        weights = roofline.config_bytes_per_token(json.loads((model_dir / "config.json").read_text()))
    out["weights"] = weights
    # measured on a CPU host only (a GPU's is its datasheet's). 512 MiB is 16 times the 32 MiB L3 of the 2-core book host;
    # there it read what 1024 MiB did within the noise (5.9-7.4 against 6.2-7.3 GB/s, alternated on a busy host) in about
    # half the time (3.4 s against 6.3 s). Still best of 5 after a warm-up pass.
    bw = (_recorded_bandwidth(store, single_cfg, sources, stands)
          or roofline.host_memory_bandwidth(size_mib=256 if w.smoke else 512, repeats=3 if w.smoke else 5))
    print(f"weights: {weights['total_bytes'] / 1e6:.1f} MB in {weights['total_params'] / 1e6:.1f}M parameters; "
          f"{weights['bytes_per_token'] / 1e6:.1f} MB read per decode token")
    out["note"] = (f"Bandwidth for this run's roofline: **{bw['bandwidth_tbs'] * 1e3:,.1f} GB/s**, "
                   + (f"measured on this host's CPU ({bw['method']})." if bw.get("source") == "measured" else f"the {bw['method']}.")
                   if bw["bandwidth_tbs"] else f"No bandwidth for a roofline: {bw['method']}.")
    if bw["bandwidth_tbs"]:
        cfg_json = json.loads((model_dir / "config.json").read_text())
        roof = roofline.decode_roofline(weights["bytes_per_token"], bw["bandwidth_tbs"], context_tokens=w.input_len + w.max_tokens // 2,
                                        kv_bytes_per_token=roofline.kv_bytes_per_token(
                                            cfg_json, 4.0 if cfg_json.get("torch_dtype") == "float32" else 2.0))
        out["roof"] = roof
        for _, r in single_cfg.iterrows():
            row = {"case": f"{r['label']} on {bw['device']}", "measured_tok_s": r["decode_tok_s_mean"], "roofline_tok_s": roof["tok_s"],
                   "pct_of_roofline": 100 * r["decode_tok_s_mean"] / roof["tok_s"], "bytes_per_token": roof["bytes_per_token"],
                   "bandwidth_tbs": bw["bandwidth_tbs"], "bandwidth_source": bw["method"], "tp": 1, "source": "measured here",
                   "derived_from": sources.get(r["label"])}
            if not store.done("bench_roofline", **{k: v for k, v in row.items() if k != "derived_from"}):
                store.append("bench_roofline", row)
            out["rows"].append(row)
        out["note"] += _bandwidth_note(store, out["rows"])
    return out


def _recorded_bandwidth(store, single_cfg, sources: dict, stands) -> dict | None:
    """A resumed run: the bandwidth its roofline rows recorded, when every configuration measured has a row derived from
    the measurement that stands now (nothing is measured again, and the roofline is computed again from the same
    figures); else None (the bandwidth is measured)."""
    from ..results import standing

    rows = standing([r for r in store.rows("bench_roofline") if r.get("source") == "measured here"], sources.values(),
                    identity=("case",), legacy=lambda r: stands(r, lambda x: 1e3 / x["measured_tok_s"]))
    labels = list(single_cfg["label"]) if len(single_cfg) else []
    mine = {lab: next((r for r in rows if str(r.get("case", "")).startswith(f"{lab} on ")), None) for lab in labels}
    if not labels or any(r is None or not store.find("bench_roofline", case=r["case"]) for r in mine.values()):
        return None
    r0 = next(iter(mine.values()))
    print(f"resumed: the bandwidth this run recorded, {r0['bandwidth_tbs'] * 1e3:,.1f} GB/s, is not measured again")
    return {"bandwidth_tbs": r0["bandwidth_tbs"], "method": r0["bandwidth_source"], "device": r0["case"].split(" on ", 1)[1],
            "source": "profile" if str(r0["bandwidth_source"]).startswith("datasheet") else "measured"}


def _bandwidth_note(store, rows) -> str:
    """Where the roofline rows used a GPU's datasheet: the GPU's read bandwidth measured in this run (``memory_bandwidth``)
    and each configuration's share of both rooflines, with the measurement against its reference
    (``roofline.REFERENCE_GPU_READ``); or why the page gives the datasheet's alone. Markdown, every figure tagged."""
    from ..stated import q
    from .figures import bandwidth_roofline

    b = bandwidth_roofline(store, rows)
    cases = {c: v for c, v in b["cases"].items() if v["from_datasheet"]}
    if not cases:
        return ""
    measured = {c: v for c, v in cases.items() if "read_gbs" in v}
    if not measured:
        return (" The GPU's read bandwidth was not measured in this run (the decode-step profiles measure it, table "
                "`memory_bandwidth`), so each rate is set against the datasheet's alone, a peak that measured reads stay below: "
                "its share of it understates how close the engine came to what the memory delivers.")
    out = []
    for dev in dict.fromkeys(v["device"] for v in measured.values()):
        d = b["devices"][dev]

        def g(field: str, fmt: str, dev=dev) -> str:
            return q("gpu_read_bandwidth", d[field], fmt, of=f"{dev} | {field}")
        text = (f" The same GPU's read bandwidth as this run's table `memory_bandwidth` records it (`x.sum()` over a bf16 tensor of "
                f"{g('size_gib', 'g')} GiB, best of its repeats): **{g('read_gbs', ',.1f')} GB/s**.")
        if "reference_read_gbs" in d:
            text += (f" A reference measurement of the same kind with {g('reference_size_gib', 'g')} GiB tensors on "
                     f"{d['reference_where'].split(',')[0]} read {g('reference_read_gbs', ',.1f')} GB/s; this run's is "
                     f"{g('below_reference_pct', '.1f')}% below it. Hypothesis: the smaller tensor or the machine; one machine "
                     "measuring both sizes would settle it. Until then the roofline at the measured bandwidth may be set too low, "
                     "and a rate's share of it too high.")
        out.append(text)
    per = "; ".join(
        f"{c.rsplit(' on ', 1)[0]}: {q('bandwidth_roofline', v['measured_tok_s'], ',.1f', of=f'{c} | measured_tok_s')} tok/s is "
        f"{q('bandwidth_roofline', v['datasheet_pct'], '.1f', of=f'{c} | datasheet_pct')}% of the datasheet roofline "
        f"({q('bandwidth_roofline', v['datasheet_roofline_tok_s'], ',.0f', of=f'{c} | datasheet_roofline_tok_s')} tok/s) and "
        f"{q('bandwidth_roofline', v['read_pct'], '.1f', of=f'{c} | read_pct')}% of the measured one "
        f"({q('bandwidth_roofline', v['read_roofline_tok_s'], ',.0f', of=f'{c} | read_roofline_tok_s')} tok/s)" for c, v in measured.items())
    return "".join(out) + f" Each rate against both: {per}. The table below keeps the datasheet's."


def extrapolation(store, model_dir, roof_rows, *, measure: bool = True, sources: dict | None = None, stands=None):
    """The slice's time per token scaled to the full model at the share of the bandwidth floor the slice reached (table
    ``model_extrapolation``, a labelled prediction), with the prediction also in tok/s. None without a slice's facts.
    Each row names the measurement it derives from (``derived_from``, from ``host_roofline``'s ``sources``); only rows
    of measurements that stand are shown, and a chapter executed again on recorded tables (``measure=False``) writes
    nothing."""
    import pandas as pd

    from ..results import standing

    sources = sources or {}

    slice_meta = (model_dir / "servebook_model.json") if model_dir is not None else None
    if slice_meta is None or not slice_meta.is_file() or not roof_rows:
        return None
    f = json.loads(slice_meta.read_text())["facts"]
    bw_tbs = roof_rows[0]["bandwidth_tbs"]
    rows_x = []
    for r in roof_rows:
        t_slice = 1e3 / r["measured_tok_s"]
        eff = (f["slice_bytes_per_token"] / (bw_tbs * 1e12) * 1e3) / t_slice  # the share of the bandwidth floor the slice reached
        for what, nbytes in (("full model, bf16 like the slice", f["full_bytes_per_token_bf16"]),
                             ("full model, the card's quantization", f["full_bytes_per_token_card"])):
            floor_ms = nbytes / (bw_tbs * 1e12) * 1e3
            rows_x.append({"case": r["case"], "full_model": what, "layers": f"{f['slice_layers']} -> {f['full_layers']}",
                           "slice_ms_per_token": t_slice, "slice_share_of_floor": eff, "full_floor_ms": floor_ms,
                           "predicted_full_ms_per_token": floor_ms / eff if eff else None,
                           "label": ("prediction, not measured: every layer assumed to reach the slice's share of the bandwidth floor, "
                                     "on one GPU (TP=1, no all-reduce)"),
                           "derived_from": r.get("derived_from") or next((v for k, v in sources.items() if r["case"].startswith(f"{k} on ")), None)})
    for x in rows_x if measure else []:
        if not store.done("model_extrapolation", case=x["case"], full_model=x["full_model"], derived_from=x["derived_from"]):
            store.append("model_extrapolation", x)
    kept = standing(store.rows("model_extrapolation"), sources.values(), identity=("case", "full_model"),
                    legacy=(lambda r: stands(r, lambda x: x["slice_ms_per_token"])) if stands else None)
    if not kept and store.rows("model_extrapolation"):
        print("table model_extrapolation holds rows of a superseded measurement only; shown: the same computed now from the one that stands")
    print(f"slice: {f['slice_layers']} of {f['full_layers']} layers, {f['slice_bytes_per_token'] / 1e9:.2f} GB read per token; "
          f"full model: {f['full_bytes_per_token_bf16'] / 1e9:.1f} GB in bf16, {f['full_bytes_per_token_card'] / 1e9:.1f} GB with the card's quantization")
    df = pd.DataFrame(kept or rows_x).drop(columns=["derived_from"], errors="ignore")
    df.insert(df.columns.get_loc("predicted_full_ms_per_token") + 1, "predicted_full_tok_s",
              [1e3 / x if x else None for x in df["predicted_full_ms_per_token"]])
    return _on_gpus(df, json.loads(slice_meta.read_text()).get("card"), str(roof_rows[0]["case"]).rsplit(" on ", 1)[-1])


def _on_gpus(df, card: str | None, device: str):
    """The extrapolation's rows with what they assume (one GPU, TP=1, no all-reduce) beside what the full model needs:
    its weights in that quantization and the GPUs of this kind they take at least (``roofline.weights_on_gpus``)."""
    from .. import roofline

    profile = roofline.gpu_profile_named(device)
    df = df.assign(gpus_assumed=1, tp_assumed=1, all_reduce="none")
    if not card or not profile:
        return df
    need = {what: roofline.weights_on_gpus(card, "bf16" if "bf16" in what else "card", profile) for what in df["full_model"].unique()}
    return df.assign(full_weights_gb=[need[w]["weights_gb"] for w in df["full_model"]],
                     gpus_to_hold_weights=[need[w]["gpus_to_hold"] for w in df["full_model"]])


def inprocess_breakdown(store, model_dir, roof, single_cfg, single_df, engines, prompts, *, measure: bool, w: Workload):
    """The served rate split into the bandwidth floor, compute and framework (the model decoding in this process,
    ``bench_inprocess``) and the serving path (table ``bench_breakdown``); only for ``transformers``, whose kernels the
    in-process decode runs. Returns the rows to show (a DataFrame, empty where not measured)."""
    import pandas as pd

    from .. import roofline
    from ..engines import get_engine
    from .inprocess import inprocess_decode_rate

    breakdown = pd.DataFrame()
    inproc_engine = {get_engine(e).name for e in engines} <= {"transformers"}
    if not len(single_df):
        return breakdown
    if not inproc_engine:
        print("in-process decode not measured: it runs transformers' model.generate, not the kernels of "
              f"{', '.join(engines)}; the served rate is compared with the bandwidth floor only")
        return breakdown
    if not measure:
        inproc = store.table("bench_inprocess")
        print("in-process decode as recorded:" if len(inproc) else "in-process decode was not recorded in this run")
        breakdown = store.table("bench_breakdown")
        return breakdown[breakdown["label"].isin(single_df["label"])] if len(breakdown) and "label" in breakdown else breakdown
    if roof is None:
        return breakdown
    if store.find("bench_inprocess", max_tokens=w.max_tokens):  # resumed: recorded in this run, not measured again
        print("in-process decode as recorded in this run (servebook book --again measures it again)")
    else:
        for threads in ((1,) if w.smoke else (None, 1)):  # torch's default threads, and one: small CPU models are often faster on one
            store.append("bench_inprocess", inprocess_decode_rate(model_dir, prompts[0].text, max_tokens=w.max_tokens,
                                                                  attention=w.attention or None, repeats=1 if w.smoke else 3,
                                                                  threads=threads))
    inproc = store.table("bench_inprocess")
    from IPython.display import display

    display(inproc[["tok_s", "threads", "device", "dtype", "attention"]])
    direct = inproc.sort_values("tok_s").iloc[-1]
    first = single_cfg.iloc[0]
    if direct["tok_s"] < first["decode_tok_s_mean"]:
        print("note: in-process decode measured slower than served (the host was busier, or the server runs the model "
              "differently); the split below is then not meaningful")
    served_ms, direct_ms = 1e3 / first["decode_tok_s_mean"], 1e3 / direct["tok_s"]
    parts = roofline.time_breakdown(first["decode_tok_s_mean"], roof, compute_and_framework=direct_ms - roof["t_mem_ms"] - roof["t_comm_ms"],
                                    serving_path=served_ms - direct_ms)
    for p in parts:
        if not store.done("bench_breakdown", label=first["label"], **p):  # computed again from the same rows: the same row
            store.append("bench_breakdown", {"label": first["label"], **p})
    print(f"in-process decode: {direct['tok_s']:.1f} tok/s ({direct['method']})")
    from .figures import breakdowns

    return pd.DataFrame([r for _, rows in breakdowns(store) for r in rows])  # a row computed again supersedes its older one


def say_breakdown(store) -> list[str]:
    """Per label of ``bench_breakdown``: the time per token, its largest part named from the table, and each part."""
    from ..stated import q, seed_case

    lines = []
    for label, parts in breakdowns(store):
        top = max(parts, key=lambda r: r["ms_per_token"])
        total = sum(r["ms_per_token"] for r in parts)
        text = (f"- {label}: {q('breakdown_total_ms', total, '.2f', of=label)} ms per token, of which the largest part is {top['part']} "
                f"({q('breakdown_share', top['share'], '.0%', of=label + ' | ' + top['part'])}); "
                + ", ".join(f"{r['part'].split(' (')[0]} {q('breakdown_ms', r['ms_per_token'], '.2f', of=label + ' | ' + r['part'])} ms"
                            for r in parts if r["ms_per_token"]) + ".")
        if "reported by the seed" in label and "sglang" in label and top["part"].startswith("unexplained"):
            share = seed_case().get("allreduce_share_of_sglang_decode")
            text += (" The unexplained part is what is left after the two floors, not a measured part; the communication floor "
                     "counts all-reduce at the latency named above, not the seed's own PCIe all-reduce, which its profile puts at "
                     + (f"{q('seed_allreduce_share', share, '.0%')} of SGLang's decode time" if share is not None else "an unknown share")
                     + " (data/reference/seed-case.json): this split cannot separate that from the rest of the remainder.")
        lines.append(text)
    return lines


# -- the seed case on paper ------------------------------------------------------------------------------------------------
def seed_roofline(store, *, seed_model: str, seed_profile: str, seed_tp: int, seed_allreduce_us: float = 0.0,
                  seed_reported_tok_s: str = "") -> dict:
    """The seed case's limits from data files: bandwidth alone (the card's bytes per token over the profile's bandwidth),
    then with the communication floor at each recorded (or assumed) all-reduce latency; the seed's reported rates against
    them (``bench_roofline``, ``bench_breakdown``). Returns ``rows``, ``floors``, ``roof``, ``n_ar``, ``crossover_us`` and
    ``lines`` (Markdown). A card or profile that cannot be read is recorded in ``failures``; ``rows`` is then empty."""
    from .. import roofline
    from ..findings import nccl as nccl_answer
    from ..paths import data_dir
    from ..profiles import load_profile
    from ..results import RunStore
    from ..profile.comm import pcie_rule
    from ..stated import REFERENCE_NCCL_RUN, card_roofline, q, seed_case

    out = {"rows": [], "floors": [], "roof": None, "n_ar": None, "crossover_us": None, "lines": []}
    try:
        card = roofline.load_model_card(seed_model)
        arch = roofline.config_bytes_per_token(card)   # layer by layer from the card's config
        avg = roofline.card_bytes_per_token(card)      # cross-check: active parameters x the checkpoint's average bytes/param
        prof = load_profile(seed_profile)
        bound = card_roofline(seed_model, seed_tp, seed_profile)
        # (label, latency, the reference grid's setting it was measured under: the subject of the tagged figures); the label
        # is stored plain in bench_roofline, and shown with its latency tagged (``tagged``)
        rule = pcie_rule(card, seed_tp, prof) if seed_allreduce_us <= 0 else None
        if seed_allreduce_us > 0:
            latencies = [(f"{seed_allreduce_us:g} us, an assumption (the parameter `seed_allreduce_us`)", seed_allreduce_us, None)]
            tagged = [latencies[0][0]]
        elif rule is not None:   # a PCIe profile: chapter 06's rule, each engine's latency by the NCCL environment the seed ran it with
            latencies = [(f"{L['central_us']:.1f} us, {e} ({L['env']}; the middle of {L['low_us']:.2f} to {L['high_us']:.2f} us, "
                          "published eight-rank PCIe figures: the rule chapter 06 uses)", L["central_us"], e)
                         for e, L in rule["latencies"].items()]
            tagged = [f"{q('seed_pcie_us', L['central_us'], '.1f', of=e)} us, {e} ({L['env']}; the middle of "
                      f"{q('seed_pcie_us_low', L['low_us'], '.2f', of=e)} to {q('seed_pcie_us_high', L['high_us'], '.2f', of=e)} us, "
                      "published eight-rank PCIe figures: the rule chapter 06 uses)" for e, L in rule["latencies"].items()]
        else:
            ref_nccl = nccl_answer(RunStore(data_dir() / "runs" / REFERENCE_NCCL_RUN)) or {}
            where = [(ref_nccl.get("default_us"), "default", f"NCCL's defaults measured over NVLink on H200 x2 (`data/runs/{REFERENCE_NCCL_RUN}`)")]
            if ref_nccl.get("setting") not in (None, "default") and ref_nccl.get("best_us"):
                where.append((ref_nccl["best_us"], ref_nccl["setting"], f"`{ref_nccl['setting']}` measured there"))
            latencies = [(f"{us:.1f} us, {what}", us, setting) for us, setting, what in where if us]
            tagged = [f"{q('ref_allreduce_us', us, '.1f', of=setting)} us, {what}" for us, setting, what in where if us]
        n_ar = rule["n"] if rule is not None else roofline.allreduces_per_token(card)
        floors = [(label, roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp, allreduce_us=us,
                                                   allreduces_per_token=n_ar)) for label, us, _ in latencies]
        settings = [setting for _, _, setting in latencies]
        seed_roof = floors[0][1] if floors else roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp,
                                                                         allreduce_us=0.0, allreduces_per_token=n_ar)
        reported = ({k.strip(): float(v) for k, v in (kv.split(":") for kv in seed_reported_tok_s.split(",") if ":" in kv)}
                    if seed_reported_tok_s else seed_case()["single_stream_tok_s"])
        for eng_name, tok_s in reported.items():
            # each engine's rate against its own floor (its latency under the NCCL environment the seed ran it with)
            own = next((i for i, st in enumerate(settings) if st == eng_name), 0)
            eng_roof, eng_label = (floors[own][1], floors[own][0]) if floors else (seed_roof, None)
            row = {"case": f"{seed_model} on {seed_tp}x {seed_profile} ({eng_name}, reported by the seed)", "measured_tok_s": float(tok_s),
                   "roofline_tok_s": bound["tok_s"], "roofline_with_comm_tok_s": eng_roof["tok_s"],
                   "pct_of_roofline": 100 * float(tok_s) / bound["tok_s"], "bytes_per_token": bound["bytes_per_token"],
                   "bandwidth_tbs": prof["memory_bandwidth_tbs"], "t_mem_ms": eng_roof["t_mem_ms"], "t_comm_ms": eng_roof["t_comm_ms"],
                   "tp": seed_tp, "allreduce_us": eng_roof["allreduce_us"], "allreduce_source": eng_label,
                   "bytes_method": arch["method"],
                   "source": "reported by the seed case" + ("" if seed_reported_tok_s else " (data/reference/seed-case.json)")
                             + "; roofline from the card and the profile"}
            if not store.done("bench_roofline", case=row["case"], roofline_tok_s=row["roofline_tok_s"], t_comm_ms=row["t_comm_ms"]):
                store.append("bench_roofline", row)
                for part in roofline.time_breakdown(float(tok_s), eng_roof):
                    store.append("bench_breakdown", {"label": row["case"], **part})
            out["rows"].append(row)
        crossover_us = seed_roof["t_mem_ms"] * 1e3 / n_ar
        out.update(floors=floors, roof=seed_roof, n_ar=n_ar, crossover_us=crossover_us, latency_labels=tagged, subject=bound["subject"],
                   model=seed_model, n_ar_field=f"collectives_per_token_tp{seed_tp}" if rule else "allreduces_per_token")
        sub = bound["subject"]  # every figure below tagged: recomputed from data/models, data/hardware and the reference run

        def card(field: str, value, fmt: str) -> str:
            return q("card_fact", value, fmt, of=f"{seed_model} | {field}")

        def floor(setting, field: str, value, fmt: str) -> str:
            return q("seed_floor", value, fmt, of=f"{sub} | {setting} | {field}") if setting else format(value, fmt)

        out["lines"] = [
            f"- {seed_model}: {card('active_params_b', arch['active_params'] / 1e9, '.1f')}B active parameters, "
            f"{card('gb_per_token', arch['bytes_per_token'] / 1e9, '.1f')} GB read per token (the card's average "
            f"{card('avg_bytes_per_param', avg['bytes_per_param'], '')} B/param would say "
            f"{card('avg_gb_per_token', avg['bytes_per_token'] / 1e9, '.1f')} GB: it undercounts the BF16 attention and shared experts).",
            f"- Bandwidth alone: at most {q('card_roofline_tok_s', bound['tok_s'], ',.0f', of=sub)} tok/s "
            f"({floor('default', 'gb_per_token', bound['bytes_per_token'] / 1e9, '.1f')} GB per token over "
            f"{floor('default', 'gpus', seed_tp, 'd')} GPUs at {floor('default', 'bandwidth_tbs', bound['bandwidth_tbs'], '')} TB/s each; "
            f"`data/models/{seed_model}.json` x `data/hardware/{seed_profile}.json`).",
            *[f"- With the communication floor, {card(f'collectives_per_token_tp{seed_tp}' if rule else 'allreduces_per_token', n_ar, 'd')} "
              f"{'collectives per token (the count of table seed_collectives in the what-if book)' if rule else 'all-reduces per token'} at {label}: at most "
              f"{floor(st, 'tok_s', r['tok_s'], ',.0f')} tok/s ({floor(st, 't_comm_ms', r['t_comm_ms'], '.2f')} ms of all-reduce per "
              f"token beside {floor(st, 't_mem_ms', r['t_mem_ms'], '.2f')} ms of memory time)."
              for label, (_, r), st in zip(tagged, floors, settings)],
            f"- The two floors are equal at {floor(settings[0] if settings else None, 'crossover_us', crossover_us, '.1f')} us per "
            "all-reduce: above that latency, all-reduce is the larger part of the limit. The seed's GPUs talk over PCIe, whose "
            "latency only chapter 04 run on that host measures" + (" (the latencies above are other hosts' published figures, "
            "the same rule and count the what-if book's chapters 04 to 06 use)." if rule else "."),
        ]
    except ServebookError as exc:
        store.record_failure("seed roofline", exc)
        print(f"seed roofline not computed: {exc}")
    return out


def say_prediction_tok_s(store) -> list[str]:
    """The full-model predictions of ``prediction_check`` in tok/s (1000 / predicted ms per token), with the interval's
    ends, tagged; the measured rate beside it where the whole model ran."""
    from ..stated import q

    lines = []
    for p in store.rows("prediction_check"):
        if not p.get("predicted_ms"):
            continue
        subject = f"{p['card']} | {p['engine']} | {p['backend']} | {p['mode']} | {p.get('quant', 'bf16')}"
        lo, hi = p.get("low_ms"), p.get("high_ms")
        text = (f"- {p['card']} with {p['engine']} ({p['backend']}, {p.get('quant', 'bf16')}): predicted "
                f"{q('predicted_tok_s', 1e3 / p['predicted_ms'], ',.0f', of=subject)} tok/s single stream")
        if lo and hi:
            text += (f" (between {q('predicted_tok_s_low', 1e3 / hi, ',.0f', of=subject)} and "
                     f"{q('predicted_tok_s_high', 1e3 / lo, ',.0f', of=subject)})")
        text += (", on one GPU with TP=1 and no all-reduce, from the per-layer GPU time between the two slices' profiles with "
                 "the rest counted once")
        if p.get("measured_ms"):
            text += f"; measured {q('measured_full_tok_s', 1e3 / p['measured_ms'], ',.0f', of=subject)} tok/s"
        lines.append(text + ".")
    return lines + _two_predictions(store)


def _two_predictions(store) -> list[str]:
    """Per card and quantization predicted but not run whole (``prediction_check``): why the page's two predictions of
    it differ (the bytes rule of ``extrapolation`` and the slope rule above), and the GPUs its weights need, which
    neither prediction assumes (both: one GPU, TP=1, no all-reduce)."""
    from .. import roofline
    from ..stated import q

    bw = store.rows("memory_bandwidth")
    cases = [r["case"] for r in store.rows("bench_roofline") if r.get("source") == "measured here"]
    profile = roofline.gpu_profile_named(bw[-1].get("device") if bw else (cases[-1].rsplit(" on ", 1)[-1] if cases else None))
    lines = []
    if not store.rows("model_extrapolation"):  # no slice served in chapter 05: the slope rule is the page's one prediction
        return lines
    checked = any(p.get("measured_ms") for p in store.rows("prediction_check"))
    for card, quant in dict.fromkeys((p["card"], p.get("quant", "bf16")) for p in store.rows("prediction_check")
                                     if p.get("predicted_ms") and not p.get("measured_ms")):
        text = (f"- {card} ({quant}) is predicted twice on this page, by two methods and both for one GPU (TP=1, no all-reduce): "
                "the table under \"Against the roofline\" scales the whole served slice's time per token by the bytes the full model "
                "reads, so the slice's fixed per-token costs (LM head, embedding, sampling, host work) are charged again with "
                "every layer; the prediction above measures what one more layer costs (its GPU time, deeper slice minus shallower) "
                "and counts the fixed part once. The two differ by that: the bytes rule gives the longer time wherever fixed "
                "costs are a large share of the slice's time." + (" The slope rule is the one checked against whole models above."
                                                                 if checked else ""))
        try:
            need = roofline.weights_on_gpus(card, quant, profile) if profile else None
        except (ServebookError, KeyError, TypeError):
            need = None
        if need and need["gpus_to_hold"] > 1:
            of = f"{card} | {quant} | {profile}"
            text += (f" Neither is a configuration that runs: its weights, {q('full_model_weights', need['weights_gib'], ',.0f', of=of + ' | weights_gib')} GiB, "
                     f"need at least {q('full_model_weights', need['gpus_to_hold'], 'd', of=of + ' | gpus_to_hold')} GPUs of "
                     f"{q('full_model_weights', need['gpu_memory_gib'], 'g', of=of + ' | gpu_memory_gib')} GiB; tensor-parallel over "
                     "them, each GPU reads its share of the bytes per token and every layer adds all-reduces (chapter 04's floor), "
                     "which neither prediction includes.")
        lines.append(text)
    return lines


# -- what we found, check yourself ---------------------------------------------------------------------------------------
def _at(label, c) -> str:
    return f"{label} | C={int(c)}"


def _same_start(store, r) -> bool | None:
    """Whether one recorded server start measured both takes of a pair of ``bench.remeasured`` (``servers.jsonl``),
    None where the run cannot tell (no store, no registry, or servers of that engine side by side)."""
    from .figures import server_start_at

    if store is None:
        return None
    engine = str(r["label"]).split("/")[0]
    a, b = server_start_at(store, engine, r.get("before_at")), server_start_at(store, engine, r.get("after_at"))
    return (a == b) if a and b else None


def _first_use_reading(r, t, same: bool | None) -> str:
    """What a sweep level's fall that did not recur once warmed says: a fact only where one server start measured the
    level both ways; otherwise a hypothesis, with the measurement that settles it."""
    starts = ("the two sweeps ran on different server starts (`servers.jsonl`)" if same is False else
              "this run does not show that one server start measured both (`servers.jsonl`)")
    settle = "the level measured unwarmed and then warmed on one server start, several batches each way, would settle it"
    if r["after"] >= 3 * r["before"]:
        if same:
            return ("did not recur once the level was warmed first, a " + f"{t(r, 'ratio', '.1f')}x change on the same server "
                    "start: it was a first-use cost at that concurrency, not saturation (which kernel or cache paid it is not "
                    "measured here).")
        return ("did not recur once the level was warmed first, a " + f"{t(r, 'ratio', '.1f')}x change. Hypothesis: a first-use "
                f"cost at that concurrency, not saturation; not settled, since {starts}, one batch per level each; {settle}.")
    return ("did not recur once the level was warmed first: consistent with a first-use cost, a hypothesis only (one batch "
            f"per level each way, no interval{'' if same else '; ' + starts}; {settle}).")


def _remeasured_lines(again, store=None) -> list[str]:
    """What measuring again changed, per configuration (``bench.remeasured`` rows); ``store`` tells whether one server
    start measured both takes (without it, the run is taken not to show that)."""
    import pandas as pd

    from ..stated import q
    from .runs import remeasured_subject

    def t(r, field: str, fmt: str = "") -> str:  # recomputed by the registry from the same bench.remeasured
        value = r["after"] / r["before"] if field == "ratio" else r[field]
        return q("remeasured", value, fmt, of=remeasured_subject(r, field))

    lines = []
    for label, g in pd.DataFrame(again).groupby("label", sort=False) if again else []:  # what measuring again changed
        single, sweep = g[g["phase"] == "single"], g[g["phase"] == "sweep"].sort_values("concurrency")
        if len(single):
            r = single.iloc[-1]
            lines.append(f"- {label}: single stream measured again with {t(r, 'after_method')} (before: {t(r, 'before_method')}): "
                         f"{t(r, 'before', ',.0f')} -> {t(r, 'after', ',.0f')} tok/s.")
        if len(sweep):
            fell = [r for _, r in sweep.iterrows() if r["fell"]]  # bench.remeasured: sweep_stalls' rule, both times
            levels = ", ".join(f"C={int(r['concurrency'])} {t(r, 'before', ',.0f')} -> {t(r, 'after', ',.0f')}" for _, r in sweep.iterrows()
                               if pd.notna(r["before"]) and pd.notna(r["after"]))
            last = sweep.iloc[-1]
            text = f"- {label}: sweep measured again with {t(last, 'after_method')} (before: {t(last, 'before_method')}), tok/s: {levels}."
            for r in fell:
                text += (f" The fall at C={int(r['concurrency'])} " + (
                    _first_use_reading(r, t, _same_start(store, r)) if not r["recurred"]
                    else "recurred with the level warmed first, so first use does not explain it; the cause is not settled by this run."))
            lines.append(text)
    return lines


def _single_vs_c1_line(v: dict) -> str:
    """A configuration whose single stream and sweep C=1 level disagree (``bench.figures.single_vs_c1``, ``apart``):
    both figures, where the gap is (time per token), what differs between the two measurements, and a hypothesis with
    the measurement that settles it."""
    from ..stated import q

    lab = v["label"]

    def f(field: str, fmt: str) -> str:
        return q("single_vs_c1", v[field], fmt, of=f"{lab} | {field}")

    reaches = (v["warmup_min"] is not None and v["warmup_min"] <= v["c1_max"] and v["warmup_max"] >= v["c1_min"])
    text = (f"- **{lab}: its single stream and its sweep's C=1 level disagree.** Single stream (the sweep's server start) "
            f"{f('single_tok_s', ',.1f')} ± {f('single_ci95', ',.1f')} tok/s, its requests {f('single_min', ',.0f')} to "
            f"{f('single_max', ',.0f')}; the C=1 level {f('c1_user_tok_s', ',.1f')} tok/s per user "
            f"({f('c1_throughput_tok_s', ',.1f')} tok/s throughput), its requests {f('c1_min', ',.0f')} to {f('c1_max', ',.0f')}: "
            f"{f('gap_pct', '+.0f')}%, outside the single stream's interval. The median time per output token was "
            f"{f('single_tpot_ms', '.2f')} ms against {f('c1_tpot_ms', '.2f')} ms, so the gap is in decode itself, not in the first "
            "token or in how the level's throughput is counted. "
            + ("Both ran on one server start (`servers.jsonl`), one after the other, " if v["same_start"] else "")
            + (f"{'w' if v['same_start'] else 'W'}ith the same prompt and output tokens ({f('prompt_tokens', '')} and "
               f"{f('output_tokens', '')}). " if v["same_tokens"] else ("" if not v["same_start"] else "with different tokens. "))
            + f"What differs is how they were sent: the single stream sent {f('single_warmup', 'd')} warm-up requests, then one "
            "client call per run; the C=1 level sent " + ("one untimed request first (`level_warmup`), then " if v["c1_level_warmup"]
                                                          else "no warm-up of its own, then ")
            + f"its {f('c1_requests', 'd')} requests back to back in one client call.")
    if v["warmup_min"] is not None:
        text += (f" The single stream's own warm-up requests, sent back to back in one call as the level's are, ran at "
                 f"{f('warmup_min', ',.0f')} to {f('warmup_max', ',.0f')} tok/s"
                 + (": the C=1 level's rate appears there too, so how the requests were sent does not explain the gap alone." if reaches
                    else "."))
    return text + (" Hypothesis: the server's decode speed changed between the two measurements" if reaches else
                   " Hypothesis: the warm-up before each or the way the requests were sent, or the server's decode speed changing "
                   "between the two") + ("; this run does not settle it: single-stream runs and C=1 batches alternated several "
                                         "times on one server start, with the GPU's clocks recorded, would.")


def _stall_reading(st: dict, summary_rows) -> str:
    """What a stalled sweep level (``bench.sweep_stalls``) says about its cause: where the level was warmed first
    (``level_warmup`` on its row) and stalled all the same, the warm-up counts against a first-use cost; else first use
    is the hypothesis, settled by the level warmed first."""
    row = next((r for r in reversed(list(summary_rows)) if r.get("phase") == "sweep" and r.get("label") == st["label"]
                and r.get("concurrency") == st["concurrency"]), {})
    head = "A saturated server holds its throughput and queues each request a little; this looks like a stall. "
    if row.get("level_warmup"):
        return (head + f"The level was warmed first (as many untimed requests as its concurrency, at C={st['concurrency']}, just "
                "before it: `level_warmup`) and stalled all the same: that counts against a first-use cost (kernels compiled on the first "
                "use of the batch shape) as the cause. The cause is not settled by this run; a trace of the engine's scheduler "
                "at that level, or the level repeated on the same server start, would settle it. The sweep's peak is a lower "
                "bound and its stop is not a saturation point.")
    return (head + "Hypothesis: kernels compiled on the first use of the new batch shape (not measured here); settled by the "
            "same level measured again after a warm-up at that concurrency, which the sweep now does before every level "
            "(`level_warmup`). Until then the sweep's peak is a lower bound and its stop is not a saturation point.")


def _client_check_line(cc) -> str:
    from ..stated import q

    cc = cc[cc["harness_fault"].isna()]

    def turn(r) -> str:  # a metric whose two servebook runs disagree: the run after bench_serving's, against it
        xs = r.get("servebook_runs") if isinstance(r.get("servebook_runs"), list) else []
        if r["servebook_spread"] <= 0.5 or len(xs) < 2:
            return ""
        at = f"{r['label']} | {r['metric']} | C={int(r['concurrency'])}"
        return (f" (servebook's runs {', '.join(q('client_check_turn', x, ',.0f' if x >= 100 else '.3g', of=f'{at} | run {i}') for i, x in enumerate(xs, 1))}: "
                f"its run after bench_serving's is "
                f"{q('client_check_turn', (xs[-1] - r['bench_serving']) / r['bench_serving'], '+.1%', of=at + ' | last against bench_serving')}; hypothesis: its first run, at a concurrency the server had "
                "not served since it started, paid a first-use cost like the first sweep's; the check now warms the server at its "
                "concurrency first)")
    per = ", ".join(f"{m} " + " / ".join(
        f"{q('client_check_rel_diff', r['rel_diff'], '+.1%', of=f'{r.label} | {m} | C={int(r.concurrency)}')} at C={int(r['concurrency'])}{turn(r)}"
        for _, r in g.iterrows()) for m, g in cc.groupby("metric", sort=False))
    return (f"- servebook's client against `sglang.bench_serving`, taking turns on the live server (servebook - bench_serving, "
            f"relative): {per}. A difference beyond servebook's own run-to-run spread is the clients' or the server's between "
            "turns; which, this run does not settle (more alternating turns would).")


def found(store, m: dict, *, runs: int, warmup: int, verdict: dict, ceiling_tok_s, ceiling_check_df, seed: dict) -> list[str]:
    """"What we found" as Markdown bullets, from this run's tables: each configuration's rate, latencies and sweep (with
    why it stopped), engines side by side, the two chapters' defaults, warm-up and stalls, what measuring again changed,
    levels held back by waits, failures, the seed's rates against their limits, the time split, the client checks."""
    import pandas as pd

    from ..findings import default_methods, say_default_methods, separated, throughput
    from ..stated import q, say_throughput
    from .figures import single_vs_c1
    from .runs import remeasured, sweep_stalls

    single_df, sweep_ok, sweep_df, single_all = m["single_df"], m["sweep_ok"], m["sweep_df"], m["single_all"]
    lines = []
    measured_t = [t for t in throughput(store) if t["single_tok_s"] is not None]
    apart = {v["label"]: v for v in single_vs_c1(store) if v["apart"]}  # single stream and C=1 disagree: said beside them
    for t in measured_t:  # chapter 06's definition and sentences: per label, the recorded single-stream row, its roofline
        lines += say_throughput(t, runs=runs)
        if t["label"] in apart:
            lines.append(_single_vs_c1_line(apart[t["label"]]))
        r = single_df[single_df["label"] == t["label"]].iloc[-1]
        lab = t["label"]
        lines.append(f"- {lab}: TTFT {q('single_ttft_ms', r['ttft_s_mean'] * 1e3, '.0f', of=lab)} ms, TPOT "
                     f"{q('single_tpot_ms', r['tpot_s_mean'] * 1e3, '.1f', of=lab)} ms, "
                     f"{q('tokens_per_chunk', r['tokens_per_chunk'], '.2f', of=lab)} tokens per streamed chunk.")
    lines += say_sweep_stops(store)
    for t in measured_t[1:]:  # engines side by side: chapter 06's one comparison, each against the first engine measured
        ref = measured_t[0]
        lines.append(f"- {t['label']} against {ref['label']}, single stream: "
                     f"{separated(t['single_tok_s'], t['single_ci95'], ref['single_tok_s'], ref['single_ci95'], starts=(t['starts'], ref['starts']), of=t['label'] + ' vs ' + ref['label'], names=('single_vs_pct', 'single_vs_starts'))}"
                     + (f"; sweep peak {q('peak_tok_s', t['peak_tok_s'], ',.0f', of=t['label'])} tok/s at "
                        f"C={q('peak_c', t['peak_c'], 'd', of=t['label'])} against {q('peak_tok_s', ref['peak_tok_s'], ',.0f', of=ref['label'])} at "
                        f"C={q('peak_c', ref['peak_c'], 'd', of=ref['label'])} (one batch per level: no interval, so a difference there is a "
                        "hint, not a finding)." if t["peak_tok_s"] and ref["peak_tok_s"] else "."))
    if default_methods(store):  # chapter 03 measured the default too: the same way, or not
        lines.append(say_default_methods(default_methods(store)))
    for _, r in single_df.iterrows():  # a rate still climbing over the runs is warm-up, not spread
        xs = [x for x in r.get("decode_tok_s_runs") if x is not None] if isinstance(r.get("decode_tok_s_runs"), list) else []
        if len(xs) >= 3 and xs == sorted(xs) and xs[-1] > 1.3 * xs[0]:
            lines.append(f"- {r['label']}: the single-stream rate rose in every run, {xs[0]:,.0f} to {xs[-1]:,.0f} tok/s, so its interval "
                         f"measures warm-up as much as spread. Hypothesis: the server was still warming after {warmup} warm-up requests; "
                         "settled by more warm-up requests (`warmup`) and the same runs again.")
    stalls = sweep_stalls(m["summary_rows"], m["request_rows"])
    for st in stalls:
        def s_(field: str, fmt: str, st=st) -> str:  # recomputed by the registry from the same bench.sweep_stalls
            return q("sweep_stall", st[field], fmt, of=f"{st['label']} | C={st['concurrency']} | {field}")

        lines.append(f"- {st['label']}: throughput fell from {s_('best_before_tok_s', ',.0f')} tok/s at C={st['best_before_concurrency']} to "
                     f"{s_('throughput_tok_s', ',.0f')} at C={st['concurrency']}; first tokens there took {s_('ttft_median_s', '.2f')} s "
                     f"(median) and up to {s_('ttft_max_s', '.2f')} s, against {s_('ttft_median_best_s', '.2f')} s at C={st['best_before_concurrency']}. "
                     + (_stall_reading(st, m["summary_rows"]) if st["stalled"]
                        else "The first tokens do not show a stall; the cause is not settled by this run."))
    lines += _remeasured_lines(remeasured(store.rows("bench_summary")), store)
    for _, r in (sweep_ok.iterrows() if len(sweep_ok) else []):  # a level held back by first-token waits, not by decode
        p50, p99, user = r.get("ttft_server_s_p50"), r.get("ttft_server_s_p99"), r.get("per_user_tok_s")
        stalled = any(st["label"] == r["label"] and st["concurrency"] == r["concurrency"] for st in stalls)  # said above
        if not stalled and pd.notna(p99) and pd.notna(p50) and pd.notna(user) and p99 > 0.5 and p99 > 10 * p50 \
                and r["throughput_tok_s"] < 0.6 * r["concurrency"] * user:
            at = _at(r["label"], r["concurrency"])
            lines.append(f"- {r['label']} at C={int(r['concurrency'])}: each user decoded at {q('sweep_per_user_tok_s', user, ',.0f', of=at)} "
                         f"tok/s, yet a request waited up to {q('sweep_ttft_server_p99_s', p99, '.2f', of=at)} s for its first token after "
                         f"it was sent (median {q('sweep_ttft_server_p50_ms', p50 * 1e3, '.0f', of=at)} ms), so the level's "
                         f"{q('sweep_throughput_tok_s', r['throughput_tok_s'], ',.0f', of=at)} tok/s is well below C={int(r['concurrency'])} "
                         f"users at that rate ({q('sweep_all_users_tok_s', r['concurrency'] * user, ',.0f', of=at)}): the waits, not decode, limit it, so this level is no "
                         "saturation point. The cause is not settled by this run (a trace of the engine's scheduler at that level would).")
    for _, r in (single_all[single_all["decode_tok_s_mean"].isna()].iterrows() if len(single_all) else []):
        errors = r.get("errors") if isinstance(r.get("errors"), list) else []
        lines.append(f"- **{r['label']}** single stream: no request succeeded ({int(r['failed'])} failed)"
                     + (f", e.g. {excerpt(errors[0])}" if errors else "") + "; the server log says why.")
    for label, g in (sweep_df.groupby("label") if len(sweep_df) else []):
        if not g["throughput_tok_s"].notna().any():
            lines.append(f"- {label}: no request of the concurrency sweep succeeded ({int(g['failed'].sum())} failed).")
    for row in seed["rows"]:
        pct_comm = 100 * row["measured_tok_s"] / row["roofline_with_comm_tok_s"]
        # its own latency, tagged (the label of the floor its row was computed against)
        labels = dict(zip((label for label, _ in seed.get("floors") or []), seed.get("latency_labels") or []))
        source = labels.get(row["allreduce_source"]) or row["allreduce_source"] or "no latency"
        lines.append(f"- {row['case']}: {q('seed_reported_tok_s', row['measured_tok_s'], '.1f', of=row['case'])} tok/s is "
                     f"{q('seed_pct_of_roofline', row['pct_of_roofline'], '.1f', of=row['case'])}% "
                     f"of its bandwidth roofline ({q('seed_row_roofline_tok_s', row['roofline_tok_s'], ',.0f', of=row['case'])} tok/s); "
                     f"with the communication floor at {source}, {q('seed_pct_of_comm_roofline', pct_comm, '.1f', of=row['case'])}% of "
                     f"{q('seed_comm_roofline_tok_s', row['roofline_with_comm_tok_s'], ',.0f', of=row['case'])} tok/s.")
    lines += say_breakdown(store)
    cc, _ = client_check(store)
    if len(cc):  # servebook's client against SGLang's own on the live server, each metric both ways (the last of each)
        lines.append(_client_check_line(cc))
    n_near = int(ceiling_check_df["near_ceiling"].sum()) if len(ceiling_check_df) else 0
    if n_near:
        lines.append(f"- **{n_near} measurement(s) came within {ceiling_check_df['warn_at'].iloc[0]:.0%} of the client's own ceiling** "
                     f"({q('servebook_ceiling_tok_s', ceiling_tok_s, ',.0f')} tokens/s against a fake server): read them as lower bounds "
                     "of the server's speed.")
    elif len(ceiling_check_df):
        lines.append(f"- The client sustained up to {q('servebook_ceiling_tok_s', ceiling_tok_s, ',.0f')} tokens/s against a fake server; "
                     f"the busiest measurement used {q('ceiling_use_max', ceiling_check_df['share_of_ceiling'].max(), '.2%')} of it, so the "
                     "client is not what these numbers measure.")
    lines.append(f"- {ceiling_sentence(verdict)}")
    fails = store.table("failures")
    if len(fails):
        lines.append(f"- {q('failures_recorded', len(fails), 'd')} recorded failures in this run (table `failures`), e.g. "
                     f"{fails.iloc[-1]['step']}: {excerpt(marked(fails.iloc[-1]['error']))}")
        lines += whole_block("The recorded failures, whole", [f"{r['step']}: {marked(r['error'])}" for _, r in fails.iterrows()])
    return lines


def check_yourself(m: dict, *, verdict: dict, ceiling_check_df, seed: dict, seed_tp: int) -> list[tuple[str, str]]:
    """The chapter's questions, each answered from this run's tables (for ``findings.check_yourself_markdown``)."""
    from ..stated import q

    single_df, sweep_df = m["single_df"], m["sweep_df"]
    qa = []
    cfg = m["single_cfg"]
    if len(cfg) and len(single_df):
        r0 = cfg.iloc[0]
        lab = r0["label"]
        qa.append(("Why is `decode tok/s` computed from the first token on, and not as output tokens / end-to-end time?",
                   f"End-to-end time includes the prefill (TTFT), which does not scale with output length. Here {lab}: TTFT "
                   f"{q('single_ttft_ms', single_df[single_df['label'] == lab].iloc[-1]['ttft_s_mean'] * 1e3, '.0f', of=lab)} ms, then "
                   f"{q('single_tok_s', r0['decode_tok_s_mean'], ',.1f', of=lab)} tok/s; dividing all tokens by the whole time would mix the two."))
    first_tpc = (f"; this run's server sent {q('tokens_per_chunk', single_df[single_df['label'] == single_df.iloc[0]['label']].iloc[-1]['tokens_per_chunk'], '.2f', of=single_df.iloc[0]['label'])} "
                 "tokens per chunk." if len(single_df) else ".")
    qa.append(("A server streams 4 tokens per chunk every 40 ms. What is the inter-chunk gap, and what is the per-token inter-token latency?",
               "40 ms between chunks, 10 ms per token. servebook keeps both (`chunk_gap_ms`, `itl_ms`)" + first_tpc))
    c4 = sweep_df[sweep_df["concurrency"] == 4] if len(sweep_df) else sweep_df
    if len(c4):
        at = _at(c4.iloc[0]["label"], 4)
        c4_text = (f". Here at C=4 ({c4.iloc[0]['label']}): ttft_s p50 {q('sweep_ttft_p50_ms', c4.iloc[0]['ttft_s_p50'] * 1e3, '.0f', of=at)} ms, "
                   f"ttft_server_s p50 {q('sweep_ttft_server_p50_ms', c4.iloc[0]['ttft_server_s_p50'] * 1e3, '.0f', of=at)} ms.")
    else:
        c4_text = "; this run's sweep did not reach C=4."
    qa.append(("At C=4 with all requests arriving at once, why is `ttft_s` larger than `ttft_server_s` for some requests, and which would a user report?",
               "Requests beyond the free slots wait in the client's queue; `ttft_s` counts that wait, which is what the user feels" + c4_text))
    roof, rows = seed["roof"], seed["rows"]
    if roof is not None and rows:
        qa.append(("The seed case's limit: which floor dominates, memory or communication, and what would settle it?",
                   f"Memory takes {q('seed_t_mem_ms', rows[0]['t_mem_ms'], '.2f', of=rows[0]['case'])} ms per token on "
                   f"{q('seed_floor', seed_tp, 'd', of=seed['subject'] + ' | default | gpus')} GPUs; "
                   f"{q('card_fact', seed['n_ar'], 'd', of=seed['model'] + ' | ' + seed.get('n_ar_field', 'allreduces_per_token'))} "
                   "collectives take "
                   f"{q('seed_t_comm_ms', rows[0]['t_comm_ms'], '.2f', of=rows[0]['case'])} ms for {rows[0]['case']} at "
                   f"{(seed.get('latency_labels') or [None])[0] or rows[0]['allreduce_source'] or 'no latency'}. The two are equal at "
                   f"{q('seed_crossover_us', rows[0]['t_mem_ms'] * rows[0]['allreduce_us'] / rows[0]['t_comm_ms'], '.1f', of=rows[0]['case']) if rows[0]['t_comm_ms'] else 'no'} us per all-reduce: below that memory dominates and bandwidth sets the limit, above it faster "
                   "all-reduce (custom kernels, NCCL settings) matters more. Only chapter 04 on the seed's PCIe host measures its latency."))
    if verdict["bench_serving_measured"]:
        qa.append(("Why does servebook stream with an HTTP client of its own instead of httpx, and what would make you replace it?",
                   _transport_answer(verdict)))
    qa.append(("When would a benchmark number be the client's, not the server's? How does this chapter check it?",
               "When the rate uses much of what the client can stream on its core. Each rate is compared with the client ceiling at the "
               + (f"nearest concurrency; here the busiest used {q('ceiling_use_max', ceiling_check_df['share_of_ceiling'].max(), '.2%')} of it."
                  if len(ceiling_check_df) else "nearest concurrency.")))
    return qa


def _transport_answer(v: dict) -> str:
    """The transport question answered once, at the level the verdict is taken (one event per write, as engines stream),
    the same reading "What we found" states: keep servebook's own client, replace it with httpx, or not decided."""
    from ..stated import q

    r = v["decided_in"] or {}
    goal = q("ceiling_goal", v["goal"], "g")
    head = f"Only a measurement keeps it: its ceiling must be at least {goal}x sglang.bench_serving's while a library client's is not."
    if v["justified"] is None or not r.get("servebook_ratio") or not r.get("httpx_ratio"):
        return f"{head} Not decided in this run: {v['reason_tagged']}."
    sb = q("ceiling_ratio_decided", r["servebook_ratio"], ".2f", of="servebook")
    hx = q("ceiling_ratio_decided", r["httpx_ratio"], ".2f", of="httpx")
    reading = (f"{head} At {q('method_constant', r.get('events_per_write'), 'd', of='ceiling_engine_regime')} event per write, as engines stream, servebook's is {sb}x and httpx's {hx}x: "
               f"the hand-written transport is {q('fast_path_justified', v['justified'], 'justified|not justified')} here. ")
    if v["justified"]:
        return reading + "httpx does not reach the goal at that level; where it does, the library client should replace servebook's own."
    if r.get("httpx_reaches"):
        return reading + "httpx reaches the goal at that level: the library client should replace servebook's own."
    return reading + "Neither reaches the goal at that level, so the hand-written transport buys nothing a library client lacks here."


# -- the what-if page (a hardware profile, nothing measured) ---------------------------------------------------------------
def whatif_found(roof, facts: dict) -> list[str]:
    """"What we found" of a what-if run: each roofline line of chapter 05 (``roofline`` rows), the bandwidth-only limit
    tagged, and the seed case's gap where the profile is the seed's host."""
    from ..stated import q, seed_case, seed_sentence

    subject = f"{facts['model']} on {facts['gpus']}x {facts['profile']}"
    lines = []
    for _, r in roof.iterrows():
        limit = (q("card_roofline_tok_s", r["tok_s"], ",.0f", of=subject) if r["case"].endswith(": bandwidth only")
                 else q("plan_roofline_tok_s", r["tok_s"], ",.0f", of=r["case"]))
        lines.append(f"- `{r['case']}` (its row in table `roofline`): at most {limit} tok/s ({_plan(r, 'gb_per_token', '.1f')} GB per "
                     f"token over {_plan(r, 'tp', 'd')} GPUs at {_plan(r, 'bandwidth_tbs', '')} TB/s each, plus "
                     f"{_plan(r, 't_comm_ms', '.2f')} ms of all-reduce).")
    lines.append("- Predicted from data files, not measured: the benchmark commands above measure the real rate on the host.")
    seed = seed_case()
    if (facts["model"], facts["profile"], facts["gpus"]) == (seed["model"], seed["profile"], seed["tp"]):
        lines.append(f"- This hardware profile is the seed case's host. {seed_sentence()}")
    return lines


def _plan(r, field: str, fmt: str) -> str:
    """A figure of one ``roofline`` row of chapter 05's plan, tagged (``plan_roofline_fact``, recomputed from the row)."""
    from ..stated import q

    value = r["bytes_per_token"] / 1e9 if field == "gb_per_token" else (int(r[field]) if field == "tp" else r[field])
    return q("plan_roofline_fact", value, fmt, of=f"{r['case']} | {field}")


def whatif_check_yourself(roof, facts: dict) -> list[tuple[str, str]]:
    """The what-if page's questions, answered from its ``roofline`` rows and the data files they came from."""
    from ..stated import q

    bw_only = roof[roof["case"].str.endswith(": bandwidth only")]
    with_comm = roof[~roof["case"].str.endswith(": bandwidth only")]
    qa = []
    if len(bw_only):
        b = bw_only.iloc[0]
        qa.append(("What bounds single-stream decode on this hardware profile before any overhead, and from which files?",
                   f"{q('plan_roofline_tok_s', b['tok_s'], ',.0f', of=b['case'])} tok/s: {_plan(b, 'gb_per_token', '.1f')} GB read per token "
                   f"(data/models/{facts['model']}.json, counted layer by layer) over {_plan(b, 'tp', 'd')} GPUs at "
                   f"{_plan(b, 'bandwidth_tbs', '')} TB/s each (data/hardware/{facts['profile']}.json)."))
    if len(with_comm):
        lo, hi = with_comm.loc[with_comm["tok_s"].idxmin()], with_comm.loc[with_comm["tok_s"].idxmax()]
        lo_s, hi_s = (q("plan_roofline_tok_s", x["tok_s"], ",.0f", of=x["case"]) for x in (lo, hi))
        qa.append(("Why does this page give several limits, and which one will the real host reach?",
                   f"Each adds the all-reduce floor at one latency taken from other hosts (chapter 04's rows: on a PCIe profile each "
                   f"engine's own, by the NCCL environment the seed ran it with) ({lo_s} to {hi_s} tok/s); the profile's own "
                   "latency is unmeasured, so none of them is its limit. Chapter 04 on the real host gives the latency, chapter 05 there the "
                   "real rate: far below every line means the time goes to overhead, not to bytes or all-reduces."))
    return qa


# -- small displays ----------------------------------------------------------------------------------------------------
def show_ceiling_comparison(store, verdict: dict, ceiling_all) -> None:
    """The three clients' ceilings side by side and level by level (where the run compared them), and the goal."""
    import pandas as pd
    from IPython.display import display

    from .ceiling import ceiling_comparison

    if "client" in ceiling_all:
        display(pd.DataFrame(ceiling_comparison(store.rows("client_ceiling"))).round(2))
        display(ceiling_all.sort_values(["events_per_write", "concurrency"], kind="stable")[
            ["events_per_write", "concurrency", "client", "ok", "requests", "stream_tok_s", "client_cpu_us_per_token", "client_busy",
             "ttft_server_p50_s"]].round(3))
        for client, why in verdict["skipped"].items():
            print(f"{client} not measured: {why}")
    print(f"goal: servebook's ceiling at least {verdict['goal']}x sglang.bench_serving's; {verdict['reason']}")


def ceiling_warnings(ceiling_check_df) -> list[str]:
    """A warning per rate near the client's ceiling, and the highest use of it (``bench.ceiling_check`` rows)."""
    out = []
    if not len(ceiling_check_df):
        return out
    for _, r in ceiling_check_df[ceiling_check_df["near_ceiling"]].iterrows():
        out.append(f"WARNING: {r['label']} {r['phase']} C={r['concurrency']}: {r['tok_s']:,.1f} tok/s is {r['share_of_ceiling']:.0%} of the "
                   f"client's ceiling and keeps {r['client_core_share'] or 0:.0%} of its core busy: this number may be the client's, not the server's")
    worst = ceiling_check_df.sort_values("share_of_ceiling").iloc[-1]
    out.append(f"highest use of the client's ceiling: {worst['share_of_ceiling']:.2%} ({worst['label']}, {worst['phase']} C={worst['concurrency']}); "
               f"warning threshold {worst['warn_at']:.0%}")
    return out


def roofline_shown(store, host_roof: dict, seed: dict, show: bool = True):
    """The rows of ``bench_roofline`` that stand now, as one frame: this run's standing "measured here" rows
    (``host_roofline``) and the seed rows this execution computed (``seed_roofline``); with the sentence that says how many
    earlier rows the table keeps unshown (superseded by a later measurement of the same case, or computed by an earlier
    rule), so no superseded row sits beside its current one under the same label. ``show``: print the sentence and return
    the frame (a notebook cell's last value); else ``(frame, sentence)``."""
    import pandas as pd

    rows = list(host_roof.get("rows") or []) + list(seed.get("rows") or [])
    kept = len(store.rows("bench_roofline")) - len(rows)
    cols = ["case", "measured_tok_s", "roofline_tok_s", "pct_of_roofline", "source", "recorded_at"]
    df = pd.DataFrame(rows)
    df = df[[c for c in cols if c in df]] if len(df) else df
    note = (f"The rows that stand now; {kept} earlier row{'' if kept == 1 else 's'} of table `bench_roofline` (superseded by "
            "a later measurement of the same case, or computed by an earlier rule) stay in the table, not shown."
            if kept > 0 else "Every row of table `bench_roofline`.")
    if show:
        print(note)
        return df if len(df) else "no roofline computed"
    return df, note


def what_if_line(profile: str, weights) -> str:
    """With a hardware ``profile`` beside a measured model: its bandwidth-only limit on one such GPU ("" without)."""
    if not profile or not weights:
        return ""
    from .. import roofline
    from ..profiles import load_profile

    p = load_profile(profile)
    what_if = roofline.decode_roofline(weights["bytes_per_token"], p["memory_bandwidth_tbs"])
    return f"what-if: this model on one {p['name']} would be bounded at {what_if['tok_s']:,.0f} tok/s by bandwidth alone"
