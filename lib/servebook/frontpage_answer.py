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
from .paths import book_root
from .stated.text import number_word

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
            f"{number_word(len(opts))} other things at once.")


def likely_cause(projection: list[dict]) -> dict | None:
    """The category whose projected ms per token SGLang exceeds vLLM's by most (``profile.seed.gap_by_category``), or None."""
    from .profile.seed import gap_by_category

    return next((g for g in gap_by_category(projection) if g.get("diff_ms") is not None), None) if projection else None


def _cause_text(cause: dict, rng: dict, comm_rows: list[dict]) -> str:
    """The likely cause: the part whose projected time differs most; how much of the seed's gap the projection places
    (its range, and whether it holds no difference or the seed's gap); for communication, the NCCL protocol its figure
    follows from; and the part of the seed's gap the projection does not locate (``profile.verdict.unlocated``)."""
    from .profile.verdict import t, unlocated
    from .stated import q

    e = html.escape
    part = q('seed_projected_part_ms', cause['diff_ms'], '.2f', of=cause['category'])
    text = (f"<b>A hypothesis:</b> the <i>{e(cause['category'])}</i> part of each decode step, the part whose projected time "
            f"differs most between the engines: SGLang's takes {part} ms per token longer than vLLM's")
    g = rng.get("gap")
    if g is None:
        return text + "."
    seed_gap = t('seed_range', g, 'seed_gap_ms', '.2f')
    lo, hi = g.get("low_ms"), g.get("high_ms")
    zero = isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= 0 <= hi
    text += (f". The projection places {t('seed_range', g, 'point_ms', '.2f')} ms per token of the seed's {seed_gap} ms gap "
             f"(every assumption at either end: {t('seed_range', g, 'low_ms', '.2f')} to {t('seed_range', g, 'high_ms', '.2f')}"
             + (", a range that includes zero: it does not rule out no gap at all" if zero else "")
             + f"; the seed's {seed_gap} lies {'inside' if g.get('seed_inside') else 'outside'} it); the {e(cause['category'])} "
             "part is the largest of the parts it places (the others: chapter 06's table seed_projection)")
    comm = {r["engine"]: r for r in comm_rows}
    if cause["category"] == "communication" and {"sglang", "vllm"} <= set(comm):
        s, v = comm["sglang"], comm["vllm"]
        text += (f". That {part} ms follows from the NCCL protocol assumed for each engine as the seed launched it (table "
                 f"seed_comm): SGLang (NCCL: {e(str(s.get('env')))}) the middle of {t('seed_comm', s, 'low_us', '.2f')} to "
                 f"{t('seed_comm', s, 'high_us', '.2f')} us per all-reduce, whose top is the figure published for "
                 f"{e(str(s.get('high_host')))}; vLLM (NCCL: {e(str(v.get('env')))}) {t('seed_comm', v, 'low_us', '.2f')} to "
                 f"{t('seed_comm', v, 'high_us', '.2f')} us (the top published for {e(str(v.get('high_host')))})")
    un = unlocated(rng)
    if "gap" in un and "sglang" in rng and "vllm" in rng:
        s, v = rng["sglang"], rng["vllm"]
        text += (f". The other {q('seed_unlocated_ms', un['gap'], '.2f', of='gap')} ms of the seed's gap is not located: "
                 f"the seed's SGLang step, {t('seed_range', s, 'seed_ms', '.2f')} ms, is "
                 f"{q('seed_unlocated_ms', un['sglang'], '.2f', of='sglang')} ms longer than its projected "
                 f"{t('seed_range', s, 'point_ms', '.2f')}, vLLM's, {t('seed_range', v, 'seed_ms', '.2f')} ms, "
                 f"{q('seed_unlocated_ms', un['vllm'], '.2f', of='vllm')} ms longer than its projected "
                 f"{t('seed_range', v, 'point_ms', '.2f')}; "
                 "where that time goes is a hypothesis until a decode-step profile of SGLang on the seed's host shows it")
    return text + "."


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


def _rests_on(tot: dict) -> str:
    """What else the projection rests on, from its total rows (``seed_projection``) and the run that validated the host
    rule: the engine versions profiled in place of the seed's, the machines the profiles come from, and the models the
    host rule was checked on (their tensor parallel sizes read from that run's server launches)."""
    from .profile.predict import HOST_RULE_RUN
    from .profile.verdict import shared_unit_of, t
    from .stated import q

    e, out = html.escape, []
    for eng, r in tot.items():
        name, measured, studied = prose_name(eng), r.get("measured_version"), r.get("studied_version")
        if measured is None:
            continue
        said = f"{name} {q('seed_profile_version', measured, of=eng)}'s kernels stand in for "
        seed_version = str(_seed_engines().get(eng, ""))
        if studied and studied != measured:
            out.append(said + f"the seed's {q('seed_studied_version', studied, of=eng)} (an assumption, settled by profiling "
                       f"{q('seed_studied_version', studied, of=eng)} on the same slices)")
        elif not seed_version[:1].isdigit():
            out.append(said + "the seed's, whose version the seed's records do not state ("
                       f"<code>data/reference/seed-case.json</code>: {e(seed_version or 'not recorded')})")
    machines = {eng: r.get("machine") for eng, r in tot.items() if r.get("machine")}
    carried = next((r for r in tot.values() if r.get("carried_factor") is not None), None)
    shared = shared_unit_of(tot)
    if len(set(machines.values())) == 1 and shared is not None:
        out.append(f"both engines' profiles come from one H200 machine (<code>{e(next(iter(machines.values())))}</code>, "
                   f"recording unit <code>{e(shared)}</code>): nothing is carried between machines")
    if len(set(machines.values())) > 1 and carried:
        out.append("the engines' profiles come from two H200 machines (" + "; ".join(
            f"{prose_name(eng)} <code>{e(m)}</code>" for eng, m in machines.items()) + "), compared through the anchor "
            f"configuration both measured (x {t('seed_projection', carried, 'carried_factor', '.4f')}: an assumption that "
            "the machines differ by one factor in every kernel)")
    checks, tps = _host_rule_checks(HOST_RULE_RUN)
    if checks:
        outside = [c for c in checks if c.get("within_interval") is False]
        tp = (" served at <code>" + e(", ".join(f"--tensor-parallel-size {x}" for x in tps)) + "</code> in every launch"
              if tps else "")
        out.append(f"the host rule was validated on whole models of <code>data/runs/{e(HOST_RULE_RUN)}</code> ("
                   + ", ".join(sorted({e(str(c['card'])) for c in checks})) + f"{tp}, where the seed runs at tensor parallel "
                   f"{e(str(_seed_tp()))}), {number_word(len(outside)) if outside else 'none'} of its "
                   f"{number_word(len(checks))} checks outside the predicted interval"
                   + ("" if (book_root() / "rendered" / HOST_RULE_RUN).is_dir() else "; that run is not a rendered book"))
    return (" It rests also on these: " + "; ".join(out) + ".") if out else ""


def _seed_engines() -> dict:
    from .stated.figures import seed_case

    return seed_case().get("engines") or {}


def _seed_tp():
    from .stated.figures import seed_case

    return seed_case().get("tp")


def _host_rule_checks(run: str) -> tuple[list[dict], list[str]]:
    """The whole-model checks of the host rule (``prediction_check`` rows with a measured time) in ``run``, and the
    tensor parallel sizes its server launches used (``servers.jsonl``)."""
    import json
    import re

    from .results import RunStore

    where = book_root() / "data" / "runs" / run
    if not (where / "prediction_check.jsonl").is_file():
        return [], []
    checks = [r for r in RunStore.at(where).rows("prediction_check") if r.get("measured_ms") is not None]
    tps: set[str] = set()
    if (where / "servers.jsonl").is_file():
        for line in (where / "servers.jsonl").read_text().splitlines():
            cmd = json.loads(line).get("cmd") if line.strip() else None
            tps |= set(re.findall(r"--tensor-parallel-size (\d+)", cmd or ""))
    return checks, sorted(tps)


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
        from .profile.verdict import gain_cases

        cases = gain_cases(f0, {"seed_range": store.rows("seed_range"), "seed_comm": store.rows("seed_comm")}, e)
        rows.append(("first change", f"{e(f0['change'])} for {e(prose_name(f0['engine']))}: {cases}."))
    if rng:
        rows.append(("range", "Projected single stream, every assumption at either end: " + "; ".join(
            f"{prose_name(w)} {t('seed_range', rng[w], 'point_tok_s', '.1f')} tok/s ({t('seed_range', rng[w], 'low_tok_s', '.1f')} "
            f"to {t('seed_range', rng[w], 'high_tok_s', '.1f')}; the seed's rate {_where_seed(rng[w])})"
            for w in ("sglang", "vllm") if w in rng) + "."))
    rows.append(("how sure", f"A hypothesis, {e(str((f0 or {}).get('label') or 'predicted'))}: trace profiles of both engines "
                 f"recorded on an H200 (<code>data/runs/{e(str(ref))}</code>) carried to the seed's GPUs by datasheet ratios, and "
                 "all-reduce latencies published for other eight-GPU PCIe hosts; nothing was measured on the seed's host."
                 + _rests_on(tot)
                 + (" And on SGLang's all-reduce time being transfer, which the block shortens, not each rank's wait for "
                    "the slowest, which it would not (a hypothesis: chapter 06 cites each engine's per-step hand-off to its "
                    "ranks and the per-rank trace on the seed's host that settles it)."
                    if f0 and f0.get("engine") == "sglang" and "NCCL" in str(f0.get("change")) else "")))
    if f0 and f0.get("engine") == "sglang" and "NCCL" in str(f0.get("change")):
        rows.append(("not yet tried alone", seed_next_launch()))
    if f0:
        from .profile.verdict import settle_words

        settle = settle_words(f0, proj, lambda s: f"<code>{e(s)}</code>")
        rows.append(("what settles it", f"The change's own launch: <code>{e(f0['check_command'])}</code>. "
                     + settle[:1].upper() + settle[1:]))
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return (f'<h2>The answer so far</h2><section class="sb-seed" id="answer" data-book="{e(book["name"])}"><table>{body}</table>'
            f'<p>From the tables of the what-if book <a href="{e(book["name"])}/index.html">{e(book["name"])}</a>; its '
            f'<a href="{verdict}">chapter 06</a> opens with the whole verdict.</p></section>')
