"""A run of slice profiles read as a reference book (issue #39 item 7): per engine configuration and slice depth, the
served time per token and the GPU time per decode step over every server start, from the recorded rows.

    rows = depth_rows(store.rows("profile_runs"))   # one row per (engine, backend, quant, mode, machine, unit, MoE layers)
    md = depth_markdown(store)                      # chapter 05's table of them, every figure tagged (servebook.stated.q)

A row's starts are the ok profiles of one server configuration at one depth within one unit (``linearity.group_starts``,
the grouping ``slice_linearity`` reads): the served time per token (``tpot_ms``: timed greedy requests without the
profiler) per start, its mean and 95% t-interval over the starts, and the GPU-busy time per profiled step
(``busy_ms``: kernels running, from the trace) with its start-to-start spread. The busy share (busy over time per
token) says how much of a token's time the GPU works: near 100% the served time is the kernels', far below it the host
decides it, and a difference between depths there says little about a layer.
"""

from __future__ import annotations

import statistics
from typing import Iterable

__all__ = ["depth_rows", "depth_markdown", "HOST_BOUND_SHARE"]

# a busy share at or below this: the served time per token is the host's more than the kernels' (chapter 06 reads a
# pair of engines as GPU-bound above it too, profile.chapter.where_time_goes)
HOST_BOUND_SHARE = 0.9


def depth_rows(profile_rows: Iterable[dict]) -> list[dict]:
    """One row per engine configuration (engine, backend, quant, mode, card, machine, unit) and MoE-layer depth, in that
    order: ``label`` (the first start's, the key every figure is stated by), ``labels``, ``starts``, ``tpot_ms`` and
    ``busy_ms`` per start, their means, ``tpot_ci95_ms`` (None with one start), ``busy_spread_ms`` and ``busy_share``."""
    from ..bench.stats import mean_ci
    from .linearity import _GROUP, group_starts

    out = []
    for key, depths in sorted(group_starts(list(profile_rows)).items(), key=lambda kv: str(kv[0])):
        for moe in sorted(depths):
            rows = [r for r in depths[moe] if r.get("tpot_ms") is not None and r.get("busy_ms") is not None]
            if not rows:
                continue
            tpot, busy = [float(r["tpot_ms"]) for r in rows], [float(r["busy_ms"]) for r in rows]
            t_mean, b_mean = statistics.fmean(tpot), statistics.fmean(busy)
            out.append({**dict(zip(_GROUP, key)), "moe_layers": moe, "layers": rows[0]["layers"],
                        "label": rows[0]["label"], "labels": [r["label"] for r in rows], "starts": len(rows),
                        "tpot_ms": tpot, "busy_ms": busy, "tpot_mean_ms": t_mean, "busy_mean_ms": b_mean,
                        "tpot_ci95_ms": mean_ci(tpot)["half_width"] if len(rows) > 1 else None,
                        "busy_spread_ms": max(busy) - min(busy), "busy_share": b_mean / t_mean})
    return out


_KEY = ("engine", "backend", "quant", "mode", "card", "machine", "run_id")


def _groups(store) -> dict:
    """``depth_rows`` by engine configuration (``_KEY``), in their order."""
    out: dict = {}
    for r in depth_rows(store.rows("profile_runs")):
        out.setdefault(tuple(r[k] for k in _KEY), []).append(r)
    return out


def _layers_word(card: str | None) -> str:
    """What a slice's depth counts: its MoE layers on a card with routed experts (the dense ones are in every slice),
    else its layers (a card outside data/models: its layers)."""
    from .tables import _card_full

    try:
        return "MoE layer" if _card_full(card)["moe"] else "layer"
    except Exception:  # noqa: BLE001 - an embedded or unknown card: its layers, as recorded
        return "layer"


def _what(eng: str, be: str, quant: str, mode: str, card: str) -> str:
    from ..engines import prose_name

    return (f"{prose_name(eng)} ({'its default backend' if be in (None, 'auto') else be}, {'INT4 experts' if quant == 'card' else quant}, "
            f"{'CUDA graphs' if mode == 'graph' else mode}), {card}")


def _table(rows: list[dict], q) -> str:
    head = (f"| {_layers_word(rows[0]['card'])}s | starts | served ms per token, per start | over the starts (95% interval) | GPU busy ms per "
            "token, one decode step (spread over starts) | busy share of the served time |\n|---|---|---|---|---|---|")
    body = []
    for r in rows:
        lab = r["label"]
        per = ", ".join(q("profile_tpot_ms", t, ".3f", of=x) for t, x in zip(r["tpot_ms"], r["labels"]))
        over = (f"{q('depth_tpot_mean_ms', r['tpot_mean_ms'], '.3f', of=lab)} ± "
                f"{q('depth_tpot_ci95_ms', r['tpot_ci95_ms'], '.3f', of=lab)}" if r["starts"] > 1 else "one start")
        body.append(f"| {q('depth_moe_layers', r['moe_layers'], 'd', of=lab)} | {q('depth_starts', r['starts'], 'd', of=lab)} "
                    f"| {per} | {over} | {q('depth_busy_mean_ms', r['busy_mean_ms'], '.3f', of=lab)} "
                    f"({q('depth_busy_spread_ms', r['busy_spread_ms'], '.4f', of=lab)}) "
                    f"| {q('depth_busy_share_pct', 100 * r['busy_share'], '.0f', of=lab)}% |")
    return "\n".join([head, *body])


def depth_markdown(store) -> str:
    """Chapter 05's account of a run of profiles only (``book.profiles_only``): per engine configuration with two
    depths or more, a table of its depths (``depth_rows``) and one line on which depths' served times the kernels
    decide; "" for any other run (a live book's profiles keep their own lines, ``chapter.findings``)."""
    from ..stated import q
    from .book import profiles_only

    if not profiles_only(store.path):
        return ""
    out = []
    for (eng, be, quant, mode, card, machine, run), mine in _groups(store).items():
        if len(mine) < 2:
            continue
        where = _where(machine, run)
        gpu = [r for r in mine if r["busy_share"] > HOST_BOUND_SHARE]
        host = [r for r in mine if r["busy_share"] <= HOST_BOUND_SHARE]
        said = []
        if gpu:
            said.append("the GPU is busy for most of a token's time at " + _depths(gpu, q)
                        + ": there the served time per token is the kernels'")
        if host:
            said.append("at " + _depths(host, q) + " the GPU idles for part of each token, so the host's share moves "
                        "the served time from start to start (the intervals below) and a layer's cost is read from the "
                        "GPU time (table slice_linearity), not from the served times' difference")
        out.append(f"**{_what(eng, be, quant, mode, card)}, {where}**: " + "; ".join(said) + ".\n\n"
                   + _table(mine, q))
    if out:
        out.insert(0, _METHOD)
    return "\n\n".join(out)


_METHOD = ("Per slice depth, over its server starts: the served time per token is the mean of timed greedy requests "
           "without the profiler (each start's figure, then their mean and 95% t-interval over the starts); the GPU-busy "
           "time is the kernels' time per decode step in that start's profile (mean, and largest minus smallest over the "
           "starts); the busy share is the one over the other.")


def _where(machine: str | None, run: str | None) -> str:
    """Where one configuration's rows were measured: its machine, else its unit (run), else that neither was recorded."""
    return f"machine `{machine}`" if machine else f"run `{run}`" if run else "machine not recorded"


def _depths(rows: list[dict], q) -> str:
    words = [q("depth_moe_layers", r["moe_layers"], "d", of=r["label"]) for r in rows]
    return (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]) + f" {_layers_word(rows[0]['card'])}s"


def found_lines(store) -> list[str]:
    """Chapter 05's "What we found" on a run of profiles only (``profile.book.profiles_only``): per engine configuration
    of a slice ladder, each depth's served time per token over its starts and where the GPU decides it; [] otherwise
    (a book's chapter 05 states its own client's rates)."""
    from ..stated import q
    from .book import profiles_only

    if not profiles_only(store.path):
        return []
    out = []
    anchors = {r["label"] for r in store.rows("profile_runs") if r.get("reference")}
    for key, rows in _groups(store).items():
        word = _layers_word(key[4])
        machine, run = key[5], key[6]
        # one configuration measured on two machines reads as two rates of one thing unless each line names its own
        where = _where(machine, run)
        if all(lab in anchors for r in rows for lab in r["labels"]):
            where += (" (the anchor configuration only, measured again there to compare that machine's profiles with "
                      "the others' through it; not a depth ladder)")
        each = "; ".join(
            f"{q('depth_moe_layers', r['moe_layers'], 'd', of=r['label'])} {word}{'s' * (r['moe_layers'] != 1)} "
            f"{q('depth_tpot_mean_ms', r['tpot_mean_ms'], '.3f', of=r['label'])}"
            + (f" ± {q('depth_tpot_ci95_ms', r['tpot_ci95_ms'], '.3f', of=r['label'])}" if r["starts"] > 1 else "")
            + f" ms ({q('depth_starts', r['starts'], 'd', of=r['label'])} start{'s' * (r['starts'] != 1)}, GPU busy "
            f"{q('depth_busy_share_pct', 100 * r['busy_share'], '.0f', of=r['label'])}%)" for r in rows)
        out.append(f"- {_what(*key[:5])}, {where}, served time per token per slice depth, mean and 95% interval over server "
                   "starts, timed by the profile run (greedy requests without the profiler; this chapter's own client "
                   f"measured nothing here): {each}.")
    return out
