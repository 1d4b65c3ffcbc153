"""Checking a rendered book against the run it was made from: every tagged number against its recomputation and the
other pages, every page's box "This run, in short" against the box the renderer makes from the run's tables now.

    report = check_render("rendered/h200x2-live", QUANTITIES, answer_boxes=answer_boxes)   # the run: its run.json names it
    report.of_page("06_findings.html"), report.across(), report.box_problems, report.predating
    box_items(page_html)                              # the lines of a page's box, or None

It knows no chapter: it is given the registry (``servebook.quantities.QUANTITIES``, every chapter's quantities) and the
renderer's answer boxes (``servebook.findings.boxes.answer_boxes``); ``servebook.quantities.check_render`` gives both.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..paths import book_root
from .registry import Quantity, pick
from .tags import Stated, stated_on, uses_tags
from .text import MISSING, plain, text_of

__all__ = ["Report", "Recompute", "check_render", "answers", "box_items", "run_of"]


def _as_rendered(text: str) -> str:
    """A recorded text as its page shows it once Markdown has rendered it: the marks of inline code and emphasis
    (backticks, asterisks, underscores) are not in the text the page shows, and white space is one space."""
    return " ".join(re.sub(r"[`*_]", "", text).split())


def _same(a: Any, b: Any) -> bool:
    """One value: numbers equal but for float rounding; anything else equal."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


@dataclass
class Report:
    """What ``check_render`` found: the pages read, the pages that predate the tags, and every disagreement."""

    render: str
    run: str
    pages: dict[str, str] = field(default_factory=dict)  # page -> "tagged" | "predates the tags" | "failed chapter"
    stated: list[Stated] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (page, or "" for a disagreement between pages; what)
    box_problems: list[tuple[str, str]] = field(default_factory=list)  # (page, what): the box "This run, in short"

    def of_page(self, page: str) -> list[str]:
        return [m for p, m in self.problems if p == page]

    def across(self) -> list[str]:
        return [m for p, m in self.problems if not p]

    @property
    def tagged(self) -> list[str]:
        return [p for p, s in self.pages.items() if s != "predates the tags"]

    @property
    def predating(self) -> list[str]:
        return [p for p, s in self.pages.items() if s == "predates the tags"]


def run_of(render: Path) -> Path:
    """The run directory a render was made from (its ``run.json`` names it; relative to the book's root)."""
    meta = json.loads((render / "run.json").read_text())
    run = Path(meta["run_dir"])
    return run if run.is_absolute() else book_root() / run


def box_items(page_html: str) -> list[str] | None:
    """The items of the page's "This run, in short" box (their text), or None when the page has none."""
    m = re.search(r'<div class="sb-answer">(.*?)</div>', page_html, flags=re.S)
    if not m:
        return None
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", li)).split()) for li in re.findall(r"<li>(.*?)</li>", m.group(1), flags=re.S)]


def answers(store, answer_boxes: Callable[[Any], dict]) -> dict[str, list[str] | None]:
    """The box "This run, in short" each chapter's page would show if rendered now: the renderer's own box
    (``answer_boxes``: ``servebook.findings.boxes``, chapter 06's statements) for the run's tables as they are."""
    boxes = answer_boxes(store)
    return {n: box_items(boxes.get(n) or "<none>") for n in ("01", "02", "03", "04", "05", "06")}


def _box_problems(page: str, box: list[str], expect: list[str] | None) -> list[str]:
    expect = expect or []
    if box == expect:
        return []
    for a, b in zip(box, expect):
        if a != b:
            return [f"{page}'s box \"This run, in short\" states {a!r}; recomputed from the run's tables: {b!r}"]
    return [f"{page}'s box \"This run, in short\" has {len(box)} lines, the run's tables give {len(expect)}: "
            f"{(expect[len(box):] or box[len(expect):])[0]!r} differs"]


class Recompute:
    """The run's quantities, each computed once from its tables, and what is wrong with one stated number.

        truth = Recompute(RunStore(run_dir), QUANTITIES)
        truth.problems(stated_number)    # [] when it shows what its value formats to and equals the recomputation
    """

    def __init__(self, store, quantities: Mapping[str, Quantity]) -> None:
        self.store = store
        self.quantities = quantities
        self._computed: dict[str, dict] = {}

    def values_of(self, name: str) -> dict:
        if name not in self._computed:
            self._computed[name] = self.quantities[name].compute(self.store)
        return self._computed[name]

    def want(self, name: str, of: str | None) -> Any:
        return pick(self.quantities[name], self.values_of(name), of, self.store)

    def problems(self, s: Stated) -> list[str]:
        """What ``check_render`` says about one tagged number: an unknown quantity, a text that is not its value
        formatted, a value the tables do not give or give otherwise."""
        if s.name not in self.quantities:
            return [f"{s.where()} tagged as {s.name!r}, a quantity the registry does not know"]
        out = []
        shown = text_of(s.value, s.fmt)
        if s.text != shown and not (isinstance(s.value, str) and _as_rendered(s.text) == _as_rendered(shown)):
            out.append(f"{s.where()} for {s.name}[{s.of}] but its value {s.value!r} formats to {shown!r}")
        truth = self.want(s.name, s.of)
        if truth is MISSING:
            out.append(f"{s.where()} for {s.name}[{s.of}], which the run's tables do not give")
        elif not _same(s.value, truth):
            out.append(f"{s.where()} for {s.name}[{s.of}] (value {s.value!r}); recomputed from "
                       f"{self.store.path.name}'s tables: {truth!r} ({text_of(truth, s.fmt)})")
        return out


def check_render(render: str | Path, quantities: Mapping[str, Quantity], run: str | Path | None = None,
                 answer_boxes: Callable[[Any], dict] | None = None) -> Report:
    """Check every page of a rendered book against the run it was made from (``run.json`` names it), with the
    registry ``quantities``.

    Every page: its box "This run, in short" states what the run's tables give now (``answer_boxes(store)``: the boxes
    the renderer makes; None leaves the boxes out, they are recomputed from the whole run). Every page whose code used
    ``q``: each tagged number shows what its value formats to and equals the quantity recomputed from the run's tables,
    and every quantity the registry requires on that chapter is there (unless the chapter failed in the run). Across
    pages: one quantity, one value."""
    from ..results import RunStore

    render = Path(render)
    run_path = Path(run) if run is not None else run_of(render)
    store = RunStore(run_path)
    report = Report(render=str(render), run=str(run_path))
    truth = Recompute(store, quantities)

    def problem(page, text):
        report.problems.append((page, text))

    expect = None
    for page_path in sorted(render.glob("0[0-9]_*.html")):
        page = page_path.name
        text = page_path.read_text(encoding="utf-8")
        box = box_items(text) if answer_boxes is not None else None
        if box is not None:
            expect = answers(store, answer_boxes) if expect is None else expect
            report.box_problems += [(page, p) for p in _box_problems(page, box, expect.get(page[:2], []))]
        found = stated_on(text, page)
        if not found and not uses_tags(text):
            report.pages[page] = "predates the tags"
            continue
        failed = 'id="sb-failed"' in text
        report.pages[page] = "failed chapter" if failed else "tagged"
        report.stated += found
        for s in found:
            for p in truth.problems(s):
                problem(page, p)
        if failed:
            continue
        present = {s.key() for s in found}
        for name, quantity in quantities.items():
            if page[:2] not in quantity.chapters:
                continue
            for of, value in truth.values_of(name).items():
                if plain(value) is not None and (name, of) not in present:
                    problem(page, f"{page} does not state {name}[{of}] ({quantity.what}); the run's tables give {plain(value)!r}")
    groups: dict[tuple, list[Stated]] = {}
    for s in report.stated:
        groups.setdefault(s.key(), []).append(s)
    for (name, of), items in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        values: list = []
        for s in items:
            if not any(_same(s.value, v) for v in values):
                values.append(s.value)
        if len(values) > 1:
            problem("", f"pages disagree on {name}[{of}]: " + "; ".join(f"{s.where()} ({s.value!r})" for s in items))
    return report
