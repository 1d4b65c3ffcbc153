"""Contradictions a rendered book can hold without any single number being wrong: the same tagged quantity with two
values on two pages, a status and its opposite for the same row, text cut off mid-word (in prose, tables, failure
listings and code excerpts), counts that disagree, one claim stated both as a finding and as a hypothesis (or "measured
again" and "not measured again" of one thing), a sweep's stop called saturation against its own levels, one quantity
in two units in one sentence, and the seed's flashinfer launch ranked without what was measured of it (issue #41).

    found = contradictions("rendered/h200x2-live")      # [Contradiction(kind, page, text), ...]
    contradictions({"a.html": page_a, "b.html": page_b}) # pages given as HTML text (a test's fake pages)
    visible(page_html)                                  # what a reader sees: markdown and outputs, not the code cells

Only what a reader sees is read: the code cells' source (``jp-InputArea``) is left out, outputs and prose are kept.
``check_render`` (``servebook.stated.check``) compares tagged numbers with the run's tables; this module needs no
run, only the pages, so it also reads the book's own index and the front page.
"""

from __future__ import annotations

import re
from pathlib import Path

from .reading import Contradiction, Visible, visible
from .tags import stated_on
from .text import cut_word
from .wording import CHECKS, across_books

__all__ = ["Contradiction", "Visible", "visible", "contradictions", "across_books", "KINDS"]

KINDS = ("tagged value", "status", "cut off", "count", *CHECKS)  # the four read here, then every class of wording.CHECKS


# -- the classes ---------------------------------------------------------------------------------------------------
def _tagged(pages: dict[str, str]) -> list[Contradiction]:
    """One tagged quantity (``data-q`` of ``data-of``), two values, on the pages of one book (the index included)."""
    from .check import _same

    groups: dict[tuple, list] = {}
    for page, text in pages.items():
        for s in stated_on(text, page):
            groups.setdefault(s.key(), []).append(s)
    out = []
    for (name, of), items in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        values: list = []
        for s in items:
            if not any(_same(s.value, v) for v in values):
                values.append(s.value)
        if len(values) > 1:
            where = sorted({s.page for s in items})
            out.append(Contradiction("tagged value", " | ".join(where), f"{name}[{of}]: "
                                     + "; ".join(f"{s.page} shows {s.text!r}" for s in items)))
    return out


# Words a status cell holds, with their opposites. A cell is read whole (lower case, stripped).
_POSITIVE = {"ok": "ok", "true": "true", "supported": "supported", "agrees": "agrees", "yes": "yes", "passed": "passed",
             "confirmed": "confirmed", "loaded": "loaded"}
_NEGATIVE = {"failed": "ok", "error": "ok", "crashed": "ok", "refused": "ok", "rejected": "ok", "no rate": "ok", "false": "true",
             "not supported": "supported", "disagrees": "agrees", "mismatch": "agrees", "no": "yes", "overridden": "confirmed"}
_STATUS_COLS = {"outcome", "status", "ok", "change_supported", "verdict", "resolved", "sum_ok", "within_interval", "supported",
                "port_free_after", "result"}
# Columns that name what a row is about (an index column, blank header, is not one of them).
_IDENT_COLS = {"engine", "attention", "mode", "label", "setting", "case", "helper", "backend", "version", "path", "card", "quant",
               "phase", "concurrency", "batch", "bytes", "step", "model", "gpu"}


def _polarity(cell: str) -> str | None:
    """("+" or "-") + the status it asserts, for a status cell; None for anything else."""
    c = cell.strip().lower()
    if c in _POSITIVE:
        return "+" + _POSITIVE[c]
    if c in _NEGATIVE:
        return "-" + _NEGATIVE[c]
    return None


def _rows(pages: dict[str, str], seen: dict[str, Visible]) -> list[tuple[str, dict[str, str]]]:
    out = []
    for page in pages:
        for header, rows in seen[page].tables:
            names = [h.strip().lower() for h in header]
            for r in rows:
                if len(r) == len(names):
                    out.append((page, dict(zip(names, r))))
    return out


def _status(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """The same row (the same values in every identifying column: engine, attention, mode, setting ...) with a status
    and its opposite in the same status column, on one page or two; and one row whose status cell says ok while its
    error cell holds an error."""
    out, first = [], {}
    for page, row in _rows(pages, seen):
        ident = tuple(sorted((k, v) for k, v in row.items() if k in _IDENT_COLS and v not in ("", "NaN", "None")))
        for col, cell in row.items():
            if col not in _STATUS_COLS or ident == () or len(ident) < 1:
                continue
            pol = _polarity(cell)
            if pol is None:
                continue
            key = (ident, col)
            if key in first:
                (p0, pol0, cell0) = first[key]
                if pol0[1:] == pol[1:] and pol0[0] != pol[0]:
                    what = ", ".join(f"{k}={v}" for k, v in ident)
                    out.append(Contradiction("status", p0 if p0 == page else f"{p0} | {page}",
                                             f"row ({what}): {col} is {cell0!r} on {p0} and {cell!r} on {page}"))
            else:
                first[key] = (page, pol, cell)
        err = row.get("error", "")
        for col in ("outcome", "status"):
            if _polarity(row.get(col, "")) == "+ok" and err.strip() and err.strip() not in ("NaN", "None", "none", "[]", "-"):
                what = ", ".join(f"{k}={v}" for k, v in ident)
                out.append(Contradiction("status", page, f"row ({what}): {col} is {row[col]!r} but its error reads {err[:120]!r}"))
    return sorted(set(out), key=str)


_CUT = re.compile(r"\w(?:\.\.\.|…)(?=$|[\s|,;:)\]'\"])")
_CUT_TOKEN = re.compile(r"(\b\d{4}-\d{2}-\d|\b\d{4}-\d|\d{4}-\d{2}-\d{2}T\d{1,2}(:\d)?|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d)$")


def _cut(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """Text cut off mid-word: a word with "..." glued to it (a table cell pandas shortened, a string sliced for
    display), or a block or table cell that ends inside a date or a time (``Reconstructed 2026-12-0``)."""
    out = []
    for page in pages:
        v = seen[page]
        cells = [c for _, rows in v.tables for r in rows for c in r] + [h for h, _ in v.tables for h in h]
        hits: dict[str, None] = {}
        for text in v.blocks + cells:
            for m in _CUT.finditer(text):
                hits.setdefault(text[max(0, m.start() - 40):m.end()].strip(), None)
            m = _CUT_TOKEN.search(text)
            if m:
                hits.setdefault(text[max(0, m.start() - 60):].strip(), None)
        texts = v.blocks + cells
        for text in texts:
            h = _cut_listing(text, texts)
            if h:
                hits.setdefault(h, None)
        for h in hits:
            out.append(Contradiction("cut off", page, h))
    return out


def _cut_listing(text: str, texts: list[str]) -> str | None:
    """A failure listing or code excerpt cut inside a word with no mark: it ends on a word inside an unclosed bracket
    (``['KimiK25ForCondi``), or it ends (starts) on a word the same page shows continuing elsewhere (``This usuall``
    where ``This usually`` is shown; ``eturn future.result()`` where ``return future.result()`` is)."""
    t = text.rstrip()
    if len(t) < 24 or t.endswith(("...", "…", "[...]")):
        return None
    if cut_word(t):
        return t[-60:]
    if re.search(r"[A-Za-z_]{4,}$", t):
        tail = t[-20:]
        # continued by letters elsewhere: cut; by a number alone (unit ``h200x1-ref-backends`` beside ``...-backends2``):
        # another name of a numbered family, not a cut
        if any(re.search(re.escape(tail) + r"(?!\d+\b)\w", o) for o in texts if o is not text and len(o) > len(t) // 2):
            return t[-60:]
    for start in re.finditer(r"(?:^|: )([a-z]{4,}[^\n]{16,40})", t):
        head = start.group(1)
        if any(re.search(r"[A-Za-z]" + re.escape(head), o) for o in texts if o is not text):
            return t[max(0, start.start(1) - 20):start.start(1) + 40]
    return None


def _counts(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """Counts that disagree between chapters: a summary table's ``tried`` per engine (chapter 06's "fastest correct
    backend") against the rows the chapter that tried them lists for that engine (chapter 03's table of forced
    backends: one row per start, columns engine, attention, outcome)."""
    out = []
    rows = _rows(pages, seen)
    listed: dict[str, dict[str, int]] = {}  # page -> engine -> rows
    for page, header_rows in ((p, seen[p].tables) for p in pages):
        for header, body in header_rows:
            names = [h.strip().lower() for h in header]
            if {"engine", "attention", "outcome"} <= set(names) and len(body) < 60:  # pandas shows all rows below 60
                per: dict[str, int] = {}
                for r in body:
                    if len(r) == len(names):
                        e = dict(zip(names, r))["engine"]
                        per[e] = per.get(e, 0) + 1
                if per and len(per) >= len(listed.get(page, {})):
                    listed[page] = per
    for page, row in rows:
        if "tried" not in row or "engine" not in row:
            continue
        try:
            tried = int(float(row["tried"]))
        except ValueError:
            continue
        for p, per in listed.items():
            if row["engine"] in per and per[row["engine"]] != tried:
                out.append(Contradiction("count", f"{page} | {p}", f"{row['engine']}: {page} says tried {tried}, "
                                         f"{p} lists {per[row['engine']]} starts"))
    return out


def contradictions(book: str | Path | dict[str, str], kinds: tuple[str, ...] = KINDS) -> list[Contradiction]:
    """Every contradiction of ``kinds`` in one book: a rendered book's directory (its ``*.html`` pages, the index
    included), or ``{page name: html}``."""
    if not isinstance(book, dict):
        book = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(book).glob("*.html"))}
    seen = {page: visible(text) for page, text in book.items()}
    out: list[Contradiction] = []
    if "tagged value" in kinds:
        out += _tagged(book)
    if "status" in kinds:
        out += _status(book, seen)
    if "cut off" in kinds:
        out += _cut(book, seen)
    if "count" in kinds:
        out += _counts(book, seen)
    for kind, check in CHECKS.items():
        if kind in kinds:
            out += check(book, seen)
    return out
