"""Chapter 06's account of a reference recording made of units (issue #39): per engine its depth ladder of the one
unit it is read from (``ladders``), the engine's other units beside it as evidence, and the engines' deepest slices
compared only through each unit's anchor configuration (``anchor``), every figure tagged (``stated.q``).

    md = units_markdown(RunStore.at("data/runs/h200x1-ref"))   # "" for a run that is no recording of units
"""

from __future__ import annotations

from .anchor import CARRY_SHARE, carry_spread, common_depth, deepest_ratios, deepest_starts, other_units, ratio_gap
from .ladders import RULE, ladder_units, linearity_key
from .tables import latest_ok
from .units import LADDER_PLANS

__all__ = ["units_markdown"]


def units_markdown(store) -> str:
    """Chapter 06's account of a reference recording made of units (rows with a machine identity; "" otherwise): per
    engine its depth ladder (table slice_linearity) of the one unit it is read from (``ladders``'s rule; where the
    engine has other units, the rule in words and each other unit listed beside it as evidence, never pooled) or the
    plan that records it, and the engines' deepest slices compared only through their own unit's reference
    configuration (``relative_to_reference``, decided by ``starts.compare``)."""
    from ..engines import prose_name
    from .ranges import SEED_BACKENDS
    from .same_machine import same_machine, same_machine_line

    prof = latest_ok(store.rows("profile_runs"))
    # a recording of units: every row names its machine and the run holds the anchor configuration (a live book's
    # profiles name their machine too, and are no depth ladder)
    if not prof or not all(p.get("machine") for p in prof) or not any(p.get("reference") for p in prof):
        return ""
    lin, lines, deep = store.rows("slice_linearity"), [], {}
    others = {(o["engine"], o["run_id"], o["machine"]): o for o in other_units(prof, SEED_BACKENDS)}
    for eng, be in SEED_BACKENDS.items():
        ranked = ladder_units(prof, eng, be)
        steps = _unit_lin(lin, eng, be, ranked[0], "step") if ranked else []
        if not steps:
            lines.append(f"- {prose_name(eng)} ({be}): no depth ladder in this run; `{LADDER_PLANS[eng]}` records "
                         "it, on a machine of its own with the anchor configuration measured again.")
            continue
        pred = next(iter(_unit_lin(lin, eng, be, ranked[0], "prediction")), None)
        pred_key = linearity_key(pred, lin) + " | " + pred["depths"] if pred else None
        lines.append(f"- {prose_name(eng)} ({be}, INT4 experts, machine `{steps[0]['machine']}`), GPU busy per MoE "
                     "layer: " + _per_layer(steps, lin)
                     + (f"; the deepest slice predicted from the two shallowest "
                        f"{_q('linearity_error_pct', pred['busy_error_pct'], '+.1f', pred_key)}"
                        "% off its measured GPU busy time" if pred else "") + ".")
        extra = [u for u in ranked[1:] if not u["anchor_only"]]
        if extra:
            lines[-1] += (f" Read from unit `{ranked[0]['run_id']}` by the rule: {RULE}; the engine's other "
                          f"unit{'s' * (len(extra) > 1)}, evidence beside it, never pooled with it:")
            lines += [_other_unit_line(others[(eng, u["run_id"], u["machine"])], _unit_lin(lin, eng, be, u, "step"),
                                       lin) for u in extra]
        deep[eng] = deepest_starts(prof, eng, be)
    if len(deep) == 2 and all(deep.values()):
        depth = common_depth(prof, {e: ps[0]["backend"] for e, ps in deep.items()})
        deep = {e: deepest_starts(prof, e, ps[0]["backend"], depth) for e, ps in deep.items()}
        one = same_machine_line(same_machine(prof, SEED_BACKENDS, depth))   # units with both engines at that depth lead
        spread = carry_spread(store, {e: ps[0]["backend"] for e, ps in deep.items()})
        lines += [one, _engines_line(prof, deep, depth, spread, bool(one))]
    return "\n".join(ln for ln in lines if ln)


def _q(name: str, value, fmt: str, of: str) -> str:
    from ..stated import q

    return q(name, value, fmt, of=of)


def _unit_lin(lin: list[dict], eng: str, be: str, unit: dict, kind: str) -> list[dict]:
    """The slice_linearity rows of ``kind`` of one unit (``ladder_units``' entry) of an engine's INT4 ladder (graph
    mode, the seed's card) with backend ``be``."""
    return [r for r in lin if r["engine"] == eng and r.get("backend") == be and r["kind"] == kind
            and r.get("quant") == "card" and r.get("mode") == "graph" and r.get("card") == "kimi-k2.5"
            and (r.get("machine"), r.get("run_id")) == (unit["machine"], unit["run_id"])]


def _per_layer(steps: list[dict], lin: list[dict]) -> str:
    """A unit's GPU busy per MoE layer between each pair of its consecutive depths, every figure tagged."""
    out = []
    for r in steps:
        key = linearity_key(r, lin) + " | " + r["depths"]
        out.append(f"{_q('linearity_per_layer_ms', r['per_layer_ms'], '.4f', key)} ms between "
                   f"{_q('linearity_moe_layers', r['moe_from'], 'd', key + ' | from')} and "
                   f"{_q('linearity_moe_layers', r['moe_to'], 'd', key + ' | to')} MoE layers")
    return "; ".join(out)


def _other_unit_line(o: dict, steps: list[dict], lin: list[dict]) -> str:
    """One other unit of an engine, as evidence: its own per-layer times and its ratio to its own anchor at the deepest
    depth it shares with the unit read."""
    head = f"  - unit `{o['run_id']}` (machine `{o['machine']}`): " + (
        f"GPU busy per MoE layer {_per_layer(steps, lin)}" if steps else "one depth, no per-layer time")
    if o["ratio"] is None or o["read_ratio"] is None:
        why = ("no depth in common with the unit read" if o["depth"] is None
               else "a unit without its anchor configuration")
        return head + f"; not compared ({why})."
    return (head + f"; at {_q('other_unit_moe_layers', o['depth'], 'd', o['key'])} MoE layers, the deepest depth both "
            f"units have, its slice's GPU busy time is {_q('other_unit_ratio', o['ratio'], '.3f', o['key'])} x its own "
            f"unit's anchor, against {_q('other_unit_ratio', o['read_ratio'], '.3f', o['key'] + ' | read')} x for unit "
            f"`{o['read_run_id']}`.")


def _spread_words(sp: dict, gap: dict) -> str:
    """The carry's per-category spread and the margin it widens, every figure tagged."""
    from ..stated import q

    lo, hi = (min(sp["factors"], key=sp["factors"].get), max(sp["factors"], key=sp["factors"].get))
    return (f", widened by the carry's per-category spread of "
            f"{q('carry_spread_pct', sp['spread_pct'], '.2f', of='engines')}% "
            f"to {q('reference_ratio_widened_pct', gap['widened_pct'], '.2f', of='engines')}%: the anchor "
            f"configuration's kernel categories of at least `{CARRY_SHARE:.0%}` of its GPU busy time take from "
            + " to ".join(f"{q('carry_category_factor', sp['factors'][k], '.3f', of=k)} x ({k})" for k in (lo, hi))
            + f" on machine `{sp['machines'][1]}` what they take on `{sp['machines'][0]}`")


def _engines_line(prof: list[dict], deep: dict, depth: int | None, spread: dict | None = None,
                  beside: bool = False) -> str:
    """The engines' slices at the deepest depth both have (``depth`` MoE layers), each as a ratio to its own machine's
    reference configuration, decided by the starts rule over those ratios, its margin widened by ``spread``
    (``carry_spread``) where they come from two machines; ``beside``: evidence after a comparison on one machine."""
    from ..engines import prose_name
    from ..stated import q

    ratio = deepest_ratios(prof, {e: ps[0]["backend"] for e, ps in deep.items()})
    if depth is None:
        return "- The engines are not compared: their INT4 ladders share no depth."
    if len(ratio) < len(deep):
        lack = sorted({p["machine"] for e, ps in deep.items() if e not in ratio for p in ps})
        return (f"- The engines are not compared: no anchor configuration measured on machine {', '.join(lack)}; "
                "a unit without its anchor row cannot be compared with other units.")
    (a, ra), (b, rb) = ratio.items()
    # the difference and the margin it was decided against (widened by the carry's spread), in % of the pair's mean
    gap = ratio_gap(ra, rb, spread["spread_pct"] if spread else 0.0)
    said = {"no difference": "no difference beyond the starts' spread", "undecided": "undecided (one start on a side)",
            "a lower": f"{prose_name(a)} lower", "b lower": f"{prose_name(b)} lower",
            "not decided": "not decided: within the carry's per-category spread"}[gap["verdict"]]
    said += (f" (they differ by {q('reference_ratio_diff_pct', gap['diff_pct'], '.2f', of='engines')}% of their mean, "
             f"against a margin of {q('reference_ratio_margin_pct', gap['margin_pct'], '.2f', of='engines')}%"
             + (_spread_words(spread, gap) if spread else "") + ")")
    machines = "one machine" if len({p["machine"] for ps in deep.values() for p in ps}) == 1 else "two machines"
    return (("- Through the anchors as well, evidence beside the comparison on one machine above (that one is the "
             "engines' comparison: it assumes nothing about two machines): between the engines" if beside
             else "- Between the engines")
            + f", measured on {machines}"
            f", only through each machine's anchor configuration, at the deepest depth both engines have "
            f"({q('reference_ratio_depth', depth, 'd', of='engines')} MoE layers): the slice's GPU busy time is "
            + " and ".join(f"{q('reference_ratio', sum(r) / len(r), '.3f', of=e)} x its machine's anchor for "
                           f"{prose_name(e)} ({q('reference_ratio_starts', len(r), 'd', of=e)} "
                           f"start{'s' * (len(r) != 1)})"
                           for e, r in ratio.items())
            + f": {said}, decided by `servebook.profile.starts.compare` (a difference below the starts rule's "
            "equivalence margin or the start-to-start spread, whichever is larger, is no difference"
            + ("; across two machines, one within that margin plus the carry's per-category spread is not decided"
               if spread else "") + "). That the two machines differ by one factor in every kernel is an assumption"
            + ("; the spread above measures how far it fails on the anchor" if spread else "")
            + ("; the comparison on one machine above needs no such assumption." if beside
               else "; both engines profiled in one unit settle it."))
