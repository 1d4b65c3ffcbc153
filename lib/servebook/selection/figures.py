"""Chapter 02's figures, computed from a run's tables and nothing else: what the page states and what
``servebook.stated`` recomputes to check it (no formatting, no page code).

    assignments(store)["sglang 0.5.9"]      # recorded assignments of the attention backend in that version's code
    site_files(store)["sglang 0.5.9"]       # files those assignments are in
    disagreement_count(store)               # {None: engine/version disagreements in the matrix that stands}
"""

from __future__ import annotations

import json

__all__ = ["assignments", "site_files", "disagreement_count", "diff_count", "failure_count"]


def _by_version(store) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in store.rows("selection_sites"):
        out.setdefault(f"{r.get('engine')} {r.get('version')}", []).append(r)
    return out


def assignments(store) -> dict[str, int]:
    """Recorded assignments of the attention backend per engine version (rows of ``selection_sites``)."""
    return {k: len({(r.get("where"), r.get("target"), r.get("value")) for r in v}) for k, v in _by_version(store).items()}


def site_files(store) -> dict[str, int]:
    """Files of an engine version's code that hold those assignments."""
    return {k: len({str(r.get("where")).rsplit(":", 1)[0] for r in v}) for k, v in _by_version(store).items()}


def _distinct(rows: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        key = json.dumps({k: v for k, v in r.items() if k != "recorded_at"}, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _of_standing_matrix(store, table: str) -> list[dict]:
    """The rows of ``table`` (derived from chapter 02's decision matrix) that derive from the matrix that stands now.

    The derived tables were appended to at each execution (before 2026-12-02), so a run executed four times holds four
    executions' rows. Only the rows recorded no earlier than the standing matrix are of its execution; the rest derive
    from a matrix that was replaced. The matrix keeps its older stamp where an execution computes the same values again,
    and its derived tables are then kept beside it, or written later where their own values changed
    (``selection.record.record_matrix``): never older than the matrix they derive from. A run without a
    ``selection_matrix`` keeps every row."""
    stamps = [str(r["recorded_at"]) for r in store.rows("selection_matrix") if r.get("recorded_at")]
    rows = store.rows(table)
    if not stamps:
        return rows
    since = max(stamps)
    return [r for r in rows if str(r.get("recorded_at") or "") >= since]


def disagreement_count(store) -> dict:
    """Engine/version disagreements in the decision matrix that stands (``selection_disagreements`` of its execution,
    kind ``differs``, each once): the count chapter 02 prints under its side-by-side table."""
    rows = _distinct(_of_standing_matrix(store, "selection_disagreements"))
    return {None: sum(r.get("kind") == "differs" for r in rows)} if rows else {}


def diff_count(store) -> dict:
    """Cells that differ between the two versions compared in the matrix that stands (``selection_diff`` of its
    execution, each once), by ``"a -> b"``."""
    out: dict[str, int] = {}
    for r in _distinct(_of_standing_matrix(store, "selection_diff")):
        k = f"{r.get('a_spec')} -> {r.get('b_spec')}"
        out[k] = out.get(k, 0) + 1
    return out


def failure_count(store) -> dict:
    """Steps of the run recorded as failed (table ``failures``)."""
    return {None: len(store.rows("failures"))}
