"""This host's limits in chapter 05: the bandwidth roofline of the model measured here (and of a hardware profile), its
extrapolation to the full model, and the in-process decode step's breakdown.

    roof = host_roofline(store, model_dir, m["single_cfg"], measure=False, w=w)    # rows, note, GB per token
    extrapolation(store, roof, ...); inprocess_breakdown(store, ...); say_breakdown(store)
"""

from __future__ import annotations

import json
from typing import Any

from .figures import breakdowns
from .measure import Workload

__all__ = ["host_roofline", "extrapolation", "inprocess_breakdown", "say_breakdown", "what_if_line"]


# -- the roofline ----------------------------------------------------------------------------------------------------------
def _derived_sources(store, single_cfg) -> tuple[dict, Any]:
    """The measurement each derived row (``bench_roofline``, ``model_extrapolation``) is keyed by: per configuration, its
    last single-stream row with its method (``results.derived_from``); and a test for rows written before derived rows
    named their source (they stand where their rate is the current one)."""
    from ..results import derived_from
    from .runs import current

    summary_rows, _ = current(store.rows("bench_summary"), store.rows("bench_requests"))
    sources = {r["label"]: derived_from(r, method={k: r.get(k) for k in ("warmup", "runs", "max_tokens", "input_len")})
               for r in summary_rows if r.get("phase") == "single"}
    rate_of = dict(zip(single_cfg["label"], single_cfg["decode_tok_s_mean"])) if len(single_cfg) else {}

    def stands(r, ms) -> bool:
        return any(str(r.get("case", "")).startswith(f"{lab} on ") and abs(ms(r) - 1e3 / tok) < 1e-6 * ms(r)
                   for lab, tok in rate_of.items() if tok)
    return sources, stands


def host_roofline(store, model_dir, single_cfg, *, measure: bool, w: Workload) -> dict:
    """This run's roofline rows (``bench_roofline``, source "measured here"): re-read as recorded (``measure=False``), or
    the model's bytes per token over this host's bandwidth, one row per measured configuration. Returns ``rows``,
    ``roof`` (the decode roofline, when computed here), ``weights`` and ``note`` (Markdown: which bandwidth)."""
    from .. import roofline

    from ..results import standing

    out = {"rows": [], "roof": None, "weights": None, "note": "", "sources": {}}
    if model_dir is None:
        out["note"] = ("No roofline of this host: this run served no local model (its `model` is a model card, read from "
                       "data files only), so there is no measured rate to hold against a bandwidth.")
        return out
    # derived rows are keyed by the measurement they derive from (its method included): taken again, it supersedes them
    sources, stands = _derived_sources(store, single_cfg)
    out["sources"], out["stands"] = sources, stands
    if not measure:  # the rows this run recorded, with the bandwidth of the host that measured them
        out["rows"] = standing([r for r in store.rows("bench_roofline") if r.get("source") == "measured here"], sources.values(),
                               identity=("case",), legacy=lambda r: stands(r, lambda x: 1e3 / x["measured_tok_s"]))
        if out["rows"]:
            r0 = out["rows"][0]
            from ..stated import q

            out["note"] = (f"Bandwidth for this run's roofline: **{q('roofline_bandwidth_gbs', r0['bandwidth_tbs'] * 1e3, ',.1f', of=r0['case'])} "
                           f"GB/s**, the {r0['bandwidth_source']} (as recorded on the host)." + _bandwidth_note(store, out["rows"]))
        else:
            out["note"] = "No roofline of this host: this run recorded no served rate against one (table `bench_roofline`)."
        return out
    if list(model_dir.glob("*.safetensors")):
        weights = roofline.weight_bytes(model_dir)
    else:  # built without weights (the engines' --load-format dummy): the same count from the config, layer by layer
        weights = roofline.config_bytes_per_token(json.loads((model_dir / "config.json").read_text()))
    out["weights"] = weights
    # measured on a CPU host only (a GPU's is its datasheet's). 512 MiB is 16 times the 32 MiB L3 of the 2-core book host;
    # there it read what 1024 MiB did within the noise (5.9-7.4 against 6.2-7.3 GB/s, alternated on a busy host) in about
    # half the time (3.4 s against 6.3 s). Still best of 5 after a warm-up pass.
    bw = (_recorded_bandwidth(store, single_cfg, sources, stands)
          or roofline.host_memory_bandwidth(size_mib=256 if w.smoke else 512, repeats=3 if w.smoke else 5))
    print(f"weights: {weights['total_bytes'] / 1e6:.1f} MB in {weights['total_params'] / 1e6:.1f}M parameters; "
          f"{weights['bytes_per_token'] / 1e6:.1f} MB read per decode token")
    out["note"] = (f"Bandwidth for this run's roofline: **{bw['bandwidth_tbs'] * 1e3:,.1f} GB/s**, "
                   + (f"measured on this host's CPU ({bw['method']})." if bw.get("source") == "measured" else f"the {bw['method']}.")
                   if bw["bandwidth_tbs"] else f"No bandwidth for a roofline: {bw['method']}.")
    if bw["bandwidth_tbs"]:
        cfg_json = json.loads((model_dir / "config.json").read_text())
        roof = roofline.decode_roofline(weights["bytes_per_token"], bw["bandwidth_tbs"], context_tokens=w.input_len + w.max_tokens // 2,
                                        kv_bytes_per_token=roofline.kv_bytes_per_token(
                                            cfg_json, 4.0 if cfg_json.get("torch_dtype") == "float32" else 2.0))
        out["roof"] = roof
        for _, r in single_cfg.iterrows():
            row = {"case": f"{r['label']} on {bw['device']}", "measured_tok_s": r["decode_tok_s_mean"], "roofline_tok_s": roof["tok_s"],
                   "pct_of_roofline": 100 * r["decode_tok_s_mean"] / roof["tok_s"], "bytes_per_token": roof["bytes_per_token"],
                   "bandwidth_tbs": bw["bandwidth_tbs"], "bandwidth_source": bw["method"], "tp": 1, "source": "measured here",
                   "derived_from": sources.get(r["label"])}
            if not store.done("bench_roofline", **{k: v for k, v in row.items() if k != "derived_from"}):
                store.append("bench_roofline", row)
            out["rows"].append(row)
        out["note"] += _bandwidth_note(store, out["rows"])
    return out


def _recorded_bandwidth(store, single_cfg, sources: dict, stands) -> dict | None:
    """A resumed run: the bandwidth its roofline rows recorded, when every configuration measured has a row derived from
    the measurement that stands now (nothing is measured again, and the roofline is computed again from the same
    figures); else None (the bandwidth is measured)."""
    from ..results import standing

    rows = standing([r for r in store.rows("bench_roofline") if r.get("source") == "measured here"], sources.values(),
                    identity=("case",), legacy=lambda r: stands(r, lambda x: 1e3 / x["measured_tok_s"]))
    labels = list(single_cfg["label"]) if len(single_cfg) else []
    mine = {lab: next((r for r in rows if str(r.get("case", "")).startswith(f"{lab} on ")), None) for lab in labels}
    if not labels or any(r is None or not store.find("bench_roofline", case=r["case"]) for r in mine.values()):
        return None
    r0 = next(iter(mine.values()))
    print(f"resumed: the bandwidth this run recorded, {r0['bandwidth_tbs'] * 1e3:,.1f} GB/s, is not measured again")
    return {"bandwidth_tbs": r0["bandwidth_tbs"], "method": r0["bandwidth_source"], "device": r0["case"].split(" on ", 1)[1],
            "source": "profile" if str(r0["bandwidth_source"]).startswith("datasheet") else "measured"}


def _bandwidth_note(store, rows) -> str:
    """Where the roofline rows used a GPU's datasheet: the GPU's read bandwidth measured in this run (``memory_bandwidth``)
    and each configuration's share of both rooflines, with the measurement against its reference
    (``roofline.REFERENCE_GPU_READ``); or why the page gives the datasheet's alone. Markdown, every figure tagged."""
    from ..stated import q
    from .figures import bandwidth_roofline

    b = bandwidth_roofline(store, rows)
    cases = {c: v for c, v in b["cases"].items() if v["from_datasheet"]}
    if not cases:
        return ""
    measured = {c: v for c, v in cases.items() if "read_gbs" in v}
    if not measured:
        return (" The GPU's read bandwidth was not measured in this run (the decode-step profiles measure it, table "
                "`memory_bandwidth`), so each rate is set against the datasheet's alone, a peak that measured reads stay below: "
                "its share of it understates how close the engine came to what the memory delivers.")
    out = []
    for dev in dict.fromkeys(v["device"] for v in measured.values()):
        d = b["devices"][dev]

        def g(field: str, fmt: str, dev=dev) -> str:
            return q("gpu_read_bandwidth", d[field], fmt, of=f"{dev} | {field}")
        text = (f" The same GPU's read bandwidth as this run's table `memory_bandwidth` records it (`x.sum()` over a bf16 tensor of "
                f"{g('size_gib', 'g')} GiB, best of its repeats): **{g('read_gbs', ',.1f')} GB/s**.")
        if "reference_read_gbs" in d:
            text += (f" A reference measurement of the same kind with {g('reference_size_gib', 'g')} GiB tensors on "
                     f"{d['reference_where'].split(',')[0]} read {g('reference_read_gbs', ',.1f')} GB/s; this run's is "
                     f"{g('below_reference_pct', '.1f')}% below it. Hypothesis: the smaller tensor or the machine; one machine "
                     "measuring both sizes would settle it. Until then the roofline at the measured bandwidth may be set too low, "
                     "and a rate's share of it too high.")
        out.append(text)
    per = "; ".join(
        f"{c.rsplit(' on ', 1)[0]}: {q('bandwidth_roofline', v['measured_tok_s'], ',.1f', of=f'{c} | measured_tok_s')} tok/s is "
        f"{q('bandwidth_roofline', v['datasheet_pct'], '.1f', of=f'{c} | datasheet_pct')}% of the datasheet roofline "
        f"({q('bandwidth_roofline', v['datasheet_roofline_tok_s'], ',.0f', of=f'{c} | datasheet_roofline_tok_s')} tok/s) and "
        f"{q('bandwidth_roofline', v['read_pct'], '.1f', of=f'{c} | read_pct')}% of the measured one "
        f"({q('bandwidth_roofline', v['read_roofline_tok_s'], ',.0f', of=f'{c} | read_roofline_tok_s')} tok/s)" for c, v in measured.items())
    return "".join(out) + f" Each rate against both: {per}. The table below keeps the datasheet's."


def extrapolation(store, model_dir, roof_rows, *, measure: bool = True, sources: dict | None = None, stands=None):
    """The slice's time per token scaled to the full model at the share of the bandwidth floor the slice reached (table
    ``model_extrapolation``, a labelled prediction), with the prediction also in tok/s. None without a slice's facts.
    Each row names the measurement it derives from (``derived_from``, from ``host_roofline``'s ``sources``); only rows
    of measurements that stand are shown, and a chapter executed again on recorded tables (``measure=False``) writes
    nothing."""
    import pandas as pd

    from ..results import standing

    sources = sources or {}

    slice_meta = (model_dir / "servebook_model.json") if model_dir is not None else None
    if slice_meta is None or not slice_meta.is_file() or not roof_rows:
        return None
    f = json.loads(slice_meta.read_text())["facts"]
    bw_tbs = roof_rows[0]["bandwidth_tbs"]
    rows_x = []
    for r in roof_rows:
        t_slice = 1e3 / r["measured_tok_s"]
        eff = (f["slice_bytes_per_token"] / (bw_tbs * 1e12) * 1e3) / t_slice  # the share of the bandwidth floor the slice reached
        for what, nbytes in (("full model, bf16 like the slice", f["full_bytes_per_token_bf16"]),
                             ("full model, the card's quantization", f["full_bytes_per_token_card"])):
            floor_ms = nbytes / (bw_tbs * 1e12) * 1e3
            rows_x.append({"case": r["case"], "full_model": what, "layers": f"{f['slice_layers']} -> {f['full_layers']}",
                           "slice_ms_per_token": t_slice, "slice_share_of_floor": eff, "full_floor_ms": floor_ms,
                           "predicted_full_ms_per_token": floor_ms / eff if eff else None,
                           "label": ("prediction, not measured: every layer assumed to reach the slice's share of the bandwidth floor, "
                                     "on one GPU (TP=1, no all-reduce)"),
                           "derived_from": r.get("derived_from") or next((v for k, v in sources.items() if r["case"].startswith(f"{k} on ")), None)})
    for x in rows_x if measure else []:
        if not store.done("model_extrapolation", case=x["case"], full_model=x["full_model"], derived_from=x["derived_from"]):
            store.append("model_extrapolation", x)
    kept = standing(store.rows("model_extrapolation"), sources.values(), identity=("case", "full_model"),
                    legacy=(lambda r: stands(r, lambda x: x["slice_ms_per_token"])) if stands else None)
    if not kept and store.rows("model_extrapolation"):
        print("table model_extrapolation holds rows of a superseded measurement only; shown: the same computed now from the one that stands")
    print(f"slice: {f['slice_layers']} of {f['full_layers']} layers, {f['slice_bytes_per_token'] / 1e9:.2f} GB read per token; "
          f"full model: {f['full_bytes_per_token_bf16'] / 1e9:.1f} GB in bf16, {f['full_bytes_per_token_card'] / 1e9:.1f} GB with the card's quantization")
    df = pd.DataFrame(kept or rows_x).drop(columns=["derived_from"], errors="ignore")
    df.insert(df.columns.get_loc("predicted_full_ms_per_token") + 1, "predicted_full_tok_s",
              [1e3 / x if x else None for x in df["predicted_full_ms_per_token"]])
    return _on_gpus(df, json.loads(slice_meta.read_text()).get("card"), str(roof_rows[0]["case"]).rsplit(" on ", 1)[-1])


def _on_gpus(df, card: str | None, device: str):
    """The extrapolation's rows with what they assume (one GPU, TP=1, no all-reduce) beside what the full model needs:
    its weights in that quantization and the GPUs of this kind they take at least (``roofline.weights_on_gpus``)."""
    from .. import roofline

    profile = roofline.gpu_profile_named(device)
    df = df.assign(gpus_assumed=1, tp_assumed=1, all_reduce="none")
    if not card or not profile:
        return df
    need = {what: roofline.weights_on_gpus(card, "bf16" if "bf16" in what else "card", profile) for what in df["full_model"].unique()}
    return df.assign(full_weights_gb=[need[w]["weights_gb"] for w in df["full_model"]],
                     gpus_to_hold_weights=[need[w]["gpus_to_hold"] for w in df["full_model"]])


def inprocess_breakdown(store, model_dir, roof, single_cfg, single_df, engines, prompts, *, measure: bool, w: Workload):
    """The served rate split into the bandwidth floor, compute and framework (the model decoding in this process,
    ``bench_inprocess``) and the serving path (table ``bench_breakdown``); only for ``transformers``, whose kernels the
    in-process decode runs. Returns the rows to show (a DataFrame, empty where not measured)."""
    import pandas as pd

    from .. import roofline
    from ..engines import get_engine
    from .inprocess import inprocess_decode_rate

    breakdown = pd.DataFrame()
    inproc_engine = {get_engine(e).name for e in engines} <= {"transformers"}
    if not len(single_df):
        return breakdown
    if not inproc_engine:
        print("in-process decode not measured: it runs transformers' model.generate, not the kernels of "
              f"{', '.join(engines)}; the served rate is compared with the bandwidth floor only")
        return breakdown
    if not measure:
        inproc = store.table("bench_inprocess")
        print("in-process decode as recorded:" if len(inproc) else "in-process decode was not recorded in this run")
        breakdown = store.table("bench_breakdown").drop(columns="execution_id", errors="ignore")  # the chapter execution's id
        return breakdown[breakdown["label"].isin(single_df["label"])] if len(breakdown) and "label" in breakdown else breakdown
    if roof is None:
        return breakdown
    if store.find("bench_inprocess", max_tokens=w.max_tokens):  # resumed: recorded in this run, not measured again
        print("in-process decode as recorded in this run (servebook book --again measures it again)")
    else:
        for threads in ((1,) if w.smoke else (None, 1)):  # torch's default threads, and one: small CPU models are often faster on one
            store.append("bench_inprocess", inprocess_decode_rate(model_dir, prompts[0].text, max_tokens=w.max_tokens,
                                                                  attention=w.attention or None, repeats=1 if w.smoke else 3,
                                                                  threads=threads))
    inproc = store.table("bench_inprocess")
    from IPython.display import display

    display(inproc[["tok_s", "threads", "device", "dtype", "attention"]])
    direct = inproc.sort_values("tok_s").iloc[-1]
    first = single_cfg.iloc[0]
    if direct["tok_s"] < first["decode_tok_s_mean"]:
        print("note: in-process decode measured slower than served (the host was busier, or the server runs the model "
              "differently); the split below is then not meaningful")
    served_ms, direct_ms = 1e3 / first["decode_tok_s_mean"], 1e3 / direct["tok_s"]
    parts = roofline.time_breakdown(first["decode_tok_s_mean"], roof, compute_and_framework=direct_ms - roof["t_mem_ms"] - roof["t_comm_ms"],
                                    serving_path=served_ms - direct_ms)
    for p in parts:
        if not store.done("bench_breakdown", label=first["label"], **p):  # computed again from the same rows: the same row
            store.append("bench_breakdown", {"label": first["label"], **p})
    print(f"in-process decode: {direct['tok_s']:.1f} tok/s ({direct['method']})")
    return pd.DataFrame([{k: v for k, v in r.items() if k != "execution_id"}  # a row computed again supersedes its older one
                         for _, rows in breakdowns(store) for r in rows])


_BEYOND = "time beyond the two floors"   # the page's name of time_breakdown's "unexplained" part (its stored name)


def _part_said(part: str) -> str:
    """A part's name on the page: the remainder after the bandwidth and communication floors is named for what it is
    (the table keeps ``roofline.time_breakdown``'s "unexplained ..."), so it is not read as chapter 06's projection's."""
    return _BEYOND + part[len("unexplained"):] if part.startswith("unexplained") else part


def say_breakdown(store) -> list[str]:
    """Per label of ``bench_breakdown``: the time per token, its largest part named from the table, and each part. The
    seed's rows say that the time beyond the two floors is not the what-if projection's remainder, and give the seed's
    all-reduce share in the format chapter 06 gives it (``profile.verdict``: one decimal)."""
    from ..stated import q, seed_case

    lines = []
    for label, parts in breakdowns(store):
        top = max(parts, key=lambda r: r["ms_per_token"])
        total = sum(r["ms_per_token"] for r in parts)
        text = (f"- {label}: {q('breakdown_total_ms', total, '.2f', of=label)} ms per token, of which the largest part is "
                f"{'the ' * top['part'].startswith('unexplained')}{_part_said(top['part'])} "
                f"({q('breakdown_share', top['share'], '.0%', of=label + ' | ' + top['part'])}); "
                + ", ".join(f"{_part_said(r['part']).split(' (')[0]} {q('breakdown_ms', r['ms_per_token'], '.2f', of=label + ' | ' + r['part'])} ms"
                            for r in parts if r["ms_per_token"]) + ".")
        if "reported by the seed" in label and any(r["part"].startswith("unexplained") for r in parts):
            text += (f" The {_BEYOND} is what is left of the seed's time after the bandwidth and communication floors, not "
                     "a measured part, and not the projection's remainder (the seed's time less the time projected from "
                     "decode-step profiles), which chapter 06 of the what-if book states")
            if "sglang" in label:
                share = seed_case().get("allreduce_share_of_sglang_decode")
                text += ("; the communication floor counts all-reduce at the latency named above, not the seed's own PCIe "
                         "all-reduce, which its profile puts at "
                         + (f"{q('seed_allreduce_share', share, '.1%')} of SGLang's decode time" if share is not None
                            else "an unknown share")
                         + " (data/reference/seed-case.json): this split cannot separate that from the rest of it")
            text += "."
        lines.append(text)
    return lines


def what_if_line(profile: str, weights) -> str:
    """With a hardware ``profile`` beside a measured model: its bandwidth-only limit on one such GPU ("" without)."""
    if not profile or not weights:
        return ""
    from .. import roofline
    from ..profiles import load_profile

    p = load_profile(profile)
    what_if = roofline.decode_roofline(weights["bytes_per_token"], p["memory_bandwidth_tbs"])
    return f"what-if: this model on one {p['name']} would be bounded at {what_if['tok_s']:,.0f} tok/s by bandwidth alone"
