"""Chapter 02's figures, computed from a run's tables and nothing else: what the page states and what
``servebook.stated`` recomputes to check it (no formatting, no page code).

    assignments(store)["sglang 0.5.9"]      # recorded assignments of the attention backend in that version's code
    site_files(store)["sglang 0.5.9"]       # files those assignments are in
    disagreements(store)                    # {None: engine/version disagreements in the matrix}
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


def disagreement_count(store) -> dict:
    """Engine/version disagreements in the decision matrix (``selection_disagreements``, kind ``differs``, each once)."""
    rows = _distinct(store.rows("selection_disagreements"))
    return {None: sum(r.get("kind") == "differs" for r in rows)} if rows else {}


def diff_count(store) -> dict:
    """Cells that differ between the two versions compared (``selection_diff``, each once), by ``"a -> b"``."""
    out: dict[str, int] = {}
    for r in _distinct(store.rows("selection_diff")):
        k = f"{r.get('a_spec')} -> {r.get('b_spec')}"
        out[k] = out.get(k, 0) + 1
    return out


def failure_count(store) -> dict:
    """Steps of the run recorded as failed (table ``failures``)."""
    return {None: len(store.rows("failures"))}
