"""The statements two chapters share, every figure in them tagged: the seed case's gap (chapters 01, 02, 05), and
each chapter's answer as the chapter states it and chapter 06 states it again.

    Markdown(seed_sentence())                        # the seed case's gap, quoted from data/reference/seed-case.json
    Markdown("\n".join(say_selection(store)))        # chapter 02's what-if answers
    Markdown(say_backends(b))                        # chapter 03, one engine (a servebook.findings.backends item)
    Markdown(say_allreduce(findings.nccl(store)))    # chapter 04
    Markdown("\n".join(say_throughput(t, runs=5)))   # chapter 05, one served configuration
"""

from __future__ import annotations

from typing import Any

from .figures import chosen_setting, chosen_us, seed_case, selection_of, site_count
from .tags import q
from .text import text_of

__all__ = ["seed_sentence", "say_selection", "say_backends", "say_allreduce", "say_throughput"]


def seed_sentence() -> str:
    """The seed case's gap in one sentence, every figure tagged and quoted from its file (chapters 01, 02 and 05)."""
    s = seed_case()
    tok = s["single_stream_tok_s"]
    return (f"In the seed case ({s['model']} on {q('seed_tp', s['tp'], 'd')}x {s['profile']}), SGLang decoded "
            f"{q('seed_tok_s', tok['sglang'], '.1f', of='sglang')} tok/s single stream against vLLM's "
            f"{q('seed_tok_s', tok['vllm'], '.1f', of='vllm')}, {q('seed_loss', s['loss'], '.0%')} less "
            f"(put the other way, vLLM was "
            f"{q('seed_vllm_faster', s['vllm_faster'], '.0%')} faster). The figures are the seed's own measurements, quoted "
            f"from `{s['file']}`; this book never measured them.")


def say_selection(store) -> list[str]:
    """Markdown bullets: each what-if answer the run recorded, once per engine version, model and GPU, with the
    line that wrote it and how many lines of that version's code write the backend (chapters 02 and 06)."""
    answers: dict[Any, list[dict]] = {}
    from ..standing import standing_answers

    for r in standing_answers(store):  # an answer a later one superseded is not stated
        answers.setdefault(selection_of(r) if r.get("method") == "dynamic" else (selection_of(r), "static"), []).append(r)
    names = {"this-host": "On this host", "seed": "Seed case"}
    lines, stated_sites = [], set()
    for subject, rows in answers.items():
        r = rows[-1]
        who = " and ".join(dict.fromkeys(names.get(x.get("case"), str(x.get("case")).capitalize()) for x in rows))
        if r.get("method") != "dynamic":
            lines.append(f"- {who}: {r.get('engine')} {r.get('version')}, `{r.get('model')}` on {r.get('gpu')}: static reading only "
                         f"({r.get('reason')}).")
            continue
        code_of = f"{r.get('engine')} {r.get('version')}"
        n = site_count(store, r.get("engine"), r.get("version"))
        sites = (f"{q('selection_sites', n, 'd', of=code_of)} lines of its code write the backend" if n
                 else "its code was not read statically in this run")
        stated_sites.add(code_of)
        rule = "; ".join(f"`{c.get('text')}`" for c in (r.get("conditions") or [])[-3:]) or "no condition on the way"
        lines.append(f"- {who}: {code_of} picks {q('selected_backend', r.get('attention_backend'), of=subject, code=True)} for "
                     f"`{r.get('model')}` on {r.get('gpu')}" + (f" (capability {capability_of(r.get('gpu'), r['capability'])})"
                                                                 if r.get("capability") else "")
                     + f", written at `{(r.get('decided_by') or {}).get('where')}` because {rule} ({sites}).")
    for e, v in sorted({(x.get("engine"), x.get("version")) for x in store.rows("selection_sites")}, key=str):
        if f"{e} {v}" not in stated_sites:
            lines.append(f"- {e} {v}'s code, read statically: {q('selection_sites', site_count(store, e, v), 'd', of=f'{e} {v}')} "
                         "lines write the attention backend.")
    return lines


def capability_of(gpu: str | None, capability) -> str:
    """A GPU's compute capability as a statement shows it: tagged (``profile_capability``) where the GPU is a hardware
    profile of data/hardware that records this capability, else as recorded (a host's own GPU: chapter 01 states it)."""
    from ..profiles import load_profile

    try:
        known = load_profile(str(gpu)).get("capability")
    except Exception:  # noqa: BLE001 - not a profile name (e.g. "NVIDIA H200")
        known = None
    return q("profile_capability", known, of=gpu) if known is not None and str(known) == str(capability) else text_of(capability)


def say_backends(b: dict) -> str:
    """One engine's answer from chapter 03's sweep (a ``servebook.findings.backends`` item): the default, the fastest
    correct start, the comparison, and whether a change is supported (chapters 03 and 06)."""
    from .intervals import fastest_correct, separated

    name = b["engine"]
    best = b.get("best_reported") or b.get("best")
    is_default = b.get("best_tok_s") == b.get("default_tok_s")
    n = min(b.get("best_starts") or 1, b.get("default_starts") or 1)
    n_s = q("compared_starts", n, "d", of=b["best_key"]) if b.get("best_key") else str(n)
    over = f"95% intervals over {n_s} server starts" if n >= 2 else "95% intervals within one server start"
    rates = [x for x in b.get("default_start_rates") or [] if x is not None]
    per_start = (f" (per start: {', '.join(q('default_start_tok_s', x, ',.1f', of=f'{name} | start {i}') for i, x in enumerate(rates, 1))})"
                 if len(rates) >= 2 else "")
    return (f"the default loaded {q('default_backend', b.get('default_reported'), of=name, code=True)} and ran "
            f"{q('default_tok_s', b.get('default_tok_s'), ',.1f', of=name)} ± {q('default_ci95', b.get('default_ci95'), ',.1f', of=name)} "
            f"tok/s single stream{per_start}; {fastest_correct(b, 'start')} was {q('best_backend', best, of=name, code=True)} at "
            f"{q('best_tok_s', b.get('best_tok_s'), ',.1f', of=name)} ± {q('best_ci95', b.get('best_ci95'), ',.1f', of=name)} ({over})"
            + (" (the default itself)" if is_default else
               f", {separated(b.get('best_tok_s'), b.get('best_ci95'), b.get('default_tok_s'), b.get('default_ci95'), starts=n, of=b.get('best_key'))} against the default"
               + (f" (forced, it loads the implementation the default loaded: one configuration started twice, so the "
                  "difference is run-to-run noise)" if b.get("best_reported") and b.get("best_reported") == b.get("default_reported") else ""))
            + f". A change of backend is {q('change_supported', bool(b.get('change_supported')), 'supported|not supported', of=name)}"
            + (f": both {over} separate and its output agreed." if b.get("change_supported") else
               ": keep the engine's own choice" + ("." if n >= 2 else " (one start: interval within a start only; a change needs "
                                                                      "intervals over server starts that separate).")))


def say_allreduce(n: dict | None) -> str:
    """This run's all-reduce answer (a ``servebook.findings.nccl`` result): the backend, the setting its grid picks and
    that setting's latency at the batch-1 message (chapters 04 and 06); where the pick's gain is within the run-to-run
    spread (``within_spread``), that no setting is supported."""
    if not n:
        return "No all-reduce was recorded in this run: nothing to pick from."
    if n.get("backend") != "nccl":
        return (f"Measured with {q('allreduce_backend', n.get('backend'), code=True)} on the CPU ({q('nccl_fact', n.get('world_size'), 'd', of='world_size')} processes): "
                f"{q('allreduce_us', chosen_us(n), ',.1f')} us per all-reduce at the smallest message ({q('nccl_fact', n.get('b1_bytes'), 'd', of='b1_bytes')} B, "
                f"{n.get('mode')}). NCCL settings do not apply to it, and these microseconds say nothing about NCCL on GPUs: "
                "they compare with no NCCL figure.")
    setting = chosen_setting(n)
    if n.get("within_spread") and setting != "default":  # chapter 04's test: the gain is inside the run-to-run spread
        sp = n.get("spread") or {}
        return (f"{q('allreduce_backend', n.get('backend'), code=True)} on {q('nccl_fact', n.get('world_size'), 'd', of='world_size')} GPUs, "
                f"{q('nccl_fact', n.get('settings'), 'd', of='settings')} settings, "
                f"{n.get('mode')}-replayed, at the batch-1 message ({q('nccl_fact', n.get('b1_bytes'), 'd', of='b1_bytes')} B): "
                f"**no setting is supported**. The grid's fastest, {q('allreduce_setting', setting, code=True)}, took "
                f"{q('allreduce_us', chosen_us(n), ',.1f')} us per all-reduce against {q('nccl_fact', n.get('default_us'), ',.1f', of='default_us')} us "
                f"with NCCL's defaults ({q('nccl_spread', sp.get('pick gain'), '.1%', of='pick gain')} faster), within the run-to-run "
                f"spread: one setting's latency moved by up to {q('nccl_spread', sp.get('largest change between grids'), '.1%', of='largest change between grids')} "
                "between two recordings of the same grid. Keep NCCL's defaults until intervals over repeated launches separate "
                "or the engine at TP>1 is measured faster with it end to end (chapter 04's `tp_check`).")
    return (f"{q('allreduce_backend', n.get('backend'), code=True)} on {q('nccl_fact', n.get('world_size'), 'd', of='world_size')} GPUs, "
            f"{q('nccl_fact', n.get('settings'), 'd', of='settings')} settings, "
            f"{n.get('mode')}-replayed, at the batch-1 message ({q('nccl_fact', n.get('b1_bytes'), 'd', of='b1_bytes')} B): this run's grid picks "
            f"{q('allreduce_setting', setting, code=True)} at {q('allreduce_us', chosen_us(n), ',.1f')} us per all-reduce "
            f"(NCCL's defaults: {q('nccl_fact', n.get('default_us'), ',.1f', of='default_us')} us). Why: {q('nccl_fact', n.get('reason'), of='reason')}.")


def say_throughput(t: dict, runs: int | None = None) -> list[str]:
    """Chapter 05's answer for one served configuration (a ``servebook.findings.throughput`` item): single stream with
    its interval and run count, % of the bandwidth roofline, the sweep's peak (chapters 05 and 06). ``runs``: the
    chapter's parameter, to say when a resumed run kept a measurement made with another count."""
    label = t["label"]
    if t.get("single_tok_s") is None:
        return [f"- **{label}**: no single-stream measurement succeeded."]
    n_runs = int(t["runs"]) if t.get("runs") is not None else None
    kept = (f"; measured before this page's `runs={runs}`: the run resumed and kept that measurement"
            if runs is not None and n_runs is not None and n_runs != runs else "")
    n_starts = int(t.get("starts") or 1)
    if n_starts >= 2:
        rates = ", ".join(q("start_single_tok_s", x, ",.1f", of=f"{label} | start {i}")
                          for i, x in enumerate([x for x in t.get("start_tok_s") or [] if x is not None], 1))
        over = (f"95% t-interval over {q('single_starts', n_starts, 'd', of=label)} server starts, each the mean of {q('single_runs', n_runs, 'd', of=label)} runs{kept}; "
                f"per start: {rates}")
    else:
        over = f"95% CI over {q('single_runs', n_runs, 'd', of=label)} runs{kept}; one start: interval within a start only"
    out = [f"- **{label}** single stream: {q('single_tok_s', t['single_tok_s'], ',.1f', of=label)} ± "
           f"{q('single_ci95', t.get('single_ci95'), ',.1f', of=label)} tok/s ({over})."]
    if t.get("pct_of_roofline") is not None:
        out.append(f"- {label}: {q('pct_of_roofline', t['pct_of_roofline'], '.3g', of=label)}% of the "
                   f"{q('roofline_tok_s', t['roofline_tok_s'], ',.0f', of=label)} tok/s bandwidth roofline (bandwidth: {t.get('roofline_source')}).")
    if t.get("peak_tok_s") is not None:
        gain = f" ({q('peak_gain', t['peak_tok_s'] / t['c1_tok_s'], '.2f', of=label)}x C=1)" if t.get("c1_tok_s") else ""
        out.append(f"- {label}: {q('c1_tok_s', t.get('c1_tok_s'), ',.1f', of=label)} tok/s at C=1; peak {q('peak_tok_s', t['peak_tok_s'], ',.1f', of=label)} "
                   f"tok/s at C={q('peak_c', t.get('peak_c'), 'd', of=label)}{gain}, each user then getting "
                   f"{q('peak_per_user_tok_s', t.get('peak_per_user_tok_s'), ',.1f', of=label)} tok/s" + (" (some levels hit their time budget)" if t.get("truncated") else "") + ".")
    return out
