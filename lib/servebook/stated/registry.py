"""The registry of quantities the book states: how each is recomputed from a run's tables (or, for a reference figure,
from its file in ``data/reference/``), and on which chapter pages it must appear.

    QUANTITIES["single_tok_s"].compute(store)             # {label: tok/s} for every served configuration of the run
    expected(store, "single_tok_s", "transformers/default")
    pick(quantity, values, of)                            # one subject's value among values computed once, or MISSING
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from ..paths import data_dir
from .figures import REFERENCE_NCCL_RUN, card_roofline, chosen_setting, chosen_us, seed_case, selection_of, site_count
from .text import MISSING, plain

__all__ = ["Quantity", "QUANTITIES", "expected", "pick"]


@dataclass(frozen=True)
class Quantity:
    """A quantity the book states: how to recompute it, for which subjects, and on which chapter pages it must appear.

    ``compute(store)`` returns ``{of: value}`` (``of`` is None for a quantity with one subject); ``lookup(of)``, where
    given, computes a subject that the run does not list (a reference figure named by its subject)."""

    name: str
    what: str
    compute: Callable[[Any], dict]
    chapters: tuple[str, ...] = ()
    lookup: Callable[[str], Any] | None = None


def _backends(store) -> dict:
    from ..findings import backends

    return {b["engine"]: b for b in backends(store) if b.get("correct")}


def _throughput(store) -> dict:
    from ..findings import throughput

    return {t["label"]: t for t in throughput(store)}


def _nccl(store) -> dict:
    from ..findings import nccl

    return nccl(store) or {}


def _ceilings(store) -> dict:
    """Chapter 05's comparison of client ceilings (``servebook.bench.ceiling_verdict``), when the run has one."""
    from ..bench.ceiling import ceiling_verdict

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


def _reference_nccl() -> dict:
    from ..results import RunStore

    path = data_dir() / "runs" / REFERENCE_NCCL_RUN
    return _nccl(RunStore(path)) if (path / "manifest.json").exists() else {}


def _ref_us(setting: str):
    n = _reference_nccl()
    if setting == "default":
        return n.get("default_us")
    return n.get("best_us") if setting == n.get("setting") else None


def _roofline_lookup(of: str):
    m = re.fullmatch(r"(.+) on (\d+)x (.+)", of or "")
    if not m:
        return MISSING
    try:
        return card_roofline(m.group(1), int(m.group(2)), m.group(3))["tok_s"]
    except Exception:  # noqa: BLE001 - an unknown card or profile: the page states something no data file gives
        return MISSING


def _selection(store) -> dict:
    return {selection_of(r): r.get("attention_backend") for r in store.rows("selection") if r.get("method") == "dynamic"}


def _sites(store) -> dict:
    keys = {(r.get("engine"), r.get("version")) for r in store.rows("selection_sites")}
    return {f"{e} {v}": site_count(store, e, v) for e, v in keys}


def _per(getter: Callable[[Any], dict], field_: str | Callable[[dict], Any]) -> Callable[[Any], dict]:
    pick_ = field_ if callable(field_) else (lambda d, k=field_: d.get(k))
    return lambda store: {k: pick_(d) for k, d in getter(store).items()}


def _profiles(store) -> dict:
    from ..profile.tables import latest_ok

    return {r["label"]: r for r in latest_ok(store.rows("profile_runs"))}


def _profile_categories(store) -> dict:
    from ..profile.tables import latest_breakdown

    return {f"{r['label']} | {r['category']}": r["ms_per_step"]
            for r in latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs"))}


def _predictions(field_: str) -> Callable[[Any], dict]:
    return lambda store: {f"{p['card']} | {p['engine']} | {p['backend']} | {p['mode']} | {p.get('quant', 'bf16')}": p.get(field_)
                          for p in store.rows("prediction_check")}


def _seed_gap(store) -> dict:
    tot = {r["engine"]: r.get("predicted_ms") for r in store.rows("seed_projection") if r["category"] == "total"}
    return {None: tot["sglang"] - tot["vllm"]} if tot.get("sglang") and tot.get("vllm") else {}


_SEED = {"seed_loss": lambda store: {None: seed_case()["loss"]},
         "seed_tok_s": lambda store: dict(seed_case()["single_stream_tok_s"])}

QUANTITIES: dict[str, Quantity] = {x.name: x for x in [
    # the seed case (reference figures, data/reference/seed-case.json)
    Quantity("seed_loss", "share of vLLM's single-stream rate SGLang did not reach in the seed case", _SEED["seed_loss"], ("01", "02")),
    Quantity("seed_vllm_faster", "how much faster vLLM's single-stream rate was than SGLang's in the seed case",
             lambda store: {None: seed_case()["vllm_faster"]}),
    Quantity("seed_tok_s", "single-stream tok/s the seed case measured, by engine", _SEED["seed_tok_s"]),
    Quantity("seed_allreduce_share", "all-reduce's share of SGLang's decode time in the seed case's profile",
             lambda store: {None: seed_case()["allreduce_share_of_sglang_decode"]}),
    # chapter 02: what the engine's own code picks, and where
    Quantity("selected_backend", "attention backend an engine version's own resolution picks (per engine, model, GPU)",
             _selection, ("02", "06")),
    Quantity("selection_sites", "lines of an engine version's code that write its attention backend", _sites, ("02", "06")),
    # chapter 03: each backend forced
    Quantity("default_backend", "backend the engine's default (auto) reported loading", _per(_backends, "default_reported"), ("03", "06")),
    Quantity("default_tok_s", "single-stream tok/s of the default backend (chapter 03)", _per(_backends, "default_tok_s"), ("03", "06")),
    Quantity("default_ci95", "95% half-width of the default backend's tok/s", _per(_backends, "default_ci95")),
    Quantity("best_backend", "fastest backend with correct output (the backend it reported)",
             _per(_backends, lambda b: b.get("best_reported") or b.get("best")), ("03", "06")),
    Quantity("best_tok_s", "single-stream tok/s of the fastest correct backend", _per(_backends, "best_tok_s"), ("03", "06")),
    Quantity("best_ci95", "95% half-width of the fastest correct backend's tok/s", _per(_backends, "best_ci95")),
    Quantity("change_supported", "whether forcing the fastest backend is supported (faster than the default beyond both "
             "95% intervals over server starts, correct output)", _per(_backends, "change_supported"), ("03", "06")),
    # chapter 04: all-reduce at the decode message size
    Quantity("allreduce_backend", "collective backend this run measured all-reduce with",
             lambda store: {None: _nccl(store).get("backend")} if _nccl(store) else {}, ("04", "06")),
    Quantity("allreduce_setting", "NCCL setting this run's grid picks for decode-sized all-reduces",
             lambda store: {None: chosen_setting(_nccl(store))}, ("04", "06")),
    Quantity("allreduce_us", "all-reduce latency (us) at the batch-1 message under the setting this run picks",
             lambda store: {None: chosen_us(_nccl(store))}, ("04", "06")),
    Quantity("ref_allreduce_setting", "NCCL setting the reference grid (data/runs/h200x2-nccl) picks",
             lambda store: {None: _reference_nccl().get("setting")}),
    Quantity("ref_allreduce_us", "reference grid's all-reduce latency (us) at its batch-1 message, by setting",
             lambda store: {}, lookup=lambda of: _ref_us(of) if _ref_us(of) is not None else MISSING),
    # chapter 05: single stream, the sweep, the roofline
    Quantity("single_tok_s", "single-stream decode tok/s (chapter 05)", _per(_throughput, "single_tok_s"), ("05", "06")),
    Quantity("single_ci95", "95% half-width of the single-stream tok/s", _per(_throughput, "single_ci95")),
    Quantity("single_runs", "runs the single-stream interval is computed over", _per(_throughput, "runs"), ("05",)),
    Quantity("roofline_tok_s", "bandwidth roofline (tok/s) of this run's model on this host", _per(_throughput, "roofline_tok_s"),
             ("05", "06")),
    Quantity("pct_of_roofline", "single-stream tok/s as % of the bandwidth roofline", _per(_throughput, "pct_of_roofline"),
             ("05", "06")),
    Quantity("peak_tok_s", "highest throughput of the concurrency sweep", _per(_throughput, "peak_tok_s"), ("05", "06")),
    Quantity("peak_c", "concurrency of the sweep's highest throughput", _per(_throughput, "peak_c")),
    # chapter 05: the client ceilings, servebook's transport against httpx and sglang.bench_serving
    Quantity("client_ceiling_tok_s", "a client's ceiling: highest streamed tok/s against the fake server over the levels "
             "compared (servebook, httpx, sglang.bench_serving)", _ceiling_values, ("05",)),
    Quantity("ceiling_ratio", "a client's ceiling over sglang.bench_serving's on the same fake server", _ceiling_ratios, ("05",)),
    Quantity("fast_path_justified", "whether servebook's own HTTP transport is justified: its ceiling reaches the goal "
             "(CEILING_GOAL x bench_serving's) and httpx's does not", _fast_path, ("05",)),
    # chapter 05: where a decode step's time goes
    Quantity("profile_step_ms", "profiled decode step (ms) of one server, from its trace", _per(_profiles, "step_ms"), ("05",)),
    Quantity("profile_tpot_ms", "time per token (ms) of the profiled server without the profiler", _per(_profiles, "tpot_ms"), ("05",)),
    Quantity("profile_category_ms", "ms per decode step of one kernel category (label | category)", _profile_categories),
    Quantity("predicted_ms", "full model's time per token (ms) predicted from two slices (card | engine | backend | mode | quant)",
             _predictions("predicted_ms"), ("05",)),
    Quantity("measured_full_ms", "full model's measured time per token (ms)", _predictions("measured_ms")),
    Quantity("prediction_error_pct", "error of the full-model prediction, signed (%)", _predictions("error_pct")),
    Quantity("seed_projected_tok_s", "seed case: single-stream tok/s projected onto 8x RTX PRO 6000 from the H200 profiles",
             lambda store: {r["engine"]: r.get("predicted_tok_s") for r in store.rows("seed_projection") if r["category"] == "total"},
             ("06",)),
    Quantity("seed_projection_error_pct", "seed case: the projection's signed error against the seed's own figure (%)",
             lambda store: {r["engine"]: r.get("error_pct") for r in store.rows("seed_projection") if r["category"] == "total"}),
    Quantity("seed_projected_gap_ms", "seed case: SGLang's projected ms per token minus vLLM's",
             lambda store: _seed_gap(store)),
    Quantity("card_roofline_tok_s", "bandwidth-only roofline of a model card on N GPUs of a profile (the seed case's, or "
             "the what-if's), from data/models and data/hardware", lambda store: {}, lookup=_roofline_lookup),
    # chapters 02-04 (s8): each computed by the chapter's own figures module (servebook.selection.figures,
    # servebook.backends_figures, servebook.nccl.figures), which formats nothing and imports no page code
    Quantity("selection_assignments", "recorded assignments of the attention backend in an engine version's code",
             lambda store: __import__("servebook.selection.figures", fromlist=["x"]).assignments(store)),
    Quantity("selection_site_files", "files of an engine version's code that assign the attention backend",
             lambda store: __import__("servebook.selection.figures", fromlist=["x"]).site_files(store)),
    Quantity("matrix_disagreements", "engine/version disagreements in chapter 02's decision matrix",
             lambda store: __import__("servebook.selection.figures", fromlist=["x"]).disagreement_count(store)),
    Quantity("version_diff_cells", "matrix cells that differ between the two engine versions compared (a -> b)",
             lambda store: __import__("servebook.selection.figures", fromlist=["x"]).diff_count(store)),
    Quantity("failed_steps", "steps of the run recorded in its failures table",
             lambda store: __import__("servebook.selection.figures", fromlist=["x"]).failure_count(store)),
    Quantity("backend_tok_s", "single-stream decode tok/s of one forced start (engine | attention | mode; chapter 03)",
             lambda store: __import__("servebook.backends_figures", fromlist=["x"]).rates(store)),
    Quantity("backend_ci95", "95% half-width of one forced start's tok/s",
             lambda store: __import__("servebook.backends_figures", fromlist=["x"]).intervals(store)),
    Quantity("backend_agreement", "one start's agreement with the default (engine | attention | mode | decode, "
             "teacher-forced or greedy)", lambda store: __import__("servebook.backends_figures", fromlist=["x"]).agreements(store)),
    Quantity("backend_decode_positions", "decode positions one start's decode-path agreement counts",
             lambda store: __import__("servebook.backends_figures", fromlist=["x"]).decode_positions(store)),
    Quantity("backend_starts", "starts chapter 03 tried per engine (engine | tried) and those correct in the mode compared "
             "(engine | correct), as chapter 06's table counts them",
             lambda store: {f"{b['engine']} | {k}": b[k] for b in __import__("servebook.findings", fromlist=["x"]).backends(store)
                            for k in ("tried", "correct")}),
    Quantity("plan_launches", "launches the what-if plans for chapter 03 on the real host",
             lambda store: __import__("servebook.backends_figures", fromlist=["x"]).plan_launches(store)),
    Quantity("allreduce_us_at", "this run's all-reduce latency (us) by setting | path | mode | bytes",
             lambda store: __import__("servebook.nccl.figures", fromlist=["x"]).latencies(store)),
    Quantity("ref_allreduce_at", "the reference grid's all-reduce latency (us) by setting | path | mode | bytes",
             lambda store: __import__("servebook.nccl.figures", fromlist=["x"]).latencies(
                 __import__("servebook.nccl.figures", fromlist=["x"]).reference_store())),
    Quantity("ref_nccl_check", "a figure derived from the reference grid (gaps, counts, ratios to nccl-tests), by name",
             lambda store: __import__("servebook.nccl.figures", fromlist=["x"]).reference_checks()),
    Quantity("nccl_spread", "this run's NCCL pick against the spread between its grid and the reference grid, by name",
             lambda store: __import__("servebook.nccl.figures", fromlist=["x"]).run_spread(store, _nccl(store))),
    Quantity("comm_floor_ms", "what-if: all-reduce time per token (ms) at batch 1, by case (table roofline, chapter 04)",
             lambda store: {k: r.get("t_comm_ms") for k, r in
                            __import__("servebook.nccl.figures", fromlist=["x"]).comm_floor(store).items()}),
    Quantity("comm_allreduces_per_token", "what-if: all-reduces per token, by case",
             lambda store: {k: r.get("allreduces_per_token") for k, r in
                            __import__("servebook.nccl.figures", fromlist=["x"]).comm_floor(store).items()}),
    Quantity("tp_e2e_tok_s", "end-to-end single-stream tok/s at TP>1 under one setting (engine | tp | setting)",
             lambda store: {f"{r['engine']} | {r['tp']} | {r['setting']}": r["decode_tok_s"]
                            for r in __import__("servebook.nccl.figures", fromlist=["x"]).e2e_rows(store)}),
    Quantity("tp_e2e_ci95", "95% half-width of that end-to-end rate",
             lambda store: {f"{r['engine']} | {r['tp']} | {r['setting']}": r["ci95"]
                            for r in __import__("servebook.nccl.figures", fromlist=["x"]).e2e_rows(store)}),
    Quantity("tp_e2e_ms", "measured change in ms per token of an end-to-end setting against its reference row",
             lambda store: {f"{r['engine']} | {r['tp']} | {r['setting']}": r["measured_ms_per_token"]
                            for r in __import__("servebook.nccl.figures", fromlist=["x"]).e2e_rows(store)}),
    # end of chapters 02-04 (s8)
]}


def expected(store, name: str, of: str | None = None) -> Any:
    """The quantity ``name`` (of ``of``) recomputed from the run's tables, or ``MISSING``."""
    return pick(QUANTITIES[name], QUANTITIES[name].compute(store), of)


def pick(quantity: Quantity, values: dict, of: str | None) -> Any:
    """``of``'s value among a quantity's computed ``values`` (or its lookup), or ``MISSING``."""
    if of in values and plain(values[of]) is not None:
        return plain(values[of])
    if quantity.lookup is not None:
        value = quantity.lookup(of)
        return MISSING if value is MISSING or value is None else plain(value)
    return MISSING
