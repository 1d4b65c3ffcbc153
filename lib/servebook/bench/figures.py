"""Chapter 05's figures computed from a run's tables, and nothing else: what the page and the stated-number registry
(``servebook.stated``) both read. No page text here, so the registry can import it without an import circle.

    ceiling_tables(store)       # client_ceiling as recorded, and servebook's own rows of it
    sweep_parameters(store)     # per configuration: the levels the sweep ran, requests per level, why it stopped
    breakdowns(store)           # bench_breakdown per label, later rows superseding older ones
    server_start_at(store, "vllm", "2026-12-01T11:20:52+00:00")   # which recorded server start was serving then
    single_vs_c1(store)         # per configuration: its single stream beside its sweep's C=1 level, and what differs
    bandwidth_roofline(store)   # each roofline row against the datasheet and the measured read bandwidth, and the reference
    decode_tails(store)         # per configuration: the rule that timed its decode, and the wait after its last tokens
"""

from __future__ import annotations

__all__ = ["ceiling_tables", "sweep_parameters", "breakdowns", "server_start_at", "single_vs_c1", "C1_GAP", "bandwidth_roofline", "decode_tails"]


def ceiling_tables(store):
    """``client_ceiling`` as recorded, and servebook's own rows of it (the client every measurement uses)."""
    ceiling_all = store.table("client_ceiling")
    ceiling_df = ceiling_all[ceiling_all["client"].fillna("servebook") == "servebook"] if "client" in ceiling_all else ceiling_all
    return ceiling_all, ceiling_df


def _requests_of(row: dict) -> int | None:
    n = (row.get("ok") or 0) + (row.get("failed") or 0)
    return int(n) if n else None


def sweep_parameters(store) -> list[dict]:
    """Per configuration, the sweep as it ran (from ``bench_summary`` and ``bench_sweep_stops``, not the parameters
    cell): the levels, the requests sent per level and per unit of concurrency, whether a level hit its time budget, and
    why the sweep stopped: saturation (a ``bench_sweep_stops`` row), a time budget, or its last level (max concurrency)."""
    from .runs import current

    rows, _ = current(store.rows("bench_summary"))
    stops = store.rows("bench_sweep_stops")
    out = []
    for label in dict.fromkeys(r["label"] for r in rows if r.get("phase") == "sweep"):
        levels = sorted((r for r in rows if r.get("label") == label and r.get("phase") == "sweep"), key=lambda r: r["concurrency"])
        ran = [int(r["concurrency"]) for r in levels]
        per = sorted({_requests_of(r) // int(r["concurrency"]) for r in levels if _requests_of(r)})
        truncated = [int(r["concurrency"]) for r in levels if r.get("truncated")]
        warmed = bool(levels[-1].get("level_warmup"))  # a stop row belongs to the sweep of its method (levels warmed or not)
        stop = next((s for s in reversed(stops) if s.get("label") == label and s.get("levels_run") == ran
                     and bool(s.get("level_warmup")) == warmed), None)
        if stop:
            why, kind = _stop_words(levels, stop)
        elif truncated:
            why, kind = f"a level hit its time budget (C={', '.join(map(str, truncated))}): it started no new request after the budget", "time budget"
        else:
            why, kind = f"it ran every level up to C={ran[-1]}, its max concurrency, without a recorded stop", "max concurrency"
        out.append({"label": label, "levels": ", ".join(map(str, ran)), "last_level": ran[-1],
                    "requests_per_level_x_C": ", ".join(map(str, per)) or None,
                    "requests": ", ".join(str(_requests_of(r)) for r in levels), "warmed_levels": warmed,
                    "stopped_by": kind, "stopped_before": stop.get("stopped_before") if stop else None, "why": why})
    return out


def _stop_words(levels: list[dict], stop: dict) -> tuple[str, str]:
    """Why a sweep stopped early, read again from the levels it ran by the rule it is recorded with
    (:func:`.saturation.stop_words`: "saturation" where its last level held within ``SATURATION_GROWTH`` of the best
    before it, "first-token waits" where it held with its first tokens waiting, "throughput fell" where it fell further). A row recorded under an earlier rule that called the same
    levels otherwise says so after the words: the kind shown is this rule's, one word per sweep on every page."""
    from .saturation import recorded_kind, stop_words

    said = stop_words([(r["concurrency"], r.get("throughput_tok_s")) for r in levels], last=levels[-1] if levels else None)
    was = recorded_kind(stop)
    if said is None:
        return stop["reason"], was
    why, kind = said
    if was != kind:
        why += (f"; bench_sweep_stops recorded it as {was} when the sweep ran, by an earlier rule (the kind here is the "
                "one rule's, which the sweep now records too)")
    return why, kind


def breakdowns(store) -> list[tuple[str, list[dict]]]:
    """``bench_breakdown`` per label, a row computed again by a later execution superseding its older one."""
    rows = {}
    for r in store.rows("bench_breakdown"):
        rows[(r["label"], r["part"])] = r
    out: dict[str, list[dict]] = {}
    for (label, _), r in rows.items():
        out.setdefault(label, []).append(r)
    return list(out.items())


def _epoch(at) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(at)).timestamp()
    except ValueError:
        return None


def server_start_at(store, engine: str, at) -> tuple | None:
    """The server start of ``engine`` that was serving at ``at`` (a row's ``recorded_at``), from the launcher's
    registry (``servers.jsonl``: started and stopped events): ``(pid, started)``, or None where no recorded start, or
    more than one, covers that moment (the registry says nothing, or servers of that engine ran side by side)."""
    t = _epoch(at)
    if t is None:
        return None
    runs: dict = {}
    for e in store.rows("servers"):
        if e.get("engine") != engine or e.get("time") is None:
            continue
        if e.get("event") == "started":
            runs[(e.get("pid"), e["time"])] = None
        elif e.get("event") == "stopped":  # the latest start of that pid stopped before this event
            key = max((k for k in runs if k[0] == e.get("pid") and k[1] <= e["time"] and runs[k] is None), default=None,
                      key=lambda k: k[1])
            if key:
                runs[key] = e["time"]
    later = sorted(k[1] for k in runs)
    covering = []
    for (pid, t0), t1 in runs.items():
        # rows are stamped to the second; a start without a stop event ran until the next start of the engine at most
        end = t1 if t1 is not None else next((x for x in later if x > t0), None)
        if t0 - 1 <= t and (end is None or t <= end + 1):
            covering.append((pid, t0))
    return covering[0] if len(covering) == 1 else None


C1_GAP = 0.10  # single stream and the sweep's C=1 level more than this far apart, and outside the single's interval: flagged


def single_vs_c1(store) -> list[dict]:
    """Per configuration with both: the single-stream measurement of the server start the sweep ran on (start 0) beside
    the sweep's C=1 level, with what differs between the two (from the rows): the per-request decode rates and TPOT of
    each, the warm-up before each, how the requests were sent (one client call per request, or the level's requests
    back to back in one call), prompt and output tokens, and whether one recorded server start measured both
    (``server_start_at``). ``apart``: the C=1 level's per-user rate lies outside the single stream's 95% interval and
    more than ``C1_GAP`` from it."""
    import statistics

    from .runs import current, requests_of

    summary, requests = current(store.rows("bench_summary"), store.rows("bench_requests"))
    reqs = {id(row): qs for row, qs in requests_of(summary, requests)}
    warm = [q for q in requests if q.get("phase") == "warmup"]
    out = []
    for label in dict.fromkeys(r["label"] for r in summary if r.get("phase") == "sweep"):
        single = [r for r in summary if r["label"] == label and r.get("phase") == "single" and int(r.get("start") or 0) == 0
                  and r.get("decode_tok_s_mean")]
        c1 = [r for r in summary if r["label"] == label and r.get("phase") == "sweep" and r.get("concurrency") == 1
              and r.get("per_user_tok_s")]
        if not single or not c1:
            continue
        s, c = single[-1], c1[-1]
        sq = [q for q in reqs.get(id(s), []) if q.get("ok") and q.get("decode_tok_s")]
        cq = [q for q in reqs.get(id(c), []) if q.get("ok") and q.get("decode_tok_s")]
        sw = [q for q in warm if q.get("label") == label and q.get("ok") and q.get("decode_tok_s")
              and str(q.get("recorded_at") or "") <= str(s.get("recorded_at") or "") and q.get("warmup") == s.get("warmup")]
        sw = sw[-int(s.get("warmup") or 0):] if s.get("warmup") else []
        engine = s.get("engine") or label.split("/")[0]
        a, b = server_start_at(store, engine, s.get("recorded_at")), server_start_at(store, engine, c.get("recorded_at"))
        ci = s.get("decode_tok_s_ci95") or 0.0
        gap = c["per_user_tok_s"] / s["decode_tok_s_mean"] - 1

        def span(qs, field):
            xs = [float(q[field]) for q in qs if q.get(field) is not None]
            return (min(xs), max(xs)) if xs else (None, None)

        out.append({
            "label": label, "single_tok_s": s["decode_tok_s_mean"], "single_ci95": s.get("decode_tok_s_ci95"),
            "single_runs": s.get("runs"), "single_warmup": s.get("warmup"),
            "single_min": span(sq, "decode_tok_s")[0], "single_max": span(sq, "decode_tok_s")[1],
            "single_tpot_ms": 1e3 * statistics.median([q["tpot_s"] for q in sq if q.get("tpot_s")]) if sq else None,
            "warmup_min": span(sw, "decode_tok_s")[0], "warmup_max": span(sw, "decode_tok_s")[1],
            "c1_throughput_tok_s": c.get("throughput_tok_s"), "c1_user_tok_s": c["per_user_tok_s"], "c1_requests": len(cq),
            "c1_min": span(cq, "decode_tok_s")[0], "c1_max": span(cq, "decode_tok_s")[1],
            "c1_tpot_ms": 1e3 * statistics.median([q["tpot_s"] for q in cq if q.get("tpot_s")]) if cq else None,
            "c1_level_warmup": bool(c.get("level_warmup")), "gap_pct": 100 * gap,
            "same_tokens": ({q.get("prompt_tokens") for q in sq} == {q.get("prompt_tokens") for q in cq}
                            and {q.get("output_tokens") for q in sq} == {q.get("output_tokens") for q in cq}) if sq and cq else None,
            "prompt_tokens": ", ".join(map(str, sorted({q["prompt_tokens"] for q in sq + cq if q.get("prompt_tokens") is not None}))),
            "output_tokens": ", ".join(map(str, sorted({q["output_tokens"] for q in sq + cq if q.get("output_tokens") is not None}))),
            "same_start": (a == b) if a and b else None,
            "apart": abs(c["per_user_tok_s"] - s["decode_tok_s_mean"]) > ci and abs(gap) > C1_GAP,
        })
    return out


def bandwidth_roofline(store, rows=None) -> dict:
    """The roofline rows of this run (``bench_roofline``, source "measured here"; ``rows``: the ones the page shows,
    default the last of each case) against both bandwidths: the one each row was computed with (a GPU's datasheet) and
    the GPU's read bandwidth measured in this run (the last row of ``memory_bandwidth`` for that device), and that
    measurement against the reference of ``roofline.REFERENCE_GPU_READ``. Returns ``{"cases": {case: {...}}, "devices":
    {device: {...}}}``; a case without a measured bandwidth for its device has no ``read_*`` fields."""
    from ..roofline import REFERENCE_GPU_READ

    if rows is None:
        last = {}
        for r in store.rows("bench_roofline"):
            if r.get("source") == "measured here":
                last[r["case"]] = r
        rows = list(last.values())
    measured = {}
    for b in store.rows("memory_bandwidth"):
        if b.get("read_tbs"):
            measured[b.get("device")] = b
    devices, cases = {}, {}
    for dev, b in measured.items():
        ref = REFERENCE_GPU_READ.get(dev)
        devices[dev] = {"read_gbs": 1e3 * b["read_tbs"], "size_gib": b.get("size_gib"), "method": b.get("method"),
                        **({"reference_read_gbs": 1e3 * ref["read_tbs"], "reference_size_gib": ref["size_gib"],
                            "reference_where": ref["where"], "below_reference_pct": 100 * (1 - b["read_tbs"] / ref["read_tbs"])}
                           if ref else {})}
    for r in rows:
        dev = str(r["case"]).rsplit(" on ", 1)[-1]
        row = {"device": dev, "datasheet_gbs": 1e3 * r["bandwidth_tbs"], "datasheet_roofline_tok_s": r["roofline_tok_s"],
               "datasheet_pct": 100 * r["measured_tok_s"] / r["roofline_tok_s"], "measured_tok_s": r["measured_tok_s"],
               "from_datasheet": "datasheet" in str(r.get("bandwidth_source") or "")}
        b = measured.get(dev)
        if b is not None and row["from_datasheet"]:
            roof = r["roofline_tok_s"] * b["read_tbs"] / r["bandwidth_tbs"]  # the same bytes per token at the measured bandwidth
            row.update(read_gbs=1e3 * b["read_tbs"], read_roofline_tok_s=roof, read_pct=100 * r["measured_tok_s"] / roof,
                       read_share_of_datasheet=b["read_tbs"] / r["bandwidth_tbs"])
        cases[r["case"]] = row
    return {"cases": cases, "devices": devices}


def decode_tails(store) -> list[dict]:
    """Per configuration with a standing single-stream rate: the rules that timed its decode (``rules``, sorted:
    ``sse.timed_to`` of its standing rows with a rate, single stream and sweep), and over its timed single-stream requests
    the wait from the last token's read to the stream's end (``tail_ms``, median) and what that wait moves the rate by
    (``rate_pct``, median of tail / decode interval: the rate timed to the last token over the one timed to the stream's
    end, - 1). A row of the last-token rule recorded the wait (``tail_s``); a row of the earlier rule gives it as
    e2e - TTFT - the sum of its chunk gaps, which run from the first token's read to the last token's."""
    import statistics

    from .runs import current
    from .sse import timed_to

    summary, requests = current(store.rows("bench_summary"), store.rows("bench_requests"))
    rated = [r for r in summary if r.get("decode_tok_s_mean") is not None or r.get("per_user_tok_s") is not None]
    out = []
    for label in dict.fromkeys(r["label"] for r in rated if r.get("phase") == "single"):
        tails, rates = [], []
        for q in requests:
            gaps = q.get("chunk_gaps_ms") or []
            if (q.get("label") != label or q.get("phase") != "single" or not q.get("ok") or not q.get("decode_tok_s") or not gaps
                    or q.get("e2e_s") is None or q.get("ttft_s") is None):
                continue
            decode_s = sum(gaps) / 1e3
            tail = q["tail_s"] if q.get("tail_s") is not None else max(0.0, q["e2e_s"] - q["ttft_s"] - decode_s)
            tails.append(tail)
            rates.append(tail / decode_s if decode_s > 0 else None)
        rates = [x for x in rates if x is not None]
        out.append({"label": label, "rules": sorted({timed_to(r) for r in rated if r.get("label") == label}),
                    "tail_ms": 1e3 * statistics.median(tails) if tails else None,
                    "rate_pct": 100 * statistics.median(rates) if rates else None, "requests": len(tails)})
    return out
