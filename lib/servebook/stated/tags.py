"""The tag a stated number carries on a page: ``q`` writes it, ``stated_on`` reads it back.

    q("single_tok_s", 78.2416, ",.1f", of="transformers/default")
    #  -> <span class="sb-q" data-q="single_tok_s" data-v="78.2416" data-f=",.1f" data-of="transformers/default">78.2</span>
    stated_on(page_html, "05_benchmark_single_stream.html")   # [Stated(page, name, of, value, fmt, text), ...]
    unregistered({"05_benchmark_single_stream.html": page_html}, QUANTITIES)   # "" when every tag names a quantity
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from .text import plain, text_of

__all__ = ["q", "quoter", "Stated", "stated_on", "uses_tags", "unregistered"]

# The quantity names the registry knows, filled in by servebook.stated.registry once every chapter's are registered
# (``servebook.quantities`` gathers them: the CLI, the check and the tests do; a chapter's kernel does not). Empty until
# then: ``q`` checks nothing before the registry is whole. A chapter's names are checked all the same: the literal ones
# by tests/test_stated_names.py, every one a page shows when it is rendered (``unregistered``, called by render_book).
# This module imports nothing of the registry: the page code that tags numbers stays below the code that recomputes
# them, no import circle.
_KNOWN: set[str] = set()


# A tagged value is shown inside Markdown, which reads a recorded text's ``__init__`` as bold and ``a*b*`` as emphasis
# (h200x2-live's chapter 03 showed "transformers/init.py"): those characters are written as HTML character references,
# which every reader of the page (a browser, html.parser) turns back into the same text.
_MARKDOWN_INLINE = str.maketrans({"_": "&#95;", "*": "&#42;", "`": "&#96;"})


def q(name: str, value: Any, fmt: str = "", of: str | None = None, code: bool = False) -> str:
    """``value`` formatted with ``fmt`` and tagged as the quantity ``name`` (of ``of``), for a Markdown or HTML output.

    ``code=True`` shows it as inline code (a backend or setting name). A value that is None is shown as "n/a" and
    not tagged: the run did not give it. ``name`` must be a registered quantity (checked once the registry is whole).
    """
    if _KNOWN and name not in _KNOWN:
        raise KeyError(f"{name!r} is not a quantity servebook.stated knows; declare it beside the chapter that computes it "
                       "(servebook.<chapter>.quantities)")
    value = plain(value)
    shown = html.escape(text_of(value, fmt))
    if "__" in shown or "*" in shown or "`" in shown:  # Markdown would read them as emphasis or code (a single "_" in a name it leaves)
        shown = shown.translate(_MARKDOWN_INLINE)
    if value is None:
        return shown
    attrs = {"class": "sb-q", "data-q": name, "data-v": json.dumps(value), "data-f": fmt}
    if of is not None:
        attrs["data-of"] = str(of)
    span = "<span " + " ".join(f'{k}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items()) + f">{shown}</span>"
    return f"<code>{span}</code>" if code else span


def quoter(tagged: bool):
    """``q(name, value, fmt, of)``: a figure tagged as a stated quantity (:func:`q`) where ``tagged``, else as plain text
    (one sentence written for a page and for a terminal)."""
    def say(name, value, fmt="", of=None):
        return q(name, value, fmt, of=of) if tagged else text_of(value, fmt)
    return say


@dataclass
class Stated:
    """One tagged number on one page."""

    page: str
    name: str
    of: str | None
    value: Any
    fmt: str
    text: str

    def key(self) -> tuple[str, str | None]:
        return (self.name, self.of)

    def where(self) -> str:
        return f"{self.page} shows {self.text!r}"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[dict] = []
        self._open: list[dict | None] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span":
            item = {**a, "_text": ""} if "sb-q" in (a.get("class") or "").split() else None
            self._open.append(item)

    def handle_endtag(self, tag):
        if tag == "span" and self._open:
            item = self._open.pop()
            if item is not None:
                self.found.append(item)

    def handle_data(self, data):
        for item in self._open:
            if item is not None:
                item["_text"] += data


def stated_on(page_html: str, page: str = "") -> list[Stated]:
    """Every tagged number of one rendered page."""
    parser = _Tags()
    parser.feed(page_html)
    out = []
    for a in parser.found:
        try:
            value = json.loads(a.get("data-v", "null"))
        except json.JSONDecodeError:
            value = a.get("data-v")
        out.append(Stated(page=page, name=a.get("data-q") or "", of=a.get("data-of"), value=value, fmt=a.get("data-f") or "",
                          text=a["_text"]))
    return out


def uses_tags(page_html: str) -> bool:
    """Whether the page's code used the tagging helper (its folded code is in the page)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page_html))
    return "servebook.stated" in text or "import stated" in text


def unregistered(pages: dict[str, str], known) -> str:
    """What is wrong with the tags of rendered pages (``{page: html}``) whose names ``known`` (the whole registry) does
    not hold, in one line; "" when there is none. A chapter's kernel does not gather the registry, so ``q`` there
    refuses nothing: a name made at run time (``q(name, ...)``) is checked here, where the page is rendered."""
    stray = {page: sorted({s.name for s in stated_on(text, page)} - set(known)) for page, text in pages.items()}
    stray = {page: names for page, names in stray.items() if names}
    if not stray:
        return ""
    listed = "; ".join(f"{page}: {', '.join(map(repr, names))}" for page, names in stray.items())
    return (f"numbers tagged as quantities no chapter registers ({listed}): declare each beside the chapter that computes "
            "it (servebook.<chapter>.quantities) or correct the name the page's code gives servebook.stated.q")
