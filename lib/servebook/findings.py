"""Chapter 06: what a run found, read from its recorded tables (nothing is measured here).

    store = RunStore.at("data/runs/h200x2-book")
    f = collect(store)              # host, selection, backends, nccl, throughput, launch commands, failures
    what_we_found(f)                # markdown bullets, each linking to the chapter cell that shows it
    check_yourself(store, "06")     # [(question, answer)], answers computed from the run
    compare_runs(["data/runs/h200x2-book", "data/runs/h200x2-probe/1gpu"])   # side by side, with deltas

Every claim carries a link ``NN_slug.html#Heading-text``: nbconvert gives each markdown heading
an id made of its text with spaces turned into dashes, and the rendered book keeps it.
When two confidence intervals overlap, the claim says no change is supported.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ParameterError
from .results import RunStore

__all__ = [
    "Claim", "Findings", "anchor", "link", "collect", "host_summary", "selection", "backends", "nccl", "throughput", "tp_end_to_end", "separated",
    "launch_commands", "failures", "what_we_found", "check_yourself", "check_yourself_markdown", "compare_runs",
    "compare_markdown", "open_run", "register",
]

# The chapter pages and the headings the findings point at (the notebooks' own "## ..." lines).
_PAGES = {
    "01": "01_detect_capabilities", "02": "02_read_backend_selection", "03": "03_force_each_backend",
    "04": "04_tune_nccl", "05": "05_benchmark_single_stream", "06": "06_findings",
}
H_HOST = ("01", "What this host is")
H_ENGINES = ("01", "What the engines conclude")
H_SELECTION = ("02", "2. The answer (dynamic): this host, then the seed case")
H_SELECTION_FOUND = ("02", "What we found")
H_SWEEP = ("03", "The sweep")
H_BACKENDS_FOUND = ("03", "What we found")
H_NCCL = ("04", "Measurement on this host")
H_NCCL_PRED = ("04", "From microseconds to tokens")
H_BENCH = ("05", "Single stream, and the concurrency sweep, engine by engine")
H_SWEEP_C = ("05", "Concurrency: throughput against what each user gets")
H_ROOF = ("05", "Against the roofline")


def anchor(heading: str) -> str:
    """The id nbconvert gives a markdown heading: its text with spaces replaced by dashes."""
    return heading.strip().replace(" ", "-")


def link(where: tuple[str, str], text: str | None = None) -> str:
    """A markdown link to a chapter heading in the rendered book."""
    from urllib.parse import quote

    chapter, heading = where
    return f"[{text or f'ch. {chapter}'}]({_PAGES[chapter]}.html#{quote(anchor(heading), safe='-.,:?')})"


@dataclass
class Claim:
    """One statement, the chapter cell that shows it, and how sure the data lets us be."""

    chapter: str
    text: str
    where: tuple[str, str]
    supported: bool = True  # False: the data does not support a change (overlapping intervals, nothing measured)

    def markdown(self) -> str:
        return f"{self.text} ({link(self.where)})"


@dataclass
class Findings:
    run: str
    host: dict
    selection: list[dict]
    backends: list[dict]
    nccl: dict | None
    throughput: list[dict]
    launch: list[dict]
    failures: list[dict]
    claims: list[Claim] = field(default_factory=list)


def open_run(path: str | Path, name: str = "run") -> RunStore:
    """An existing run directory (manifest.json or recorded tables), else a one-line error."""
    p = Path(path).expanduser()
    if not p.is_dir() or not ((p / "manifest.json").exists() or any(p.glob("*.jsonl"))):
        raise ParameterError(name, str(path), "a run directory with manifest.json and its tables, e.g. data/runs/h200x2-book")
    return RunStore(p)


# -- reading the tables ------------------------------------------------------------------------------------
def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


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
    return {
        "run_id": m.get("run_id") or store.path.name,
        "probed": bool(probe) or (store.table_path("gpus").exists()),
        "hostname": probe.get("hostname") or fp.get("hostname"),
        "source": probe.get("source") or ("measured" if gpus else None),
        "profile": probe.get("profile"),
        "gpu_count": len(gpus) if gpus else len(fp.get("gpus") or []),
        "gpu": ", ".join(names) or None,
        "capability": ", ".join(caps) or None,
        "family": (gpus[0].get("family") if gpus else None),
        "memory_gib": (gpus[0].get("memory_gib") if gpus else None),
        "links": links,
        "p2p_gbs": max(p2p) if p2p else None,
        "driver": versions.get("driver"), "cuda": versions.get("cuda") or versions.get("torch_cuda"),
        "torch": versions.get("torch"), "nccl": versions.get("nccl_loaded") or versions.get("nccl"),
        "engines": engines,
        "date": m.get("started") or m.get("created") or probe.get("created"),
        "engine_under_study": (m.get("parameters") or {}).get("engine"),
        "model": (m.get("parameters") or {}).get("model"),
    }


def selection(store: RunStore) -> list[dict]:
    """What each engine picks and the rule that decides it (chapter 02's ``selection`` and ``selection_sites``)."""
    sites = store.rows("selection_sites")
    out = []
    for r in store.rows("selection"):
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


def _overlap(a: float, ea: float, b: float, eb: float) -> bool:
    return (a - ea) <= (b + eb) and (b - eb) <= (a + ea)


def separated(a, ea, b, eb, what: str = "tok/s") -> str:
    """The one comparison every chapter states: ``a`` against the reference ``b``, each with its 95% half-width.

    A change is claimed only when the intervals do not overlap; otherwise "no change supported"."""
    a, b = _num(a), _num(b)
    if a is None or b is None:
        return "not comparable (one side was not measured)"
    ea, eb = _num(ea) or 0.0, _num(eb) or 0.0
    pct = 100 * (a - b) / b if b else float("nan")
    if _overlap(a, ea, b, eb):
        return f"no change supported ({pct:+.1f}%, the 95% intervals overlap)"
    return f"{'faster' if a > b else 'slower'} by {abs(pct):.1f}% (the 95% intervals separate)"


def backends(store: RunStore) -> list[dict]:
    """Per engine: the fastest forced backend whose output was correct, against the engine's default (chapter 03).

    ``change_supported`` is True only when the fastest backend's 95% interval lies entirely above the default's.
    """
    rows = store.rows("backends")
    not_run = store.rows("backends_not_run")
    out = []
    for eng in sorted({r.get("engine") for r in rows if r.get("engine")}):
        mine = [r for r in rows if r.get("engine") == eng]
        ok = [r for r in mine if r.get("outcome") == "ok" and _num(r.get("decode_tok_s"))]
        for mode in ("graph", "default", "eager"):  # compare within one mode, the one users run first
            same = [r for r in ok if r.get("mode", "default") == mode]
            if any(r.get("attention") == "auto" for r in same):
                ok = same
                break
        failed = [{"attention": r.get("attention"), "outcome": r.get("outcome"), "error": r.get("error")} for r in mine
                  if r.get("outcome") != "ok"]
        item: dict[str, Any] = {"engine": eng, "version": next((r.get("engine_version") for r in mine if r.get("engine_version")), None),
                                "tried": len(mine), "correct": len(ok), "failed": failed,
                                "not_run": [{"attention": r.get("attention"), "reason": r.get("reason")} for r in not_run
                                            if r.get("engine") == eng]}
        if ok:
            best = max(ok, key=lambda r: r["decode_tok_s"])
            default = next((r for r in ok if r.get("attention") == "auto"), None)
            ci = lambda r: _num(r.get("decode_tok_s_ci95")) or 0.0  # noqa: E731
            ties = [r.get("attention") for r in ok if r is not best
                    and _overlap(best["decode_tok_s"], ci(best), r["decode_tok_s"], ci(r))]
            item.update({
                "best": best.get("attention") if best.get("attention") != "auto" else f"auto ({best.get('reported') or 'default'})", "best_reported": best.get("reported"), "best_tok_s": best["decode_tok_s"],
                "best_ci95": ci(best), "best_agreement": best.get("agreement"), "best_launch": best.get("launch"),
                "default_reported": default.get("reported") if default else None,
                "default_tok_s": default["decode_tok_s"] if default else None, "default_ci95": ci(default) if default else None,
                "ties": ties,
                "agreement_min": min((_num(r.get("agreement")) for r in ok if _num(r.get("agreement")) is not None), default=None),
            })
            item["others"] = [{"attention": r.get("attention"), "tok_s": r["decode_tok_s"], "ci95": ci(r),
                               "verdict": separated(r["decode_tok_s"], ci(r), default["decode_tok_s"], ci(default))}
                              for r in sorted(ok, key=lambda r: -r["decode_tok_s"]) if default and r is not default]
            same_as_default = default is None or best is default or best.get("reported") == (default or {}).get("reported")
            item["change_supported"] = bool(default and not same_as_default
                                            and not _overlap(best["decode_tok_s"], ci(best), default["decode_tok_s"], ci(default)))
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
        from .nccl import model_dims

        if model == "embedded":
            from .embedded import EMBEDDED_CONFIG

            return model_dims(EMBEDDED_CONFIG)["num_hidden_layers"], "embedded"
        from .params import resolve_model

        resolved = resolve_model(model, build=False)
        config = resolved if isinstance(resolved, dict) else json.loads((Path(resolved) / "config.json").read_text())
        return model_dims(config)["num_hidden_layers"] or None, str(model)
    except Exception:  # noqa: BLE001 - a model dir recorded on another host is not here: the prediction is then skipped
        return None, str(model)


def nccl(store: RunStore) -> dict | None:
    """The best NCCL setting for decode-sized all-reduces, its predicted per-token effect, and what was measured (chapter 04)."""
    import pandas as pd

    rows = store.rows("allreduce")
    if not rows:
        return None
    ar = pd.DataFrame(rows)
    if "setting" not in ar:  # older runs and gloo measurements record no setting: NCCL's (or gloo's) defaults
        ar["setting"] = "default"
    ar["setting"] = ar["setting"].fillna("default")
    backend = str(ar["backend"].dropna().iloc[0]) if "backend" in ar and ar["backend"].notna().any() else "?"
    world = int(ar["world_size"].dropna().max()) if "world_size" in ar and ar["world_size"].notna().any() else None
    out: dict[str, Any] = {"backend": backend, "world_size": world, "settings": int(ar["setting"].nunique()) if "setting" in ar else 1,
                           "sum_ok": bool(ar["sum_ok"].fillna(False).all()) if "sum_ok" in ar else None}
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
    if backend != "nccl":
        out.update({"setting": None, "reason": f"measured with {backend}, not NCCL: NCCL settings do not apply on this host",
                    "predicted_ms_per_token": None, "measured_effect": None})
        return out
    from .nccl import per_token_prediction, recommend

    pred = per_token_prediction(ar, layers, sizes) if layers and sizes and len(graph) else None
    pick = recommend(pred) if pred is not None and len(pred) else {"setting": None, "reason": "no graph-replayed model-size points to predict from"}
    out["setting"], out["reason"] = pick.get("setting"), pick.get("reason")
    out["excluded"] = pick.get("excluded") or []
    best_us = _num(at_b1.get(pick.get("setting"))) if pick.get("setting") else None
    out["best_us"] = best_us
    if pred is not None and len(pred):
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
            slower = mine[mine["delta_ms_vs_default"] > mine["ms_per_token"] * 0.05]  # recommend()'s no-regression rule
            out["runner_up"] = {"setting": others.index[0], "us": _num(r["us_per_allreduce"]), "ms_per_token": _num(r["ms_per_token"]),
                                "delta_ms": _num(r["delta_ms_vs_default"]),
                                "slower_at_batches": sorted(int(b) for b in slower["batch"].unique())}
    out["measured_effect"] = tp_end_to_end(store) or None
    return out


def tp_end_to_end(store: RunStore) -> list[dict]:
    """Chapter 04's end-to-end rows (table ``tp_e2e``), each compared with its reference: "custom all-reduce off" with
    the engine's default, every NCCL setting with "custom all-reduce off" (the path NCCL variables reach).
    ``supported`` is True only where the setting is faster and the 95% intervals separate."""
    rows = store.rows("tp_e2e")
    out = []
    for r in rows:
        ref_name = None if r.get("setting") == "engine default" else (
            "engine default" if r.get("setting") == "custom all-reduce off" else "custom all-reduce off")
        ref = next((x for x in rows if x.get("engine") == r.get("engine") and x.get("tp") == r.get("tp")
                    and x.get("setting") == ref_name), None) if ref_name else None
        a, b = _num(r.get("decode_tok_s")), _num((ref or {}).get("decode_tok_s"))
        item = {"engine": r.get("engine"), "tp": r.get("tp"), "setting": r.get("setting"), "outcome": r.get("outcome"),
                "tok_s": a, "ci95": _num(r.get("decode_tok_s_ci95")), "env": r.get("env") or {}, "args": r.get("args") or [],
                "vs": ref_name, "vs_tok_s": b, "vs_ci95": _num((ref or {}).get("decode_tok_s_ci95")),
                "allreduce_log": r.get("allreduce_log") or [], "from_grid": r.get("from_grid")}
        item["verdict"] = separated(a, item["ci95"], b, item["vs_ci95"]) if ref else None
        item["supported"] = bool(ref and a and b and a > b and not _overlap(a, item["ci95"] or 0, b, item["vs_ci95"] or 0))
        out.append(item)
    return out


def throughput(store: RunStore) -> list[dict]:
    """Per served configuration: single-stream decode with its interval, C=1 and peak throughput, % of roofline (chapter 05)."""
    rows = store.rows("bench_summary")
    roofs = [r for r in store.rows("bench_roofline") if r.get("source") == "measured here"]
    out = []
    for label in sorted({r.get("label") for r in rows if r.get("label")}):
        mine = [r for r in rows if r.get("label") == label]
        single = [r for r in mine if r.get("phase") == "single"]
        sweep = sorted((r for r in mine if r.get("phase") == "sweep" and _num(r.get("throughput_tok_s"))),
                       key=lambda r: r.get("concurrency") or 0)
        s = single[-1] if single else {}
        peak = max(sweep, key=lambda r: r["throughput_tok_s"]) if sweep else {}
        c1 = next((r for r in sweep if r.get("concurrency") == 1), {})
        roof = next((r for r in reversed(roofs) if str(r.get("case", "")).startswith(label)), {})
        out.append({
            "label": label, "engine": (s or (mine[0] if mine else {})).get("engine"), "attention": (s or mine[0]).get("attention"),
            "single_tok_s": _num(s.get("decode_tok_s_mean")), "single_ci95": _num(s.get("decode_tok_s_ci95")), "runs": s.get("runs"),
            "ttft_ms": (_num(s.get("ttft_s_mean")) or 0) * 1e3 if s else None,
            "c1_tok_s": _num(c1.get("throughput_tok_s")), "peak_tok_s": _num(peak.get("throughput_tok_s")),
            "peak_c": peak.get("concurrency"), "peak_per_user_tok_s": _num(peak.get("per_user_tok_s")),
            "truncated": any(r.get("truncated") for r in sweep), "levels": [r.get("concurrency") for r in sweep],
            "roofline_tok_s": _num(roof.get("roofline_tok_s")), "pct_of_roofline": _num(roof.get("pct_of_roofline")),
            "roofline_source": roof.get("bandwidth_source"),
        })
    return out


# Public command forms of each engine (what a user types; chapter 03 launched the same flags on 127.0.0.1).
_COMMANDS = {
    "transformers": ("transformers serve", None, "--attn-implementation", None),
    "sglang": ("python -m sglang.launch_server --model-path {model}", "--tp {tp}", "--attention-backend", None),
    "vllm": ("vllm serve {model}", "--tensor-parallel-size {tp}", "--attention-backend", "VLLM_ATTENTION_BACKEND"),
}


def _vtuple(v: str | None) -> tuple[int, ...]:
    out = []
    for part in str(v or "0").split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def launch_commands(store: RunStore, found_backends: list[dict] | None = None, found_nccl: dict | None = None,
                    host: dict | None = None) -> list[dict]:
    """A recommended launch command per engine the run studied: a forced backend only where it was measurably
    faster and correct; NCCL variables only where they beat the defaults and the engine runs on several GPUs."""
    params = store.manifest.get("parameters") or {}
    if params.get("profile"):  # what-if: nothing was measured; the launch to try first comes from the root causes
        engine = str(params.get("engine") or "").split("==")[0]
        rec = store.rows("recommended_launch")
        if rec:
            return [{"engine": engine, "command": r["launch"], "env": {},
                     "why": [f"what-if on the {params['profile']} profile: {r['why']}; try it first on the real host, "
                             "then check it there with chapter 03 (reported backend, greedy agreement, decode rate)"]} for r in rec]
        return [{"engine": engine, "command": "", "env": {},
                 "why": [f"what-if on the {params['profile']} profile: no fallback caused by a hardware helper was found; "
                         "keep the engine's default and measure on the real host (chapters 03 and 05)"]}]
    found_backends = backends(store) if found_backends is None else found_backends
    found_nccl = nccl(store) if found_nccl is None else found_nccl
    host = host_summary(store) if host is None else host
    sel = {s["engine"]: s for s in selection(store) if s.get("case") == "this-host"}
    engines = [b["engine"] for b in found_backends] + [e for e in sel if e not in {b["engine"] for b in found_backends}]
    engines += [r.get("engine") for r in throughput(store) if r.get("engine") and r.get("engine") not in engines]
    engines += [r.get("engine") for r in store.rows("tp_e2e") if r.get("engine") and r.get("engine") not in engines]
    model = host.get("model") or "MODEL"
    model_ref = "MODEL" if model in ("embedded", None) else model
    tp = max(1, int(host.get("gpu_count") or 1))
    out = []
    for eng in dict.fromkeys(engines):
        base, tp_flag, flag, env_var = _COMMANDS.get(eng, (f"{eng} serve {{model}}", None, "--attention-backend", None))
        b = next((x for x in found_backends if x["engine"] == eng), {})
        cmd = [base.format(model=model_ref)]
        env: dict[str, str] = {}
        why = []
        if tp_flag and tp > 1:
            cmd.append(tp_flag.format(tp=tp))
        if b.get("change_supported"):
            version = b.get("version")
            if env_var and version and _vtuple(version) < (0, 11, 0):
                env[env_var] = b["best"]
            else:
                cmd += [flag, b["best"]]
            why.append(f"{b['best']} was faster than the default beyond both 95% intervals and agreed with it on "
                       f"{(b.get('best_agreement') or 0):.0%} of greedy tokens")
        elif b.get("correct"):
            why.append("no forced backend beat the default beyond the 95% intervals: keep the engine's own choice"
                       + (f" ({b['default_reported']})" if b.get("default_reported") else ""))
        else:
            why.append("no backend measurement in this run: the engine's own choice"
                       + (f" ({sel[eng]['backend']}, chapter 02)" if eng in sel else ""))
        n = found_nccl or {}
        e2e = [x for x in (n.get("measured_effect") or []) if x.get("engine") == eng]
        if eng != "transformers" and e2e:
            # only what the engine itself measured faster at TP>1, beyond the intervals: against its default, the
            # custom all-reduce off; against that, an NCCL block (which reaches decode only with the custom one off)
            best = max((x for x in e2e if x["supported"]), key=lambda x: x["tok_s"] or 0, default=None)
            off = next((x for x in e2e if x["setting"] == "custom all-reduce off"), None)
            if best is not None and (best["setting"] == "custom all-reduce off" or (off and off["supported"]) or
                                     best["setting"] != "custom all-reduce off" and _beats_default(e2e, best)):
                cmd += list(best["args"])
                env.update({k: str(v) for k, v in best["env"].items()})
                why.append(f"at TP={best['tp']}, {best['setting']}: {best['verdict']} against {best['vs']} (chapter 04, measured end to end)")
            else:
                why.append(f"at TP={e2e[0]['tp']}, no communication setting beat the engine's default beyond the 95% intervals "
                           "(chapter 04, measured end to end): keep the engine's all-reduce and NCCL's defaults")
        elif eng != "transformers" and tp > 1 and n.get("backend") == "nccl":
            why.append("NCCL: not confirmed end to end in this run, so no variables are set"
                       + (f" (the grid predicts `{n['setting']}`: {n.get('reason')}; chapter 04 with tp_check measures it)"
                          if n.get("setting") not in (None, "default") else f" ({n.get('reason')})"))
        text = " ".join([*(f"{k}={v}" for k, v in env.items()), *cmd])
        out.append({"engine": eng, "command": text, "env": env, "why": why})
    return out


def _beats_default(e2e: list[dict], best: dict) -> bool:
    """Whether ``best`` (measured against "custom all-reduce off") is also faster than the engine's default beyond the intervals."""
    d = next((x for x in e2e if x["setting"] == "engine default"), None)
    return bool(d and d["tok_s"] and best["tok_s"] and best["tok_s"] > d["tok_s"]
                and not _overlap(best["tok_s"], best["ci95"] or 0, d["tok_s"], d["ci95"] or 0))


def failures(store: RunStore) -> list[dict]:
    """Distinct recorded failures (by error text), how often each happened, and the steps it hit."""
    seen: dict[str, dict] = {}
    for r in store.rows("failures"):
        err = " ".join(str(r.get("error")).split())[:200]
        item = seen.setdefault(err, {"error": err, "times": 0, "steps": []})
        item["times"] += 1
        if str(r.get("step")) not in item["steps"]:
            item["steps"].append(str(r.get("step")))
    return [{"error": v["error"], "times": v["times"],
             "steps": ", ".join(v["steps"][:3]) + (f" and {len(v['steps']) - 3} more" if len(v["steps"]) > 3 else "")}
            for v in seen.values()]


# -- the chapter's conclusions -----------------------------------------------------------------------------
def _fmt(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def collect(store: RunStore) -> Findings:
    """Everything chapter 06 states, with its claims."""
    host = host_summary(store)
    sel = selection(store)
    bk = backends(store)
    nc = nccl(store)
    tp = throughput(store)
    lc = launch_commands(store, bk, nc, host)
    f = Findings(run=host["run_id"], host=host, selection=sel, backends=bk, nccl=nc, throughput=tp, launch=lc, failures=failures(store))
    f.claims = _claims(f)
    return f


def _host_text(h: dict) -> str:
    if not h.get("gpu") and not h.get("probed"):
        return "not probed in this run (chapter 01 recorded nothing)"
    if not h.get("gpu"):
        return f"{h.get('hostname') or 'this host'}: no GPU seen; the engines ran on the CPU"
    links = f", linked by {'/'.join(h['links'])}" if h.get("links") else (", one GPU: no GPU-to-GPU link" if h.get("gpu_count") == 1 else "")
    p2p = f" ({h['p2p_gbs']:.0f} GB/s measured peer copies)" if h.get("p2p_gbs") else ""
    cap = (f"compute capability {h.get('capability')} ({h.get('family')})" if h.get("capability")
           else "compute capability not probed in this run")
    return (f"{h.get('gpu_count')} x {h['gpu']}, {cap}{links}{p2p}; "
            f"driver {h.get('driver')}, CUDA {h.get('cuda')}, NCCL {h.get('nccl')}")


def _claims(f: Findings) -> list[Claim]:
    c: list[Claim] = [Claim("01", "Host: " + _host_text(f.host), H_HOST)]
    bad = [e for e in f.host["engines"] if (e.get("mismatches") or 0) or (e.get("gaps") or 0)]
    if bad:
        c.append(Claim("01", "Engine helpers that disagree with the hardware or leave this GPU out: "
                       + ", ".join(f"{e['engine']} ({e.get('mismatches') or 0} mismatches, {e.get('gaps') or 0} gaps)" for e in bad), H_ENGINES))
    said = set()
    for s in f.selection:
        where = f"{s.get('gpu')}, capability {s.get('capability')}"
        who = ("On this host" if s["case"] == "this-host" else f"Seed case ({where})" if s["case"] == "seed"
               else f"Profile {where}, asked of the engine's own code without the GPU")
        answer = (s.get("engine"), s.get("version"), s.get("model"), s.get("gpu"), s.get("backend"), s.get("where"))
        if s.get("method") == "dynamic" and s.get("where") and answer in said:
            continue  # the same answer under two cases (a what-if on the seed's own GPU): stated once
        said.add(answer)
        if s.get("method") == "dynamic" and s.get("where"):
            rule = "; ".join(s["rule"][-3:]) or "no condition on the way"
            sites = f"{s['sites']} assignment sites read in its code" if s["sites"] else "its code not read statically in this run"
            c.append(Claim("02", f"{who}, {s['engine']} {s['version']} picks `{s['backend']}` for `{s['model']}`: written at "
                           f"`{s['where']}` in `{s['function']}` because {rule} (a {'/'.join(s['kinds']) or 'unconditional'} "
                           f"decision; {sites})", H_SELECTION))
        else:
            c.append(Claim("02", f"{who}, {s['engine']} {s['version']}: only a static reading ({s.get('reason')})", H_SELECTION, False))
    if not f.selection:
        c.append(Claim("02", "No backend selection was recorded in this run", H_SELECTION_FOUND, False))
    for b in f.backends:
        if not b.get("correct"):
            c.append(Claim("03", f"{b['engine']}: no forced backend served correct output ({len(b['failed'])} failed)", H_SWEEP, False))
            continue
        best = (f"{b['engine']}: the fastest correct backend was `{b['best']}` at {_fmt(b['best_tok_s'])} ± {_fmt(b['best_ci95'])} tok/s "
                f"single stream (greedy output {(_num(b.get('best_agreement')) or 0):.0%} equal to the default's)")
        if b.get("default_tok_s") is not None:
            best += f"; the default (`{b.get('default_reported') or 'auto'}`) ran {_fmt(b['default_tok_s'])} ± {_fmt(b['default_ci95'])}"
        if b.get("best_reported") and b.get("best_reported") == b.get("default_reported") and b.get("best") != f"auto ({b['best_reported']})":
            best += (f"; forced `{b['best']}` loads the same implementation as the default, so their difference is "
                     "run-to-run noise")
        if b["change_supported"]:
            c.append(Claim("03", best + ": faster beyond both 95% intervals, a change is supported", H_SWEEP))
        elif str(b.get("best", "")).startswith("auto") and b.get("others"):
            c.append(Claim("03", f"{b['engine']}: its own choice (`{b.get('default_reported') or 'auto'}`, {_fmt(b['default_tok_s'])} ± "
                           f"{_fmt(b['default_ci95'])} tok/s single stream) was the fastest correct backend; against it: "
                           + "; ".join(f"`{o['attention']}` {_fmt(o['tok_s'])} ± {_fmt(o['ci95'])}, {o['verdict']}" for o in b["others"])
                           + ". Keep the default", H_SWEEP, False))
        else:
            ties = f" (overlaps {', '.join(map(str, b['ties']))})" if b.get("ties") else ""
            c.append(Claim("03", best + f": the 95% intervals overlap{ties}, so no change of backend is supported", H_SWEEP, False))
        for x in b["failed"]:
            c.append(Claim("03", f"{b['engine']} `{x['attention']}`: {x['outcome']} ({str(x.get('error'))[:160]})", H_BACKENDS_FOUND, False))
        if b["not_run"]:
            c.append(Claim("03", f"{b['engine']}: not run here: " + ", ".join(f"`{x['attention']}` ({x['reason']})" for x in b["not_run"]),
                           H_BACKENDS_FOUND, False))
    if not f.backends:
        c.append(Claim("03", "No backend was forced in this run", H_BACKENDS_FOUND, False))
    n = f.nccl
    if n is None:
        c.append(Claim("04", "No all-reduce was measured in this run", H_NCCL, False))
    elif n["backend"] != "nccl":
        c.append(Claim("04", f"All-reduce measured with {n['backend']} ({n.get('world_size')} processes), not NCCL: "
                       f"{_fmt(n.get('default_us'))} us at {n['b1_bytes']} B; NCCL settings do not apply here", H_NCCL, False))
    else:
        head = (f"NCCL ({n.get('world_size')} GPUs, {n['settings']} settings, {n['mode']}-replayed): at the batch-1 message "
                f"({n['b1_bytes']} B) the default took {_fmt(n.get('default_us'))} us per all-reduce")
        if n.get("setting") in (None, "default"):
            ru = n.get("runner_up")
            alt = (f"; the best other setting, `{ru['setting']}`, took {_fmt(ru['us'])} us, a predicted "
                   f"{_fmt(ru['delta_ms'], 3)} ms per token against {_fmt(n.get('default_ms_per_token'), 3)} ms with the defaults "
                   f"({n.get('allreduces_per_token')} all-reduces per token, {n.get('layers')} layers of {n.get('model')})"
                   if ru and n.get("default_ms_per_token") is not None else "")
            if ru and ru.get("slower_at_batches"):
                verdict = (f": but it is more than 5% slower than the defaults at decode batch "
                           f"{', '.join(map(str, ru['slower_at_batches']))}, so keep NCCL's defaults")
            else:
                verdict = ": within the 5% the book treats as noise, so keep NCCL's defaults"
            c.append(Claim("04", head + alt + verdict, H_NCCL_PRED, False))
        else:
            c.append(Claim("04", head + f"; best: `{n['setting']}` at {_fmt(n.get('best_us'))} us. Predicted effect: "
                           f"{_fmt(n.get('predicted_delta_ms'), 3)} ms per token ({n.get('allreduces_per_token')} all-reduces per token, "
                           f"{n.get('layers')} layers of {n.get('model')})", H_NCCL_PRED))
        for x in n.get("measured_effect") or []:
            if x["vs"]:
                c.append(Claim("04", f"End to end, {x['engine']} at TP={x['tp']}, {x['setting']}: "
                               + (f"{_fmt(x['tok_s'])} ± {_fmt(x['ci95'])} tok/s, {x['verdict']} against {x['vs']}"
                                  if x["tok_s"] else f"{x['outcome']}"), H_NCCL_PRED, x["supported"]))
        if not n.get("measured_effect"):
            c.append(Claim("04", "Measured end-to-end effect: not measured in this run (chapter 04's tp_check restarts an engine at "
                           "TP>1 under each setting)", H_NCCL_PRED, False))
    for t in f.throughput:
        roof = (f"; {t['pct_of_roofline']:.3g}% of the {_fmt(t['roofline_tok_s'], 0)} tok/s bandwidth roofline"
                if t.get("pct_of_roofline") is not None else "; no roofline recorded")
        c.append(Claim("05", f"{t['label']}: single stream {_fmt(t['single_tok_s'])} ± {_fmt(t['single_ci95'])} tok/s "
                       f"(95% CI over {t.get('runs')} runs){roof}", H_BENCH))
        if t.get("peak_tok_s") is not None:
            gain = (t["peak_tok_s"] / t["c1_tok_s"]) if t.get("c1_tok_s") else None
            c.append(Claim("05", f"{t['label']}: {_fmt(t['c1_tok_s'])} tok/s at C=1, peak {_fmt(t['peak_tok_s'])} tok/s at "
                           f"C={t['peak_c']}" + (f" ({gain:.2f}x)" if gain else "") + f", each user then getting "
                           f"{_fmt(t.get('peak_per_user_tok_s'))} tok/s" + (" (some levels hit their time budget)" if t["truncated"] else ""),
                           H_SWEEP_C))
    if not f.throughput:
        c.append(Claim("05", "No benchmark was recorded in this run", H_BENCH, False))
    return c


def what_we_found(f: Findings) -> str:
    """Markdown bullets: every claim with its link, then what to run, then the failures."""
    lines = [f"- {c.markdown()}" for c in f.claims]
    for lc in f.launch:
        lines.append(f"- Launch {lc['engine']}: `{lc['command']}` — " + "; ".join(lc["why"]) + ".")
    if f.failures:
        n = sum(x["times"] for x in f.failures)
        lines.append(f"- {n} recorded failures ({len(f.failures)} distinct), listed above; a failed measurement is a finding, not a result.")
    return "\n".join(lines)


# -- "Check yourself" --------------------------------------------------------------------------------------
def check_yourself(store: RunStore, chapter: str) -> list[tuple[str, str]]:
    """Two or three questions a new engineer should now answer, with answers computed from this run."""
    chapter = str(chapter)[:2]
    h = host_summary(store)
    if chapter == "01":
        qa = []
        if not h.get("probed"):
            return [("What does this run tell you about the host's GPUs?",
                     "Nothing: chapter 01 recorded no probe in this run (see its page and the failures table); run it before trusting any later chapter.")]
        if h.get("gpu"):
            qa.append(("What compute capability does this host's GPU report, and which family is that? Why does the family matter more than the marketing name?",
                       f"{h['capability']}: {h['family']}. Engines branch on the capability (major, minor), not the name: "
                       "the seed case's RTX PRO 6000 and a B200 are both called Blackwell, but report 12.0 and 10.0."))
        else:
            qa.append(("What compute capability does this host report, and what follows for the engines' GPU paths?",
                       "None: no GPU was seen, so no capability check can pass; the engines' GPU kernels cannot run and the book runs on the CPU."))
        eng = [e for e in h["engines"] if e.get("status") == "ok"]
        helpers = store.rows("engine_helpers")
        judged = [r for r in helpers if r.get("verdict") not in (None, "unknown")]
        bad = [r for r in helpers if r.get("verdict") not in (None, "unknown", "agrees")]
        qa.append(("Did any engine's own helper contradict the hardware or leave this GPU out (a mismatch or a gap)?",
                   (f"{len(helpers)} helpers asked in {', '.join(e['engine'] + ' ' + str(e.get('version')) for e in eng) or 'no engine'}; "
                    f"{len(judged)} could be judged against the hardware and "
                    + (f"{len(bad)} did not agree: " + "; ".join(f"{r.get('helper')} -> {r.get('answer')} ({r.get('verdict')})" for r in bad[:4])
                       if bad else "all agreed")
                    + ". The rest depend on installed packages, not on the GPU.") if helpers else
                   "No engine helper was recorded in this run (no engine could be asked)."))
        if (h.get("gpu_count") or 0) >= 2:
            qa.append(("How are the GPUs linked, and what does that predict for decode-time all-reduces under tensor parallelism?",
                       f"{'/'.join(h['links']) or 'unknown'}" + (f", {h['p2p_gbs']:.0f} GB/s measured peer copies" if h.get("p2p_gbs") else "")
                       + ". Decode all-reduces are a few KB, so their cost is latency, not bandwidth: the link sets a floor of microseconds "
                       "per call, paid twice per layer per token (chapter 04 measures it)."))
        elif h.get("gpu"):
            qa.append(("This host has one GPU. Which chapter's question does not arise here, and why?",
                       "Chapter 04's: a model that fits one GPU runs without tensor parallelism and makes no all-reduce, so there is no NCCL setting to tune."))
        return qa
    if chapter == "02":
        sel = [s for s in selection(store) if s.get("case") == "this-host"]
        seed = [s for s in selection(store) if s.get("case") == "seed"]
        qa = []
        if sel:
            s = sel[0]
            qa.append((f"Which attention backend does {s['engine']} {s['version']} pick for `{s['model']}` on this host, and which line decides it?",
                       f"`{s['backend']}`, written at `{s.get('where')}` in `{s.get('function')}` ({s['method']} reading)."))
            kinds = s.get("kinds") or []
            qa.append(("Is that choice driven by the GPU, the model, an installed kernel library, or a user flag? What would change it?",
                       f"Conditions on the way: {'; '.join(s['rule']) or 'none'} (kinds: {', '.join(kinds) or 'none'}). "
                       + ("No hardware condition is involved, so another GPU would get the same answer; "
                          if "hardware" not in kinds else "A hardware condition is involved: another GPU can get another backend; ")
                       + "passing the engine's attention flag changes it (chapter 03 forces each value)."))
        else:
            qa.append(("Which attention backend does the engine pick on this host?", "Not recorded in this run: chapter 02's what-if failed or did not run (see failures)."))
        if seed and seed[0].get("method") == "dynamic":
            s = seed[0]
            qa.append((f"In the seed case ({s['engine']} {s['version']}, {s['model']} on {s['gpu']}), which backend is picked and why is that a problem?",
                       f"`{s['backend']}` at `{s.get('where')}`, because {'; '.join(s['rule'][-3:])}: the fast branch's check does not "
                       f"cover capability {s.get('capability')}."))
        else:
            qa.append(("Why does this chapter run the engine's own resolution instead of reading its documentation?",
                       "Because the decision is code, and it moves between releases: write-ups about it can be wrong or out of date, "
                       "while the traced line and the conditions on the way are what this version actually does."))
        return qa
    if chapter == "06":
        f = collect(store)
        qa = []
        b = f.backends[0] if f.backends else None
        if b and b.get("correct"):
            qa.append((f"Should you force a different attention backend for {b['engine']} on this host?",
                       (f"Yes: `{b['best']}` was faster than the default beyond both 95% intervals, with correct output."
                        if b["change_supported"] else
                        f"No: the fastest, `{b['best']}` ({_fmt(b['best_tok_s'])} ± {_fmt(b['best_ci95'])} tok/s), overlaps the default "
                        f"({_fmt(b.get('default_tok_s'))} ± {_fmt(b.get('default_ci95'))}); the data supports no change. More runs would narrow the intervals.")))
        n = f.nccl
        if n and n.get("backend") == "nccl":
            qa.append(("Which NCCL variables would you export for tensor parallelism on this host, and what is the predicted gain per token?",
                       ("None. " + next((c.text for c in f.claims if c.chapter == "04"), "") + "."
                        if n.get("setting") in (None, "default") else
                        f"`{n['setting']}`: {_fmt(n.get('predicted_delta_ms'), 3)} ms per token predicted; "
                        + ("measured end to end: " + "; ".join(f"{x['engine']} {x['setting']}: {x['verdict']}" for x in n["measured_effect"] if x["vs"])
                           if n.get("measured_effect") else "not confirmed end to end, so none is exported yet."))))
        elif n:
            qa.append(("Why does this run give no NCCL recommendation?",
                       f"Its all-reduces ran with {n['backend']} on {n.get('world_size')} processes: NCCL variables do not apply to it, "
                       "and a one-GPU deployment makes no all-reduce at all."))
        t = next((x for x in f.throughput if x.get("pct_of_roofline") is not None), None)
        if t:
            qa.append(("How close is single-stream decode to the memory-bandwidth roofline, and what does that say about where the time goes?",
                       f"{t['pct_of_roofline']:.3g}% ({_fmt(t['single_tok_s'])} of {_fmt(t['roofline_tok_s'], 0)} tok/s): "
                       + ("far below it, so the weights' bytes are not the limit; per-token overhead (framework, kernel launches, "
                          "the serving path) is, and a faster attention kernel or NCCL setting cannot close that gap alone."
                          if t["pct_of_roofline"] < 25 else "close to it: memory bandwidth is the limit; only fewer bytes per token "
                          "(quantization, batching) raise it.")))
        if not qa:
            qa.append(("Why does this chapter recommend nothing for this run?",
                       "Chapters 03 to 05 recorded no measurement here (see the failures and each chapter's page); a recommendation "
                       "without a measurement would be a guess."))
        return qa[:3]
    return []


def check_yourself_markdown(qa: list[tuple[str, str]]) -> str:
    """Numbered questions, each answer folded in a <details> block."""
    if not qa:
        return "_Nothing recorded in this run to ask about._"
    out = []
    for i, (q, a) in enumerate(qa, 1):
        out.append(f"{i}. {q}\n\n   <details><summary>Answer (from this run)</summary>\n\n   {a}\n\n   </details>\n")
    return "\n".join(out)


# -- comparison across runs --------------------------------------------------------------------------------
_MISSING = "missing"


def _summary(store: RunStore) -> dict:
    h = host_summary(store)
    sel = [s for s in selection(store) if s.get("case") == "this-host"]
    n = nccl(store)
    tp = throughput(store)
    row: dict[str, Any] = {
        "host": _host_text(h) if (h.get("gpu") or h.get("hostname")) else None,
        "GPUs": h.get("gpu_count") if h.get("gpu") else (0 if store.rows("gpus") == [] and (store.path / "probe.json").exists() else None),
        "capability": h.get("capability"),
        "links": "/".join(h["links"]) if h.get("links") else (None if (h.get("gpu_count") or 0) >= 2 else ("none (one GPU)" if h.get("gpu") else None)),
        "selected backends": ", ".join(f"{s['engine']} {s['version']}: {s['backend']}" for s in sel) or None,
        "best NCCL setting": (n.get("setting") or n.get("reason")) if n else None,
        # named by its backend: a gloo all-reduce on a CPU and an NCCL one on GPUs are different quantities, never a delta
        f"{n.get('backend') if n else 'nccl'} all-reduce at batch 1 (us)": n.get("best_us") or n.get("default_us") if n else None,
    }
    for t in tp:
        row[f"{t['label']} tok/s at C=1 (single stream)"] = t.get("single_tok_s")
        row[f"{t['label']} single-stream 95% CI (tok/s)"] = t.get("single_ci95")
        row[f"{t['label']} peak tok/s"] = t.get("peak_tok_s")
        row[f"{t['label']} peak at C"] = t.get("peak_c")
    return row


def compare_runs(paths: list[str | Path], name: str = "runs"):
    """Runs side by side: one column per run, one row per quantity, deltas against the first run.

    Partial runs are fine: a quantity a run did not record shows as ``missing``. ``name`` is the parameter
    that carried the paths, for the error message.
    """
    import pandas as pd

    if len(paths) < 2:
        raise ParameterError(name, ", ".join(map(str, paths)) or "(none)", "at least two run directories")
    stores = [open_run(p, name) for p in paths]
    names, seen = [], set()
    for s in stores:
        name = s.manifest.get("run_id") or s.path.name
        name = name if name not in seen else f"{s.path.parent.name}/{s.path.name}"
        if name in seen:
            name = str(s.path)
        seen.add(name)
        names.append(name)
    rows = [_summary(s) for s in stores]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    table = pd.DataFrame({n: [r.get(k) for k in keys] for n, r in zip(names, rows)}, index=keys, dtype=object)
    base = names[0]
    for n in names[1:]:
        deltas = []
        for k in keys:
            va, vb = table.at[k, base], table.at[k, n]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
            if va is None or vb is None or (isinstance(va, float) and math.isnan(va)) or (isinstance(vb, float) and math.isnan(vb)):
                deltas.append("")  # one side missing: no delta
            elif numeric and not k.endswith("at C") and "CI" not in k:
                d = vb - va
                text = (f"{d:+,d}" if isinstance(d, int) else f"{d:+,.2f}") + (f" ({d / va:+.0%})" if va else "")
                ci_key = k.replace("tok/s at C=1 (single stream)", "single-stream 95% CI (tok/s)")
                if ci_key != k and ci_key in keys:
                    ea, eb = _num(table.at[ci_key, base]) or 0.0, _num(table.at[ci_key, n]) or 0.0
                    text += ": intervals overlap, no change supported" if _overlap(va, ea, vb, eb) else ": beyond both 95% intervals"
                deltas.append(text)
            else:
                deltas.append("same" if va == vb else "changed")
        table[f"delta {n} vs {base}"] = deltas
    table = table.map(lambda v: _MISSING if v is None or (isinstance(v, float) and math.isnan(v)) else
                      (f"{v:,.2f}" if isinstance(v, float) else v))
    table.index.name = "quantity"
    return table


def compare_markdown(table) -> str:
    cols = ["quantity", *map(str, table.columns)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for k, row in table.iterrows():
        cells = [str(k), *(str(v).replace("|", "/") for v in row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------------------
def _cmd_compare(args) -> int:
    table = compare_runs(args.runs)
    if args.json:
        print(json.dumps({"quantities": list(table.index), "runs": {c: list(table[c]) for c in table.columns}}, indent=2))
    else:
        print(compare_markdown(table))
    return 0


def register(sub) -> None:
    """``servebook compare RUN_A RUN_B [...]``."""
    p = sub.add_parser("compare", help="two or more runs side by side: capability, backends, NCCL, tok/s, with deltas",
                       description="Compare recorded runs (partial runs too: what a run did not record shows as missing).")
    p.add_argument("runs", nargs="+", help="run directories, e.g. data/runs/h200x2-book data/runs/h200x2-probe/1gpu")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    p.set_defaults(func=_cmd_compare)

