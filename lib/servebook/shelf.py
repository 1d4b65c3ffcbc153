"""Which rendered book is which: the reference book, the what-if books, and the earlier recordings it supersedes.

    role(Path("rendered/h200x1-live"))       # 'earlier'
    reference(Path("rendered"))              # 'h200x1-trust' (until rendered/h200x1-ref/index.html exists)
    superseded_by(Path("rendered/h200x1-live"))   # 'h200x1-trust'

A shelf is a folder of rendered books (each with ``index.html`` and ``run.json``), as ``rendered/``. The front page
(``servebook.frontpage``) orders it by role; each earlier book's pages carry a banner naming the book that superseded it
(``servebook.render.render_book``). A book rendered alone (``build/book``) has no shelf and no banner.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["REFERENCE_BOOKS", "books", "reference", "role", "superseded_by", "only_here"]

# The project's reference H200 recording, in order of preference: the first of these the shelf has rendered is the
# reference book (h200x1-ref is the reference recording; h200x1-trust, the recording with server starts counted and the
# decode path checked, stands in until it is rendered). An editorial choice, named here once.
REFERENCE_BOOKS = ("h200x1-ref", "h200x1-trust")


def books(shelf: Path) -> list[Path]:
    """The rendered books on ``shelf``: folders with an ``index.html`` and a ``run.json``, by name."""
    return sorted(p.parent for p in Path(shelf).glob("*/run.json") if (p.parent / "index.html").exists())


def _is_whatif(book: Path) -> bool:
    try:
        manifest = json.loads((book / "run.json").read_text()).get("manifest") or {}
    except (OSError, ValueError):
        return False
    return bool((manifest.get("parameters") or {}).get("profile"))


def reference(shelf: Path) -> str | None:
    """The reference book's name on ``shelf``: the first of ``REFERENCE_BOOKS`` it holds rendered, else None."""
    names = {b.name for b in books(shelf)}
    return next((n for n in REFERENCE_BOOKS if n in names), None)


def role(book: Path, whatif: bool | None = None) -> str:
    """``reference``, ``whatif`` or ``earlier`` for a book on its shelf (the folder it sits in); ``alone`` for a book whose
    shelf holds no reference book (``build/book``). ``whatif``: the book's own answer, where it is not rendered yet."""
    book = Path(book)
    if book.name == reference(book.parent) or book.name == _first_rendering(book):
        return "reference"
    if whatif if whatif is not None else _is_whatif(book):
        return "whatif"
    return "earlier" if reference(book.parent) else "alone"


def _first_rendering(book: Path) -> str | None:
    """The reference book's name where ``book``, not yet rendered on its shelf (its first rendering is under way), is
    the first of ``REFERENCE_BOOKS`` the shelf would then hold; else None."""
    if book in books(book.parent):
        return None
    names = {b.name for b in books(book.parent)} | {book.name}
    return next((n for n in REFERENCE_BOOKS if n in names), None)


def superseded_by(book: Path, whatif: bool | None = None) -> str | None:
    """The book that supersedes ``book`` on its shelf (the reference book), or None where none does."""
    book = Path(book)
    return reference(book.parent) if role(book, whatif) == "earlier" else None


def only_here(book: Path, chapters: set[str] | None = None) -> list[str]:
    """The chapters (``"04"``) ``book`` holds that the book superseding it does not render: their numbers are this
    recording's own, superseded by nothing (h200x2's NCCL grid, on a shelf whose reference book has one GPU).
    ``chapters``: the book's own, where its pages are not written yet; [] where nothing supersedes it."""
    book = Path(book)
    ref = superseded_by(book)
    if ref is None:
        return []
    mine = chapters if chapters is not None else {p.name[:2] for p in book.glob("0[1-6]_*.html")}
    theirs = {p.name[:2] for p in (book.parent / ref).glob("0[1-6]_*.html")}
    return sorted(set(mine) - theirs)
