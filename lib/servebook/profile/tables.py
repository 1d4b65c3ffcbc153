"""Tables derived from the recorded profiles: the full-model predictions and their check.

    rows = prediction_rows(store.rows("profile_runs"), store.rows("memory_bandwidth"))   # table prediction_check

Derived rows carry the labels of the measurements they come from (``from_labels``), so a profile taken again
(a new row of the same label) supersedes them: only the last ok row of each label is used.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

from .machines import require_one_machine, unit_of
from .predict import predict_full

__all__ = ["latest_ok", "latest_breakdown", "prediction_rows", "prediction_subject", "breakdown_check", "engine_difference", "write_predictions",
           "reclassify_breakdown", "start_spread", "starts_of", "copy_profile_tables", "PROFILE_TABLES"]

PROFILE_TABLES = ("profile_runs", "decode_breakdown", "prediction_check", "memory_bandwidth")
# what makes two profiles starts of one server: the same engine, model slice, mode and backend (labels differ: "... start 2")
_SERVER_KEY = ("engine", "card", "layers", "quant", "mode", "backend")


def latest_breakdown(breakdown_rows: Iterable[dict], profile_rows: Iterable[dict]) -> list[dict]:
    """The rows of ``decode_breakdown`` taken with the last ok profile of each label."""
    latest = {p["label"]: p.get("taken_at") for p in latest_ok(profile_rows)}
    return [r for r in breakdown_rows if r["label"] in latest and r.get("taken_at") == latest[r["label"]]]


def latest_ok(rows: Iterable[dict]) -> list[dict]:
    """The last ok row of each label (a profile taken again replaces the earlier one)."""
    last: dict[str, dict] = {}
    for r in rows:
        if r.get("ok"):
            last[r["label"]] = r
    return list(last.values())


def _card_full(card: str) -> dict:
    from ..models import _text_config, model_facts, slice_config
    from ..cards import load_card

    c = load_card(card)
    full = _text_config(c)
    facts = model_facts(c, slice_config(c, layers=full["num_hidden_layers"]))
    return {"layers": full["num_hidden_layers"], "dense": int(full.get("first_k_dense_replace") or 0) if full.get("n_routed_experts") else 0,
            "moe": bool(full.get("n_routed_experts")), "bytes_bf16": facts["full_bytes_per_token_bf16"],
            "bytes_card": facts["full_bytes_per_token_card"]}


def prediction_subject(p: dict) -> str:
    """What a ``prediction_check`` row's stated figures are tagged with (``of=``): "card | engine | backend | mode |
    quant", with " | <recording unit>" where the configuration was predicted in more than one unit (the row's
    ``subject``, set by :func:`prediction_rows`)."""
    return p.get("subject") or " | ".join(str(p.get(k, "bf16" if k == "quant" else None)) for k in _CONFIG)


def prediction_rows(profile_rows: Iterable[dict], bandwidth_rows: Iterable[dict] = (), datasheet_tbs: float | None = None) -> list[dict]:
    """One row per configuration (card, engine, backend, mode, quant) and recording unit (``machines.recording_unit``:
    the machine, else the UTC day of rows without machine identity) holding two slice depths: the full model predicted
    from them (:func:`predict_full`), the full model's measured time per token where it was run in the same unit, the
    error with its sign, and the bytes rule (roofline bound) at the datasheet's and at the measured bandwidth. Slices
    are never paired across units: a configuration whose depths lie only in different units gets one row with
    ``predicted_ms`` None and ``reason``; ``unpaired`` lists, per other unit, the profiles no prediction used."""
    configs: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in latest_ok(profile_rows):   # one unit per prediction: slices are never subtracted across machines
        configs[tuple(r.get(k, "bf16") if k == "quant" else r[k] for k in _CONFIG)][_unit_name(r)].append(r)
    measured_bw = None
    for b in bandwidth_rows:
        if b.get("read_tbs"):
            measured_bw = float(b["read_tbs"])
    bw = {"datasheet": datasheet_tbs, "measured": measured_bw}
    out = []
    for config, units in sorted(configs.items(), key=lambda kv: str(kv[0])):
        info = _card_full(config[0])
        bf16 = configs.get(config[:4] + ("bf16",), {}) if config[4] != "bf16" else {}
        pairs = {u: _pair(_depths(rows), _depths(bf16.get(u, [])), info) for u, rows in units.items()}
        made = {u: pair for u, pair in pairs.items() if pair is not None}
        # another unit's first starts and whole models no prediction used: named beside each unit's prediction
        elsewhere = _held({u: rows for u, rows in units.items() if u not in made and
                           any(r.get("role") in ("slice", "full") for r in rows)})
        rows = [_prediction_row(config, u, *made[u], [r for r in units[u] if r.get("role") == "full"], info, bw, elsewhere)
                for u in sorted(made)]
        if len(rows) > 1:   # predicted in several units: each unit's figures are tagged with it
            rows = [{**r, "subject": f"{prediction_subject({**r, 'subject': None})} | {r['unit']}"} for r in rows]
        if not rows:
            rows = _unpaired_row(config, units, bf16, info)
        out += rows
    return out


_CONFIG = ("card", "engine", "backend", "mode", "quant")


def _unit_name(r: dict) -> str:
    """The unit a profile's slices may be subtracted within, named: ``machines.unit_of`` (its machine, else its UTC day,
    and its run where it names one: two units recorded on one machine, a second loan of the same GPUs, stay two)."""
    unit, run = unit_of(r)
    return str(unit) + (f" of {run}" if run else "")


def _depths(rows: list[dict]) -> list[dict]:
    """One profile per slice depth of one unit's rows, shallowest first: the first start (role "slice"), else another
    start of it (role "repeat": the first was taken in another unit)."""
    by: dict[int, dict] = {}
    for role in ("slice", "repeat"):
        for r in rows:
            if r.get("role") == role:
                by.setdefault(int(r["layers"]), r)
    return [by[n] for n in sorted(by)]


def _pair(slices: list[dict], bf16: list[dict], info: dict) -> tuple[dict, dict] | None:
    """The shallowest and the deepest of one unit's slices, or None. A quantized card with one depth borrows the bf16
    slice of the dense layers only (``bf16``: the same unit's), which holds no routed expert: its profile is the
    quantized card's too."""
    if bf16 and len(slices) == 1:
        slices = [r for r in bf16 if int(r["layers"]) <= info["dense"] < int(slices[0]["layers"])][:1] + slices
    return (slices[0], slices[-1]) if len(slices) >= 2 else None


def _held(units: dict[str, list[dict]]) -> list[dict]:
    """Per unit: the slices (every start) and whole models it holds, their labels and depths."""
    mine = {u: [r for r in rows if r.get("role") in ("slice", "repeat", "full")] for u, rows in sorted(units.items())}
    return [{"unit": u, "labels": [r["label"] for r in rows], "layers": sorted({int(r["layers"]) for r in rows})}
            for u, rows in mine.items() if rows]


def _prediction_row(config: tuple, unit: str, shallow: dict, deep: dict, fulls: list[dict], info: dict, bw: dict,
                    unpaired: list[dict]) -> dict:
    """One unit's prediction of the full model from ``shallow`` and ``deep``, checked against its own full model."""
    card, engine, backend, mode, quant = config
    p = predict_full(shallow, deep, full_layers=info["layers"], dense_layers=info["dense"], moe=info["moe"])
    full_bytes = info["bytes_card"] if quant == "card" else info["bytes_bf16"]
    row = {"card": card, "engine": engine, "backend": backend, "mode": mode, "quant": quant, "machine": deep.get("machine"),
           "unit": unit, "layers_measured": p["layers_measured"], "full_layers": info["layers"],
           "predicted_ms": p["predicted_ms"], "low_ms": p["low_ms"], "high_ms": p["high_ms"],
           "slope_ms_per_layer": p["slope_ms"], "fixed_ms": p["fixed_ms"], "gpu_full_ms": p["gpu_full_ms"],
           "host_ms": p["host_ms"], "predicted_tok_s": 1e3 / p["predicted_ms"],
           "measured_ms": None, "measured_ci_ms": None, "error_pct": None, "within_interval": None,
           "full_bytes_per_token": full_bytes,
           "roofline_ms_datasheet": full_bytes / (bw["datasheet"] * 1e12) * 1e3 if bw["datasheet"] else None,
           "roofline_ms_measured": full_bytes / (bw["measured"] * 1e12) * 1e3 if bw["measured"] else None,
           "method": p["method"], "from_labels": [shallow["label"], deep["label"]], "unpaired": unpaired}
    if fulls:
        f = fulls[-1]
        m, ci = float(f["tpot_ms"]), f.get("tpot_ci_ms") or 0
        row.update({"measured_ms": m, "measured_ci_ms": f.get("tpot_ci_ms"), "measured_tok_s": 1e3 / m,
                    "error_pct": 100 * (p["predicted_ms"] - m) / m,
                    "within_interval": p["low_ms"] - ci <= m <= p["high_ms"] + ci,
                    "from_labels": row["from_labels"] + [f["label"]]})
    return row


def _unpaired_row(config: tuple, units: dict, bf16: dict, info: dict) -> list[dict]:
    """A configuration whose slice depths lie only in different units: one row with no prediction, ``unpaired`` naming
    which unit holds which profiles, and ``reason``; none where it holds one depth in all (nothing to pair)."""
    slices = [r for rows in units.values() for r in _depths(rows)]
    if not slices:
        return []
    top = min(int(r["layers"]) for r in slices)
    dense = {u: [r for r in _depths(rows) if int(r["layers"]) <= info["dense"] < top] for u, rows in bf16.items()}
    if len({int(r["layers"]) for r in slices} | {int(r["layers"]) for rows in dense.values() for r in rows}) < 2:
        return []
    held = _held({u: units.get(u, []) + dense.get(u, []) for u in set(units) | set(dense)})
    card, engine, backend, mode, quant = config
    return [{"card": card, "engine": engine, "backend": backend, "mode": mode, "quant": quant, "machine": None,
             "unit": None, "layers_measured": None, "full_layers": info["layers"], "predicted_ms": None, "low_ms": None,
             "high_ms": None, "predicted_tok_s": None, "measured_ms": None, "measured_ci_ms": None, "error_pct": None,
             "within_interval": None, "from_labels": [lab for h in held for lab in h["labels"]], "unpaired": held,
             "reason": "its slice depths lie only in different recording units ("
                       + "; ".join(f"{h['unit']}: {', '.join(h['labels'])}" for h in held) + "): a difference across units "
                       "may book two machines' per-step kernels as a layer (servebook.profile.machines), so none is taken; "
                       "both depths profiled in one unit (one machine) settle it"}]


def breakdown_check(breakdown_rows: Iterable[dict], profile_rows: Iterable[dict], tol_ms: float = 1e-6) -> list[dict]:
    """For each profiled server: the categories of ``decode_breakdown`` summed, against its profiled step time
    (they must be equal: idle is the step minus the busy time). Rows with ``ok`` False are inconsistencies."""
    latest = {p["label"]: p for p in latest_ok(profile_rows)}
    sums: dict[str, float] = defaultdict(float)
    for r in breakdown_rows:
        p = latest.get(r["label"])
        if p is not None and r.get("taken_at") == p.get("taken_at"):
            sums[r["label"]] += float(r["ms_per_step"])
    out = []
    for p in latest.values():
        s = sums.get(p["label"])
        out.append({"label": p["label"], "sum_ms": s, "step_ms": p["step_ms"],
                    "ok": s is not None and abs(s - p["step_ms"]) <= max(tol_ms, 1e-6 * p["step_ms"])})
    return out


def _like_for_like(rows_a: list[dict], rows_b: list[dict], a: str, b: str, seeds: dict | None) -> tuple[dict, dict]:
    """One server of each engine to set side by side: both engines' defaults where each ran its own choice, else both
    ``seeds`` backends (``ranges.SEED_BACKENDS``) where each ran its seed's, else each engine's default or first server
    (an engine's default against the other's forced backend would put a backend's difference under the engines' name)."""
    def first(rows: list[dict], backend) -> dict | None:
        return next((p for p in rows if p["backend"] == backend), None)

    for want_a, want_b in [("auto", "auto")] + ([(seeds.get(a), seeds.get(b))] if seeds else []):
        pa, pb = first(rows_a, want_a), first(rows_b, want_b)
        if pa is not None and pb is not None:
            return pa, pb
    return first(rows_a, "auto") or rows_a[0], first(rows_b, "auto") or rows_b[0]


def engine_difference(breakdown_rows: Iterable[dict], profile_rows: Iterable[dict], a: str = "sglang", b: str = "vllm",
                      seeds: dict | None = None) -> list[dict]:
    """Per category, engine ``a``'s ms per step minus engine ``b``'s, for every model both engines were profiled on
    with the same layers, mode and quantization (each engine's backend named; like for like, ``_like_for_like``, with
    ``seeds`` the engines' seed backends): what the measured gap between the engines consists of. The "total" row is
    the difference of the unprofiled times per token. A profile of role "repeat" (another start of a server already
    profiled) is left out: :func:`start_spread` reads those."""
    latest = [p for p in latest_ok(profile_rows) if p.get("role", "slice") != "repeat"]  # a second start is no other server
    rows = latest_breakdown(breakdown_rows, profile_rows)
    by: dict[tuple, dict] = {}
    for p in latest:   # engines compared on one machine only
        key = (p["card"], p["layers"], p["mode"], p.get("quant", "bf16"), p.get("machine"))
        by.setdefault(key, {}).setdefault(p["engine"], []).append(p)
    out = []
    for (card, layers, mode, quant, _machine), engines in sorted(by.items(), key=lambda kv: str(kv[0])):
        if a not in engines or b not in engines:
            continue
        pa, pb = _like_for_like(engines[a], engines[b], a, b, seeds)
        require_one_machine([pa, pb], "engine_difference")
        ca = {r["category"]: r["ms_per_step"] for r in rows if r["label"] == pa["label"]}
        cb = {r["category"]: r["ms_per_step"] for r in rows if r["label"] == pb["label"]}
        base = {"card": card, "layers": layers, "mode": mode, "quant": quant, "a": pa["label"], "b": pb["label"],
                "a_backend": pa.get("reported_backend") or pa["backend"], "b_backend": pb.get("reported_backend") or pb["backend"]}
        for cat in sorted(set(ca) | set(cb), key=lambda c: list(ca).index(c) if c in ca else 99):
            out.append({**base, "category": cat, "a_ms": ca.get(cat, 0.0), "b_ms": cb.get(cat, 0.0),
                        "diff_ms": ca.get(cat, 0.0) - cb.get(cat, 0.0)})
        out.append({**base, "category": "total (profiled step)", "a_ms": pa["step_ms"], "b_ms": pb["step_ms"],
                    "diff_ms": pa["step_ms"] - pb["step_ms"]})
        out.append({**base, "category": "time per token (unprofiled)", "a_ms": pa["tpot_ms"], "b_ms": pb["tpot_ms"],
                    "diff_ms": pa["tpot_ms"] - pb["tpot_ms"]})
    return out


def _datasheet_tbs(device: str | None) -> float | None:
    from ..profiles import list_profiles, load_profile

    for name in list_profiles():
        prof = load_profile(name)
        if device and (prof.get("gpu_name") or "").lower() == device.lower():
            return float(prof["memory_bandwidth_tbs"])
    return None


def write_predictions(store) -> list[dict]:
    """Derive ``prediction_check`` from the run's ``profile_runs`` and ``memory_bandwidth`` (rewritten whole)."""
    bw = store.rows("memory_bandwidth")
    rows = prediction_rows(store.rows("profile_runs"), bw, _datasheet_tbs(bw[-1].get("device") if bw else None))
    store.replace("prediction_check", rows)
    return rows


def reclassify_breakdown(store, reason: str, at: str) -> list[dict]:
    """``decode_breakdown`` of the last ok profile of each label with today's rule (``kernels.RULES``), from the kept
    trace's kernel names: each category gets the recorded GPU-busy time per step x its share of the kernel time in
    the kept trace's whole steps (a trace kept whole gives exactly what the recording would give today; a cut one,
    the split of its first steps); "gpu idle", steps and step times stay as recorded. Rewrites the table whole; a row
    whose time changed carries ``corrected`` (by, fields, reason, at) as ``tools/corrections/mark_rows.py`` writes it,
    with the row's earlier correction, if any, under ``earlier``."""
    from .kernels import load_trace, kernel_events
    from .steps import step_breakdown

    old = latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs"))
    out = []
    for p in latest_ok(store.rows("profile_runs")):
        mine = [r for r in old if r["label"] == p["label"]]
        if not mine:
            continue
        b = step_breakdown(kernel_events(load_trace(Path(store.path) / p["trace"])))
        busy = float(p["busy_ms"])
        for r in mine:
            ms = float(r["ms_per_step"]) if r["category"] == "gpu idle" else \
                busy * b["categories"].get(r["category"], 0.0) / b["busy_ms"]
            if abs(ms - float(r["ms_per_step"])) <= 1e-9:
                out.append(r)
                continue
            out.append({**r, "ms_per_step": ms, "share": ms / float(p["step_ms"]),
                        "corrected": {"by": "servebook.profile.tables.reclassify_breakdown",
                                      "fields": ["ms_per_step", "share"], "reason": reason, "at": at,
                                      **({"earlier": r["corrected"]} if r.get("corrected") else {})}})
    store.replace("decode_breakdown", out)
    return out


def _server(p: dict) -> tuple:
    return tuple(str(p.get(k, "bf16" if k == "quant" else "auto" if k == "backend" else None)) for k in _SERVER_KEY)


def starts_of(profile_rows: Iterable[dict], label: str) -> list[dict]:
    """Every ok profile of the server ``label`` was taken on, one per server start, in the order taken: the rows of that
    label (a profile taken again under its label is another start) and, of the same engine, model slice, mode and
    backend, those of role "repeat" (``... start 2``) or, where ``label`` is a repeat, the first start's, all of
    ``label``'s unit (``run_id``) and recording unit (``machines.recording_unit``: its machine, else its UTC day). Empty where
    ``label`` has no ok row."""
    from .machines import recording_unit

    ok = [p for p in profile_rows if p.get("ok")]
    me = next((p for p in reversed(ok) if p["label"] == label), None)
    if me is None:
        return []
    # a start of this server was recorded in its unit (run_id): another unit's profile of the same slice (its reference
    # configuration, merged under another label: servebook.profile.units) is another machine's server, compared only
    # through its unit's reference; a start of another machine within one unit is refused where it is subtracted. Rows
    # without machine identity are one unit only within one recording unit (``machines.recording_unit``: the UTC day):
    # h200x1-prof's second starts (2026-12-02) ran on another machine than its first (2026-12-01)
    return [p for p in ok if p.get("run_id") == me.get("run_id") and recording_unit(p) == recording_unit(me) and
            (p["label"] == label or (_server(p) == _server(me) and "repeat" in (p.get("role"), me.get("role"))))]


def start_spread(profile_rows: Iterable[dict], label: str) -> dict | None:
    """How far one server's profile moved from one start to the next: per start its GPU-busy time per step
    (``busy_ms``) and unprofiled time per token (``tpot_ms``), each one's spread (largest - smallest over the
    starts), and the 95% t-interval's half-width of the time per token over the starts (``tpot_ci95_ms``). ``None`` where the server has fewer than two starts with both figures.

        start_spread(store.rows("profile_runs"), "sglang kimi-2L")
        # {"label": ..., "starts": 2, "labels": [...], "busy_ms": [1.203, 1.193], "tpot_ms": [...], "busy_spread_ms": ..., ...}
    """
    from ..bench.stats import mean_ci

    rows = [p for p in starts_of(list(profile_rows), label) if p.get("busy_ms") is not None and p.get("tpot_ms") is not None]
    if len(rows) < 2:
        return None
    require_one_machine(rows, f"the start-to-start spread of {label}")   # two machines' difference is no start spread
    busy, tpot = [float(p["busy_ms"]) for p in rows], [float(p["tpot_ms"]) for p in rows]
    return {"label": label, "engine": rows[0]["engine"], "backend": rows[0].get("backend", "auto"), "starts": len(rows),
            "labels": [p["label"] for p in rows], "busy_ms": busy, "tpot_ms": tpot,
            "busy_spread_ms": max(busy) - min(busy), "tpot_spread_ms": max(tpot) - min(tpot),
            "busy_mean_ms": sum(busy) / len(busy), "tpot_mean_ms": sum(tpot) / len(tpot),
            "tpot_ci95_ms": mean_ci(tpot)["half_width"]}


def copy_profile_tables(source, dest, tables: Iterable[str] = PROFILE_TABLES) -> dict:
    """Make ``dest``'s copy of the profile tables the same rows as ``source``'s (RunStores; corrected and withdrawn rows
    included, each row as stored). Returns ``{table: rows copied}``."""
    out = {}
    for t in tables:
        rows = source.rows(t, withdrawn=True)
        dest.replace(t, rows)
        out[t] = len(rows)
    return out
