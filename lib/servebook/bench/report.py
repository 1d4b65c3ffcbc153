"""Chapter 05's words for the page: "What we found" and "Check yourself", every figure tagged (``servebook.stated.q``) or
listed in ``UNTAGGED`` with the reason it cannot carry a tag.

    Markdown("\\n".join(found(store, m, runs=5, warmup=10, verdict=verdict, ...)))
    check_yourself(m, verdict=verdict, ceiling_check_df=cc, seed=seed, seed_tp=8)
"""

from __future__ import annotations

from ..stated.text import marked
from .figures import sweep_parameters
from .limits import say_breakdown
from .tables import client_check

__all__ = ["UNTAGGED", "excerpt", "FENCE", "whole_block", "ceiling_sentence", "say_sweep_stops", "found", "check_yourself"]


# Figures stated in prose (Markdown output) that carry no servebook.stated tag, and why each cannot.
UNTAGGED = {
    "failure excerpts": "text of a recorded error, not a quantity",
    "Check yourself's worked example (4 tokens per chunk every 40 ms)": "a fixed example of the definitions, not a measurement",
    "the 95% of the intervals and half of the client's ceiling in the method text":
        "definitions of the method (servebook.stated.EXCEPTIONS names the 95%); the constants the verdicts use are tagged "
        "as method_constant where a sentence states them (bench.ceiling.ENGINE_REGIME, BOUND_AT), and the notebook names "
        "bench.runs.SATURATION_GROWTH instead of typing it",
    "the what-if page's GB per token, TB/s and all-reduce ms": "inputs from the data files (data/models, data/hardware) "
        "behind the tagged limits (card_roofline_tok_s, plan_roofline_tok_s)",
    "printed (not Markdown) lines: client ceiling, warnings, notes": "console output under a table, which the table itself shows",
}


def excerpt(text, n: int = 160) -> str:
    """``text`` on one line, at most about ``n`` characters, cut only between words (a cut says so: " [...]")."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    cut = text[:n].rsplit(" ", 1)[0] if " " in text[:n] else text[:n]
    return f"{cut} [...]"


FENCE = "`" * 3


def whole_block(title: str, texts) -> list[str]:
    """Markdown lines: ``texts`` whole, in a collapsed block under ``title`` (nothing when there is none)."""
    texts = [str(t) for t in texts if str(t).strip()]
    if not texts:
        return []
    body = "\n\n".join(t.replace(FENCE, "'" * 3) for t in texts)
    return ["", f"<details><summary>{title}</summary>", "", FENCE + "text", body, FENCE, "", "</details>"]


# -- the client's ceiling ---------------------------------------------------------------------------------------------
def ceiling_sentence(v: dict) -> str:
    """The verdict on servebook's own transport, every figure from the rows of `client_ceiling`."""
    from ..stated import q

    if not v["compared"]:
        return f"Not compared in this run: {v['reason_tagged']}."
    rates = ", ".join(f"{k} {q('client_ceiling_tok_s', t, ',.0f', of=k)}" for k, t in v["ceilings"].items())
    out = f"Client ceilings against the fake server: {rates} tok/s."
    if not v["bench_serving_measured"]:
        return f"{out} {v['reason_tagged']}: this run does not decide whether the hand-written transport is justified."
    for k in ("servebook", "httpx"):
        if v["ratios"][k] is not None:
            out += (f" At its best level {k}'s is {q('ceiling_ratio', v['ratios'][k], '.1f', of=k)}x bench_serving's "
                    f"({'above' if v['reaches'][k] else 'below'} the goal of {q('ceiling_goal', v['goal'], 'g')}x).")
    r = v["decided_in"] or {}
    if r.get("servebook_ratio") and r.get("httpx_ratio"):
        out += (f" The verdict is taken where engines stream, one token per network read ({q('method_constant', r['events_per_write'], 'd', of='ceiling_engine_regime')} event per "
                f"write): there servebook's is {q('ceiling_ratio_decided', r['servebook_ratio'], '.2f', of='servebook')}x and httpx's "
                f"{q('ceiling_ratio_decided', r['httpx_ratio'], '.2f', of='httpx')}x, their cores "
                f"{q('ceiling_busy_decided', r['servebook_busy'], '.0%', of='servebook')} and "
                f"{q('ceiling_busy_decided', r['httpx_busy'], '.0%', of='httpx')} busy.")
    if v["justified"] is None:
        return f"{out} Not decided here: {v['reason_tagged']}."
    return (f"{out} The hand-written transport is {q('fast_path_justified', v['justified'], 'justified|not justified')} on "
            f"this host: {v['reason_tagged']}.")


# -- the sweep: what it ran with, why it stopped -------------------------------------------------------------------------
def say_sweep_stops(store) -> list[str]:
    """One Markdown bullet per configuration: the sweep's levels and requests as they ran, and why it stopped."""
    from ..stated import q

    lines = []
    for s in sweep_parameters(store):
        lab = s["label"]
        lines.append(f"- {lab}: the sweep ran C = {q('sweep_levels', s['levels'], of=lab)} with "
                     f"{q('sweep_requests_per_c', s['requests_per_level_x_C'], of=lab)} x C requests per level"
                     + (", each level warmed first" if s["warmed_levels"] else "") + "; it stopped on "
                     f"{q('sweep_stopped_by', s['stopped_by'], of=lab)}: {q('sweep_stop_why', s['why'], of=lab)}.")
    return lines


# -- what we found, check yourself ---------------------------------------------------------------------------------------
def _at(label, c) -> str:
    return f"{label} | C={int(c)}"


def _same_start(store, r) -> bool | None:
    """Whether one recorded server start measured both takes of a pair of ``bench.remeasured`` (``servers.jsonl``),
    None where the run cannot tell (no store, no registry, or servers of that engine side by side)."""
    from .figures import server_start_at

    if store is None:
        return None
    engine = str(r["label"]).split("/")[0]
    a, b = server_start_at(store, engine, r.get("before_at")), server_start_at(store, engine, r.get("after_at"))
    return (a == b) if a and b else None


def _first_use_reading(r, t, same: bool | None) -> str:
    """What a sweep level's fall that did not recur once warmed says: a fact only where one server start measured the
    level both ways; otherwise a hypothesis, with the measurement that settles it."""
    starts = ("the two sweeps ran on different server starts (`servers.jsonl`)" if same is False else
              "this run does not show that one server start measured both (`servers.jsonl`)")
    settle = "the level measured unwarmed and then warmed on one server start, several batches each way, would settle it"
    if r["after"] >= 3 * r["before"]:
        if same:
            return ("did not recur once the level was warmed first, a " + f"{t(r, 'ratio', '.1f')}x change on the same server "
                    "start: it was a first-use cost at that concurrency, not saturation (which kernel or cache paid it is not "
                    "measured here).")
        return ("did not recur once the level was warmed first, a " + f"{t(r, 'ratio', '.1f')}x change. Hypothesis: a first-use "
                f"cost at that concurrency, not saturation; not settled, since {starts}, one batch per level each; {settle}.")
    return ("did not recur once the level was warmed first: consistent with a first-use cost, a hypothesis only (one batch "
            f"per level each way, no interval{'' if same else '; ' + starts}; {settle}).")


def _remeasured_lines(again, store=None) -> list[str]:
    """What measuring again changed, per configuration (``bench.remeasured`` rows); ``store`` tells whether one server
    start measured both takes (without it, the run is taken not to show that)."""
    import pandas as pd

    from ..stated import q
    from .runs import remeasured_subject

    def t(r, field: str, fmt: str = "") -> str:  # recomputed by the registry from the same bench.remeasured
        value = r["after"] / r["before"] if field == "ratio" else r[field]
        return q("remeasured", value, fmt, of=remeasured_subject(r, field))

    lines = []
    for label, g in pd.DataFrame(again).groupby("label", sort=False) if again else []:  # what measuring again changed
        single, sweep = g[g["phase"] == "single"], g[g["phase"] == "sweep"].sort_values("concurrency")
        if len(single):
            r = single.iloc[-1]
            lines.append(f"- {label}: single stream measured again with {t(r, 'after_method')} (before: {t(r, 'before_method')}): "
                         f"{t(r, 'before', ',.0f')} -> {t(r, 'after', ',.0f')} tok/s.")
        if len(sweep):
            fell = [r for _, r in sweep.iterrows() if r["fell"]]  # bench.remeasured: sweep_stalls' rule, both times
            levels = ", ".join(f"C={int(r['concurrency'])} {t(r, 'before', ',.0f')} -> {t(r, 'after', ',.0f')}" for _, r in sweep.iterrows()
                               if pd.notna(r["before"]) and pd.notna(r["after"]))
            last = sweep.iloc[-1]
            text = f"- {label}: sweep measured again with {t(last, 'after_method')} (before: {t(last, 'before_method')}), tok/s: {levels}."
            for r in fell:
                text += (f" The fall at C={int(r['concurrency'])} " + (
                    _first_use_reading(r, t, _same_start(store, r)) if not r["recurred"]
                    else "recurred with the level warmed first, so first use does not explain it; the cause is not settled by this run."))
            lines.append(text)
    return lines


def _single_vs_c1_line(v: dict) -> str:
    """A configuration whose single stream and sweep C=1 level disagree (``bench.figures.single_vs_c1``, ``apart``):
    both figures, where the gap is (time per token), what differs between the two measurements, and a hypothesis with
    the measurement that settles it."""
    from ..stated import q

    lab = v["label"]

    def f(field: str, fmt: str) -> str:
        return q("single_vs_c1", v[field], fmt, of=f"{lab} | {field}")

    reaches = (v["warmup_min"] is not None and v["warmup_min"] <= v["c1_max"] and v["warmup_max"] >= v["c1_min"])
    text = (f"- **{lab}: its single stream and its sweep's C=1 level disagree.** Single stream (the sweep's server start) "
            f"{f('single_tok_s', ',.1f')} ± {f('single_ci95', ',.1f')} tok/s, its requests {f('single_min', ',.0f')} to "
            f"{f('single_max', ',.0f')}; the C=1 level {f('c1_user_tok_s', ',.1f')} tok/s per user "
            f"({f('c1_throughput_tok_s', ',.1f')} tok/s throughput), its requests {f('c1_min', ',.0f')} to {f('c1_max', ',.0f')}: "
            f"{f('gap_pct', '+.0f')}%, outside the single stream's interval. The median time per output token was "
            f"{f('single_tpot_ms', '.2f')} ms against {f('c1_tpot_ms', '.2f')} ms, so the gap is in decode itself, not in the first "
            "token or in how the level's throughput is counted. "
            + ("Both ran on one server start (`servers.jsonl`), one after the other, " if v["same_start"] else "")
            + (f"{'w' if v['same_start'] else 'W'}ith the same prompt and output tokens ({f('prompt_tokens', '')} and "
               f"{f('output_tokens', '')}). " if v["same_tokens"] else ("" if not v["same_start"] else "with different tokens. "))
            + f"What differs is how they were sent: the single stream sent {f('single_warmup', 'd')} warm-up requests, then one "
            "client call per run; the C=1 level sent " + ("one untimed request first (`level_warmup`), then " if v["c1_level_warmup"]
                                                          else "no warm-up of its own, then ")
            + f"its {f('c1_requests', 'd')} requests back to back in one client call.")
    if v["warmup_min"] is not None:
        text += (f" The single stream's own warm-up requests, sent back to back in one call as the level's are, ran at "
                 f"{f('warmup_min', ',.0f')} to {f('warmup_max', ',.0f')} tok/s"
                 + (": the C=1 level's rate appears there too, so how the requests were sent does not explain the gap alone." if reaches
                    else "."))
    return text + (" Hypothesis: the server's decode speed changed between the two measurements" if reaches else
                   " Hypothesis: the warm-up before each or the way the requests were sent, or the server's decode speed changing "
                   "between the two") + ("; this run does not settle it: single-stream runs and C=1 batches alternated several "
                                         "times on one server start, with the GPU's clocks recorded, would.")


def _stall_reading(st: dict, summary_rows) -> str:
    """What a stalled sweep level (``bench.sweep_stalls``) says about its cause: where the level was warmed first
    (``level_warmup`` on its row) and stalled all the same, the warm-up counts against a first-use cost; else first use
    is the hypothesis, settled by the level warmed first."""
    row = next((r for r in reversed(list(summary_rows)) if r.get("phase") == "sweep" and r.get("label") == st["label"]
                and r.get("concurrency") == st["concurrency"]), {})
    head = "A saturated server holds its throughput and queues each request a little; this looks like a stall. "
    if row.get("level_warmup"):
        return (head + f"The level was warmed first (as many untimed requests as its concurrency, at C={st['concurrency']}, just "
                "before it: `level_warmup`) and stalled all the same: that counts against a first-use cost (kernels compiled on the first "
                "use of the batch shape) as the cause. The cause is not settled by this run; a trace of the engine's scheduler "
                "at that level, or the level repeated on the same server start, would settle it. The sweep's peak is a lower "
                "bound and its stop is not a saturation point.")
    return (head + "Hypothesis: kernels compiled on the first use of the new batch shape (not measured here); settled by the "
            "same level measured again after a warm-up at that concurrency, which the sweep now does before every level "
            "(`level_warmup`). Until then the sweep's peak is a lower bound and its stop is not a saturation point.")


def _client_check_line(cc) -> str:
    from ..stated import q

    cc = cc[cc["harness_fault"].isna()]

    def turn(r) -> str:  # a metric whose two servebook runs disagree: the run after bench_serving's, against it
        xs = r.get("servebook_runs") if isinstance(r.get("servebook_runs"), list) else []
        if r["servebook_spread"] <= 0.5 or len(xs) < 2:
            return ""
        at = f"{r['label']} | {r['metric']} | C={int(r['concurrency'])}"
        return (f" (servebook's runs {', '.join(q('client_check_turn', x, ',.0f' if x >= 100 else '.3g', of=f'{at} | run {i}') for i, x in enumerate(xs, 1))}: "
                f"its run after bench_serving's is "
                f"{q('client_check_turn', (xs[-1] - r['bench_serving']) / r['bench_serving'], '+.1%', of=at + ' | last against bench_serving')}; hypothesis: its first run, at a concurrency the server had "
                "not served since it started, paid a first-use cost like the first sweep's; the check now warms the server at its "
                "concurrency first)")
    per = ", ".join(f"{m} " + " / ".join(
        f"{q('client_check_rel_diff', r['rel_diff'], '+.1%', of=f'{r.label} | {m} | C={int(r.concurrency)}')} at C={int(r['concurrency'])}{turn(r)}"
        for _, r in g.iterrows()) for m, g in cc.groupby("metric", sort=False))
    return (f"- servebook's client against `sglang.bench_serving`, taking turns on the live server (servebook - bench_serving, "
            f"relative): {per}. A difference beyond servebook's own run-to-run spread is the clients' or the server's between "
            "turns; which, this run does not settle (more alternating turns would).")


def found(store, m: dict, *, runs: int, warmup: int, verdict: dict, ceiling_tok_s, ceiling_check_df, seed: dict) -> list[str]:
    """"What we found" as Markdown bullets, from this run's tables: each configuration's rate, latencies and sweep (with
    why it stopped), engines side by side, the two chapters' defaults, warm-up and stalls, what measuring again changed,
    levels held back by waits, failures, the seed's rates against their limits, the time split, the client checks."""
    from ..findings import default_methods, say_default_methods
    from ..profile.depths import found_lines as depths_found
    from .runs import remeasured, sweep_stalls

    measured_t = _measured_throughput(store)
    lines = _rates(store, m, runs, measured_t)
    lines += depths_found(store)   # a run of profiles only: the profiles' served times per slice depth (profile.depths)
    lines += say_sweep_stops(store)
    lines += _side_by_side(measured_t)
    methods = default_methods(store)
    if methods:  # chapter 03 measured the default too: the same way, or not
        lines.append(say_default_methods(methods))
    lines += _warming(m["single_df"], warmup)
    stalls = sweep_stalls(m["summary_rows"], m["request_rows"])
    lines += _stalls(stalls, m)
    lines += _remeasured_lines(remeasured(store.rows("bench_summary")), store)
    lines += _held_back(m["sweep_ok"], stalls)
    lines += _nothing_succeeded(m["single_all"], m["sweep_df"])
    lines += _seed_against_limits(seed)
    lines += say_breakdown(store)
    lines += _client_lines(store, verdict, ceiling_tok_s, ceiling_check_df)
    return lines + _failures(store)


def _measured_throughput(store) -> list[dict]:
    """Chapter 06's throughput rows of the configurations whose single stream was measured."""
    from ..findings import throughput

    return [t for t in throughput(store) if t["single_tok_s"] is not None]


def _rates(store, m: dict, runs: int, measured_t: list[dict]) -> list[str]:
    """Per configuration, chapter 06's sentences of its single stream (and where its C=1 level disagrees), its latencies."""
    from ..stated import q, say_throughput
    from .figures import single_vs_c1

    single_df, lines = m["single_df"], []
    apart = {v["label"]: v for v in single_vs_c1(store) if v["apart"]}  # single stream and C=1 disagree: said beside them
    for t in measured_t:  # chapter 06's definition and sentences: per label, the recorded single-stream row, its roofline
        lines += say_throughput(t, runs=runs)
        if t["label"] in apart:
            lines.append(_single_vs_c1_line(apart[t["label"]]))
        r = single_df[single_df["label"] == t["label"]].iloc[-1]
        lab = t["label"]
        lines.append(f"- {lab}: TTFT {q('single_ttft_ms', r['ttft_s_mean'] * 1e3, '.0f', of=lab)} ms, TPOT "
                     f"{q('single_tpot_ms', r['tpot_s_mean'] * 1e3, '.1f', of=lab)} ms, "
                     f"{q('tokens_per_chunk', r['tokens_per_chunk'], '.2f', of=lab)} tokens per streamed chunk.")
    return lines


def _side_by_side(measured_t: list[dict]) -> list[str]:
    """Engines side by side: chapter 06's one comparison, each against the first engine measured."""
    from ..stated.intervals import separated
    from ..stated import q

    lines = []
    for t in measured_t[1:]:
        ref = measured_t[0]
        lines.append(f"- {t['label']} against {ref['label']}, single stream: "
                     f"{separated(t['single_tok_s'], t['single_ci95'], ref['single_tok_s'], ref['single_ci95'], starts=(t['starts'], ref['starts']), of=t['label'] + ' vs ' + ref['label'], names=('single_vs_pct', 'single_vs_starts'))}"
                     + (f"; sweep peak {q('peak_tok_s', t['peak_tok_s'], ',.0f', of=t['label'])} tok/s at "
                        f"C={q('peak_c', t['peak_c'], 'd', of=t['label'])} against {q('peak_tok_s', ref['peak_tok_s'], ',.0f', of=ref['label'])} at "
                        f"C={q('peak_c', ref['peak_c'], 'd', of=ref['label'])} (one batch per level: no interval, so a difference there is a "
                        "hint, not a finding)." if t["peak_tok_s"] and ref["peak_tok_s"] else "."))
    return lines


def _warming(single_df, warmup: int) -> list[str]:
    """A single-stream rate still climbing over the runs: warm-up, not spread."""
    lines = []
    for _, r in single_df.iterrows():  # a rate still climbing over the runs is warm-up, not spread
        xs = [x for x in r.get("decode_tok_s_runs") if x is not None] if isinstance(r.get("decode_tok_s_runs"), list) else []
        if len(xs) >= 3 and xs == sorted(xs) and xs[-1] > 1.3 * xs[0]:
            lines.append(f"- {r['label']}: the single-stream rate rose in every run, {xs[0]:,.0f} to {xs[-1]:,.0f} tok/s, so its interval "
                         f"measures warm-up as much as spread. Hypothesis: the server was still warming after {warmup} warm-up requests; "
                         "settled by more warm-up requests (`warmup`) and the same runs again.")
    return lines


def _stalls(stalls: list[dict], m: dict) -> list[str]:
    """Each level where throughput fell, with its first-token waits and what they say."""
    from ..stated import q

    lines = []
    for st in stalls:
        def s_(field: str, fmt: str, st=st) -> str:  # recomputed by the registry from the same bench.sweep_stalls
            return q("sweep_stall", st[field], fmt, of=f"{st['label']} | C={st['concurrency']} | {field}")

        lines.append(f"- {st['label']}: throughput fell from {s_('best_before_tok_s', ',.0f')} tok/s at C={st['best_before_concurrency']} to "
                     f"{s_('throughput_tok_s', ',.0f')} at C={st['concurrency']}; first tokens there took {s_('ttft_median_s', '.2f')} s "
                     f"(median) and up to {s_('ttft_max_s', '.2f')} s, against {s_('ttft_median_best_s', '.2f')} s at C={st['best_before_concurrency']}. "
                     + (_stall_reading(st, m["summary_rows"]) if st["stalled"]
                        else "The first tokens do not show a stall; the cause is not settled by this run."))
    return lines


def _held_back(sweep_ok, stalls: list[dict]) -> list[str]:
    """Levels held back by first-token waits, not by decode (:func:`.saturation.waits_limit`; a stall already said is
    not said again)."""
    from ..stated import q
    from .saturation import waits_limit

    lines = []
    for _, r in (sweep_ok.iterrows() if len(sweep_ok) else []):  # a level held back by first-token waits, not by decode
        p50, p99, user = r.get("ttft_server_s_p50"), r.get("ttft_server_s_p99"), r.get("per_user_tok_s")
        stalled = any(st["label"] == r["label"] and st["concurrency"] == r["concurrency"] for st in stalls)  # said above
        if not stalled and waits_limit(r.to_dict()):
            at = _at(r["label"], r["concurrency"])
            lines.append(f"- {r['label']} at C={int(r['concurrency'])}: each user decoded at {q('sweep_per_user_tok_s', user, ',.0f', of=at)} "
                         f"tok/s, yet a request waited up to {q('sweep_ttft_server_p99_s', p99, '.2f', of=at)} s for its first token after "
                         f"it was sent (median {q('sweep_ttft_server_p50_ms', p50 * 1e3, '.0f', of=at)} ms), so the level's "
                         f"{q('sweep_throughput_tok_s', r['throughput_tok_s'], ',.0f', of=at)} tok/s is well below C={int(r['concurrency'])} "
                         f"users at that rate ({q('sweep_all_users_tok_s', r['concurrency'] * user, ',.0f', of=at)}): the waits, not decode, limit it, so this level is no "
                         "saturation point. The cause is not settled by this run (a trace of the engine's scheduler at that level would).")
    return lines


def _nothing_succeeded(single_all, sweep_df) -> list[str]:
    """Configurations where no single-stream request, or no request of the sweep, succeeded."""
    lines = []
    for _, r in (single_all[single_all["decode_tok_s_mean"].isna()].iterrows() if len(single_all) else []):
        errors = r.get("errors") if isinstance(r.get("errors"), list) else []
        lines.append(f"- **{r['label']}** single stream: no request succeeded ({int(r['failed'])} failed)"
                     + (f", e.g. {excerpt(errors[0])}" if errors else "") + "; the server log says why.")
    for label, g in (sweep_df.groupby("label") if len(sweep_df) else []):
        if not g["throughput_tok_s"].notna().any():
            lines.append(f"- {label}: no request of the concurrency sweep succeeded ({int(g['failed'].sum())} failed).")
    return lines



def _latency_label(seed: dict, row: dict) -> str:
    """The label of the all-reduce latency a seed row was computed against (the floor of its ``allreduce_source``)."""
    labels = dict(zip((label for label, _ in seed.get("floors") or []), seed.get("latency_labels") or []))
    return labels.get(row["allreduce_source"]) or row["allreduce_source"] or "no latency"

def _seed_against_limits(seed: dict) -> list[str]:
    """The seed's reported rates against their bandwidth roofline and the one with the communication floor."""
    from ..stated import q

    lines = []
    for row in seed["rows"]:
        pct_comm = 100 * row["measured_tok_s"] / row["roofline_with_comm_tok_s"]
        # its own latency, tagged (the label of the floor its row was computed against)
        source = _latency_label(seed, row)
        lines.append(f"- {row['case']}: {q('seed_reported_tok_s', row['measured_tok_s'], '.1f', of=row['case'])} tok/s is "
                     f"{q('seed_pct_of_roofline', row['pct_of_roofline'], '.1f', of=row['case'])}% "
                     f"of its bandwidth roofline ({q('seed_row_roofline_tok_s', row['roofline_tok_s'], ',.0f', of=row['case'])} tok/s); "
                     f"with the communication floor at {source}, {q('seed_pct_of_comm_roofline', pct_comm, '.1f', of=row['case'])}% of "
                     f"{q('seed_comm_roofline_tok_s', row['roofline_with_comm_tok_s'], ',.0f', of=row['case'])} tok/s.")
    return lines


def _client_lines(store, verdict: dict, ceiling_tok_s, ceiling_check_df) -> list[str]:
    """SGLang's own client against servebook's, the client's ceiling against the measurements, and the ceiling's verdict."""
    from ..stated import q

    lines = []
    cc, _ = client_check(store)
    if len(cc):  # servebook's client against SGLang's own on the live server, each metric both ways (the last of each)
        lines.append(_client_check_line(cc))
    n_near = int(ceiling_check_df["near_ceiling"].sum()) if len(ceiling_check_df) else 0
    if n_near:
        lines.append(f"- **{n_near} measurement(s) came within {ceiling_check_df['warn_at'].iloc[0]:.0%} of the client's own ceiling** "
                     f"({q('servebook_ceiling_tok_s', ceiling_tok_s, ',.0f')} tokens/s against a fake server): read them as lower bounds "
                     "of the server's speed.")
    elif len(ceiling_check_df):
        lines.append(f"- The client sustained up to {q('servebook_ceiling_tok_s', ceiling_tok_s, ',.0f')} tokens/s against a fake server; "
                     f"the busiest measurement used {q('ceiling_use_max', ceiling_check_df['share_of_ceiling'].max(), '.2%')} of it, so the "
                     "client is not what these numbers measure.")
    lines.append(f"- {ceiling_sentence(verdict)}")
    return lines


def _failures(store) -> list[str]:
    """The run's recorded failures: how many, the last one, and all of them whole."""
    from ..stated import q

    lines = []
    fails = store.table("failures")
    if len(fails):
        lines.append(f"- {q('failures_recorded', len(fails), 'd')} recorded failures in this run (table `failures`), e.g. "
                     f"{fails.iloc[-1]['step']}: {excerpt(marked(fails.iloc[-1]['error']))}")
        lines += whole_block("The recorded failures, whole", [f"{r['step']}: {marked(r['error'])}" for _, r in fails.iterrows()])
    return lines


def check_yourself(m: dict, *, verdict: dict, ceiling_check_df, seed: dict, seed_tp: int) -> list[tuple[str, str]]:
    """The chapter's questions, each answered from this run's tables (for ``findings.check_yourself_markdown``)."""
    from ..stated import q

    single_df, sweep_df = m["single_df"], m["sweep_df"]
    qa = []
    cfg = m["single_cfg"]
    if len(cfg) and len(single_df):
        r0 = cfg.iloc[0]
        lab = r0["label"]
        qa.append(("Why is `decode tok/s` computed from the first token on, and not as output tokens / end-to-end time?",
                   f"End-to-end time includes the prefill (TTFT), which does not scale with output length. Here {lab}: TTFT "
                   f"{q('single_ttft_ms', single_df[single_df['label'] == lab].iloc[-1]['ttft_s_mean'] * 1e3, '.0f', of=lab)} ms, then "
                   f"{q('single_tok_s', r0['decode_tok_s_mean'], ',.1f', of=lab)} tok/s; dividing all tokens by the whole time would mix the two."))
    first_tpc = (f"; this run's server sent {q('tokens_per_chunk', single_df[single_df['label'] == single_df.iloc[0]['label']].iloc[-1]['tokens_per_chunk'], '.2f', of=single_df.iloc[0]['label'])} "
                 "tokens per chunk." if len(single_df) else ".")
    qa.append(("A server streams 4 tokens per chunk every 40 ms. What is the inter-chunk gap, and what is the per-token inter-token latency?",
               "40 ms between chunks, 10 ms per token. servebook keeps both (`chunk_gap_ms`, `itl_ms`)" + first_tpc))
    c4 = sweep_df[sweep_df["concurrency"] == 4] if len(sweep_df) else sweep_df
    if len(c4):
        at = _at(c4.iloc[0]["label"], 4)
        c4_text = (f". Here at C=4 ({c4.iloc[0]['label']}): ttft_s p50 {q('sweep_ttft_p50_ms', c4.iloc[0]['ttft_s_p50'] * 1e3, '.0f', of=at)} ms, "
                   f"ttft_server_s p50 {q('sweep_ttft_server_p50_ms', c4.iloc[0]['ttft_server_s_p50'] * 1e3, '.0f', of=at)} ms.")
    else:
        c4_text = "; this run's sweep did not reach C=4."
    qa.append(("At C=4 with all requests arriving at once, why is `ttft_s` larger than `ttft_server_s` for some requests, and which would a user report?",
               "Requests beyond the free slots wait in the client's queue; `ttft_s` counts that wait, which is what the user feels" + c4_text))
    roof, rows = seed["roof"], seed["rows"]
    if roof is not None and rows:
        qa.append(("The seed case's limit: which floor dominates, memory or communication, and what would settle it?",
                   f"Memory takes {q('seed_t_mem_ms', rows[0]['t_mem_ms'], '.2f', of=rows[0]['case'])} ms per token on "
                   f"{q('seed_floor', seed_tp, 'd', of=seed['subject'] + ' | default | gpus')} GPUs; "
                   f"{q('card_fact', seed['n_ar'], 'd', of=seed['model'] + ' | ' + seed.get('n_ar_field', 'allreduces_per_token'))} "
                   "collectives take "
                   f"{q('seed_t_comm_ms', rows[0]['t_comm_ms'], '.2f', of=rows[0]['case'])} ms for {rows[0]['case']} at "
                   f"{_latency_label(seed, rows[0])}. The two are equal at "
                   f"{q('seed_crossover_us', rows[0]['t_mem_ms'] * rows[0]['allreduce_us'] / rows[0]['t_comm_ms'], '.1f', of=rows[0]['case']) if rows[0]['t_comm_ms'] else 'no'} us per all-reduce: below that memory dominates and bandwidth sets the limit, above it faster "
                   "all-reduce (custom kernels, NCCL settings) matters more. Only chapter 04 on the seed's PCIe host measures its latency."))
    if verdict["bench_serving_measured"]:
        qa.append(("Why does servebook stream with an HTTP client of its own instead of httpx, and what would make you replace it?",
                   _transport_answer(verdict)))
    qa.append(("When would a benchmark number be the client's, not the server's? How does this chapter check it?",
               "When the rate uses much of what the client can stream on its core. Each rate is compared with the client ceiling at the "
               + (f"nearest concurrency; here the busiest used {q('ceiling_use_max', ceiling_check_df['share_of_ceiling'].max(), '.2%')} of it."
                  if len(ceiling_check_df) else "nearest concurrency.")))
    return qa


def _transport_answer(v: dict) -> str:
    """The transport question answered once, at the level the verdict is taken (one event per write, as engines stream),
    the same reading "What we found" states: keep servebook's own client, replace it with httpx, or not decided."""
    from ..stated import q

    r = v["decided_in"] or {}
    goal = q("ceiling_goal", v["goal"], "g")
    head = f"Only a measurement keeps it: its ceiling must be at least {goal}x sglang.bench_serving's while a library client's is not."
    if v["justified"] is None or not r.get("servebook_ratio") or not r.get("httpx_ratio"):
        return f"{head} Not decided in this run: {v['reason_tagged']}."
    sb = q("ceiling_ratio_decided", r["servebook_ratio"], ".2f", of="servebook")
    hx = q("ceiling_ratio_decided", r["httpx_ratio"], ".2f", of="httpx")
    reading = (f"{head} At {q('method_constant', r.get('events_per_write'), 'd', of='ceiling_engine_regime')} event per write, as engines stream, servebook's is {sb}x and httpx's {hx}x: "
               f"the hand-written transport is {q('fast_path_justified', v['justified'], 'justified|not justified')} here. ")
    if v["justified"]:
        return reading + "httpx does not reach the goal at that level; where it does, the library client should replace servebook's own."
    if r.get("httpx_reaches"):
        return reading + "httpx reaches the goal at that level: the library client should replace servebook's own."
    return reading + "Neither reaches the goal at that level, so the hand-written transport buys nothing a library client lacks here."
