"""Which rendered book is which: the reference book, the what-if books, and the earlier recordings it supersedes.

    role(Path("rendered/h200x1-live"))       # 'earlier'
    reference(Path("rendered"))              # 'h200x1-trust' (h200x1-ref, rendered, is a run of profiles only)
    role(Path("rendered/h200x1-ref"))        # 'profiles'
    superseded_by(Path("rendered/h200x1-live"))   # 'h200x1-trust'

A shelf is a folder of rendered books (each with ``index.html`` and ``run.json``), as ``rendered/``. The front page
(``servebook.frontpage``) orders it by role; each earlier book's pages carry a banner naming the book that superseded it
(``servebook.render.render_book``). A book rendered alone (``build/book``) has no shelf and no banner.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["REFERENCE_BOOKS", "books", "reference", "role", "superseded_by", "only_here", "profiles_only", "profiles_manifest"]

# The project's reference H200 recording, in order of preference: the first of these the shelf has rendered that served
# configurations (not a run of profiles only) is the reference book. h200x1-ref is the reference recording of the
# decode-step profiles; while it holds profiles only (no served configuration another book measured: issue #39's backends
# units are not recorded yet) it is the shelf's profile run, and h200x1-trust, the recording with server starts counted and
# the decode path checked, is the reference book. An editorial choice, named here once.
REFERENCE_BOOKS = ("h200x1-ref", "h200x1-trust")


def books(shelf: Path) -> list[Path]:
    """The rendered books on ``shelf``: folders with an ``index.html`` and a ``run.json``, by name."""
    return sorted(p.parent for p in Path(shelf).glob("*/run.json") if (p.parent / "index.html").exists())


def _manifest(book: Path) -> dict | None:
    try:
        return json.loads((book / "run.json").read_text()).get("manifest") or {}
    except (OSError, ValueError):
        return None


def _is_whatif(book: Path) -> bool:
    return bool(((_manifest(book) or {}).get("parameters") or {}).get("profile"))


def profiles_only(book: Path) -> bool:
    """Whether a rendered book is a run of profiles only (``servebook profile run``), read from its ``run.json``."""
    m = _manifest(book)
    return m is not None and profiles_manifest(m)


def profiles_manifest(manifest: dict) -> bool:
    """Whether a run's manifest is a profile run's: no book parameters and no probe (``profile.book.profiles_only``'s
    rule)."""
    return "parameters" not in manifest and not manifest.get("probe")


def reference(shelf: Path) -> str | None:
    """The reference book's name on ``shelf``: the first of ``REFERENCE_BOOKS`` it holds rendered that is not a run of
    profiles only, else None."""
    names = {b.name for b in books(shelf) if not profiles_only(b)}
    return next((n for n in REFERENCE_BOOKS if n in names), None)


def role(book: Path, whatif: bool | None = None, profiles: bool | None = None) -> str:
    """``reference``, ``whatif``, ``profiles`` (a run of profiles only: it served no configuration, so it supersedes and
    is superseded by none) or ``earlier`` for a book on its shelf (the folder it sits in); ``alone`` for a book whose
    shelf holds no reference book (``build/book``). ``whatif``, ``profiles``: the book's own answers, where it is not
    rendered yet."""
    book = Path(book)
    if profiles if profiles is not None else profiles_only(book):
        return "profiles"
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
    names = {b.name for b in books(book.parent) if not profiles_only(b)} | {book.name}
    return next((n for n in REFERENCE_BOOKS if n in names), None)


def superseded_by(book: Path, whatif: bool | None = None, profiles: bool | None = None) -> str | None:
    """The book that supersedes ``book`` on its shelf (the reference book), or None where none does."""
    book = Path(book)
    return reference(book.parent) if role(book, whatif, profiles) == "earlier" else None


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
