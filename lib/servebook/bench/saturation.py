"""The concurrency sweep's stop, by one rule: where the sweep records why it stopped (``runs.concurrency_sweep``), where
a page reads it again from the levels (``figures.sweep_parameters``) and where levels whose throughput fell are listed
(``runs.sweep_stalls``, ``runs.remeasured``).

    grew(1000.0, best=900.0)                              # False: not 10% over the best level before it
    fell(773.4, [483.4, 911.6])                           # True: more than 10% below the best level before it
    stop_words([(1, 483.4), (2, 911.6), (4, 773.4)])      # ("throughput fell 15% from its best, ...", "throughput fell")
"""

from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["SATURATION_GROWTH", "grew", "fell", "stop_words", "recorded_kind"]

# One band, both ways. A level *grew* when it beats the best level before it by more than this share, and *fell* when it
# lies more than this share below it; in between it *held* (flat). Why one band: a sweep level is one batch of requests
# with no interval of its own, so the difference taken as "the same throughput" going up must be the one taken as the
# same going down (a rule that calls +9% flat and -15% flat, or -40% flat, says saturation of a server whose throughput
# fell). Why 10%: a convention, not a measured noise band; the recorded sweeps that held moved under 2% (h200x1-book
# 96.4 -> 97.9 tok/s, h200x1-live vLLM 693.7 -> 697.1), the falls recorded were 15% to 70% (h200x1-trust, h200x1-compile).
SATURATION_GROWTH = 0.10

SATURATION = "saturation"
FELL = "throughput fell"


def grew(throughput: float | None, best: float) -> bool:
    """Whether a level's throughput beats ``best`` (the best level before it) by more than ``SATURATION_GROWTH``."""
    return throughput is not None and throughput > best * (1 + SATURATION_GROWTH)


def fell(throughput: float | None, lower: Iterable[float | None]) -> bool:
    """Whether a level's throughput lies more than ``SATURATION_GROWTH`` below the best of ``lower`` (the levels before
    it): a fall, which a saturated server does not show (it holds its throughput and queues each request a little)."""
    best = max([x for x in lower if x is not None] or [0])
    return throughput is not None and throughput < (1 - SATURATION_GROWTH) * best


def stop_words(levels: Sequence[tuple[int, float | None]]) -> tuple[str, str] | None:
    """Why a sweep that stopped early stopped, from its levels ``[(concurrency, throughput tok/s), ...]`` in the order
    run: ``(words, kind)``, kind "throughput fell" where its last level fell (:func:`fell`) from the best before it,
    else "saturation" (it held, without growing); where its last levels served no request, "throughput fell" with words that
    say so. None with fewer than two levels with a throughput."""
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
    (c_last, last), (c_best, best) = thr[-1], max(thr[:-1], key=lambda x: x[1])
    if fell(last, [best]):
        return (f"throughput fell {1 - last / best:.0%} from its best, {best:,.1f} tok/s at C={c_best}, to {last:,.1f} at "
                f"C={c_last}: not a saturation point (a saturated server holds its throughput; a stall or failing requests, "
                "see the level's slowest first token)", FELL)
    return (f"throughput at C={c_last} ({last:,.1f} tok/s) stayed within {SATURATION_GROWTH:.0%} of its best, {best:,.1f} at "
            f"C={c_best}, without beating it by {SATURATION_GROWTH:.0%}: saturated", SATURATION)


def recorded_kind(stop: dict) -> str:
    """The kind a ``bench_sweep_stops`` row recorded: its ``stopped_by``; a row written before the field (an earlier
    rule, whose ``reason`` ends in "saturated" where it called the stop saturation) is read from its reason."""
    if stop.get("stopped_by"):
        return stop["stopped_by"]
    return SATURATION if str(stop.get("reason") or "").rstrip().endswith("saturated") else FELL
