"""The concurrency sweep's stop, by one rule (the band of ``stated.band``: a level grew, held or fell by 10%): where the
sweep records why it stopped (``runs.concurrency_sweep``), where a page reads it again from the levels
(``figures.sweep_parameters``) and where levels whose throughput fell are listed (:func:`sweep_stalls`, ``runs.remeasured``).

    grew(1000.0, best=900.0)                              # False: not 10% over the best level before it
    fell(773.4, [483.4, 911.6])                           # True: more than 10% below the best level before it
    stop_words([(1, 483.4), (2, 911.6), (4, 773.4)])      # ("throughput fell 15% from its best, ...", "throughput fell")
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..stated.band import SATURATION_GROWTH, fell, grew  # the band's one home: the page check (stated.wording) reads it too

__all__ = ["SATURATION_GROWTH", "grew", "fell", "stop_words", "recorded_kind", "sweep_stalls", "waits_limit"]

SATURATION = "saturation"
FELL = "throughput fell"
WAITS = "first-token waits"

# A level held back by first-token waits, not by decode: its slowest first token (server side, p99) took over WAIT_S
# and over WAIT_RATIO x its median, and the level's throughput is under USERS_SHARE of C users at the per-user decode
# rate. Conventions of this page, not measured bands: a queue that holds a few requests back for a second while the
# others decode at full rate (h200x1-live vLLM C=4: p99 1.07 s against a 28 ms median, 697 tok/s against 4 x 354).
WAIT_S, WAIT_RATIO, USERS_SHARE = 0.5, 10.0, 0.6


def _number(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def waits_limit(level: dict) -> bool:
    """Whether first-token waits, not decode, limit a sweep level (a ``bench_summary`` row): see ``WAIT_S``."""
    p50, p99 = _number(level.get("ttft_server_s_p50")), _number(level.get("ttft_server_s_p99"))
    user, thr, c = _number(level.get("per_user_tok_s")), _number(level.get("throughput_tok_s")), _number(level.get("concurrency"))
    if None in (p50, p99, user, thr, c):
        return False
    return p99 > WAIT_S and p99 > WAIT_RATIO * p50 and thr < USERS_SHARE * c * user


def stop_words(levels: Sequence[tuple[int, float | None]], last: dict | None = None) -> tuple[str, str] | None:
    """Why a sweep that stopped early stopped, from its levels ``[(concurrency, throughput tok/s), ...]`` in the order
    run: ``(words, kind)``, kind "throughput fell" where its last level fell (:func:`fell`) from the best before it,
    else "saturation" (it held, without growing), or "first-token waits" where it held but ``last`` (its last level's
    ``bench_summary`` row) shows first-token waits, not decode, limiting it (:func:`waits_limit`); where its last levels
    served no request, "throughput fell" with words that say so. None with fewer than two levels with a throughput."""
    thr = [(int(c), float(t)) for c, t in levels if t is not None]
    if len(thr) < 2:
        return None
    failed = []   # the last levels, where no request succeeded (no throughput): they, not the levels before, ended it
    for c, t in reversed(levels):
        if t is not None:
            break
        failed.insert(0, int(c))
    if failed:
        return (f"C={', '.join(map(str, failed))} served no request successfully (no throughput) after "
                f"{max(t for _, t in thr):,.1f} tok/s at best: the sweep stopped on failing requests, not saturation", FELL)
    (c_last, last_tok), (c_best, best) = thr[-1], max(thr[:-1], key=lambda x: x[1])
    if fell(last_tok, [best]):
        return (f"throughput fell {1 - last_tok / best:.0%} from its best, {best:,.1f} tok/s at C={c_best}, to {last_tok:,.1f} at "
                f"C={c_last}: not a saturation point (a saturated server holds its throughput; a stall or failing requests, "
                "see the level's slowest first token)", FELL)
    held = (f"throughput at C={c_last} ({last_tok:,.1f} tok/s) stayed within {SATURATION_GROWTH:.0%} of its best, {best:,.1f} at "
            f"C={c_best}, without beating it by {SATURATION_GROWTH:.0%}")
    if last is not None and waits_limit(last):
        return (held + f", while a request waited up to {float(last['ttft_server_s_p99']):.2f} s for its first token (median "
                f"{float(last['ttft_server_s_p50']) * 1e3:.0f} ms) and each user decoded at {float(last['per_user_tok_s']):,.0f} "
                "tok/s: first-token waits, not decode, held it, so it is not a saturation point", WAITS)
    return held + ": saturated", SATURATION


def recorded_kind(stop: dict) -> str:
    """The kind a ``bench_sweep_stops`` row recorded: its ``stopped_by``; a row written before the field (an earlier
    rule, whose ``reason`` ends in "saturated" where it called the stop saturation) is read from its reason."""
    if stop.get("stopped_by"):
        return stop["stopped_by"]
    return SATURATION if str(stop.get("reason") or "").rstrip().endswith("saturated") else FELL


def sweep_stalls(summary: Iterable[dict], requests: Iterable[dict], ratio: float = 5.0) -> list[dict]:
    """Sweep levels whose throughput fell below the best level before them (:func:`fell`, the rule the
    sweep's stop is classified by), with their first tokens next to
    that level's. ``stalled`` when the level's slowest first token took over ``2 x ratio`` x its median (one request
    stuck) or its median over ``ratio`` x the best level's (every request waited): a saturated server queues each
    request a little and holds its throughput, so a fall like this asks for another cause. Rows: label,
    concurrency, throughput_tok_s, best_before_tok_s, best_before_concurrency, ttft_median_s, ttft_max_s,
    ttft_median_best_s, stalled."""
    by_level: dict = {}
    for r in requests:
        if r.get("phase") == "sweep" and r.get("ok") and r.get("ttft_s") is not None:
            by_level.setdefault((r.get("label"), r.get("concurrency")), []).append(float(r["ttft_s"]))

    def median(key):
        t = sorted(by_level.get(key, []))
        return (t[len(t) // 2], t[-1]) if t else (None, None)
    out, best = [], {}
    for s in sorted((s for s in summary if s.get("phase") == "sweep"), key=lambda s: (str(s.get("label")), s.get("concurrency") or 0)):
        lab, thr = s.get("label"), s.get("throughput_tok_s")
        if thr is None:
            continue
        b = best.get(lab)
        if b and fell(thr, [b[0]]):
            med, top = median((lab, s.get("concurrency")))
            bmed, _ = median((lab, b[1]))
            out.append({"label": lab, "concurrency": s.get("concurrency"), "throughput_tok_s": thr, "best_before_tok_s": b[0],
                        "best_before_concurrency": b[1], "ttft_median_s": med, "ttft_max_s": top, "ttft_median_best_s": bmed,
                        "stalled": bool(med and ((top > max(1.0, 2 * ratio * med)) or (bmed and med > ratio * bmed)))})
        if not b or thr > b[0]:
            best[lab] = (thr, s.get("concurrency"))
    return out
