"""Chapter 03: force each attention backend, check it really ran and gave the default's tokens, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)
    figures.rates(store)["vllm | TRITON_MLA | graph"]       # what the page states, from the tables
    Markdown(report.found_lines(store, ["sglang", "vllm"], report.starts_table(store, ["sglang", "vllm"])))

Modules, by role (the same roles as the other chapters): ``measure`` (the sweep: each backend forced, started,
checked and measured, one row each), ``agreement`` (whether a forced backend's decode kernel gives the default's
token ids), ``figures`` (what the page states, computed from the tables; ``servebook.stated`` recomputes it) and
``report`` (the page's candidates, table, plot and sentences, every number tagged).
"""

from __future__ import annotations

from .measure import (PROBE_PROMPTS, compare_tokens, engine_error, force_each_backend, greedy_completions, prompt_logprobs,
                      runnable_here, starts_overlap_here, teacher_forced_agreement)

__all__ = ["PROBE_PROMPTS", "force_each_backend", "greedy_completions", "compare_tokens", "prompt_logprobs",
           "teacher_forced_agreement", "runnable_here", "engine_error", "starts_overlap_here"]
