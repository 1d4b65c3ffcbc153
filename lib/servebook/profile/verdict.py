"""The seed case's verdict in words, from the tables ``profile.seed.seed_tables`` records: the likely cause first, in
sentences a user can act on (the first change, its expected gain and range, how sure, what settles it), then the parts.

    display(Markdown(verdict_markdown(tables)))      # tables: {name: rows} (the run's seed_* tables)

Every figure is tagged with ``servebook.stated.q`` as the recorded row it comes from (``seed_table``: table | key | field).
"""

from __future__ import annotations

from typing import Callable

from ..engines import prose_name
from .predict import HOST_RULE_RUN

__all__ = ["verdict_markdown", "verdict", "t", "unlocated", "settle_words", "over_seed", "gain_cases", "shared_unit_of"]


def t(table: str, row: dict, field: str, fmt: str) -> str:
    """A figure of a recorded row, tagged as ``seed_table`` (table | key | field)."""
    from ..stated.tags import q

    return q("seed_table", row.get(field), fmt, of=f"{table} | {row['key']} | {field}")


# How each engine hands a decode step's work to its tensor-parallel ranks, read in the studied versions' code (engine:
# version, [(file:line, what the line holds)]); tests/test_frontpage_answer.py checks each line in the cached source.
STEP_HANDOFF = {
    "sglang": ("0.5.9", [("sglang/srt/managers/scheduler.py:1301", "broadcast_pyobj"),
                         ("sglang/srt/utils/common.py:1268", "def broadcast_pyobj"),
                         ("sglang/srt/distributed/parallel_state.py:283", "gloo")]),
    "vllm": ("0.26.0", [("vllm/v1/executor/multiproc_executor.py:377", "rpc_broadcast_mq.enqueue"),
                        ("vllm/v1/executor/multiproc_executor.py:990", "rpc_broadcast_mq.dequeue")]),
}


def _wait_words(tables: dict) -> str:
    """The alternative to a protocol cost: SGLang's all-reduce kernel time holding each rank's wait for the slowest,
    which the NCCL block would not remove; said where the studied versions are those whose hand-off code was read."""
    from ..stated.tags import q

    tot = {r["engine"]: r for r in tables["seed_projection"] if r["category"] == "total"}
    if any(tot.get(e, {}).get("studied_version") != v for e, (v, _) in STEP_HANDOFF.items()):
        return ""
    loc = {e: [f"`{w}`" for w, _ in locs] for e, (_, locs) in STEP_HANDOFF.items()}
    ver = {e: q("seed_studied_version", tot[e]["studied_version"], of=e) for e in STEP_HANDOFF}
    return (" Part of SGLang's all-reduce kernel time may be each rank waiting for the slowest one rather than the "
            "transfer, and `NCCL_PROTO=LL` does not remove a wait (a hypothesis: each scheduler iteration of SGLang "
            f"{ver['sglang']} first broadcasts the new requests from the first rank to the others over a gloo CPU group ("
            + ", ".join(loc["sglang"]) + ") and every rank then schedules its own step, where vLLM "
            f"{ver['vllm']} hands each step to its workers through a shared-memory message queue ("
            + ", ".join(loc["vllm"]) + "); settled by a per-rank trace of each decode step's first all-reduce on the "
            "seed's host: how long each rank waits for the last one to arrive, against the transfer itself).")


def over_seed(r: dict | None, gain_ms: float | None) -> float | None:
    """The single-stream tok/s of the seed's own step (a ``seed_range`` engine row's ``seed_ms``) shortened by
    ``gain_ms``: what a change's gain would give over the rate the seed measured, not over the projection's."""
    if not r or not isinstance(r.get("seed_ms"), (int, float)) or not isinstance(gain_ms, (int, float)):
        return None
    return 1e3 / (r["seed_ms"] - gain_ms) if r["seed_ms"] > gain_ms else None


def _published(figure_id: str | None) -> str | None:
    """A published all-reduce figure's hardware, in its own words (``data/reference/allreduce-pcie-published.json``)."""
    from .comm import load_allreduce_reference

    return next((f.get("hardware") for f in load_allreduce_reference().get("figures", []) if f.get("id") == figure_id), None)


def gain_cases(f0: dict, tables: dict, esc: Callable[[str], str] = str) -> str:
    """The first change's gain as the cases it is, where it is the NCCL block: NCCL on the seed's host already picks LL
    (the low end) or picks SIMPLE as the one published host where it did (the high end, that host named in its own
    words), each in ms per token and over the seed's own rate and the projected one; the middle, the ranking's expected
    gain, is no outcome of either. Other changes: their expected gain and range."""
    from ..stated.tags import q

    rng = {r["who"]: r for r in tables["seed_range"]}
    comm = {r["engine"]: r for r in tables["seed_comm"]}
    r, c = rng.get(f0["engine"]), comm.get(f0["engine"], {})
    name = prose_name(f0["engine"])
    if "NCCL" not in str(f0.get("change")) or r is None or f0.get("pair_ms_per_token") is None:
        return (f"expected, over the projected rate, {t('seed_fixes', f0, 'gain_tok_s', '+.1f')} tok/s "
                f"({t('seed_fixes', f0, 'expected_gain_ms', '.2f')} ms per token; {t('seed_fixes', f0, 'gain_low_ms', '.2f')} "
                f"to {t('seed_fixes', f0, 'gain_high_ms', '.2f')} ms)")

    def case(end: str) -> str:
        rate = q("seed_fix_seed_tok_s", over_seed(r, f0[f"gain_{end}_ms"]), ".1f", of=f"{f0['key']} | {end}")
        return (f"{t('seed_fixes', f0, f'gain_{end}_ms', '.2f')} ms per token: the seed's {name} "
                f"{t('seed_range', r, 'seed_tok_s', '.1f')} tok/s would become {rate} (were its step shorter by as much), "
                f"the projected {t('seed_range', r, 'point_tok_s', '.1f')} tok/s would gain "
                f"{t('seed_fixes', f0, f'gain_{end}_tok_s', '+.1f')}")

    host = _published(c.get("published_high_figure"))
    return (f"the gain depends on the protocol NCCL picks on the seed's host (the log line that settles it is named below): "
            f"where NCCL already picks LL, or a protocol as fast, by itself (the low end takes the one NCCL figure published "
            f"for a host with {esc(str(c.get('low_host')))} for both launches: the block assumed to change nothing there), "
            f"{case('low')}; where it picks SIMPLE, as on the one published host where it did ("
            + (esc(f"{c['published_high_figure']}: {host}") if host else esc(str(c.get("high_host"))))
            + f"), {case('high')}. The expected {t('seed_fixes', f0, 'expected_gain_ms', '.2f')} ms "
            f"({t('seed_fixes', f0, 'gain_tok_s', '+.1f')} tok/s over the projected rate) is the middle of these two "
            "cases, which the ranking uses, not an outcome either gives")


def unlocated(rng: dict) -> dict:
    """Milliseconds per token the projection does not locate, from ``seed_range`` rows by ``who``: each engine's seed
    step minus its projected point, and the seed's gap minus the projected gap (the two engines' difference)."""
    out = {w: r["seed_ms"] - r["point_ms"] for w, r in rng.items()
           if w != "gap" and isinstance(r.get("seed_ms"), (int, float)) and isinstance(r.get("point_ms"), (int, float))}
    g = rng.get("gap") or {}
    if isinstance(g.get("seed_gap_ms"), (int, float)) and isinstance(g.get("point_ms"), (int, float)):
        out["gap"] = g["seed_gap_ms"] - g["point_ms"]
    return out


def settle_words(f0: dict, projection: list[dict], code: Callable[[str], str]) -> str:
    """What settles the first change on the seed's host (``code`` writes a command as code): for an NCCL setting, the
    protocol NCCL picks, read from the log lines the book's own NCCL captures print (``nccl.launch.DEBUG_ENV``); then the
    rate, chapter 05 with and without the change, decided by chapter 05's rule (the 95% intervals do not overlap)."""
    from ..nccl.launch import DEBUG_ENV
    from ..stated.figures import seed_case
    from ..stated.tags import q

    seed, engine = seed_case(), f0["engine"]
    version = str(seed["engines"].get(engine, "")).split(" ")[0]
    spec = f"{engine}=={version}" if version[:1].isdigit() else engine
    out = []
    if "NCCL" in str(f0.get("change")):
        msg = next((r for r in projection if r.get("engine") == engine and r.get("category") == "communication"
                    and r.get("message_bytes")), None)
        size = (f" at the decode step's {q('seed_message_bytes', msg['message_bytes'], 'd', of=engine)} B message"
                if msg else "")
        out.append(f"first, the protocol NCCL picks: the launch as the seed ran it, with "
                   f"{code(' '.join(f'{k}={v}' for k, v in DEBUG_ENV.items()))} added (the variables the book's own NCCL "
                   f"captures set, servebook.nccl.launch; their logs hold these lines, e.g. "
                   f"{code('data/runs/h200x2-nccl/nccl_debug_excerpt.log')}), and in its log the lines {code('AllReduce: ... Bytes -> Algo ... proto ...')}{size}: the word "
                   f"after {code('proto')} is the protocol")
    rate = (f"servebook book --only 05 --engine {spec} --model {seed['model']} -p starts=2 "
            f"-p engine_args='--tensor-parallel-size {seed['tp']}'")
    out.append(f"the rate: {code(rate)} "
               "once with the change and once without (" + ("its variables set in the environment" if f0.get("kind") == "environment"
                                                           else "its setting in the launch")
               + "), two server starts or more each: decided when the two 95% intervals of the single-stream rate do not overlap")
    return "on the seed's host, " + "; then ".join(out) + "."


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _where(us: float | None, ref_us: float, name: str) -> str:
    """Where a latency that meets the seed's rate lies against a published figure (within a tenth, above, below)."""
    if us is None:
        return "no latency meets the seed's rate"
    if abs(us - ref_us) <= 0.1 * ref_us:
        return f"within a tenth of {name}"
    return f"above {name}" if us > ref_us else f"below {name}"


def _change(f: dict) -> str:
    """A change's name, its settings (an environment block, a flag) shown as code."""
    name, _, rest = f["change"].partition(" (")
    return f"{name} (`{rest.rstrip(')')}`)" if rest else f["change"]


def _first(fixes: list[dict]) -> dict | None:
    return next((f for f in fixes if f.get("expected_gain_ms") is not None), None)


def _cause(tables: dict) -> str:
    from ..cards import load_card
    from ..nccl import nccl_tests_command
    from ..stated.figures import seed_case
    from ..nccl.e2e import SEED_ENV
    from ..stated.tags import q

    comm = {r["engine"]: r for r in tables["seed_comm"]}
    s, v = comm.get("sglang"), comm.get("vllm")
    f0 = _first(tables["seed_fixes"])
    if s is None or v is None or f0 is None:
        return "**Likely cause:** not projected - the profile run lacks a profile this verdict needs."
    block = " ".join(f"{k}={val}" for k, val in SEED_ENV.items())
    lines = [
        f"**Likely cause (a hypothesis, predicted from published figures, not measured on that host): SGLang's all-reduce.** "
        f"The seed launched vLLM with its NCCL block (`{block}`) and SGLang without it. Both engines pay "
        f"{t('seed_comm', s, 'collectives', 'd')} collectives per decode token (read in each engine's code, table "
        f"`seed_collectives`); at the latencies published for eight PCIe ranks that is {t('seed_comm', s, 'low_ms', '.2f')} to "
        f"{t('seed_comm', s, 'high_ms', '.2f')} ms per token for SGLang's NCCL default and {t('seed_comm', v, 'low_ms', '.2f')} "
        f"to {t('seed_comm', v, 'high_ms', '.2f')} ms for vLLM's tuned NCCL. The projection meets the seed's two rates when "
        f"SGLang's all-reduce takes {t('seed_comm', s, 'matching_us', '.1f')} us and vLLM's {t('seed_comm', v, 'matching_us', '.1f')} us, "
        f"against the published two-socket host's {t('seed_comm', s, 'high_us', '.2f')} us with NCCL's default (SIMPLE "
        f"protocol) and {t('seed_comm', v, 'low_us', '.2f')} to {t('seed_comm', v, 'high_us', '.2f')} us with LL: "
        + _where(s["matching_us"], s["high_us"], "that default") + " for SGLang, "
        + _where(v["matching_us"], v["high_us"], "the highest LL figure") + " for vLLM.",
        f"**First change:** {_change(f0)} for {prose_name(f0['engine'])} - `{f0['check_command']}`. "
        + _sentence(gain_cases(f0, tables)) + ". How sure: a hypothesis - the "
        "latencies are other hosts' published figures." + (_wait_words(tables) if f0.get("engine") == "sglang"
                                                            and "NCCL" in str(f0.get("change")) else "")
        + " What settles it, "
        + settle_words(f0, tables["seed_projection"], lambda c: f"`{c}`")
        + f" The latency alone: `{nccl_tests_command(load_card(seed_case()['model']), seed_case()['tp'])}` run with and "
        "without `NCCL_PROTO=LL` (chapter 04 with `tp_seed_block` measures the same inside the engines).",
    ]
    if s.get("implied_us") is not None:
        lines.append(
            f"The seed's own profile put all-reduce at {q('seed_allreduce_share', s['share'], '.1%')} of SGLang's decode "
            f"time: {t('seed_comm', s, 'implied_ms', '.2f')} ms per token, {t('seed_comm', s, 'implied_us', '.1f')} us per "
            f"collective - " + ("above every published eight-rank PCIe figure the book holds (the highest, "
                                f"{t('seed_comm', s, 'published_high_us', '.2f')} us, is the two-socket host's default), so as "
                                "a latency it is not plausible; an engine's all-reduce kernels in a profile also hold each "
                                "rank's wait for the slowest one (a hypothesis: a per-rank trace on the host settles it)"
                                if s.get("implied_above_published") else "within the published eight-rank PCIe figures")
            + f". At the latency that meets the seed's rate the share would be {t('seed_comm', s, 'share_at_matching', '.1%')}.")
    return "\n\n".join(lines)


def _range_line(tables: dict) -> str:
    rng = {r["who"]: r for r in tables["seed_range"]}
    tot = {r["engine"]: r for r in tables["seed_projection"] if r["category"] == "total"}
    s, v, g = rng["sglang"], rng["vllm"], rng["gap"]
    days = sorted({d for r in tot.values() for d in (r.get("recorded_days") or [])})
    cross = [c for r in tot.values() for c in (r.get("cross_day") or [])]
    ref = next(iter(tot.values()), {}).get("reference_run", "?")
    return (
        "**The projection (predicted, not measured on that host)**, each engine's Triton MLA decode-step profile (kernel trace) from "
        f"`data/runs/{ref}` carried to 8x RTX PRO 6000: SGLang {_point(tot, 'sglang')} tok/s "
        f"({t('seed_range', s, 'low_tok_s', '.1f')} to {t('seed_range', s, 'high_tok_s', '.1f')}; the seed measured "
        f"{t('seed_range', s, 'seed_tok_s', '.1f')}), vLLM {_point(tot, 'vllm')} tok/s "
        f"({t('seed_range', v, 'low_tok_s', '.1f')} to {t('seed_range', v, 'high_tok_s', '.1f')}; the seed measured "
        f"{t('seed_range', v, 'seed_tok_s', '.1f')}); SGLang slower by {t('seed_range', g, 'point_ms', '.2f')} ms per token "
        f"({t('seed_range', g, 'low_ms', '.2f')} to {t('seed_range', g, 'high_ms', '.2f')}; the seed's "
        f"{t('seed_range', g, 'seed_gap_ms', '.2f')})."
        + "".join(_outside(prose_name(e), r) for e, r in (("sglang", s), ("vllm", v)) if r.get("seed_inside") is False)
        + " The point takes every assumption at its central value; the range takes "
        "all of them together at the ends that shorten or lengthen the time (table `seed_assumptions` moves each alone). "
        "Host time follows one rule, the one the whole models of "
        + ("the profile run" if ref == HOST_RULE_RUN else f"`{HOST_RULE_RUN}`") + " validated: a step takes the longer of "
        "the host's time and the GPU's (the serial rule, host idle added, is the bound in the table). "
        + _units_words(tot, days, ref)
        + (" Taken across machines, since no pair of one machine exists (a measurement on one machine settles them): "
           + "; ".join(f"`{c}`" for c in cross) + "." if cross else ""))


def _outside(name: str, r: dict) -> str:
    """The seed's rate outside an engine's projected range: by how much, and that nothing here says where it goes."""
    if r.get("seed_beyond_ms") is None:   # a table recorded before the field: only that it is outside
        return f" The seed's {name} rate lies outside that engine's range: the ends of the assumptions here do not reach it."
    slow = r["seed_beyond_ms"] > 0
    return (f" The seed's {name} rate lies outside that engine's range: its {t('seed_range', r, 'seed_ms', '.2f')} ms per token "
            f"is {q_abs(r)} ms {'longer than the slow' if slow else 'shorter than the fast'} end, so at every assumption's "
            f"{'slow' if slow else 'fast'} end the projection still {'misses a part' if slow else 'adds time'} of {name}'s step "
            "on that host that this book does not locate (a hypothesis until a decode-step profile of that engine on the seed's "
            "host shows where the time goes).")


def q_abs(r: dict) -> str:
    from ..stated.tags import q

    return q("seed_table_abs", abs(r["seed_beyond_ms"]), ".2f", of=f"seed_range | {r['key']} | seed_beyond_ms")


def shared_unit_of(tot: dict) -> str | None:
    """The run id of the one unit every engine's projection was read from (``seed_projection``'s total rows, field
    ``shared_unit``: ``ladders.shared_unit``), or None where the engines come from more than one."""
    shared = {r.get("shared_unit") for r in tot.values()}
    return next(iter(shared)) if len(shared) == 1 and None not in shared else None


def _units_words(tot: dict, days: list, ref: str) -> str:
    """Where each engine's per-layer difference was taken: one machine per engine (named where the rows carry its
    identity), and how engines measured on two machines were compared (through the reference configuration)."""
    unit = shared_unit_of(tot)
    if all(r.get("machine") for r in tot.values()) and unit is not None:
        from .ladders import SHARED_RULE

        (machine,) = {r["machine"] for r in tot.values()}
        return (f"Both engines' per-layer differences are taken on one machine, `{machine}`, in the one recording unit "
                f"`{unit}` (" + "; ".join(f"{prose_name(e)} {t('seed_projection', r, 'ladder_from', 'd')} and "
                                          f"{t('seed_projection', r, 'ladder_to', 'd')} MoE layers" for e, r in tot.items())
                + f"; read by the rule: {SHARED_RULE}): no figure of another machine enters their difference, and "
                "nothing is carried between machines.")
    if all(r.get("machine") for r in tot.values()):
        words = ("Each engine's per-layer difference is taken between two of its slices measured on one machine ("
                 + "; ".join(f"{prose_name(e)}: `{r['machine']}`" + (
                     f", {t('seed_projection', r, 'ladder_from', 'd')} and {t('seed_projection', r, 'ladder_to', 'd')} "
                     "MoE layers" if r.get("ladder_from") is not None else "") for e, r in tot.items()) + ").")
        for r in tot.values():
            if r.get("carried_factor") is not None:
                words += (" The engines ran on two machines, so they are compared only through the anchor "
                          f"configuration each machine measured: {r['carried']}: "
                          f"{t('seed_projection', r, 'carried_anchor_ref_ms', '.4f')} ms there against "
                          f"{t('seed_projection', r, 'carried_ref_ms', '.4f')} ms on `{r['carried_from']}`, x "
                          f"{t('seed_projection', r, 'carried_factor', '.4f')}.")
        return words
    return ("Each per-layer difference is taken between two slices recorded in one run on one machine (here one day each: "
            + ", ".join(days) + "; the lent machine changed between days, so no row is subtracted across them); a "
            "recording of the INT4 slices (`h200x1-ref`) replaces "
            f"`{ref}` as the profile run by name (`servebook.profile.seed.REFERENCE_PROFILE_RUN`).")


def _point(tot: dict, engine: str) -> str:
    """An engine's projected tok/s (every assumption central), tagged as chapter 06's headline quantity."""
    from ..stated.tags import q

    return q("seed_projected_tok_s", tot[engine]["predicted_tok_s"], ".1f", of=engine)


def _parts_line(tables: dict) -> str:
    from .seed import gap_by_category

    rows = tables["seed_projection"]
    att = next((g for g in gap_by_category(rows) if g["category"] == "attention"), None)
    version = next((r for r in tables["seed_assumptions"] if r["assumption"] == "engine version"), None)
    out = []
    tot = {r["engine"]: r for r in rows if r["category"] == "total"}
    moved = [e for e, r in tot.items() if r.get("carried_factor") is not None]   # the engines carried to the other's machine
    carried = ("; " + " and ".join(f"{prose_name(e)}'s" for e in moved) + " carried to "
               + " and ".join(f"{prose_name(e)}'s" for e in tot if e not in moved) + " machine through the anchor configuration"
               if moved else "")
    if att and att.get("diff_ms"):
        out.append(f"**The other parts.** Attention: on the H200 SGLang {tot['sglang'].get('measured_version')}'s Triton "
                   "MLA decode takes " + _q_ratio(att) + f" as long per layer as vLLM's (`decode_breakdown`{carried})"
                   + _grids_words(tot) + ". The kernel constants are the same on "
                   "the H200's capability and the seed's GPUs' in every version read (table `seed_attention_12`); SGLang 0.5.9, the studied "
                   f"version, launches a split grid of {_grid(tables, '0.5.9')} where the profiled 0.5.16 launches "
                   f"{_grid(tables, '0.5.16')}, so at the version end "
                   + (f"its attention moves SGLang by {t('seed_assumptions', version, 'sglang_ms', '+.2f')} ms per token"
                      if version and version.get("sglang_ms") is not None else "it moves SGLang")
                   + " (a hypothesis: profiling 0.5.9's triton backend on the same slices settles it).")
    return " ".join(out)


def _grids_words(tot: dict) -> str:
    """Which engine's profiled split count was fixed at CUDA-graph capture (the recorded ``split_count_at`` of
    data/reference/attention-12.json): the ratio is then of two launches as profiled, not of the kernels at one grid."""
    from .ranges import recorded_attention

    fixed = [(r["engine"], r["version"]) for r in recorded_attention() if r.get("split_count_at")
             and tot.get(r["engine"], {}).get("measured_version") in (None, r["version"])]
    if not fixed:
        return ""
    who = " and ".join(f"{prose_name(e)} {v}'s" for e, v in fixed)
    return (", each at the split grid its engine launched there (" + who + " fixed when the decode CUDA graph was captured, "
            "from the slices' max_model_len: the attention row of `seed_assumptions`): a ratio of two launches as profiled, "
            "not of the kernels at one grid")


def _grid(tables: dict, version: str) -> str:
    """SGLang ``version``'s Triton MLA split grid on the seed's GPUs (table seed_attention_12), tagged."""
    row = next((a for a in tables.get("seed_attention_12", []) if a["engine"] == "sglang" and a["version"] == version), None)
    return t("seed_attention_12", row, "split_cap_12_0", "d") if row else "?"


def _q_ratio(att: dict) -> str:
    from ..stated.tags import q

    ratio = att["sglang"] / att["vllm"] if att.get("vllm") else None
    return (q("seed_attention_ratio", ratio, ".1f") + " times") if ratio else "longer"


def _fixes_line(tables: dict) -> str:
    ranked = [f for f in tables["seed_fixes"] if f.get("expected_gain_ms") is not None]
    rest = sorted({f["label"] for f in tables["seed_fixes"] if f.get("expected_gain_ms") is None})
    line = ("**Changes ranked by expected gain** (table below; each with the command that checks it): "
            + "; ".join(f"{prose_name(f['engine'])}: {_change(f)} {t('seed_fixes', f, 'expected_gain_ms', '.2f')} ms "
                        f"({t('seed_fixes', f, 'gain_low_ms', '.2f')} to {t('seed_fixes', f, 'gain_high_ms', '.2f')}"
                        + (f", needs {f['needs_version']}" if f.get("needs_version") else "") + ")" for f in ranked) + ".")
    from .seed import served_alternative, served_words

    for f in ranked:
        if f.get("served") and f.get("depth"):   # decided at depth on one machine (gains._attention)
            line += (f" {prose_name(f['engine'])}'s {f['change']}: {f.get('note')}; at "
                     f"{t('seed_fixes', f, 'depth_moe_layers', 'd')} MoE layers on one H200 (profile run unit "
                     f"`{f['depth_run_id']}`, {t('seed_fixes', f, 'depth_starts', 'd')} starts or more a side) it "
                     f"was faster on both measures, served time per token {t('seed_fixes', f, 'depth_tpot_ms_pct', '+.2f')}% "
                     f"and GPU busy {t('seed_fixes', f, 'depth_busy_ms_pct', '+.2f')}%; the shallow slices gave no verdict "
                     "(" + served_words(served_alternative(f["change"].rsplit(" ", 1)[-1])) + "; the figures: the row's "
                     "`range_basis`) - ranked by its expected gain, its low end no gain at all, as nothing was measured on "
                     "the seed's GPUs.")
        elif f.get("served"):
            line += (f" {prose_name(f['engine'])}'s {f['change']}: {f.get('note')}; "
                     + served_words(served_alternative(f["change"].rsplit(" ", 1)[-1]))
                     + " (the figures: the row's `range_basis`) - ranked by its expected gain all the same, as no measurement "
                     "was on the seed's GPUs.")
    if rest:
        line += " The others carry no gain here: " + ", ".join(f"*{r}*" for r in rest) + " (each row's basis says which code decided it)."
    return line


def verdict_markdown(tables: dict) -> str:
    """The verdict (Markdown): the likely cause and first change, the projection as a range, the parts, the fixes."""
    from .seed import _versions_line

    if not tables.get("seed_range") or not tables.get("seed_comm"):
        return ("**Verdict:** not projected - the H200 profiles of both engines' Triton MLA backends are missing from the "
                "profile run; the seed's gap stays unexplained here.")
    tot = {r["engine"]: r for r in tables["seed_projection"] if r["category"] == "total"}
    parts = [_cause(tables), _range_line(tables), _parts_line(tables)]
    if "sglang" in tot and "vllm" in tot:
        parts.append(_versions_line(tot["sglang"], tot["vllm"]))
    parts.append(_fixes_line(tables))
    return "\n\n".join(p for p in parts if p)


verdict = verdict_markdown
