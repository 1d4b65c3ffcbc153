"""Which kernels make a backend's difference, and the engines' kernels side by side (issue #39 items 5 and 6): a
backend and its engine's seed backend, both measured in one recording unit (``backends_at_depth.backend_comparisons``),
matched kernel by kernel by name and stream over a decode step; the seed's two engines in one unit
(``same_machine.same_machine``), whose kernels have other names, met by category; both from each start's kernel table
(``traces/<slug>.kernels.json``, ``linearity.kernel_table``).

    shift = kernel_shift(tables_a, tables_b)       # per kernel name: launches and µs per step on each side, the difference
    md = kernel_shift_markdown(store, comparisons) # chapter 06's tables under the backends' comparisons; "" if no tables
    sides = category_sides(tables_a, tables_b)     # per category: each side's kernels by name, µs per step, difference
    md = engine_kernels_markdown(store, units)     # chapter 06's side by side of the engines within one unit

A kernel's time per step is the sum over its positions in the step of the position's median duration times the share
of steps it appears in; each side is the mean of its starts' tables. A kernel one side launches and the other does not
shows 0 launches on the side without it: kernels are matched by name and stream, not by position (two backends run
different code, so their positions in the step are not comparable), and a side stream's kernels are kept apart from
the main stream's (they overlap it, and a kernel that waits there for the multiprocessors lasts longer without working).
"""

from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["kernel_shift", "kernel_shift_markdown", "kernel_shift_figures", "category_sides", "engine_kernels_markdown",
           "engine_kernel_figures", "SHOWN", "MIN_US", "NAMED"]

SHOWN = 8      # the kernels listed per comparison, largest difference first
MIN_US = 5.0   # a kernel whose time per step moves by less is not listed (a few µs is a kernel's own jitter)

_NOISE = re.compile(r"^void |\(anonymous namespace\)::|at::native::|std::|c10::")


def _args_cut(s: str) -> str:
    """``s`` without its argument list: from the first "(" outside every template's "<...>" on (a lambda's or a
    signature's parentheses inside a template argument stay)."""
    depth = 0
    for i, ch in enumerate(s):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


_PARENS = re.compile(r"\([^()]+\)")   # a parenthesised group holding no other ("(…)" is held as one character)
_LAMBDA = re.compile(r"::\{lambda\((?:…)?\)#\d+\}|::operator\(\)\(\)(?: const)?")


def _innermost(s: str) -> tuple[int, int] | None:
    """The span of the last-closing "<...>" of ``s`` among the deepest not already "<…>", or None."""
    best, opened = None, []
    for i, ch in enumerate(s):
        if ch == "<":
            opened.append(i)
        elif ch == ">" and opened:
            a = opened.pop()
            if s[a + 1:i] != "…" and "<" not in s[a + 1:i].replace("<…>", ""):
                best = (a, i)
    return best


def short_name(name: str, width: int = 96) -> str:
    """A kernel's name as a table shows it: ``void``, anonymous namespaces and ``at::native::``/``std::`` dropped,
    argument lists shown as ``(…)`` and lambdas dropped, then, while longer than ``width``, template arguments shown
    as ``<…>`` from the right (never cut inside a word: the parts of the name that stay are whole)."""
    s = name
    while _NOISE.search(s):
        s = _NOISE.sub("", s)
    t = s.replace("(…)", "\0")
    while _PARENS.search(t):
        t = _PARENS.sub("\0", t)
    s = t.replace("\0", "(…)")
    s = _LAMBDA.sub("", _args_cut(s)).strip()
    while len(s) > width and (span := _innermost(s)):
        s = s[:span[0]] + "<…>" + s[span[1] + 1:]
    return s


def _per_step(table: dict) -> dict:
    """``{(name, stream rank): {"count", "us", "category"}}`` of one kernel table: launches per step and µs per step
    (median x presence)."""
    from .kernels import classify

    out: dict = defaultdict(lambda: {"count": 0.0, "us": 0.0, "category": ""})
    for pos, i in enumerate(table["seq"]):
        name, share = table["names"][i], float(table["present"][pos])
        x = out[(name, int(table["stream_rank"][pos]))]
        x["count"] += share
        x["us"] += float(table["median_us"][pos]) * share
        x["category"] = x["category"] or classify(name, table["cat"][pos])
    return out


def _mean(tables: list[dict]) -> dict:
    """The starts' per-step kernels, averaged kernel by kernel (a kernel missing from a start counts 0 there)."""
    each = [_per_step(t) for t in tables]
    keys = dict.fromkeys(k for e in each for k in e)
    return {k: {"count": sum(e[k]["count"] for e in each if k in e) / len(each),
                "us": sum(e[k]["us"] for e in each if k in e) / len(each),
                "category": next(e[k]["category"] for e in each if k in e)} for k in keys}


def stream_word(rank: int) -> str:
    """A stream rank as the table says it: 0 (the stream that runs the most kernels) is "main"."""
    return "main" if rank == 0 else f"side {rank}"


def kernel_shift(tables_a: list[dict], tables_b: list[dict]) -> list[dict]:
    """Every kernel (name and stream rank) of either side: ``{"name", "short", "stream", "category", "count": {"a",
    "b"}, "us": {"a", "b"}, "diff_us" (a - b)}``, largest ``|diff_us|`` first; [] where a side has no table."""
    if not tables_a or not tables_b:
        return []
    a, b = _mean(tables_a), _mean(tables_b)
    zero = {"count": 0.0, "us": 0.0, "category": ""}
    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key, zero), b.get(key, zero)
        out.append({"name": key[0], "short": short_name(key[0]), "stream": stream_word(key[1]),
                    "category": x["category"] or y["category"], "count": {"a": x["count"], "b": y["count"]},
                    "us": {"a": x["us"], "b": y["us"]}, "diff_us": x["us"] - y["us"]})
    seen: dict = {}
    for r in out:   # two names cut to one short name on one stream stay two subjects
        n = seen[(r["short"], r["stream"])] = seen.get((r["short"], r["stream"]), 0) + 1
        r["short"] += f" #{n}" if n > 1 else ""
    return sorted(out, key=lambda r: -abs(r["diff_us"]))


def _pick(tables: dict, labels: list[str]) -> list[dict]:
    """The kernel tables of ``labels`` (in order) among a run's (``linearity.load_kernel_tables``); labels without one
    are left out."""
    return [tables[lab] for lab in labels if lab in tables]


def _shifts(store, comparisons: list[dict]) -> list[tuple[dict, list[dict], dict]]:
    """Per comparison with kernel tables on both sides: (comparison, its kernel shift, tables per side counted)."""
    from .linearity import load_kernel_tables

    tables, out = load_kernel_tables(store), []
    for c in comparisons:
        ta, tb = _pick(tables, c["labels"]["backend"]), _pick(tables, c["labels"]["seed"])
        shift = kernel_shift(ta, tb)
        if shift:
            out.append((c, shift, {"backend": len(ta), "seed": len(tb)}))
    return out


def _of(c: dict, *rest: str) -> str:
    return " / ".join([c["engine"], c["word"], c["key"], *rest])


def _kof(c: dict, k: dict, *rest: str) -> str:
    return _of(c, k["short"], k["stream"], *rest)


def _listed(shift: list[dict]) -> list[dict]:
    return [k for k in shift[:SHOWN] if abs(k["diff_us"]) >= MIN_US]


def _by_stream(shift: list[dict]) -> dict:
    """``{stream word: the difference of all its kernels, µs per step}``, main first."""
    out: dict = {}
    for k in sorted(shift, key=lambda k: (k["stream"] != "main", k["stream"])):
        out[k["stream"]] = out.get(k["stream"], 0.0) + k["diff_us"]
    return out


def kernel_shift_figures(store, comparisons: list[dict]) -> dict:
    """Every figure ``kernel_shift_markdown`` tags, ``{quantity: {subject: value}}``."""
    out: dict = {f"backend_kernel_{n}": {} for n in ("us", "launches", "diff_us", "stream_diff_us", "tables")}
    for c, shift, n in _shifts(store, comparisons):
        out["backend_kernel_tables"].update({_of(c, c["word"]): n["backend"], _of(c, c["seed"]): n["seed"]})
        for k in _listed(shift):
            out["backend_kernel_diff_us"][_kof(c, k)] = k["diff_us"]
            for s, side in (("a", c["word"]), ("b", c["seed"])):
                out["backend_kernel_us"][_kof(c, k, side)] = k["us"][s]
                out["backend_kernel_launches"][_kof(c, k, side)] = k["count"][s]
        out["backend_kernel_stream_diff_us"].update({_of(c, st): d for st, d in _by_stream(shift).items()})
    return out


def kernel_shift_markdown(store, comparisons: list[dict]) -> str:
    """Chapter 06's kernel tables under the backends' comparisons: per comparison with kernel tables on both sides, the
    kernels whose time per step moves most (at most ``SHOWN``, each by ``MIN_US`` or more), matched by name and stream,
    with their category, launches and µs per step on each side, and each stream's kernels summed; "" where no
    comparison has tables."""
    from ..engines import prose_name
    from ..stated import q

    out = []
    for c, shift, n in _shifts(store, comparisons):
        listed = _listed(shift)
        if not listed:
            continue
        a, b = c["word"], c["seed"]
        rows = [f"| {k['category']} | `{k['short']}` | {k['stream']} | "
                f"{q('backend_kernel_launches', k['count']['a'], '.0f', of=_kof(c, k, a))} / "
                f"{q('backend_kernel_launches', k['count']['b'], '.0f', of=_kof(c, k, b))} | "
                f"{q('backend_kernel_us', k['us']['a'], '.1f', of=_kof(c, k, a))} / "
                f"{q('backend_kernel_us', k['us']['b'], '.1f', of=_kof(c, k, b))} | "
                f"{q('backend_kernel_diff_us', k['diff_us'], '+.1f', of=_kof(c, k))} |" for k in listed]
        streams = "; ".join(f"`{st}` {q('backend_kernel_stream_diff_us', d, '+.1f', of=_of(c, st))}"
                            for st, d in _by_stream(shift).items())
        out.append(
            f"*Which kernels make it: {prose_name(c['engine'])} `{a}` against `{b}`* (unit `{c['run_id']}`; kernel tables "
            f"of {q('backend_kernel_tables', n['backend'], 'd', of=_of(c, a))} / "
            f"{q('backend_kernel_tables', n['seed'], 'd', of=_of(c, b))} starts, each side the mean of its starts; "
            "kernels matched by name and stream over a decode step; those that move most, at most "
            f"`SHOWN = {SHOWN}`, each by `MIN_US = {MIN_US:g}` µs per step or more (`servebook.profile.backend_kernels`); "
            "launches per step rounded):\n\n"
            f"| category | kernel | stream | launches per step (`{a}` / `{b}`) | µs per step (`{a}` / `{b}`) | difference "
            "(µs) |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"All kernels of each stream together, µs per step: {streams}. Kernel times do not add up to the GPU busy "
            "time: kernels on a side stream overlap the main stream's, and a kernel that waits for the multiprocessors "
            "another stream holds lasts longer without doing more work (its time is contention, not work), so only the "
            "profile's GPU busy time above, the union of the kernels' intervals, measures the step.")
    return "\n\n".join(out)


# -- the engines side by side (issue #39 item 5): their kernels differ by name, so they meet by category -------------
NAMED = 3   # each engine's kernels named per category, largest first


def category_sides(tables_a: list[dict], tables_b: list[dict]) -> list[dict]:
    """Per kernel category (``kernels.CATEGORIES`` order): ``{"category", "us": {"a", "b"} (all its kernels, all streams,
    µs per step, each side the mean of its starts), "diff_us" (a - b), "kernels": {"a"/"b": [each kernel of that side
    in the category, largest first: {"short", "stream", "us"}]}}``; [] where a side has no table."""
    from .kernels import CATEGORIES

    shift = kernel_shift(tables_a, tables_b)
    out = []
    for cat in [c for c in CATEGORIES if c != "gpu idle"]:
        mine = [k for k in shift if k["category"] == cat]
        if not mine:
            continue
        sides = {s: sorted(({"short": k["short"], "stream": k["stream"], "us": k["us"][s]} for k in mine if k["us"][s] > 0),
                           key=lambda x: -x["us"]) for s in ("a", "b")}
        us = {s: sum(k["us"][s] for k in mine) for s in ("a", "b")}
        out.append({"category": cat, "us": us, "diff_us": us["a"] - us["b"], "kernels": sides})
    return out


def _eof(u: dict, *rest: str) -> str:
    """A subject of the engines' side by side: engine pair / machine / run id (/ category / ...); " / ", as a "|" in a
    tag would split a table's cell."""
    return " / ".join([" and ".join(f"{e} {b}" for e, b in u["backends"].items()), u["machine"], u["run_id"], *rest])


def _engine_sides(store, units: list[dict]) -> list[tuple[dict, list[dict], dict]]:
    from .linearity import load_kernel_tables

    tables, out = load_kernel_tables(store), []
    for u in units:
        (a, b) = list(u["backends"])
        ta, tb = _pick(tables, u["labels"][a]), _pick(tables, u["labels"][b])
        rows = category_sides(ta, tb)
        if rows:
            out.append((u, rows, {a: len(ta), b: len(tb)}))
    return out


def engine_kernel_figures(store, units: list[dict]) -> dict:
    """Every figure ``engine_kernels_markdown`` tags, ``{quantity: {subject: value}}``."""
    out: dict = {f"engine_kernel_{n}": {} for n in ("us", "category_us", "diff_us", "tables")}
    for u, rows, n in _engine_sides(store, units):
        (a, b) = list(u["backends"])
        out["engine_kernel_tables"].update({_eof(u, e): k for e, k in n.items()})
        for r in rows:
            out["engine_kernel_diff_us"][_eof(u, r["category"])] = r["diff_us"]
            for s, e in (("a", a), ("b", b)):
                out["engine_kernel_category_us"][_eof(u, r["category"], e)] = r["us"][s]
                for k in r["kernels"][s][:NAMED]:
                    out["engine_kernel_us"][_eof(u, r["category"], e, k["short"], k["stream"])] = k["us"]
    return out


def engine_kernels_markdown(store, units: list[dict]) -> str:
    """Chapter 06's side by side of the engines within one unit (``same_machine.same_machine``'s rows): per kernel
    category, each engine's kernels by name (at most ``NAMED``, largest first) and µs per step, and the category's
    difference; "" where no unit has kernel tables for both."""
    from ..engines import prose_name
    from ..stated import q

    out = []
    for u, rows, n in _engine_sides(store, units):
        (a, b) = list(u["backends"])

        def cell(r, s, e):
            ks = r["kernels"][s]
            named = "; ".join(f"`{k['short']}` (`{k['stream']}`) "
                              + q("engine_kernel_us", k["us"], ".1f", of=_eof(u, r["category"], e, k["short"], k["stream"]))
                              for k in ks[:NAMED])
            return (named + ("; and others" if len(ks) > NAMED else "")) or "none"

        lines = [f"| {r['category']} | {cell(r, 'a', a)} | {cell(r, 'b', b)} | "
                 f"{q('engine_kernel_category_us', r['us']['a'], '.1f', of=_eof(u, r['category'], a))} / "
                 f"{q('engine_kernel_category_us', r['us']['b'], '.1f', of=_eof(u, r['category'], b))} | "
                 f"{q('engine_kernel_diff_us', r['diff_us'], '+.1f', of=_eof(u, r['category']))} |" for r in rows]
        pa, pb = prose_name(a), prose_name(b)
        out.append(
            f"*The engines' kernels side by side: {pa} `{u['backends'][a]}` and {pb} `{u['backends'][b]}`* (unit "
            f"`{u['run_id']}`, {q('engine_kernel_tables', n[a], 'd', of=_eof(u, a))} / "
            f"{q('engine_kernel_tables', n[b], 'd', of=_eof(u, b))} starts' kernel tables, each side the mean of its "
            "starts; the engines run kernels of other names, so they meet by category (`servebook.profile.kernels.RULES`); "
            f"per category each engine's largest kernels, at most `NAMED = {NAMED}`, with their stream and µs per step):\n\n"
            f"| category | {pa}'s kernels (µs per step) | {pb}'s kernels (µs per step) | µs per step ({pa} / {pb}) | "
            "difference (µs) |\n|---|---|---|---|---|\n" + "\n".join(lines) + "\n\n"
            "These are kernel times summed over streams (a side stream's kernels overlap the main stream's), not the GPU "
            "busy time: the busy time compared above decides between the engines; this table says which kernels each "
            "category holds on each side.")
    return "\n\n".join(out)
