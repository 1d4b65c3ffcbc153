"""The engines at one depth on one machine: where one recording unit holds every engine's INT4 slice at the depth the
engines are compared at (``anchor.common_depth``), their GPU busy times and served times compared directly, with no
carry between machines (chapter 06: where there is one, it is the engines' comparison, and the one through each unit's
anchor is evidence beside it).

    depth = anchor.common_depth(tables.latest_ok(profile_rows), backends)   # the depth the engines are compared at
    rows = same_machine(profile_rows, {"sglang": "triton", "vllm": "TRITON_MLA"}, depth)   # one row per such unit
    line = same_machine_line(rows)                                                # chapter 06's sentence, figures tagged

In h200x1-ref, unit 3 (`h200x1-ref-vllm2`) measured vLLM's 12-MoE-layer slice beside SGLang's, the anchor configuration,
on one machine: that is the engines' comparison that needs no assumption about two machines. Each figure is decided by
``starts.compare`` (the starts rule's 2% equivalence margin or the start-to-start spread, whichever is larger; one start
on a side is "undecided", and the sentence says how far under the margin the difference is all the same).
"""

from __future__ import annotations

from .ladders import int4_rows, unit_of

__all__ = ["same_machine", "same_machine_line", "measured_at", "decide", "MEASURES"]

# what is compared: the profile row's field, in words
MEASURES = {"busy_ms": "GPU busy per step", "tpot_ms": "time per token served"}


def measured_at(profile_rows, engine: str, backend, depth: int) -> dict:
    """The latest ok INT4 rows (``ladders.int4_rows``) of ``engine`` with ``backend`` at ``depth`` MoE layers that name
    their machine and hold both ``MEASURES``, by unit (``ladders.unit_of``: machine, run id)."""
    from .linearity import moe_layers_of

    out: dict = {}
    for r in int4_rows(profile_rows, engine, backend):
        if moe_layers_of(r) == depth and r.get("machine") and all(r.get(m) is not None for m in MEASURES):
            out.setdefault(unit_of(r), []).append(r)
    return out


def decide(a_rows: list[dict], b_rows: list[dict]) -> dict:
    """Both ``MEASURES`` of two sets of starts decided by ``starts.compare`` (``a_rows`` as "a"): ``{"compare", "mean"
    ({"a"/"b": {measure: ms}}), "diff_pct", "margin_pct"}``, each ``{measure: ...}``, the % in the mean of the two means."""
    from .starts import compare

    c = {m: compare([r[m] for r in a_rows], [r[m] for r in b_rows]) for m in MEASURES}
    return {"compare": c, "mean": {s: {m: c[m][f"{s}_mean"] for m in MEASURES} for s in ("a", "b")},
            "diff_pct": {m: c[m]["mid_diff_pct"] for m in MEASURES},
            "margin_pct": {m: c[m]["mid_margin_pct"] for m in MEASURES}}


def same_machine(profile_rows, backends: dict, depth: int | None) -> list[dict]:
    """Per unit holding an INT4 slice (graph mode, the seed's card) of every engine of ``backends`` at ``depth`` MoE
    layers (the engines' common depth, ``anchor.common_depth``): ``{"machine", "run_id", "depth", "key", "starts":
    {engine: n}, "labels" ({engine: its starts' labels}), "backends", "mean": {engine: {measure: ms}}, "compare":
    {measure: starts.compare(first engine, second engine)}, "diff_pct" and "margin_pct": {measure: the first engine's
    mean minus the second's, and the rule's margin, each in % of the mean of the two means, the basis of
    ``anchor.ratio_gap``}}``; [] where no unit holds them all."""
    if depth is None or len(backends) != 2:
        return []
    a, b = backends
    at: dict = {}
    for eng, be in backends.items():
        for unit, rows in measured_at(profile_rows, eng, be, depth).items():
            at.setdefault(unit, {})[eng] = rows
    out = []
    for unit, by in at.items():
        if set(by) != set(backends):
            continue
        d = decide(by[a], by[b])
        out.append({"machine": unit[0], "run_id": unit[1], "depth": depth, "key": f"{unit[0]} | {unit[1]}",
                    "starts": {e: len(by[e]) for e in backends},
                    "labels": {e: [r["label"] for r in by[e]] for e in backends}, "backends": dict(backends),
                    "mean": {a: d["mean"]["a"], b: d["mean"]["b"]},
                    "compare": d["compare"], "diff_pct": d["diff_pct"], "margin_pct": d["margin_pct"]})
    return out


def seed_units(profile_rows) -> list[dict]:
    """``same_machine`` for the seed's engines and backends (``ranges.SEED_BACKENDS``) at their common depth."""
    from .anchor import common_depth
    from .ranges import SEED_BACKENDS
    from .tables import latest_ok

    return same_machine(profile_rows, SEED_BACKENDS, common_depth(latest_ok(profile_rows), SEED_BACKENDS))


_SAID = {"no difference": "no difference beyond the margin", "undecided": "undecided by the rule (one start on a side)"}


def same_machine_line(rows: list[dict]) -> str:
    """Chapter 06's bullet for each unit of ``same_machine``: both engines' means, starts and each measure's verdict,
    every figure tagged (``same_machine_ms``, ``same_machine_starts``, ``same_machine_diff_pct``,
    ``same_machine_margin_pct``: % of the mean of the two means); "" where there is none."""
    from ..engines import prose_name
    from ..stated import q

    lines = []
    for u in rows:
        (a, b), k = list(u["starts"]), u["key"]
        parts = []
        for m, words in MEASURES.items():
            c = u["compare"][m]
            said = _SAID.get(c["verdict"]) or f"{prose_name(a if c['verdict'] == 'a lower' else b)} lower"
            parts.append(f"{words} {prose_name(a)} {q('same_machine_ms', u['mean'][a][m], '.3f', of=f'{a} | {k} | {m}')} ms "
                         f"against {prose_name(b)} {q('same_machine_ms', u['mean'][b][m], '.3f', of=f'{b} | {k} | {m}')} ms, "
                         f"{q('same_machine_diff_pct', u['diff_pct'][m], '+.2f', of=f'{k} | {m}')}% against a margin of "
                         f"{q('same_machine_margin_pct', u['margin_pct'][m], '.2f', of=f'{k} | {m}')}%: {said}")
        lines.append(f"- Between the engines, on one machine (unit `{u['run_id']}`, machine `{u['machine']}`), at "
                     f"{q('same_machine_moe_layers', u['depth'], 'd', of=k)} MoE layers, with "
                     + " and ".join(f"{q('same_machine_starts', n, 'd', of=f'{e} | {k}')} start{'s' * (n != 1)} of "
                                    f"{prose_name(e)}" for e, n in u["starts"].items())
                     + ": " + "; ".join(parts) + " (`servebook.profile.starts.compare`: a difference below the starts "
                     "rule's equivalence margin or the start-to-start spread, whichever is larger, is no difference). No "
                     "carry between machines enters this comparison.")
    return "\n".join(lines)
