"""The whole stated-number registry: every chapter's quantities gathered, and the checks that need them all.

Each chapter declares the quantities its pages state beside the code that computes them (``probe/quantities.py``,
``selection/``, ``backends/``, ``nccl/``, ``bench/``, ``profile/``, ``findings/``; ``stated/quantities.py`` the
reference figures of no chapter) and registers them into ``servebook.stated.registry``, which knows no chapter. This
module, above the chapters, imports every one of them and says the registry is whole: from then on ``q`` refuses a name
none of them recomputes (the CLI, the render and the tests import it; a chapter's kernel does not: the names its code
states literally are checked by tests/test_stated_names.py, the others when its page is rendered).

    QUANTITIES["single_tok_s"].compute(store)      # {label: tok/s}
    expected(store, "single_tok_s", "transformers/default")
    check_render("rendered/h200x2-live")           # every page against its run's tables and the other pages
    recompute(store).problems(stated_number)       # the run's quantities, each computed once: [] when it agrees
"""

from __future__ import annotations

from pathlib import Path

from .backends import quantities as _backends  # noqa: F401  (each chapter's registers itself on import)
from .bench import quantities as _bench  # noqa: F401
from .findings import quantities as _findings  # noqa: F401
from .findings.boxes import answer_boxes
from .nccl import quantities as _nccl  # noqa: F401
from .probe import quantities as _probe  # noqa: F401
from .profile import quantities as _profile  # noqa: F401
from .selection import quantities as _selection  # noqa: F401
from .stated import check
from .stated import quantities as _reference  # noqa: F401
from .stated.registry import Quantity, expected, gather, pick

__all__ = ["QUANTITIES", "Quantity", "expected", "pick", "recompute", "check_render", "answers"]

QUANTITIES: dict[str, Quantity] = gather()


def recompute(store) -> check.Recompute:
    """``servebook.stated.Recompute``: the run's quantities, each computed once from its tables, against the whole registry."""
    return check.Recompute(store, QUANTITIES)


def answers(store) -> dict[str, list[str] | None]:
    """The box "This run, in short" each chapter's page would show if rendered now (``servebook.findings.boxes``)."""
    return check.answers(store, answer_boxes)


def check_render(render: str | Path, run: str | Path | None = None, boxes: bool = True) -> check.Report:
    """``servebook.stated.check_render`` with the whole registry and chapter 06's answer boxes."""
    return check.check_render(render, QUANTITIES, run, answer_boxes if boxes else None)
