"""The profile's stated quantities (chapter 05's decode step, kernel by kernel): each profiled server's step, its
categories and starts, the full-model predictions, the seed case projected from the profiles and its verdict's tables,
a model card's figures (registered into ``servebook.stated.registry``; ``servebook.quantities`` gathers every
chapter's)."""

from __future__ import annotations

import re
from typing import Any, Callable

from .. import roofline
from ..stated.registry import Quantity, per, per_run, register
from ..stated.text import MISSING, plain
from .comm import collectives_per_token, engine_latencies
from .seed import SEED_TABLES, gap_by_category
from .tables import engine_difference, latest_breakdown, latest_ok, prediction_subject, start_spread


def _profiles(store) -> dict:
    return {r["label"]: r for r in latest_ok(store.rows("profile_runs"))}


def _categories(store) -> dict:
    return {f"{r['label']} | {r['category']}": r["ms_per_step"]
            for r in latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs"))}


def _busy(store) -> dict:
    """Each profile's GPU time per step: its recorded ``busy_ms``, else its categories but idle summed."""
    out: dict = {}
    for r in latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs")):
        if r["category"] != "gpu idle":
            out[r["label"]] = out.get(r["label"], 0.0) + r["ms_per_step"]
    out.update({k: p["busy_ms"] for k, p in _profiles(store).items() if plain(p.get("busy_ms")) is not None})
    return out


def _engine_difference(store) -> dict:
    from .ranges import SEED_BACKENDS    # chapter 06's engine lines pair like for like (tables._like_for_like)
    rows = engine_difference(store.rows("decode_breakdown"), store.rows("profile_runs"), seeds=SEED_BACKENDS)
    return {f"{r['a']} | {r['b']} | {r['category']}": r["diff_ms"] for r in rows}


def _start_spreads(field: str) -> Callable[[Any], dict]:
    """``field`` of ``profile.tables.start_spread`` per profiled label that has two starts or more."""
    def compute(store):
        rows = store.rows("profile_runs")
        return {p["label"]: s[field] for p in rows if p.get("ok") for s in [start_spread(rows, p["label"])] if s is not None}
    return compute


def _subject(p: dict) -> str:
    return prediction_subject(p)   # card | engine | backend | mode | quant (| unit, where predicted in several)


def _predictions(field_: str) -> Callable[[Any], dict]:
    return lambda store: {_subject(p): p.get(field_) for p in store.rows("prediction_check")}


def _predicted_tok_s(field_: str) -> Callable[[Any], dict]:
    return lambda store: {_subject(p): 1e3 / p[field_] for p in store.rows("prediction_check") if p.get(field_)}


def _prediction_layers(store) -> dict:
    out = {}
    for p in store.rows("prediction_check"):
        subject = _subject(p)
        out[f"{subject} | measured"], out[f"{subject} | full"] = p.get("layers_measured"), p.get("full_layers")
    return out


def _card_fact(of: str):
    """A figure of a model card, from ``data/models`` (``"<model> | <field>"``): ``active_params_b``, ``gb_per_token``
    (bytes counted layer by layer), ``avg_bytes_per_param`` and ``avg_gb_per_token`` (the checkpoint's average),
    ``allreduces_per_token``."""
    model, _, what = (of or "").partition(" | ")
    try:
        card = roofline.load_model_card(model)
    except Exception:  # noqa: BLE001 - an unknown card: the page states something no data file gives
        return MISSING
    if what in ("active_params_b", "gb_per_token"):
        arch = roofline.config_bytes_per_token(card)
        return arch["active_params"] / 1e9 if what == "active_params_b" else arch["bytes_per_token"] / 1e9
    if what in ("avg_bytes_per_param", "avg_gb_per_token"):
        avg = roofline.card_bytes_per_token(card)
        return avg["bytes_per_param"] if what == "avg_bytes_per_param" else avg["bytes_per_token"] / 1e9
    m = re.fullmatch(r"collectives_per_token_tp(\d+)", what)
    if m:
        return collectives_per_token(card, int(m.group(1)))
    return roofline.allreduces_per_token(card) if what == "allreduces_per_token" else MISSING


def _pcie(field: str) -> Callable[[Any], dict]:
    return lambda store: {e: L[field] for e, L in engine_latencies().items()}


def _rows_of(table: str, category: str, field_: str) -> Callable[[Any], dict]:
    return lambda store: {r["engine"]: r.get(field_) for r in store.rows(table) if r["category"] == category}


def _seed_gap(store) -> dict:
    tot = {r["engine"]: r.get("predicted_ms") for r in store.rows("seed_projection") if r["category"] == "total"}
    return {None: tot["sglang"] - tot["vllm"]} if tot.get("sglang") and tot.get("vllm") else {}


def _seed_parts(field_: str | None) -> Callable[[Any], dict]:
    def compute(store):
        parts = {g["category"]: g for g in gap_by_category(store.rows("seed_projection"))}
        return parts if field_ is None else {k: g[field_] for k, g in parts.items()}
    return compute


def _attention_ratio(store) -> dict:
    r = _seed_parts(None)(store).get("attention") or {}
    return {None: r["sglang"] / r["vllm"]} if r.get("vllm") and r.get("sglang") is not None else {}


def _seed_table_figures(store) -> dict:
    """Every numeric field of every keyed row of the seed verdict's tables, as ``table | key | field``."""
    return {f"{t} | {r['key']} | {k}": v for t in SEED_TABLES for r in store.rows(t) if r.get("key") is not None
            for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _seed_unlocated(store) -> dict:
    """What the projection does not locate (``profile.verdict.unlocated``): each engine's seed step minus its projected
    point (engine), and the seed's gap minus the projected gap (gap), from ``seed_range``."""
    from .verdict import unlocated

    return unlocated({r["who"]: r for r in store.rows("seed_range")})


def _seed_fix_rates(store) -> dict:
    """Each ranked change's single-stream rate over the seed's own step (``profile.verdict.over_seed``), at the low and
    high end of its gain (``seed_fixes`` key | low or high)."""
    from .verdict import over_seed

    rng = {r["who"]: r for r in store.rows("seed_range")}
    return {f"{f['key']} | {end}": over_seed(rng.get(f["engine"]), f.get(f"gain_{end}_ms"))
            for f in store.rows("seed_fixes") if f.get("expected_gain_ms") is not None for end in ("low", "high")}


def _first_fix(field_: str) -> Callable[[Any], dict]:
    return lambda store: {"first": store.rows("seed_fixes")[0].get(field_)} if store.rows("seed_fixes") else {}


def _start_gaps(store) -> dict:
    t = {r["engine"]: r.get("starts_ms") for r in store.rows("seed_projection") if r["category"] == "total"}
    return {str(i + 1): a - b for i, (a, b) in enumerate(zip(t.get("sglang") or [], t.get("vllm") or []))}


_PROFILES = [  # where a decode step's time goes, each profiled server
    Quantity("profile_step_ms", "profiled decode step (ms) of one server, from its trace", per(_profiles, "step_ms"), ("05",),
             tables=("profile_runs",)),
    Quantity("profile_tpot_ms", "time per token (ms) of the profiled server without the profiler", per(_profiles, "tpot_ms"), ("05",),
             tables=("profile_runs",)),
    Quantity("profile_category_ms", "ms per decode step of one kernel category (label | category)", _categories,
             tables=("decode_breakdown", "profile_runs")),
    Quantity("profile_layers", "decoder layers of one profiled server's model (label)", per(_profiles, "layers"),
             tables=("profile_runs",)),
    Quantity("profile_busy_ms", "GPU time of one profiled server's decode step: its recorded busy_ms (profile_runs), else its "
             "categories but idle, summed (label)", _busy, tables=("decode_breakdown", "profile_runs")),
    Quantity("profile_diff_ms", "SGLang's ms per step of one category minus vLLM's on the same model (a | b | category; "
             "profile.tables.engine_difference)", _engine_difference, tables=("decode_breakdown", "profile_runs")),
    Quantity("profile_starts", "server starts one profiled server was profiled over (label; profile.tables.start_spread)",
             _start_spreads("starts"), tables=("profile_runs",)),
    Quantity("profile_tpot_start_mean_ms", "one profiled server's time per token, mean over its server starts (label; "
             "profile.tables.start_spread tpot_mean_ms)", _start_spreads("tpot_mean_ms"), tables=("profile_runs",)),
    Quantity("profile_tpot_start_ci95_ms", "the 95% t-interval half-width of one profiled server's time per token over its "
             "server starts (label; profile.tables.start_spread tpot_ci95_ms)", _start_spreads("tpot_ci95_ms"),
             tables=("profile_runs",)),
]

_PREDICTIONS = [  # the full model predicted from two slices, and measured
    Quantity("predicted_ms", "full model's time per token (ms) predicted from two slices of one recording unit (card | engine | backend | mode | "
             "quant, and | unit where predicted in several: profile.tables.prediction_subject)",
             _predictions("predicted_ms"), ("05",), tables=("prediction_check",)),
    Quantity("measured_full_ms", "full model's measured time per token (ms)", _predictions("measured_ms"),
             tables=("prediction_check",)),
    Quantity("prediction_error_pct", "error of the full-model prediction, signed (%)", _predictions("error_pct"),
             tables=("prediction_check",)),
    Quantity("predicted_tok_s", "full model's single-stream tok/s predicted from two slices (1000 / predicted_ms)", _predicted_tok_s("predicted_ms"),
             tables=("prediction_check",)),
    Quantity("predicted_tok_s_low", "low end of the predicted tok/s (1000 / high_ms)", _predicted_tok_s("high_ms"),
             tables=("prediction_check",)),
    Quantity("predicted_tok_s_high", "high end of the predicted tok/s (1000 / low_ms)", _predicted_tok_s("low_ms"),
             tables=("prediction_check",)),
    Quantity("measured_full_tok_s", "full model's measured tok/s (1000 / measured_ms)", _predicted_tok_s("measured_ms"),
             tables=("prediction_check",)),
    Quantity("prediction_layers", "slice depths a full-model prediction is made from (subject | measured) and the full "
             "model's layers (subject | full)", _prediction_layers, tables=("prediction_check",)),
    Quantity("card_fact", "a model card's figure (model | active_params_b, gb_per_token, avg_bytes_per_param, avg_gb_per_token, "
             "allreduces_per_token, collectives_per_token_tpN), from data/models", lambda store: {}, lookup=_card_fact),
]

_SEED = [  # the seed case projected from the H200 profiles, and its verdict (tables seed_projection, seed_fixes)
    Quantity("seed_projected_tok_s", "seed case: single-stream tok/s projected onto 8x RTX PRO 6000 from the H200 profiles",
             _rows_of("seed_projection", "total", "predicted_tok_s"), ("06",), tables=("seed_projection",)),
    Quantity("seed_projection_error_pct", "seed case: the projection's signed error against the seed's own figure (%)",
             _rows_of("seed_projection", "total", "error_pct"), tables=("seed_projection",)),
    Quantity("seed_projected_gap_ms", "seed case: SGLang's projected ms per token minus vLLM's", _seed_gap,
             tables=("seed_projection",)),
    Quantity("seed_pcie_us", "seed case: one engine's all-reduce latency on eight PCIe ranks, the middle of its published "
             "range (engine; profile.comm.engine_latencies central_us)", _pcie("central_us")),
    Quantity("seed_pcie_us_low", "the low end of that range (engine)", _pcie("low_us")),
    Quantity("seed_pcie_us_high", "the high end of that range (engine)", _pcie("high_us")),
    Quantity("seed_projected_part_ms", "seed case: one category's part of the projected gap, SGLang's ms per token minus vLLM's "
             "(category; profile.seed.gap_by_category over seed_projection)", _seed_parts("diff_ms"), tables=("seed_projection",)),
    Quantity("seed_attention_ratio", "seed case: SGLang's projected attention ms per token over vLLM's (seed_projection)",
             _attention_ratio, tables=("seed_projection",)),
    Quantity("seed_fix_gain_ms", "seed case: the predicted gain (ms per token) of the first-ranked change (table seed_fixes)",
             _first_fix("gain_ms_per_token"), tables=("seed_fixes",)),
    Quantity("seed_profile_version", "seed case: the engine version the projected kernels were measured with (engine; "
             "seed_projection total row's measured_version)", _rows_of("seed_projection", "total", "measured_version"),
             tables=("seed_projection",)),
    Quantity("seed_studied_version", "seed case: the engine version the book studies (engine; seed_projection total row's "
             "studied_version)", _rows_of("seed_projection", "total", "studied_version"), tables=("seed_projection",)),
    Quantity("seed_collectives", "seed case: collectives per token at TP (engine; seed_projection communication row)",
             _rows_of("seed_projection", "communication", "collectives"), tables=("seed_projection",)),
    Quantity("seed_allreduce_us", "seed case: the one all-reduce latency (us) the projection gives an engine (engine)",
             _rows_of("seed_projection", "communication", "allreduce_us"), tables=("seed_projection",)),
    Quantity("seed_message_bytes", "seed case: the decode all-reduce message (bytes; engine)",
             _rows_of("seed_projection", "communication", "message_bytes"), tables=("seed_projection",)),
    Quantity("seed_nccl_pair_us", "seed case: NCCL all-reduce latency (us) of one published machine, default and tuned (LL) "
             "(default | tuned; seed_fixes)", lambda store: next(({"default": f.get("pair_default_us"), "tuned": f.get("pair_tuned_us")}
                                                                  for f in store.rows("seed_fixes") if f.get("pair_default_us") is not None), {}),
             tables=("seed_fixes",)),
    Quantity("seed_nccl_pair_ms", "seed case: that same-machine difference over the collectives of a token (ms; seed_fixes)",
             lambda store: next(({None: f["pair_ms_per_token"]} for f in store.rows("seed_fixes")
                                 if f.get("pair_ms_per_token") is not None), {}), tables=("seed_fixes",)),
    Quantity("seed_table", "seed case: a figure of a recorded row of the seed verdict's tables (table | key | field; "
             "profile.seed.SEED_TABLES, each row's key)", _seed_table_figures,
             tables=("seed_assumptions", "seed_attention_12", "seed_collectives", "seed_comm", "seed_fixes", "seed_latency_sweep", "seed_projection", "seed_range")),
    Quantity("seed_table_abs", "seed case: the size of a signed figure of the seed verdict's tables, its sign said in "
             "words (table | key | field)", lambda store: {k: abs(v) for k, v in _seed_table_figures(store).items()
                                                          if isinstance(v, (int, float)) and not isinstance(v, bool)},
             tables=("seed_assumptions", "seed_attention_12", "seed_collectives", "seed_comm", "seed_fixes", "seed_latency_sweep", "seed_projection", "seed_range")),
    Quantity("seed_unlocated_ms", "seed case: ms per token the projection does not locate: an engine's seed step minus its "
             "projected point (engine), the seed's gap minus the projected gap (gap; seed_range)", _seed_unlocated,
             tables=("seed_range",)),
    Quantity("seed_fix_seed_tok_s", "seed case: a ranked change's single-stream tok/s over the seed's own step, shortened "
             "by the change's gain at one end (seed_fixes key | low or high; seed_range's seed_ms)", _seed_fix_rates,
             tables=("seed_fixes", "seed_range")),
    Quantity("seed_fix_alternative_ms", "seed case: the projected attention (ms per token) of the alternative backend a fix "
             "names, from its measured H200 profile (engine | backend; seed_fixes)",
             lambda store: {f"{f['engine']} | {f['alternative_backend']}": f.get("alternative_ms") for f in store.rows("seed_fixes")
                            if f.get("alternative_ms") is not None}, tables=("seed_fixes",)),
    Quantity("seed_fix_like_gain_ms", "seed case: the first-ranked change's gain with both backends' attention taken from "
             "their 2-layer slices by one rule (ms per token; seed_fixes)", _first_fix("like_for_like_gain_ms"),
             tables=("seed_fixes",)),
    Quantity("seed_category_start_ms", "seed case: one category's projected ms per token with one server start of the "
             "engine's 2-layer slice (engine | category | start; seed_projection row's starts_ms)",
             lambda store: {f"{r['engine']} | {r['category']} | {i + 1}": x for r in store.rows("seed_projection")
                            for i, x in enumerate(r.get("starts_ms") or [])}, tables=("seed_projection",)),
    Quantity("seed_start_n", "seed case: the number of a server start of the 2-layer slices (start; identity)",
             lambda store: {str(i + 1): i + 1 for r in store.rows("seed_projection") if r["category"] == "total"
                            for i in range(len(r.get("starts_tok_s") or []))}, tables=("seed_projection",)),
    Quantity("seed_start_tok_s", "seed case: the projected tok/s with one server start of the engine's 2-layer slice "
             "(engine | start; seed_projection total row's starts_tok_s)",
             lambda store: {f"{r['engine']} | {i + 1}": x for r in store.rows("seed_projection") if r["category"] == "total"
                            for i, x in enumerate(r.get("starts_tok_s") or [])}, tables=("seed_projection",)),
    Quantity("seed_start_gap_ms", "seed case: SGLang's projected ms per token minus vLLM's with the slices' start N (start)", _start_gaps,
             tables=("seed_projection",)),
]

def _linearity(field_: str) -> Callable[[Any], dict]:
    def compute(store) -> dict:
        from .ladders import linearity_key

        lin = store.rows("slice_linearity")
        return {f"{linearity_key(r, lin)} | {r['depths']}": r.get(field_) for r in lin}
    return compute


def _linearity_layers(store) -> dict:
    from .ladders import linearity_key

    out, lin = {}, store.rows("slice_linearity")
    for r in lin:
        key = f"{linearity_key(r, lin)} | {r['depths']}"
        out.update({f"{key} | from": r.get("moe_from"), f"{key} | to": r.get("moe_to")})
    return out


def _other_units(store) -> dict:
    """Each engine's other units (``anchor.other_units``): the depth shared with the unit read, and both ratios."""
    from .anchor import other_units
    from .ranges import SEED_BACKENDS

    out = {}
    for o in other_units(store.rows("profile_runs"), SEED_BACKENDS):
        out[("depth", o["key"])] = o["depth"]
        out[("ratio", o["key"])], out[("ratio", o["key"] + " | read")] = o["ratio"], o["read_ratio"]
    return out


def _of_other_units(what: str) -> Callable[[Any], dict]:
    return lambda store: {k: v for (w, k), v in _other_units(store).items() if w == what}


def _reference_ratios(store, field_: str = "mean") -> dict:
    """Each engine's INT4 slice's GPU busy time, at the deepest depth both engines have, over its unit's reference
    configuration (the unit its ladder is read from), mean over starts: ``anchor.deepest_ratios``, over the anchor times
    the carry factor reads (``anchor.anchor_times``)."""
    from .anchor import deepest_ratios
    from .ranges import SEED_BACKENDS

    return {eng: sum(r) / len(r) if field_ == "mean" else len(r)
            for eng, r in deepest_ratios(store.rows("profile_runs"), SEED_BACKENDS).items()}


def _ratio_gap(store, field_: str) -> dict:
    from .anchor import deepest_ratios, ratio_gap
    from .ranges import SEED_BACKENDS

    r = deepest_ratios(store.rows("profile_runs"), SEED_BACKENDS)
    return {"engines": ratio_gap(*r.values())[field_]} if len(r) == 2 else {}


def _ratio_depth(store) -> dict:
    from .anchor import common_depth
    from .ranges import SEED_BACKENDS
    from .tables import latest_ok

    depth = common_depth(latest_ok(store.rows("profile_runs")), SEED_BACKENDS)
    return {} if depth is None else {"engines": depth}


def _depths(field_: str, scale: float = 1.0) -> Callable[[Any], dict]:
    """``field_`` of each ``depths.depth_rows`` row, by its first start's label (x ``scale``)."""
    from .depths import depth_rows

    return lambda store: {r["label"]: None if r[field_] is None else r[field_] * scale
                          for r in depth_rows(store.rows("profile_runs"))}


_DEPTHS = [  # a run of slice ladders read by depth over its starts (profile.depths, chapter 05)
    Quantity("depth_moe_layers", "MoE layers of one slice depth (layers, on a card without routed experts; its "
             "first start's label; profile.depths)",
             _depths("moe_layers"), tables=("profile_runs",)),
    Quantity("depth_starts", "server starts one slice depth was profiled over, within its unit (first start's label)",
             _depths("starts"), tables=("profile_runs",)),
    Quantity("depth_tpot_mean_ms", "one slice depth's served time per token, mean over its starts (first start's label)",
             _depths("tpot_mean_ms"), tables=("profile_runs",)),
    Quantity("depth_tpot_ci95_ms", "the 95% t-interval half-width of one slice depth's served time per token over its "
             "starts (first start's label)", _depths("tpot_ci95_ms"), tables=("profile_runs",)),
    Quantity("depth_busy_mean_ms", "one slice depth's GPU-busy time per profiled step, mean over its starts (first "
             "start's label)", _depths("busy_mean_ms"), tables=("profile_runs",)),
    Quantity("depth_busy_spread_ms", "one slice depth's GPU-busy time per step, largest minus smallest over its starts "
             "(first start's label)", _depths("busy_spread_ms"), tables=("profile_runs",)),
    Quantity("depth_busy_share_pct", "one slice depth's mean GPU-busy time over its mean served time per token, % "
             "(first start's label)", _depths("busy_share", 100.0), tables=("profile_runs",)),
]

_UNITS = [  # a reference recording made of units (issue #39): each engine's ladder, compared through the reference
    Quantity("linearity_per_layer_ms", "GPU busy time per MoE layer between two depths of one engine on one machine "
             "(engine | backend | machine | depths; slice_linearity)", _linearity("per_layer_ms"), tables=("slice_linearity",)),
    Quantity("linearity_error_pct", "the deepest slice's GPU busy time predicted from the two shallowest, signed error (%) "
             "(engine | backend | machine | depths; slice_linearity prediction row)", _linearity("busy_error_pct"),
             tables=("slice_linearity",)),
    Quantity("linearity_moe_layers", "the MoE layers of the shallower (from) or deeper (to) slice of a slice_linearity "
             "row (engine | backend | machine | depths | from or to)", _linearity_layers, tables=("slice_linearity",)),
    Quantity("reference_ratio", "an engine's INT4 slice's GPU busy time, at the deepest depth both engines have, over its own machine's reference "
             "configuration, mean over its starts (engine; machines.relative_to_reference)", _reference_ratios,
             tables=("profile_runs",)),
    Quantity("reference_ratio_starts", "the starts of an engine's INT4 slice that ratio is taken over (engine)",
             lambda store: _reference_ratios(store, "starts"), tables=("profile_runs",)),
    Quantity("reference_ratio_diff_pct", "the engines' reference ratios' difference, % of the mean of the two (engines; "
             "anchor.ratio_gap)", lambda store: _ratio_gap(store, "diff_pct"), tables=("profile_runs",)),
    Quantity("reference_ratio_margin_pct", "the margin starts.compare decided the engines' reference ratios against, % of "
             "the mean of the two (engines; anchor.ratio_gap)", lambda store: _ratio_gap(store, "margin_pct"),
             tables=("profile_runs",)),
    Quantity("reference_ratio_depth", "the MoE layers of the slices the engines' reference ratios are taken at: the "
             "deepest depth both engines' INT4 ladders have (engines; anchor.common_depth)", _ratio_depth,
             tables=("profile_runs",)),
    Quantity("other_unit_moe_layers", "the deepest MoE depth an engine's other unit (one its ladder is not read from) "
             "shares with the unit read (engine | machine | run id of the other unit; anchor.other_units)",
             _of_other_units("depth"), tables=("profile_runs",)),
    Quantity("other_unit_ratio", "at that depth, the other unit's INT4 slice's GPU busy time over its own unit's anchor "
             "configuration, mean over its starts (engine | machine | run id), and the unit read's (... | read)",
             _of_other_units("ratio"), tables=("profile_runs",)),
]

def _same_machine(store, field_: str) -> dict:
    """The engines at their common depth within one unit (``same_machine.same_machine``), by the subjects its line tags."""
    from .anchor import common_depth
    from .ranges import SEED_BACKENDS
    from .same_machine import MEASURES, same_machine

    rows = store.rows("profile_runs")
    out: dict = {}
    for u in same_machine(rows, SEED_BACKENDS, common_depth(latest_ok(rows), SEED_BACKENDS)):
        k = u["key"]
        if field_ == "ms":
            out.update({f"{e} | {k} | {m}": u["mean"][e][m] for e in u["starts"] for m in MEASURES})
        elif field_ == "starts":
            out.update({f"{e} | {k}": n for e, n in u["starts"].items()})
        elif field_ == "moe_layers":
            out[k] = u["depth"]
        else:               # diff_pct, margin_pct
            out.update({f"{k} | {m}": u[field_][m] for m in MEASURES})
    return out


_UNITS += [Quantity(f"same_machine_{f}", f"the engines at their common depth within one recording unit (one machine; "
                    f"same_machine.same_machine): {what}", lambda store, f=f: _same_machine(store, f), tables=("profile_runs",))
           for f, what in (("ms", "an engine's mean GPU busy per step or served time per token (engine | machine | run id | "
                                  "busy_ms or tpot_ms)"),
                           ("starts", "an engine's starts there (engine | machine | run id)"),
                           ("moe_layers", "the MoE layers compared (machine | run id)"),
                           ("diff_pct", "the first engine's mean minus the second's, % of the mean of the two (machine | run id | measure)"),
                           ("margin_pct", "the starts rule's margin, % of the mean of the two (machine | run id | measure)"))]


def _backends_at_depth(store, name: str) -> dict:
    """Each backend against its engine's seed backend within one unit (``backends_at_depth``), by the subjects it tags."""
    from .backends_at_depth import backend_figures, backend_comparisons

    return backend_figures(backend_comparisons(store.rows("profile_runs")))[name]


_UNITS += [Quantity(f"slice_backend_{f}", "a backend against its engine's seed backend within one recording unit, at the "
                    f"engines' common depth (backends_at_depth.backend_comparisons): {what}",
                    lambda store, f=f: _backends_at_depth(store, f"slice_backend_{f}"), tables=("profile_runs",))
           for f, what in (("ms", "a backend's mean served time per token or GPU busy per step (engine / backend / machine "
                                  "/ run id / tpot_ms or busy_ms)"),
                           ("starts", "a backend's starts there (engine / backend / machine / run id)"),
                           ("gap_ms", "a backend's mean served time per token minus its mean GPU busy per step (engine / "
                                      "backend / machine / run id)"),
                           ("diff_pct", "the backend's mean minus the seed backend's, % of the mean of the two (engine / "
                                        "backend / machine / run id / measure)"),
                           ("margin_pct", "the starts rule's margin, % of the mean of the two (engine / backend / machine / "
                                          "run id / measure)"),
                           ("moe_layers", "the MoE layers compared (machine / run id)"))]


def _kernel_figures(store) -> dict:
    """Every figure of chapter 06's kernel sections: one computation per run and state of its tables, not one per quantity."""
    from .backend_kernels import engine_kernel_figures, kernel_shift_figures
    from .backends_at_depth import backend_comparisons
    from .same_machine import seed_units

    rows = store.rows("profile_runs")
    return {**engine_kernel_figures(store, seed_units(rows)), **kernel_shift_figures(store, backend_comparisons(rows))}


_kernel_figures = per_run(_kernel_figures, files=lambda store: [   # the kept kernel tables it reads: part of the state
    store.path / r["kernel_table"] for r in store.rows("profile_runs") if r.get("ok") and r.get("kernel_table")])


_KERNELS = {
    "backend_kernel": ("a backend and its engine's seed backend in one unit, kernel by kernel (name and stream; "
                       "backend_kernels.kernel_shift)", (
        ("us", "a kernel's µs per decode step (engine / backend / machine / run id / kernel / stream / side)"),
        ("launches", "a kernel's launches per decode step (... / kernel / stream / side)"),
        ("diff_us", "the backend's µs per step minus the seed backend's (... / kernel / stream)"),
        ("stream_diff_us", "a stream's kernels together, the difference in µs per step (... / stream)"),
        ("tables", "the starts' kernel tables averaged on a side (engine / backend / machine / run id / side)"))),
    "engine_kernel": ("the seed's engines in one unit, their kernels side by side by category "
                      "(backend_kernels.category_sides)", (
        ("us", "a kernel's µs per decode step (engines / machine / run id / category / engine / kernel / stream)"),
        ("category_us", "a category's kernels together, µs per step (... / category / engine)"),
        ("diff_us", "the first engine's category minus the second's, µs per step (... / category)"),
        ("tables", "the starts' kernel tables averaged for an engine (... / engine)"))),
}
_UNITS += [Quantity(f"{head}_{f}", f"{about}: {what}", lambda store, n=f"{head}_{f}": _kernel_figures(store)[n],
                    tables=("profile_runs",))
           for head, (about, fields) in _KERNELS.items() for f, what in fields]

register(*_PROFILES, *_PREDICTIONS, *_SEED, *_UNITS, *_DEPTHS)


def _carry_spread(store, field_: str) -> dict:
    """The carry's per-category spread (``anchor.carry_spread``) and the margin it widens (``anchor.ratio_gap``)."""
    from .anchor import carry_spread, deepest_ratios, ratio_gap
    from .ranges import SEED_BACKENDS

    sp = carry_spread(store, SEED_BACKENDS)
    if sp is None:
        return {}
    if field_ == "factors":
        return dict(sp["factors"])
    r = deepest_ratios(store.rows("profile_runs"), SEED_BACKENDS)
    gap = ratio_gap(*r.values(), sp["spread_pct"]) if len(r) == 2 else {}
    return {"engines": sp["spread_pct"] if field_ == "spread_pct" else gap.get(field_)}


register(
    Quantity("carry_spread_pct", "where the engines' slices come from two machines, the max - min (in %) of the anchor "
             "configuration's per-kernel-category factors between them (engines; anchor.carry_spread)",
             lambda store: _carry_spread(store, "spread_pct"), tables=("profile_runs", "decode_breakdown")),
    Quantity("carry_category_factor", "a kernel category's time in the anchor configuration on the second engine's machine "
             "over the first's (category; anchor.carry_spread)", lambda store: _carry_spread(store, "factors"),
             tables=("profile_runs", "decode_breakdown")),
    Quantity("reference_ratio_widened_pct", "the engines' margin widened by the carry's per-category spread, % of the "
             "mean of the two ratios (engines; anchor.ratio_gap)", lambda store: _carry_spread(store, "widened_pct"),
             tables=("profile_runs", "decode_breakdown")),
)
