"""Chapter 04's figures, computed from a run's tables and nothing else: what the page states, and what
``servebook.stated`` recomputes to check it (this module formats nothing and imports no page code).

    latencies(store)["default | torch | graph | 14336"]    # us per all-reduce, median of the recorded medians
    reference_checks()["raw vs torch, largest gap"]        # the reference grid's derived figures, by name
    run_spread(store)                                      # this run's pick against the spread between two grids
    e2e_rows(store)                                        # chapter 04's end-to-end rows, each against its reference
"""

from __future__ import annotations

import math
from typing import Any

from ..bench.sse import timed_to, timed_to_words
from ..paths import data_dir
from ..results import RunStore

__all__ = ["REFERENCE_RUN", "reference_store", "standard_rows", "latencies", "latency_key", "b1_bytes", "reference_checks",
           "run_spread", "comm_floor", "e2e_rows", "SEED_PREFIX"]

REFERENCE_RUN = "h200x2-nccl"  # the same run as servebook.stated.REFERENCE_NCCL_RUN
SEED_PREFIX = "NCCL_PROTO=LL,NCCL_ALGO=Ring"  # the seed's PCIe block, as the built-in grid labels it


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def reference_store() -> RunStore:
    """The reference grid chapter 04 shows in every book (``data/runs/h200x2-nccl``)."""
    return RunStore(data_dir() / "runs" / REFERENCE_RUN)


def standard_rows(store: RunStore):
    """The run's ``allreduce`` rows without the graph-shape study and the single-process path (a DataFrame)."""
    import pandas as pd

    ar = store.table("allreduce")
    if not len(ar):
        return ar
    if "setting" not in ar:
        ar["setting"] = "default"
    ar["setting"] = ar["setting"].fillna("default")
    keep = pd.Series(True, index=ar.index)
    if "shape_study" in ar:
        keep &= ar["shape_study"] != True  # noqa: E712
    if "path" in ar:
        keep &= ar["path"] != "raw-single-process"
    return ar[keep]


def latency_key(setting: str, path: str, mode: str, nbytes: int) -> str:
    """The subject a latency is tagged with: ``"setting | path | mode | bytes"``."""
    return f"{setting} | {path} | {mode} | {int(nbytes)}"


def latencies(store: RunStore) -> dict[str, float]:
    """Every (setting, path, mode, message size) of the run: the median of its recorded ``us_median`` values."""
    std = standard_rows(store)
    if not len(std) or not {"path", "mode", "bytes", "us_median"} <= set(std.columns):
        return {}
    med = std.groupby(["setting", "path", "mode", "bytes"])["us_median"].median()
    return {latency_key(s, p, m, b): float(v) for (s, p, m, b), v in med.items() if _num(v) is not None}


def b1_bytes(store: RunStore) -> int | None:
    """The batch-1 decode message of the run's model (hidden size x 2 bytes), from its manifest or its rows."""
    m = store.manifest or {}
    if m.get("hidden_size"):
        return int(m["hidden_size"]) * 2
    rows = [r for r in store.rows("allreduce") if r.get("size_source") == "model" and r.get("batch") == 1]
    return int(rows[0]["bytes"]) if rows else None


def reference_checks(store: RunStore | None = None) -> dict[str, Any]:
    """The reference grid's derived figures, each by name (the hypotheses chapter 04 tests about its gap to nccl-tests)."""
    import json

    import pandas as pd

    store = store or reference_store()
    if not (store.path / "manifest.json").exists():
        return {}
    ar, std, fail = store.table("allreduce"), standard_rows(store), store.table("failures")
    b1 = b1_bytes(store)
    man = store.manifest
    g14 = std[(std["bytes"] == b1) & (std["mode"] == "graph")].pivot_table(index="setting", columns="path", values="us_median")
    out: dict[str, Any] = {"settings": int(ar["setting"].nunique()), "message sizes": int(std["bytes"].nunique()),
                           "GPUs": man.get("world_size"), "batch-1 bytes": b1}
    if {"torch", "raw-per-process"} <= set(g14.columns):
        both = g14.dropna(subset=["torch", "raw-per-process"])
        gap = (both["raw-per-process"] / both["torch"] - 1).abs()
        out.update({"raw vs torch, largest gap": float(gap.max()), "raw vs torch, settings compared": len(both),
                    "raw vs torch, default gap": _num(gap.get("default"))})
    gstd = std[(std["bytes"] == b1) & (std["mode"] == "graph")]
    out["clock gap, largest"] = float((gstd["us_wall"] / gstd["us_median"] - 1).abs().max())
    out["clock gap, rows"] = len(gstd)
    shape = ar[(ar["setting"] == "default") & (ar["bytes"] == b1) & (ar["mode"] == "graph") & (ar["path"] == "torch")]
    if len(shape):
        out["calls timed per sample"] = int((shape["iters"] * shape["launches"]).max())
        for _, r in shape.sort_values("iters").iterrows():
            out[f"default us with {int(r['iters'])} per graph"] = float(r["us_median"])
    if len(fail) and "error" in fail:
        cap = fail[fail["error"].str.contains("StreamCaptureUnsupported", na=False)]
        out["settings whose single-process capture failed"] = int(cap["setting"].nunique())
    ref = json.loads((data_dir() / "reference" / "nccl-tests-h200.json").read_text())
    tests_b1 = {s: by[str(b1)] for s, by in ref["us"].items() if str(b1) in by}
    if "default" in tests_b1:
        out["nccl-tests default us"] = float(tests_b1["default"])
        for s in ("default", *[x for x in g14.index if x != "default"]):
            if "torch" in g14.columns and s in g14.index and _num(g14.loc[s, "torch"]) is not None:
                out[f"{s} over nccl-tests default"] = float(g14.loc[s, "torch"]) / float(tests_b1["default"])
    big = std[(std["bytes"] == 16777216) & (std["mode"] == "graph") & (std["path"] == "torch")].groupby("setting")["us_median"].median()
    for s in big.index:
        if s == "default" or s.startswith(SEED_PREFIX):
            out[f"{s} us at 16 MB"] = float(big[s])
    if man.get("num_hidden_layers") and man.get("batches"):
        from .predict import per_token_prediction
        from .sizes import message_sizes

        pred = per_token_prediction(ar, man["num_hidden_layers"], message_sizes(man["hidden_size"], 2, man["batches"], sweep=()))
        d = pred[(pred["setting"] == "default")].sort_values("batch")
        if len(d):
            out["default ms per token at batch 1"] = float(d["ms_per_token"].iloc[0])
    return {k: v for k, v in out.items() if v is not None and not (isinstance(v, float) and math.isnan(v)) and not isinstance(v, pd.Series)}


def reference_prediction(layers: int, store: RunStore | None = None) -> dict[str, Any]:
    """Chapter 04's prediction from the reference grid at its model's width and ``layers`` layers: the default's per-token
    all-reduce time at the smallest batch (``default ms per token``) and the pick ``recommend`` makes (``pick``,
    ``reason``), as ``servebook.nccl.report.prediction`` computes them."""
    from .predict import per_token_prediction, recommend
    from .sizes import message_sizes

    store = store or reference_store()
    m = store.manifest
    pred = per_token_prediction(store.table("allreduce"), layers, message_sizes(m["hidden_size"], 2, m["batches"], sweep=()))
    rec = recommend(pred)
    d = pred[(pred["setting"] == "default") & (pred["batch"] == pred["batch"].min())]
    return {"default ms per token": float(d["ms_per_token"].iloc[0]) if len(d) else None, "pick": rec.get("setting"),
            "reason": rec.get("reason")}


def run_spread(store: RunStore, here: dict | None, reference: RunStore | None = None) -> dict[str, Any]:
    """This run's pick against the spread between two grids of the same settings (this run's and the reference's).

    The recorded rows keep each setting's median and minimum over its repeats, not an interval, so the run-to-run
    spread is read between the two recordings: the largest relative change of one setting's graph-replayed batch-1
    latency from the reference grid to this run's. ``within_spread`` is True when the pick's gain over this run's
    default is no larger than that spread. ``here``: the run's answer (``servebook.findings.nccl``). Empty when the run
    measured no NCCL grid or picks nothing."""
    here = here or {}
    reference = reference or reference_store()
    if here.get("backend") != "nccl" or here.get("setting") in (None, "default") or store.path == reference.path:
        return {}
    b1 = here.get("b1_bytes")
    mine = {k.split(" | ")[0]: v for k, v in latencies(store).items() if k.endswith(f" | torch | graph | {b1}")}
    theirs = {k.split(" | ")[0]: v for k, v in latencies(reference).items() if k.endswith(f" | torch | graph | {b1}")}
    common = sorted(set(mine) & set(theirs))
    if not common or "default" not in mine:
        return {}
    changes = {s: mine[s] / theirs[s] - 1 for s in common}
    pick = here["setting"]
    out = {"pick": pick, "pick gain": 1 - mine[pick] / mine["default"], "settings in both grids": len(common),
           "largest change between grids": max(abs(c) for c in changes.values()),
           "setting that changed most": max(changes, key=lambda s: abs(changes[s]))}
    if pick in theirs and "default" in theirs:
        out["pick in the reference grid"] = theirs[pick]
        out["default in the reference grid"] = theirs["default"]
    out["within_spread"] = out["pick gain"] <= out["largest change between grids"]
    return out


def comm_floor(store: RunStore) -> dict[str, dict]:
    """The what-if's communication floor (table ``roofline``, chapter 04), by case."""
    return {r["case"]: r for r in store.rows("roofline") if r.get("chapter") == "04"}


def e2e_rows(store: RunStore, pred_here=None, layers: int | None = None) -> list[dict]:
    """Chapter 04's end-to-end rows (table ``tp_e2e``), each against its reference row (``vs``): "custom all-reduce off"
    against the engine's default, every NCCL setting against "custom all-reduce off". ``predicted_ms_per_token``: the
    grid's change at batch 1 for a setting that came from it (``pred_here``, ``per_token_prediction``'s frame);
    ``measured_ms_per_token``: the change in time per token against ``vs``; ``vs_tok_s``, ``vs_ci95``: that row's rate. A row
    whose decode was timed by another rule than its reference's (``bench.sse.timed_to``: a resumed run of an older
    execution) is not compared with it: ``vs`` None, ``not_compared`` says why (two rules are never pooled or subtracted)."""
    rows = store.rows("tp_e2e")
    out = []
    for r in rows:
        name = r.get("setting")
        vs = None if name == "engine default" else ("engine default" if name == "custom all-reduce off" else "custom all-reduce off")
        ref = next((x for x in rows if x.get("engine") == r.get("engine") and x.get("tp") == r.get("tp") and x.get("setting") == vs), None)
        apart = None
        if ref is not None and timed_to(r) != timed_to(ref):
            apart = (f"not compared with {vs}: that row's decode was timed to {timed_to_words(ref)}, this "
                     f"one's to {timed_to_words(r)} (two rules are never compared); measure both settings "
                     "again in one execution")
            ref = None
        pred = None
        if r.get("from_grid") and pred_here is not None and len(pred_here):
            p = pred_here[(pred_here["setting"] == r["from_grid"]) & (pred_here["batch"] == 1)]
            pred = float(p["delta_ms_vs_default"].iloc[0]) if len(p) else None
        a, b = _num(r.get("decode_tok_s")), _num((ref or {}).get("decode_tok_s"))
        log = r.get("allreduce_log")
        out.append({"engine": r.get("engine"), "tp": r.get("tp"), "setting": name, "outcome": r.get("outcome"),
                    "decode_tok_s": a, "ci95": _num(r.get("decode_tok_s_ci95")), "c8_tok_s": r.get("c8_throughput_tok_s"),
                    "vs": vs if ref else None, "vs_tok_s": b, "vs_ci95": _num((ref or {}).get("decode_tok_s_ci95")),
                    "predicted_ms_per_token": pred,
                    "measured_ms_per_token": 1000 / a - 1000 / b if ref and a and b else None,
                    "allreduce_path": "; ".join(log)[:300] if isinstance(log, list) else None, "not_compared": apart})
    return out
