"""Where a claim points: the chapter headings it links to in the rendered book, and the claim itself.

    link(H_SWEEP)        # '[ch. 03](03_force_each_backend.html#The-sweep)'
    Claim("03", "sdpa was fastest", H_SWEEP).markdown()

nbconvert gives each markdown heading an id made of its text with spaces turned into dashes, and the
rendered book keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Claim", "anchor", "link"]

# The chapter pages and the headings the findings point at (the notebooks' own "## ..." lines).
_PAGES = {
    "01": "01_detect_capabilities", "02": "02_read_backend_selection", "03": "03_force_each_backend",
    "04": "04_tune_nccl", "05": "05_benchmark_single_stream", "06": "06_findings",
}

H_HOST = ("01", "What this host is")

H_ENGINES = ("01", "What the engines conclude")

H_SELECTION = ("02", "2. The answer (dynamic): this host, then the seed case")

H_SELECTION_FOUND = ("02", "What we found")

H_SWEEP = ("03", "The sweep")

H_BACKENDS_FOUND = ("03", "What we found")

H_NCCL = ("04", "Measurement on this host")

H_NCCL_PRED = ("04", "From microseconds to tokens")

H_BENCH = ("05", "Single stream, and the concurrency sweep, engine by engine")

H_SWEEP_C = ("05", "Concurrency: throughput against what each user gets")

H_ROOF = ("05", "Against the roofline")



def anchor(heading: str) -> str:
    """The id nbconvert gives a markdown heading: its text with spaces replaced by dashes."""
    return heading.strip().replace(" ", "-")


def link(where: tuple[str, str], text: str | None = None) -> str:
    """A markdown link to a chapter heading in the rendered book."""
    from urllib.parse import quote

    chapter, heading = where
    return f"[{text or f'ch. {chapter}'}]({_PAGES[chapter]}.html#{quote(anchor(heading), safe='-.,:?')})"



@dataclass
class Claim:
    """One statement, the chapter cell that shows it, and how sure the data lets us be."""

    chapter: str
    text: str
    where: tuple[str, str]
    supported: bool = True  # False: the data does not support a change (overlapping intervals, nothing measured)

    def markdown(self) -> str:
        return f"{self.text} ({link(self.where)})"

    def plain(self) -> str:
        """The statement without its tags (``servebook.stated.q`` spans), as text: for the box "This run, in short",
        which the check compares whole."""
        import html
        import re

        return html.unescape(re.sub(r"<[^>]+>", "", self.text))

