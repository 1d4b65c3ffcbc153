"""The backends on the deepest slice (issue #39 item 6): within one recording unit (one machine), each INT4 backend an
engine was measured with at the engines' common depth (``anchor.common_depth``) against that engine's seed backend
(``ranges.SEED_BACKENDS``) in the same unit, never another unit's; on served time per token and GPU busy per step.

    rows = backend_comparisons(store.rows("profile_runs"))    # one row per (unit, engine, backend other than the seed's)
    md = backends_markdown(rows)                              # chapter 06's table and sentences, figures tagged; "" if none

Each measure is decided by ``starts.compare`` (the alternative as "a", the seed backend as "b"); ``agree``: both
verdicts point the same way (None: undecided, one start on a side). A null or "auto" backend is the engine's default
("default").
"""

from __future__ import annotations

from .same_machine import MEASURES, decide, measured_at

__all__ = ["backend_comparisons", "backends_markdown", "backend_figures"]


def _word(backend) -> str:
    """A backend as the page names it: null or "auto" (the engine's own choice) is "default"."""
    return "default" if backend in (None, "auto") else str(backend)


def backend_comparisons(profile_rows, depth: int | None = None, seeds: dict | None = None) -> list[dict]:
    """Per unit (machine, run id) and engine of ``seeds`` (default ``SEED_BACKENDS``), each INT4 graph backend with rows
    at ``depth`` MoE layers (default: the engines' common depth) other than the seed's, where the seed backend has rows
    there in the same unit: ``{"key", "machine", "run_id", "depth", "engine", "backend" (raw, None: default), "word",
    "seed", "starts", "labels" (each side's starts), "mean", "gap_ms", "reported": {"backend"/"seed": ...}, "compare",
    "verdict", "diff_pct", "margin_pct" ({measure: ...}; % of the mean of the two means, ``anchor.ratio_gap``'s basis),
    "agree"}``."""
    from .anchor import common_depth
    from .ranges import SEED_BACKENDS
    from .tables import latest_ok

    rows, seeds = list(profile_rows), seeds or SEED_BACKENDS
    depth = common_depth(latest_ok(rows), seeds) if depth is None else depth
    if depth is None:
        return []
    at: dict = {}
    for eng in seeds:
        for be in sorted({r.get("backend", "auto") for r in rows if r.get("engine") == eng}, key=_word):
            for unit, mine in measured_at(rows, eng, be, depth).items():
                at.setdefault((unit, eng), {})[be] = mine
    out = []
    for ((machine, run_id), eng), by in at.items():
        seed = seeds[eng]
        for be, mine in by.items():
            if be == seed or seed not in by:
                continue
            sides = {"backend": mine, "seed": by[seed]}
            d = decide(mine, by[seed])
            mean = {"backend": d["mean"]["a"], "seed": d["mean"]["b"]}
            v = {m: d["compare"][m]["verdict"] for m in MEASURES}
            out.append({"key": f"{machine} / {run_id}", "machine": machine, "run_id": run_id, "depth": depth,
                        "engine": eng, "backend": be, "word": _word(be), "seed": seed,
                        "starts": {s: len(x) for s, x in sides.items()},
                        "labels": {s: [r["label"] for r in x] for s, x in sides.items()},
                        "mean": mean, "gap_ms": {s: x["tpot_ms"] - x["busy_ms"] for s, x in mean.items()},
                        "reported": {s: sorted({r["reported_backend"] for r in x if r.get("reported_backend")}) or None
                                     for s, x in sides.items()},
                        "compare": d["compare"], "verdict": v, "diff_pct": d["diff_pct"], "margin_pct": d["margin_pct"],
                        "agree": None if "undecided" in v.values() else len(set(v.values())) == 1})
    return sorted(out, key=lambda x: (x["key"], list(seeds).index(x["engine"]), x["word"]))


def _side(c: dict, side: str) -> str:  # "backend" (the alternative) or "seed"
    return c["word"] if side == "backend" else c["seed"]


def _of(c: dict, side: str, *rest: str) -> str:
    """A tag's subject: engine / backend / machine / run id (/ measure); " / ", as a "|" would split a table's cell."""
    return " / ".join([c["engine"], _side(c, side), c["key"], *rest])


def backend_figures(rows: list[dict]) -> dict:
    """Every figure ``backends_markdown`` tags, ``{quantity: {subject: value}}`` (the registry recomputes from it)."""
    out: dict = {f"slice_backend_{n}": {} for n in ("ms", "starts", "gap_ms", "diff_pct", "margin_pct", "moe_layers")}
    for c in rows:
        out["slice_backend_moe_layers"][c["key"]] = c["depth"]
        for s in ("backend", "seed"):
            out["slice_backend_starts"][_of(c, s)] = c["starts"][s]
            out["slice_backend_gap_ms"][_of(c, s)] = c["gap_ms"][s]
            out["slice_backend_ms"].update({_of(c, s, m): c["mean"][s][m] for m in MEASURES})
        for f in ("diff_pct", "margin_pct"):
            out[f"slice_backend_{f}"].update({_of(c, "backend", m): c[f][m] for m in MEASURES})
    return out


def _said(c: dict, m: str) -> str:
    return {"no difference": "no difference beyond the margin", "undecided": "undecided (one start on a side)",
            "a lower": f"`{c['word']}` lower", "b lower": f"`{c['seed']}` lower"}[c["verdict"][m]]


def _cells(c: dict, q) -> str:
    """One comparison's table row, every figure tagged."""
    from ..engines import prose_name

    rep = c["reported"]["backend"]
    be = f"`{c['word']}`" + (f" (the log: {', '.join(f'`{x}`' for x in rep)})" if rep and rep != [c["word"]] else "")
    out = [prose_name(c["engine"]), f"{be} against `{c['seed']}`",
           " / ".join(q("slice_backend_starts", n, "d", of=_of(c, s)) for s, n in c["starts"].items())]
    out += [" / ".join(q("slice_backend_ms", c["mean"][s][m], ".3f", of=_of(c, s, m)) for s in ("backend", "seed"))
            for m in ("tpot_ms", "busy_ms")]
    out += [f"{q('slice_backend_diff_pct', c['diff_pct'][m], '+.2f', of=_of(c, 'backend', m))}% "
            f"({q('slice_backend_margin_pct', c['margin_pct'][m], '.2f', of=_of(c, 'backend', m))}%): {_said(c, m)}"
            for m in ("tpot_ms", "busy_ms")]
    out.append({True: "agree", False: "disagree", None: "not decided"}[c["agree"]])
    return "| " + " | ".join(out) + " |"


def _decided_elsewhere(c: dict, rows: list[dict]) -> list[str]:
    """The other units that decided ``c``'s comparison (same engine, backend and seed backend, both measures decided)."""
    return [o["run_id"] for o in rows if o["key"] != c["key"] and (o["engine"], o["word"], o["seed"])
            == (c["engine"], c["word"], c["seed"]) and "undecided" not in o["verdict"].values()]


def _why(c: dict, q, rows: list[dict]) -> str:
    """A comparison the two measures do not decide alike: what is known from the rows, and what would settle it (for
    one left undecided, the units that decided it on their own machine: their table, not a pooling of starts)."""
    from ..engines import prose_name

    head = f"- {prose_name(c['engine'])}, `{c['word']}` against `{c['seed']}` (unit `{c['run_id']}`): "
    if c["agree"] is None:
        one = [f"`{_side(c, s)}`" for s, n in c["starts"].items() if n < 2]
        other = _decided_elsewhere(c, rows)
        then = (f" Unit{'s' if len(other) > 1 else ''} {', '.join(f'`{u}`' for u in other)} decided it with two starts "
                "or more on each side on a machine of its own: its table stands for this comparison (starts of "
                "different machines are not pooled).") if other else ""
        return (head + f"not decided: {' and '.join(one)} {'has' if len(one) == 1 else 'have'} one start, and the rule "
                "decides only with two starts or more on each side; a second start of " + " and ".join(one)
                + " in this unit would decide it." + then)
    gap = " against ".join(f"`{_side(c, s)}` {q('slice_backend_gap_ms', g, '.3f', of=_of(c, s))}"
                           for s, g in c["gap_ms"].items())
    return (head + f"the served time says {_said(c, 'tpot_ms')}, the GPU busy time says {_said(c, 'busy_ms')}. Hypothesis: "
            "the backends differ in the time a served token spends with no kernel running (host work, launch gaps), which "
            f"the GPU busy time leaves out: served minus GPU busy {gap} ms per token. The GPU idle per decode step of both "
            "backends in this unit (table decode_breakdown, category `gpu idle`, one profile per start) read beside each "
            "start's served time would settle it.")


def backends_markdown(rows: list[dict]) -> str:
    """Chapter 06's section of ``backend_comparisons``' rows: per unit a table of each backend against its engine's
    seed backend (starts, served ms per token, GPU busy ms per step, each measure's difference, margin and verdict,
    whether they agree), then a sentence per comparison the two measures do not decide alike; "" where there is none."""
    from ..stated import q

    out = []
    for key in dict.fromkeys(c["key"] for c in rows):
        mine = [c for c in rows if c["key"] == key]
        u = mine[0]
        out.append(f"**Backends at {q('slice_backend_moe_layers', u['depth'], 'd', of=key)} MoE layers, on one machine** (unit "
                   f"`{u['run_id']}`, machine `{u['machine']}`; no carry between machines): each backend against its "
                   "engine's seed backend, both measured in this unit. Served time per token: timed greedy requests without "
                   "the profiler; GPU busy: kernels running per decode step, from each start's profile. A difference below "
                   "the starts rule's equivalence margin or the start-to-start spread, whichever is larger, is no "
                   "difference (`servebook.profile.starts.compare`; difference and margin in % of the mean of the two).\n\n"
                   "| engine | backend against the seed's | starts (this / seed's) | served ms per token (this / seed's) | "
                   "GPU busy ms per step (this / seed's) | served: difference (margin) | GPU busy: difference (margin) | served and busy |\n"
                   "|---|---|---|---|---|---|---|---|\n" + "\n".join(_cells(c, q) for c in mine))
        why = [_why(c, q, rows) for c in mine if not c["agree"]]
        if why:
            out.append("\n".join(why))
    return "\n\n".join(out)
