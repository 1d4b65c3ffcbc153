"""Issue #41's classes of contradiction, read from what a reader sees (``reading.visible``): one claim stated as a
finding and as a hypothesis, a sweep's stop called saturation against its own levels, one comparison in GB and GiB, the
seed's flashinfer launch ranked without what was measured of it, a comparison row without its message size, "gpu idle"
with a second meaning, two transformers versions unexplained, a superseded row beside its current one, "nothing ran"
against chapter 02's "[run]"; and, across books, the seed case's communication rule and each book's name.

    contradictions(book, kinds=("saturation",))     # through servebook.stated.consistency
    across_books("rendered")                          # [Contradiction("communication rule" | "book name", ...)]
"""

from __future__ import annotations

import re
from pathlib import Path

from .band import fell as _fell
from .reading import Contradiction, Visible
from .tags import stated_on

__all__ = ["CHECKS", "across_books"]


def _sentences(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.;])\s+(?=[A-Z(])", text) if x]


_FINDING = re.compile(r"\bso (?:that )?the difference between the engines (?:here |there )?is (on the host|in their kernels)")
_HYPO = re.compile(r"the difference between the engines (?:here |there )?is (on the host|in their kernels)[^.]*?is a \*?\*?hypothesis")
_AGAIN = re.compile(r"(?<!not )\bmeasured again\b")
_PER_KERNEL_SETTLES = re.compile(r"\ba per-kernel profile (?:of [^.]*?)?would settle it", re.I)
_HAS_PROFILES = re.compile(r"\b(?:per-kernel profiles?|profiled step|chapter 05's profiles|ms per step)\b", re.I)
# where "profiled step" only defines a term ("gpu idle", the time inside a profiled step when no kernel runs)
_DEFINES_IDLE = re.compile(r"the time inside a profiled step when no kernel runs", re.I)


def _finding_and_hypothesis(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """One claim stated as a finding and as a hypothesis on one page (the engines' difference "on the host": a
    conclusion over starts whose intervals overlap), "measured again" and "not measured again" of one thing in one
    sentence, and "a per-kernel profile would settle it" on a page that shows per-kernel profiles."""
    out = []
    for page in pages:
        text = " ".join(seen[page].blocks)
        found = {m.group(1) for m in _FINDING.finditer(text)}
        hypo = {m.group(1) for m in _HYPO.finditer(text)}
        for where in sorted(found & hypo):
            out.append(Contradiction("finding and hypothesis", page, f"the difference between the engines is {where}: "
                                     "stated as a finding and as a hypothesis on one page"))
        for sent in (x for b in seen[page].blocks for x in _sentences(b)):
            if "not measured again" in sent and _AGAIN.search(sent):
                out.append(Contradiction("finding and hypothesis", page, f"measured again and not measured again: {sent[:160]}"))
        # the page's own profiles: named outside the sentences that ask for one, and outside a term's definition
        rest = _DEFINES_IDLE.sub(" ", " ".join(x for b in seen[page].blocks for x in _sentences(b)
                                              if not _PER_KERNEL_SETTLES.search(x)))
        if _PER_KERNEL_SETTLES.search(text) and _HAS_PROFILES.search(rest):
            out.append(Contradiction("finding and hypothesis", page, "a per-kernel profile would settle it, on a page that "
                                     "shows per-kernel profiles"))
    return out


def _saturation(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """A sweep's stop (a table with ``label``, ``stopped_by``) called "saturation" where the page's own levels (a table
    with ``label``, ``concurrency``, ``throughput_tok_s``) show its last level fell (``band.fell``: more than 10% below its
    best), or "throughput fell" where the last level held within 10%: one rule for every engine on the page."""
    out = []
    for page in pages:
        stops, levels = {}, {}
        for header, rows in seen[page].tables:
            names = [h.strip().lower() for h in header]
            for r in rows:
                if len(r) != len(names):
                    continue
                d = dict(zip(names, r))
                if "stopped_by" in d and "label" in d:
                    stops[d["label"]] = d["stopped_by"].strip().lower()
                elif {"label", "concurrency", "throughput_tok_s"} <= set(d):
                    try:
                        levels.setdefault(d["label"], []).append((float(d["concurrency"]), float(d["throughput_tok_s"])))
                    except ValueError:
                        continue
        for label, kind in stops.items():
            lv = sorted(levels.get(label, []))
            if len(lv) < 2 or kind not in ("saturation", "throughput fell"):
                continue
            best, last = max(x for _, x in lv[:-1]), lv[-1][1]
            fell = _fell(last, [best])  # the band the sweep's stop is classified by (bench.saturation reads it from here too)
            if (kind == "saturation") == fell:
                out.append(Contradiction("saturation", page, f"{label}: stopped by {kind!r} while its last level, "
                                         f"{last:.1f} tok/s, is {last / best - 1:+.0%} against its best {best:.1f}"))
    return out


_GB = re.compile(r"\b\d[\d,.]*\s?GB\b(?!/s)")
_GIB = re.compile(r"\b\d[\d,.]*\s?GiB\b")


def _units(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """One comparison in two units: a sentence that sets an amount in GB against one in GiB (bandwidths, GB/s, apart),
    unless it says which is which (a conversion "GiB (" or "GB (")."""
    out = []
    for page in pages:
        for block in seen[page].blocks:
            for sent in _sentences(block):
                if _GB.search(sent) and _GIB.search(sent) and "unconverted" not in sent and "2^30" not in sent:
                    out.append(Contradiction("units", page, f"GB and GiB in one sentence: {sent[:200]}"))
    return out


def _flashinfer(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """The seed case's ranked changes (a page that ranks changes by expected gain) naming ``attention backend flashinfer``
    without saying the seed already tried it and what was measured serving it."""
    out = []
    for page in pages:
        text = " ".join(seen[page].blocks)
        if "ranked by expected gain" in text.lower() and "attention backend flashinfer" in text:
            for need in ("already tried", "served on the H200"):
                if need not in text:
                    out.append(Contradiction("flashinfer", page, f"flashinfer ranked without {need!r}"))
    return out


_BYTES = re.compile(r"\b\d[\d,]* B\b")


def _row_label(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """A comparison row of all-reduce latencies whose label names no message size (one label over runs measured at
    512 B and at 14,336 B sets two quantities side by side) or no setting (the defaults' latency, or the supported
    setting's)."""
    out = []
    for page in pages:
        for _, rows in seen[page].tables:
            for r in rows:
                label = next((c for c in r if c.strip()), "")
                if "all-reduce at batch 1" in label and (not _BYTES.search(label) or not re.search(r"defaults|supported", label)):
                    out.append(Contradiction("row label", page, f"{label!r}: no message size or setting named"))
    return out


# "reference" said of something other than the glossary's reference book (or chapter 04's reference grid): the
# projection's profile run (h200x1-prof) and a recording unit's anchor configuration have their own terms
_OTHER_REFERENCE = re.compile(r"\breference (?:run|profile run|configuration|row)s?\b", re.I)


def _term(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """"gpu idle" given a second meaning: chapter 05 defines it as the time inside a profiled step when no kernel runs;
    a projection table (its categories include "communication": a tensor-parallel step) that names its host-rule row
    "gpu idle" gives the same words to what the host adds beyond the GPU. And "reference" given a second meaning: a
    "reference run" or "reference configuration" beside the reference book (the glossary's profile run, anchor
    configuration, reference grid)."""
    out = []
    for page in pages:
        said = next((m.group(0) for b in seen[page].blocks for m in [_OTHER_REFERENCE.search(b)] if m), None)
        if said:
            out.append(Contradiction("term", page, f"'{said}': 'reference' is the reference book; the projection's run is "
                                     "the profile run, a unit's re-measured configuration its anchor configuration, "
                                     "chapter 04's grid the reference grid (glossary)"))
        for header, rows in seen[page].tables:
            first = {next((c for c in r if c.strip()), "").strip().lower() for r in rows}
            if "gpu idle" in first and "communication" in first and {"sglang", "vllm"} <= {h.strip() for h in header}:
                out.append(Contradiction("term", page, "a projection's row is named 'gpu idle' (what the host adds beyond the "
                                         "GPU), the name chapter 05 gives to idle time inside a profiled step"))
    return out


_TF = re.compile(r"\btransformers (\d+\.\d+\.\d+)\b")


def _versions(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """Two versions of transformers in one book (the engines' environment and the kernel that executed the chapters)
    with nothing on its pages saying which is which."""
    found: dict[str, set[str]] = {}
    said = False
    for page in pages:
        for text in seen[page].blocks:
            for m in _TF.finditer(text):
                found.setdefault(m.group(1), set()).add(page)
            said = said or ("engine environment" in text and "kernel" in text)
        for header, rows in seen[page].tables:
            names = [h.strip().lower() for h in header]
            for r in rows:
                d = dict(zip(names, r))
                if d.get("engine", d.get("package")) == "transformers" and re.fullmatch(r"\d+\.\d+\.\d+", d.get("version", "")):
                    found.setdefault(d["version"], set()).add(page)
    if len(found) > 1 and not said:
        return [Contradiction("versions", " | ".join(sorted({p for ps in found.values() for p in ps})),
                              "transformers " + " and ".join(sorted(found)) + " with nothing saying which is the engines' and "
                              "which the kernel's")]
    return []


def _superseded(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """One case shown twice under one source label in one table (``case``, ``source``): a superseded row beside the one
    that stands, both labelled alike ("measured here")."""
    out = []
    for page in pages:
        for header, rows in seen[page].tables:
            names = [h.strip().lower() for h in header]
            if not {"case", "source"} <= set(names):
                continue
            seen_cases: dict[tuple, int] = {}
            for r in rows:
                d = dict(zip(names, r))
                k = (d.get("case"), d.get("source"))
                seen_cases[k] = seen_cases.get(k, 0) + 1
            for (case, source), n in seen_cases.items():
                if n > 1:
                    out.append(Contradiction("superseded", page, f"{case!r} shown {n} times as {source!r}"))
    return out


def _ran(pages: dict[str, str], seen: dict[str, Visible]) -> list[Contradiction]:
    """The book's index saying nothing of the versions chapter 02 read ran, while chapter 02 marks answers "[run]" (the
    engine's selection code executed on this CPU)."""
    said = [p for p in pages if any("nothing of them ran" in b for b in seen[p].blocks)]
    run = [p for p in pages if any("[run]" in b for b in seen[p].blocks)]
    return [Contradiction("ran", f"{said[0]} | {run[0]}", "'nothing of them ran' against chapter 02's [run]")] if said and run else []


# each class, by the kind ``consistency.contradictions`` names it (its ``KINDS`` after the first four)
CHECKS = {"finding and hypothesis": _finding_and_hypothesis, "saturation": _saturation, "units": _units,
          "flashinfer": _flashinfer, "row label": _row_label, "term": _term, "versions": _versions,
          "superseded": _superseded, "ran": _ran}


def _seed_counts(page: str, text: str, seed: dict) -> list[tuple[float, str]]:
    """The seed case's collectives per decode token a page states (tagged): the model card's count, chapter 04's floor
    at the seed's TP, the verdict's table. ``seed``: ``figures.seed_case()``, read once for every page."""
    out = []
    for x in stated_on(text, page):
        of = str(x.of or "")
        if (x.name == "card_fact" and of.endswith(("allreduces_per_token", f"collectives_per_token_tp{seed['tp']}"))
                and of.startswith(seed["model"])) or (x.name == "comm_allreduces_per_token" and f"TP={seed['tp']}" in of) \
                or (x.name == "seed_table" and of.startswith("seed_comm |") and of.endswith("| collectives")):
            out.append((float(x.value), x.text))
    return out


def across_books(root: str | Path | dict[str, dict[str, str]]) -> list[Contradiction]:
    """What one book cannot see: the seed case's communication rule stated with two counts of collectives per token in
    two books (chapter 05's seed on paper against the what-if book's chapters 04 to 06), and a book whose index is
    titled with another name than the book's. ``root``: the rendered folder
    (every book under it) or ``{book: {page: html}}``."""
    import json

    if not isinstance(root, dict):
        root = {d.name: {p.name: p.read_text(encoding="utf-8") for p in sorted([*d.glob("*.html"), *d.glob("run.json")])}
                for d in sorted(Path(root).iterdir()) if d.is_dir()}
    out = []
    for book, pages in root.items():   # a book titled by another run's name (h200x1-trust recorded as h200x1-live)
        m = re.search(r"<title>servebook: ([^<]*)</title>", pages.get("index.html", ""))
        run = Path(str(json.loads(pages["run.json"]).get("run_dir") or book)).name if "run.json" in pages else book
        if m and m.group(1).split(" ")[0] not in (book, run):
            out.append(Contradiction("book name", f"{book}/index.html", f"the book {book} is titled {m.group(1)!r}"))
    from .figures import seed_case

    seen: dict[float, list[str]] = {}
    seed = seed_case()
    for book, pages in root.items():
        for page, text in pages.items():
            for value, _ in (_seed_counts(page, text, seed) if page.endswith(".html") else ()):
                seen.setdefault(value, []).append(f"{book}/{page}")
    if len(seen) < 2:
        return out
    what = "; ".join(f"{v:g} on {', '.join(sorted(set(w))[:3])}" for v, w in sorted(seen.items()))
    return out + [Contradiction("communication rule", " | ".join(sorted({w.split('/')[0] for ws in seen.values() for w in ws})),
                          f"the seed case's collectives per token: {what}")]

