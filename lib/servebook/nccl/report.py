"""Chapter 04's page: its tables, plot and sentences, built from the run's tables (and the reference grid's) with every
stated number tagged (``servebook.stated.q``; the figures come from ``servebook.nccl.figures``).

    ref = load_reference()                          # the reference grid, data/runs/h200x2-nccl
    grid_table(ref); fidelity_table(ref); Markdown(gap_lines(ref))
    Markdown(this_run_answer(store, here, ref_answer, tried))
    e2e_view(store, pred_here); Markdown(found_lines(...)); questions(...)

``UNTAGGED`` lists what the page states in prose without a tag, and why it cannot carry one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..stated.intervals import separated
from ..results import RunStore
from ..stated import q, reference
from . import figures
from .predict import FIDELITY
from .figures import latency_key

__all__ = ["UNTAGGED", "Reference", "load_reference", "whatif_found", "whatif_questions", "host_note", "plot_latency",
           "this_run_answer", "reference_summary", "grid_table", "fidelity_table", "gap_lines", "shape_table",
           "failure_table", "prediction", "env_blocks", "e2e_view", "found_lines", "questions", "SEED_INTRO"]

UNTAGGED = {
    "message bytes of this run's model (batch x hidden x 2) where its grid measured none": "arithmetic on the model's "
    "config.json (hidden size), not a recorded measurement; where the grid measured that size it is tagged (nccl_fact "
    "b1_bytes), and the reference's own batch-1 size is tagged (ref_nccl_check 'batch-1 bytes')",
    "the profile's GPU count, capability and interconnect (what-if)": "facts of the hardware profile in data/hardware named "
    "by the `profile` parameter, not of a run table",
    "percentages inside a verdict (faster/slower by X%, +X%)": "written by servebook.findings.separated from the two "
    "rates beside it, which are tagged",
    "predicted ms/token of an end-to-end setting": "the grid's prediction needs the model's layer count from its "
    "directory, which a recording re-executed elsewhere may not have; the measured change beside it is tagged",
    "an error text quoted from the failures table": "a recorded message, quoted as it was written",
    "batch ranges naming a measurement": "they name which measurement a figure is (its subject), "
    "taken from the run's manifest and rows, not a result",
    "shape counts naming a measurement (TP=2, N layers, N all-reduces per graph)": "the subject of the tagged figure "
    "beside them, from the model's config, the reference manifest or the row's own fields",
    "the reference host's NCCL version and link names (NV18)": "identifiers read from its manifest and launch_info",
    "the reason recommend() gives beside the reference grid's pick (ms/token against the default)": "the sentence "
    "servebook.nccl.predict.recommend writes with its decision on the reference grid with this model's shape; this run's "
    "own reason is tagged (nccl_fact reason)",
    "the default's ms/token predicted with this run's model shape": "the reference grid's latencies times this model's "
    "layer count (from its config.json); with the reference model's own shape it is tagged (ref_nccl_check)",
}

SEED_INTRO = ("**What the seed claimed.** The seed case's own profile put all-reduce at {share} of SGLang's decode time "
              "on its PCIe GPUs: the seed's claim, quoted from `data/reference/seed-case.json`, never measured by this book. "
              "This book's own breakdown of a decode step is chapter 05's (on the hosts the book ran on), and chapter 06 says "
              "what it predicts for the seed's host. This chapter measures the latency the all-reduce part is made of.")


# ---------------------------------------------------------------- what-if (a profile, nothing measured)

def whatif_found(floor, facts: dict) -> str:
    """The what-if's findings: the communication floor per microsecond of latency, and at the recorded latency."""
    lines = []
    first = floor["latency_source"].astype(str).str.startswith("1 us")  # the cost of one microsecond, then each latency
    for _, r in floor.loc[list(floor.index[first]) + list(floor.index[~first])].iterrows():
        case = r["case"]
        n = q("comm_allreduces_per_token", int(r["allreduces_per_token"]), "d", of=case)
        if str(r["latency_source"]).startswith("1 us"):
            lines.append(f"- Predicted, not measured: {n} collectives per token (two all-reduces per layer, one for the "
                         "vocab-parallel embedding, one gather of the logits: read in each engine's code, the count chapter 06 "
                         "uses, table `seed_collectives` there), so every microsecond of all-reduce latency "
                         f"costs {q('comm_floor_ms', r['t_comm_ms'], '.3f', of=case)} ms per token at batch 1 on "
                         f"{facts['gpus']}x {facts['profile']} ({facts['interconnect']}).")
        elif str(r["latency_source"]).startswith("published"):
            setting = case.split("latency ")[-1]
            lines.append(f"- {setting}: {q('comm_floor_fact', r['allreduce_us'], '.2f', of=f'{case} | allreduce_us')} us, the "
                         f"middle of {q('comm_floor_fact', r.get('allreduce_us_low'), '.2f', of=f'{case} | allreduce_us_low')} to "
                         f"{q('comm_floor_fact', r.get('allreduce_us_high'), '.2f', of=f'{case} | allreduce_us_high')} us (published "
                         f"eight-rank PCIe figures), so {q('comm_floor_ms', r['t_comm_ms'], '.2f', of=case)} ms per token: the "
                         "latency rule chapter 06 uses for this engine."
                         + (f" {r['caveat'][0].upper() + r['caveat'][1:]}." if r["caveat"] else ""))
        else:
            setting = case.split("latency ")[-1]
            lines.append(f"- At {q('ref_allreduce_us', r['allreduce_us'], ',.1f', of=setting)} us with `{setting}`, measured in "
                         f"{r['latency_source']}, that is {q('comm_floor_ms', r['t_comm_ms'], '.2f', of=case)} ms per token."
                         + (f" {r['caveat'][0].upper() + r['caveat'][1:]}." if r["caveat"] else ""))
    return "\n".join(lines) or "- No prediction: the model card gives no layer count."


def whatif_questions(floor, facts: dict) -> list[tuple[str, str]]:
    """The what-if's 'Check yourself' questions."""
    qa = []
    per_us = floor[floor["latency_source"].str.startswith("1 us")]
    measured = floor[~floor["latency_source"].str.startswith("1 us")]
    if len(measured) and str(measured.iloc[0]["latency_source"]).startswith("published"):
        r0 = measured.iloc[0]
        qa.append(("Which all-reduce latency does this page's communication floor use, and why a range?",
                   f"Each engine's own: for {r0['case'].split('latency ')[-1]} "
                   f"{q('comm_floor_fact', r0['allreduce_us'], '.2f', of=r0['case'] + ' | allreduce_us')} us, the middle of the "
                   "published eight-rank PCIe figures for the NCCL environment the seed ran it with - the rule chapter 06 uses. The "
                   f"profile's {q('host_gpu_count', facts['gpus'], 'd')} GPUs talk over {facts['interconnect']}, and the "
                   "seed's host is not known to be like either published host, so the range is the assumption; this chapter's "
                   "grid run on that host replaces it."))
    elif len(measured):
        r0 = measured.iloc[0]
        setting = r0["case"].split("latency ")[-1]
        qa.append(("Which all-reduce latency does this page's communication floor use, and why is it not this hardware profile's own?",
                   f"{q('ref_allreduce_us', r0['allreduce_us'], ',.1f', of=setting)} us, recorded in `{r0['latency_source']}`: a "
                   f"lent H200 x2 over NVLink, the only grid the book has measured. The profile's {q('host_gpu_count', facts['gpus'], 'd')} GPUs talk over "
                   f"{facts['interconnect']}, so its real latency comes only from this chapter's grid run on that host."))
    if len(per_us):
        r = per_us.iloc[0]
        qa.append(("What does one microsecond of all-reduce latency cost per token here, and why does that make a small latency "
                   "difference matter?",
                   f"{q('comm_floor_ms', r['t_comm_ms'], '.3f', of=r['case'])} ms per token at batch 1: "
                   f"{q('comm_allreduces_per_token', int(r['allreduces_per_token']), 'd', of=r['case'])} collectives per token, "
                   "each paid in series, so a few microseconds per call add up to a large share of a token's time."))
    return qa


# ---------------------------------------------------------------- this run

def host_note(backend: str, world: int, n_settings: int) -> str:
    """What can be measured on this host: NCCL over the grid, or gloo on the CPU (the method only). ``world``: the GPUs
    measured with (tagged: the grid's rows record it); ``n_settings`` is the grid asked for, counted where it was measured."""
    if backend == "nccl":
        return (f"{q('nccl_fact', world, 'd', of='world_size')} CUDA GPUs: NCCL all-reduce over every setting of the grid (the "
                "answer below counts those measured), timed eagerly and replayed from CUDA graphs.")
    return ("Fewer than two CUDA GPUs, so there is no NCCL all-reduce to tune here: with one GPU a model runs without tensor "
            "parallelism and makes no all-reduce at all. The same method runs with **gloo on the CPU** (two processes over "
            "loopback, default settings only: NCCL variables do not apply to gloo): it shows how the measurement works, and "
            "its numbers say nothing about NCCL or GPUs. The prediction for TP=2 below uses the recorded H200 x2 run.")


def plot_latency(ar, backend: str, world: int, decode_bytes: list[int]):
    """All-reduce latency against message size on the torch path (what engines call), both axes logarithmic, zoomed to
    the decode message sizes (the sweep's larger sizes are in the table above). Returns the figure, or None when
    nothing was recorded."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    if not len(ar) or not decode_bytes:
        return None
    lo, hi = min(decode_bytes) / 1.6, max(decode_bytes) * 1.6
    zoom = ar[(ar["bytes"] >= lo) & (ar["bytes"] <= hi)]
    if "shape_study" in zoom:
        zoom = zoom[zoom["shape_study"] != True]  # noqa: E712
    if "path" in zoom and (zoom["path"] == "torch").any():
        zoom = zoom[zoom["path"] == "torch"]
    fig, ax = plt.subplots(figsize=(11, 6.5))
    sns.lineplot(data=zoom, x="bytes", y="us_median", hue="setting", style="mode", marker="o", errorbar=None, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    for b in decode_bytes:
        ax.axvline(b, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("message size (bytes; grey lines: this model's decode messages, batch 1 and up)")
    ax.set_ylabel("latency per all-reduce (us, log)")
    ax.set_title(f"all-reduce latency at decode sizes, torch path ({'NCCL' if backend == 'nccl' else 'CPU/gloo, not NCCL'}, "
                 f"{world} processes)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=7, title="setting / mode", title_fontsize=8)
    fig.tight_layout()
    return fig


def this_run_answer(store: RunStore, here: dict, ref_answer: dict, tried: set) -> str:
    """This run's pick (chapter 06's rule), what the reference grid says of it, and whether the pick's gain is beyond the
    spread between the two recordings."""
    from ..stated import REFERENCE_NCCL_RUN, say_allreduce

    lines = [f"- {say_allreduce(here)}"]
    if here.get("backend") != "nccl":
        return "\n".join(lines)
    ref_pick = ref_answer.get("setting")
    if ref_pick and ref_pick != "default" and ref_pick not in tried:
        lines.append(f"- This run's grid did not include `{ref_pick}`, the setting the reference grid below "
                     f"(`data/runs/{REFERENCE_NCCL_RUN}`) picks on its host: run this chapter again with "
                     f"`-p nccl_grid=\"{ref_pick}\"` to measure it here before using it.")
    s = figures.run_spread(store, here)
    if s:
        pick = s["pick"]
        gain = q("nccl_spread", s["pick gain"], ".1%", of="pick gain")
        spread = q("nccl_spread", s["largest change between grids"], ".1%", of="largest change between grids")
        ref_line = ""
        if "pick in the reference grid" in s:
            ref_line = (f" The reference grid measured `{pick}` at {q('nccl_spread', s['pick in the reference grid'], ',.1f', of='pick in the reference grid')} us "
                        f"against {q('nccl_spread', s['default in the reference grid'], ',.1f', of='default in the reference grid')} us for its default.")
        lines.append(f"- Is `{pick}`'s gain real? Here it is {gain} faster than the default at the batch-1 message. The rows keep each "
                     "setting's median and minimum over its repeats, not an interval, so the spread is read between the two "
                     f"recordings of the same grid: across the {q('nccl_spread', s['settings in both grids'], 'd', of='settings in both grids')} "
                     f"settings both measured, one setting's latency moved by up to {spread} (`{s['setting that changed most']}`)."
                     + ref_line + (" The gain is **within the run-to-run spread**: no setting is supported until intervals "
                                   "over repeated launches separate (or the end-to-end check below measures it)."
                                   if s["within_spread"] else " The gain is larger than that spread."))
    return "\n".join(lines)


# ---------------------------------------------------------------- the reference grid

@dataclass
class Reference:
    """The reference grid's tables, and the figures the page reads from them."""

    store: RunStore
    ar: Any
    std: Any
    used: Any
    fail: Any
    manifest: dict
    b1: int
    g14: Any
    mix_name: str
    checks: dict


def load_reference(ref_answer: dict) -> Reference:
    """The reference grid (``data/runs/h200x2-nccl``) with its batch-1 graph latencies per setting and path."""
    store = figures.reference_store()
    ar, std = store.table("allreduce"), figures.standard_rows(store)
    used = store.table("nccl_used")
    used = used[used["launch"] == "torchrun"].drop_duplicates(["setting", "bytes", "algo", "proto"])
    b1 = figures.b1_bytes(store)
    g14 = std[(std["bytes"] == b1) & (std["mode"] == "graph")].pivot_table(index="setting", columns="path", values="us_median")
    mix = ref_answer.get("setting") if ref_answer.get("setting") not in (None, "default") else "NCCL_GRAPH_MIXING_SUPPORT=0"
    return Reference(store, ar, std, used, store.table("failures"), store.manifest, b1, g14, mix, figures.reference_checks(store))


def _ref(r: Reference, setting: str, path: str = "torch", fmt: str = ",.1f", nbytes: int | None = None) -> str:
    key = latency_key(setting, path, "graph", nbytes or r.b1)
    value = figures.latencies(r.store).get(key)
    return q("ref_allreduce_at", value, fmt, of=key)


def _check(r: Reference, name: str, fmt: str) -> str:
    return q("ref_nccl_check", r.checks.get(name), fmt, of=name)


def _b1(r: Reference) -> str:
    """The reference grid's batch-1 message size (bytes), tagged."""
    return _check(r, "batch-1 bytes", "d") if r.checks.get("batch-1 bytes") == r.b1 else str(r.b1)


def reference_summary(r: Reference) -> str:
    """One paragraph: the reference host and what its grid covers."""
    m = r.manifest
    info = r.store.table("launch_info")
    links = sorted(set(re.findall(r"\bNV\d+\b", m.get("topology") or "")))
    version = ", ".join(sorted(info["nccl_torch"].dropna().unique())) if "nccl_torch" in info else "not recorded"
    gpus = ", ".join(sorted({g.split(", ")[1] for g in str(m.get("gpus", "")).splitlines() if ", " in g}))
    return (f"{_check(r, 'GPUs', 'd')} GPUs ({gpus}), linked by {'/'.join(links) or 'not recorded'}, NCCL {version}: "
            f"{_check(r, 'settings', 'd')} settings, {_check(r, 'message sizes', 'd')} message sizes ({m.get('model')}'s decode "
            f"sizes for batch {min(m['batches'])}-{max(m['batches'])} plus a sweep), the torch and raw paths, eager and graph-replayed.")


def grid_table(r: Reference):
    """Latency per setting at the batch-1, -4, -16 and -64 messages, by path and mode, with what NCCL ran at batch 1."""
    b1 = r.b1
    t = r.std[r.std["bytes"].isin([b1, b1 * 4, b1 * 16, b1 * 64])].pivot_table(
        index="setting", columns=["bytes", "path", "mode"], values="us_median").round(1)
    at_b1 = r.used[r.used["bytes"] == b1].groupby("setting").apply(
        lambda g: "/".join(f"{a} {p} x{c}ch" for a, p, c in zip(g["algo"], g["proto"], g["channels"])), include_groups=False)
    t[("NCCL used", f"at {b1} B", "")] = at_b1
    return t


def _nccl_tests_b1(r: Reference) -> dict:
    return {s: by[str(r.b1)] for s, by in reference("nccl-tests-h200")["us"].items() if str(r.b1) in by}


def fidelity_table(r: Reference):
    """servebook's graph-replayed latency against nccl-tests' at the batch-1 message, setting by setting."""
    import pandas as pd

    tests = _nccl_tests_b1(r)
    g = r.g14
    rows = [{"setting": s, "nccl-tests -G (us)": ref, "servebook torch graph (us)": g.loc[s, "torch"], "ratio": g.loc[s, "torch"] / ref,
             "raw ncclAllReduce graph (us)": g.loc[s].get("raw-per-process")} for s, ref in tests.items() if s in g.index]
    mix = g.loc[r.mix_name, "torch"] if r.mix_name in g.index else float("nan")
    d = tests.get("default", float("nan"))
    rows.append({"setting": f"{r.mix_name} vs default", "nccl-tests -G (us)": d, "servebook torch graph (us)": mix, "ratio": mix / d,
                 "raw ncclAllReduce graph (us)": g.loc[r.mix_name].get("raw-per-process") if r.mix_name in g.index else None})
    return pd.DataFrame(rows).round(2)


def gap_lines(r: Reference) -> str:
    """Where the gap to nccl-tests comes from, hypothesis by hypothesis, each figure from the reference's tables."""
    c = r.checks
    shape = [k for k in c if k.startswith("default us with ")]
    mix, d14, tests = r.checks.get(f"{r.mix_name} over nccl-tests default"), r.g14.loc["default", "torch"], c.get("nccl-tests default us")
    return "\n".join([
        f"- **ProcessGroupNCCL's event record/wait around each captured collective**: refuted. `ncclAllReduce` called directly "
        f"through CuPy on torch's stream, captured the same way, is within {_check(r, 'raw vs torch, largest gap', '.1%')} of "
        f"`torch.distributed.all_reduce` across the {_check(r, 'raw vs torch, settings compared', 'd')} settings measured both ways "
        f"({_check(r, 'raw vs torch, default gap', '.1%')} with the defaults; the two graph columns above).",
        f"- **Timing method**: refuted. CUDA events on the first rank and the host clock around the launches agree within "
        f"{_check(r, 'clock gap, largest', '.1%')} (`us_median` against `us_wall`, {_check(r, 'clock gap, rows', 'd')} graph-replayed "
        f"rows at {_check(r, 'batch-1 bytes', 'd')} B), because {_check(r, 'calls timed per sample', 'd')} calls are timed per sample.",
        "- **Graph shape**: large (the shape table below). With NCCL's defaults the per-call latency grows with the number of "
        "all-reduces captured in one graph: " + ", ".join(f"{_check(r, k, '.1f')} us with {k.split(' ')[3]} per graph" for k in shape) + ".",
        f"- **NCCL's graph-mixing support** (`NCCL_GRAPH_MIXING_SUPPORT`, on by default): with `{r.mix_name}` the same measurement "
        f"drops from {q('ref_allreduce_us', d14, ',.1f', of='default')} us to {_ref(r, r.mix_name)} us at {_b1(r)} B, "
        f"{_check(r, f'{r.mix_name} over nccl-tests default', '.2f')}x nccl-tests' {_check(r, 'nccl-tests default us', '.2f')} us "
        "with mixing on. With mixing support NCCL orders every captured launch against other graphs and uncaptured work on the "
        "communicator; that costs a few microseconds per all-reduce in this multi-process, captured setting."
        if mix is not None and tests else f"- `{r.mix_name}` was not measured at {r.b1} B in the reference grid.",
        "- **One process driving both GPUs** (the nccl-tests `-g 2` shape): not measured. The single-process CuPy path ran its "
        f"eager loops but its graph capture failed in {_check(r, 'settings whose single-process capture failed', 'd')} of "
        f"{_check(r, 'settings', 'd')} settings with `cudaErrorStreamCaptureUnsupported` (failures table), so whether nccl-tests' "
        f"{_check(r, 'nccl-tests default us', '.2f')} us with mixing support on comes from its single-process launch remains open.",
    ])


def shape_table(r: Reference):
    """The graph-shape study: per-call latency by all-reduces captured per graph and graph launches."""
    s = r.ar[(r.ar["setting"] == "default") & (r.ar["bytes"] == r.b1) & (r.ar["mode"] == "graph")]
    return s[["path", "iters", "launches", "us_median", "us_wall"]].rename(
        columns={"iters": "all-reduces per graph", "launches": "graph launches"}).sort_values(["path", "all-reduces per graph"]).round(2)


def failure_table(r: Reference):
    """The reference grid's failures, errors shortened to one line."""
    return r.fail[[c for c in ("setting", "step", "error") if c in r.fail]].assign(error=lambda d: d["error"].str.slice(0, 160))


def prediction(r: Reference, hidden: int, layers: int):
    """Per-token all-reduce time per setting and batch from the reference's graph latencies, with this chapter's model
    where it has the reference model's width, else the reference model's own shape. Returns (table, pick, note)."""
    from .predict import per_token_prediction, recommend
    from .sizes import message_sizes

    m = r.manifest
    same = bool(hidden == m["hidden_size"] and layers)
    use_layers, use_hidden = (layers, hidden) if same else (m["num_hidden_layers"], m["hidden_size"])
    pred = per_token_prediction(r.ar, use_layers, message_sizes(use_hidden, 2, m["batches"], sweep=()))
    note = (f"shape used: {use_layers} layers, hidden size {use_hidden} "
            + ("(this chapter's model)" if same else f"({m.get('model')}, the reference's model: this model is {hidden} wide)"))
    return pred.pivot_table(index="setting", columns="batch", values="ms_per_token").round(3), recommend(pred), note, use_layers


def env_blocks(r: Reference, rec_pick: dict, here: dict, model: str) -> str:
    """The env block of the reference grid's pick and of this run's pick (text to print)."""
    from ..params import resolve_model
    from ..stated import REFERENCE_NCCL_RUN
    from .predict import env_block

    card = resolve_model(r.manifest.get("model", ""), build=False) if r.manifest.get("model") else {}
    out = [f"the reference grid (data/runs/{REFERENCE_NCCL_RUN}, its host) picks: {rec_pick['setting']}  ({rec_pick['reason']})",
           env_block(rec_pick["setting"], model_ref=(card.get("hf_repo") if isinstance(card, dict) else None) or "<model>")]
    mine = here.get("setting") if here.get("backend") == "nccl" else None
    if mine and mine != "default" and here.get("within_spread"):
        out.append(f"\nthis run's grid picks nothing to export: its fastest, {mine}, gains no more than the run-to-run spread "
                   "(no setting is supported)")
    elif mine and mine != "default":
        out += [f"\nthis run's grid picks: {mine}  ({here.get('reason')})", env_block(mine, model_ref=model if model != "embedded" else "<model>")]
    else:
        out.append("\nthis run's grid picks nothing to export: " + (here.get("reason") or "no all-reduce recorded") if here
                   else "\nthis run recorded no all-reduce")
    return "\n".join(out)


# ---------------------------------------------------------------- end to end, findings, questions

def e2e_view(store: RunStore, pred_here=None):
    """The end-to-end rows (table ``tp_e2e``) each against its reference row, with the verdict (a DataFrame)."""
    import pandas as pd

    rows = figures.e2e_rows(store, pred_here)
    for r in rows:
        r["verdict"] = separated(r["decode_tok_s"], r["ci95"], r["vs_tok_s"], r["vs_ci95"]) if r["vs"] else None
    return pd.DataFrame(rows).drop(columns=["vs_tok_s", "vs_ci95"], errors="ignore")


def _e2e_line(r) -> str:
    key = f"{r['engine']} | {r['tp']} | {r['setting']}"
    against = f"{r['verdict']} against {r['vs']}" if r["vs"] else r.get("not_compared")
    rate = (f"{q('tp_e2e_tok_s', r['decode_tok_s'], '.1f', of=key)} ± {q('tp_e2e_ci95', r['ci95'] or 0, '.1f', of=key)} tok/s, "
            f"{against}" if r["decode_tok_s"] else f"{r['outcome']}")
    delta = ""
    if r["predicted_ms_per_token"] is not None and r["measured_ms_per_token"] is not None:
        delta = (f"; predicted {r['predicted_ms_per_token']:+.3f} ms/token, measured "
                 f"{q('tp_e2e_ms', r['measured_ms_per_token'], '+.3f', of=key)}")
    return f"- End to end, {r['engine']} TP={int(r['tp'])}, {r['setting']}: {rate}{delta}."


def found_lines(store: RunStore, answer: str, e2e, r: Reference, pred_tbl, rec_pick: dict, use_layers: int) -> str:
    """'What we found': this run's answer and end-to-end rows, then the reference grid's findings."""
    from ..stated import REFERENCE_NCCL_RUN

    lines = ["**This run**", "", answer]
    if len(e2e):
        lines += [_e2e_line(x) for _, x in e2e.iterrows() if x["vs"] or x.get("not_compared")]
    else:
        lines.append("- Not measured here: the end-to-end engine confirmation (`tp_check` names the engines to restart at TP>1).")
    for c in store.rows("chapters"):
        if c.get("chapter") == "04_tune_nccl" and c.get("status") == "failed":
            err = " ".join(str(c.get("error")).split())  # whole, tagged as its row's text (chapter_error)
            lines.append(f"- An execution of this chapter stopped in this run: "
                         f"{q('chapter_error', err, of=c['chapter'] + ' | ' + str(c.get('recorded_at')))}")
    lines += ["", f"**The reference grid** (`data/runs/{REFERENCE_NCCL_RUN}`, its host, not this one)", ""]
    ratio = r.checks.get(f"{r.mix_name} over nccl-tests default")
    if ratio is not None:
        lines.append(f"- {_b1(r)} B (batch 1): NCCL's default graph-replayed all-reduce took {_ref(r, 'default')} us, "
                     f"{_check(r, 'default over nccl-tests default', '.2f')}x nccl-tests' {_check(r, 'nccl-tests default us', '.2f')} us; "
                     f"with `{r.mix_name}` it took {_ref(r, r.mix_name)} us ({_check(r, f'{r.mix_name} over nccl-tests default', '.2f')}x, "
                     f"{'within' if abs(ratio - 1) <= FIDELITY else 'outside'} the "
                     f"{q('method_constant', 100 * FIDELITY, '.0f', of='nccl_fidelity_pct')}% target).")
    lines.append(f"- ProcessGroupNCCL adds nothing measurable: raw ncclAllReduce on the same stream took "
                 f"{_ref(r, 'default', 'raw-per-process')} us.")
    forced = r.used[(r.used["bytes"] == r.b1) & (r.used["setting"] == "NCCL_PROTO=LL128")]
    if len(forced):
        lines.append(f"- Forcing NCCL_PROTO=LL128 also changed the algorithm at {_b1(r)} B: NCCL ran {forced['algo'].iloc[0]}/"
                     f"{forced['proto'].iloc[0]} (from its debug output); forced protocols are slower there: LL128 "
                     f"{_ref(r, 'NCCL_PROTO=LL128')} us, Simple {_ref(r, 'NCCL_PROTO=Simple')} us.")
    seed = [k for k in r.checks if k.startswith(figures.SEED_PREFIX) and k.endswith(" us at 16 MB")]
    if seed and "default us at 16 MB" in r.checks:
        name = seed[0][: -len(" us at 16 MB")]
        lines.append(f"- The seed's PCIe recipe is {_ref(r, name)} us at {_b1(r)} B but {_check(r, seed[0], '.0f')} us at the "
                     "sweep's largest message "
                     f"against {_check(r, 'default us at 16 MB', '.0f')} us default: LL forced onto large messages halves bandwidth.")
    if len(r.fail) and "setting" in r.fail and (r.fail["setting"] == "NCCL_ALGO=Tree").any():
        lines.append("- NCCL_ALGO=Tree alone breaks Broadcast (no algorithm available): torch's object broadcast failed under it.")
    if "default" in pred_tbl.index:
        p = figures.reference_prediction(use_layers, r.store)  # recomputed by the registry (ref_nccl_prediction)
        shown = (q("ref_nccl_check", r.checks.get("default ms per token at batch 1"), ".2f", of="default ms per token at batch 1")
                 if use_layers == r.manifest.get("num_hidden_layers") else
                 q("ref_nccl_prediction", p["default ms per token"], ".2f", of=f"{use_layers} layers | default ms per token"))
        reason = (q("ref_nccl_prediction", rec_pick["reason"], of=f"{use_layers} layers | reason")
                  if rec_pick.get("reason") == p["reason"] else rec_pick["reason"])
        lines.append(f"- Prediction for TP=2 at the shape printed under *From microseconds to tokens* (this model's layers where "
                     "it has the reference model's width, else the reference model's; two all-reduces per layer, without the "
                     "embedding's all-reduce and the logits' all-gather that a whole model's count adds, as the what-if book's "
                     "`seed_collectives` does), "
                     f"batch 1: {shown} ms/token of all-reduce with defaults; that grid picks "
                     f"{q('ref_allreduce_setting', rec_pick['setting'], code=True)} ({reason}).")
    lines.append("- Not done: nccl-tests on the same grid (not installed, no internet to build) and the single-process graph path "
                 "(capture failed).")
    return "\n".join(lines)


def questions(here: dict, r: Reference, hidden: int) -> list[tuple[str, str]]:
    """Chapter 04's 'Check yourself' questions, answered from this run and the reference grid."""
    if here.get("backend") == "nccl":
        pick = here.get("setting") or "default"
        us = here.get("best_us") if pick != "default" else here.get("default_us")
        mine = f"`{pick}`" + (f" at {q('allreduce_us', us, ',.1f')} us per all-reduce at "
                              f"{q('nccl_fact', here['b1_bytes'], 'd', of='b1_bytes')} B" if us is not None else "")
        qa = [("Which NCCL setting does this run's own grid pick for the batch-1 decode message, and why not simply copy the "
               "reference grid's pick?", f"{mine} ({q('nccl_fact', here.get('reason'), of='reason')})"
               + (", but its gain is within the run-to-run spread between two recordings of the grid, so no setting is supported: "
                  "keep NCCL's defaults" if here.get("within_spread") else "")
               + ". A grid's pick is a property of its host (links, NCCL "
               "version, topology): the reference grid's is measured on its H200 x2, this one here; and either stays a prediction "
               "until the engine at TP>1 is measured faster with it (end to end above).")]
    elif here:
        qa = [("This run measured all-reduce with gloo on the CPU. What can you conclude about NCCL from it?",
               f"Nothing: {q('allreduce_us', here.get('default_us'), ',.1f')} us per gloo all-reduce over loopback is not an NCCL "
               "latency on GPUs, and a one-GPU deployment makes no all-reduce at all. The method is the same; only a host with two "
               "or more GPUs measures NCCL.")]
    else:
        qa = [("This run recorded no all-reduce. What would you check first?",
               "The failures table of this run, then run chapter 04 on a host with two or more GPUs.")]
    qa += [("Why is a decode all-reduce small, and what sets its size?",
            "It carries one hidden-state vector per sequence in the batch: `batch x hidden x 2` bytes in BF16, not the weights. "
            f"For this run's model at batch 1 that is "
            f"{q('nccl_fact', hidden * 2, 'd', of='b1_bytes') if (here or {}).get('b1_bytes') == hidden * 2 else hidden * 2} bytes "
            f"(the reference's model: {_check(r, 'batch-1 bytes', 'd')}), "
            "so latency, not bandwidth, decides its cost."),
           (f"What did `{r.mix_name}` change on the reference H200 x2 host, and when would you not use it?",
            f"Graph-replayed {_b1(r)} B all-reduce: {_ref(r, 'default')} us with defaults, {_ref(r, r.mix_name)} us with it. Not safe "
            "when NCCL work from one CUDA graph can be outstanding at the same time as work from another graph or eager calls on "
            "the same communicator.")]
    return qa
