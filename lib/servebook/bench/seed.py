"""The seed case on paper (chapter 05): its limits from the data files alone (bandwidth, then the communication floor at
each all-reduce latency), the seed's reported rates against them, and the what-if page's plan and prediction.

    seed = seed_roofline(store, seed_model="kimi-k2.5", seed_profile="rtx-pro-6000", seed_tp=8)   # rows, floors, lines
    whatif_found(roof, facts); whatif_check_yourself(roof, facts); say_prediction_tok_s(store)
"""

from __future__ import annotations

from ..errors import ServebookError

__all__ = ["seed_roofline", "say_prediction_tok_s", "whatif_found", "whatif_check_yourself"]


# -- the seed case on paper ------------------------------------------------------------------------------------------------
def seed_roofline(store, *, seed_model: str, seed_profile: str, seed_tp: int, seed_allreduce_us: float = 0.0,
                  seed_reported_tok_s: str = "") -> dict:
    """The seed case's limits from data files: bandwidth alone (the card's bytes per token over the profile's bandwidth),
    then with the communication floor at each recorded (or assumed) all-reduce latency; the seed's reported rates against
    them (``bench_roofline``, ``bench_breakdown``). Returns ``rows``, ``floors``, ``roof``, ``n_ar``, ``crossover_us`` and
    ``lines`` (Markdown). A card or profile that cannot be read is recorded in ``failures``; ``rows`` is then empty."""
    from .. import roofline
    from ..profiles import load_profile
    from ..stated import card_roofline, seed_case

    out = {"rows": [], "floors": [], "roof": None, "n_ar": None, "crossover_us": None, "lines": []}
    try:
        card = roofline.load_model_card(seed_model)
        arch = roofline.config_bytes_per_token(card)   # layer by layer from the card's config
        avg = roofline.card_bytes_per_token(card)      # cross-check: active parameters x the checkpoint's average bytes/param
        prof = load_profile(seed_profile)
        bound = card_roofline(seed_model, seed_tp, seed_profile)
        latencies, tagged, rule = _seed_latencies(card, seed_tp, prof, seed_allreduce_us)
        n_ar = rule["n"] if rule is not None else roofline.allreduces_per_token(card)
        floors = [(label, roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp, allreduce_us=us,
                                                   allreduces_per_token=n_ar)) for label, us, _ in latencies]
        settings = [setting for _, _, setting in latencies]
        seed_roof = floors[0][1] if floors else roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp,
                                                                         allreduce_us=0.0, allreduces_per_token=n_ar)
        reported = ({k.strip(): float(v) for k, v in (kv.split(":") for kv in seed_reported_tok_s.split(",") if ":" in kv)}
                    if seed_reported_tok_s else seed_case()["single_stream_tok_s"])
        _seed_rows(store, reported, out["rows"], seed_model=seed_model, seed_profile=seed_profile, seed_tp=seed_tp, bound=bound,
                                 prof=prof, seed_roof=seed_roof, floors=floors, settings=settings, arch=arch,
                                 from_parameter=bool(seed_reported_tok_s))
        crossover_us = seed_roof["t_mem_ms"] * 1e3 / n_ar
        out.update(floors=floors, roof=seed_roof, n_ar=n_ar, crossover_us=crossover_us, latency_labels=tagged, subject=bound["subject"],
                   model=seed_model, n_ar_field=f"collectives_per_token_tp{seed_tp}" if rule else "allreduces_per_token")
        out["lines"] = _seed_lines(seed_model, seed_profile, seed_tp, arch=arch, avg=avg, bound=bound, rule=rule, n_ar=n_ar,
                                   tagged=tagged, floors=floors, settings=settings, crossover_us=crossover_us)
    except ServebookError as exc:
        store.record_failure("seed roofline", exc)
        print(f"seed roofline not computed: {exc}")
    return out


def _seed_latencies(card: dict, seed_tp: int, prof: dict, seed_allreduce_us: float) -> tuple[list, list, dict | None]:
    """The all-reduce latencies the seed's communication floor is drawn at: ``(label, us, the reference grid's setting it
    was measured under or the engine whose latency it is)`` each, the same labels with their figures tagged, and the PCIe
    rule where the profile is a PCIe one. The label is stored plain in ``bench_roofline`` and shown tagged."""
    from ..findings import nccl as nccl_answer
    from ..paths import data_dir
    from ..profile.comm import pcie_rule
    from ..results import RunStore
    from ..stated import REFERENCE_NCCL_RUN, q

    rule = pcie_rule(card, seed_tp, prof) if seed_allreduce_us <= 0 else None
    if seed_allreduce_us > 0:
        latencies = [(f"{seed_allreduce_us:g} us, an assumption (the parameter `seed_allreduce_us`)", seed_allreduce_us, None)]
        tagged = [latencies[0][0]]
    elif rule is not None:   # a PCIe profile: chapter 06's rule, each engine's latency by the NCCL environment the seed ran it with
        latencies = [(f"{L['central_us']:.1f} us, {e} ({L['env']}; the middle of {L['low_us']:.2f} to {L['high_us']:.2f} us, "
                      "published eight-rank PCIe figures: the rule chapter 06 uses)", L["central_us"], e)
                     for e, L in rule["latencies"].items()]
        tagged = [f"{q('seed_pcie_us', L['central_us'], '.1f', of=e)} us, {e} ({L['env']}; the middle of "
                  f"{q('seed_pcie_us_low', L['low_us'], '.2f', of=e)} to {q('seed_pcie_us_high', L['high_us'], '.2f', of=e)} us, "
                  "published eight-rank PCIe figures: the rule chapter 06 uses)" for e, L in rule["latencies"].items()]
    else:
        ref_nccl = nccl_answer(RunStore(data_dir() / "runs" / REFERENCE_NCCL_RUN)) or {}
        where = [(ref_nccl.get("default_us"), "default", f"NCCL's defaults measured over NVLink on H200 x2 (`data/runs/{REFERENCE_NCCL_RUN}`)")]
        if ref_nccl.get("setting") not in (None, "default") and ref_nccl.get("best_us"):
            where.append((ref_nccl["best_us"], ref_nccl["setting"], f"`{ref_nccl['setting']}` measured there"))
        latencies = [(f"{us:.1f} us, {what}", us, setting) for us, setting, what in where if us]
        tagged = [f"{q('ref_allreduce_us', us, '.1f', of=setting)} us, {what}" for us, setting, what in where if us]
    return latencies, tagged, rule


def _seed_rows(store, reported: dict, rows: list, *, seed_model: str, seed_profile: str, seed_tp: int, bound: dict, prof: dict, seed_roof: dict,
               floors: list, settings: list, arch: dict, from_parameter: bool) -> None:
    """The seed's reported rates against the limits, one ``bench_roofline`` row each (and its ``bench_breakdown``,
    recorded once), appended to ``rows`` as each is made."""
    from .. import roofline

    for eng_name, tok_s in reported.items():
        # each engine's rate against its own floor (its latency under the NCCL environment the seed ran it with)
        own = next((i for i, st in enumerate(settings) if st == eng_name), 0)
        eng_roof, eng_label = (floors[own][1], floors[own][0]) if floors else (seed_roof, None)
        row = {"case": f"{seed_model} on {seed_tp}x {seed_profile} ({eng_name}, reported by the seed)", "measured_tok_s": float(tok_s),
               "roofline_tok_s": bound["tok_s"], "roofline_with_comm_tok_s": eng_roof["tok_s"],
               "pct_of_roofline": 100 * float(tok_s) / bound["tok_s"], "bytes_per_token": bound["bytes_per_token"],
               "bandwidth_tbs": prof["memory_bandwidth_tbs"], "t_mem_ms": eng_roof["t_mem_ms"], "t_comm_ms": eng_roof["t_comm_ms"],
               "tp": seed_tp, "allreduce_us": eng_roof["allreduce_us"], "allreduce_source": eng_label,
               "bytes_method": arch["method"],
               "source": "reported by the seed case" + ("" if from_parameter else " (data/reference/seed-case.json)")
                         + "; roofline from the card and the profile"}
        if not store.done("bench_roofline", case=row["case"], roofline_tok_s=row["roofline_tok_s"], t_comm_ms=row["t_comm_ms"]):
            store.append("bench_roofline", row)
            for part in roofline.time_breakdown(float(tok_s), eng_roof):
                store.append("bench_breakdown", {"label": row["case"], **part})
        rows.append(row)


def _seed_lines(seed_model: str, seed_profile: str, seed_tp: int, *, arch: dict, avg: dict, bound: dict, rule, n_ar: int, tagged: list,
                floors: list, settings: list, crossover_us: float) -> list[str]:
    """The seed case on paper in Markdown bullets, every figure tagged: recomputed from data/models, data/hardware and the
    reference grid (chapter 04's data/runs/h200x2-nccl)."""
    from ..stated import q

    sub = bound["subject"]

    def card(field: str, value, fmt: str) -> str:
        return q("card_fact", value, fmt, of=f"{seed_model} | {field}")

    def floor(setting, field: str, value, fmt: str) -> str:
        return q("seed_floor", value, fmt, of=f"{sub} | {setting} | {field}") if setting else format(value, fmt)

    return [
        f"- {seed_model}: {card('active_params_b', arch['active_params'] / 1e9, '.1f')}B active parameters, "
        f"{card('gb_per_token', arch['bytes_per_token'] / 1e9, '.1f')} GB read per token (the card's average "
        f"{card('avg_bytes_per_param', avg['bytes_per_param'], '')} B/param would say "
        f"{card('avg_gb_per_token', avg['bytes_per_token'] / 1e9, '.1f')} GB: it undercounts the BF16 attention and shared experts).",
        f"- Bandwidth alone: at most {q('card_roofline_tok_s', bound['tok_s'], ',.0f', of=sub)} tok/s "
        f"({floor('default', 'gb_per_token', bound['bytes_per_token'] / 1e9, '.1f')} GB per token over "
        f"{floor('default', 'gpus', seed_tp, 'd')} GPUs at {floor('default', 'bandwidth_tbs', bound['bandwidth_tbs'], '')} TB/s each; "
        f"`data/models/{seed_model}.json` x `data/hardware/{seed_profile}.json`).",
        *[f"- With the communication floor, {card(f'collectives_per_token_tp{seed_tp}' if rule else 'allreduces_per_token', n_ar, 'd')} "
          f"{'collectives per token (the count of table seed_collectives in the what-if book)' if rule else 'all-reduces per token'} at {label}: at most "
          f"{floor(st, 'tok_s', r['tok_s'], ',.0f')} tok/s ({floor(st, 't_comm_ms', r['t_comm_ms'], '.2f')} ms of all-reduce per "
          f"token beside {floor(st, 't_mem_ms', r['t_mem_ms'], '.2f')} ms of memory time)."
          for label, (_, r), st in zip(tagged, floors, settings)],
        f"- The two floors are equal at {floor(settings[0] if settings else None, 'crossover_us', crossover_us, '.1f')} us per "
        "all-reduce: above that latency, all-reduce is the larger part of the limit. The seed's GPUs talk over PCIe, whose "
        "latency only chapter 04 run on that host measures" + (" (the latencies above are other hosts' published figures, "
        "the same rule and count the what-if book's chapters 04 to 06 use)." if rule else "."),
    ]


def say_prediction_tok_s(store) -> list[str]:
    """The full-model predictions of ``prediction_check`` in tok/s (1000 / predicted ms per token), with the interval's
    ends, tagged; the measured rate beside it where the whole model ran. A model that does not fit one GPU
    (``profile.chapter.weights_need``) gets no rate: its prediction is one GPU's compute time, and the GPUs it needs."""
    from ..profile.chapter import not_on_one_gpu, weights_need
    from ..profile.tables import prediction_subject
    from ..stated import q

    lines, devices = [], [r.get("device") for r in store.rows("memory_bandwidth")]
    for p in store.rows("prediction_check"):
        if not p.get("predicted_ms"):
            continue
        subject = prediction_subject(p)
        lo, hi = p.get("low_ms"), p.get("high_ms")
        unit = f", recording unit `{p['unit']}`" if p.get("unit") and subject.endswith(f" | {p['unit']}") else ""
        head = f"- {p['card']} with {p['engine']} ({p['backend']}, {p.get('quant', 'bf16')}{unit})"
        need = None if p.get("measured_ms") else weights_need(p, devices)
        if need and need["gpus_to_hold"] > 1:   # one GPU's compute time of a model one GPU cannot hold: no rate
            lines.append(f"{head}: per-GPU compute time only, {q('predicted_ms', p['predicted_ms'], '.3f', of=subject)} "
                         "ms per token on one GPU with TP=1 and no all-reduce (predicted above from the two slices' profiles); "
                         + not_on_one_gpu(p, need) + ".")
            continue
        text = (f"{head}: predicted "
                f"{q('predicted_tok_s', 1e3 / p['predicted_ms'], ',.0f', of=subject)} tok/s single stream")
        if lo and hi:   # ends that round to one whole rate are given to a tenth
            f = ",.0f" if round(1e3 / hi) != round(1e3 / lo) else ",.1f"
            text += (f" (between {q('predicted_tok_s_low', 1e3 / hi, f, of=subject)} and "
                     f"{q('predicted_tok_s_high', 1e3 / lo, f, of=subject)})")
        text += (", on one GPU with TP=1 and no all-reduce, from the per-layer GPU time between the two slices' profiles with "
                 "the rest counted once")
        if p.get("measured_ms"):
            text += f"; measured {q('measured_full_tok_s', 1e3 / p['measured_ms'], ',.0f', of=subject)} tok/s"
        lines.append(text + ".")
    return lines + _two_predictions(store)


def _two_predictions(store) -> list[str]:
    """Per card and quantization predicted but not run whole (``prediction_check``): why the page's two predictions of
    it differ (the bytes rule of ``extrapolation`` and the slope rule above), and the GPUs its weights need, which
    neither prediction assumes (both: one GPU, TP=1, no all-reduce)."""
    from .. import roofline
    from ..stated import q

    bw = store.rows("memory_bandwidth")
    cases = [r["case"] for r in store.rows("bench_roofline") if r.get("source") == "measured here"]
    profile = roofline.gpu_profile_named(bw[-1].get("device") if bw else (cases[-1].rsplit(" on ", 1)[-1] if cases else None))
    lines = []
    if not store.rows("model_extrapolation"):  # no slice served in chapter 05: the slope rule is the page's one prediction
        return lines
    checked = any(p.get("measured_ms") for p in store.rows("prediction_check"))
    for card, quant in dict.fromkeys((p["card"], p.get("quant", "bf16")) for p in store.rows("prediction_check")
                                     if p.get("predicted_ms") and not p.get("measured_ms")):
        text = (f"- {card} ({quant}) is predicted twice on this page, by two methods and both for one GPU (TP=1, no all-reduce): "
                "the table under \"Against the roofline\" scales the whole served slice's time per token by the bytes the full model "
                "reads, so the slice's fixed per-token costs (LM head, embedding, sampling, host work) are charged again with "
                "every layer; the prediction above measures what one more layer costs (its GPU time, deeper slice minus shallower) "
                "and counts the fixed part once. The two differ by that: the bytes rule gives the longer time wherever fixed "
                "costs are a large share of the slice's time." + (" The slope rule is the one checked against whole models above."
                                                                 if checked else ""))
        try:
            need = roofline.weights_on_gpus(card, quant, profile) if profile else None
        except (ServebookError, KeyError, TypeError):
            need = None
        if need and need["gpus_to_hold"] > 1:
            of = f"{card} | {quant} | {profile}"
            text += (f" Neither is a configuration that runs: its weights, {q('full_model_weights', need['weights_gib'], ',.0f', of=of + ' | weights_gib')} GiB, "
                     f"need at least {q('full_model_weights', need['gpus_to_hold'], 'd', of=of + ' | gpus_to_hold')} GPUs of "
                     f"{q('full_model_weights', need['gpu_memory_gib'], 'g', of=of + ' | gpu_memory_gib')} GiB; tensor-parallel over "
                     "them, each GPU reads its share of the bytes per token and every layer adds all-reduces (chapter 04's floor), "
                     "which neither prediction includes.")
        lines.append(text)
    return lines


# -- the what-if page (a hardware profile, nothing measured) ---------------------------------------------------------------
def whatif_found(roof, facts: dict) -> list[str]:
    """"What we found" of a what-if run: each roofline line of chapter 05 (``roofline`` rows), the bandwidth-only limit
    tagged, and the seed case's gap where the profile is the seed's host."""
    from ..stated import q, seed_case, seed_sentence

    subject = f"{facts['model']} on {facts['gpus']}x {facts['profile']}"
    lines = []
    for _, r in roof.iterrows():
        limit = (q("card_roofline_tok_s", r["tok_s"], ",.0f", of=subject) if r["case"].endswith(": bandwidth only")
                 else q("plan_roofline_tok_s", r["tok_s"], ",.0f", of=r["case"]))
        lines.append(f"- `{r['case']}` (its row in table `roofline`): at most {limit} tok/s ({_plan(r, 'gb_per_token', '.1f')} GB per "
                     f"token over {_plan(r, 'tp', 'd')} GPUs at {_plan(r, 'bandwidth_tbs', '')} TB/s each, plus "
                     f"{_plan(r, 't_comm_ms', '.2f')} ms of all-reduce).")
    lines.append("- Predicted from data files, not measured: the benchmark commands above measure the real rate on the host.")
    seed = seed_case()
    if (facts["model"], facts["profile"], facts["gpus"]) == (seed["model"], seed["profile"], seed["tp"]):
        lines.append(f"- This hardware profile is the seed case's host. {seed_sentence()}")
    return lines


def _plan(r, field: str, fmt: str) -> str:
    """A figure of one ``roofline`` row of chapter 05's plan, tagged (``plan_roofline_fact``, recomputed from the row)."""
    from ..stated import q

    value = r["bytes_per_token"] / 1e9 if field == "gb_per_token" else (int(r[field]) if field == "tp" else r[field])
    return q("plan_roofline_fact", value, fmt, of=f"{r['case']} | {field}")


def whatif_check_yourself(roof, facts: dict) -> list[tuple[str, str]]:
    """The what-if page's questions, answered from its ``roofline`` rows and the data files they came from."""
    from ..stated import q

    bw_only = roof[roof["case"].str.endswith(": bandwidth only")]
    with_comm = roof[~roof["case"].str.endswith(": bandwidth only")]
    qa = []
    if len(bw_only):
        b = bw_only.iloc[0]
        qa.append(("What bounds single-stream decode on this hardware profile before any overhead, and from which files?",
                   f"{q('plan_roofline_tok_s', b['tok_s'], ',.0f', of=b['case'])} tok/s: {_plan(b, 'gb_per_token', '.1f')} GB read per token "
                   f"(data/models/{facts['model']}.json, counted layer by layer) over {_plan(b, 'tp', 'd')} GPUs at "
                   f"{_plan(b, 'bandwidth_tbs', '')} TB/s each (data/hardware/{facts['profile']}.json)."))
    if len(with_comm):
        lo, hi = with_comm.loc[with_comm["tok_s"].idxmin()], with_comm.loc[with_comm["tok_s"].idxmax()]
        lo_s, hi_s = (q("plan_roofline_tok_s", x["tok_s"], ",.0f", of=x["case"]) for x in (lo, hi))
        qa.append(("Why does this page give several limits, and which one will the real host reach?",
                   f"Each adds the all-reduce floor at one latency taken from other hosts (chapter 04's rows: on a PCIe profile each "
                   f"engine's own, by the NCCL environment the seed ran it with) ({lo_s} to {hi_s} tok/s); the profile's own "
                   "latency is unmeasured, so none of them is its limit. Chapter 04 on the real host gives the latency, chapter 05 there the "
                   "real rate: far below every line means the time goes to overhead, not to bytes or all-reduces."))
    return qa
