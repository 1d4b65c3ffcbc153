"""Chapter 04's stated quantities: all-reduce latencies of this run's grid and the reference grid, the communication
floor of the what-ifs, the end-to-end check at TP>1 (registered into ``servebook.stated.registry``;
``servebook.quantities`` gathers every chapter's). Chapter 06's reading of the grid (``findings.nccl``) registers the
quantities it computes in ``servebook.findings.quantities``."""

from __future__ import annotations

import re

from ..stated.registry import Quantity, per_run, register
from ..stated.text import MISSING
from . import figures


def _comm_floor_facts(store) -> dict:
    """The latency fields of chapter 04's what-if floor rows, as ``case | field``."""
    return {f"{k} | {f}": r.get(f) for k, r in figures.comm_floor(store).items()
            for f in ("allreduce_us", "allreduce_us_low", "allreduce_us_high")}


@per_run
def _ref_predictions(store):
    """``{layers: prediction}`` of the reference grid, each layer count's computed once while its tables stay as they
    are (a subject is one field of one layer count: the page states several)."""
    return {}


def _ref_prediction(of: str):
    m = re.fullmatch(r"(\d+) layers \| (.+)", of or "")
    if not m:
        return MISSING
    try:
        ref, layers = figures.reference_store(), int(m.group(1))
        held = _ref_predictions(ref)
        if layers not in held:
            held[layers] = figures.reference_prediction(layers, ref)
        return held[layers].get(m.group(2), MISSING)
    except Exception:  # noqa: BLE001 - no reference run here: the page states something no table gives
        return MISSING


def _e2e(field_: str):
    return lambda store: {f"{r['engine']} | {r['tp']} | {r['setting']}": r[field_] for r in figures.e2e_rows(store)}


register(
    # each computed by the chapter's own figures module, which formats nothing and imports no page code
    Quantity("allreduce_us_at", "this run's all-reduce latency (us) by setting | path | mode | bytes", figures.latencies,
             tables=("allreduce",)),
    Quantity("ref_allreduce_at", "the reference grid's all-reduce latency (us) by setting | path | mode | bytes",
             lambda store: figures.latencies(figures.reference_store())),
    Quantity("ref_nccl_check", "a figure derived from the reference grid (gaps, counts, ratios to nccl-tests), by name",
             lambda store: figures.reference_checks()),
    Quantity("comm_floor_ms", "what-if: all-reduce time per token (ms) at batch 1, by case (table roofline, chapter 04)",
             lambda store: {k: r.get("t_comm_ms") for k, r in figures.comm_floor(store).items()}, tables=("roofline",)),
    Quantity("comm_floor_fact", "what-if: a figure of one communication-floor row (case | field; table roofline, chapter 04)",
             _comm_floor_facts, tables=("roofline",)),
    Quantity("comm_allreduces_per_token", "what-if: all-reduces per token, by case",
             lambda store: {k: r.get("allreduces_per_token") for k, r in figures.comm_floor(store).items()}, tables=("roofline",)),
    Quantity("tp_e2e_tok_s", "end-to-end single-stream tok/s at TP>1 under one setting (engine | tp | setting)", _e2e("decode_tok_s"),
             tables=("tp_e2e",)),
    Quantity("tp_e2e_ci95", "95% half-width of that end-to-end rate", _e2e("ci95"), tables=("tp_e2e",)),
    Quantity("tp_e2e_ms", "measured change in ms per token of an end-to-end setting against its reference row",
             _e2e("measured_ms_per_token"), tables=("tp_e2e",)),
    Quantity("ref_nccl_prediction", "chapter 04's prediction from the reference grid at N layers of its model's width: the "
             "default's per-token all-reduce ms at batch 1 and recommend()'s reason (N layers | field; "
             "servebook.nccl.figures.reference_prediction)", lambda store: {}, lookup=_ref_prediction),
)
