"""How decode-step time grows with depth: per-layer GPU time between slices of one engine on one machine, kernel
by kernel, and the deepest slice predicted from the two shallowest.

    kt = kernel_table(kernels, anchor)         # on the GPU host: each position of the step, its kernel and median time
    m = match_depths(kt_shallow, kt_deep, 3)   # kernels matched between a 1- and a 4-MoE-layer slice
    rows = slice_linearity(profile_rows, tables)       # table slice_linearity
    rows = layer_kernels(profile_rows, tables)         # table layer_kernels: one MoE layer's kernels, by identity

A decode step replayed from a CUDA graph launches the same kernels in the same order every step. Between two slices
that differ only in MoE layers, the deeper step is the shallower one with whole layer blocks inserted: the kernels
before the insertion match by position from the start, those after it by position from the end (Holistic Trace
Analysis' trace diff matches kernels the same way: by name and position), and the inserted part, cut into
``n_extra`` equal blocks of the same kernel names, is one MoE layer's kernels. Matched kernels (embedding, dense
layer, LM head, sampling and the layers both slices hold) are carried once; the inserted ones count per layer.
Per-layer and per-step times come from the GPU-busy time per step of every start (the mean over starts, the spread
is largest - smallest); everything subtracted is from one machine (``machines.require_one_machine``).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Iterable, Sequence

from .kernels import TraceError, classify
from .machines import require_one_machine

__all__ = ["kernel_table", "match_depths", "slice_linearity", "layer_kernels", "step_kernels", "moe_layers_of", "group_starts",
           "load_kernel_tables", "write_linearity", "retabulate_kernels"]


def kernel_table(kernels: Sequence, anchor: str, min_present: float = 0.5) -> dict:
    """Each position of the decode step: its kernel name (an index into ``names``), the trace's event category, and
    the median duration (us) over the whole steps of the trace (anchor to anchor).

    A kernel's identity is its stream (ranked by how many kernels it runs: 0 the busiest), its name and which
    occurrence of that name on that stream it is within the step; the table keeps the identities present in at least
    ``min_present`` of the steps, ordered by stream rank, then median position on the stream. Kernels on two streams
    overlap and the host's eager kernels interleave with the graph's, so the start order of a whole step varies from
    step to step; each stream's order does not."""
    marks = [k.ts for k in kernels if k.name == anchor]
    if len(marks) < 3:
        raise TraceError(f"the anchor {anchor[:60]!r} starts fewer than 3 times: no whole steps to tabulate")
    steps = [[k for k in kernels if lo <= k.ts < hi] for lo, hi in zip(marks, marks[1:])]
    rank = {st: r for r, (st, _) in enumerate(Counter(str(k.stream) for step in steps for k in step).most_common())}
    found: dict = defaultdict(lambda: {"dur": [], "pos": [], "cat": None})
    for step in steps:
        seen: Counter = Counter()
        pos: Counter = Counter()
        for k in sorted(step, key=lambda k: (rank[str(k.stream)], k.ts)):
            r = rank[str(k.stream)]
            ident = (r, k.name, seen[(r, k.name)])
            seen[(r, k.name)] += 1
            x = found[ident]
            x["dur"].append(k.dur)
            x["pos"].append(pos[r])
            x["cat"] = x["cat"] or k.cat
            pos[r] += 1
    keep = sorted(((ident, x) for ident, x in found.items() if len(x["dur"]) >= min_present * len(steps)),
                  key=lambda ix: (ix[0][0], statistics.median(ix[1]["pos"]), ix[0][2]))
    if not keep:
        raise TraceError(f"no kernel is present in {min_present:.0%} of the {len(steps)} steps: not a steady decode")
    names = sorted({ident[1] for ident, _ in keep})
    index = {nm: i for i, nm in enumerate(names)}
    return {"names": names, "seq": [index[ident[1]] for ident, _ in keep], "stream_rank": [ident[0] for ident, _ in keep],
            "cat": [x["cat"] for _, x in keep], "median_us": [statistics.median(x["dur"]) for _, x in keep],
            "present": [round(len(x["dur"]) / len(steps), 3) for _, x in keep], "steps_used": len(steps), "steps": len(steps),
            "step_us_median": statistics.median(hi - lo for lo, hi in zip(marks, marks[1:]))}


def _seq(t: dict) -> list[str]:
    return [t["names"][i] for i in t["seq"]]


def _rotate(t: dict, i: int) -> dict:
    return {**t, **{k: t[k][i:] + t[k][:i] for k in ("seq", "cat", "median_us", "stream_rank", "present") if k in t}}


def _aligned(shallow: dict, deep: dict) -> tuple[dict, dict]:
    """Both tables rotated to start at the same kernel: each trace's step starts at its own anchor, so the two
    steps may be rotations of each other. The start is the first kernel of the shallower step that runs once per
    step in both (embedding, LM head, sampling...); the tables are returned as they are where none does."""
    a, b = _seq(shallow), _seq(deep)
    ca, cb = Counter(a), Counter(b)
    once = next((i for i, nm in enumerate(a) if ca[nm] == 1 and cb.get(nm) == 1), None)
    if once is None:
        return shallow, deep
    return _rotate(shallow, once), _rotate(deep, b.index(a[once]))


def match_depths(shallow: dict, deep: dict, n_extra: int) -> dict:
    """Kernels of two kernel tables matched by name and position (see the module docstring): the longest matching
    subsequences of the two steps' kernel names (difflib; both steps rotated to start at one once-per-step kernel)
    are the carried kernels; what the deeper step has beyond them, net of what the shallower has unmatched (kernels
    outside the graph that ran in another order), is ``n_extra`` layers' kernels.

    Returns ``{"clean", "why", "matched", "block": [{"pos", "name", "category", "count", "us"}] (per layer),
    "per_layer_us", "carried": [{"name", "category", "us_shallow", "us_deep"}], "carried_moved_us"}``; ``clean`` is
    False (with ``why``) where the added kernels are not ``n_extra`` times one set of kernels."""
    from difflib import SequenceMatcher

    shallow, deep = _aligned(shallow, deep)
    a, b = _seq(shallow), _seq(deep)
    base = {"clean": False, "shallow_kernels": len(a), "deep_kernels": len(b), "n_extra": n_extra}
    if n_extra < 1 or len(b) <= len(a):
        return {**base, "why": f"{len(b) - len(a)} more kernels per step for {n_extra} more layers"}
    pairs = [(blk.a + i, blk.b + i) for blk in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks() for i in range(blk.size)]
    ma, mb = {i for i, _ in pairs}, {j for _, j in pairs}
    added: dict = defaultdict(lambda: {"count": 0, "us": 0.0, "first": None})
    for j in (j for j in range(len(b)) if j not in mb):
        x = added[b[j]]
        x["count"] += 1
        x["us"] += deep["median_us"][j]
        x["first"] = j if x["first"] is None else x["first"]
    for i in (i for i in range(len(a)) if i not in ma):    # the same kernel unmatched on both sides: another order
        x = added[a[i]]
        x["count"] -= 1
        x["us"] -= shallow["median_us"][i]
    net = {nm: x for nm, x in added.items() if x["count"]}
    odd = [nm[:60] for nm, x in net.items() if x["count"] < 0 or x["count"] % n_extra]
    carried = [{"name": a[i], "category": classify(a[i], shallow["cat"][i]), "us_shallow": shallow["median_us"][i],
                "us_deep": deep["median_us"][j]} for i, j in pairs]
    out = {**base, "matched": len(pairs), "carried": carried,
           "carried_moved_us": sum(c["us_deep"] - c["us_shallow"] for c in carried)}
    if odd:
        return {**out, "why": f"kernels added a number of times that is not a multiple of {n_extra}: {odd[:3]}"}
    order = sorted(net, key=lambda nm: net[nm]["first"] if net[nm]["first"] is not None else len(b))
    block = [{"pos": k, "name": nm, "category": classify(nm, deep["cat"][net[nm]["first"]] if net[nm]["first"] is not None else ""),
              "count": net[nm]["count"] // n_extra, "us": net[nm]["us"] / n_extra} for k, nm in enumerate(order)]
    return {**out, "clean": True, "why": "", "block": block, "block_kernels": sum(x["count"] for x in block),
            "per_layer_us": sum(x["us"] for x in block)}


def moe_layers_of(row: dict) -> int:
    """MoE layers of a slice row (its layers minus the card's dense ones)."""
    return int(row["layers"]) - int(row.get("dense_layers") or 0)


_GROUP = ("engine", "backend", "mode", "quant", "card", "machine", "run_id")


def group_starts(profile_rows: Iterable[dict]) -> dict:
    """``{(engine, backend, mode, quant, card, machine, run_id): {moe_layers: [rows, one per start]}}`` of the ok
    profiles of role slice or repeat (every start of one server; ``full`` models are not slices)."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in profile_rows:
        if r.get("ok") and r.get("role", "slice") in ("slice", "repeat") and r.get("layers") is not None:
            out[tuple(r.get(k) for k in _GROUP)][moe_layers_of(r)].append(r)
    return out


def _stats(rows: list[dict], key: str) -> tuple[float, float]:
    v = [float(r[key]) for r in rows if r.get(key) is not None]
    return (statistics.fmean(v), max(v) - min(v)) if v else (float("nan"), float("nan"))


def slice_linearity(profile_rows: Iterable[dict], tables: dict | None = None) -> list[dict]:
    """Table ``slice_linearity``: per engine configuration and machine, one row per pair of consecutive depths
    (``kind`` "step": per-layer ms = difference of the mean GPU-busy times per step / the MoE layers added, per-step ms
    = the shallower's busy time minus its layers' share, spread = the larger start-to-start spread of the two depths,
    per-layer ms from the matched kernels where ``tables`` holds both first starts' kernel tables) and one row
    (``kind`` "prediction") with the deepest slice predicted from the two shallowest and its error."""
    tables = tables or {}
    out = []
    for key, depths in sorted(group_starts(profile_rows).items(), key=lambda kv: str(kv[0])):
        ns = sorted(depths)
        if len(ns) < 2:
            continue
        require_one_machine([r for n in ns for r in depths[n]], "slice_linearity")
        base = dict(zip(_GROUP, key))
        st = {n: {"busy": _stats(depths[n], "busy_ms"), "step": _stats(depths[n], "step_ms"), "tpot": _stats(depths[n], "tpot_ms"),
                  "starts": len(depths[n]), "first": depths[n][0]} for n in ns}
        for n1, n2 in zip(ns, ns[1:]):
            (b1, s1), (b2, s2) = st[n1]["busy"], st[n2]["busy"]
            slope = (b2 - b1) / (n2 - n1)
            row = {**base, "kind": "step", "depths": f"{n1}->{n2}", "moe_from": n1, "moe_to": n2,
                   "starts_from": st[n1]["starts"], "starts_to": st[n2]["starts"], "busy_from_ms": b1, "busy_to_ms": b2,
                   "per_layer_ms": slope, "per_step_ms": b1 - n1 * slope, "spread_ms": max(s1, s2),
                   "per_layer_spread_ms": (s1 + s2) / (n2 - n1),
                   "tpot_per_layer_ms": (st[n2]["tpot"][0] - st[n1]["tpot"][0]) / (n2 - n1),
                   "step_per_layer_ms": (st[n2]["step"][0] - st[n1]["step"][0]) / (n2 - n1),
                   "labels": [r["label"] for r in depths[n1] + depths[n2]]}
            ta, tb = tables.get(st[n1]["first"]["label"]), tables.get(st[n2]["first"]["label"])
            if ta and tb:
                m = match_depths(ta, tb, n2 - n1)
                row.update({"kernels_clean": m["clean"], "kernels_why": m["why"],
                            "kernel_per_layer_ms": m["per_layer_us"] / 1e3 if m["clean"] else None,
                            "carried_moved_ms": m["carried_moved_us"] / 1e3 if m["clean"] else None})
            out.append(row)
        if len(ns) >= 3:
            out.append(_prediction(base, ns, st))
    return out


def _prediction(base: dict, ns: list[int], st: dict) -> dict:
    n1, n2, nd = ns[0], ns[1], ns[-1]
    row = {**base, "kind": "prediction", "depths": f"{n1},{n2}->{nd}", "moe_from": n1, "moe_to": nd}
    for what in ("busy", "tpot"):
        slope = (st[n2][what][0] - st[n1][what][0]) / (n2 - n1)
        pred = st[n1][what][0] + (nd - n1) * slope
        meas, spread = st[nd][what]
        row.update({f"{what}_predicted_ms": pred, f"{what}_measured_ms": meas, f"{what}_spread_ms": spread,
                    f"{what}_error_pct": 100 * (pred - meas) / meas if meas else None})
    row["within_5pct"] = abs(row["busy_error_pct"]) <= 5.0 if row["busy_error_pct"] is not None else None
    # served time per token the way predict_full takes it (host work overlapped with the GPU): the larger of the second
    # slice's time per token and the predicted GPU time; the straight line through two host-bound slices is not a model
    over = max(st[n2]["tpot"][0], row["busy_predicted_ms"])
    row.update({"tpot_overlapped_predicted_ms": over, "tpot_overlapped_error_pct": 100 * (over - row["tpot_measured_ms"]) / row["tpot_measured_ms"]
                if row["tpot_measured_ms"] else None})
    row["per_layer_ms"] = (st[n2]["busy"][0] - st[n1]["busy"][0]) / (n2 - n1)
    row["per_step_ms"] = st[n1]["busy"][0] - n1 * row["per_layer_ms"]
    row["spread_ms"] = max(st[n]["busy"][1] for n in (n1, n2, nd))
    return row


def _shallowest_and_deepest(profile_rows: Iterable[dict], tables: dict, what: str):
    """Per configuration with two depths or more: its key, its depths, and the first starts of the shallowest and the
    deepest (one machine, or refused), where both have a kernel table."""
    for key, depths in sorted(group_starts(profile_rows).items(), key=lambda kv: str(kv[0])):
        ns = sorted(depths)
        if len(ns) < 2:
            continue
        lo, hi = depths[ns[0]][0], depths[ns[-1]][0]
        require_one_machine([lo, hi], what)
        if lo["label"] in tables and hi["label"] in tables:
            yield key, ns, lo, hi


def layer_kernels(profile_rows: Iterable[dict], tables: dict) -> list[dict]:
    """Table ``layer_kernels``: the kernels of one MoE layer, matched between the shallowest and the deepest first
    start of each configuration (name, position in the layer block, category, us per layer)."""
    out = []
    for key, ns, lo, hi in _shallowest_and_deepest(profile_rows, tables, "layer_kernels"):
        m = match_depths(tables[lo["label"]], tables[hi["label"]], ns[-1] - ns[0])
        base = {**dict(zip(_GROUP, key)), "depths": f"{ns[0]}->{ns[-1]}", "from_labels": [lo["label"], hi["label"]]}
        if not m["clean"]:
            out.append({**base, "pos": None, "name": None, "category": None, "us_per_layer": None, "why": m["why"]})
            continue
        out.extend({**base, "pos": k["pos"], "name": k["name"][:300], "category": k["category"], "per_layer": k["count"],
                    "us_per_layer": k["us"]}
                   for k in m["block"])
    return out


def step_kernels(profile_rows: Iterable[dict], tables: dict) -> list[dict]:
    """Table ``step_kernels``: the kernels a step runs once whatever its depth (embedding, the dense layer, LM head,
    sampling, the host's kernels), per configuration: the shallowest first start's kernels by name, less its MoE
    layers' share (``n`` x one layer's, from the match with the deepest: count and time); names left with time."""
    out = []
    for key, ns, lo, hi in _shallowest_and_deepest(profile_rows, tables, "step_kernels"):
        t = tables[lo["label"]]
        m = match_depths(t, tables[hi["label"]], ns[-1] - ns[0])
        if not m["clean"]:
            continue
        layer = {k["name"]: k for k in m["block"]}
        have: dict = defaultdict(lambda: {"count": 0, "us": 0.0, "cat": ""})
        for i, nm in zip(t["seq"], range(len(t["seq"]))):
            x = have[t["names"][i]]
            x["count"] += 1
            x["us"] += t["median_us"][nm]
            x["cat"] = x["cat"] or t["cat"][nm]
        base = {**dict(zip(_GROUP, key)), "from_labels": [lo["label"], hi["label"]], "moe_layers_removed": ns[0]}
        for name, x in have.items():
            count = x["count"] - ns[0] * (layer[name]["count"] if name in layer else 0)
            us = x["us"] - ns[0] * (layer[name]["us"] if name in layer else 0.0)
            if count > 0:
                out.append({**base, "name": name[:300], "category": classify(name, x["cat"]), "per_step": count, "us_per_step": us})
    return sorted(out, key=lambda r: (str(r["machine"]), -r["us_per_step"]))


def load_kernel_tables(store) -> dict:
    """``{label: kernel table}`` of a run's profiles that kept one (``traces/<slug>.kernels.json``)."""
    import json
    from pathlib import Path

    out = {}
    for r in store.rows("profile_runs"):
        rel = r.get("kernel_table")
        if r.get("ok") and rel and (Path(store.path) / rel).is_file():
            out[r["label"]] = json.loads((Path(store.path) / rel).read_text())
    return out


def write_linearity(store) -> tuple[list[dict], list[dict]]:
    """Derive the tables ``slice_linearity``, ``layer_kernels`` and ``step_kernels`` of a run from its ``profile_runs``
    and kernel tables (each rewritten whole)."""
    rows, tables = store.rows("profile_runs"), load_kernel_tables(store)
    lin, lk = slice_linearity(rows, tables), layer_kernels(rows, tables)
    store.replace("slice_linearity", lin)
    store.replace("layer_kernels", lk)
    store.replace("step_kernels", step_kernels(rows, tables))
    return lin, lk


def retabulate_kernels(store, reason: str, at: str) -> list[str]:
    """Write each ok profile's kernel table again from its kept trace (``traces/<slug>.kernels.json``; a trace cut to
    its first steps gives the table of those steps) with today's :func:`kernel_table`, and mark the rows whose
    ``kernel_table`` fields change as ``corrected`` (by, fields, reason, at). Returns the labels rewritten."""
    import json
    from pathlib import Path

    from .kernels import kernel_events, load_trace
    from .steps import step_breakdown

    rows, done = store.rows("profile_runs", withdrawn=True), []
    for r in rows:
        if not (r.get("ok") and r.get("trace")):
            continue
        ks = kernel_events(load_trace(Path(store.path) / r["trace"]))
        kt = kernel_table(ks, step_breakdown(ks)["anchor"])
        rel = r["trace"].replace(".trace.json.gz", ".kernels.json")
        (Path(store.path) / rel).write_text(json.dumps({**kt, "label": r["label"], "from": f"{r['trace']} (kept trace)"}))
        new = {"kernel_table": rel, "kernel_table_steps": kt["steps_used"]}
        if any(r.get(k) != v for k, v in new.items()) or "kernel_table_error" in r:
            r.pop("kernel_table_error", None)
            r.update(new)
            r["corrected"] = {"by": "servebook.profile.linearity.retabulate_kernels", "fields": sorted(new), "reason": reason, "at": at}
        done.append(r["label"])
    store.replace("profile_runs", rows)
    return done
