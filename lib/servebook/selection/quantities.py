"""Chapter 02's stated quantities: what an engine version's own code picks, and where (registered into
``servebook.stated.registry``; ``servebook.quantities`` gathers every chapter's)."""

from __future__ import annotations

from ..stated.figures import selection_of, site_count
from ..stated.registry import Quantity, register
from . import figures


def _selection(store) -> dict:
    return {selection_of(r): r.get("attention_backend") for r in store.rows("selection") if r.get("method") == "dynamic"}


def _sites(store) -> dict:
    keys = {(r.get("engine"), r.get("version")) for r in store.rows("selection_sites")}
    return {f"{e} {v}": site_count(store, e, v) for e, v in keys}


register(
    Quantity("selected_backend", "attention backend an engine version's own resolution picks (per engine, model, GPU)",
             _selection, ("02", "06"), tables=("selection",)),
    Quantity("selection_sites", "lines of an engine version's code that write its attention backend", _sites, ("02", "06"),
             tables=("selection_sites",)),
    # each computed by the chapter's own figures module, which formats nothing and imports no page code
    Quantity("selection_assignments", "recorded assignments of the attention backend in an engine version's code",
             figures.assignments, tables=("selection_sites",)),
    Quantity("selection_site_files", "files of an engine version's code that assign the attention backend", figures.site_files,
             tables=("selection_sites",)),
    Quantity("matrix_disagreements", "engine/version disagreements in chapter 02's decision matrix", figures.disagreement_count,
             tables=("selection_disagreements", "selection_matrix")),
    Quantity("version_diff_cells", "matrix cells that differ between the two engine versions compared (a -> b)",
             figures.diff_count, tables=("selection_diff", "selection_matrix")),
    Quantity("failed_steps", "steps of the run recorded in its failures table", figures.failure_count, tables=("failures",)),
)
