"""The front page's first section: the investigation's question and its current answer for the seed case, read from the
what-if book's tables (``seed_range``, ``seed_projection``, ``seed_fixes``, ``seed_comm``: chapter 06 records them).

    seed_answer(whatif_summaries)   # HTML; every figure tagged as the what-if's chapter 06 tags it

The answer says: the likely cause (the part of the decode step whose projected time SGLang exceeds vLLM's by most),
the first change (the fix with the largest expected gain), the projected range of each engine, how sure (what the
figures rest on), and what settles it (the change's own check command, run on the seed's host).
"""

from __future__ import annotations

import html

from .engines import prose_name

__all__ = ["seed_answer", "likely_cause"]

def seed_next_launch() -> str:
    """What the seed did next, said beside a first change that is the seed's NCCL block: its relaunch of SGLang
    (``data/reference/seed-case.json``, ``next_sglang_launch``: the options it changed together with the block, and
    its rate where the seed recorded one)."""
    from .stated.figures import seed_case

    launch = seed_case()["next_sglang_launch"]
    opts = [f"<code>{html.escape(o)}</code>" for o in launch["options"]]
    listed = ", ".join(opts[:-1]) + f" and {opts[-1]}" if len(opts) > 1 else "".join(opts)
    rate = launch.get("single_stream_tok_s")
    measured = (f"it ran {rate} tok/s single stream, with the block and the other changes together" if rate is not None
                else f"its rate is {html.escape(launch.get('rate_note') or 'not recorded')} (shared/seeds), so the block "
                     "has not been measured on its own")
    return (f"The seed's next SGLang launch combined this NCCL block with {listed}; {measured}, and that launch changed "
            f"{_WORDS.get(len(opts), len(opts))} other things at once.")


_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def likely_cause(projection: list[dict]) -> dict | None:
    """The category whose projected ms per token SGLang exceeds vLLM's by most (``profile.seed.gap_by_category``), or None."""
    from .profile.seed import gap_by_category

    return next((g for g in gap_by_category(projection) if g.get("diff_ms") is not None), None) if projection else None


def _cause_text(cause: dict, rng: dict, comm_rows: list[dict]) -> str:
    """The likely cause: the part whose projected time differs most, its share of the projected gap, and (for
    communication) the NCCL settings the projection gives each engine."""
    from .profile.verdict import t
    from .stated import q

    e = html.escape
    comm = {r["engine"]: r for r in comm_rows}
    env = (f" The NCCL settings the projection gives each engine's all-reduce, as the seed launched them: SGLang "
           f"{e(str(comm['sglang'].get('env')))}, vLLM {e(str(comm['vllm'].get('env')))}."
           if cause["category"] == "communication" and {"sglang", "vllm"} <= set(comm) else "")
    share = (f", of a projected gap of {t('seed_range', rng['gap'], 'point_ms', '.2f')} ms per token "
             f"({t('seed_range', rng['gap'], 'low_ms', '.2f')} to {t('seed_range', rng['gap'], 'high_ms', '.2f')}; the "
             f"seed's {t('seed_range', rng['gap'], 'seed_gap_ms', '.2f')}): the largest part, not all of it; the other "
             "parts are in chapter 06's table seed_projection" if "gap" in rng else "")
    return (f"<b>A hypothesis:</b> the <i>{e(cause['category'])}</i> part of each decode step, the part whose projected time "
            f"differs most between the engines: SGLang's takes "
            f"{q('seed_projected_part_ms', cause['diff_ms'], '.2f', of=cause['category'])} ms per token longer than vLLM's"
            f"{share}.{env}")


def _where_seed(r: dict) -> str:
    """Where the seed's rate lies in an engine's projected range (a ``seed_range`` row): inside or outside it, and at its
    slow or fast end where it lies within 1% of that end (SGLang's 63.6 tok/s against a range from 63.55: "inside" alone
    reads as well inside)."""
    seed, lo, hi = r.get("seed_tok_s"), r.get("low_tok_s"), r.get("high_tok_s")
    inside = bool(r.get("seed_inside"))
    where = "inside it" if inside else "outside it"
    if isinstance(seed, (int, float)) and isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and seed:
        if abs(seed - lo) <= 0.01 * seed:
            where += ", at its slow end" if inside else ", just below its slow end"
        elif abs(seed - hi) <= 0.01 * seed:
            where += ", at its fast end" if inside else ", just above its fast end"
    return where


def seed_answer(whatifs: list[dict]) -> str:
    """The question and the answer, from the first what-if book that recorded the seed verdict; a line saying so where
    none did."""
    from .profile.verdict import t
    from .stated import q

    from .stated.figures import seed_case

    book = next((b for b in whatifs if b["store"].rows("seed_range")), None)
    c = seed_case()
    question = ("<p><b>The question:</b> why is an LLM-serving engine slow on this hardware, and what fixes it? The case "
                f"this book follows (the seed, <code>{html.escape(c['file'])}</code>): {html.escape(str(c['model']))} on the "
                f"hardware profile <code>{html.escape(str(c['profile']))}</code> at tensor parallel {c['tp']}, where SGLang "
                f"{html.escape(str(c['engines']['sglang']).split(' ')[0])} decoded more slowly than vLLM single stream")
    if book is None:
        return "<h2>The question</h2>" + question + ". No what-if book here has recorded the seed's verdict yet.</p>"
    store, e = book["store"], html.escape
    rng = {r["who"]: r for r in store.rows("seed_range")}
    proj = store.rows("seed_projection")
    fixes = store.rows("seed_fixes")
    f0 = next((f for f in fixes if f.get("expected_gain_ms") is not None), None)
    seed = "; ".join(f"{prose_name(w)} {t('seed_range', rng[w], 'seed_tok_s', '.1f')} tok/s" for w in ("sglang", "vllm") if w in rng)
    cause = likely_cause(proj)
    tot = {r["engine"]: r for r in proj if r.get("category") == "total"}
    ref = next(iter(tot.values()), {}).get("reference_run", "?")
    verdict = f'{e(book["name"])}/06_findings.html'
    rows = [("question", question + f" (the seed's own figures: {seed}).</p>")]
    if cause:
        rows.append(("likely cause", _cause_text(cause, rng, store.rows("seed_comm"))))
    if f0:
        rows.append(("first change", f"{e(f0['change'])} for {e(prose_name(f0['engine']))}: expected, over the projected rate, "
                     f"{t('seed_fixes', f0, 'gain_tok_s', '+.1f')} tok/s ({t('seed_fixes', f0, 'expected_gain_ms', '.2f')} ms per token; "
                     f"{t('seed_fixes', f0, 'gain_low_ms', '.2f')} to {t('seed_fixes', f0, 'gain_high_ms', '.2f')} ms)."))
    if rng:
        rows.append(("range", "Projected single stream, every assumption at either end: " + "; ".join(
            f"{prose_name(w)} {t('seed_range', rng[w], 'point_tok_s', '.1f')} tok/s ({t('seed_range', rng[w], 'low_tok_s', '.1f')} "
            f"to {t('seed_range', rng[w], 'high_tok_s', '.1f')}; the seed's rate {_where_seed(rng[w])})"
            for w in ("sglang", "vllm") if w in rng) + "."))
    rows.append(("how sure", f"A hypothesis, {e(str((f0 or {}).get('label') or 'predicted'))}: trace profiles of both engines "
                 f"recorded on an H200 (<code>data/runs/{e(str(ref))}</code>) carried to the seed's GPUs by datasheet ratios, and "
                 "all-reduce latencies published for other eight-GPU PCIe hosts; nothing was measured on the seed's host."))
    if f0 and f0.get("engine") == "sglang" and "NCCL" in str(f0.get("change")):
        rows.append(("not yet tried alone", seed_next_launch()))
    if f0:
        rows.append(("what settles it", f"On the seed's host, the change's own check, compared with the launch without it: "
                     f"<code>{e(f0['check_command'])}</code>; with <code>NCCL_DEBUG=INFO</code> the launch log names the protocol "
                     "NCCL picked."))
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return (f'<h2>The answer so far</h2><section class="sb-seed" id="answer" data-book="{e(book["name"])}"><table>{body}</table>'
            f'<p>From the tables of the what-if book <a href="{e(book["name"])}/index.html">{e(book["name"])}</a>; its '
            f'<a href="{verdict}">chapter 06</a> opens with the whole verdict.</p></section>')
