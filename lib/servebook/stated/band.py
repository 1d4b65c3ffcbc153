"""The sweep's one band, on the ground: where a concurrency sweep records why it stopped (``bench.saturation``) and where
a rendered page's words are checked against its own levels (``stated.wording``) read a level as grown, held or fallen
by the same rule.

    grew(1000.0, best=900.0)          # False: not 10% over the best level before it
    fell(773.4, [483.4, 911.6])       # True: more than 10% below the best level before it
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["SATURATION_GROWTH", "grew", "fell"]

# One band, both ways. A level *grew* when it beats the best level before it by more than this share, and *fell* when it
# lies more than this share below it; in between it *held* (flat). Why one band: a sweep level is one batch of requests
# with no interval of its own, so the difference taken as "the same throughput" going up must be the one taken as the
# same going down (a rule that calls +9% flat and -15% flat, or -40% flat, says saturation of a server whose throughput
# fell). Why 10%: a convention, not a measured noise band; the recorded sweeps that held moved under 2% (h200x1-book
# 96.4 -> 97.9 tok/s, h200x1-live vLLM 693.7 -> 697.1), the falls recorded were 15% to 70% (h200x1-trust, h200x1-compile).
SATURATION_GROWTH = 0.10


def grew(throughput: float | None, best: float) -> bool:
    """Whether a level's throughput beats ``best`` (the best level before it) by more than ``SATURATION_GROWTH``."""
    return throughput is not None and throughput > best * (1 + SATURATION_GROWTH)


def fell(throughput: float | None, lower: Iterable[float | None]) -> bool:
    """Whether a level's throughput lies more than ``SATURATION_GROWTH`` below the best of ``lower`` (the levels before
    it): a fall, which a saturated server does not show (it holds its throughput and queues each request a little)."""
    best = max([x for x in lower if x is not None] or [0])
    return throughput is not None and throughput < (1 - SATURATION_GROWTH) * best
