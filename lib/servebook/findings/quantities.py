"""Chapter 06's stated quantities: the figures its readers compute from the chapters' tables (``findings.backends``,
``throughput``, ``nccl``, the host summary, the methods, the failures) as every chapter that states them reads them,
another recorded run's against this run's, and the method's constants (registered into ``servebook.stated.registry``;
``servebook.quantities`` gathers every chapter's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from .. import roofline
from ..backends import agreement
from ..bench import ceiling
from ..nccl.figures import run_spread
from ..nccl.predict import FIDELITY, NOISE
from ..paths import book_root, data_dir
from ..profile.comm import pcie_rule
from ..profiles import load_profile
from ..results import RunStore
from ..stated.figures import REFERENCE_NCCL_RUN, chosen_setting, chosen_us
from ..stated.registry import Quantity, pairs, pct, per, per_run, register
from ..stated.text import MISSING, marked
from .launch import ranked_fixes
from .methods import default_methods, method_figures
from .tables import _probe, backends, failures, host_summary, nccl, throughput

# The run's tables each reader of chapter 06 reads (``Quantity.tables``: what a figure it gives derives from)
_OF_BACKENDS = ("backends", "backends_not_run", "backends_preflight")  # findings.backends
_OF_THROUGHPUT = ("bench_roofline", "bench_summary")  # findings.throughput
_OF_NCCL = ("allreduce", "tp_e2e")  # findings.nccl
_OF_HOST = ("engines", "gpus", "p2p", "topology", "versions", "profile_runs")  # findings.host_summary (and probe.json; a run of profiles only: its profile rows)


@per_run
def _all_backends(store) -> list[dict]:
    return backends(store)


@per_run
def _host(store) -> dict:
    return host_summary(store)


def _backends(store) -> dict:
    return {b["engine"]: b for b in _all_backends(store) if b.get("correct")}


@per_run
def _throughput(store) -> dict:
    return {t["label"]: t for t in throughput(store)}


@per_run
def _nccl(store) -> dict:
    return nccl(store) or {}


def _reference_nccl() -> dict:
    path = data_dir() / "runs" / REFERENCE_NCCL_RUN
    return _nccl(RunStore(path)) if (path / "manifest.json").exists() else {}


def _ref_us(setting: str):
    n = _reference_nccl()
    if setting == "default":
        return n.get("default_us")
    return n.get("best_us") if setting == n.get("setting") else None


def _nccl_facts(store) -> dict:
    n = _nccl(store)
    out = {k: v for k, v in n.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    ru = n.get("runner_up") or {}
    out.update({f"runner_up {k}": v for k, v in ru.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if ru.get("slower_at_batches"):
        out["runner_up slower_at_batches"] = ", ".join(map(str, ru["slower_at_batches"]))
    return out


def _seed_floor(of: str):
    """The seed case's limit with the communication floor at a latency of the reference NCCL run, from the data files
    and that run (``"<model> on <tp>x <profile> | <setting> | <field>"``; the setting's latency is the reference grid's:
    ``default`` or the setting it picks): ``tok_s``, ``t_comm_ms``, ``t_mem_ms``, ``crossover_us`` (the latency at
    which the two floors are equal), and the bandwidth-only inputs ``gb_per_token``, ``bandwidth_tbs``, ``gpus``."""
    m = re.fullmatch(r"(.+) on (\d+)x (.+?) \| (.+?) \| (\w+)", of or "")
    if not m:
        return MISSING
    model, tp, profile, setting, what = m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5)
    try:
        card = roofline.load_model_card(model)
        bw = load_profile(profile)["memory_bandwidth_tbs"]
    except Exception:  # noqa: BLE001 - an unknown card or profile
        return MISSING
    rule = pcie_rule(card, tp, load_profile(profile))
    arch, n_ar = roofline.config_bytes_per_token(card), rule["n"] if rule else roofline.allreduces_per_token(card)
    if what in ("gb_per_token", "bandwidth_tbs", "gpus"):
        return {"gb_per_token": arch["bytes_per_token"] / 1e9, "bandwidth_tbs": bw, "gpus": tp}[what]
    us = rule["latencies"][setting]["central_us"] if rule and setting in rule["latencies"] else None if rule else _ref_us(setting)
    if us is None:
        return MISSING
    r = roofline.decode_roofline(arch["bytes_per_token"], bw, tp=tp, allreduce_us=us, allreduces_per_token=n_ar)
    if what == "crossover_us":
        return r["t_mem_ms"] * 1e3 / n_ar
    return r.get(what, MISSING)


def _other_modes(store) -> dict:
    """Per engine, the ok starts in another mode than the one compared (``engine | other modes``): the mode compared is
    the first of graph, default, eager where the default (auto) served correct output, as chapter 03's page counts it."""
    out = {}
    rows = store.rows("backends")
    for e in {r.get("engine") for r in rows if r.get("engine")}:
        mine = [r for r in rows if r.get("engine") == e]
        auto = {r.get("mode") for r in mine if r.get("outcome") == "ok" and r.get("attention") == "auto"}
        mode = next((m for m in ("graph", "default", "eager") if m in auto), None)
        out[f"{e} | other modes"] = sum(1 for r in mine if r.get("outcome") == "ok" and r.get("mode") != mode)
    return out


def _backend_starts(store) -> dict:
    return {**{f"{b['engine']} | {k}": b[k] for b in _all_backends(store) for k in ("tried", "correct")}, **_other_modes(store)}


def _default_starts(store) -> dict:
    return {f"{b['engine']} | start {i}": x for b in _all_backends(store)
            for i, x in enumerate([x for x in b.get("default_start_rates") or [] if x is not None], 1)}


def _method(store) -> dict:
    return {"agreement_tolerance_nats": agreement.TOLERANCE, "agreement_min_pct": 100 * agreement.MIN_AGREEMENT,
            "ceiling_engine_regime": ceiling.ENGINE_REGIME, "ceiling_bound_at": ceiling.BOUND_AT, "nccl_noise_pct": 100 * NOISE,
            "nccl_fidelity_pct": 100 * FIDELITY}


def _gpu0(field_: str) -> Callable[[Any], dict]:
    """A figure of the first GPU chapter 01 recorded (table ``gpus``, else probe.json), as the host sentence states it."""
    def compute(store):
        gpus = store.rows("gpus") or _probe(store).get("gpus") or []
        return {None: gpus[0].get(field_)} if gpus and gpus[0].get(field_) is not None else {}
    return compute


def _cuda(store) -> dict:
    """CUDA versions: of the driver (``driver``), the one torch was built for (``torch``), and the one chapter 06's host
    line states (``host``: the driver's, else torch's)."""
    v = {**(_probe(store).get("versions") or {}), **{k: x for k, x in (store.rows("versions") or [{}])[-1].items() if x}}
    return {"driver": v.get("cuda"), "torch": v.get("torch_cuda"), "host": _host(store).get("cuda")}


def _other_run(field_: str) -> Callable[[str], Any]:
    """A figure of another recorded run that chapter 06 compares with (``compare_with``), recomputed from that run's
    tables: ``of`` is ``"<run directory> | <label>"`` (the directory as the page names it, relative to the book's root)."""
    def lookup(of: str):
        run, _, label = (of or "").partition(" | ")
        path = Path(run) if Path(run).is_absolute() else book_root() / run
        if not label or not (path / "manifest.json").exists():
            return MISSING
        t = next((t for t in throughput(RunStore(path)) if t["label"] == label), None)
        return MISSING if t is None or t.get(field_) is None else t[field_]
    return lookup


def _other_vs(fn: Callable[[float, float], Any]) -> Callable[[Any, str], Any]:
    """Another run's single-stream rate against this run's: ``of`` is ``"<run directory> | <its label> vs <this run's
    label>"`` (chapter 06's comparison with ``compare_with``); both rates recomputed from their runs' tables."""
    def lookup(store, of: str):
        head, sep, mine = (of or "").rpartition(" vs ")
        other = _other_run("single_tok_s")(head) if sep else MISSING
        here = (_throughput(store).get(mine) or {}).get("single_tok_s")
        return MISSING if other is MISSING or here is None else fn(other, here)
    return lookup


def _other_vs_starts(store, of: str):
    """The fewer server starts of the two single-stream rates chapter 06 compares across runs (``of`` as
    :func:`_other_vs`), each recomputed from its run's tables."""
    head, sep, mine = (of or "").rpartition(" vs ")
    other = _other_run("starts")(head) if sep else MISSING
    here = (_throughput(store).get(mine) or {}).get("starts")
    return MISSING if other is MISSING or here is None else min(int(other), int(here))


def _single_starts(store) -> dict:
    """Per served configuration (label), the server starts its single-stream rate covers."""
    return per(_throughput, lambda t: int(t.get("starts") or 1))(store)


def _roofline_span(store) -> dict:
    return {f"{k} | {end}": 100 * (t["single_tok_s"] + sign * t["single_ci95"]) / t["roofline_tok_s"]
            for k, t in _throughput(store).items() if t.get("roofline_tok_s") and t.get("single_ci95")
            and t.get("single_tok_s") is not None for end, sign in (("low", -1), ("high", 1))}


_BACKENDS = [  # chapter 03's comparison of each engine's backends, as findings.backends reads it
    Quantity("default_backend", "backend the engine's default (auto) reported loading", per(_backends, "default_reported"), ("03", "06"),
             tables=_OF_BACKENDS),
    Quantity("default_tok_s", "single-stream tok/s of the default backend (chapter 03)", per(_backends, "default_tok_s"), ("03", "06"),
             tables=_OF_BACKENDS),
    Quantity("default_ci95", "95% half-width of the default backend's tok/s", per(_backends, "default_ci95"),
             tables=_OF_BACKENDS),
    Quantity("best_backend", "fastest backend with correct output (the backend it reported)",
             per(_backends, lambda b: b.get("best_reported") or b.get("best")), ("03", "06"), tables=_OF_BACKENDS),
    Quantity("best_tok_s", "single-stream tok/s of the fastest correct backend", per(_backends, "best_tok_s"), ("03", "06"),
             tables=_OF_BACKENDS),
    Quantity("best_ci95", "95% half-width of the fastest correct backend's tok/s", per(_backends, "best_ci95"),
             tables=_OF_BACKENDS),
    Quantity("best_starts", "server starts the fastest backend's interval covers (one rate per start)", per(_backends, "best_starts"),
             tables=_OF_BACKENDS),
    Quantity("change_supported", "whether forcing the fastest backend is supported (faster than the default beyond both "
             "95% intervals over server starts, correct output)", per(_backends, "change_supported"), ("03", "06"),
             tables=_OF_BACKENDS),
    Quantity("backend_starts", "starts chapter 03 tried per engine (engine | tried) and those correct in the mode compared "
             "(engine | correct), as chapter 06's table counts them; ok starts in another mode (engine | other modes)",
             _backend_starts, tables=_OF_BACKENDS),
    Quantity("default_start_tok_s", "the default's rate in one server start (engine | start n)", _default_starts,
             tables=_OF_BACKENDS),
    Quantity("backend_server_starts", "server starts chapter 03 took per engine: each configuration's starts (one where it "
             "failed), summed (engine; servebook.findings.backends server_starts)", per(_backends, "server_starts"),
             tables=_OF_BACKENDS),
    Quantity("default_method", "chapters 03 and 05's measurement of an engine's default, item by item (engine | what | 03 or 05; "
             "engine | change %): servebook.findings.method_figures", lambda store: method_figures(default_methods(store)),
             tables=("backends", "bench_servers", "bench_starts", "bench_summary")),
]

_NCCL = [  # chapter 04's grid, as findings.nccl reads it, and the reference grid's
    Quantity("allreduce_backend", "collective backend this run measured all-reduce with",
             lambda store: {None: _nccl(store).get("backend")} if _nccl(store) else {}, ("04", "06"), tables=_OF_NCCL),
    Quantity("allreduce_setting", "NCCL setting this run's grid picks for decode-sized all-reduces",
             lambda store: {None: chosen_setting(_nccl(store))}, ("04", "06"), tables=_OF_NCCL),
    Quantity("allreduce_us", "all-reduce latency (us) at the batch-1 message under the setting this run picks",
             lambda store: {None: chosen_us(_nccl(store))}, ("04", "06"), tables=_OF_NCCL),
    Quantity("ref_allreduce_setting", "NCCL setting the reference grid (data/runs/h200x2-nccl) picks",
             lambda store: {None: _reference_nccl().get("setting")}),
    Quantity("ref_allreduce_us", "reference grid's all-reduce latency (us) at its batch-1 message, by setting",
             lambda store: {}, lookup=lambda of: _ref_us(of) if _ref_us(of) is not None else MISSING),
    Quantity("nccl_spread", "this run's NCCL pick against the spread between its grid and the reference grid, by name",
             lambda store: run_spread(store, _nccl(store)), tables=_OF_NCCL),
    Quantity("nccl_fact", "a figure of this run's all-reduce grid as chapter 06 reads it (servebook.findings.nccl): world_size, "
             "settings, b1_bytes, default_us, best_us, layers, allreduces_per_token, default_ms_per_token, predicted_delta_ms, "
             "reason (its words), runner_up us, runner_up delta_ms", _nccl_facts, tables=_OF_NCCL),
    Quantity("seed_floor", "the seed case's limit with the communication floor at a latency of the reference NCCL run, and its "
             "inputs (model on Nx profile | setting | field), from the data files and that run", lambda store: {}, lookup=_seed_floor),
]

_THROUGHPUT = [  # chapter 05's single stream and sweep, as findings.throughput reads them, and another run's
    Quantity("single_tok_s", "single-stream decode tok/s (chapter 05)", per(_throughput, "single_tok_s"), ("05", "06"),
             tables=_OF_THROUGHPUT),
    Quantity("single_ci95", "95% half-width of the single-stream tok/s", per(_throughput, "single_ci95"),
             tables=_OF_THROUGHPUT),
    Quantity("single_runs", "runs the single-stream interval is computed over", per(_throughput, "runs"), ("05",),
             tables=_OF_THROUGHPUT),
    Quantity("single_starts", "server starts the single-stream interval is computed over (one rate per start)", _single_starts,
             tables=_OF_THROUGHPUT),
    Quantity("roofline_tok_s", "bandwidth roofline (tok/s) of this run's model on this host", per(_throughput, "roofline_tok_s"),
             ("05", "06"), tables=_OF_THROUGHPUT),
    Quantity("pct_of_roofline", "single-stream tok/s as % of the bandwidth roofline", per(_throughput, "pct_of_roofline"),
             ("05", "06"), tables=_OF_THROUGHPUT),
    Quantity("peak_tok_s", "highest throughput of the concurrency sweep", per(_throughput, "peak_tok_s"), ("05", "06"),
             tables=_OF_THROUGHPUT),
    Quantity("peak_c", "concurrency of the sweep's highest throughput", per(_throughput, "peak_c"),
             tables=_OF_THROUGHPUT),
    Quantity("c1_tok_s", "throughput (tok/s) of the sweep's C=1 level, as chapter 06 reads it (findings.throughput)",
             per(_throughput, "c1_tok_s"), tables=_OF_THROUGHPUT),
    Quantity("peak_gain", "the sweep's peak throughput over its C=1 throughput", per(_throughput, lambda t: t["peak_tok_s"] / t["c1_tok_s"]
                                                                                     if t.get("peak_tok_s") and t.get("c1_tok_s") else None),
             tables=_OF_THROUGHPUT),
    Quantity("peak_per_user_tok_s", "per-user tok/s at the sweep's peak", per(_throughput, "peak_per_user_tok_s"),
             tables=_OF_THROUGHPUT),
    Quantity("start_single_tok_s", "single-stream tok/s of one server start (label | start n)",
             lambda store: {f"{k} | start {i}": x for k, t in _throughput(store).items()
                            for i, x in enumerate([x for x in t.get("start_tok_s") or [] if x is not None], 1)},
             tables=_OF_THROUGHPUT),
    Quantity("roofline_span_pct", "the single-stream 95% interval's ends as % of the bandwidth roofline (label | low, label | high)",
             _roofline_span, tables=_OF_THROUGHPUT),
    Quantity("single_vs_pct", "one configuration's single-stream rate against another's of the same run, signed % (label vs label)",
             lambda store: pairs(per(_throughput, "single_tok_s")(store), pct), tables=_OF_THROUGHPUT),
    Quantity("single_vs_starts", "server starts that comparison covers (the fewer of the two; label vs label)",
             lambda store: pairs(_single_starts(store), min), tables=_OF_THROUGHPUT),
    Quantity("other_run_single_tok_s", "single-stream tok/s of a configuration of another run chapter 06 compares with (run | label)",
             lambda store: {}, lookup=_other_run("single_tok_s")),
    Quantity("other_run_single_ci95", "its 95% half-width (run | label)", lambda store: {}, lookup=_other_run("single_ci95")),
    Quantity("other_run_vs_pct", "another run's single-stream rate against this run's, signed % (run | label vs label)",
             lambda store: {}, lookup_in=_other_vs(pct), tables=_OF_THROUGHPUT),
    Quantity("other_run_ratio", "another run's single-stream rate over this run's (run | label vs label)",
             lambda store: {}, lookup_in=_other_vs(lambda a, b: a / b), tables=_OF_THROUGHPUT),
    Quantity("other_run_vs_starts", "server starts a comparison of another run's single-stream rate with this run's covers "
             "(the fewer of the two; run | label vs label)", lambda store: {}, lookup_in=_other_vs_starts,
             tables=_OF_THROUGHPUT),
]

def _failure_texts(store) -> dict:
    """Each standing failure's error, whole, under ``step | recorded_at`` for its own stamp and every time a later
    execution recorded it again (``executions.FOLDED``): the recording a page quoted names the row that stands for it."""
    out = {}
    for f in store.rows("failures"):
        text = " ".join(marked(f.get("error")).split())
        for when in (f.get("recorded_at"), *(f.get("recorded_again_at") or ())):
            out[f"{f.get('step')} | {when}"] = text
    return out


_HOST = [  # chapter 01's host as chapter 06's host line reads it, the method's constants, the run's failures
    Quantity("host_gpu_count", "GPUs chapter 01 saw on this host (a what-if: the profile's, as chapter 01 recorded them)",
             lambda store: {None: _host(store).get("gpu_count")}, tables=_OF_HOST),
    Quantity("host_capability", "compute capability of this host's GPUs, as chapter 01 recorded it",
             lambda store: {None: _host(store).get("capability")}, tables=_OF_HOST),
    Quantity("host_gpu_memory_gib", "memory (GiB) of this host's first GPU", _gpu0("memory_gib"), tables=("gpus",)),
    Quantity("host_sm_count", "SMs of this host's first GPU", _gpu0("sm_count"), tables=("gpus",)),
    Quantity("host_cuda", "CUDA version: of the driver (driver), torch's build (torch), the host line's (host)", _cuda,
             tables=_OF_HOST),
    Quantity("probe_warning", "a warning chapter 01's probe recorded, as recorded (its position in probe.json's warnings)",
             lambda store: {str(i): w for i, w in enumerate(_probe(store).get("warnings") or [])}, files=("probe.json",)),
    Quantity("method_constant", "a constant of the method, read from the code (servebook.backends.agreement.TOLERANCE, MIN_AGREEMENT; "
             "servebook.bench.ceiling.ENGINE_REGIME, BOUND_AT; servebook.nccl.predict.NOISE)", _method),
    Quantity("seed_fix_rank", "a change's rank by expected gain among the seed verdict's changes (table seed_fixes, by change)",
             lambda store: {f.get("change"): f["rank"] for f in ranked_fixes(store)}, tables=("seed_fixes",)),
    Quantity("seed_fixes_ranked", "how many of the seed verdict's changes have an expected gain (table seed_fixes)",
             lambda store: {None: len(ranked_fixes(store))}, tables=("seed_fixes",)),
    Quantity("seed_fix_versions_above", "of the changes ranked above a change (by change), those that need another version "
             "of an engine (table seed_fixes, kind version)",
             lambda store: {f.get("change"): f["versions_above"] for f in ranked_fixes(store)}, tables=("seed_fixes",)),
    Quantity("failures_recorded", "failures the run recorded, a failure recorded again counted once (the failures table's standing view)", lambda store: {None: len(store.rows("failures"))},
             tables=("failures",)),
    Quantity("failures_distinct", "distinct recorded failures (by error text; findings.failures)",
             lambda store: {None: len(failures(store))}, tables=("failures",)),
    Quantity("failure_text", "a recorded failure's error, whole (step | recorded_at: the failures table's standing row, "
             "at any time it was recorded; a chapter quotes the failure it hit, also where a later execution recorded "
             "the same one again)", _failure_texts, tables=("failures",)),
    Quantity("chapter_error", "why an execution of a chapter stopped, as its row recorded it, whole (chapter | recorded_at; table "
             "chapters)", lambda store: {f"{c.get('chapter')} | {c.get('recorded_at')}": " ".join(str(c.get("error")).split())
                                         for c in store.rows("chapters") if c.get("status") == "failed"}, tables=("chapters",)),
]

register(*_BACKENDS, *_NCCL, *_THROUGHPUT, *_HOST)
