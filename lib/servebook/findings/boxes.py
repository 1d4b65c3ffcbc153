"""The box "This run, in short" at the top of each chapter's page: the chapter's answer as chapter 06 states it, computed
from the run's tables (``servebook.render`` puts it on the page, ``servebook.stated.check`` checks a rendered page against it).

    answer_boxes(store)["03"]            # the box's HTML for chapter 03
"""

from __future__ import annotations

import html
import re

from ..results import RunStore

__all__ = ["answer_boxes"]


def _answers(store: RunStore) -> dict[str, list[str]]:
    """Each chapter's answer for this run, as chapter 06 states it (``servebook.findings``, computed from the run's
    tables): shown first on every page, so a reader meets the result before the method."""
    try:
        from .claims import collect

        found = collect(store)
    except Exception:  # noqa: BLE001 - a run too old or too partial for the findings: its pages render without the box
        return {}
    out: dict[str, list[str]] = {}
    for c in found.claims:
        out.setdefault(c.chapter, []).append(c.plain())  # the box is checked whole: its figures are not tagged
    out["06"] = [_launch_line(lc) for lc in found.launch] + out.get("06", [])
    return out


def _launch_line(lc: dict) -> str:
    """A launch to try on the real host, said with what it is (its decision in ``recommended_launch``: predicted or a
    hypothesis; a what-if book's launches carry it), its expected gain and rank among the seed verdict's changes (``seed_fixes``), and, where the seed
    already tried it, that it did so together with other changes (the row's note, up to its colon)."""
    if "decision" not in lc or not lc.get("command"):   # a book's own launch, measured on its host: as chapter 06 gives it
        return f"Launch for {lc['engine']}: {lc['command']}"
    said = [str(lc.get("decision") or "hypothesis")]
    fix, ranked = lc.get("fix") or {}, lc.get("rank")
    if fix.get("expected_gain_ms") is not None:
        said.append(f"expected gain {fix['expected_gain_ms']:.2f} ms per token ({fix['gain_low_ms']:.2f} to "
                    f"{fix['gain_high_ms']:.2f})")
    elif fix:
        said.append("no expected gain in `seed_fixes`")
    if ranked:
        said.append(f"ranked {ranked['rank']} of {lc.get('ranked')} by expected gain")
    if fix.get("note"):
        said.append(str(fix["note"]).split(":")[0])
    return f"Launch for {lc['engine']} ({'; '.join(said)}): `{lc['command']}`"


def answer_boxes(store: RunStore) -> dict[str, str]:
    """The box "This run, in short" at the top of each chapter's page, by chapter number (``"03"``): its HTML, the
    chapter's answer as chapter 06 states it. ``servebook.stated`` checks a rendered page's box against it."""
    return {number: _answer_box(lines) for number, lines in _answers(store).items() if lines}


def _answer_box(lines: list[str]) -> str:
    code = lambda t: re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(t))  # noqa: E731 - the claims' markdown spans
    items = "".join(f"<li>{code(t)}</li>" for t in lines[:6])
    more = f"<li>... {len(lines) - 6} more in chapter 06</li>" if len(lines) > 6 else ""
    return (f'<div class="sb-answer"><b>This run, in short</b> (computed from its tables; the cells below show how)'
            f"<ul>{items}{more}</ul></div>")
