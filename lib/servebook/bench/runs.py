"""Runs: single stream (C=1, mean and 95% t-interval over runs) and the concurrency sweep, stored as tidy rows.

    summary = single_stream(url, model, prompts, store=store, tokenizer=tok, runs=5, warmup=2)
    levels = concurrency_sweep(url, model, prompts, store=store, tokenizer=tok, max_concurrency=128)
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Iterable, Sequence

from ..errors import ParameterError
from .client import run_requests
from .payload import bench_config
from .prompts import Prompt
from .saturation import FELL, SATURATION_GROWTH, fell, grew, stop_words, sweep_stalls  # noqa: F401 (the page names bench.runs.SATURATION_GROWTH)
from .sse import DECODE_TIMED_TO, RequestResult, against_set, timed_to, timed_to_words, untimed_of
from .stats import mean_ci, percentile

__all__ = ["single_stream", "concurrency_sweep", "concurrency_levels", "summarize_level", "sweep_stalls", "current", "remeasured",
           "requests_of", "prompts_sha", "over_starts", "record_start", "start_measured", "first_start", "set_apart"]


def start_measured(store, label: str, start: int, max_tokens: int, warmup: int) -> dict | None:
    """The single-stream summary of ``label`` at server start ``start`` this run already recorded with this method (a row
    without ``start`` is start 0), else None: a resumed run measures only the starts it lacks."""
    rows = [r for r in store.find("bench_summary", label=label, phase="single", max_tokens=max_tokens, warmup=warmup)
            if int(r.get("start") or 0) == start]
    return rows[-1] if rows else None


def first_start(store, label: str, max_tokens: int, warmup: int) -> int:
    """The number of the first server start this execution measures for ``label``: 0; in an execution that measures a
    recorded run again (``servebook book --again``), the start after the last one earlier executions recorded with this
    method, so that its starts are further starts of the same configuration and method, pooled with those
    (:func:`over_starts`), not the same starts taken again."""
    ex = store.execution
    if not ex.get("again"):
        return 0
    earlier = [int(r.get("start") or 0) for r in store.rows("bench_summary", executions="all")
               if r.get("label") == label and r.get("phase") == "single" and r.get("max_tokens") == max_tokens
               and r.get("warmup") == warmup and (r.get("execution") or 1) < ex["id"]]
    return max(earlier) + 1 if earlier else 0


def record_start(store, single: dict, *, model: str, launch: str, ready_s: float | None = None) -> dict:
    """One server start's single-stream rate, a row of ``bench_starts`` (label, engine, start, decode_tok_s with the
    interval within the start, runs, warm-ups, tokens in and out, the prompts' fingerprint, model, launch, ready_s)."""
    row = {"label": single.get("label"), "engine": single.get("engine"), "attention": single.get("attention"),
           "start": int(single.get("start") or 0), "decode_tok_s": single.get("decode_tok_s_mean"),
           "decode_tok_s_ci95": single.get("decode_tok_s_ci95"), "runs": single.get("runs"), "warmup": single.get("warmup"),
           "max_tokens": single.get("max_tokens"), "input_tokens": single.get("input_tokens"), "prompts_sha": single.get("prompts_sha"),
           "model": str(model), "launch": launch, "ready_s": ready_s}
    if not store.done("bench_starts", label=row["label"], start=row["start"], max_tokens=row["max_tokens"], warmup=row["warmup"]):
        store.append("bench_starts", row)
    return row


def prompts_sha(prompts: Sequence[Prompt]) -> str:
    """A short fingerprint of a prompt set (its texts, in order): two measurements sent the same prompts when it matches."""
    import hashlib

    return hashlib.sha256("\x00".join(p.text for p in prompts).encode()).hexdigest()[:12]


def over_starts(single_rows: Iterable[dict]) -> dict:
    """One configuration's single-stream rate over server starts: the standing ``bench_summary`` rows of phase single
    (one per ``start``; a row without the field is start 0) -> {"starts", "per_start": [{start, decode_tok_s, ci95, runs}],
    "mean", "ci95", "over"}: a 95% t-interval over the per-start means with two starts or more, else the one start's own
    interval over its runs ("one start: interval within a start only")."""
    by_start: dict[int, dict] = {}
    for r in single_rows:
        by_start[int(r.get("start") or 0)] = r  # the last of a start stands
    per = [{"start": k, "decode_tok_s": r.get("decode_tok_s_mean"), "ci95": r.get("decode_tok_s_ci95"), "runs": r.get("runs")}
           for k, r in sorted(by_start.items())]
    rates = [p["decode_tok_s"] for p in per if p["decode_tok_s"] is not None]
    if len(rates) >= 2:
        ci = mean_ci(rates)
        return {"starts": len(rates), "per_start": per, "mean": ci["mean"], "ci95": ci["half_width"], "over": f"{len(rates)} server starts"}
    one = next((p for p in per if p["decode_tok_s"] is not None), per[0] if per else {})
    return {"starts": 1, "per_start": per, "mean": one.get("decode_tok_s"), "ci95": one.get("ci95"),
            "over": "one start: interval within a start only"}


def summarize_level(results: Sequence[RequestResult], wall_s: float | None = None) -> dict:
    """Throughput, per-user decode rate and latency percentiles (p50/p90/p99) of one batch, with the rule that timed
    its decode (``decode_timed_to``) and the wait after each last token (``tail_s_*``)."""
    ok = [r for r in results if r.ok]
    out: dict[str, Any] = {"requests": len(results), "ok": len(ok), "failed": len(results) - len(ok), "decode_timed_to": DECODE_TIMED_TO}
    if wall_s is None and ok:
        # first arrival -> last stream end
        wall_s = max((r.e2e_s or 0) for r in ok)
    tokens = sum(r.output_tokens for r in ok)
    out["output_tokens"] = tokens
    out["wall_s"] = wall_s
    out["throughput_tok_s"] = tokens / wall_s if ok and wall_s else None
    rates = [r.decode_tok_s for r in ok if r.decode_tok_s]
    out["per_user_tok_s"] = statistics.mean(rates) if rates else None
    out["per_user_tok_s_p50"] = percentile(rates, 50)
    for name in ("ttft_s", "ttft_server_s", "slot_wait_s", "e2e_s", "tpot_s", "tail_s"):
        vals = [getattr(r, name) for r in ok if getattr(r, name) is not None]
        out[f"{name}_mean"] = statistics.mean(vals) if vals else None
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = percentile(vals, q)
    itl = [x for r in ok for x in r.itl_ms]
    gaps = [x for r in ok for x in r.chunk_gaps_ms]
    for q in (50, 90, 99):
        out[f"itl_ms_p{q}"] = percentile(itl, q)
        out[f"chunk_gap_ms_p{q}"] = percentile(gaps, q)
    out["itl_ms_mean"] = statistics.mean(itl) if itl else None
    out["tokens_per_chunk"] = tokens / sum(r.n_chunks for r in ok) if ok and sum(r.n_chunks for r in ok) else None
    errs = sorted({r.error for r in results if r.error})
    out["errors"] = errs[:5]
    out.update(untimed_of(ok))
    return out


def _store_requests(store, results, base: dict, prompt_tokens: Sequence[int] | None = None) -> None:
    for r in results:
        row = {**base, **r.row()}
        if prompt_tokens is not None and row.get("prompt_tokens") is None:
            row["prompt_tokens"] = prompt_tokens[r.index % len(prompt_tokens)]
        store.append("bench_requests", row)
        if not r.ok:
            store.record_failure("bench_request", r.error or "failed", **{k: base.get(k) for k in ("engine", "attention", "label", "phase", "concurrency", "run")},
                                 request=r.index)


def single_stream(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    store=None,
    tokenizer=None,
    engine: str = "",
    attention: str = "",
    label: str = "",
    api: str = "completions",
    max_tokens: int = 128,
    runs: int = 5,
    warmup: int = 2,
    requests_per_run: int = 1,
    fixed_length: bool = True,
    request_timeout: float = 300.0,
    progress: bool = True,
    host=None,
    start: int | None = None,
    ceiling_tok_s: float | None = None,
) -> dict:
    """Single stream (C=1): ``warmup`` requests, then ``runs`` runs of ``requests_per_run`` requests.

    ``start``: which server start of this configuration it measures (0, 1, ...), recorded on every row (field ``start``)
    so that a later start is not read as the same measurement taken again (:func:`current`, :func:`over_starts`).
    ``ceiling_tok_s``: the hardware's ceiling for one stream where one is known (``sse.implausible``).

    Every request goes to ``store`` table ``bench_requests`` (phase ``warmup``/``single``),
    the summary (mean and 95% t-interval over runs of the per-run mean decode tok/s,
    TTFT and TPOT) to ``bench_summary``. Returns the summary row.
    """
    _check_single(prompts, runs, warmup, requests_per_run)
    cfg = {**bench_config(engine, attention, label, api), **({"start": int(start)} if start is not None else {})}
    common = dict(max_tokens=max_tokens, concurrency=1, api=api, engine=engine, tokenizer=tokenizer,
                  fixed_length=fixed_length, request_timeout=request_timeout, host=host, ceiling_tok_s=ceiling_tok_s)
    ptoks = [p.tokens for p in prompts]
    if warmup:
        w = run_requests(url, model, [prompts[i % len(prompts)] for i in range(warmup)], desc="warm-up", progress=False, **common)
        if store is not None:
            _store_requests(store, w, {**cfg, "phase": "warmup", "concurrency": 1, "run": -1, "max_tokens": max_tokens, "warmup": warmup}, ptoks)
    per_run, all_results = _single_runs(url, model, prompts, store, cfg, common, runs, warmup, requests_per_run, progress)
    s = _single_summary(cfg, prompts, per_run, all_results, runs, warmup, requests_per_run, max_tokens)
    if store is not None:
        store.append("bench_summary", s)
    return s


def _check_single(prompts: Sequence[Prompt], runs: int, warmup: int, requests_per_run: int) -> None:
    """A one-line error for counts a single stream cannot run with, or no prompt."""
    if runs < 1 or warmup < 0 or requests_per_run < 1:
        raise ParameterError("runs/warmup/requests_per_run", (runs, warmup, requests_per_run), "runs >= 1, warmup >= 0, requests_per_run >= 1")
    if not prompts:
        raise ParameterError("prompts", prompts, "at least one prompt")


def _single_runs(url: str, model: str, prompts: Sequence[Prompt], store, cfg: dict, common: dict, runs: int, warmup: int,
                 requests_per_run: int, progress: bool) -> tuple[list[dict], list[RequestResult]]:
    """The timed runs at C=1, each on the next prompts after the warm-up's, judged together (``sse.against_set``: a rate
    timed from one read gap against the runs' other rates): every request stored (phase ``single``; on every path, so
    an interrupted measurement keeps the runs it made), and each run's mean decode rate, TTFT and TPOT."""
    ptoks = [p.tokens for p in prompts]
    by_run: list[list[RequestResult]] = []
    it = range(runs)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"single stream {cfg['label']}", leave=False)
    k = warmup
    try:
        for run in it:
            batch = [prompts[(k + j) % len(prompts)] for j in range(requests_per_run)]
            k += requests_per_run
            by_run.append(run_requests(url, model, batch, progress=False, desc=f"single run {run}", judge_set=False,
                                       **common))
    finally:
        against_set([r for res in by_run for r in res])
        if store is not None:
            for run, res in enumerate(by_run):
                _store_requests(store, res, {**cfg, "phase": "single", "concurrency": 1, "run": run,
                                             "max_tokens": common["max_tokens"], "warmup": warmup}, ptoks)
    per_run = []
    for res in by_run:
        ok = [r for r in res if r.ok]
        per_run.append({
            "decode_tok_s": statistics.mean([r.decode_tok_s for r in ok if r.decode_tok_s]) if any(r.decode_tok_s for r in ok) else None,
            "ttft_s": statistics.mean([r.ttft_s for r in ok]) if ok else None,
            "tpot_s": statistics.mean([r.tpot_s for r in ok if r.tpot_s]) if any(r.tpot_s for r in ok) else None,
        })
    return per_run, [r for res in by_run for r in res]


def _single_summary(cfg: dict, prompts: Sequence[Prompt], per_run: list[dict], all_results: list[RequestResult], runs: int,
                    warmup: int, requests_per_run: int, max_tokens: int) -> dict:
    """The summary row of ``bench_summary``: mean, 95% t-interval and sd over runs of each per-run mean, the requests'
    counts and chunking, and the method in words."""
    ptoks = [p.tokens for p in prompts]
    s: dict[str, Any] = {**cfg, "phase": "single", "concurrency": 1, "runs": runs, "warmup": warmup,
                         "requests_per_run": requests_per_run, "max_tokens": max_tokens, "input_tokens": statistics.mean(ptoks),
                         "prompts_sha": prompts_sha(prompts), "prompt_seed": getattr(prompts[0], "seed", None)}
    for metric in ("decode_tok_s", "ttft_s", "tpot_s"):
        ci = mean_ci([p[metric] for p in per_run if p[metric] is not None])
        s[f"{metric}_mean"] = ci["mean"]
        s[f"{metric}_ci95"] = ci["half_width"]
        s[f"{metric}_sd"] = ci["sd"]
        s[f"{metric}_runs"] = [p[metric] for p in per_run]
    lvl = summarize_level(all_results)
    for key in ("ok", "failed", "output_tokens", "itl_ms_p50", "itl_ms_p99", "chunk_gap_ms_p50", "chunk_gap_ms_p99", "tokens_per_chunk", "errors",
                "untimed", "untimed_reason", "decode_timed_to", "e2e_s_mean", "tail_s_mean", "tail_s_p50", "tail_s_p99"):
        s[key] = lvl[key]
    if s["decode_tok_s_mean"] is None and lvl["untimed"]:  # said where the rate is missing (chapter 05's "nothing measured")
        s["error"] = f"no decode rate: {lvl['untimed']} of {lvl['ok']} served requests untimed ({lvl['untimed_reason']}); ask for more output tokens"
    s["method"] = (f"{warmup} warm-up requests, then {runs} runs x {requests_per_run} request(s) at C=1; per-run mean of "
                   "(output_tokens-1)/(last token - first token), each token timed by its network read; mean and 95% "
                   "t-interval over runs")
    return s


def concurrency_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to ``max_concurrency`` (included even when not a power of two)."""
    if max_concurrency < 1:
        raise ParameterError("max_concurrency", max_concurrency, "1 or more")
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    levels.append(max_concurrency)
    return levels


def concurrency_sweep(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    store=None,
    tokenizer=None,
    engine: str = "",
    attention: str = "",
    label: str = "",
    api: str = "completions",
    max_tokens: int = 128,
    levels: Sequence[int] | None = None,
    max_concurrency: int = 128,
    requests_per_level: int = 5,
    min_requests: int = 1,
    level_time_budget_s: float | None = 120.0,
    request_rate: float | None = None,
    fixed_length: bool = True,
    request_timeout: float = 300.0,
    resume: bool = True,
    progress: bool = True,
    saturation_patience: int = 2,
    level_warmup: bool = True,
    host=None,
    ceiling_tok_s: float | None = None,
) -> list[dict]:
    """For each concurrency C: ``max(min_requests, requests_per_level x C)`` requests, at most C in flight.

    With ``level_warmup`` each level first sends C untimed requests at concurrency C, from the other end of the prompt
    list (so the measured prompts find no cached prefix): an engine that compiles kernels on the first use of a batch
    shape pays that there, not inside the measured level (h200x1-live: one SGLang request at C=8 waited 10 s for its
    first token without it, and the level's throughput fell 8x).

    The sweep stops early once throughput has not grown by ``SATURATION_GROWTH`` (10%) over the best level for
    ``saturation_patience`` levels in a row (0 runs every level); the stop, classified by :mod:`.saturation`'s one rule
    (saturation where the last level held, throughput fell where it fell), is a row of ``bench_sweep_stops``.

    Rows go to ``bench_requests`` (phase ``sweep``) and one summary per level to ``bench_summary``; a level already
    summarized in ``store`` for this config is skipped (``resume``). A level that hits ``level_time_budget_s`` starts no
    new requests; those are recorded as failed with that reason and the summary says ``truncated``. ``ceiling_tok_s``
    as for :func:`single_stream`."""
    cfg = bench_config(engine, attention, label, api)
    levels = list(levels) if levels else concurrency_levels(max_concurrency)
    warm = bool(level_warmup)  # the method is recorded as asked (a replay sends no warm-up: _sweep_level)
    common = dict(max_tokens=max_tokens, api=api, engine=engine, tokenizer=tokenizer, fixed_length=fixed_length,
                  request_timeout=request_timeout, time_budget_s=level_time_budget_s, host=host, ceiling_tok_s=ceiling_tok_s)
    out, best, flat = [], 0.0, 0
    for i, c in enumerate(levels):
        if saturation_patience and flat >= saturation_patience:
            _record_stop(store, cfg, c, levels[:i], best, flat, out, warm)
            break
        key = {**cfg, "phase": "sweep", "concurrency": c, "max_tokens": max_tokens, **({"level_warmup": True} if warm else {})}
        if store is not None and resume and store.done("bench_summary", **key):
            out.extend(store.find("bench_summary", **key))
        else:
            out.append(_sweep_level(url, model, prompts, key, common, store, max(min_requests, requests_per_level * c),
                                    request_rate, progress, warm))
        best, flat = _saturation(best, flat, out[-1].get("throughput_tok_s"))
    return out


def _record_stop(store, cfg: dict, c: int, levels_run: list, best: float, flat: int, out: list, warm: bool) -> None:
    """The sweep's stop before level ``c`` as a row of ``bench_sweep_stops``, once, resumed or not."""
    wkey = {"level_warmup": True} if warm else {}
    if store is not None and not store.done("bench_sweep_stops", **cfg, stopped_before=c, **wkey):  # once, resumed or not
        store.append("bench_sweep_stops", {**_stop_row(cfg, c, levels_run, best, flat, out), **wkey})


def _sweep_level(url: str, model: str, prompts: Sequence[Prompt], key: dict, common: dict, store, n: int,
                 request_rate: float | None, progress: bool, warm: bool) -> dict:
    """One level of the sweep: C untimed requests from the other end of the prompts (with ``warm``; a replay answers
    only the recorded measurements, so it sends no warm-up), then ``n`` timed ones, at most C in flight; every request
    stored (phase ``sweep``) and the level's summary row appended to ``bench_summary`` and returned."""
    c = key["concurrency"]
    label = key["label"]
    batch = [prompts[i % len(prompts)] for i in range(n)]
    common = {**common, "concurrency": c}
    if warm and not str(getattr(common["host"], "spec", "")).startswith("replay:"):  # untimed, from the other end of the prompts
        run_requests(url, model, [prompts[-1 - j % len(prompts)] for j in range(c)], progress=False,
                     desc=f"{label} C={c} warm-up", **common)
    t0 = time.perf_counter()
    res = run_requests(url, model, batch, request_rate=request_rate, progress=progress, desc=f"{label} C={c}", **common)
    wall = time.perf_counter() - t0
    if store is not None:
        _store_requests(store, res, {**key, "run": 0}, [p.tokens for p in prompts])
    s = {**key, **summarize_level(res, wall_s=max((r.e2e_s or 0.0) for r in res) if res else wall)}
    s["decode_tok_s_mean"] = s["per_user_tok_s"]
    s["truncated"] = any((r.error or "").startswith("skipped:") for r in res)
    s["request_rate"] = request_rate
    s["method"] = (f"{n} requests, at most {c} in flight, all arriving at t=0" if not request_rate else
                   f"{n} requests, at most {c} in flight, Poisson arrivals at {request_rate}/s") + \
        "; throughput = output tokens of successful requests / (first arrival -> last stream end); per-user rate = " \
        "(output_tokens-1)/(last token - first token)"
    if store is not None:
        store.append("bench_summary", s)
    return s


def _stop_row(cfg: dict, c: int, levels_run: list, best: float, flat: int, out: list) -> dict:
    """The row of ``bench_sweep_stops``: why the sweep stopped before level ``c``, by the one rule of
    :mod:`.saturation` (``stopped_by``: saturation, first-token waits or throughput fell; ``reason``: the words the page shows)."""
    said = stop_words([(r.get("concurrency"), r.get("throughput_tok_s")) for r in out], last=out[-1] if out else None)
    why, kind = said or (f"fewer than two levels measured a throughput (best {best:.1f} tok/s) in {flat} levels: failing "
                         "requests, not saturation", FELL)
    return {**cfg, "stopped_before": c, "levels_run": levels_run, "best_throughput_tok_s": best, "stopped_by": kind, "reason": why}


def _saturation(best: float, flat: int, throughput: float | None) -> tuple[float, int]:
    """Track the best throughput and how many levels in a row did not grow over it (:func:`.saturation.grew`)."""
    if grew(throughput, best):
        return throughput, 0
    return max(best, throughput or 0.0), flat + 1


def _key(r: dict) -> tuple:
    """The measurement a summary row (or a request, its warm-ups counted with the single stream) belongs to: label, phase,
    concurrency, max_tokens, server start (0 where not recorded). A later row of the same measurement is that measurement taken again."""
    phase = "single" if r.get("phase") == "warmup" else r.get("phase")
    return r.get("label"), phase, r.get("concurrency"), r.get("max_tokens"), int(r.get("start") or 0)


def _takes(summary: list[dict]) -> dict:
    """Per measurement, each recording of it in order with the time of the one before it: [(row, previous_at), ...]."""
    out: dict = {}
    for r in summary:
        takes = out.setdefault(_key(r), [])
        takes.append((r, str(takes[-1][0].get("recorded_at") or "") if takes else None))
    return out


def requests_of(summary: Iterable[dict], requests: Iterable[dict]) -> list[tuple[dict, list[dict]]]:
    """Each summary row with the requests recorded for it: those of its measurement recorded after the summary before it
    and not after it (warm-ups excluded)."""
    summary, requests = list(summary), [q for q in requests if q.get("phase") != "warmup"]
    out = []
    for takes in _takes(summary).values():
        for row, prev in takes:
            at = str(row.get("recorded_at") or "")
            out.append((row, [q for q in requests if _key(q) == _key(row) and (prev or "") < str(q.get("recorded_at") or "") <= at]))
    return out


def current(summary: Iterable[dict], requests: Iterable[dict] = ()) -> tuple[list[dict], list[dict]]:
    """The rows of ``bench_summary`` and ``bench_requests`` that stand: for each measurement (label, phase, concurrency,
    max_tokens) the last one recorded of its configuration's method (:func:`_latest_method`), and the requests recorded
    for that take (after the take of it before, over every take; a resumed run that measured again with another method,
    e.g. more warm-up requests or each sweep level warmed first, keeps the older rows in its tables; :func:`remeasured`
    pairs them, :func:`set_apart` names the starts of another method)."""
    everything = list(summary)
    summary = _latest_method(everything)
    last = {k: takes[-1][0] for k, takes in _takes(summary).items()}
    keep = {id(row) for row in last.values()}
    window: dict = {}  # the standing take's requests: after the take before it, and up to it unless it is the last take
    for k, takes in _takes(everything).items():
        for i, (row, prev) in enumerate(takes):
            if k in last and row is last[k]:
                window[k] = (prev or "", None if i == len(takes) - 1 else str(row.get("recorded_at") or ""))
    superseded = {_key(r) for r in everything} - set(last)  # starts of an earlier method: their requests go with them

    def stands(q: dict) -> bool:
        k, at = _key(q), str(q.get("recorded_at") or "")
        if k in superseded:
            return False
        after, upto = window.get(k, ("", None))
        return at > after and (upto is None or at <= upto)

    return [r for r in summary if id(r) in keep], [q for q in requests if stands(q)]


def _single_method(r: dict) -> tuple:
    """What makes two single streams of a configuration one method, pooled into one interval over starts: their counts
    and tokens, and the rule that timed the decode (``sse.timed_to``)."""
    return (*(r.get(k) for k in ("max_tokens", "warmup", "runs", "requests_per_run", "input_tokens")), timed_to(r))


def _latest_method(summary: list[dict]) -> list[dict]:
    """``summary`` without the single-stream rows of another method than its configuration's last one (the last single
    row of the latest execution, ``execution``): a configuration's starts pool with starts of the same method only, also
    within one execution (a partial run of the earlier decode rule resumed, each start of another rule). What is left out
    is named by :func:`set_apart` (other starts) or :func:`remeasured` (the same start taken again)."""
    ex = lambda r: r.get("execution") or 1  # noqa: E731
    latest: dict = {}
    for r in summary:
        if r.get("phase") == "single" and ex(r) >= latest.get(r.get("label"), (0, None))[0]:
            latest[r.get("label")] = (ex(r), _single_method(r))
    return [r for r in summary if r.get("phase") != "single" or _single_method(r) == latest[r.get("label")][1]]


def set_apart(summary: Iterable[dict]) -> list[dict]:
    """Per configuration, the starts of another method than its standing one that no standing row took again (a
    start timed by the earlier decode rule beside starts timed by the new one): never pooled with them, stated apart.
    Rows: label, method (:func:`_method`, with its decode rule), decode_timed_to, and :func:`over_starts` of those starts."""
    everything = list(summary)
    kept = {_key(r) for r in _latest_method(everything)}
    groups: dict = {}
    for r in everything:
        if r.get("phase") == "single" and _key(r) not in kept:
            groups.setdefault((r.get("label"), _single_method(r)), []).append(r)
    return [{"label": label, "method": _method(rows[-1], True), "decode_timed_to": timed_to(rows[-1]), **over_starts(rows)}
            for (label, _m), rows in groups.items()]


def remeasured(summary: Iterable[dict]) -> list[dict]:
    """Each measurement recorded more than once: the first and the last, with the method of each (rows: label, phase,
    concurrency, before, after, before_method, after_method, metric). A sweep level also says whether it ``fell`` the
    first time (:func:`.saturation.fell` below the best lower level measured both times, :func:`sweep_stalls`' rule) and whether the
    fall ``recurred`` the last time (or the last time measured nothing)."""
    out = []
    for k, takes in _takes(list(summary)).items():
        if len(takes) < 2:
            continue
        metric = "decode_tok_s_mean" if k[1] == "single" else "throughput_tok_s"
        a, b = takes[0][0], takes[-1][0]
        rule = timed_to(a) != timed_to(b)  # the decode timed by another rule: each method names its own
        out.append({"label": k[0], "phase": k[1], "concurrency": k[2], "metric": metric, "before": a.get(metric), "after": b.get(metric),
                    "before_method": _method(a, rule), "after_method": _method(b, rule), "before_at": a.get("recorded_at"),
                    "after_at": b.get("recorded_at")})
    for pair in out:
        if pair["phase"] == "sweep":
            lower = [p for p in out if p["phase"] == "sweep" and p["label"] == pair["label"] and p["concurrency"] < pair["concurrency"]]
            pair["fell"] = fell(pair["before"], [p["before"] for p in lower])
            pair["recurred"] = pair["after"] is None or fell(pair["after"], [p["after"] for p in lower])
    return out


def remeasured_subject(r, field: str) -> str:
    """The subject a figure of :func:`remeasured` is stated under (``servebook.stated``): ``"label | phase | C=n | field"``."""
    c = r.get("concurrency")
    return f"{r['label']} | {r['phase']} | C={int(c) if c == c and c is not None else c} | {field}"


def _method(r: dict, rule: bool = False) -> str:
    """A measurement's method in words; ``rule``: with the rule that timed its decode (where the two takes differ in it)."""
    said = (f"{r.get('warmup')} warm-up request(s), {r.get('runs')} runs" if r.get("phase") == "single" else
            "each level warmed first" if r.get("level_warmup") else "no warm-up per level")
    return said + (f", decode timed to {timed_to_words(r)}" if rule else "")
