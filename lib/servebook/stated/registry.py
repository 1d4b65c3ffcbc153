"""The registry of quantities the book states: how each is recomputed from a run's tables (or, for a reference figure,
from its file in ``data/reference/``), and on which chapter pages it must appear.

    QUANTITIES["single_tok_s"].compute(store)             # {label: tok/s} for every served configuration of the run
    expected(store, "single_tok_s", "transformers/default")
    pick(quantity, values, of)                            # one subject's value among values computed once, or MISSING
"""

from __future__ import annotations

from .tags import _KNOWN

import re
from dataclasses import dataclass
from typing import Any, Callable

from ..paths import data_dir
from .figures import REFERENCE_NCCL_RUN, card_roofline, chosen_setting, chosen_us, seed_case, selection_of, site_count
from .text import MISSING, marked, plain

__all__ = ["Quantity", "QUANTITIES", "expected", "pick"]


@dataclass(frozen=True)
class Quantity:
    """A quantity the book states: how to recompute it, for which subjects, and on which chapter pages it must appear.

    ``compute(store)`` returns ``{of: value}`` (``of`` is None for a quantity with one subject); ``lookup(of)``, where
    given, computes a subject that the run does not list (a reference figure named by its subject); ``lookup_in(store,
    of)`` one that needs the run too (this run's figure against another run's). ``files``: the run's files other than its
    tables that the quantity is computed from (a table may hold a copy of the same text; changing the copy changes nothing)."""

    name: str
    what: str
    compute: Callable[[Any], dict]
    chapters: tuple[str, ...] = ()
    lookup: Callable[[str], Any] | None = None
    lookup_in: Callable[[Any, str], Any] | None = None  # a subject computed from the run and ``of`` (another run named in it)
    files: tuple[str, ...] = ()  # run files other than its tables that ``compute`` reads (e.g. probe.json): where it derives from


def _tables_now(store) -> tuple:
    """What a run's tables are now (name, size, modification time of each): a computation over them stays valid while
    this is unchanged."""
    from pathlib import Path

    path = Path(store.path)
    return (str(path.resolve()),) + tuple((p.name, st.st_size, st.st_mtime_ns) for p in sorted(path.glob("*.jsonl"))
                                          for st in [p.stat()])


def _per_run(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn(store)`` computed once per run and state of its tables (several quantities read one finding; the chapter 04
    one takes seconds)."""
    memo: dict = {}

    def wrapper(store):
        key = _tables_now(store)
        if key not in memo:
            memo.clear()
            memo[key] = fn(store)
        return memo[key]

    wrapper.__doc__ = fn.__doc__
    return wrapper


@_per_run
def _backends(store) -> dict:
    from ..findings import backends

    return {b["engine"]: b for b in backends(store) if b.get("correct")}


@_per_run
def _throughput(store) -> dict:
    from ..findings import throughput

    return {t["label"]: t for t in throughput(store)}


@_per_run
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
    return _reference_of(RunStore(path)) if (path / "manifest.json").exists() else {}


@_per_run
def _reference_of(store) -> dict:
    from ..findings import nccl

    return nccl(store) or {}


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


def _single_starts(store) -> dict:
    """Per served configuration (label), the server starts its single-stream rate covers."""
    return _per(_throughput, lambda t: int(t.get("starts") or 1))(store)


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



def _comm_floor_facts(store) -> dict:
    """The latency fields of chapter 04's what-if floor rows, as ``case | field``."""
    from ..nccl.figures import comm_floor

    return {f"{k} | {f}": r.get(f) for k, r in comm_floor(store).items()
            for f in ("allreduce_us", "allreduce_us_low", "allreduce_us_high")}


def _seed_table_figures(store) -> dict:
    """Every numeric field of every keyed row of the seed verdict's tables, as ``table | key | field``."""
    from ..profile.seed import SEED_TABLES

    return {f"{t} | {r['key']} | {k}": v for t in SEED_TABLES for r in store.rows(t) if r.get("key") is not None
            for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# chapter 05 (s8): helpers of the quantities in the block marked "chapter 05 (s8)" below
def _ch05_current(store) -> list[dict]:
    from ..bench.runs import current

    return current(store.rows("bench_summary"))[0]


def _ch05_single(store) -> dict:
    """The last single-stream row with a rate, per label (the row chapter 05's latencies are read from)."""
    return {r["label"]: r for r in _ch05_current(store) if r.get("phase") == "single" and plain(r.get("decode_tok_s_mean")) is not None}


def _ch05_sweep(field_: str, scale: float = 1.0) -> Callable[[Any], dict]:
    def compute(store):
        out = {}
        for r in _ch05_current(store):
            if r.get("phase") == "sweep" and plain(r.get(field_)) is not None:
                out.setdefault(f"{r['label']} | C={int(r['concurrency'])}", r[field_] * scale)
        return out
    return compute


def _ch05_sweep_params(field_: str) -> Callable[[Any], dict]:
    def compute(store):
        from ..bench.figures import sweep_parameters

        return {s["label"]: s[field_] for s in sweep_parameters(store)}
    return compute


def _ch05_decided(field_: str) -> Callable[[Any], dict]:
    def compute(store):
        r = _ceilings(store).get("decided_in") or {}
        return {c: r.get(f"{c}_{field_}") for c in ("servebook", "httpx") if r.get(f"{c}_{field_}") is not None}
    return compute


def _ch05_seed_rows(field_: Callable[[dict], Any]) -> Callable[[Any], dict]:
    def compute(store):
        return {r["case"]: field_(r) for r in store.rows("bench_roofline") if str(r.get("source", "")).startswith("reported by the seed")}
    return compute


def _ch05_breakdown(store) -> dict:
    from ..bench.figures import breakdowns

    return dict(breakdowns(store))


def _ch05_client_check(store) -> dict:
    last = {}
    for r in store.rows("bench_client_check"):
        last[(r["label"], r["metric"], int(r["concurrency"]))] = r
    return {f"{lab} | {m} | C={c}": r["rel_diff"] for (lab, m, c), r in last.items() if not r.get("harness_fault")}


def _ch05_ceiling_use(store) -> dict:
    import pandas as pd

    from ..bench.ceiling import ceiling_check
    from ..bench.figures import ceiling_tables

    class _ReadOnly:  # ceiling_check appends what it checks for the first time; recomputing must not write
        def __init__(self, s):
            self.s = s

        def rows(self, name):
            return self.s.rows(name)

        def append(self, *_a, **_k):
            return None

    rows = ceiling_check(pd.DataFrame(_ch05_current(store)), ceiling_tables(store)[1], store=_ReadOnly(store))
    shares = [r["share_of_ceiling"] for r in rows if plain(r.get("share_of_ceiling")) is not None]
    return {None: max(shares)} if shares else {}


def _ch05_servebook_ceiling(store) -> dict:
    from ..bench.figures import ceiling_tables

    df = ceiling_tables(store)[1]
    return {None: float(df["stream_tok_s"].max())} if len(df) else {}


def _ch05_predicted(field_: str) -> Callable[[Any], dict]:
    return lambda store: {f"{p['card']} | {p['engine']} | {p['backend']} | {p['mode']} | {p.get('quant', 'bf16')}": 1e3 / p[field_]
                          for p in store.rows("prediction_check") if p.get(field_)}


# shared sayers, 01, 06 (s8): helpers of the quantities in the block marked "shared sayers, 01, 06 (s8)" below
def _s8_host(store) -> dict:
    from ..findings.tables import host_summary

    return host_summary(store)


def _s8_gpu0(field_: str) -> Callable[[Any], dict]:
    """A figure of the first GPU chapter 01 recorded (table ``gpus``, else probe.json), as the host sentence states it."""
    def compute(store):
        from ..findings.tables import _probe

        gpus = store.rows("gpus") or _probe(store).get("gpus") or []
        return {None: gpus[0].get(field_)} if gpus and gpus[0].get(field_) is not None else {}
    return compute


def _s8_cuda(store) -> dict:
    """CUDA versions: of the driver (``driver``), the one torch was built for (``torch``), and the one chapter 06's host
    line states (``host``: the driver's, else torch's)."""
    from ..findings.tables import _probe

    v = {**(_probe(store).get("versions") or {}), **{k: x for k, x in (store.rows("versions") or [{}])[-1].items() if x}}
    return {"driver": v.get("cuda"), "torch": v.get("torch_cuda"), "host": _s8_host(store).get("cuda")}


def _s8_rows(store) -> dict:
    from ..backends.figures import row_key

    return {row_key(r): r for r in store.rows("backends")}


def _s8_default_of(rows: dict, key: str):
    engine, _, mode = key.split(" | ")
    return rows.get(f"{engine} | auto | {mode}")


def _s8_vs_default(store) -> dict:
    """Each start's rate against its engine's default in the same mode, signed (%): what ``findings.separated`` states."""
    from ..findings.intervals import _num

    rows, out = _s8_rows(store), {}
    for k, r in rows.items():
        d = _s8_default_of(rows, k)
        a, b = _num(r.get("decode_tok_s")), _num((d or {}).get("decode_tok_s"))
        if a is not None and b:
            out[k] = 100 * (a - b) / b
    return out


def _s8_compared_starts(store) -> dict:
    """Server starts a comparison with the default covers: the fewer of the start's and the default's."""
    from ..findings.intervals import starts_of

    rows = _s8_rows(store)
    return {k: min(starts_of(r), starts_of(d)) for k, r in rows.items() if (d := _s8_default_of(rows, k)) is not None}


def _s8_default_starts(store) -> dict:
    from ..findings import backends

    return {f"{b['engine']} | start {i}": x for b in backends(store)
            for i, x in enumerate([x for x in b.get("default_start_rates") or [] if x is not None], 1)}


def _s8_method(store) -> dict:
    from ..backends import agreement

    from ..bench import ceiling
    from ..nccl.predict import FIDELITY, NOISE

    return {"agreement_tolerance_nats": agreement.TOLERANCE, "agreement_min_pct": 100 * agreement.MIN_AGREEMENT,
            "ceiling_engine_regime": ceiling.ENGINE_REGIME, "ceiling_bound_at": ceiling.BOUND_AT, "nccl_noise_pct": 100 * NOISE,
            "nccl_fidelity_pct": 100 * FIDELITY}


def _s8_tolerance(store) -> dict:
    from ..backends import agreement

    tol = {float(r["decode_tolerance"]) for r in store.rows("backends") if isinstance(r.get("decode_tolerance"), (int, float))}
    return {None: tol.pop()} if len(tol) == 1 else ({} if tol else {None: agreement.TOLERANCE})


def _s8_other_run(field_: str) -> Callable[[str], Any]:
    """A figure of another recorded run that chapter 06 compares with (``compare_with``), recomputed from that run's
    tables: ``of`` is ``"<run directory> | <label>"`` (the directory as the page names it, relative to the book's root)."""
    def lookup(of: str):
        from pathlib import Path

        from ..findings import throughput
        from ..paths import book_root
        from ..results import RunStore

        run, _, label = (of or "").partition(" | ")
        path = Path(run) if Path(run).is_absolute() else book_root() / run
        if not label or not (path / "manifest.json").exists():
            return MISSING
        t = next((t for t in throughput(RunStore(path)) if t["label"] == label), None)
        return MISSING if t is None or t.get(field_) is None else t[field_]
    return lookup


def _s8_helpers(store) -> dict:
    rows = store.rows("engine_helpers")
    return {"asked": len(rows), "judged": sum(1 for r in rows if r.get("verdict") not in (None, "unknown")),
            "disagreed": sum(1 for r in rows if r.get("verdict") not in (None, "unknown", "agrees"))} if rows else {}


def _s8_profile_capability(of: str):
    from ..profiles import load_profile

    try:
        return load_profile(of).get("capability") or MISSING
    except Exception:  # noqa: BLE001 - an unknown profile: the page states something no data file gives
        return MISSING


# issue #28 item 4 (s9): helpers of the quantities in the block marked "(s9)" below
def _s9_backend_errors(store) -> dict:
    from ..backends.figures import row_key

    return {f"{row_key(r)} | {r.get('recorded_at')}": " ".join(marked(r.get("error")).split())
            for r in store.rows("backends") if r.get("outcome") != "ok"}


def _s9_not_run(store) -> dict:
    from ..backends.figures import not_run

    engines = {r.get("engine") for r in store.rows("backends") + store.rows("backends_not_run") if r.get("engine")}
    return {f"{e} | {x['attention']}": x["reason"] for e in sorted(engines) for x in not_run(store, e)}


def _s9_other_modes(store) -> dict:
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


def _s9_card_fact(of: str):
    """A figure of a model card, from ``data/models`` (``"<model> | <field>"``): ``active_params_b``, ``gb_per_token``
    (bytes counted layer by layer), ``avg_bytes_per_param`` and ``avg_gb_per_token`` (the checkpoint's average),
    ``allreduces_per_token``."""
    from .. import roofline

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
        from ..profile.comm import collectives_per_token
        return collectives_per_token(card, int(m.group(1)))
    return roofline.allreduces_per_token(card) if what == "allreduces_per_token" else MISSING


def _s9_seed_floor(of: str):
    """The seed case's limit with the communication floor at a latency of the reference NCCL run, from the data files
    and that run (``"<model> on <tp>x <profile> | <setting> | <field>"``; the setting's latency is the reference grid's:
    ``default`` or the setting it picks): ``tok_s``, ``t_comm_ms``, ``t_mem_ms``, ``crossover_us`` (the latency at
    which the two floors are equal), and the bandwidth-only inputs ``gb_per_token``, ``bandwidth_tbs``, ``gpus``."""
    from .. import roofline
    from ..profiles import load_profile

    m = re.fullmatch(r"(.+) on (\d+)x (.+?) \| (.+?) \| (\w+)", of or "")
    if not m:
        return MISSING
    model, tp, profile, setting, what = m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5)
    try:
        card = roofline.load_model_card(model)
        bw = load_profile(profile)["memory_bandwidth_tbs"]
    except Exception:  # noqa: BLE001 - an unknown card or profile
        return MISSING
    from ..profile.comm import pcie_rule

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


def _s9_remeasured(store) -> dict:
    from ..bench.runs import remeasured, remeasured_subject

    out = {}
    for r in remeasured(store.rows("bench_summary")):
        for field_ in ("before", "after", "before_method", "after_method"):
            out[remeasured_subject(r, field_)] = r.get(field_)
        if plain(r.get("before")) and plain(r.get("after")) is not None:
            out[remeasured_subject(r, "ratio")] = r["after"] / r["before"]
    return out


def _s9_all_users(store) -> dict:
    out = {}
    for r in _ch05_current(store):
        if r.get("phase") == "sweep" and plain(r.get("per_user_tok_s")) is not None:
            out.setdefault(f"{r['label']} | C={int(r['concurrency'])}", r["concurrency"] * r["per_user_tok_s"])
    return out


def _s9_client_turns(store) -> dict:
    last = {}
    for r in store.rows("bench_client_check"):
        last[(r["label"], r["metric"], int(r["concurrency"]))] = r
    out = {}
    for (lab, m, c), r in last.items():
        xs = r.get("servebook_runs") if isinstance(r.get("servebook_runs"), list) else []
        at = f"{lab} | {m} | C={c}"
        out.update({f"{at} | run {i}": x for i, x in enumerate(xs, 1)})
        if xs and r.get("bench_serving"):
            out[f"{at} | last against bench_serving"] = (xs[-1] - r["bench_serving"]) / r["bench_serving"]
    return out


def _s9_nccl_facts(store) -> dict:
    n = _nccl(store)
    out = {k: v for k, v in n.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    ru = n.get("runner_up") or {}
    out.update({f"runner_up {k}": v for k, v in ru.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if ru.get("slower_at_batches"):
        out["runner_up slower_at_batches"] = ", ".join(map(str, ru["slower_at_batches"]))
    return out


def _s9_stalls(store) -> dict:
    from ..bench.runs import current, sweep_stalls

    out = {}
    for st in sweep_stalls(*current(store.rows("bench_summary"), store.rows("bench_requests"))):
        out.update({f"{st['label']} | C={st['concurrency']} | {k}": v for k, v in st.items() if isinstance(v, (int, float))
                    and not isinstance(v, bool)})
    return out


def _s9_earlier(store) -> dict:
    from ..backends.figures import earlier_attempts

    engines = {r.get("engine") for r in store.rows("backends") if r.get("engine")}
    return {f"{e} | {a}": why for e in sorted(engines) for a, why in earlier_attempts(store, e).items()}


def _s9_ref_prediction(of: str):
    from ..nccl.figures import reference_prediction

    m = re.fullmatch(r"(\d+) layers \| (.+)", of or "")
    if not m:
        return MISSING
    try:
        return reference_prediction(int(m.group(1))).get(m.group(2), MISSING)
    except Exception:  # noqa: BLE001 - no reference run here: the page states something no table gives
        return MISSING


def _s9_seed_parts(field_: str | None) -> Callable[[Any], dict]:
    def compute(store):
        from ..profile.seed import gap_by_category

        parts = {g["category"]: g for g in gap_by_category(store.rows("seed_projection"))}
        return parts if field_ is None else {k: g[field_] for k, g in parts.items()}
    return compute


def _s9_attention_ratio(store) -> dict:
    r = _s9_seed_parts(None)(store).get("attention") or {}
    return {None: r["sglang"] / r["vllm"]} if r.get("vllm") and r.get("sglang") is not None else {}


# seed verdict (fix-prof, 2026-12-02): helpers of the quantities in the block marked "seed verdict (fix-prof)" below
def _seed_total(field_: str) -> Callable[[Any], dict]:
    return lambda store: {r["engine"]: r.get(field_) for r in store.rows("seed_projection") if r["category"] == "total"}


def _seed_comm(field_: str) -> Callable[[Any], dict]:
    return lambda store: {r["engine"]: r.get(field_) for r in store.rows("seed_projection") if r["category"] == "communication"}
# end of seed verdict helpers (fix-prof)


def _s9_nvlink(store) -> dict:
    links = {str(r.get("link")).strip() for r in store.rows("topology") if r.get("link")}
    return {c: int(m.group(1)) for c in links if (m := re.fullmatch(r"NV(\d+)", c))}


def _s9_p2p(field_: str) -> Callable[[Any], dict]:
    def compute(store):
        xs = [r[field_] for r in store.rows("p2p") if isinstance(r.get(field_), (int, float)) and r[field_]]
        return {"min": min(xs), "max": max(xs)} if xs else {}
    return compute


def _s9_busy(store) -> dict:
    """Each profile's GPU time per step: its recorded ``busy_ms``, else its categories but idle summed."""
    from ..profile.tables import latest_breakdown

    out: dict = {}
    for r in latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs")):
        if r["category"] != "gpu idle":
            out[r["label"]] = out.get(r["label"], 0.0) + r["ms_per_step"]
    out.update({k: p["busy_ms"] for k, p in _profiles(store).items() if plain(p.get("busy_ms")) is not None})
    return out


def _s9_engine_difference(store) -> dict:
    from ..profile.tables import engine_difference

    return {f"{r['a']} | {r['b']} | {r['category']}": r["diff_ms"]
            for r in engine_difference(store.rows("decode_breakdown"), store.rows("profile_runs"))}


def _s9_prediction_layers(store) -> dict:
    out = {}
    for p in store.rows("prediction_check"):
        subject = f"{p['card']} | {p['engine']} | {p['backend']} | {p['mode']} | {p.get('quant', 'bf16')}"
        out[f"{subject} | measured"], out[f"{subject} | full"] = p.get("layers_measured"), p.get("full_layers")
    return out


def _s9_pairs(values: dict, fn: Callable[[Any, Any], Any]) -> dict:
    """``fn(a, b)`` for every ordered pair of subjects, by ``"<a> vs <b>"``."""
    return {f"{ka} vs {kb}": fn(va, vb) for ka, va in values.items() for kb, vb in values.items() if ka != kb}


def _s9_pct(a, b):
    return 100 * (a - b) / b if a is not None and b else None


def _s9_backend_vs_starts(store) -> dict:
    from ..findings.intervals import starts_of

    return _s9_pairs(_s8_rows(store), lambda a, b: min(starts_of(a), starts_of(b)))


def _s9_other_vs(fn: Callable[[float, float], Any]) -> Callable[[Any, str], Any]:
    """Another run's single-stream rate against this run's: ``of`` is ``"<run directory> | <its label> vs <this run's
    label>"`` (chapter 06's comparison with ``compare_with``); both rates recomputed from their runs' tables."""
    def lookup(store, of: str):
        head, sep, mine = (of or "").rpartition(" vs ")
        other = _s8_other_run("single_tok_s")(head) if sep else MISSING
        here = (_throughput(store).get(mine) or {}).get("single_tok_s")
        return MISSING if other is MISSING or here is None else fn(other, here)
    return lookup


def _s9_other_vs_starts(store, of: str):
    """The fewer server starts of the two single-stream rates chapter 06 compares across runs (``of`` as
    :func:`_s9_other_vs`), each recomputed from its run's tables."""
    head, sep, mine = (of or "").rpartition(" vs ")
    other = _s8_other_run("starts")(head) if sep else MISSING
    here = (_throughput(store).get(mine) or {}).get("starts")
    return MISSING if other is MISSING or here is None else min(int(other), int(here))


def _s9_default_method(store) -> dict:
    from ..findings.methods import default_methods, method_figures

    return method_figures(default_methods(store))


_SEED = {"seed_loss": lambda store: {None: seed_case()["loss"]},
         "seed_tok_s": lambda store: dict(seed_case()["single_stream_tok_s"])}

def _ch05_single_vs_c1(store) -> dict:
    from ..bench.figures import single_vs_c1

    return {f"{v['label']} | {k}": x for v in single_vs_c1(store) for k, x in v.items() if k != "label"}


def _ch05_bandwidths(store, part: str) -> dict:
    from ..bench.figures import bandwidth_roofline

    return {f"{c} | {k}": x for c, v in bandwidth_roofline(store)[part].items() for k, x in v.items()}


def _ch05_full_model_weights(of: str | None) -> Any:
    from ..roofline import weights_on_gpus

    if not of or of.count("|") != 3:
        return MISSING
    parts = [x.strip() for x in of.split("|")]
    return weights_on_gpus(*parts[:3])[parts[3]]


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
    Quantity("best_starts", "server starts the fastest backend's interval covers (one rate per start)", _per(_backends, "best_starts")),
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
    Quantity("single_starts", "server starts the single-stream interval is computed over (one rate per start)", _single_starts),
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
    # chapter 05 (s8): the sweep as it ran, latencies, time split, client checks, predictions in tok/s (none required on a page)
    Quantity("sweep_levels", "concurrency levels the sweep ran (bench_summary)", _ch05_sweep_params("levels")),
    Quantity("sweep_requests_per_c", "requests the sweep sent per level, per unit of concurrency", _ch05_sweep_params("requests_per_level_x_C")),
    Quantity("sweep_stopped_by", "why the sweep stopped: saturation, throughput fell, time budget or max concurrency",
             _ch05_sweep_params("stopped_by")),
    Quantity("single_ttft_ms", "mean TTFT (ms) of a configuration's last single-stream measurement",
             lambda store: {k: r["ttft_s_mean"] * 1e3 for k, r in _ch05_single(store).items() if plain(r.get("ttft_s_mean")) is not None}),
    Quantity("single_tpot_ms", "mean TPOT (ms) of a configuration's last single-stream measurement",
             lambda store: {k: r["tpot_s_mean"] * 1e3 for k, r in _ch05_single(store).items() if plain(r.get("tpot_s_mean")) is not None}),
    Quantity("tokens_per_chunk", "tokens per streamed chunk of a configuration's last single-stream measurement",
             lambda store: {k: r.get("tokens_per_chunk") for k, r in _ch05_single(store).items()}),
    Quantity("sweep_throughput_tok_s", "throughput (tok/s) of one sweep level (label | C=n)", _ch05_sweep("throughput_tok_s")),
    Quantity("sweep_per_user_tok_s", "per-user decode tok/s of one sweep level", _ch05_sweep("per_user_tok_s")),
    Quantity("sweep_ttft_server_p99_s", "p99 TTFT from the request's send (s) of one sweep level", _ch05_sweep("ttft_server_s_p99")),
    Quantity("sweep_ttft_server_p50_ms", "median TTFT from the request's send (ms) of one sweep level", _ch05_sweep("ttft_server_s_p50", 1e3)),
    Quantity("sweep_ttft_p50_ms", "median TTFT including the wait for a slot (ms) of one sweep level", _ch05_sweep("ttft_s_p50", 1e3)),
    Quantity("ceiling_goal", "the goal: servebook's ceiling at least this many times sglang.bench_serving's (bench.CEILING_GOAL)",
             lambda store: {None: _ceilings(store)["goal"]}),
    Quantity("ceiling_ratio_decided", "a client's ceiling over bench_serving's at one event per write, where the verdict is taken",
             _ch05_decided("ratio")),
    Quantity("ceiling_busy_decided", "share of its core a client used at one event per write", _ch05_decided("busy")),
    Quantity("servebook_ceiling_tok_s", "servebook's own ceiling: its highest streamed tok/s against the fake server", _ch05_servebook_ceiling),
    Quantity("ceiling_use_max", "the largest share of the client's ceiling any measured rate used", _ch05_ceiling_use),
    Quantity("seed_pct_of_roofline", "seed case: a reported rate as % of the card's bandwidth roofline",
             _ch05_seed_rows(lambda r: r.get("pct_of_roofline"))),
    Quantity("seed_pct_of_comm_roofline", "seed case: a reported rate as % of the roofline with the communication floor",
             _ch05_seed_rows(lambda r: 100 * r["measured_tok_s"] / r["roofline_with_comm_tok_s"] if r.get("roofline_with_comm_tok_s") else None)),
    Quantity("breakdown_total_ms", "ms per token split in bench_breakdown (label)",
             lambda store: {k: sum(r["ms_per_token"] for r in v) for k, v in _ch05_breakdown(store).items()}),
    Quantity("breakdown_ms", "ms per token of one part of bench_breakdown (label | part)",
             lambda store: {f"{k} | {r['part']}": r["ms_per_token"] for k, v in _ch05_breakdown(store).items() for r in v}),
    Quantity("breakdown_share", "share of one part of bench_breakdown (label | part)",
             lambda store: {f"{k} | {r['part']}": r["share"] for k, v in _ch05_breakdown(store).items() for r in v}),
    Quantity("client_check_rel_diff", "servebook's client against sglang.bench_serving on the live server, relative (label | metric | C=n)",
             _ch05_client_check),
    Quantity("failures_recorded", "rows of the run's failures table", lambda store: {None: len(store.rows("failures"))}),
    Quantity("predicted_tok_s", "full model's single-stream tok/s predicted from two slices (1000 / predicted_ms)", _ch05_predicted("predicted_ms")),
    Quantity("predicted_tok_s_low", "low end of the predicted tok/s (1000 / high_ms)", _ch05_predicted("high_ms")),
    Quantity("predicted_tok_s_high", "high end of the predicted tok/s (1000 / low_ms)", _ch05_predicted("low_ms")),
    Quantity("measured_full_tok_s", "full model's measured tok/s (1000 / measured_ms)", _ch05_predicted("measured_ms")),
    Quantity("seed_comm_roofline_tok_s", "seed case: the card's roofline with the communication floor (tok/s), by case",
             _ch05_seed_rows(lambda r: r.get("roofline_with_comm_tok_s"))),
    Quantity("seed_t_mem_ms", "seed case: memory floor per token (ms) on its GPUs (case)", _ch05_seed_rows(lambda r: r.get("t_mem_ms"))),
    Quantity("seed_t_comm_ms", "seed case: all-reduce floor per token (ms) at the engine's own latency (case)",
             _ch05_seed_rows(lambda r: r.get("t_comm_ms"))),
    Quantity("seed_crossover_us", "seed case: all-reduce latency (us) at which the two floors are equal",
             _ch05_seed_rows(lambda r: r["t_mem_ms"] * r["allreduce_us"] / r["t_comm_ms"] if r.get("t_comm_ms") else None)),
    Quantity("plan_roofline_tok_s", "a what-if limit of chapter 05's plan (table roofline), by its case",
             lambda store: {r["case"]: r.get("tok_s") for r in store.rows("roofline") if r.get("chapter") == "05"}),
    # end of chapter 05 (s8)
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
    # servebook.backends.figures, servebook.nccl.figures), which formats nothing and imports no page code
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
             lambda store: __import__("servebook.backends.figures", fromlist=["x"]).rates(store)),
    Quantity("backend_ci95", "95% half-width of one forced start's tok/s",
             lambda store: __import__("servebook.backends.figures", fromlist=["x"]).intervals(store)),
    Quantity("backend_agreement", "one start's agreement with the default (engine | attention | mode | decode, "
             "teacher-forced or greedy)", lambda store: __import__("servebook.backends.figures", fromlist=["x"]).agreements(store)),
    Quantity("backend_decode_positions", "decode positions one start's decode-path agreement counts",
             lambda store: __import__("servebook.backends.figures", fromlist=["x"]).decode_positions(store)),
    Quantity("backend_starts", "starts chapter 03 tried per engine (engine | tried) and those correct in the mode compared "
             "(engine | correct), as chapter 06's table counts them; ok starts in another mode (engine | other modes)",
             lambda store: {**{f"{b['engine']} | {k}": b[k] for b in __import__("servebook.findings", fromlist=["x"]).backends(store)
                               for k in ("tried", "correct")}, **_s9_other_modes(store)}),
    Quantity("plan_launches", "launches the what-if plans for chapter 03 on the real host",
             lambda store: __import__("servebook.backends.figures", fromlist=["x"]).plan_launches(store)),
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
    Quantity("comm_floor_fact", "what-if: a figure of one communication-floor row (case | field; table roofline, chapter 04)",
             lambda store: _comm_floor_facts(store)),
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
    # shared sayers, 01, 06 (s8): host facts, seed-case figures, chapter 03's comparisons as the sayers state them,
    # method constants (none required on a page)
    Quantity("host_gpu_count", "GPUs chapter 01 saw on this host (a what-if: the profile's, as chapter 01 recorded them)", lambda store: {None: _s8_host(store).get("gpu_count")}),
    Quantity("host_capability", "compute capability of this host's GPUs, as chapter 01 recorded it",
             lambda store: {None: _s8_host(store).get("capability")}),
    Quantity("host_gpu_memory_gib", "memory (GiB) of this host's first GPU", _s8_gpu0("memory_gib")),
    Quantity("host_sm_count", "SMs of this host's first GPU", _s8_gpu0("sm_count")),
    Quantity("host_cuda", "CUDA version: of the driver (driver), torch's build (torch), the host line's (host)", _s8_cuda),
    Quantity("seed_tp", "seed case: tensor-parallel size, one GPU per rank (data/reference/seed-case.json)",
             lambda store: {None: seed_case()["tp"]}),
    Quantity("profile_capability", "compute capability a hardware profile records (data/hardware/<profile>.json)",
             lambda store: {}, lookup=_s8_profile_capability),
    Quantity("vs_default_pct", "a start's rate against its engine's default in the same mode, signed % (engine | attention | mode)",
             _s8_vs_default),
    Quantity("compared_starts", "server starts a comparison with the default covers (the fewer of the two; engine | attention | mode)",
             _s8_compared_starts),
    Quantity("default_start_tok_s", "the default's rate in one server start (engine | start n)", _s8_default_starts),
    Quantity("method_constant", "a constant of the method, read from the code (servebook.backends.agreement.TOLERANCE, MIN_AGREEMENT; "
             "servebook.bench.ceiling.ENGINE_REGIME, BOUND_AT; servebook.nccl.predict.NOISE)",
             _s8_method),
    Quantity("engine_helpers_count", "engine helpers chapter 01 asked, judged against the hardware, and that disagreed",
             _s8_helpers),
    Quantity("c1_tok_s", "throughput (tok/s) of the sweep's C=1 level, as chapter 06 reads it (findings.throughput)",
             _per(_throughput, "c1_tok_s")),
    Quantity("peak_gain", "the sweep's peak throughput over its C=1 throughput", _per(_throughput, lambda t: t["peak_tok_s"] / t["c1_tok_s"]
                                                                                      if t.get("peak_tok_s") and t.get("c1_tok_s") else None)),
    Quantity("peak_per_user_tok_s", "per-user tok/s at the sweep's peak", _per(_throughput, "peak_per_user_tok_s")),
    Quantity("start_single_tok_s", "single-stream tok/s of one server start (label | start n)",
             lambda store: {f"{k} | start {i}": x for k, t in _throughput(store).items()
                            for i, x in enumerate([x for x in t.get("start_tok_s") or [] if x is not None], 1)}),
    Quantity("failures_distinct", "distinct recorded failures (by error text; findings.failures)",
             lambda store: {None: len(__import__("servebook.findings", fromlist=["x"]).failures(store))}),
    Quantity("roofline_span_pct", "the single-stream 95% interval's ends as % of the bandwidth roofline (label | low, label | high)",
             lambda store: {f"{k} | {end}": 100 * (t["single_tok_s"] + sign * t["single_ci95"]) / t["roofline_tok_s"]
                            for k, t in _throughput(store).items() if t.get("roofline_tok_s") and t.get("single_ci95")
                            and t.get("single_tok_s") is not None for end, sign in (("low", -1), ("high", 1))}),
    Quantity("decode_tolerance_nats", "the near-tie tolerance (nats) the run's decode-path agreement used (backends.decode_tolerance; "
             "servebook.backends.agreement.TOLERANCE where no row recorded one)", _s8_tolerance),
    Quantity("other_run_single_tok_s", "single-stream tok/s of a configuration of another run chapter 06 compares with (run | label)",
             lambda store: {}, lookup=_s8_other_run("single_tok_s")),
    Quantity("other_run_single_ci95", "its 95% half-width (run | label)", lambda store: {}, lookup=_s8_other_run("single_ci95")),
    # end of shared sayers, 01, 06 (s8)
    # issue #28 item 4 (s9): the prose figures tagged last
    Quantity("default_method", "chapters 03 and 05's measurement of an engine's default, item by item (engine | what | 03 or 05; "
             "engine | change %): servebook.findings.method_figures", _s9_default_method),
    Quantity("sweep_stop_why", "why the sweep stopped, read again from its levels by one rule for every engine (a stop row of "
             "bench_sweep_stops: saturation or throughput fell), or the time budget or last level (bench.figures.sweep_parameters)",
             _ch05_sweep_params("why")),
    Quantity("backend_error", "a forced start's recorded error, whole (engine | attention | mode | recorded_at; table backends)",
             _s9_backend_errors),
    Quantity("failure_text", "a recorded failure's error, whole (step | recorded_at; table failures)",
             lambda store: {f"{f.get('step')} | {f.get('recorded_at')}": " ".join(marked(f.get("error")).split()) for f in store.rows("failures")}),
    Quantity("not_run_reason", "why a backend did not run, as recorded (engine | attention; backends.figures.not_run)", _s9_not_run),
    Quantity("card_fact", "a model card's figure (model | active_params_b, gb_per_token, avg_bytes_per_param, avg_gb_per_token, "
             "allreduces_per_token, collectives_per_token_tpN), from data/models", lambda store: {}, lookup=_s9_card_fact),
    Quantity("seed_pcie_us", "seed case: one engine's all-reduce latency on eight PCIe ranks, the middle of its published "
             "range (engine; profile.comm.engine_latencies central_us)", lambda store: _pcie("central_us")),
    Quantity("seed_pcie_us_low", "the low end of that range (engine)", lambda store: _pcie("low_us")),
    Quantity("seed_pcie_us_high", "the high end of that range (engine)", lambda store: _pcie("high_us")),
    Quantity("seed_floor", "the seed case's limit with the communication floor at a latency of the reference NCCL run, and its "
             "inputs (model on Nx profile | setting | field), from the data files and that run", lambda store: {}, lookup=_s9_seed_floor),
    Quantity("seed_reported_tok_s", "seed case: the reported single-stream rate a bench_roofline row sets against its limits (case)",
             _ch05_seed_rows(lambda r: r.get("measured_tok_s"))),
    Quantity("seed_row_roofline_tok_s", "seed case: the bandwidth roofline (tok/s) of that row (case)",
             _ch05_seed_rows(lambda r: r.get("roofline_tok_s"))),
    Quantity("remeasured", "a measurement taken again with another method: its figure before and after, each method, and "
             "after / before (label | phase | C=n | field; bench.runs.remeasured over bench_summary)", _s9_remeasured),
    Quantity("roofline_bandwidth_gbs", "the bandwidth (GB/s) a configuration's roofline row of this run was computed with (case; "
             "bench_roofline, source measured here)", lambda store: {r["case"]: r["bandwidth_tbs"] * 1e3 for r in store.rows("bench_roofline")
                                                                   if r.get("source") == "measured here" and plain(r.get("bandwidth_tbs")) is not None}),
    Quantity("sweep_all_users_tok_s", "C users each at a sweep level's per-user rate: C x per_user_tok_s (label | C=n)", _s9_all_users),
    Quantity("client_check_turn", "servebook's runs of a client-check metric (label | metric | C=n | run i) and its last run against "
             "bench_serving's, relative (label | metric | C=n | last against bench_serving)", _s9_client_turns),
    Quantity("preflight_reason", "why an engine's own validation refused a backend, as recorded (engine | attention | recorded_at; "
             "table backends_preflight)", lambda store: {f"{p.get('engine')} | {p.get('attention')} | {p.get('recorded_at')}":
                                                         str(p.get("reason") or p.get("error") or "refused")
                                                         for p in store.rows("backends_preflight") if not p.get("ok")}),
    Quantity("nccl_fact", "a figure of this run's all-reduce grid as chapter 06 reads it (servebook.findings.nccl): world_size, "
             "settings, b1_bytes, default_us, best_us, layers, allreduces_per_token, default_ms_per_token, predicted_delta_ms, "
             "reason (its words), runner_up us, runner_up delta_ms", _s9_nccl_facts),
    Quantity("sweep_stall", "a sweep level whose throughput fell: its figures and the best level's before it (label | C=n | field; "
             "bench.runs.sweep_stalls over the current bench_summary and bench_requests)", _s9_stalls),
    Quantity("earlier_attempt", "how an earlier attempt of a forced backend was recorded (engine | attention; "
             "backends.figures.earlier_attempts)", _s9_earlier),
    Quantity("chapter_error", "why an execution of a chapter stopped, as its row recorded it, whole (chapter | recorded_at; table "
             "chapters)", lambda store: {f"{c.get('chapter')} | {c.get('recorded_at')}": " ".join(str(c.get("error")).split())
                                         for c in store.rows("chapters") if c.get("status") == "failed"}),
    Quantity("ref_nccl_prediction", "chapter 04's prediction from the reference grid at N layers of its model's width: the "
             "default's per-token all-reduce ms at batch 1 and recommend()'s reason (N layers | field; "
             "servebook.nccl.figures.reference_prediction)", lambda store: {}, lookup=_s9_ref_prediction),
    Quantity("plan_roofline_fact", "an input of a what-if limit of chapter 05's plan, from its roofline row (case | gb_per_token, tp, "
             "bandwidth_tbs, t_comm_ms)", lambda store: {f"{r['case']} | {k}": v for r in store.rows("roofline") if r.get("chapter") == "05"
                                                          for k, v in (("gb_per_token", (r.get("bytes_per_token") or 0) / 1e9 or None),
                                                                       ("tp", r.get("tp")), ("bandwidth_tbs", r.get("bandwidth_tbs")),
                                                                       ("t_comm_ms", r.get("t_comm_ms")))}),
    Quantity("probe_warning", "a warning chapter 01's probe recorded, as recorded (its position in probe.json's warnings)",
             lambda store: {str(i): w for i, w in enumerate(__import__("servebook.findings.tables", fromlist=["x"])._probe(store)
                                                            .get("warnings") or [])}, files=("probe.json",)),
    Quantity("seed_projected_part_ms", "seed case: one category's part of the projected gap, SGLang's ms per token minus vLLM's "
             "(category; profile.seed.gap_by_category over seed_projection)", _s9_seed_parts("diff_ms")),
    Quantity("seed_attention_ratio", "seed case: SGLang's projected attention ms per token over vLLM's (seed_projection)",
             _s9_attention_ratio),
    Quantity("seed_fix_gain_ms", "seed case: the predicted gain (ms per token) of the first-ranked change (table seed_fixes)",
             lambda store: {"first": store.rows("seed_fixes")[0].get("gain_ms_per_token")} if store.rows("seed_fixes") else {}),
    Quantity("engine_findings", "an engine's helpers that disagree with the hardware (engine version | mismatches) or leave this "
             "GPU out (engine version | gaps), as chapter 01 recorded them (table engines)",
             lambda store: {f"{e.get('engine')} {e.get('version')} | {k}": e.get(k) or 0 for e in store.rows("engines")
                            for k in ("mismatches", "gaps")}),
    Quantity("nvlink_links", "bonded NVLink links of a link code nvidia-smi reported between two GPUs (table topology; NV18 -> 18)",
             _s9_nvlink),
    Quantity("p2p_gbs", "measured GPU-to-GPU copy bandwidth (GB/s) over the pairs chapter 01 measured (min, max; table p2p)",
             _s9_p2p("bandwidth_gbs")),
    Quantity("p2p_latency_us", "measured small-copy latency (us) over those pairs (min, max; table p2p)", _s9_p2p("latency_us")),
    Quantity("profile_layers", "decoder layers of one profiled server's model (label)", _per(_profiles, "layers")),
    Quantity("profile_busy_ms", "GPU time of one profiled server's decode step: its recorded busy_ms (profile_runs), else its "
             "categories but idle, summed (label)",
             _s9_busy),
    Quantity("profile_diff_ms", "SGLang's ms per step of one category minus vLLM's on the same model (a | b | category; "
             "profile.tables.engine_difference)", _s9_engine_difference),
    Quantity("prediction_layers", "slice depths a full-model prediction is made from (subject | measured) and the full "
             "model's layers (subject | full)", _s9_prediction_layers),
    Quantity("backend_vs_pct", "one forced start's rate against another's (not its default: eager against graph), signed % "
             "(A vs B, each engine | attention | mode)", lambda store: _s9_pairs(__import__("servebook.backends.figures", fromlist=["x"])
                                                                              .rates(store), _s9_pct)),
    Quantity("backend_vs_starts", "server starts that comparison covers (the fewer of the two; A vs B)", _s9_backend_vs_starts),
    Quantity("single_vs_pct", "one configuration's single-stream rate against another's of the same run, signed % (label vs label)",
             lambda store: _s9_pairs(_per(_throughput, "single_tok_s")(store), _s9_pct)),
    Quantity("single_vs_starts", "server starts that comparison covers (the fewer of the two; label vs label)",
             lambda store: _s9_pairs(_single_starts(store), min)),
    Quantity("other_run_vs_pct", "another run's single-stream rate against this run's, signed % (run | label vs label)",
             lambda store: {}, lookup_in=_s9_other_vs(_s9_pct)),
    Quantity("other_run_ratio", "another run's single-stream rate over this run's (run | label vs label)",
             lambda store: {}, lookup_in=_s9_other_vs(lambda a, b: a / b)),
    # seed verdict (fix-prof, 2026-12-02): versions, all-reduce figures and the same-machine NCCL pair of chapter 06's
    # seed verdict, from its tables seed_projection and seed_fixes (profile.seed.verdict)
    Quantity("seed_profile_version", "seed case: the engine version the projected kernels were measured with (engine; "
             "seed_projection total row's measured_version)", _seed_total("measured_version")),
    Quantity("seed_studied_version", "seed case: the engine version the book studies (engine; seed_projection total row's "
             "studied_version)", _seed_total("studied_version")),
    Quantity("seed_collectives", "seed case: collectives per token at TP (engine; seed_projection communication row)",
             _seed_comm("collectives")),
    Quantity("seed_allreduce_us", "seed case: the one all-reduce latency (us) the projection gives an engine (engine)",
             _seed_comm("allreduce_us")),
    Quantity("seed_message_bytes", "seed case: the decode all-reduce message (bytes; engine)", _seed_comm("message_bytes")),
    Quantity("seed_nccl_pair_us", "seed case: NCCL all-reduce latency (us) of one published machine, default and tuned (LL) "
             "(default | tuned; seed_fixes)", lambda store: next(({"default": f.get("pair_default_us"), "tuned": f.get("pair_tuned_us")}
                                                                  for f in store.rows("seed_fixes") if f.get("pair_default_us") is not None), {})),
    Quantity("seed_nccl_pair_ms", "seed case: that same-machine difference over the collectives of a token (ms; seed_fixes)",
             lambda store: next(({None: f["pair_ms_per_token"]} for f in store.rows("seed_fixes")
                                 if f.get("pair_ms_per_token") is not None), {})),
    Quantity("seed_table", "seed case: a figure of a recorded row of the seed verdict's tables (table | key | field; "
             "profile.seed.SEED_TABLES, each row's key)", lambda store: _seed_table_figures(store)),
    # end of seed verdict (fix-prof)
    # -- chapter 05 (bench): single stream against C=1, both bandwidths, the full model's GPUs --------------------------
    Quantity("single_vs_c1", "a configuration's single stream beside its sweep's C=1 level and what differs (label | field; "
             "bench.figures.single_vs_c1)", _ch05_single_vs_c1),
    Quantity("bandwidth_roofline", "a roofline row against the datasheet and the measured read bandwidth (case | field; "
             "bench.figures.bandwidth_roofline)", lambda store: _ch05_bandwidths(store, "cases")),
    Quantity("gpu_read_bandwidth", "a GPU's measured read bandwidth (table memory_bandwidth) and the reference it is set against "
             "(device | field; bench.figures.bandwidth_roofline, roofline.REFERENCE_GPU_READ)", lambda store: _ch05_bandwidths(store, "devices")),
    Quantity("full_model_weights", "a model card's weights and the GPUs of a profile they need at least (card | bf16 or card | "
             "profile | weights_gb, weights_gib, gpu_memory_gib or gpus_to_hold; roofline.weights_on_gpus), from data/models and data/hardware",
             lambda store: {}, lookup=_ch05_full_model_weights),
    # fix-find (review findings 2 and 4): server starts chapter 03 counted per engine; starts a cross-run comparison covers
    Quantity("backend_server_starts", "server starts chapter 03 took per engine: each configuration's starts (one where it "
             "failed), summed (engine; servebook.findings.backends server_starts)",
             _per(_backends, "server_starts")),
    Quantity("other_run_vs_starts", "server starts a comparison of another run's single-stream rate with this run's covers "
             "(the fewer of the two; run | label vs label)", lambda store: {}, lookup_in=_s9_other_vs_starts),
    # start-to-start spread of the profiles (fix-prof2, 2026-12-02): server starts each profile's figures cover
    Quantity("profile_starts", "server starts one profiled server was profiled over (label; profile.tables.start_spread)",
             lambda store: {p["label"]: s["starts"] for p in store.rows("profile_runs") if p.get("ok")
                            for s in [__import__("servebook.profile.tables", fromlist=["x"]).start_spread(store.rows("profile_runs"), p["label"])]
                            if s is not None}),
    Quantity("profile_tpot_start_mean_ms", "one profiled server's time per token, mean over its server starts (label; "
             "profile.tables.start_spread tpot_mean_ms)", lambda store: _start_spreads(store, "tpot_mean_ms")),
    Quantity("profile_tpot_start_ci95_ms", "the 95% t-interval half-width of one profiled server's time per token over its "
             "server starts (label; profile.tables.start_spread tpot_ci95_ms)", lambda store: _start_spreads(store, "tpot_ci95_ms")),
    Quantity("seed_fix_alternative_ms", "seed case: the projected attention (ms per token) of the alternative backend a fix "
             "names, from its measured H200 profile (engine | backend; seed_fixes)",
             lambda store: {f"{f['engine']} | {f['alternative_backend']}": f.get("alternative_ms") for f in store.rows("seed_fixes")
                            if f.get("alternative_ms") is not None}),
    Quantity("seed_fix_like_gain_ms", "seed case: the first-ranked change's gain with both backends' attention taken from "
             "their 2-layer slices by one rule (ms per token; seed_fixes)",
             lambda store: {"first": store.rows("seed_fixes")[0].get("like_for_like_gain_ms")} if store.rows("seed_fixes") else {}),
    Quantity("seed_category_start_ms", "seed case: one category's projected ms per token with one server start of the "
             "engine's 2-layer slice (engine | category | start; seed_projection row's starts_ms)",
             lambda store: {f"{r['engine']} | {r['category']} | {i + 1}": x for r in store.rows("seed_projection")
                            for i, x in enumerate(r.get("starts_ms") or [])}),
    Quantity("seed_start_n", "seed case: the number of a server start of the 2-layer slices (start; identity)",
             lambda store: {str(i + 1): i + 1 for r in store.rows("seed_projection") if r["category"] == "total"
                            for i in range(len(r.get("starts_tok_s") or []))}),
    Quantity("seed_start_tok_s", "seed case: the projected tok/s with one server start of the engine's 2-layer slice "
             "(engine | start; seed_projection total row's starts_tok_s)",
             lambda store: {f"{r['engine']} | {i + 1}": x for r in store.rows("seed_projection") if r["category"] == "total"
                            for i, x in enumerate(r.get("starts_tok_s") or [])}),
    Quantity("seed_start_gap_ms", "seed case: SGLang's projected ms per token minus vLLM's with the slices' start N (start)",
             lambda store: (lambda t: {str(i + 1): a - b for i, (a, b) in enumerate(zip(t.get("sglang") or [], t.get("vllm") or []))})(
                 {r["engine"]: r.get("starts_ms") for r in store.rows("seed_projection") if r["category"] == "total"})),
    # end of start-to-start spread (fix-prof2)
]}


def _pcie(field: str) -> dict:
    from ..profile.comm import engine_latencies

    return {e: L[field] for e, L in engine_latencies().items()}


def _start_spreads(store, field: str) -> dict:
    """``field`` of ``profile.tables.start_spread`` per profiled label that has two starts or more."""
    from ..profile.tables import start_spread

    rows = store.rows("profile_runs")
    return {p["label"]: s[field] for p in rows if p.get("ok") for s in [start_spread(rows, p["label"])] if s is not None}


def expected(store, name: str, of: str | None = None) -> Any:
    """The quantity ``name`` (of ``of``) recomputed from the run's tables, or ``MISSING``."""
    return pick(QUANTITIES[name], QUANTITIES[name].compute(store), of, store)


def pick(quantity: Quantity, values: dict, of: str | None, store=None) -> Any:
    """``of``'s value among a quantity's computed ``values`` (or its lookup), or ``MISSING``."""
    if of in values and plain(values[of]) is not None:
        return plain(values[of])
    if quantity.lookup is not None or (quantity.lookup_in is not None and store is not None):
        value = quantity.lookup(of) if quantity.lookup is not None else quantity.lookup_in(store, of)
        return MISSING if value is MISSING or value is None else plain(value)
    return MISSING

_KNOWN.update(QUANTITIES)  # q() refuses a name the registry cannot recompute
