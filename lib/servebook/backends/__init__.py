"""Chapter 03: force each attention backend, check it really ran and gave the default's tokens, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)
    figures.rates(store)["vllm | TRITON_MLA | graph"]       # what the page states, from the tables
    Markdown(report.found_lines(store, ["sglang", "vllm"], report.starts_table(store, ["sglang", "vllm"])))

Modules, by role (the same roles as the other chapters): what it measures: ``measure`` (the sweep's plan), ``serve``
(one configuration started, checked and measured), ``restarts`` (its further starts; servers started together on a
CPU host), ``checks`` (what the engine says it loaded, whether it refused, whether a backend can run here), ``outputs`` (greedy
and teacher-forced agreement, the wrong-output verdict) and ``agreement`` (the decode path, token ids in and out);
its figures: ``figures`` (what the page states, computed from the tables; ``servebook.stated`` recomputes it); its
words for the page: ``report`` (the candidates, the table of starts, the plot and the sentences, every number tagged).
"""

from __future__ import annotations

from .checks import runnable_here
from .measure import force_each_backend
from .outputs import PROBE_PROMPTS, compare_tokens, greedy_completions, prompt_logprobs, teacher_forced_agreement

__all__ = ["PROBE_PROMPTS", "force_each_backend", "greedy_completions", "compare_tokens", "prompt_logprobs",
           "teacher_forced_agreement", "runnable_here"]
