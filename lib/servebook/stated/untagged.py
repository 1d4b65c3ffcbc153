"""Numbers a page states in prose without the tag that lets ``check_render`` recompute them.

    untagged_numbers(page_html)          # [Untagged(number='429.5', context='... TRITON_MLA 429.5 tok/s ...'), ...]
    untagged_numbers(page_html, exceptions=())   # the same without the book's list of numbers that need no tag

The rule, one place (``tests/test_stated.py`` applies it to every committed page):

* **Read**: prose, i.e. what a page renders from Markdown: its Markdown cells and the Markdown outputs of its code
  cells (``data-mime-type="text/markdown"``).
* **Not read**: code (code cells, ``<pre>`` and inline ``<code>``: commands, flags, file:line, identifiers); tables
  (``<table>``: a table shows a stored table's rows, and ``servebook.stated.consistency`` reads tables); plain-text
  outputs (``print``); plots; the box "This run, in short" (``check_render`` compares it whole with its
  recomputation); the navigation bar.
* **A number** is a run of digits (with ``,`` thousands and a ``.`` decimal part, a sign, a ``%`` or ``x`` after it)
  that is not part of a name: not glued to a letter before it or after it (``H200``, ``fa3``, ``Kimi-K2.5``,
  ``Llama-3.1-8B``, ``sm100``, ``#28``), not a version (``0.5.9``, ``v0.26.0``), a date or a time (``2026-12-01``),
  not a chapter's number (``chapter 05``, ``chapters 01-03``, ``06. Findings``, any zero-padded ``03``), not a launch
  flag's value inside a configuration's name (``--cuda-graph-max-bs 16``), not a GPU's model name (``RTX PRO 6000``).
* **Tagged**: inside ``<span class="sb-q" ...>`` written by ``servebook.stated.q``: ``check_render`` recomputes it.
* Everything else is **untagged** unless an entry of ``EXCEPTIONS`` (a pattern on the number in its sentence, and the
  reason it needs no tag) matches it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser

__all__ = ["Untagged", "Exception_", "EXCEPTIONS", "untagged_numbers", "prose_numbers"]


@dataclass(frozen=True)
class Untagged:
    """One number a page states in prose with no tag: the number as shown and the sentence around it."""

    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.number!r} in {self.context!r}"


@dataclass(frozen=True)
class Exception_:
    """A number that needs no tag: ``pattern`` (a regex) must match a span of the sentence that covers the number
    (``{N}`` in it stands for the number itself); ``reason`` says why it is not a quantity of the run."""

    pattern: str
    reason: str

    def covers(self, context: str, start: int, end: int) -> bool:
        for m in _compiled(self.pattern).finditer(context):
            named = [g for g, v in m.groupdict().items() if v is not None]
            if named:
                if any(m.start(g) == start and m.end(g) == end for g in named):
                    return True
            elif m.start() <= start and end <= m.end():
                return True
        return False


# Numbers the book's prose states that are not quantities of a run: definitions, the method's fixed constants, and
# figures quoted from a file the page names. Each with why it needs no tag; keep the list short and exact.
EXCEPTIONS: tuple[Exception_, ...] = (
    Exception_(r"\bbatch {N}\b|\bC ?= ?{N}\b(?! ?(?:tok|us|ms)\b)|\bus with {N} per graph\b", "a level's name (batch size, "
               "concurrency, all-reduces captured per graph), not a measurement: "
               "its figures are tagged or tabled"),
    Exception_(r"\b{N}% (?:t-)?(?:confidence )?interval|\b{N}% CI\b|\b{N}% t-|\b{N}% half-width", "the interval's definition (95%)"),
    Exception_(r"^corrected: .*", "a correction's note (servebook.results.say_corrections): the count of rows that carry it and "
               "the reason recorded in those rows, quoted"),
    Exception_(r"\bx{N}\b|\b{N}x (?=(?i:h200|h100|b200|rtx|gpu|a100))", "a host's GPU count as the host is named (a "
               "GPU's name or a hardware profile's: 8x RTX PRO 6000, 8x rtx-pro-6000)"),
    Exception_(r"^{N}\. (?=[A-Z][a-z])", "a section's number at the start of its heading (chapter 02's \"1. Where does the engine "
               "choose?\"), which the chapters link to by its anchor"),
    Exception_(r"\bTP ?[=>] ?{N}\b", "a configuration's tensor-parallel size as its name (TP=2) or a condition on it (TP>1), as C=4 "
               "names a level"),
    Exception_(r"^A server streams {N} tokens per chunk every {N} ms\. What is|^{N} ms between chunks, {N} ms per token\. servebook keeps",
               "chapter 05's worked example of the streaming definitions (bench.chapter.check_yourself): fixed figures a reader "
               "computes by hand, not a run's; the run's own tokens per chunk is stated beside it, tagged"),
    Exception_(r"\b(?:compute )?capability (?=\d{1,2}\.\d\b){N}(?!\.?\d)", "a compute capability written major.minor names a GPU "
               "architecture (9.0 Hopper, 12.0 workstation Blackwell), as sm_90 does: an identifier, not a measurement; this "
               "host's is tagged (host_capability)"),
)

@lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern:
    parts = pattern.split("{N}")
    return re.compile(parts[0] + "".join(rf"(?P<n{i}>[-+]?\d[\d,]*(?:\.\d+)?)" + p for i, p in enumerate(parts[1:])))


_NUMBER = re.compile(r"(?<![\w.\-/#])[-+]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:%|x\b)?(?![\w])")
_NAMEISH = re.compile(r"""
      \bv?\d+\.\d+\.\d+(?:[.\w+-]*)          # a version: 0.5.9, v0.26.0, 2.11.0+cu130
    | \b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+\S*)? # a date, a time
    | \b\d{1,2}:\d{2}(?::\d{2})?\b           # a time of day
    | \b[Cc]hapters?\s+\d\d(?:\s*(?:-|–|,|and|or)\s*\d\d)*   # chapter 05, chapters 01-03
    | (?:^|(?<=\s))\d\d\.\s+[A-Z]             # "06. Findings", a chapter's title
    | \b\d\d_[a-z]\w*                         # 05_benchmark_single_stream
    | (?<![\d.,])0\d\b(?![.,]\d)              # zero-padded: a chapter's number, (03)
    | --[a-z][\w-]*[ =]\S+                    # a launch flag and its value, part of a configuration's name
    | \b(?:RTX(?:\ PRO)?|PRO)\ \d+            # a GPU's model name: RTX PRO 6000
    """, re.X)


class _Prose(HTMLParser):
    """Collects the text of Markdown-rendered blocks, skipping code, tables and tagged numbers (their text is kept out
    of the sentence as a placeholder, so the context still reads)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._stack: list[tuple[str, str]] = []  # (tag, role): role in {"", "prose", "skip", "tag"}
        self._buf: list[str] = []

    def _role(self) -> str:
        roles = [r for _, r in self._stack if r]
        if not roles or "prose" not in roles:
            return "out"
        after = roles[roles.index("prose"):]
        if "skip" in after:
            return "skip"
        if "tag" in after:
            return "tag"
        return "prose"

    def _flush(self) -> None:
        text = " ".join("".join(self._buf).split())
        self._buf = []
        if text:
            self.blocks.append(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):
            if tag == "br":
                self._buf.append(" ")
            return
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        role = ""
        if a.get("data-mime-type") == "text/markdown":
            role = "prose"
        elif tag in ("code", "pre", "table", "script", "style", "svg", "math") or "sb-answer" in cls or "sb-nav" in cls \
                or "jp-InputArea" in cls:
            role = "skip"
        elif tag == "span" and "sb-q" in cls:
            role = "tag"
        if self._role() == "prose" and tag in ("p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "div", "td", "blockquote", "dd", "dt"):
            self._flush()
        if role == "tag" and self._role() == "prose":
            self._buf.append("\u2039q\u203a")  # a tagged number's place in the sentence
        self._stack.append((tag, role))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                was_prose = self._role() == "prose"
                del self._stack[i:]
                if was_prose or (self._stack == [] or self._role() == "out"):
                    if tag in ("p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "div", "td", "blockquote", "dd", "dt"):
                        self._flush()
                return

    def handle_data(self, data):
        if self._role() == "prose":
            self._buf.append(data)


def prose_numbers(page_html: str) -> list[tuple[str, str, int, int]]:
    """Every number the page's prose states untagged: (number, sentence, start, end), before ``EXCEPTIONS``."""
    p = _Prose()
    p.feed(page_html)
    p.close()
    p._flush()
    out = []
    for block in p.blocks:
        names = [(m.start(), m.end()) for m in _NAMEISH.finditer(block)]
        for m in _NUMBER.finditer(block):
            if any(a <= m.start() and m.end() <= b for a, b in names):
                continue
            out.append((m.group(0), block, m.start(), m.end()))
    return out


def untagged_numbers(page_html: str, exceptions: tuple[Exception_, ...] | None = None) -> list[Untagged]:
    """The numbers a rendered page states in prose that are neither tagged (``servebook.stated.q``) nor covered by an
    exception (``EXCEPTIONS`` unless given): the list a chapter's author makes empty."""
    exceptions = EXCEPTIONS if exceptions is None else exceptions
    out = []
    for number, block, start, end in prose_numbers(page_html):
        end -= len(number) - len(number.rstrip("%x"))  # the digits: an exception's {N} stands for them
        if any(e.covers(block, start, end) for e in exceptions):
            continue
        lo, hi = max(0, start - 60), min(len(block), end + 40)
        out.append(Untagged(number.rstrip("%x"), ("..." if lo else "") + block[lo:hi] + ("..." if hi < len(block) else "")))
    return out
