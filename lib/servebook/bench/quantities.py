"""Chapter 05's stated quantities: the client ceilings, the single stream and the sweep as they ran, the time split,
the client checks, the roofline rows and the seed case's reported rows (registered into ``servebook.stated.registry``;
``servebook.quantities`` gathers every chapter's). The profile's quantities are ``servebook.profile.quantities``."""

from __future__ import annotations

from typing import Any, Callable

from ..roofline import weights_on_gpus
from ..stated.registry import Quantity, per_run, register
from ..stated.text import MISSING, plain
from . import figures
from .ceiling import ceiling_check, ceiling_verdict
from .runs import current, remeasured, remeasured_subject, set_apart, sweep_stalls


@per_run
def _ceilings(store) -> dict:
    """Chapter 05's comparison of client ceilings (``servebook.bench.ceiling_verdict``), when the run has one."""
    return ceiling_verdict(store.rows("client_ceiling"))


def _ceiling_values(store) -> dict:
    v = _ceilings(store)
    return dict(v["ceilings"]) if v["compared"] else {}


def _ceiling_ratios(store) -> dict:
    v = _ceilings(store)
    return {k: r for k, r in v["ratios"].items() if r is not None} if v["compared"] else {}


def _fast_path(store) -> dict:
    v = _ceilings(store)
    return {None: v["justified"]} if v["justified"] is not None else {}


@per_run
def _current(store) -> list[dict]:
    return current(store.rows("bench_summary"))[0]


def _single(store) -> dict:
    """The last single-stream row with a rate, per label (the row chapter 05's latencies are read from)."""
    return {r["label"]: r for r in _current(store) if r.get("phase") == "single" and plain(r.get("decode_tok_s_mean")) is not None}


def _sweep(field_: str, scale: float = 1.0) -> Callable[[Any], dict]:
    def compute(store):
        out = {}
        for r in _current(store):
            if r.get("phase") == "sweep" and plain(r.get(field_)) is not None:
                out.setdefault(f"{r['label']} | C={int(r['concurrency'])}", r[field_] * scale)
        return out
    return compute


def _sweep_params(field_: str) -> Callable[[Any], dict]:
    return lambda store: {s["label"]: s[field_] for s in figures.sweep_parameters(store)}


def _decided(field_: str) -> Callable[[Any], dict]:
    def compute(store):
        r = _ceilings(store).get("decided_in") or {}
        return {c: r.get(f"{c}_{field_}") for c in ("servebook", "httpx") if r.get(f"{c}_{field_}") is not None}
    return compute


def _seed_rows(field_: Callable[[dict], Any]) -> Callable[[Any], dict]:
    def compute(store):
        return {r["case"]: field_(r) for r in store.rows("bench_roofline") if str(r.get("source", "")).startswith("reported by the seed")}
    return compute


def _breakdown(store) -> dict:
    return dict(figures.breakdowns(store))


@per_run
def _last_checks(store) -> dict:
    last = {}
    for r in store.rows("bench_client_check"):
        last[(r["label"], r["metric"], int(r["concurrency"]))] = r
    return last


def _client_check(store) -> dict:
    return {f"{lab} | {m} | C={c}": r["rel_diff"] for (lab, m, c), r in _last_checks(store).items() if not r.get("harness_fault")}


def _client_turns(store) -> dict:
    out = {}
    for (lab, m, c), r in _last_checks(store).items():
        xs = r.get("servebook_runs") if isinstance(r.get("servebook_runs"), list) else []
        at = f"{lab} | {m} | C={c}"
        out.update({f"{at} | run {i}": x for i, x in enumerate(xs, 1)})
        if xs and r.get("bench_serving"):
            out[f"{at} | last against bench_serving"] = (xs[-1] - r["bench_serving"]) / r["bench_serving"]
    return out


class _ReadOnly:  # ceiling_check appends what it checks for the first time; recomputing must not write
    def __init__(self, s):
        self.s = s

    def rows(self, name):
        return self.s.rows(name)

    def append(self, *_a, **_k):
        return None


def _ceiling_use(store) -> dict:
    import pandas as pd

    rows = ceiling_check(pd.DataFrame(_current(store)), figures.ceiling_tables(store)[1], store=_ReadOnly(store))
    shares = [r["share_of_ceiling"] for r in rows if plain(r.get("share_of_ceiling")) is not None]
    return {None: max(shares)} if shares else {}


def _servebook_ceiling(store) -> dict:
    df = figures.ceiling_tables(store)[1]
    return {None: float(df["stream_tok_s"].max())} if len(df) else {}


def _remeasured(store) -> dict:
    out = {}
    for r in remeasured(store.rows("bench_summary")):
        for field_ in ("before", "after", "before_method", "after_method"):
            out[remeasured_subject(r, field_)] = r.get(field_)
        if plain(r.get("before")) and plain(r.get("after")) is not None:
            out[remeasured_subject(r, "ratio")] = r["after"] / r["before"]
    return out


def _all_users(store) -> dict:
    out = {}
    for r in _current(store):
        if r.get("phase") == "sweep" and plain(r.get("per_user_tok_s")) is not None:
            out.setdefault(f"{r['label']} | C={int(r['concurrency'])}", r["concurrency"] * r["per_user_tok_s"])
    return out


def _stalls(store) -> dict:
    out = {}
    for st in sweep_stalls(*current(store.rows("bench_summary"), store.rows("bench_requests"))):
        out.update({f"{st['label']} | C={st['concurrency']} | {k}": v for k, v in st.items() if isinstance(v, (int, float))
                    and not isinstance(v, bool)})
    return out


def _single_vs_c1(store) -> dict:
    return {f"{v['label']} | {k}": x for v in figures.single_vs_c1(store) for k, x in v.items() if k != "label"}


def _bandwidths(part: str) -> Callable[[Any], dict]:
    return lambda store: {f"{c} | {k}": x for c, v in figures.bandwidth_roofline(store)[part].items() for k, x in v.items()}


def _full_model_weights(of: str | None) -> Any:
    if not of or of.count("|") != 3:
        return MISSING
    parts = [x.strip() for x in of.split("|")]
    return weights_on_gpus(*parts[:3])[parts[3]]


def _plan_roofline_facts(store) -> dict:
    return {f"{r['case']} | {k}": v for r in store.rows("roofline") if r.get("chapter") == "05"
            for k, v in (("gb_per_token", (r.get("bytes_per_token") or 0) / 1e9 or None), ("tp", r.get("tp")),
                         ("bandwidth_tbs", r.get("bandwidth_tbs")), ("t_comm_ms", r.get("t_comm_ms")))}


_CEILINGS = [  # the client ceilings, servebook's transport against httpx and sglang.bench_serving
    Quantity("client_ceiling_tok_s", "a client's ceiling: highest streamed tok/s against the fake server over the levels "
             "compared (servebook, httpx, sglang.bench_serving)", _ceiling_values, ("05",), tables=("client_ceiling",)),
    Quantity("ceiling_ratio", "a client's ceiling over sglang.bench_serving's on the same fake server", _ceiling_ratios, ("05",),
             tables=("client_ceiling",)),
    Quantity("fast_path_justified", "whether servebook's own HTTP transport is justified: its ceiling reaches the goal "
             "(CEILING_GOAL x bench_serving's) and httpx's does not", _fast_path, ("05",), tables=("client_ceiling",)),
    Quantity("ceiling_goal", "the goal: servebook's ceiling at least this many times sglang.bench_serving's (bench.CEILING_GOAL)",
             lambda store: {None: _ceilings(store)["goal"]}, tables=("client_ceiling",)),
    Quantity("ceiling_ratio_decided", "a client's ceiling over bench_serving's at one event per write, where the verdict is taken",
             _decided("ratio"), tables=("client_ceiling",)),
    Quantity("ceiling_busy_decided", "share of its core a client used at one event per write", _decided("busy"),
             tables=("client_ceiling",)),
    Quantity("servebook_ceiling_tok_s", "servebook's own ceiling: its highest streamed tok/s against the fake server", _servebook_ceiling,
             tables=("client_ceiling",)),
    Quantity("ceiling_use_max", "the largest share of the client's ceiling any measured rate used", _ceiling_use,
             tables=("bench_ceiling_check", "bench_summary", "client_ceiling")),
]

_SWEEP = [  # the single stream and the sweep as they ran, latencies, time split, client checks
    Quantity("sweep_levels", "concurrency levels the sweep ran (bench_summary)", _sweep_params("levels"),
             tables=("bench_summary", "bench_sweep_stops")),
    Quantity("sweep_requests_per_c", "requests the sweep sent per level, per unit of concurrency", _sweep_params("requests_per_level_x_C"),
             tables=("bench_summary", "bench_sweep_stops")),
    Quantity("sweep_stopped_by", "why the sweep stopped: saturation, first-token waits, throughput fell, time budget or max concurrency",
             _sweep_params("stopped_by"), tables=("bench_summary", "bench_sweep_stops")),
    Quantity("sweep_stop_why", "why the sweep stopped, read again from its levels by the rule the sweep records its stop with "
             "(bench.saturation.stop_words: saturation or throughput fell; a bench_sweep_stops row recorded otherwise by an "
             "earlier rule is named), or the time budget or last level (bench.figures.sweep_parameters)",
             _sweep_params("why"), tables=("bench_summary", "bench_sweep_stops")),
    Quantity("single_ttft_ms", "mean TTFT (ms) of a configuration's last single-stream measurement",
             lambda store: {k: r["ttft_s_mean"] * 1e3 for k, r in _single(store).items() if plain(r.get("ttft_s_mean")) is not None},
             tables=("bench_summary",)),
    Quantity("single_tpot_ms", "mean TPOT (ms) of a configuration's last single-stream measurement",
             lambda store: {k: r["tpot_s_mean"] * 1e3 for k, r in _single(store).items() if plain(r.get("tpot_s_mean")) is not None},
             tables=("bench_summary",)),
    Quantity("decode_tail_ms", "median wait (ms) from a single-stream request's last token to its stream's end, over a "
             "configuration's standing timed requests (label; bench.figures.decode_tails)",
             lambda store: {t["label"]: t["tail_ms"] for t in figures.decode_tails(store)}, tables=("bench_summary", "bench_requests")),
    Quantity("decode_tail_rate_pct", "what that wait moves a request's decode rate by: the rate timed to the last token over "
             "the rate timed to the stream's end, - 1, median (%; label; bench.figures.decode_tails)",
             lambda store: {t["label"]: t["rate_pct"] for t in figures.decode_tails(store)}, tables=("bench_summary", "bench_requests")),
    Quantity("set_apart_decode_tok_s", "single-stream decode tok/s (mean over its starts) of a configuration's starts of "
             "another method than its standing one, stated apart, never pooled (label | decode rule; bench.runs.set_apart)",
             lambda store: {f"{r['label']} | {r['decode_timed_to']}": r["mean"] for r in set_apart(store.rows("bench_summary"))},
             tables=("bench_summary",)),
    Quantity("set_apart_decode_ci95", "its 95% interval's half-width (tok/s): over those starts, or within its one start",
             lambda store: {f"{r['label']} | {r['decode_timed_to']}": r["ci95"] for r in set_apart(store.rows("bench_summary"))},
             tables=("bench_summary",)),
    Quantity("tokens_per_chunk", "tokens per streamed chunk of a configuration's last single-stream measurement",
             lambda store: {k: r.get("tokens_per_chunk") for k, r in _single(store).items()}, tables=("bench_summary",)),
    Quantity("sweep_throughput_tok_s", "throughput (tok/s) of one sweep level (label | C=n)", _sweep("throughput_tok_s"),
             tables=("bench_summary",)),
    Quantity("sweep_per_user_tok_s", "per-user decode tok/s of one sweep level", _sweep("per_user_tok_s"), tables=("bench_summary",)),
    Quantity("sweep_ttft_server_p99_s", "p99 TTFT from the request's send (s) of one sweep level", _sweep("ttft_server_s_p99"),
             tables=("bench_summary",)),
    Quantity("sweep_ttft_server_p50_ms", "median TTFT from the request's send (ms) of one sweep level", _sweep("ttft_server_s_p50", 1e3),
             tables=("bench_summary",)),
    Quantity("sweep_ttft_p50_ms", "median TTFT including the wait for a slot (ms) of one sweep level", _sweep("ttft_s_p50", 1e3),
             tables=("bench_summary",)),
    Quantity("sweep_all_users_tok_s", "C users each at a sweep level's per-user rate: C x per_user_tok_s (label | C=n)", _all_users,
             tables=("bench_summary",)),
    Quantity("sweep_stall", "a sweep level whose throughput fell (bench.saturation.fell, the stop's rule): its figures and the best "
             "level's before it (label | C=n | field; bench.runs.sweep_stalls over the current bench_summary and bench_requests)", _stalls,
             tables=("bench_requests", "bench_summary")),
    Quantity("remeasured", "a measurement taken again with another method: its figure before and after, each method, and "
             "after / before (label | phase | C=n | field; bench.runs.remeasured over bench_summary)", _remeasured,
             tables=("bench_summary",)),
    Quantity("single_vs_c1", "a configuration's single stream beside its sweep's C=1 level and what differs (label | field; "
             "bench.figures.single_vs_c1)", _single_vs_c1, tables=("bench_requests", "bench_summary", "servers")),
    Quantity("breakdown_total_ms", "ms per token split in bench_breakdown (label)",
             lambda store: {k: sum(r["ms_per_token"] for r in v) for k, v in _breakdown(store).items()}, tables=("bench_breakdown",)),
    Quantity("breakdown_ms", "ms per token of one part of bench_breakdown (label | part)",
             lambda store: {f"{k} | {r['part']}": r["ms_per_token"] for k, v in _breakdown(store).items() for r in v},
             tables=("bench_breakdown",)),
    Quantity("breakdown_share", "share of one part of bench_breakdown (label | part)",
             lambda store: {f"{k} | {r['part']}": r["share"] for k, v in _breakdown(store).items() for r in v},
             tables=("bench_breakdown",)),
    Quantity("client_check_rel_diff", "servebook's client against sglang.bench_serving on the live server, relative (label | metric | C=n)",
             _client_check, tables=("bench_client_check",)),
    Quantity("client_check_turn", "servebook's runs of a client-check metric (label | metric | C=n | run i) and its last run against "
             "bench_serving's, relative (label | metric | C=n | last against bench_serving)", _client_turns,
             tables=("bench_client_check",)),
]

_ROOFLINE = [  # the roofline rows: this host's, the plan's what-ifs, the seed case's reported rows
    Quantity("roofline_bandwidth_gbs", "the bandwidth (GB/s) a configuration's roofline row of this run was computed with (case; "
             "bench_roofline, source measured here)", lambda store: {r["case"]: r["bandwidth_tbs"] * 1e3 for r in store.rows("bench_roofline")
                                                                   if r.get("source") == "measured here" and plain(r.get("bandwidth_tbs")) is not None},
             tables=("bench_roofline",)),
    Quantity("bandwidth_roofline", "a roofline row against the datasheet and the measured read bandwidth (case | field; "
             "bench.figures.bandwidth_roofline)", _bandwidths("cases"), tables=("bench_roofline", "memory_bandwidth")),
    Quantity("gpu_read_bandwidth", "a GPU's measured read bandwidth (table memory_bandwidth) and the reference it is set against "
             "(device | field; bench.figures.bandwidth_roofline, roofline.REFERENCE_GPU_READ)", _bandwidths("devices"),
             tables=("bench_roofline", "memory_bandwidth")),
    Quantity("full_model_weights", "a model card's weights and the GPUs of a profile they need at least (card | bf16 or card | "
             "profile | weights_gb, weights_gib, gpu_memory_gib or gpus_to_hold; roofline.weights_on_gpus), from data/models and data/hardware",
             lambda store: {}, lookup=_full_model_weights),
    Quantity("plan_roofline_tok_s", "a what-if limit of chapter 05's plan (table roofline), by its case",
             lambda store: {r["case"]: r.get("tok_s") for r in store.rows("roofline") if r.get("chapter") == "05"},
             tables=("roofline",)),
    Quantity("plan_roofline_fact", "an input of a what-if limit of chapter 05's plan, from its roofline row (case | gb_per_token, tp, "
             "bandwidth_tbs, t_comm_ms)", _plan_roofline_facts, tables=("roofline",)),
    Quantity("seed_pct_of_roofline", "seed case: a reported rate as % of the card's bandwidth roofline",
             _seed_rows(lambda r: r.get("pct_of_roofline")), tables=("bench_roofline",)),
    Quantity("seed_pct_of_comm_roofline", "seed case: a reported rate as % of the roofline with the communication floor",
             _seed_rows(lambda r: 100 * r["measured_tok_s"] / r["roofline_with_comm_tok_s"] if r.get("roofline_with_comm_tok_s") else None),
             tables=("bench_roofline",)),
    Quantity("seed_comm_roofline_tok_s", "seed case: the card's roofline with the communication floor (tok/s), by case",
             _seed_rows(lambda r: r.get("roofline_with_comm_tok_s")), tables=("bench_roofline",)),
    Quantity("seed_t_mem_ms", "seed case: memory floor per token (ms) on its GPUs (case)", _seed_rows(lambda r: r.get("t_mem_ms")),
             tables=("bench_roofline",)),
    Quantity("seed_t_comm_ms", "seed case: all-reduce floor per token (ms) at the engine's own latency (case)",
             _seed_rows(lambda r: r.get("t_comm_ms")), tables=("bench_roofline",)),
    Quantity("seed_crossover_us", "seed case: all-reduce latency (us) at which the two floors are equal",
             _seed_rows(lambda r: r["t_mem_ms"] * r["allreduce_us"] / r["t_comm_ms"] if r.get("t_comm_ms") else None),
             tables=("bench_roofline",)),
    Quantity("seed_reported_tok_s", "seed case: the reported single-stream rate a bench_roofline row sets against its limits (case)",
             _seed_rows(lambda r: r.get("measured_tok_s")), tables=("bench_roofline",)),
    Quantity("seed_row_roofline_tok_s", "seed case: the bandwidth roofline (tok/s) of that row (case)",
             _seed_rows(lambda r: r.get("roofline_tok_s")), tables=("bench_roofline",)),
]

register(*_CEILINGS, *_SWEEP, *_ROOFLINE)
