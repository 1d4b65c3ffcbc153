"""Runs side by side (``servebook compare RUN_A RUN_B``): one column per run, deltas against the first.

    compare_runs(["data/runs/h200x2-book", "data/runs/h200x2-probe/1gpu"])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..results import RunStore
from .claims import _host_text
from .intervals import _num, _overlap
from .tables import backends, host_summary, nccl, open_run, selection, throughput

__all__ = ["compare_runs", "compare_markdown", "register"]

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

