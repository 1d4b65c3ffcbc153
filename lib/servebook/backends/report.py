"""Chapter 03's page: the candidates, the table of starts, the plot and the sentences, built from the run's tables with
every stated number tagged (``servebook.stated.q``; the figures come from ``servebook.backends.figures``).

    picked, skipped = candidates_for(eng, backends_param, smoke=False, host=h)
    view = starts_table(store, ["sglang", "vllm"]); plot_rates(view)
    Markdown(describe(view)); Markdown(found_lines(store, ["sglang", "vllm"], view)); questions(store, names, view)

``UNTAGGED`` lists what the page states in prose without a tag, and why it cannot carry one.
"""

from __future__ import annotations

from typing import Any

from . import figures as fig
from .agreement import MIN_AGREEMENT, REQUESTS, TOLERANCE, TOP_K
from ..engines import listed_for, unknown_backends
from ..stated import q

__all__ = ["UNTAGGED", "FLAG_NOTES", "listed_for", "candidates_for", "starts_table", "plot_rates", "found_lines", "questions",
           "whatif_found", "whatif_questions", "flags_note", "TABLE_COLUMNS"]

UNTAGGED = {
    "the profile's GPU count and capability (what-if)": "facts of the hardware profile in data/hardware, not of a run table",
    "the 'answer' sentence of chapter 06 (say_backends)": "servebook.stated.say_backends tags its own figures",
    "the decode-agreement summary under the table": "written by servebook.backends.report.describe from the same rows; each "
    "start's agreement is stated tagged (backend_agreement) in 'Check yourself'",
    "flag values quoted from a recorded launch line (`--cuda-graph-max-bs 16`)": "the command as it ran, quoted",
}

# what a launch flag the recorded runs used does, from the engines' own help texts; why it was used, where the run says
FLAG_NOTES = {
    "--cuda-graph-max-bs": "SGLang captures CUDA graphs for batch sizes up to this value only; the recording commands "
                           "(`tools/gpu-stage/device.sh`) run chapter 05's sweep up to the same concurrency "
                           "(`max_concurrency`), and the records give no other reason",
    "--sampling-backend": "SGLang's kernels for its sampling layer; `pytorch` takes torch operations instead of FlashInfer's "
                          "sampling kernels. The records do not say why it was chosen; every measurement here is greedy",
    "--max-num-seqs": "vLLM schedules at most this many sequences at once (set beside SGLang's graph limit in the same "
                      "recording commands)",
}

TABLE_COLUMNS = ["engine", "attention", "mode", "outcome", "reported", "reported_source", "decode_agreement", "decode_positions",
                 "decode_tolerance", "tf_top1_agreement", "tf_logprob_mad", "agreement", "decode_tok_s", "decode_tok_s_ci95",
                 "ci_over", "start_rates", "ttft_ms", "ready_s", "port_free_after", "error"]


def flags_note(args: list[str]) -> str:
    """One Markdown sentence on the flags of ``args`` (a launch line, split) that ``FLAG_NOTES`` explains, each with the
    value it was given; '' when none."""
    seen = {}
    for i, a in enumerate(args):
        if a in FLAG_NOTES and a not in seen:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
            seen[a] = f"`{a}{' ' + value if value else ''}`: {FLAG_NOTES[a]}"
    return ("Launch flags added to every start, and what they do: " + "; ".join(seen.values()) + ".") if seen else ""


def candidates_for(eng, backends: str, smoke: bool = False, host=None) -> tuple[list[str], list[dict]]:
    """The backends to force for ``eng`` and those left out, each with its reason: the ``backends`` parameter's list
    where it names this engine, else every value the engine accepts that can run here (``runnable_here``)."""
    from .checks import runnable_here

    choices = eng.attention_choices()
    how = eng.attention_mechanism() if hasattr(eng, "attention_mechanism") else "flag"
    if eng.checks_cli:
        cli = eng.cli_options()
        print(f"{eng.name} {eng.version()}: {len(cli['options'])} options, read from its {cli['method']}; a backend is forced by "
              f"{'the flag ' + eng.attention_flag if how == 'flag' else 'the environment variable VLLM_ATTENTION_BACKEND'}")
    print(f"{eng.name} accepts {eng.attention_flag} =", ", ".join(choices))
    listed = listed_for(backends, eng.name)
    picked, skipped = [], []
    if listed is not None:  # the run names its candidates: the others are recorded as not run, with that reason
        bad = unknown_backends(listed, choices, eng.name)  # never started: the engine's own list does not have them
        picked = [n for n in listed if n not in bad]
        skipped = [{"engine": eng.name, "attention": n, "reason": "not in this run's `backends` list"} for n in choices if n not in listed]
        skipped += [{"engine": eng.name, "attention": n, "reason": f"not a value {eng.name} accepts (its list: {', '.join(choices)}); "
                     "no server was started for it"} for n in bad]
        for n in bad:
            print(f"warning: `backends` names {n!r}, which {eng.name} does not accept; left out, no server started")
    else:
        for name in choices:
            ok, why = runnable_here(name, smoke=smoke, host=host)
            (picked.append(name) if ok else skipped.append({"engine": eng.name, "attention": name, "reason": why}))
    if smoke:  # one forced backend besides the default keeps the smoke run short
        picked = [c for c in picked if c == "eager"] or picked[:1]
    return picked, skipped


def starts_table(store, names: list[str]):
    """Table ``backends`` for these engines, with each start's rate (``start_rates``) and what its interval covers."""
    from ..stated.intervals import ONE_START

    table = store.table("backends")
    table = table[table["engine"].isin(names)] if len(table) else table
    if len(table) and "mode" not in table:
        table["mode"] = "default"
    if len(table):  # each start's rate; a row recorded before starts were counted had one
        starts = table["starts"] if "starts" in table else [None] * len(table)
        table["start_rates"] = [[round(x["decode_tok_s"], 1) for x in v if isinstance(x, dict) and x.get("decode_tok_s") is not None]
                                if isinstance(v, list) else None for v in starts]
        table["ci_over"] = [f"{len(v)} server starts" if isinstance(v, list) and len(v) >= 2 else ONE_START for v in table["start_rates"]]
    return table


def plot_rates(table):
    """Horizontal bars: each start's decode rate with its 95% interval, red where its outcome is not ok."""
    import matplotlib.pyplot as plt
    import pandas as pd

    plot = table.copy()
    if not len(plot):
        return None

    def column(name, fill):  # a column no row has (every backend failed: no rate) reads as all `fill`
        return plot[name] if name in plot else pd.Series(fill, index=plot.index, dtype=object)

    plot["decode_tok_s"] = pd.to_numeric(column("decode_tok_s", None), errors="coerce")
    plot["outcome"] = column("outcome", "")
    plot = plot[plot["decode_tok_s"].notna() & plot["outcome"].isin(["ok", "overridden", "wrong output"])
                | (plot["decode_tok_s"].fillna(0) > 0)]
    if not len(plot):  # no start produced a rate: the failure table says why, no plot
        return None
    plot["label"] = plot["engine"] + " " + plot["attention"] + " " + column("mode", "").fillna("")
    fig_, ax = plt.subplots(figsize=(8, 0.35 * len(plot) + 1.2))
    ci = pd.to_numeric(column("decode_tok_s_ci95", 0), errors="coerce").fillna(0)
    low = [min(c, v) for c, v in zip(ci, plot["decode_tok_s"])]  # an interval is never drawn below zero tok/s
    ax.barh(plot["label"], plot["decode_tok_s"], xerr=[low, list(ci)],
            color=["tab:blue" if o == "ok" else "tab:red" for o in plot["outcome"]])
    ax.set_xlim(left=0)
    fig_.sb_caption = _caption(plot, column)
    ax.invert_yaxis()
    ax.set_xlabel("decode tok/s, single stream (bars: 95% interval; red: not ok)")
    ax.set_title("each attention backend that started, forced")
    fig_.tight_layout()
    return fig_


def _caption(plot, column) -> str:
    """The figure's caption, counted from what it draws: one bar per configuration (engine, backend, mode), the mean of
    its server starts' rates, so the starts are those bars' starts (``start_rates``; a row recorded before starts were
    counted, one)."""
    rates = column("start_rates", None).loc[plot.index]
    starts = sum(len(v) if isinstance(v, list) and v else 1 for v in rates)
    over = sorted({str(x) for x in column("ci_over", "one server start").loc[plot.index]})
    return (f"Chapter 03: single-stream decode rate (tok/s) of each attention backend forced: {len(plot)} configurations "
            f"(engine, backend, mode) drawn, each bar the mean over its server starts ({starts} starts in all); whiskers: 95% "
            f"interval ({', '.join(over)}), cut at zero; red: output not ok")


def _rate(r: dict) -> str:
    k = fig.row_key(r)
    return f"{q('backend_tok_s', r['decode_tok_s'], '.1f', of=k)} ± {q('backend_ci95', r.get('decode_tok_s_ci95') or 0, '.1f', of=k)}"


def _vs(r: dict, a: dict) -> str:
    from ..stated.intervals import separated, starts_of

    if fig.row_key(a) == fig.default_key(r):  # against its engine's default in the same mode: chapter 06's comparison
        tags = {"of": fig.row_key(r)}
    else:  # another pair (eager against graph): the pair named
        tags = {"of": f"{fig.row_key(r)} vs {fig.row_key(a)}", "names": ("backend_vs_pct", "backend_vs_starts")}
    return separated(r["decode_tok_s"], r.get("decode_tok_s_ci95"), a["decode_tok_s"], a.get("decode_tok_s_ci95"),
                     starts=(starts_of(r), starts_of(a)), **tags)


def _engine_lines(store, name: str, t, b: dict) -> list[str]:
    from ..stated import say_backends

    # a start measured again stands in its last row (the tagged figure is that row's); the counts are chapter 06's
    ok = t[t["outcome"] == "ok"].drop_duplicates(["engine", "attention", "mode"], keep="last")
    rows = [r.to_dict() for _, r in t.iterrows()]
    mode = next((m for m in ("graph", "default", "eager") if ((ok["mode"] == m) & (ok["attention"] == "auto")).any()), None)
    other = sum(1 for r in rows if r.get("outcome") == "ok" and r.get("mode") != mode)
    # what is counted: configurations (a backend, forced or the default, in one mode: a row of backends) and the server
    # starts they took (a configuration that served correct output is started `starts` times; one that failed, once)
    lines = [f"**{name}**: {q('backend_starts', b.get('tried', len(t)), 'd', of=f'{name} | tried')} configurations tried (a backend, "
             f"forced or the default, in one mode), {q('backend_server_starts', b.get('server_starts'), 'd', of=name)} server starts in all; "
             f"{q('backend_starts', b.get('correct', 0), 'd', of=f'{name} | correct')} of those configurations in {mode or 'no'} mode (the mode "
             "compared, and the count chapter 06's table gives) served output that agrees with the default backend and were timed"
             + (f"; {q('backend_starts', other, 'd', of=f'{name} | other modes')} more served it in another mode." if other else ".")]
    if b.get("correct") and b.get("default_tok_s") is not None:
        lines.append(f"- The answer (chapter 06 states the same): {say_backends(b)} Each start against the default:")
    autos = {}
    for m, g in ok.groupby("mode"):
        auto = g[g["attention"] == "auto"]
        if not len(auto):
            continue
        a = autos[m] = auto.iloc[0].to_dict()
        for _, r in g.sort_values("decode_tok_s", ascending=False).iterrows():
            if r["attention"] != "auto":
                lines.append(f"- {m}: **{r['attention']}** {_rate(r.to_dict())} tok/s vs the default (`{a.get('reported')}`) "
                             f"{_rate(a)}: {_vs(r.to_dict(), a)}")
    if "eager" in autos and ("graph" in autos or "default" in autos):  # what CUDA graphs are worth here
        e, gr = autos["eager"], autos.get("graph", autos.get("default"))
        lines.append(f"- CUDA graphs off (eager), the default `{e.get('reported')}`: {_rate(e)} tok/s against {_rate(gr)} with them: "
                     f"{_vs(e, gr)}.")
    earlier = fig.earlier_attempts(store, name)
    for r in rows:
        if r.get("outcome") != "ok":
            lines.append(f"- **{r['attention']}** ({r['mode']}): {r['outcome']} — {_error_of(r)}"
                         + (f" (an earlier attempt in this run was recorded otherwise: "
                            f"{q('earlier_attempt', earlier[r['attention']], of=name + ' | ' + r['attention'])})"
                            if r["attention"] in earlier else ""))
    ran = fig.default_ran_as(store, name)
    if ran:
        lines.append(f"- {', '.join(f'`{x}`' for x in ran)}: not forced on its own, and ran all the same: the default (`auto`) "
                     "loaded it (column `reported`).")
    return lines


def found_lines(store, names: list[str], table) -> str:
    """'What we found': per engine the configurations tried and correct (chapter 06's counts) and the server starts they
    took, each configuration against the default,
    what failed, what stopped, and what did not run (each backend once)."""
    from ..executions import last_recorded
    from ..findings import backends, default_methods, say_default_methods

    verdicts = {b["engine"]: b for b in backends(store)}  # chapter 06's definition: the fastest correct start vs the default
    lines: list[str] = []
    for name in names:
        t = table[table["engine"] == name] if len(table) else table
        if len(t):
            lines += _engine_lines(store, name, t, verdicts.get(name) or {})
    for f in store.rows("failures"):  # a sweep (or the chapter) that stopped: its rows so far are above
        if str(f.get("step", "")).startswith("chapter 03 sweep") and f.get("engine") in names:
            later = len(table) and ((table["engine"] == f["engine"]) & (table["recorded_at"].astype(str) > last_recorded(f))).any()
            lines.append(f"- **{f['engine']}**: " + ("an earlier sweep of this run stopped (measured again later: the rows above): "
                                                     if later else "the sweep stopped: ") + _failure_of(f))
        elif str(f.get("step", "")).startswith("chapter 03_"):
            lines.append(f"- An execution of this chapter stopped in this run: {_failure_of(f)}")
    if default_methods(store):  # chapter 05 measured the default too: the same way, or not
        lines.append(say_default_methods(default_methods(store)))
    lines += _asked_not_reached(store, names, table)
    skipped = [(n, x) for n in names for x in fig.not_run(store, n)]
    if skipped:
        lines.append("- Not run here: " + ", ".join(f"{n} {x['attention']} ({q('not_run_reason', x['reason'], of=n + ' | ' + x['attention'])})"
                                                for n, x in skipped) + ".")
    return "\n".join(lines) or "No backend ran."


def _whole(text) -> str:
    """A recorded error as the page states it: whole (a long one is still one line), never cut mid-word; a cut made when
    it was recorded is marked (``stated.text.marked``)."""
    from ..stated.text import marked

    return " ".join(marked(text).split())


def _error_of(r: dict) -> str:
    """A start's recorded error, whole and tagged as the text of its row (``backend_error``, recomputed from the table)."""
    return q("backend_error", _whole(r.get("error")), of=f"{fig.row_key(r)} | {r.get('recorded_at')}")


def _failure_of(f: dict, code: bool = False) -> str:
    """A row of ``failures``, whole and tagged as that row's text (``failure_text``); ``code``: shown as inline code."""
    return q("failure_text", _whole(f.get("error")), of=f"{f.get('step')} | {f.get('recorded_at')}", code=code)


def _asked_not_reached(store, names: list[str], table) -> list[str]:
    """Backends the engine's own validation was asked about (``backends_preflight``) that have no row in ``backends``
    (``figures.asked_not_started``: each once, its latest answer; never the backend the default loaded): refused before
    any start, or accepted and never started (a recording that ended first). Nothing is assumed about how they would
    have done."""
    refused, pending = [], []
    for name in names:
        for p in fig.asked_not_started(store, name):
            if p["ok"]:
                pending.append(f"{name} {p['attention']}")
            else:
                why = q("preflight_reason", p["reason"], of=f"{name} | {p['attention']} | {p['recorded_at']}")
                refused.append(f"{name} {p['attention']} ({why})")
    out = []
    if refused:
        out.append("- Refused by the engine's own validation before any start: " + ", ".join(refused) + ".")
    if pending:
        out.append("- Accepted by the engine's validation, but no start was recorded: " + ", ".join(pending)
                   + ". The run's RECORDED.md says why (a recording that ended first, for example); nothing is said about them here.")
    return out


def _agreements(rows, field: str, kind: str, positions: bool = False) -> str:
    out = []
    for _, r in rows.iterrows():
        k = fig.row_key(r.to_dict())
        s = f"{r['engine']} {r['attention']} {r['mode']} {q('backend_agreement', r[field], '.0%', of=f'{k} | {kind}')}"
        if positions:
            s += f" of {q('backend_decode_positions', r['decode_positions'], '.0f', of=k)}"
        out.append(s)
    return ", ".join(out)


def questions(store, names: list[str], table) -> list[tuple[str, str]]:
    """Chapter 03's 'Check yourself' questions, answered from this run."""
    from ..findings import backends
    from ..stated.intervals import fastest_correct

    qa: list[tuple[str, Any]] = []
    rep = table[["engine", "attention", "mode", "reported", "outcome"]].fillna("-") if "reported" in table else None
    qa.append(("How do you know the backend that ran is the one you forced, and not a silent fallback?",
               "Not from the flag: from the engine's own report after loading (column `reported`). In this run: "
               + ("; ".join(f"{r['engine']} {r['attention']} ({r['mode']}) -> {r['reported']} ({r['outcome']})" for _, r in rep.iterrows())
                  if rep is not None and len(rep) else "no backend reported")
               + ". A forced backend whose report differs is classified `overridden`."))

    def having(col):
        return table.dropna(subset=[col]) if col in table else table.iloc[0:0]

    qa.append(("Why compare decode-step token ids at the default's prefix, and not only greedy text, against the default backend?",
               "The weights are random, so no text reads well, and near-tied logits let two correct kernels pick different argmaxes; "
               "in a greedy run one flip changes every later token. Compared at the default's prefix, with near-ties tolerated, a "
               "flip costs one position; and only tokens from decode steps run the decode kernel that was forced. Here, decode: "
               + (_agreements(having("decode_agreement"), "decode_agreement", "decode", True) or "not recorded in this run")
               + "; teacher-forced (prefill only): " + (_agreements(having("tf_top1_agreement"), "tf_top1_agreement", "teacher-forced")
                                                        or "not measured")
               + "; greedy: " + (_agreements(having("agreement"), "agreement", "greedy") or "not measured") + "."))
    for b in backends(store):
        if b["engine"] in names and b.get("correct") and b.get("default_tok_s") is not None:
            e = b["engine"]
            best = b.get("best_reported") or b["best"]
            qa.append((f"Should you force a different attention backend for {e} on this host?",
                       f"Yes: `{best}` was faster than the default beyond both 95% intervals, with correct output."
                       if b["change_supported"] else
                       f"No: {fastest_correct(b, 'start')}, `{best}` ({q('best_tok_s', b['best_tok_s'], ',.1f', of=e)} ± "
                       f"{q('best_ci95', b['best_ci95'], ',.1f', of=e)} tok/s), is not faster than the default (`{b['default_reported']}`, "
                       f"{q('default_tok_s', b['default_tok_s'], ',.1f', of=e)} ± {q('default_ci95', b['default_ci95'], ',.1f', of=e)}) "
                       "beyond both intervals; the data supports no change. Chapter 06 says the same."))
    return qa


def whatif_found(store, facts: dict, cmds) -> str:
    """The what-if's findings: the launches planned, and what chapter 02 predicts for the engine in question."""
    from ..stated import selection_of

    lines = [f"- Planned, not measured: {q('plan_launches', len(cmds) - 1, 'd')} launches of {facts['engine']} for {facts['model']} "
             f"on {facts['gpus']}x {facts['profile']} (capability {facts['capability']}), the default plus one per backend its own "
             "parser lists and its own code accepts on this GPU."]
    left = _left_out_line(store)
    if left:
        lines.append(left)
    last = _prediction_for(store, facts)
    if last is not None:
        lines.append(f"- Chapter 02 predicts {last['engine']} {last['version']}'s default resolves to "
                     f"{q('selected_backend', last['attention_backend'], of=selection_of(last), code=True)}; chapter 06 names the "
                     "backends the engine's code would have picked had its hardware helpers answered otherwise: force those first.")
    fails = store.rows("failures")
    if fails:
        lines.append(f"- {q('failed_steps', len(fails), 'd')} recorded failure(s) so far, e.g. {fails[-1].get('step')}: "
                     f"{_failure_of(fails[-1], code=True)}")
    return "\n".join(lines)


def _left_out_line(store) -> str:
    """One line: how many backends of the engine's list the plan leaves out and why, in the engine's own words and places
    (table ``plan_left_out``); and any reading that could not be made."""
    rows = [r for r in store.rows("plan_left_out") if r.get("chapter") == "03"]
    if not rows:
        return ""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("attention"):
            by.setdefault((r.get("reason"), r.get("error")), []).append(r)
    parts = [", ".join(f"`{r['attention']}`" for r in rs) + f" ({why}"
             + (f" at `{_lines_at([r.get('where') for r in rs])}`" if rs[0].get("rule") == "platform" else "")
             + (f": `{err}`" if err else "") + ")" for (why, err), rs in by.items()]
    n, of = fig.plan_left_out(store).get(None, 0), fig.plan_choices(store).get(None)
    line = (f"- Left out of the plan: {q('plan_left_out', n, 'd')}"
            + (f" of the {q('plan_choices', of, 'd')} backends in its list" if of is not None else "")
            + (", by its own code: " + "; ".join(parts) if parts else ""))
    notes = [str(r.get("reason")) + (f" (`{r['error']}`)" if r.get("error") else "") for r in rows if not r.get("attention")]
    return line + "." + (" " + "; ".join(notes) + "." if notes else "")


def _lines_at(wheres: list) -> str:
    """``file:138`` and ``file:139`` as ``file:138-139`` (one file's lines, first to last)."""
    files = {str(w).rsplit(":", 1)[0] for w in wheres if w}
    lines = sorted(int(str(w).rsplit(":", 1)[1]) for w in wheres if w)
    if len(files) != 1 or not lines:
        return ", ".join(str(w) for w in wheres if w)
    return f"{files.pop()}:{lines[0]}" + (f"-{lines[-1]}" if lines[-1] != lines[0] else "")


def _prediction_for(store, facts: dict) -> dict | None:
    """Chapter 02's last dynamic answer for the engine and version this what-if plans (not another engine's)."""
    eng = str(facts.get("engine") or "")
    name, _, version = eng.partition("==")
    name = name.split()[0] if name else name
    rows = [r for r in store.rows("selection") if r.get("method") == "dynamic" and r.get("engine") == name
            and (not version or str(r.get("version")) == version)]
    prof = [r for r in rows if str(r.get("case", "")).startswith("profile")]
    return (prof or rows or [None])[-1]


def whatif_questions(store, facts: dict, cmds) -> list[tuple[str, str]]:
    """The what-if's 'Check yourself' questions."""
    first = cmds.iloc[0] if len(cmds) else None
    qa = [("Nothing was measured on this page. What would you run first on the real host, and how would you know the backend "
           "you forced is the one that ran?",
           (f"The engine's default, `{first['command']}`, then one launch per backend (the table above). " if first is not None else
            "The launches of the table above (none was planned here). ")
           + "A forced backend counts only when the engine reports loading it (its server info or its log), its decode-step "
             "token ids agree with the default's, and its decode rate is measured: a flag alone proves nothing.")]
    last = _prediction_for(store, facts)
    if last is not None:
        qa.append(("Which backend does chapter 02 predict the engine's default resolves to here, and is that a measurement?",
                   f"`{last['attention_backend']}`, from {last['engine']} {last['version']}'s own resolution with the GPU faked "
                   f"(`{(last.get('decided_by') or {}).get('where')}`). A prediction from the engine's code: chapter 03 on the real "
                   "host checks it against what the server reports."))
    return qa


def describe(table) -> str:
    """One paragraph for chapter 03's page: which path the decode check ran and its tolerance, read from the backends
    table (a pandas DataFrame); a run recorded before the check says so."""
    col = table["decode_agreement"] if len(table) and "decode_agreement" in table else None
    if col is None or col.isna().all():
        return ("**Decode agreement: not recorded in this run** (it predates the check, or no start got that far). Only the "
                "prefill-path checks are: `tf_top1_agreement` scores the default's completion, sent back as text, in one "
                "forward pass over the prompt, which never runs the decode kernel that was forced.")
    rows = table[col.notna()]
    tol = sorted({float(t) for t in rows.get("decode_tolerance", []) if t == t}) or [TOLERANCE]
    engines = sorted(set(rows["engine"]))
    missing = table[col.isna() & table["outcome"].isin(["ok", "wrong output", "overridden"])] if "outcome" in table else table.iloc[0:0]
    formats = "; ".join(f"{e}: `{REQUESTS.get(e, REQUESTS['vllm'])}`" for e in engines)
    text = (f"`decode_agreement` ran on the **decode path**: every start decoded greedily from the same prompt token ids "
            f"({formats}), and each token from a decode step "
            f"was compared, by id, with the default backend's at the same prefix: it agrees when it is the default's top-1, or "
            f"within **{' / '.join(_tag_tolerance(t, len(tol)) for t in tol)} nats** of it in the default's top-{TOP_K} (a near-tie). After a "
            f"difference the start is asked again from the default's tokens, so every position has the default's context; the "
            f"first token of each request comes from prefill and is not counted (`decode_positions` are decode steps only). "
            f"Under {q('method_constant', 100 * MIN_AGREEMENT, '.0f', of='agreement_min_pct')}% the start is `wrong output`.")
    if len(missing):
        text += " Not recorded for: " + ", ".join(f"{r['engine']} {r['attention']} ({r.get('mode')}): {r.get('decode_note') or 'not measured'}"
                                                 for _, r in missing.iterrows()) + "."
    return text


def _tag_tolerance(t: float, n: int) -> str:
    """The tolerance a run recorded, tagged (``decode_tolerance_nats``) where the run used one."""
    return q("decode_tolerance_nats", t, "g") if n == 1 else f"{t:g}"
