"""Chapter 05 as the notebook calls it: measure each engine, then the tables, plots and sentences the page shows.

    w = Workload(max_tokens=128, input_len=128, runs=5, ...).sized(smoke)     # the chapter's parameters, smoke-sized
    measure_engines(store, ["sglang", "vllm"], host=on_host, model="...", model_dir=d, prompts=p, tokenizer=tok, w=w)
    m = measured(store)                        # summary rows, single-stream and sweep frames (the last of each measurement)
    sweep_parameters(store)                    # what the sweep ran with (levels, requests per level) and why it stopped
    Markdown("\\n".join(found(store, m, ...)))  # "What we found", every figure tagged (servebook.stated.q) or in UNTAGGED

Every measurement's method is the one the chapter describes; the functions only move the notebook's logic into the
package, so a recorded run re-executed with ``measure=False`` reads the same tables the same way. The page's parts, one
module each: ``measure`` (its measuring), ``figures`` (what the page states, computed from the tables), ``tables`` (its
tables and plots), ``limits`` (this host's roofline, its extrapolation, the in-process breakdown), ``seed`` (the seed
case on paper), ``decode_rule`` (the rule that timed each decode rate, in words), ``report`` (its words: "What we
found", "Check yourself", and ``UNTAGGED``: the figures the page states in prose without a tag, each with the reason it
cannot carry one). This module hands their names to the notebook.
"""

from __future__ import annotations

from .decode_rule import say_decode_rule
from .figures import ceiling_tables, sweep_parameters
from .limits import extrapolation, host_roofline, inprocess_breakdown, say_breakdown, what_if_line
from .measure import Workload, measure_engines
from .report import UNTAGGED, ceiling_sentence, check_yourself, excerpt, found, say_sweep_stops, whole_block
from .seed import say_prediction_tok_s, seed_roofline, whatif_check_yourself, whatif_found
from .tables import (ceiling_warnings, client_check, graph_eager_pairs, measured, plot_graph_vs_eager, plot_single_runs, plot_sweep,
                     roofline_shown, show_ceiling, show_ceiling_comparison, starts_table)

__all__ = ["Workload", "UNTAGGED", "ceiling_tables", "ceiling_sentence", "measure_engines", "measured", "starts_table",
           "plot_single_runs", "sweep_parameters", "say_sweep_stops", "plot_sweep", "plot_graph_vs_eager", "graph_eager_pairs", "client_check",
           "host_roofline", "roofline_shown", "extrapolation", "inprocess_breakdown", "say_breakdown", "seed_roofline", "say_prediction_tok_s",
           "say_decode_rule", "found", "check_yourself", "whatif_found", "whatif_check_yourself", "show_ceiling", "show_ceiling_comparison", "ceiling_warnings", "what_if_line", "excerpt", "whole_block"]
