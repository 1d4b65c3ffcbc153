"""Chapter 02: read the backend-selection logic from the engine's own code, with what-if.

    from servebook.selection import whatif, read_selection, render_tree, add_engine, materialize
    whatif("sglang==0.5.9", "kimi-k2.5", gpu="rtx-pro-6000")["attention_backend"]

Chapter 02's page: ``selection.figures`` (what the page states, computed from the tables; ``servebook.stated``
recomputes it) and ``selection.report`` (its printed answers, matrix tables and sentences, tagged).
"""

from ..cards import list_cards, load_card, materialize, model_config
from ..engines.envs import EngineEnv, list_engines, resolve_engine
from .envs import add_engine
from .static import Site, find_sites, read_selection, render_tree
from .whatif import SelectionError, decision_matrix, matrix_diff, whatif

__all__ = ["whatif", "decision_matrix", "matrix_diff", "SelectionError", "read_selection", "render_tree", "find_sites",
           "Site", "add_engine", "list_engines", "resolve_engine", "EngineEnv", "list_cards", "load_card", "materialize",
           "model_config"]
