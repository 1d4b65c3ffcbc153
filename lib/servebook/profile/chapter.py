"""Chapter 05's section "Where a decode step's time goes": measure (on a live host), then the tables and figure.

    measure_chapter(store, ["sglang", "vllm"], model_dir, engine_args="sglang: --cuda-graph-max-bs 16", steps=40, depths="1,2")
    t = chapter_tables(store)            # runs, breakdown (wide), predictions, rules, bandwidth: DataFrames
    fig = plot_breakdown(t["breakdown_long"])
    lines = findings(store)              # Markdown sentences with every number tagged (servebook.stated.q)
"""

from __future__ import annotations

import json
from pathlib import Path

from ..stated.intervals import _overlap
from ..stated.text import number_word
from .kernels import CATEGORIES, rules_table
from .ranges import SEED_BACKENDS
from .tables import latest_breakdown, latest_ok, prediction_subject, starts_of

__all__ = ["measure_chapter", "chapter_tables", "plot_breakdown", "show_breakdown", "prediction_table", "findings", "record_inprocess",
           "where_time_goes", "weights_need", "not_on_one_gpu"]


def record_inprocess(store, model_dir, depths, *, steps: int, card: str = "embedded", say=print) -> list[dict]:
    """Profile ``model_dir`` in this process (transformers, torch profiler) at each depth and store the rows as the
    served engines' are (``profile_runs``, ``decode_breakdown``; engine "transformers (in process)")."""
    import time

    from .inprocess import inprocess_profiles

    rows = inprocess_profiles(model_dir, depths=depths, steps=steps, trace_dir=store.path / "traces", say=say)
    out = []
    for r in rows:
        b = r["breakdown"]
        full = r["layers"] == r["full_layers"]
        label = f"transformers in process {card}-{r['layers']}L"
        row = {"label": label, "engine": "transformers (in process)", "backend": "auto", "mode": "eager", "card": card,
               "role": "full" if full else "slice", "quant": "bf16", "layers": r["layers"], "full_layers": r["full_layers"],
               "dense_layers": None, "ok": True, "taken_at": round(time.time(), 3), "tpot_ms": r["tpot_ms"],
               "tpot_ci_ms": None, "tpot_runs": r["tpot_runs"], "steps": b["steps"], "step_ms": b["step_ms"],
               "step_ms_sd": b["step_ms_sd"], "busy_ms": b["busy_ms"], "idle_ms": b["categories"]["gpu idle"],
               "kernel_ms": b["kernel_ms"], "overlap_ms": b["overlap_ms"], "kernels_per_step": b["kernels_per_step"],
               "anchor": b["anchor"], "trace": str(Path(r["trace"]).relative_to(store.path)) if str(r["trace"]).startswith(str(store.path)) else r["trace"],
               "profiler_overhead_pct": 100 * (b["step_ms"] / r["tpot_ms"] - 1), "threads": r["threads"],
               "method": "torch.profiler in this process (CPU operators), greedy decode with the KV cache, one token per step"}
        store.append("profile_runs", row)
        for cat, ms in b["categories"].items():
            store.append("decode_breakdown", {"label": label, "engine": row["engine"], "backend": "auto", "reported_backend": None,
                                              "mode": "eager", "card": card, "layers": r["layers"], "quant": "bf16", "category": cat,
                                              "ms_per_step": ms, "share": ms / b["step_ms"], "steps": b["steps"],
                                              "tpot_unprofiled_ms": r["tpot_ms"], "step_ms": b["step_ms"], "taken_at": row["taken_at"]})
        out.append(row)
    return out


def measure_chapter(store, engines, model_dir, *, engine_args: str = "", steps: int = 40, depths: str = "", host: str = "local",
                    smoke: bool = False, say=print) -> None:
    """Profile each engine of the chapter on its model (and, with ``depths``, on slices of the model's card, for the
    full-model prediction). A failure is recorded and the chapter goes on."""
    from ..engines import args_for, get_engine
    from ..models import build_model
    from .run import run_plan

    meta_p = Path(model_dir) / "servebook_model.json"
    meta = json.loads(meta_p.read_text()) if meta_p.is_file() else {}
    want = [int(d) for d in str(depths).replace(" ", "").split(",") if d]
    served = []
    for spec in engines:
        name = get_engine(spec).name
        if name == "transformers":
            have = {r["label"] for r in latest_ok(store.rows("profile_runs")) if r["engine"] == "transformers (in process)"}
            if have:
                say("in-process profiles already recorded in this run")
                continue
            try:
                from transformers import AutoConfig

                total = AutoConfig.from_pretrained(str(model_dir)).num_hidden_layers
                ds = sorted({d for d in want if 1 <= d < total}) + [None]
                record_inprocess(store, model_dir, ds, steps=max(8, steps // (3 if smoke else 1)), say=say)
            except Exception as exc:  # noqa: BLE001 - a finding; the chapter goes on
                store.record_failure("profile transformers (in process)", exc)
                say(f"in-process profile failed: {exc}")
            continue
        if host not in ("", "local"):
            store.record_failure(f"profile {name}", f"profiles are taken on the host the book runs on; {host} is remote")
            continue
        extra = args_for(engine_args, name)
        served.append({"label": f"{name} {Path(model_dir).name}", "engine": spec, "model_dir": str(model_dir), "card": meta.get("card"),
                       "role": "full" if meta.get("layers") and meta.get("facts", {}).get("full_layers") == meta.get("layers") else "slice",
                       "extra": extra})
        if want and meta.get("card"):
            for d in want:
                if d == meta.get("layers"):
                    continue
                try:
                    sl = build_model(meta["card"], layers=d, weights="dummy", progress=say)
                except Exception as exc:  # noqa: BLE001
                    store.record_failure(f"profile slice {meta['card']} {d}L", exc)
                    continue
                served.append({"label": f"{name} {meta['card']}-{d}L", "engine": spec, "model_dir": str(sl), "card": meta["card"],
                               "role": "slice", "extra": extra})
    if served:
        run_plan(store, served, steps=steps, say=say)
    from .tables import write_predictions

    write_predictions(store)


def chapter_tables(store) -> dict:
    """The recorded profiles as the chapter shows them (pandas DataFrames)."""
    import pandas as pd

    runs = pd.DataFrame(latest_ok(store.rows("profile_runs")))
    failed = pd.DataFrame([r for r in store.rows("profile_runs") if not r.get("ok")])
    long = pd.DataFrame(latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs")))
    wide = pd.DataFrame()
    if len(long):
        wide = long.pivot_table(index="label", columns="category", values="ms_per_step", aggfunc="sum")
        wide = wide[[c for c in CATEGORIES if c in wide.columns]]
        wide["step (profiled)"] = wide.sum(axis=1)
        tp = long.groupby("label")["tpot_unprofiled_ms"].first()
        wide["time per token (unprofiled)"] = tp
        wide["profiled - unprofiled"] = wide["step (profiled)"] - tp
    preds = pd.DataFrame(store.rows("prediction_check"))
    return {"runs": runs, "failed": failed, "breakdown_long": long, "breakdown": wide, "predictions": preds,
            "rules": pd.DataFrame(rules_table()), "bandwidth": pd.DataFrame(store.rows("memory_bandwidth"))}


_COLORS = {"attention": "#4C72B0", "moe experts": "#DD8452", "moe routing": "#937860", "dense gemm": "#55A868",
           "communication": "#C44E52", "norm/rope/elementwise": "#8172B3", "sampling": "#DA8BC3", "other": "#8C8C8C",
           "gpu idle": "#DDDDDD"}


def plot_breakdown(long, ax=None, title: str = "one decode step, by kernel category"):
    """A stacked horizontal bar per profiled server (ms per step), categories in the chapter's order; the
    unprofiled time per token as a black tick."""
    import matplotlib.pyplot as plt

    if long is None or not len(long):
        return None
    wide = long.pivot_table(index="label", columns="category", values="ms_per_step", aggfunc="sum")
    wide = wide[[c for c in CATEGORIES if c in wide.columns]]
    tp = long.groupby("label")["tpot_unprofiled_ms"].first()
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * len(wide) + 1.4))
    left = [0.0] * len(wide)
    for cat in wide.columns:
        vals = wide[cat].fillna(0).tolist()
        ax.barh(range(len(wide)), vals, left=left, color=_COLORS.get(cat), label=cat, edgecolor="white", linewidth=0.4)
        left = [a + b for a, b in zip(left, vals)]
    ax.scatter(tp.reindex(wide.index).tolist(), range(len(wide)), marker="|", s=300, color="black", label="unprofiled time per token", zorder=3)
    ax.set_yticks(range(len(wide)))
    ax.set_yticklabels(wide.index, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per decode step")
    ax.set_title(title)
    height = ax.figure.get_size_inches()[1]
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.55 / height), frameon=False)  # just below the axis label
    plt.tight_layout()
    return ax


def show_breakdown(t: dict) -> None:
    """The profiled steps by category (table and stacked bars), or why there is none (``chapter_tables``' result)."""
    from IPython.display import display

    if len(t["breakdown"]):
        display(t["breakdown"].round(3))
        plot_breakdown(t["breakdown_long"])
    else:
        print("no decode-step profile in this run" + ("" if not len(t["failed"]) else ": " + "; ".join(
            f"{r['label']}: {r.get('error')}" for _, r in t["failed"].iterrows())))


_PREDICTION_COLS = ["card", "engine", "backend", "quant", "unit", "layers_measured", "predicted_ms", "low_ms", "high_ms", "measured_ms", "error_pct",
                    "within_interval", "slope_ms_per_layer", "fixed_ms", "roofline_ms_datasheet", "roofline_ms_measured"]


def prediction_table(t: dict):
    """``prediction_check`` as the chapter shows it, with the predicted time also in tok/s (``predicted_tok_s``, 1000 /
    ``predicted_ms``; a display column, not stored; none for a model that does not fit one GPU, ``weights_need``: its
    time is one GPU's compute, no rate it is served at), or a sentence when no two slice depths were profiled."""
    p = t["predictions"]
    if not len(p):
        return "no two slice depths profiled: no prediction"
    devices = [r.get("device") for r in t["bandwidth"].to_dict("records")] if len(t["bandwidth"]) else []
    fits = [(weights_need(r, devices) or {}).get("gpus_to_hold", 1) <= 1 for r in p.to_dict("records")]
    p = p[[c for c in _PREDICTION_COLS if c in p]].copy()
    p.insert(p.columns.get_loc("predicted_ms") + 1, "predicted_tok_s",
             [1e3 / x if x and ok else None for x, ok in zip(p["predicted_ms"], fits)])
    return p.round(3)


def weights_need(p: dict, devices: list) -> dict | None:
    """``roofline.weights_on_gpus`` for a prediction row's card and quantisation on the GPU its run measured
    (``devices``: the ``device`` of its memory_bandwidth rows, the last one named; None where no hardware profile
    matches it or the card is not known), with ``profile`` the hardware profile's name."""
    from .. import roofline
    from ..errors import ServebookError

    profile = roofline.gpu_profile_named(next((d for d in reversed(devices) if d), None))
    try:
        need = roofline.weights_on_gpus(p["card"], p.get("quant") or "bf16", profile) if profile else None
    except (ServebookError, KeyError, TypeError, FileNotFoundError):
        return None
    return {**need, "profile": profile} if need else None


def findings(store) -> list[str]:
    """The section's findings in sentences; each number tagged with the quantity it is (``servebook.stated.q``)."""
    from ..stated import q
    from .depths import depth_markdown

    ladder = depth_markdown(store)   # a run of slice ladders (a reference recording): its depths over their starts
    lines = [ladder, ""] if ladder else []
    runs = latest_ok(store.rows("profile_runs"))
    long = latest_breakdown(store.rows("decode_breakdown"), store.rows("profile_runs"))
    for r in runs:
        cats = {b["category"]: b["ms_per_step"] for b in long if b["label"] == r["label"]}
        top = sorted(((v, k) for k, v in cats.items()), reverse=True)[:3]
        idle = "time outside any operator" if "in process" in r["engine"] else "GPU idle"
        parts = ", ".join(f"{idle if k == 'gpu idle' else k} {q('profile_category_ms', v, '.3f', of=r['label'] + ' | ' + k)} ms"
                          for v, k in top)
        name = r["label"]
        if r.get("role") == "repeat":      # its label ends in the start's number: named as code, with what it repeats
            first = next((p["label"] for p in starts_of(runs, r["label"]) if p.get("role") != "repeat"), None)
            name = f"`{r['label']}`" + (f" (another server start of {first})" if first else "")
        lines.append(f"- {name}: {q('profile_step_ms', r['step_ms'], '.3f', of=r['label'])} ms per profiled step "
                     f"against {q('profile_tpot_ms', r['tpot_ms'], '.3f', of=r['label'])} ms per token without the profiler; "
                     f"the largest parts: {parts}.")
    preds = store.rows("prediction_check")
    lines += [_prediction_line(p, store) for p in preds]
    machines = {p["machine"]: [] for p in preds if p.get("predicted_ms") is not None and p.get("machine")}
    for p in preds:
        if p.get("machine") in machines and p.get("predicted_ms") is not None:
            machines[p["machine"]].append(p["engine"])
    if len(machines) > 1:   # one table, two machines: its rows are no comparison of the engines
        lines.append("- The predictions above come from " + number_word(len(machines))
                     + " machines (" + "; ".join(f"`{m}`: {', '.join(dict.fromkeys(e))}" for m, e in machines.items())
                     + "), each from its own machine's slices and not carried to one: their difference is not the "
                     "engines'; chapter 06 compares the engines within one unit where one holds both, else only through each "
                     "machine's anchor configuration.")
    return lines


def _prediction_line(p: dict, store) -> str:
    """One full-model prediction in a sentence: its card's quantisation named (a card predicted in bf16 and with INT4
    experts reads as one prediction stated twice otherwise), the recording unit its two slices share
    (``machines.recording_unit``: the machine, else the UTC day; ``prediction_rows`` never pairs slices of two), and
    the profiles of the same configuration other units hold, left out. A configuration recorded only in slices of
    different units: that it was recorded, which unit holds which, and what settles it."""
    from ..stated import q

    quant = p.get("quant", "bf16")
    subject = prediction_subject(p)
    head = f"- {p['card']} ({'INT4 experts' if quant == 'card' else quant}) with {p['engine']} ({p['backend']})"
    if p.get("predicted_ms") is None:
        return (head + ": recorded but not predicted: its slice depths lie only in different recording units ("
                + _held_words(p.get("unpaired") or []) + "), and a difference across units may book two machines' per-step "
                "kernels as a layer (`servebook.profile.machines`), so none is taken; both depths profiled in one unit "
                "(one machine) settle it.")
    prof = {r["label"]: r for r in latest_ok(store.rows("profile_runs"))}
    used = [prof.get(lab) for lab in (p.get("from_labels") or [])[:2]]
    need = None if p.get("measured_ms") is not None else weights_need(p, [r.get("device") for r in store.rows("memory_bandwidth")])
    text = (f"{head}: {'per-GPU compute time only, ' if need and need['gpus_to_hold'] > 1 else ''}predicted from the "
            f"{q('prediction_layers', p['layers_measured'], of=subject + ' | measured')}-layer slices "
            f"{q('predicted_ms', p['predicted_ms'], '.3f', of=subject)} ms per token for all "
            f"{q('prediction_layers', p['full_layers'], 'd', of=subject + ' | full')} layers, on one GPU as the slices ran "
            "(`servebook profile run` starts each server on one GPU: no tensor parallelism, so no all-reduce term)")
    if need and need["gpus_to_hold"] > 1:
        text += "; " + not_on_one_gpu(p, need)
    if p.get("measured_ms") is not None:
        text += (f"; measured {q('measured_full_ms', p['measured_ms'], '.3f', of=subject)} ms, error "
                 f"{q('prediction_error_pct', p['error_pct'], '+.1f', of=subject)}%"
                 + (" (inside the predicted interval)" if p.get("within_interval") else " (outside the predicted interval)"))
    else:
        text += " (the whole model was not run here: a prediction only)"
    if "in process" in str(p["engine"]):
        text += (". In process, the framework's own work between operators grows with every layer and nothing runs beside "
                 "it, while the rule is made for servers whose host work is per step and hidden behind the GPU: the error "
                 "above measures how far that assumption is from this host")
    if any(u is not None and u.get("quant", "bf16") != quant for u in used):
        text += "; its shallower slice holds no routed expert, so its bf16 profile stands for the quantised card's"
    return text + _unit_words(p, used) + "."


def not_on_one_gpu(p: dict, need: dict) -> str:
    """Why a prediction of a model that does not fit one GPU is no served rate, the GPUs its weights need tagged."""
    from ..stated import q

    of = f"{p['card']} | {p.get('quant') or 'bf16'} | {need['profile']}"
    return (f"the model does not fit one GPU (needs {q('full_model_weights', need['gpus_to_hold'], 'd', of=of + ' | gpus_to_hold')}: "
            f"its weights, {q('full_model_weights', need['weights_gib'], ',.0f', of=of + ' | weights_gib')} GiB, on GPUs of "
            f"{q('full_model_weights', need['gpu_memory_gib'], 'g', of=of + ' | gpu_memory_gib')} GiB), so no single-stream "
            "rate is predicted: tensor-parallel over them, each GPU reads its share of the bytes and every layer adds "
            "all-reduces (chapter 04's floor), which this time does not include")


def _unit_words(p: dict, used: list) -> str:
    """The recording unit a prediction's slices share, a second start used where the first was taken in another unit,
    and the profiles of the same configuration other units hold (left out)."""
    if p.get("unit") is None:
        return ""
    text = ("; both slices from one machine, `" + str(p["unit"]) + "`" if p.get("machine") else
            "; both slices from one recording unit, `" + str(p["unit"]) + "` (a UTC day: these rows carry no machine "
            "identity)")
    again = [u["label"] for u in used if u is not None and u.get("role") == "repeat"]
    if again:
        text += " (" + ", ".join(f"`{x}`" for x in again) + ": another server start, its first taken in another unit)"
    if p.get("unpaired"):
        text += ("; left out, as another recording unit's (a unit's slices are subtracted, and its whole model compared, "
                 "only within it): " + _held_words(p["unpaired"]))
    return text


def _held_words(held: list[dict]) -> str:
    """Which unit holds which profiles (``prediction_rows``' ``unpaired``), labels and units as code."""
    return "; ".join(f"`{h['unit']}` holds " + ", ".join(f"`{lab}`" for lab in h["labels"]) for h in held)


def where_time_goes(store) -> str:
    """Chapter 06's account of the profiles of a live run: per model both engines ran, their GPU time per step, what
    the difference between them consists of, and the full-model checks (Markdown; figures tagged)."""
    from ..stated import q
    from .backend_kernels import engine_kernels_markdown, kernel_shift_markdown
    from .backends_at_depth import backend_comparisons, backends_markdown
    from .depths import HOST_BOUND_SHARE
    from .same_machine import seed_units
    from .tables import engine_difference
    from .units_page import units_markdown

    prof = store.rows("profile_runs")   # read once: every part below reads the same rows
    rows = engine_difference(store.rows("decode_breakdown"), prof, seeds=SEED_BACKENDS)   # like for like
    units = units_markdown(store)   # a reference recording of units: each engine's ladder, compared through the reference
    comparisons = backend_comparisons(prof)
    # the engines' kernels side by side within one unit, the backends within one unit (if measured), then the kernels
    # that make each backend's difference
    backs = "\n\n".join(x for x in (engine_kernels_markdown(store, seed_units(prof)), backends_markdown(comparisons),
                                      kernel_shift_markdown(store, comparisons)) if x)
    units += ("\n\n" + backs) if backs else ""   # a blank line first: a paragraph and table, not a list item's
    if not rows:
        return units
    last = {p["label"]: p for p in latest_ok(prof)}
    recorded = {lab: p.get("busy_ms") for lab, p in last.items()}  # the GPU time each profile recorded
    several = len({p.get("machine") for p in last.values()}) > 1
    lines, single = [], []
    seen = set()
    for r in sorted(rows, key=lambda x: (x["card"], int(x["layers"] or 0), x["quant"])):
        key = (r["a"], r["b"])   # one pair of servers, on one machine (engine_difference pairs within a machine)
        if key in seen:
            continue
        seen.add(key)
        mine = [x for x in rows if (x["a"], x["b"]) == key]
        where = f" on machine `{last[r['a']].get('machine')}` (unit `{last[r['a']].get('run_id')}`)" if several else ""
        tpot = next(x for x in mine if x["category"] == "time per token (unprofiled)")
        gpu = [x for x in mine if x["category"] not in ("gpu idle", "total (profiled step)", "time per token (unprofiled)")]
        busy_a = recorded.get(r["a"]) if recorded.get(r["a"]) is not None else sum(x["a_ms"] for x in gpu)
        busy_b = recorded.get(r["b"]) if recorded.get(r["b"]) is not None else sum(x["b_ms"] for x in gpu)
        top = max(gpu, key=lambda x: abs(x["diff_ms"]))
        lines.append(
            f"- {r['card']}, {q('profile_layers', r['layers'], 'd', of=r['a'])} layer{'' if int(r['layers']) == 1 else 's'} ({r['quant']}, {r['mode']}){where}: SGLang ({r['a_backend']}) "
            f"{q('profile_tpot_ms', tpot['a_ms'], '.3f', of=r['a'])} ms per token, vLLM ({r['b_backend']}) "
            f"{q('profile_tpot_ms', tpot['b_ms'], '.3f', of=r['b'])} ms; kernels {q('profile_busy_ms', busy_a, '.3f', of=r['a'])} "
            f"against {q('profile_busy_ms', busy_b, '.3f', of=r['b'])} ms per step (largest difference: {top['category']} "
            f"{q('profile_diff_ms', top['diff_ms'], '+.3f', of=r['a'] + ' | ' + r['b'] + ' | ' + top['category'])} ms); "
            + ("the GPU is busy for nearly all of the time per token: GPU-bound, so the kernels decide"
               if min(busy_a / tpot['a_ms'], busy_b / tpot['b_ms']) > HOST_BOUND_SHARE else _host_bound(store, r, single)) + ".")
    if single:
        lines.append(_HOST_HYPOTHESIS)
    for p in store.rows("prediction_check"):
        if p.get("measured_ms") is None:
            continue
        subject = prediction_subject(p)
        lines.append(f"- {p['card']} whole, {p['engine']}" + (f" (slices and whole model of one recording unit, "
                                                                 f"`{p['unit']}`)" if p.get("unit") else "")
                     + f": predicted from two slices {q('predicted_ms', p['predicted_ms'], '.3f', of=subject)} ms per token, measured "
                     f"{q('measured_full_ms', p['measured_ms'], '.3f', of=subject)} ms "
                     f"({q('prediction_error_pct', p['error_pct'], '+.1f', of=subject)}%).")
    return "\n".join(lines + ([units] if units else []))


def _host_bound(store, r: dict, single: list) -> str:
    """A host-bound pair of profiles. Where each engine's server was profiled over two starts or more
    (``tables.start_spread``) the starts' figures are stated, and the difference is "on the host, not in their
    kernels" only where the engines' GPU-busy times agree within their own start-to-start spread and the 95% intervals
    of their times per token (over the starts) do not overlap; otherwise a hypothesis, with what settles it. With one
    start each the claim is left to the hypothesis after the list (``single`` collects the pair). Either way a shallower
    slice of the same engine that took longer per token is named (a sign of start-to-start noise)."""
    from ..stated import q
    from .tables import start_spread

    ok = [p for p in store.rows("profile_runs") if p.get("ok")]
    head = "the rest of each token's time has no kernel running (host work, launch gaps): host-bound"
    sa, sb = start_spread(ok, r["a"]), start_spread(ok, r["b"])
    odd = _inverted(ok, r, q)
    noise = " (" + "; ".join(odd) + ": a sign of start-to-start noise)" if odd else ""
    if sa is not None and sb is not None:
        return head + _over_starts(sa, sb, q) + noise
    single.append(r)
    return head + noise + _elsewhere(ok, r)


def _elsewhere(ok: list[dict], r: dict) -> str:
    """Where a pair's servers have other starts only in another recording unit (``machines.recording_unit``: rows without
    machine identity taken on another day), that those are no start spread: another machine's profile differs by more."""
    from .machines import recording_unit
    from .tables import _server

    last = {p["label"]: p for p in ok}
    other = [p["label"] for lab in (r["a"], r["b"]) if lab in last for p in ok if p["label"] != lab
             and _server(p) == _server(last[lab]) and "repeat" in (p.get("role"), last[lab].get("role"))
             and recording_unit(p) != recording_unit(last[lab])]
    one = len(other) == 1
    return ("; " + ", ".join(f"`{x}`" for x in other) + f" ({'another server start' if one else 'other server starts'} of "
            f"the same configuration) {'was' if one else 'were'} profiled in another recording unit, possibly on another "
            f"machine, so {'it is' if one else 'they are'} no start-to-start spread here" if other else "")


def _inverted(ok: list[dict], r: dict, q) -> list[str]:
    """Each shallower slice of the pair's engines (same model, quantisation, mode, backend) that took longer per token
    than the deeper one here: a slice with fewer layers cannot need more time, so the starts moved it."""
    last = {p["label"]: p for p in latest_ok(ok)}
    odd = []
    for lab in (r["a"], r["b"]):
        me = last.get(lab)
        for o in last.values() if me is not None and me.get("tpot_ms") is not None else ():
            same = all(o.get(k) == me.get(k) for k in ("engine", "card", "quant", "mode", "backend"))
            if same and o.get("role", "slice") != "repeat" and int(o["layers"]) < int(me["layers"]) and \
                    (o.get("tpot_ms") or 0) > me["tpot_ms"]:
                odd.append(f"{o['label']}, with fewer layers, took {q('profile_tpot_ms', o['tpot_ms'], '.3f', of=o['label'])} "
                           f"ms per token, more than {lab}")
    return odd


def _over_starts(sa: dict, sb: dict, q) -> str:
    """The two engines' starts stated, and whether their difference is on the host (a finding: the kernels agree within
    the start spread and the 95% intervals of the times per token over the starts do not overlap) or a hypothesis."""
    def starts(s: dict) -> str:
        busy = " and ".join(q("profile_busy_ms", b, ".3f", of=lab) for b, lab in zip(s["busy_ms"], s["labels"]))
        tpot = " and ".join(q("profile_tpot_ms", t, ".3f", of=lab) for t, lab in zip(s["tpot_ms"], s["labels"]))
        return f"kernels {busy} ms per step, {tpot} ms per token"

    said = f" (over {q('profile_starts', sa['starts'], 'd', of=sa['label'])} and " \
           f"{q('profile_starts', sb['starts'], 'd', of=sb['label'])} server starts: SGLang {starts(sa)}; vLLM {starts(sb)})"
    busy_agree = abs(sa["busy_mean_ms"] - sb["busy_mean_ms"]) <= max(sa["busy_spread_ms"], sb["busy_spread_ms"])
    ca, cb = sa["tpot_ci95_ms"], sb["tpot_ci95_ms"]
    apart = not _overlap(sa["tpot_mean_ms"], ca, sb["tpot_mean_ms"], cb)

    def mean(s: dict) -> str:
        return (f"{q('profile_tpot_start_mean_ms', s['tpot_mean_ms'], '.3f', of=s['label'])} ± "
                f"{q('profile_tpot_start_ci95_ms', s['tpot_ci95_ms'], '.3f', of=s['label'])} ms")
    ints = f"time per token over the starts {mean(sa)} (SGLang) against {mean(sb)} (vLLM), 95% intervals"
    if busy_agree and apart:
        return (said + f": the kernels agree within the engines' start-to-start spread and the {ints} do not overlap, so "
                "the difference between the engines here is on the host, not in their kernels")
    why = ("the kernels differ beyond their start-to-start spread" if not busy_agree else f"the {ints} overlap")
    where = ("that a difference would be on the host (the kernels agree) is a **hypothesis**" if busy_agree else
             "where a difference would come from is a **hypothesis**")
    return (said + f": {why}, so no difference between the engines is shown here, and {where}; more starts of each server "
            "(until the intervals are narrower than the difference) and a host-side trace of each engine's scheduler loop "
            "settle it")


_HOST_HYPOTHESIS = (
    "- Host-bound slices above, one server start per engine: that the difference between the engines there is on the "
    "host rather than in their kernels is a **hypothesis** - a difference that size can come from one start to the next "
    "(chapter 03's intervals over starts). What settles it: profiles of each engine over several server starts, plus a "
    "host-side trace of each engine's scheduler loop (py-spy or nsys CPU sampling) during the same decode.")
