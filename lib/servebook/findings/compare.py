"""Runs side by side (``servebook compare RUN_A RUN_B``): one column per run, deltas against the first.

    compare_runs(["data/runs/h200x2-book", "data/runs/h200x2-probe/1gpu"])
    across_runs(store, f.throughput, ["data/runs/h200x1-live"])   # chapter 06: single stream against other runs'

A delta between two runs is a verdict only where both measured the same way (``methods.method_differences``: host
GPUs, model, weights, prompt and output tokens, prompts, warm-ups, runs, server starts; for a peak also the sweep's
levels) and over server starts (``separated`` with ``starts``); otherwise the row lists what differs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..results import RunStore
from .claims import _host_text
from ..stated.intervals import separated
from .methods import bench_method, method_differences
from .tables import backends, host_summary, nccl, open_run, selection, throughput

__all__ = ["compare_runs", "compare_markdown", "across_runs", "register"]

_MISSING = "missing"



def _summary(store: RunStore) -> dict:
    h = host_summary(store)
    # chapter 02's answers for this host, or for the profile the run studied (not the seed case's GPU), named by GPU
    sel = [s for s in selection(store) if s.get("case") != "seed" and s.get("method") == "dynamic"]
    reported = [b for b in backends(store) if b.get("default_reported")]
    n = nccl(store)
    tp = throughput(store)
    row: dict[str, Any] = {
        "host": _host_text(h, tagged=False) if (h.get("gpu") or h.get("hostname")) else None,
        "GPUs": h.get("gpu_count") if h.get("gpu") else (0 if store.rows("gpus") == [] and (store.path / "probe.json").exists() else None),
        "capability": h.get("capability"),
        "links": "/".join(h["links"]) if h.get("links") else (None if (h.get("gpu_count") or 0) >= 2 else ("none (one GPU)" if h.get("gpu") else None)),
        "selected backends (chapter 02)": ", ".join(f"{s['engine']} {s['version']} on {s['gpu']}: {s['backend']}" for s in sel) or None,
        "default backend reported (chapter 03)": ", ".join(f"{b['engine']}: {b['default_reported']}" for b in reported) or None,
        "best NCCL setting": (f"none supported: {n['setting']} is fastest, within the run-to-run spread (chapter 04)"
                              if n.get("within_spread") else n.get("setting") or n.get("reason")) if n else None,
    }
    if n:
        # named by its backend and its message size: a gloo all-reduce on a CPU and an NCCL one on GPUs, or one of 512 B and
        # one of 14,336 B, are different quantities, never a delta; the latency is the setting that stands (the defaults'
        # where no setting is supported beyond the run-to-run spread)
        supported = n.get("setting") not in (None, "default") and not n.get("within_spread") and n.get("best_us") is not None
        what = f"{n['setting']} (the supported setting)" if supported else f"{n.get('backend')}'s defaults (no setting supported)"
        row[f"{n.get('backend')} all-reduce at batch 1, {int(n['b1_bytes']):,} B (us), {what}" if n.get("b1_bytes") else
            f"{n.get('backend')} all-reduce at batch 1 (us)"] = n["best_us"] if supported else n.get("default_us")
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
        name = s.path.name or s.manifest.get("run_id")  # the directory: a run copied to another one keeps its run_id
        name = name if name not in seen else f"{s.path.parent.name}/{s.path.name}"
        if name in seen:
            name = str(s.path)
        seen.add(name)
        names.append(name)
    damaged = {n: s.damaged() for n, s in zip(names, stores)}
    rows = [_summary(s) for s in stores]
    methods = [{t["label"]: bench_method(s, t["label"]) for t in throughput(s)} for s in stores]
    label_of = {f"{lab} {suffix}": (lab, suffix == "peak tok/s") for m in methods for lab in m
                for suffix in ("tok/s at C=1 (single stream)", "peak tok/s")}
    keys = list(dict.fromkeys(k for r in rows for k in r))
    table = pd.DataFrame({n: [r.get(k) for k in keys] for n, r in zip(names, rows)}, index=keys, dtype=object)
    base = names[0]
    for i, n in enumerate(names[1:], 1):
        deltas = []
        for k in keys:
            va, vb = table.at[k, base], table.at[k, n]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
            if va is None or vb is None or (isinstance(va, float) and math.isnan(va)) or (isinstance(vb, float) and math.isnan(vb)):
                deltas.append("")  # one side missing: no delta
            elif numeric and not k.endswith("at C") and "CI" not in k:
                d = vb - va
                text = (f"{d:+,d}" if isinstance(d, int) else f"{d:+,.2f}") + (f" ({d / va:+.0%})" if va else "")
                label, sweep = label_of.get(k, (None, False))
                ma, mb = (methods[0].get(label), methods[i].get(label)) if label else (None, None)
                differ = method_differences(mb, ma, sweep=sweep) if ma and mb else []
                ci_key = k.replace("tok/s at C=1 (single stream)", "single-stream 95% CI (tok/s)")
                torn = _damage_note(damaged, (base, n), k)
                if torn:  # a row left out may be what makes the methods (or the figures) differ: no verdict, no method story
                    text += f", not a verdict: {torn}"
                elif differ:  # two methods: the delta is shown, never a verdict
                    text += (", not a verdict: measured differently (" + "; ".join(f"{x['what']} {x['a']} vs {x['b']}" for x in differ)
                             + ")")
                elif ci_key != k and ci_key in keys:
                    text += ": " + separated(vb, table.at[ci_key, n], va, table.at[ci_key, base],
                                             starts=(mb["starts"] if mb else 1, ma["starts"] if ma else 1))
                deltas.append(text)
            else:
                deltas.append("same" if va == vb else "changed")
        table[f"delta {n} vs {base}"] = deltas
    table = table.map(lambda v: _MISSING if v is None or (isinstance(v, float) and math.isnan(v)) else
                      (f"{v:,.2f}" if isinstance(v, float) else v))
    table.index.name = "quantity"
    return table


# The tables each compared quantity is read from: a damaged row in one of them makes that quantity's delta no verdict.
_SOURCES = (("tok/s", ("bench_summary", "bench_starts", "bench_servers")), ("CI", ("bench_summary", "bench_starts")),
            ("peak", ("bench_summary",)), ("all-reduce", ("nccl", "nccl_grid")), ("GPUs", ("gpus",)))


def _damage_note(damaged: dict[str, dict[str, list[int]]], runs: tuple[str, str], quantity: str) -> str:
    """Why a delta between ``runs`` is no verdict when one of them has unreadable rows in the tables ``quantity`` is
    read from ('' when neither has)."""
    tables = next((t for word, t in _SOURCES if word in quantity), ())
    hit = [f"{run}'s {t}.jsonl line {', '.join(map(str, damaged[run][t][:5]))}" for run in runs for t in tables
           if t in damaged.get(run, {})]
    return ("unreadable rows (" + "; ".join(hit) + ") were left out, so a difference here may be that damage") if hit else ""


def compare_markdown(table) -> str:
    cols = ["quantity", *map(str, table.columns)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for k, row in table.iterrows():
        cells = [str(k), *(str(v).replace("|", "/") for v in row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cmd_compare(args) -> int:
    import sys

    table = compare_runs(args.runs)
    if args.json:
        print(json.dumps({"quantities": list(table.index), "runs": {c: list(table[c]) for c in table.columns}}, indent=2))
    else:
        print(compare_markdown(table))
    warnings = [w for w in (open_run(p, "runs").say_damaged() for p in args.runs) if w]
    for w in warnings:
        print(f"servebook compare: warning: {w}", file=sys.stderr)
    return 1 if warnings else 0


def register(sub) -> None:
    """``servebook compare RUN_A RUN_B [...]``."""
    p = sub.add_parser("compare", help="two or more runs side by side: capability, backends, NCCL, tok/s, with deltas",
                       description="Compare recorded runs (partial runs too: what a run did not record shows as missing).")
    p.add_argument("runs", nargs="+", help="run directories, e.g. data/runs/h200x2-book data/runs/h200x2-probe/1gpu")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    p.set_defaults(func=_cmd_compare)



def across_runs(store: RunStore, mine: list[dict], others: list[str], name: str = "compare_with") -> list[dict]:
    """Chapter 06's comparison of this run's single streams (``mine``: its ``throughput`` items) with the same engine's in
    each of ``others`` (run directories): per pair {run, label, base, engine, extra, faster, verdict, differences, text}.

    The verdict is ``separated`` over the server starts each rate covers (one start: no verdict); where the two runs
    measured differently (``method_differences``) the text names what differs and the pair is no verdict either:
    ``faster`` is True only for a difference beyond both intervals over server starts, measured the same way."""
    from ..stated.tags import q

    by_engine = {t["engine"]: t for t in mine if t.get("single_tok_s") is not None}
    out = []
    for other in others:
        theirs = open_run(other, name)
        for t in throughput(theirs):
            base = by_engine.get(t.get("engine"))
            if base is None or t.get("single_tok_s") is None:
                continue
            pair = f"{other} | {t['label']} vs {base['label']}"  # the subject of the tagged difference, ratio and starts
            verdict = separated(t["single_tok_s"], t.get("single_ci95"), base["single_tok_s"], base.get("single_ci95"),
                                starts=(t.get("starts") or 1, base.get("starts") or 1), of=pair,
                                names=("other_run_vs_pct", "other_run_vs_starts"))
            ma, mb = bench_method(theirs, t["label"]), bench_method(store, base["label"])
            differ = method_differences(ma, mb) if ma and mb else []
            extra = t["label"][len(base["label"]):].strip() if t["label"].startswith(base["label"]) else ""
            of_t = f"{other} | {t['label']}"
            text = (f"`{t['label']}` in `{other}`: {q('other_run_single_tok_s', t['single_tok_s'], ',.1f', of=of_t)} ± "
                    f"{q('other_run_single_ci95', t.get('single_ci95'), ',.1f', of=of_t)} tok/s single stream against this run's "
                    f"`{base['label']}` {q('single_tok_s', base['single_tok_s'], ',.1f', of=base['label'])} ± "
                    f"{q('single_ci95', base.get('single_ci95'), ',.1f', of=base['label'])}: {verdict}; "
                    f"{q('other_run_ratio', t['single_tok_s'] / base['single_tok_s'], '.2f', of=pair)}x")
            if differ:
                text += (". Not a verdict either way: the two runs measured it differently ("
                         + ", ".join(x["what"] for x in differ) + "; the comparison table above lists each side), so the "
                         "difference mixes the method with the configuration")
            out.append({"run": other, "label": t["label"], "base": base["label"], "engine": t["engine"], "extra": extra,
                        "faster": verdict.startswith("faster") and not differ, "verdict": verdict, "differences": differ,
                        "text": text})
    return out
