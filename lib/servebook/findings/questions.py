"""'Check yourself': the questions each chapter ends with, answered from the run.

    check_yourself(store, "06")                  # [(question, answer)]
    check_yourself_markdown(qa)                  # numbered, each answer folded
"""

from __future__ import annotations

from ..results import RunStore
from .claims import _fmt, collect
from .tables import host_summary, selection

__all__ = ["check_yourself", "check_yourself_markdown", "whatif_questions"]


def q(*a, **k) -> str:
    """``servebook.stated.q``, imported when first used (servebook.stated reads these findings)."""
    from ..stated.tags import q as q_

    return q_(*a, **k)


def _capability(profile: str) -> str:
    """The compute capability a hardware profile records (data/hardware)."""
    from ..profiles import load_profile

    return load_profile(profile)["capability"]


def check_yourself(store: RunStore, chapter: str) -> list[tuple[str, str]]:
    """Two or three questions a new engineer should now answer, with answers computed from this run."""
    ask = {"01": _questions_01, "02": _questions_02, "06": _questions_06}.get(str(chapter)[:2])
    return ask(store) if ask else []


def _questions_01(store: RunStore) -> list[tuple[str, str]]:
    """The host: its capability and family, what the engines' helpers said about it, how its GPUs are linked."""
    h = host_summary(store)
    qa = []
    if not h.get("probed"):
        return [("What does this run tell you about the host's GPUs?",
                 "Nothing: chapter 01 recorded no probe in this run (see its page and the failures table); run it before trusting any later chapter.")]
    if h.get("gpu"):
        qa.append(("What compute capability does this host's GPU report, and which family is that? Why does the family matter more than the marketing name?",
                   f"{q('host_capability', h['capability'])}: {h['family']}. Engines branch on the capability (major, minor), not the name: "
                   f"the seed case's RTX PRO 6000 and a B200 are both called Blackwell, but report "
                   f"{q('profile_capability', _capability('rtx-pro-6000'), of='rtx-pro-6000')} and "
                   f"{q('profile_capability', _capability('b200'), of='b200')}."))
    else:
        qa.append(("What compute capability does this host report, and what follows for the engines' GPU paths?",
                   "None: no GPU was seen, so no capability check can pass; the engines' GPU kernels cannot run and the book runs on the CPU."))
    eng = [e for e in h["engines"] if e.get("status") == "ok"]
    helpers = store.rows("engine_helpers")
    from ..probe.text import say_helper_verdicts

    qa.append(("Did any engine's own helper contradict the hardware or leave this GPU out (a mismatch or a gap)?",
               say_helper_verdicts(helpers, [e["engine"] + " " + str(e.get("version")) for e in eng])))
    if (h.get("gpu_count") or 0) >= 2:
        qa.append(("How are the GPUs linked, and what does that predict for decode-time all-reduces under tensor parallelism?",
                   f"{'/'.join(h['links']) or 'unknown'}" + (f", {q('p2p_gbs', h['p2p_gbs'], '.0f', of='max')} GB/s measured peer copies" if h.get("p2p_gbs") else "")
                   + ". Decode all-reduces are a few KB, so their cost is latency, not bandwidth: the link sets a floor of microseconds "
                   "per call, paid twice per layer per token (chapter 04 measures it)."))
    elif h.get("gpu"):
        qa.append(("This host has one GPU. Which chapter's question does not arise here, and why?",
                   "Chapter 04's: a model that fits one GPU runs without tensor parallelism and makes no all-reduce, so there is no NCCL setting to tune."))
    return qa


def _questions_02(store: RunStore) -> list[tuple[str, str]]:
    """The selection: which backend, which line decides it, and why the seed case falls back."""
    sel = [s for s in selection(store) if s.get("case") == "this-host"]
    seed = [s for s in selection(store) if s.get("case") == "seed"]
    qa = []
    if sel:
        s = sel[0]
        qa.append((f"Which attention backend does {s['engine']} {s['version']} pick for `{s['model']}` on this host, and which line decides it?",
                   f"`{s['backend']}`, written at `{s.get('where')}` in `{s.get('function')}` ({s['method']} reading)."))
        kinds = s.get("kinds") or []
        qa.append(("Is that choice driven by the GPU, the model, an installed kernel library, or a user flag? What would change it?",
                   f"Conditions on the way: {'; '.join(s['rule']) or 'none'} (kinds: {', '.join(kinds) or 'none'}). "
                   + ("No hardware condition is involved, so another GPU would get the same answer; "
                      if "hardware" not in kinds else "A hardware condition is involved: another GPU can get another backend; ")
                   + "passing the engine's attention flag changes it (chapter 03 forces each value)."))
    else:
        qa.append(("Which attention backend does the engine pick on this host?", "Not recorded in this run: chapter 02's what-if failed or did not run (see failures)."))
    from ..profile.seed import profiles_sentence

    if seed and seed[0].get("method") == "dynamic":
        s = seed[0]
        qa.append((f"In the seed case ({s['engine']} {s['version']}, {s['model']} on {s['gpu']}), which backend is picked, and by which rule?",
                   f"`{s['backend']}` at `{s.get('where')}`, because {'; '.join(s['rule'][-3:])}: the fast branch's check does not "
                   f"cover capability {s.get('capability')}. Whether that costs speed is a separate question: the other engine falls back "
                   "too (chapter 02's comparison). " + profiles_sentence(store)))
    else:
        qa.append(("Why does this chapter run the engine's own resolution instead of reading its documentation?",
                   "Because the decision is code, and it moves between releases: write-ups about it can be wrong or out of date, "
                   "while the traced line and the conditions on the way are what this version actually does."))
    return qa


def _questions_06(store: RunStore) -> list[tuple[str, str]]:
    """The findings: a backend to force, NCCL variables to export, where single-stream time goes."""
    f = collect(store)
    qa = []
    b = f.backends[0] if f.backends else None
    e = b["engine"] if b else None
    if b and b.get("correct"):
        qa.append((f"Should you force a different attention backend for {b['engine']} on this host?",
                   (f"Yes: `{b['best']}` was faster than the default beyond both 95% intervals over server starts, with correct output."
                    if b["change_supported"] else _default_fastest(b, e) if str(b.get("best", "")).startswith("auto") else
                    f"No: the fastest, `{b['best']}` ({q('best_tok_s', b['best_tok_s'], ',.1f', of=e)} ± "
                    f"{q('best_ci95', b['best_ci95'], ',.1f', of=e)} tok/s), "
                    + (f"overlaps the default ({q('default_tok_s', b.get('default_tok_s'), ',.1f', of=e)} ± "
                       f"{q('default_ci95', b.get('default_ci95'), ',.1f', of=e)}) over "
                       f"{q('compared_starts', min(b.get('best_starts') or 1, b.get('default_starts') or 1), 'd', of=b.get('best_key'))} "
                       "server starts: no difference beyond the restart "
                       "spread, the data supports no change. More starts would narrow the intervals."
                       if min(b.get("best_starts") or 1, b.get("default_starts") or 1) >= 2 else
                       f"{'overlaps' if _overlaps(b) else 'stands apart from'} the default ({q('default_tok_s', b.get('default_tok_s'), ',.1f', of=e)} ± "
                       f"{q('default_ci95', b.get('default_ci95'), ',.1f', of=e)}) within one server start each (one start: interval within a start only); the "
                       "rate moves more between starts than within one, so the data supports no change until both are measured "
                       "over `starts >= 2`."))))
    n = f.nccl
    if n and n.get("backend") == "nccl":
        qa.append(("Which NCCL variables would you export for tensor parallelism on this host, and what is the predicted gain per token?",
                   ("None. " + next((c.text for c in f.claims if c.chapter == "04"), "") + "."
                    if n.get("setting") in (None, "default") else
                    f"None: the grid's fastest, `{n['setting']}`, gains no more than the run-to-run spread (chapter 04), so no "
                    "setting is supported and none is exported."
                    if n.get("within_spread") else
                    f"`{n['setting']}`: {q('nccl_fact', n.get('predicted_delta_ms'), ',.3f', of='predicted_delta_ms')} ms per token predicted; "
                    + ("measured end to end: " + "; ".join(f"{x['engine']} {x['setting']}: {x['verdict']}" for x in n["measured_effect"] if x["vs"])
                       if n.get("measured_effect") else "not confirmed end to end, so none is exported yet."))))
    elif n:
        qa.append(("Why does this run give no NCCL recommendation?",
                   f"Its all-reduces ran with {n['backend']} on {q('nccl_fact', n.get('world_size'), 'd', of='world_size')} processes: NCCL variables do not apply to it, "
                   "and a one-GPU deployment makes no all-reduce at all."))
    t = next((x for x in f.throughput if x.get("pct_of_roofline") is not None), None)
    if t:
        qa.append(("How close is single-stream decode to the memory-bandwidth roofline, and what does that say about where the time goes?",
                   f"{q('pct_of_roofline', t['pct_of_roofline'], '.3g', of=t['label'])}% "
                   f"({q('single_tok_s', t['single_tok_s'], ',.1f', of=t['label'])} of "
                   f"{q('roofline_tok_s', t['roofline_tok_s'], ',.0f', of=t['label'])} tok/s): "
                   + _roofline_reading(t, profiled=bool(store.rows("decode_breakdown")))))
    from ..profile.book import served_by_profiles

    if not qa and served_by_profiles(store):
        qa.append(("Why does this chapter recommend nothing for this run?",
                   "It is a run of profiles only: it measured where each engine's decode step spends its GPU time, slice by "
                   "slice (chapter 05's table and the ladders above), and served no launch option to compare; the what-if "
                   "book's chapter 06 turns these profiles into changes for the seed case."))
    if not qa:
        qa.append(("Why does this chapter recommend nothing for this run?",
                   "Chapters 03 to 05 recorded no measurement here (see the failures and each chapter's page); a recommendation "
                   "without a measurement would be a guess."))
    return qa[:3]


def check_yourself_markdown(qa: list[tuple[str, str]]) -> str:
    """Numbered questions, each answer folded in a <details> block."""
    if not qa:
        return "_Nothing recorded in this run to ask about._"
    out = []
    for i, (q, a) in enumerate(qa, 1):
        out.append(f"{i}. {q}\n\n   <details><summary>Answer (from this run)</summary>\n\n   {a}\n\n   </details>\n")
    return "\n".join(out)


def _roofline_reading(t: dict, profiled: bool = False) -> str:
    """What a share of the bandwidth floor says, in three bands, with the 95% interval's range where it spans two.
    ``profiled``: the run holds per-kernel profiles (``decode_breakdown``): the page points to them rather than asking
    for one."""
    pct, roof = t["pct_of_roofline"], t.get("roofline_tok_s")
    ci = t.get("single_ci95") or 0.0
    lo, hi = ((t["single_tok_s"] - ci) / roof * 100, (t["single_tok_s"] + ci) / roof * 100) if roof and ci else (pct, pct)
    lab = t.get("label")
    span = (f" (the 95% interval spans {q('roofline_span_pct', lo, '.0f', of=f'{lab} | low')}% to "
            f"{q('roofline_span_pct', hi, '.0f', of=f'{lab} | high')}%)" if hi - lo >= 10 else "")
    if pct < 25:
        return ("far below it, so the weights' bytes are not the limit; per-token overhead (framework, kernel launches, "
                f"the serving path) is, and a faster attention kernel or NCCL setting cannot close that gap alone{span}.")
    if pct >= 80:
        return f"close to it: memory bandwidth is the limit; only fewer bytes per token (quantization, batching) raise it{span}."
    return (f"between the two: the bytes explain about {q('pct_of_roofline', pct, '.0f', of=lab)}% of each token's time and something else the rest{span}. "
            "Which part (attention, the MoE layers, launches, sampling) is not settled by a rate; "
            + ("this run's per-kernel profiles of decode steps split it (chapter 05's \"Where a decode step's time goes\", and "
               "\"Where each engine's time goes\" on this page)." if profiled else
               "a per-kernel profile of one decode step would settle it."))


def _default_fastest(b: dict, e: str) -> str:
    """The answer where the fastest correct configuration was the default itself: no forced backend to compare it with
    (a comparison of the default with itself would read "overlaps the default")."""
    n = min(b.get("best_starts") or 1, b.get("default_starts") or 1)
    over = (f"over {q('compared_starts', n, 'd', of=b.get('best_key'))} server starts" if n >= 2 else
            "within one server start (one start: interval within a start only)")
    return (f"No: the fastest correct configuration was the default itself, `{b['best']}` "
            f"({q('best_tok_s', b['best_tok_s'], ',.1f', of=e)} ± {q('best_ci95', b['best_ci95'], ',.1f', of=e)} tok/s {over}); "
            "no forced backend was faster beyond the 95% intervals, so the data supports no change.")


def _overlaps(b: dict) -> bool:
    """Whether the fastest backend's interval overlaps the default's (a ``findings.backends`` item)."""
    from ..stated.intervals import _num, _overlap

    a, d = _num(b.get("best_tok_s")), _num(b.get("default_tok_s"))
    return a is None or d is None or _overlap(a, _num(b.get("best_ci95")) or 0.0, d, _num(b.get("default_ci95")) or 0.0)


def _settles(first: dict) -> str:
    """What a what-if's first launch rests on and which measurement on the real host settles it: an NCCL or other
    predicted change (``decision`` "predicted", the seed verdict's first change) is settled by chapters 04 and 05; a
    forced backend (a root cause or a hypothesis) by chapter 03, whose decode-path check is the one that runs the forced
    decode kernel (the teacher-forced check exercises prefill only: the glossary)."""
    if first.get("decision") == "predicted":
        return (f"The launch is a prediction of the seed verdict (other hosts' published latencies and the H200's decode-step "
                f"profiles, carried to these GPUs): {first['why']}. On the real host, chapter 04 settles the all-reduce it "
                "changes (the latency with and without the setting, and NCCL_DEBUG=INFO naming the protocol NCCL picked), and "
                "chapter 05 the decode rate against the same launch without it, faster beyond both 95% intervals over server starts.")
    kind = ("a root cause (the code says the missed backend supports this GPU)" if first.get("decision") == "fallback" else
            "a hypothesis, not a root cause (no code the what-if could run says the missed backend supports this GPU)")
    return (f"The launch comes from {kind}: {first['why']}. On the real host, chapter 03 settles it: the backend the server "
            "reports, the decode-path agreement with the default (the check that runs the forced decode kernel), and a decode "
            "rate faster beyond both 95% intervals over server starts.")


def whatif_questions(profile: str, launch_first: list[dict], causes: list[dict]) -> list[tuple[str, str]]:
    """Chapter 06's questions on a what-if run (it measured nothing): whether its first launch is a measured
    recommendation and what settles it, and whether the engine's fallback is a root cause or a hypothesis."""
    first = launch_first[0] if launch_first else None
    if first:
        answer = f"No: nothing was measured on the `{profile}` profile. " + _settles(first)
    else:
        answer = (f"It names none: no hardware helper on the engine's path kept a backend from the `{profile}` GPU, so the "
                  "engine's default stands until chapters 03 and 05 measure it on the real host.")
    qa = [("This page names a launch to try first. Is that a measured recommendation, and what settles it?", answer)]
    cause = next((c for c in causes if c["decision"] in ("fallback", "hypothesis")), None)
    if cause:
        qa.append(("Is the engine's fallback here a root cause or a hypothesis, and what is the difference?",
                   f"A {cause['decision']}: {cause['cause']} A root cause needs the engine's or kernel library's own code to say the "
                   "missed backend supports this GPU; without that it is a hypothesis for the real host."))
    return qa
