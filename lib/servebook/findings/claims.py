"""Chapter 06's statements: everything a run found, each claim with the chapter heading that shows it.

    f = collect(store)
    what_we_found(f)     # markdown bullets, each linking to the chapter cell that shows it

When two confidence intervals overlap, the claim says no change is supported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results import RunStore
from ..stated.intervals import ONE_START, _num
from ..stated.text import clip, marked
from .launch import launch_commands
from .links import (H_BACKENDS_FOUND, H_BENCH, H_ENGINES, H_HOST, H_NCCL, H_NCCL_PRED, H_SELECTION, H_SELECTION_FOUND,
                    H_SWEEP, H_SWEEP_C, Claim)
from .tables import backends, failures, host_summary, nccl, selection, throughput

__all__ = ["Findings", "collect", "what_we_found"]


@dataclass
class Findings:
    run: str
    host: dict
    selection: list[dict]
    backends: list[dict]
    nccl: dict | None
    throughput: list[dict]
    launch: list[dict]
    failures: list[dict]
    claims: list[Claim] = field(default_factory=list)


def _fmt(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def collect(store: RunStore) -> Findings:
    """Everything chapter 06 states, with its claims."""
    host = host_summary(store)
    sel = selection(store)
    bk = backends(store)
    nc = nccl(store)
    tp = throughput(store)
    lc = launch_commands(store, bk, nc, host)
    f = Findings(run=host["run_id"], host=host, selection=sel, backends=bk, nccl=nc, throughput=tp, launch=lc, failures=failures(store))
    f.claims = _claims(f, store)
    return f


def _host_text(h: dict, tagged: bool = True) -> str:
    """The host in one line; ``tagged``: its figures tagged for a page of this run (``servebook.stated``), not for
    another run's column (``servebook compare``)."""
    if not h.get("gpu") and not h.get("probed"):
        return "not probed in this run (chapter 01 recorded nothing)"
    if not h.get("gpu"):
        return f"{h.get('hostname') or 'this host'}: no GPU seen; the engines ran on the CPU"
    links = f", linked by {'/'.join(h['links'])}" if h.get("links") else (", one GPU: no GPU-to-GPU link" if h.get("gpu_count") == 1 else "")
    from ..stated.tags import quoter

    q = quoter(tagged)

    p2p = f" ({q('p2p_gbs', h['p2p_gbs'], '.0f', of='max')} GB/s measured peer copies)" if h.get("p2p_gbs") else ""

    cap = (f"compute capability {q('host_capability', h.get('capability'))} ({h.get('family')})" if h.get("capability")
           else "compute capability not recorded in this run")
    sw = {"driver": h.get("driver"), "CUDA": q("host_cuda", h["cuda"], of="host") if h.get("cuda") is not None else None,
          "NCCL": h.get("nccl")}
    said = ", ".join(f"{k} {v}" for k, v in sw.items() if v is not None)   # a version not recorded is said so, never "None"
    lack = [k for k, v in sw.items() if v is None]
    return (f"{q('host_gpu_count', h.get('gpu_count'), 'd')} x {h['gpu']}, {cap}{links}{p2p}; " + said
            + ("; " if said and lack else "") + (" and ".join([", ".join(lack[:-1]), lack[-1]] if len(lack) > 1 else lack)
                                                 + " not recorded in this run" if lack else ""))


def _claims(f: Findings, store: RunStore) -> list[Claim]:
    """Every statement, chapter by chapter."""
    return [*_host_claims(f), *_selection_claims(f), *_backend_claims(f), *_nccl_claims(f), *_bench_claims(f, store)]


def _host_claims(f: Findings) -> list[Claim]:
    """Chapter 01: the host, and the engine helpers that disagree with it."""
    from ..stated.tags import q

    c = [Claim("01", "Host: " + _host_text(f.host), H_HOST)]
    bad = [e for e in f.host["engines"] if (e.get("mismatches") or 0) or (e.get("gaps") or 0)]

    def n(e, what):  # tagged: recomputed from table engines (engine_findings)
        return q("engine_findings", e.get(what) or 0, "d", of=f"{e['engine']} {e.get('version')} | {what}")

    if bad:
        c.append(Claim("01", "Engine helpers that disagree with the hardware or leave this GPU out: "
                       + ", ".join(f"{e['engine']} ({n(e, 'mismatches')} mismatches, {n(e, 'gaps')} gaps)" for e in bad), H_ENGINES))
    return c


def _selection_claims(f: Findings) -> list[Claim]:
    """Chapter 02: what each engine picks and the line that decides it."""
    from ..stated.tags import q
    from ..stated.say import capability_of

    c: list[Claim] = []
    said = set()
    for s in f.selection:
        where = f"{s.get('gpu')}, capability {capability_of(s.get('gpu'), s.get('capability'))}"
        who = ("On this host" if s["case"] == "this-host" else f"Seed case ({where})" if s["case"] == "seed"
               else f"Profile {where}, asked of the engine's own code without the GPU")
        answer = (s.get("engine"), s.get("version"), s.get("model"), s.get("gpu"), s.get("backend"), s.get("where"))
        if s.get("method") == "dynamic" and s.get("where") and answer in said:
            continue  # the same answer under two cases (a what-if on the seed's own GPU): stated once
        said.add(answer)
        if s.get("method") == "dynamic" and s.get("where"):
            rule = "; ".join(f"`{x}`" for x in s["rule"][-3:]) or "no condition on the way"
            code_of = f"{s['engine']} {s['version']}"
            sites = (f"{q('selection_sites', s['sites'], 'd', of=code_of)} assignment sites read in its code" if s["sites"] else "its code not read statically in this run")
            c.append(Claim("02", f"{who}, {s['engine']} {s['version']} picks `{s['backend']}` for `{s['model']}`: written at "
                           f"`{s['where']}` in `{s['function']}` because {rule} (a {'/'.join(s['kinds']) or 'unconditional'} "
                           f"decision; {sites})", H_SELECTION))
        else:
            c.append(Claim("02", f"{who}, {s['engine']} {s['version']}: only a static reading ({s.get('reason')})", H_SELECTION, False))
    if not f.selection:
        c.append(Claim("02", "No backend selection was recorded in this run", H_SELECTION_FOUND, False))
    return c


def _backend_claims(f: Findings) -> list[Claim]:
    """Chapter 03: the fastest correct backend against the default, and what failed or did not run."""
    from ..stated.tags import q
    from ..stated.intervals import fastest_correct

    c: list[Claim] = []
    for b in f.backends:
        if not b.get("correct"):
            c.append(Claim("03", f"{b['engine']}: no forced backend served correct output ({len(b['failed'])} failed)", H_SWEEP, False))
            continue
        e = b["engine"]
        agree = (q("backend_agreement", _num(b.get("best_agreement")), ".0%", of=f"{b['best_key']} | greedy")
                 if _num(b.get("best_agreement")) is not None and b.get("best_key") else "n/a")
        best = (f"{e}: {fastest_correct(b)} was `{b['best']}` at {q('best_tok_s', b['best_tok_s'], ',.1f', of=e)} ± "
                f"{q('best_ci95', b['best_ci95'], ',.1f', of=e)} tok/s single stream (greedy output {agree} equal to the default's)")
        if b.get("default_tok_s") is not None:
            best += (f"; the default (`{b.get('default_reported') or 'auto'}`) ran {q('default_tok_s', b['default_tok_s'], ',.1f', of=e)} ± "
                     f"{q('default_ci95', b['default_ci95'], ',.1f', of=e)}")
        if b.get("best_reported") and b.get("best_reported") == b.get("default_reported") and b.get("best") != f"auto ({b['best_reported']})":
            best += (f"; forced `{b['best']}` loads the same implementation as the default, so their difference is "
                     "run-to-run noise")
        n_starts = min(b.get("best_starts") or 1, b.get("default_starts") or 1)
        n_s = q("compared_starts", n_starts, "d", of=b["best_key"]) if b.get("best_key") else str(n_starts)
        if b["change_supported"]:
            c.append(Claim("03", best + f": faster beyond both 95% intervals over {n_s} server starts, a change is supported", H_SWEEP))
        elif str(b.get("best", "")).startswith("auto") and b.get("others"):
            from ..stated.intervals import separated

            c.append(Claim("03", f"{e}: its own choice (`{b.get('default_reported') or 'auto'}`, {q('default_tok_s', b['default_tok_s'], ',.1f', of=e)} ± "
                           f"{q('default_ci95', b['default_ci95'], ',.1f', of=e)} tok/s single stream) was {fastest_correct(b)}; against it: "
                           + "; ".join(f"`{o['attention']}` {q('backend_tok_s', o['tok_s'], ',.1f', of=o['key'])} ± "
                                       f"{q('backend_ci95', o['ci95'], ',.1f', of=o['key']) if o['ci95'] else _fmt(o['ci95'])}, "
                                       + separated(o["tok_s"], o["ci95"], b["default_tok_s"], b["default_ci95"],
                                                   starts=(o["starts"], b.get("default_starts") or 1), of=o["key"])
                                       for o in b["others"])
                           + ". Keep the default", H_SWEEP, False))
        else:
            ties = f" (overlaps {', '.join(map(str, b['ties']))})" if b.get("ties") else ""
            why = (f": the 95% intervals over {n_s} server starts overlap{ties}, no difference beyond the restart spread"
                   if n_starts >= 2 else f" ({ONE_START}): the 95% intervals {'overlap' + ties if b.get('ties') else 'cover one server start'}")
            c.append(Claim("03", best + f"{why}, so no change of backend is supported", H_SWEEP, False))
        for x in b["failed"]:  # the recorded error whole, tagged as its row's text (chapter 03 states it so too)
            err = q("backend_error", " ".join(str(x.get("error")).split()), of=f"{x['key']} | {x.get('recorded_at')}") if x.get("key") \
                else clip(marked(x.get("error")), 160)
            c.append(Claim("03", f"{b['engine']} `{x['attention']}`: {x['outcome']} ({err})", H_BACKENDS_FOUND, False))
        if b.get("refused"):
            c.append(Claim("03", f"{b['engine']}: refused by its own validation before any start: " + ", ".join(
                f"`{x['attention']}` ({q('preflight_reason', x['reason'], of=b['engine'] + ' | ' + x['attention'] + ' | ' + str(x['recorded_at']))})"
                for x in b["refused"]), H_BACKENDS_FOUND, False))
        if b["not_run"]:
            c.append(Claim("03", f"{b['engine']}: not run here: " + ", ".join(
                f"`{x['attention']}` ({q('not_run_reason', x['reason'], of=b['engine'] + ' | ' + x['attention'])})" for x in b["not_run"]),
                H_BACKENDS_FOUND, False))
    if not f.backends:
        c.append(Claim("03", "No backend was forced in this run", H_BACKENDS_FOUND, False))
    return c


def _nccl_claims(f: Findings) -> list[Claim]:
    """Chapter 04: the NCCL setting for decode-sized all-reduces, predicted and measured end to end; every figure of the
    grid tagged (``nccl_fact``: recomputed by ``servebook.findings.nccl`` from the run's tables)."""
    from ..stated.tags import q

    def nf(field: str, fmt: str = "", value=None) -> str:
        v = (n or {}).get(field) if value is None else value
        return q("nccl_fact", v, fmt, of=field) if v is not None else _fmt(v)

    c: list[Claim] = []
    n = f.nccl
    if n is None:
        c.append(Claim("04", "No all-reduce was measured in this run", H_NCCL, False))
    elif n["backend"] != "nccl":
        c.append(Claim("04", f"All-reduce measured with {n['backend']} ({nf('world_size', 'd')} processes), not NCCL: "
                       f"{nf('default_us', ',.1f')} us at {nf('b1_bytes', 'd')} B; NCCL settings do not apply here", H_NCCL, False))
    else:
        head = (f"NCCL ({nf('world_size', 'd')} GPUs, {nf('settings', 'd')} settings, {n['mode']}-replayed): at the batch-1 message "
                f"({nf('b1_bytes', 'd')} B) the default took {nf('default_us', ',.1f')} us per all-reduce")
        if n.get("setting") in (None, "default"):
            ru = n.get("runner_up")
            alt = (f"; the best other setting, `{ru['setting']}`, took {nf('runner_up us', ',.1f', ru['us'])} us, a predicted "
                   f"{nf('runner_up delta_ms', ',.3f', ru['delta_ms'])} ms per token against {nf('default_ms_per_token', ',.3f')} ms with the defaults "
                   f"({nf('allreduces_per_token', 'd')} all-reduces per token, {nf('layers', 'd')} layers of {n.get('model')})"
                   if ru and n.get("default_ms_per_token") is not None else "")
            from ..nccl.predict import NOISE

            noise = q("method_constant", 100 * NOISE, ".0f", of="nccl_noise_pct")
            if ru and ru.get("slower_at_batches"):
                verdict = (f": but it is more than {noise}% slower than the defaults at decode batch "
                           f"{nf('runner_up slower_at_batches', '', ', '.join(map(str, ru['slower_at_batches'])))}, so keep NCCL's defaults")
            else:
                verdict = f": within the {noise}% the book treats as noise, so keep NCCL's defaults"
            c.append(Claim("04", head + alt + verdict, H_NCCL_PRED, False))
        elif n.get("within_spread"):  # chapter 04's test: the pick's gain is inside the run-to-run spread
            c.append(Claim("04", head + f"; fastest: `{n['setting']}` at {nf('best_us', ',.1f')} us, a gain within the run-to-run "
                           "spread between two recordings of the grid (chapter 04), so no setting is supported: keep NCCL's "
                           f"defaults. Predicted effect were the gain real: {nf('predicted_delta_ms', ',.3f')} ms per token "
                           f"({nf('allreduces_per_token', 'd')} all-reduces per token, {nf('layers', 'd')} layers of {n.get('model')})",
                           H_NCCL_PRED, False))
        else:
            c.append(Claim("04", head + f"; best: `{n['setting']}` at {nf('best_us', ',.1f')} us. Predicted effect: "
                           f"{nf('predicted_delta_ms', ',.3f')} ms per token ({nf('allreduces_per_token', 'd')} all-reduces per token, "
                           f"{nf('layers', 'd')} layers of {n.get('model')})", H_NCCL_PRED))
        for x in n.get("measured_effect") or []:
            if x["vs"] or x.get("not_compared"):
                against = f"{x['verdict']} against {x['vs']}" if x["vs"] else x["not_compared"]
                c.append(Claim("04", f"End to end, {x['engine']} at TP={x['tp']}, {x['setting']}: "
                               + (f"{_fmt(x['tok_s'])} ± {_fmt(x['ci95'])} tok/s, {against}"
                                  if x["tok_s"] else f"{x['outcome']}"), H_NCCL_PRED, x["supported"]))
        if not n.get("measured_effect"):
            c.append(Claim("04", "Measured end-to-end effect: not measured in this run (chapter 04's tp_check restarts an engine at "
                           "TP>1 under each setting)", H_NCCL_PRED, False))
    return c


def _bench_claims(f: Findings, store: RunStore) -> list[Claim]:
    """Chapter 05: single stream and the concurrency sweep; beside a rate, the roofline at the measured bandwidth too and
    a C=1 level that disagrees with the single stream (``bench.figures``, as chapter 05 says them)."""
    from ..stated.tags import q

    from ..bench.figures import bandwidth_roofline, single_vs_c1

    c: list[Claim] = []
    apart = {v["label"]: v for v in single_vs_c1(store) if v["apart"]} if f.throughput else {}
    cases = bandwidth_roofline(store)["cases"] if f.throughput else {}
    for t in f.throughput:
        lab = t["label"]
        roof = (f"; {q('pct_of_roofline', t['pct_of_roofline'], '.3g', of=lab)}% of the "
                f"{q('roofline_tok_s', t['roofline_tok_s'], ',.0f', of=lab)} tok/s bandwidth roofline"
                if t.get("pct_of_roofline") is not None else "; no roofline recorded")
        case = next((k for k, v in cases.items() if str(k).startswith(lab) and v.get("read_pct") is not None), None)
        if case and t.get("pct_of_roofline") is not None:  # the datasheet's roofline, and the one at the measured bandwidth
            roof += (f" (datasheet), {q('bandwidth_roofline', cases[case]['read_pct'], '.3g', of=f'{case} | read_pct')}% of "
                     f"{q('bandwidth_roofline', cases[case]['read_roofline_tok_s'], ',.0f', of=f'{case} | read_roofline_tok_s')} "
                     "tok/s at this GPU's measured read bandwidth")
        if lab in apart:
            v = apart[lab]
            roof += (f"; the sweep's C=1 level ran at {q('single_vs_c1', v['c1_user_tok_s'], ',.1f', of=f'{lab} | c1_user_tok_s')} "
                     "tok/s per user, outside this interval and unexplained by the recorded method (chapter 05 states a hypothesis)")
        n_starts = int(t.get("starts") or 1)
        over = (f"95% t-interval over {q('single_starts', n_starts, 'd', of=lab)} server starts of "
                f"{q('single_runs', t.get('runs'), 'd', of=lab)} runs each"
                if n_starts >= 2 else f"95% CI over {q('single_runs', t.get('runs'), 'd', of=lab)} runs")
        c.append(Claim("05", f"{lab}: single stream {q('single_tok_s', t['single_tok_s'], ',.1f', of=lab)} ± "
                       f"{q('single_ci95', t['single_ci95'], ',.1f', of=lab)} tok/s ({over}){roof}", H_BENCH))
        if t.get("peak_tok_s") is not None:
            gain = (t["peak_tok_s"] / t["c1_tok_s"]) if t.get("c1_tok_s") else None
            c.append(Claim("05", f"{lab}: sweep throughput {q('c1_tok_s', t['c1_tok_s'], ',.1f', of=lab)} tok/s at C=1 (output "
                           "tokens over the level's wall time, first tokens included: not the single-stream decode rate), peak "
                           f"{q('peak_tok_s', t['peak_tok_s'], ',.1f', of=lab)} tok/s at C={q('peak_c', t['peak_c'], 'd', of=lab)}"
                           + (f" ({q('peak_gain', gain, '.2f', of=lab)}x)" if gain else "") + f", each user then getting "
                           f"{q('peak_per_user_tok_s', t.get('peak_per_user_tok_s'), ',.1f', of=lab)} tok/s"
                           + (" (some levels hit their time budget)" if t["truncated"] else ""), H_SWEEP_C))
    if not f.throughput:
        from ..profile.book import served_by_profiles

        if served_by_profiles(store):   # a run of profiles only: the profile run timed one stream per slice itself
            c.append(Claim("05", "No client benchmark in this run (a run of profiles only): the profile run timed each "
                           "profiled server's greedy requests without the profiler, and chapter 05 states that served "
                           "time per token per slice depth, over the server starts", H_BENCH))
        else:
            c.append(Claim("05", "No benchmark was recorded in this run", H_BENCH, False))
    return c


def what_we_found(f: Findings) -> str:
    """Markdown bullets: every claim with its link, then what to run, then the failures."""
    lines = [f"- {c.markdown()}" for c in f.claims]
    for lc in f.launch:
        lines.append(f"- Launch {lc['engine']}: `{lc['command']}` — " + "; ".join(lc["why"]) + ".")
    if f.failures:
        from ..stated.tags import q

        n = sum(x["times"] for x in f.failures)
        lines.append(f"- {q('failures_recorded', n, 'd')} recorded failures ({q('failures_distinct', len(f.failures), 'd')} distinct), "
                     "listed above; a failed measurement is a finding, not a result.")
    return "\n".join(lines)

