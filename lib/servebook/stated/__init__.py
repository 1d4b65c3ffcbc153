"""The numbers the book states in prose, each tagged with the quantity it is, and the registry that recomputes them.

    from servebook.stated import q
    Markdown(f"single stream {q('single_tok_s', t['single_tok_s'], ',.1f', of=t['label'])} tok/s")
    #  -> single stream <span class="sb-q" data-q="single_tok_s" data-v="78.2416..." data-f=",.1f" data-of="...">78.2</span> tok/s
    expected(store, "single_tok_s", "transformers/default")   # the same quantity recomputed from the run's tables
    check_render("rendered/h200x2-live", QUANTITIES, answer_boxes=boxes)   # Report: every page against its tables and pages
    untagged_numbers(page_html)                                # numbers the page's prose states with no tag: make it []

One helper formats and tags a number (``q``), so a page can never show a figure other than the value it tags; one
registry (``QUANTITIES``) says how each quantity is computed from a run's tables (or, for a reference figure, from
its file in ``data/reference/``) and on which chapter pages it must appear; ``check_render`` reads every page of a
rendered book, groups what the pages state by quantity, and compares each with the recomputation and with the
other pages (``tests/test_stated.py`` runs it on every committed render). A page whose code never used ``q``
predates the tags: ``check_render`` reports it as such instead of checking it.

This package knows no chapter: each chapter declares its quantities beside the code that computes them
(``servebook.<chapter>.quantities``) and ``register``s them here; ``servebook.quantities``, above the chapters,
gathers them all and hands the whole registry to the check.

One job per module: ``text`` says what a page shows for a value, ``figures`` holds the reference figures and the
definitions the others share, ``registry`` says what a quantity is and holds those registered (``quantities``: the
reference figures of no chapter), ``tags`` writes and reads the tag (``q``, ``stated_on``), ``say`` writes the
statements two chapters share, ``check`` checks a rendered book, ``untagged`` finds the numbers a page's prose states
without a tag (the rule is in its docstring).
"""

from __future__ import annotations

from .check import Recompute, Report, answers, box_items, check_render, run_of
from .figures import REFERENCE_NCCL_RUN, card_roofline, reference, seed_case, selection_of, site_count
from .registry import QUANTITIES, Quantity, expected, pick, register
from .say import say_allreduce, say_backends, say_selection, say_throughput, seed_sentence
from .tags import Stated, q, stated_on
from .text import MISSING, code, code_locations, text_of
from .untagged import EXCEPTIONS, Untagged, untagged_numbers

__all__ = [
    "q", "text_of", "code", "code_locations", "seed_sentence", "Quantity", "QUANTITIES", "register", "pick", "Stated", "Report",
    "reference", "seed_case", "site_count", "selection_of",
    "card_roofline", "expected", "stated_on", "check_render", "answers", "box_items", "run_of", "MISSING", "REFERENCE_NCCL_RUN",
    "say_selection", "say_backends", "say_allreduce", "say_throughput", "Recompute", "untagged_numbers", "Untagged", "EXCEPTIONS",
]
