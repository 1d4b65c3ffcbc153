"""Chapters 01 to 05's recorded tables, read into plain dicts: the host, the selection, the forced backends,
NCCL, the benchmark and the failures (nothing is measured here).

    host_summary(store)     # GPUs, capability, links, software
    backends(store)         # per engine: the fastest correct backend against the default, with intervals
    nccl(store)             # the best setting for decode-sized all-reduces and its predicted per-token effect
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..profile.book import profiled_host
from ..results import RunStore
from ..stated.text import clip, marked
from ..stated.intervals import _num, _overlap, separated, starts_of

__all__ = ["open_run", "host_summary", "selection", "versions_read", "backends", "nccl", "tp_end_to_end", "throughput", "failures"]


def open_run(path: str | Path, name: str = "run") -> RunStore:
    """An existing run directory (manifest.json or recorded tables), else a one-line error."""
    p = Path(path).expanduser()
    if not p.is_dir() or not ((p / "manifest.json").exists() or any(p.glob("*.jsonl"))):
        raise ParameterError(name, str(path), "a run directory with manifest.json and its tables, e.g. data/runs/h200x2-book")
    return RunStore(p)


def _probe(store: RunStore) -> dict:
    path = store.path / "probe.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        return {}


def host_summary(store: RunStore) -> dict:
    """What the host is: GPUs, capability, links, software; from chapter 01's tables, else the manifest."""
    m = store.manifest
    probe = _probe(store)
    gpus = store.rows("gpus") or probe.get("gpus") or []
    fp = m.get("host_fingerprint") or {}
    versions = {**(m.get("versions") or {}), **{k: v for k, v in (store.rows("versions") or [{}])[-1].items()
                                                if k in ("driver", "cuda", "torch", "nccl", "nccl_loaded") and v}}
    links = sorted({r.get("link") for r in store.rows("topology") if r.get("link") and r.get("src") != r.get("dst")})
    p2p = [r.get("bandwidth_gbs") for r in store.rows("p2p") if _num(r.get("bandwidth_gbs"))]
    names = sorted({g.get("name") for g in gpus if g.get("name")}) or sorted(set(fp.get("gpus") or []))
    caps = sorted({str(g.get("capability")) for g in gpus if g.get("capability")})
    engines = [{"engine": r.get("engine"), "version": r.get("version"), "status": r.get("status"),
                "mismatches": r.get("mismatches"), "gaps": r.get("gaps")} for r in store.rows("engines")]
    profiled = {} if (gpus or fp.get("gpus")) else profiled_host(store)   # a run of profiles only: its rows say it
    return {
        "run_id": m.get("run_id") or store.path.name,
        "probed": bool(probe) or (store.table_path("gpus").exists()),
        "hostname": probe.get("hostname") or fp.get("hostname"),
        "source": probe.get("source") or ("measured" if gpus else None),
        "profile": probe.get("profile"),
        "gpu_count": len(gpus) if gpus else len(fp.get("gpus") or []) or profiled.get("gpu_count") or 0,
        "gpu": ", ".join(names) or profiled.get("gpu"),
        "machines": profiled.get("machines", []),
        "capability": ", ".join(caps) or None,
        "family": (gpus[0].get("family") if gpus else None),
        "memory_gib": (gpus[0].get("memory_gib") if gpus else None),
        "links": links,
        "p2p_gbs": max(p2p) if p2p else None,
        "driver": versions.get("driver"), "cuda": versions.get("cuda") or versions.get("torch_cuda"),
        "torch": versions.get("torch"), "nccl": versions.get("nccl_loaded") or versions.get("nccl"),
        "engines": engines or profiled.get("engines", []),
        "date": m.get("started") or m.get("created") or probe.get("created") or profiled.get("date"),
        "engine_under_study": (m.get("parameters") or {}).get("engine"),
        "model": (m.get("parameters") or {}).get("model") or profiled.get("model"),
    }


def selection(store: RunStore) -> list[dict]:
    """What each engine picks and the rule that decides it (chapter 02's ``selection`` and ``selection_sites``)."""
    sites = store.rows("selection_sites")
    from ..standing import standing_answers

    out = []
    for r in standing_answers(store):  # an answer a later one superseded is not stated
        d = r.get("decided_by") or {}
        conds = r.get("conditions") or []
        n_sites = len({s.get("where") for s in sites if s.get("engine") == r.get("engine") and s.get("version") == r.get("version")})
        kinds = sorted({k for c in conds for k in (c.get("kinds") or [])})
        out.append({
            "case": r.get("case"), "engine": r.get("engine"), "version": r.get("version"), "model": r.get("model"),
            "gpu": r.get("gpu"), "capability": r.get("capability"), "method": r.get("method"),
            "backend": r.get("attention_backend"), "moe": r.get("moe_runner_backend"),
            "where": d.get("where"), "function": d.get("function"), "value": d.get("value"),
            "rule": [c.get("text") for c in conds if c.get("text")], "kinds": kinds, "sites": n_sites,
            "reason": r.get("reason"),
        })
    return out


def backends(store: RunStore) -> list[dict]:
    """Per engine: the fastest forced backend whose output was correct, against the engine's default (chapter 03).

    ``change_supported`` is True only when the fastest backend's 95% interval lies entirely above the default's and both
    intervals are taken over two server starts or more (``starts``; a run with one start supports no change: its
    intervals are within a start, and the rate moves more between starts). ``starts`` / ``default_starts``: how many
    starts each rate covers.
    """
    from ..backends.figures import asked_not_started, not_run as not_run_of, row_key

    rows = store.rows("backends")
    out = []
    for eng in sorted({r.get("engine") for r in rows if r.get("engine")}):
        mine = [r for r in rows if r.get("engine") == eng]
        ok = [r for r in mine if r.get("outcome") == "ok" and _num(r.get("decode_tok_s"))]
        for mode in ("graph", "default", "eager"):  # compare within one mode, the one users run first
            same = [r for r in ok if r.get("mode", "default") == mode]
            if any(r.get("attention") == "auto" for r in same):
                ok = same
                break
        failed = [{"attention": r.get("attention"), "outcome": r.get("outcome"), "error": r.get("error"), "key": row_key(r),
                   "recorded_at": r.get("recorded_at")} for r in mine if r.get("outcome") != "ok"]
        item: dict[str, Any] = {"engine": eng, "version": next((r.get("engine_version") for r in mine if r.get("engine_version")), None),
                                "tried": len(mine), "correct": len(ok), "failed": failed, "server_starts": sum(starts_of(r) for r in mine),
                                "not_run": not_run_of(store, eng),  # each backend once; none that ran
                                "refused": [a for a in asked_not_started(store, eng) if not a["ok"]]}  # by its own validation
        if ok:
            best = max(ok, key=lambda r: r["decode_tok_s"])
            default = next((r for r in ok if r.get("attention") == "auto"), None)
            ci = lambda r: _num(r.get("decode_tok_s_ci95")) or 0.0  # noqa: E731
            ties = [r.get("attention") for r in ok if r is not best
                    and _overlap(best["decode_tok_s"], ci(best), r["decode_tok_s"], ci(r))]
            n_of = lambda r: (starts_of(r), starts_of(default))  # noqa: E731
            item.update({
                "best": best.get("attention") if best.get("attention") != "auto" else f"auto ({best.get('reported') or 'default'})", "best_reported": best.get("reported"), "best_tok_s": best["decode_tok_s"],
                "best_ci95": ci(best), "best_starts": starts_of(best), "best_agreement": best.get("agreement"), "best_launch": best.get("launch"),
                "default_reported": default.get("reported") if default else None,
                "default_tok_s": default["decode_tok_s"] if default else None, "default_ci95": ci(default) if default else None,
                "default_starts": starts_of(default) if default else None,
                "default_start_rates": [x.get("decode_tok_s") for x in (default or {}).get("starts") or [] if isinstance(x, dict)],
                "ties": ties, "best_key": row_key(best), "default_key": row_key(default) if default else None,
                "agreement_min": min((_num(r.get("agreement")) for r in ok if _num(r.get("agreement")) is not None), default=None),
                # "correct" means the forced decode kernel's tokens agreed (servebook.backends.agreement) only where every start compared
                # has a decode-path agreement; older runs checked the prefill path alone (teacher-forced), and say so
                "decode_checked": all(r.get("decode_agreement") is not None for r in ok),
            })
            item["others"] = [{"attention": r.get("attention"), "key": row_key(r), "tok_s": r["decode_tok_s"], "ci95": ci(r), "starts": starts_of(r),
                               "verdict": separated(r["decode_tok_s"], ci(r), default["decode_tok_s"], ci(default), starts=n_of(r))}
                              for r in sorted(ok, key=lambda r: -r["decode_tok_s"]) if default and r is not default]
            same_as_default = default is None or best is default or best.get("reported") == (default or {}).get("reported")
            item["change_supported"] = bool(default and not same_as_default and min(n_of(best)) >= 2
                                            and not _overlap(best["decode_tok_s"], ci(best), default["decode_tok_s"], ci(default)))
            item["verdict"] = separated(best["decode_tok_s"], ci(best), default["decode_tok_s"], ci(default), starts=n_of(best)) if default and best is not default else None
        else:
            item["change_supported"] = False
        out.append(item)
    return out


def _model_layers(manifest: dict) -> tuple[int | None, str]:
    """Layers of the run's model, without building or loading it."""
    model = (manifest.get("parameters") or {}).get("model") or manifest.get("model")
    if not model:
        return None, "unknown model"
    try:
        from ..nccl import model_dims

        if model == "embedded":
            from ..embedded import EMBEDDED_CONFIG

            return model_dims(EMBEDDED_CONFIG)["num_hidden_layers"], "embedded"
        from ..params import resolve_model

        resolved = resolve_model(model, build=False)
        config = resolved if isinstance(resolved, dict) else json.loads((Path(resolved) / "config.json").read_text())
        return model_dims(config)["num_hidden_layers"] or None, str(model)
    except Exception:  # noqa: BLE001 - a model dir recorded on another host is not here: the prediction is then skipped
        return None, str(model)


def nccl(store: RunStore) -> dict | None:
    """The best NCCL setting for decode-sized all-reduces, its predicted per-token effect, and what was measured (chapter 04).
    ``within_spread``: True where the pick's gain over the defaults is no larger than the spread between two recordings
    of the same grid (``spread``, :func:`servebook.nccl.figures.run_spread`): then no setting is supported."""
    rows = store.rows("allreduce")
    if not rows:
        return None
    ar, out = _grid(rows)
    model_sizes = ar[(ar.get("size_source") == "model")] if "size_source" in ar else ar.iloc[0:0]
    sizes = (model_sizes[["batch", "bytes"]].dropna().drop_duplicates().sort_values("bytes")
             .astype({"batch": int, "bytes": int}).to_dict("records"))
    out["b1_bytes"] = sizes[0]["bytes"] if sizes else int(ar["bytes"].min())
    graph = ar[(ar["mode"] == "graph") & (ar["path"] == "torch")] if {"mode", "path"} <= set(ar.columns) else ar.iloc[0:0]
    if "shape_study" in graph:
        graph = graph[graph["shape_study"] != True]  # noqa: E712
    mode = "graph" if len(graph) else "eager"
    pts = graph if len(graph) else ar[ar.get("mode") == "eager"] if "mode" in ar else ar
    at_b1 = pts[pts["bytes"] == out["b1_bytes"]].groupby("setting")["us_median"].median()
    out["mode"] = mode
    out["default_us"] = _num(at_b1.get("default"))
    layers, model = _model_layers(store.manifest)
    out["layers"], out["model"] = layers, model
    if out["backend"] != "nccl":
        out.update({"setting": None, "reason": f"measured with {out['backend']}, not NCCL: NCCL settings do not apply on this host",
                    "predicted_ms_per_token": None, "measured_effect": None})
        return out
    from ..nccl import per_token_prediction, recommend

    pred = per_token_prediction(ar, layers, sizes) if layers and sizes and len(graph) else None
    pick = recommend(pred) if pred is not None and len(pred) else {"setting": None, "reason": "no graph-replayed model-size points to predict from"}
    out["setting"], out["reason"] = pick.get("setting"), pick.get("reason")
    out["excluded"] = pick.get("excluded") or []
    best_us = _num(at_b1.get(pick.get("setting"))) if pick.get("setting") else None
    out["best_us"] = best_us
    if pred is not None and len(pred):
        out.update(_per_token(pred, pick))
    out["measured_effect"] = tp_end_to_end(store) or None
    out.update(_spread(store, out))
    return out


def _grid(rows: list[dict]):
    """The recorded all-reduce grid as a DataFrame (a row without a setting ran at the defaults) and its head: backend,
    world size, how many settings, whether every sum checked out."""
    import pandas as pd

    ar = pd.DataFrame(rows)
    if "setting" not in ar:  # older runs and gloo measurements record no setting: NCCL's (or gloo's) defaults
        ar["setting"] = "default"
    ar["setting"] = ar["setting"].fillna("default")
    backend = str(ar["backend"].dropna().iloc[0]) if "backend" in ar and ar["backend"].notna().any() else "?"
    world = int(ar["world_size"].dropna().max()) if "world_size" in ar and ar["world_size"].notna().any() else None
    head: dict[str, Any] = {"backend": backend, "world_size": world, "settings": int(ar["setting"].nunique()) if "setting" in ar else 1,
                            "sum_ok": bool(ar["sum_ok"].fillna(False).all()) if "sum_ok" in ar else None}
    return ar, head


def _per_token(pred, pick: dict) -> dict[str, Any]:
    """At batch 1, the default's and the pick's predicted ms per token, the all-reduces per token, and the runner-up
    with the batches where it would be slower than the default (``recommend``'s no-regression rule)."""
    out: dict[str, Any] = {}
    b1 = pred[pred["batch"] == pred["batch"].min()].set_index("setting")
    out["default_ms_per_token"] = _num(b1["ms_per_token"].get("default"))
    chosen = b1.loc[pick["setting"]] if pick.get("setting") in b1.index else None
    out["predicted_ms_per_token"] = _num(chosen["ms_per_token"]) if chosen is not None else None
    out["predicted_delta_ms"] = _num(chosen["delta_ms_vs_default"]) if chosen is not None else None
    out["allreduces_per_token"] = int(b1["allreduces_per_token"].iloc[0])
    others = b1[(b1.index != "default") & b1["sum_ok"]].sort_values("ms_per_token")
    if len(others):
        r = others.iloc[0]
        mine = pred[pred["setting"] == others.index[0]]
        from ..nccl.predict import NOISE

        slower = mine[mine["delta_ms_vs_default"] > mine["ms_per_token"] * NOISE]  # recommend()'s no-regression rule
        out["runner_up"] = {"setting": others.index[0], "us": _num(r["us_per_allreduce"]), "ms_per_token": _num(r["ms_per_token"]),
                            "delta_ms": _num(r["delta_ms_vs_default"]),
                            "slower_at_batches": sorted(int(b) for b in slower["batch"].unique())}
    return out


def _spread(store: RunStore, out: dict) -> dict[str, Any]:
    """The pick's gain against the spread between two recordings of the same grid (chapter 04's test): a gain within it
    supports no setting, whatever the grid's order; None where there is no second recording to read a spread from."""
    from ..nccl.figures import reference_store, run_spread

    spread = run_spread(store, out) if Path(store.path).resolve() != Path(reference_store().path).resolve() else {}
    return {"spread": spread or None, "within_spread": bool(spread["within_spread"]) if spread else None}


def tp_end_to_end(store: RunStore) -> list[dict]:
    """Chapter 04's end-to-end rows (table ``tp_e2e``), each compared with its reference as chapter 04 pairs them
    (``nccl.figures.e2e_rows``: "custom all-reduce off" with the engine's default, every NCCL setting with "custom
    all-reduce off", never two decode rules: ``not_compared`` says why). ``supported`` is True only where the setting is
    faster and the 95% intervals separate."""
    from ..nccl.figures import e2e_rows

    out = []
    for r, e in zip(store.rows("tp_e2e"), e2e_rows(store)):
        a, b = e["decode_tok_s"], e["vs_tok_s"]
        item = {"engine": e["engine"], "tp": e["tp"], "setting": e["setting"], "outcome": e["outcome"], "tok_s": a,
                "ci95": e["ci95"], "env": r.get("env") or {}, "args": r.get("args") or [], "vs": e["vs"], "vs_tok_s": b,
                "vs_ci95": e["vs_ci95"], "allreduce_log": r.get("allreduce_log") or [], "from_grid": r.get("from_grid"),
                "not_compared": e["not_compared"]}
        item["verdict"] = separated(a, item["ci95"], b, item["vs_ci95"]) if e["vs"] else None
        item["supported"] = bool(e["vs"] and a and b and a > b and not _overlap(a, item["ci95"] or 0, b, item["vs_ci95"] or 0))
        out.append(item)
    return out


def throughput(store: RunStore) -> list[dict]:
    """Per served configuration: single-stream decode with its interval, C=1 and peak throughput, % of roofline (chapter 05).

    ``single_tok_s`` / ``single_ci95``: the mean and 95% t-interval over the per-start means where the configuration was
    measured over two server starts or more (``starts``, ``start_tok_s``), else the one start's interval over its runs
    (``single_over`` says which)."""
    from ..bench.runs import current, over_starts

    rows, _ = current(store.rows("bench_summary"))  # a measurement taken again stands in its last form
    roofs = [r for r in store.rows("bench_roofline") if r.get("source") == "measured here"]
    out = []
    for label in sorted({r.get("label") for r in rows if r.get("label")}):
        mine = [r for r in rows if r.get("label") == label]
        single = [r for r in mine if r.get("phase") == "single"]
        sweep = sorted((r for r in mine if r.get("phase") == "sweep" and _num(r.get("throughput_tok_s"))),
                       key=lambda r: r.get("concurrency") or 0)
        s = single[-1] if single else {}
        o = over_starts(single)
        peak = max(sweep, key=lambda r: r["throughput_tok_s"]) if sweep else {}
        c1 = next((r for r in sweep if r.get("concurrency") == 1), {})
        roof = next((r for r in reversed(roofs) if str(r.get("case", "")).startswith(label)), {})
        out.append({
            "label": label, "engine": (s or (mine[0] if mine else {})).get("engine"), "attention": (s or mine[0]).get("attention"),
            "single_tok_s": _num(o["mean"]), "single_ci95": _num(o["ci95"]), "runs": s.get("runs"),
            "starts": o["starts"], "single_over": o["over"], "start_tok_s": [p["decode_tok_s"] for p in o["per_start"]],
            "ttft_ms": (_num(s.get("ttft_s_mean")) or 0) * 1e3 if s else None,
            "c1_tok_s": _num(c1.get("throughput_tok_s")), "peak_tok_s": _num(peak.get("throughput_tok_s")),
            "peak_c": peak.get("concurrency"), "peak_per_user_tok_s": _num(peak.get("per_user_tok_s")),
            "truncated": any(r.get("truncated") for r in sweep), "levels": [r.get("concurrency") for r in sweep],
            "roofline_tok_s": _num(roof.get("roofline_tok_s")), "pct_of_roofline": _num(roof.get("pct_of_roofline")),
            "roofline_source": roof.get("bandwidth_source"),
        })
    return out


def failures(store: RunStore) -> list[dict]:
    """Distinct recorded failures (by error text), how often each happened, and the steps it hit."""
    seen: dict[str, dict] = {}
    for r in store.rows("failures"):
        err = clip(" ".join(marked(r.get("error")).split()), 200)   # cut between words, marked; a recorded cut marked too
        item = seen.setdefault(err, {"error": err, "times": 0, "steps": []})
        item["times"] += 1
        if str(r.get("step")) not in item["steps"]:
            item["steps"].append(str(r.get("step")))
    return [{"error": v["error"], "times": v["times"],
             "steps": ", ".join(v["steps"][:3]) + (f" and {len(v['steps']) - 3} more" if len(v["steps"]) > 3 else "")}
            for v in seen.values()]


def versions_read(store: RunStore) -> list[str]:
    """Every engine version whose code chapter 02 read in this run ("sglang 0.5.23"): its what-if answers, its static
    reading (``selection_sites``), its matrix and its version diff, in the order first recorded."""
    out: list[str] = []
    for table in ("selection", "selection_sites", "selection_matrix", "selection_diff"):
        for r in store.rows(table):
            engine, version = str(r.get("engine") or "").split("==")[0], r.get("version")
            name = f"{engine} {version}"
            if engine and version and name not in out:
                out.append(name)
    return out
