"""Chapter 06: what a run found, read from its recorded tables (nothing is measured here).

    store = RunStore.at("data/runs/h200x2-book")
    f = collect(store)              # host, selection, backends, nccl, throughput, launch commands, failures
    what_we_found(f)                # markdown bullets, each linking to the chapter cell that shows it
    check_yourself(store, "06")     # [(question, answer)], answers computed from the run
    compare_runs(["data/runs/h200x2-book", "data/runs/h200x2-probe/1gpu"])   # side by side, with deltas

One job per module: ``tables`` reads chapters 01-05's tables, ``intervals`` holds the one comparison every
chapter states (over server starts), ``methods`` whether chapters 03 and 05 measured the default the same way, ``launch`` writes the recommended launch commands, ``claims`` states the findings with their
``links``, ``questions`` asks "Check yourself", ``compare`` sets runs side by side (``servebook compare``).
"""

from __future__ import annotations

from .claims import Findings, collect, what_we_found
from .compare import across_runs, compare_markdown, compare_runs, register
from ..stated.intervals import ONE_START, fastest_correct, interval_of, separated, starts_of
from .methods import bench_method, default_methods, method_differences, model_of_launch, say_default_methods
from .launch import launch_commands
from .links import (H_BACKENDS_FOUND, H_BENCH, H_ENGINES, H_HOST, H_NCCL, H_NCCL_PRED, H_ROOF, H_SELECTION,  # noqa: F401
                    H_SELECTION_FOUND, H_SWEEP, H_SWEEP_C, Claim, anchor, link)
from .questions import check_yourself, check_yourself_markdown, whatif_questions
from .tables import backends, failures, host_summary, nccl, open_run, selection, throughput, tp_end_to_end, versions_read

__all__ = [
    "Claim", "Findings", "anchor", "link", "collect", "host_summary", "selection", "backends", "nccl", "throughput", "tp_end_to_end", "separated",
    "launch_commands", "failures", "fastest_correct", "what_we_found", "check_yourself", "check_yourself_markdown", "whatif_questions", "compare_runs",
    "compare_markdown", "across_runs", "open_run", "register", "interval_of", "starts_of", "ONE_START", "default_methods", "say_default_methods", "bench_method", "method_differences",
    "model_of_launch", "versions_read",
]
