"""A rendered page as a reader sees it, and a contradiction found in it: what ``consistency`` and ``wording`` both read.

    seen = visible(page_html)          # Visible(blocks=[...prose and outputs...], tables=[(header, rows), ...])
    Contradiction("status", "03_force_each_backend.html", "...")

Only what a reader sees is read: the code cells' source (``jp-InputArea``) is left out, outputs and prose are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Contradiction", "Visible", "visible"]


@dataclass(frozen=True)
class Contradiction:
    """One contradiction: its kind (one of ``KINDS``), the page(s) it is on, and what the pages say."""

    kind: str
    page: str
    text: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.page}: {self.text}"


@dataclass
class Visible:
    """A page as a reader sees it: text blocks (paragraphs, list items, cells) and tables (header, rows of cells)."""

    blocks: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)


_BLOCK = {"p", "li", "td", "th", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "div", "tr", "br", "table", "ul", "ol",
          "summary", "figcaption", "dd", "dt", "blockquote"}
_SKIP = ("jp-InputArea", "jp-InputPrompt", "jp-OutputPrompt")


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = Visible()
        self._buf: list[str] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, skipping)
        self._tables: list[dict] = []

    @property
    def _skipping(self) -> bool:
        return any(s for _, s in self._stack)

    def _flush(self) -> None:
        text = " ".join("".join(self._buf).split())
        self._buf = []
        if text:
            self.out.blocks.append(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "hr", "meta", "link", "input"):
            if tag == "br":
                self._buf.append(" ")
            return
        cls = dict(attrs).get("class") or ""
        skip = tag in ("script", "style", "head") or any(c in cls for c in _SKIP)
        self._stack.append((tag, skip))
        if self._skipping:
            return
        if tag in _BLOCK:
            self._flush()
        if tag == "table":
            self._tables.append({"header": [], "rows": [], "row": None, "cell": None, "in_head": False})
        elif self._tables:
            t = self._tables[-1]
            if tag == "thead":
                t["in_head"] = True
            elif tag == "tr":
                t["row"] = []
            elif tag in ("td", "th") and t["row"] is not None:
                t["cell"] = []

    def handle_endtag(self, tag):
        if not self._stack:
            return
        # close up to the matching tag (HTML in the wild leaves some open)
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                skipping = self._skipping
                del self._stack[i:]
                break
        else:
            return
        if skipping and self._skipping:
            return
        if self._tables:
            t = self._tables[-1]
            if tag in ("td", "th") and t["cell"] is not None and t["row"] is not None:
                t["row"].append(" ".join("".join(t["cell"]).split()))
                t["cell"] = None
            elif tag == "tr" and t["row"] is not None:
                if t["in_head"] or (not t["rows"] and not t["header"] and tag == "tr" and t.get("th_only")):
                    t["header"] = t["header"] or t["row"]
                else:
                    t["rows"].append(t["row"])
                t["row"] = None
            elif tag == "thead":
                t["in_head"] = False
            elif tag == "table":
                self._tables.pop()
                self.out.tables.append((t["header"], t["rows"]))
        if tag in _BLOCK:
            self._flush()

    def handle_data(self, data):
        if self._skipping:
            return
        self._buf.append(data)
        if self._tables and self._tables[-1]["cell"] is not None:
            self._tables[-1]["cell"].append(data)


def visible(page_html: str) -> Visible:
    """What a reader sees on a rendered page: prose and outputs as text blocks, and every HTML table."""
    r = _Reader()
    r.feed(page_html)
    r.close()
    r._flush()
    return r.out
