"""vLLM's own selection, resolved by the what-if, checked against a harness that calls vLLM directly.

The expected values are not servebook's: ``tests/harness/vllm_priorities.py`` runs in vLLM's environment,
asks ``vllm.platforms.cuda._get_backend_priorities`` for the list and each backend class for its own
``supports_compute_capability``, with no tracer and no servebook import. The what-if must pick the first
backend of that list whose own check passes, and cite the list's ``return`` as the deciding line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from servebook.selection.rootcause import cause_of

VLLM = "vllm==0.26.0"
HARNESS = Path(__file__).with_name("harness") / "vllm_priorities.py"
CASES = [("rtx-pro-6000", "12.0", "kimi-k2.5", "mla"), ("h200", "9.0", "kimi-k2.5", "mla"),
         ("rtx-pro-6000", "12.0", "llama-3.1-8b", "gqa"), ("b200", "10.0", "llama-3.1-8b", "gqa")]


def _harness(python: str, pairs: list[tuple[str, str]]) -> dict:
    """The harness's answer per (capability, kind), every pair asked in one process (one import of vLLM, 30 s on 2 busy
    cores, instead of one per test)."""
    p = subprocess.run([python, str(HARNESS), *(x for pair in pairs for x in pair)], capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in p.stdout.strip().splitlines() if line.startswith("{")]
    assert len(lines) == len(pairs), p.stderr[-2000:]
    return {(r["capability"], r["kind"]): r for r in lines}


@pytest.fixture(scope="module")
def vllm_env():
    from servebook.selection import add_engine

    return add_engine(VLLM, progress=None)


@pytest.fixture(scope="module")
def vllm_truth(vllm_env):
    """vLLM's own lists and checks for every case below, and for capability 10.0 with MLA (the seed case's test)."""
    return _harness(vllm_env.python, sorted({(c, k) for _g, c, _m, k in CASES} | {("10.0", "mla")}))


@pytest.fixture(scope="module")
def vllm_whatif():
    """``whatif(VLLM, model, gpu=gpu)``, asked once per (model, gpu) in this module: the seed case's test asks the same
    question as the first case."""
    from servebook.selection import whatif

    answers = {}

    def ask(model, gpu):
        if (model, gpu) not in answers:
            answers[(model, gpu)] = whatif(VLLM, model, gpu=gpu)
        return answers[(model, gpu)]

    return ask


@pytest.mark.slow
@pytest.mark.envs
@pytest.mark.parametrize("gpu,capability,model,kind", CASES)
def test_vllm_whatif_matches_vllms_own_priorities(vllm_env, vllm_truth, vllm_whatif, gpu, capability, model, kind):
    from servebook.selection.whatif import _listed_backends, static_reading

    truth = vllm_truth[(capability, kind)]
    answers = truth["supports_capability"]  # True / False / the exception name where the class cannot load there
    first_ok = next(i for i, b in enumerate(truth["priorities"]) if answers[b] is True)
    allowed = [b for b in truth["priorities"][:first_ok + 1] if answers[b] is not False]
    r = vllm_whatif(model, gpu)
    assert r["method"] == "dynamic", r.get("reason")
    assert r["attention_backend"] in allowed, (truth, r["candidates_checked"])
    if allowed == [truth["priorities"][first_ok]]:  # every higher-priority backend answered, so the choice is exact
        assert r["attention_backend"] == truth["priorities"][first_ok]
    where = r["decided_by"]["where"]
    assert where.startswith("vllm/platforms/cuda.py:")
    site = next(s for s in static_reading(vllm_env).sites if s.where == where)
    assert _listed_backends(site) == truth["priorities"]  # the traced line is the list vLLM returned
    assert any("Using" in line and r["attention_backend"] in line for line in r["logs"])  # vLLM's own log line agrees


@pytest.mark.slow
@pytest.mark.envs
def test_seed_case_vllm_is_not_a_fallback_and_says_why(vllm_truth, vllm_whatif):
    r = vllm_whatif("kimi-k2.5", "rtx-pro-6000")
    c = cause_of(r)
    truth = vllm_truth[("10.0", "mla")]  # the list a capability-10 GPU gets, and each backend's own check
    skipped = [b for b in truth["priorities"] if b != r["attention_backend"]]
    ev = {e["backend"]: e for e in c["evidence"]}
    assert c["decision"] == "hardware-selected", c["cause"]
    for b in skipped:
        if b in ev:  # each skipped backend's own check, asked on 12.0, says no
            assert ev[b]["answer"] is False and ev[b]["at"].startswith("vllm/v1/attention/backends/"), ev[b]


def test_hypothesis_without_evidence_and_root_cause_with_it():
    row = {"engine": "sglang", "version": "0.5.9", "gpu": "rtx-pro-6000", "capability": "12.0", "model": "kimi-k2.5",
           "method": "dynamic", "attention_backend": "triton", "assumptions": {"cuda_version": "12.9"},
           "decided_by": {"where": "sglang/srt/server_args.py:1833", "function": "f"},
           "helper_answers": [{"condition": "not is_sm100_supported()", "condition_line": 1823, "negated": True,
                               "helper": "is_sm100_supported()", "answer": False, "error": None}],
           "alternatives": [{"condition": "is_sm100_supported()", "condition_line": 1823, "would_write": ["flashinfer"],
                             "at": ["sglang/srt/server_args.py:1824"]}]}
    c = cause_of(row)
    assert c["decision"] == "hypothesis" and "force `--attention-backend flashinfer`" in c["settle_by"][0]
    # the same row, with the backend's own capability check answering True for 12.0: now a root cause
    row["resolved"] = {"candidates": [{"backend": "flashinfer", "class": "X", "valid": True, "supports_capability": True,
                                       "capability_check_at": ["/x/site-packages/sglang/k.py", 3], "capability_check": "return True"}]}
    c = cause_of(row)
    assert c["decision"] == "fallback" and "sglang/k.py:3" in c["cause"]


def test_side_by_side_and_disagreements_between_engines_and_versions():
    from servebook.selection.compare import disagreements, kernel_family, seed_comparison, side_by_side

    rows = [{"engine": "sglang==0.5.9", "version": "0.5.9", "gpu": "rtx-pro-6000", "capability": "12.0", "model": "kimi-k2.5",
             "method": "dynamic", "attention_backend": "triton", "decided_by": "sglang/srt/server_args.py:1833"},
            {"engine": "vllm==0.26.0", "version": "0.26.0", "gpu": "rtx-pro-6000", "capability": "12.0", "model": "kimi-k2.5",
             "method": "dynamic", "attention_backend": "TRITON_MLA", "decided_by": "vllm/platforms/cuda.py:131"},
            {"engine": "vllm==0.10.2", "version": "0.10.2", "gpu": "rtx-pro-6000", "capability": "12.0", "model": "kimi-k2.5",
             "method": "error", "attention_backend": None}]
    assert kernel_family("TRITON_MLA") == kernel_family("triton") == "triton"
    assert side_by_side(rows)[0]["vllm 0.26.0"] == "TRITON_MLA" and side_by_side(rows)[0]["vllm 0.10.2"] == "(error)"
    d = disagreements(rows)
    assert [x["kind"] for x in d] == ["not comparable", "not comparable"]  # same kernel family: no engine disagreement
    assert {x["between"] for x in d} == {"engines", "versions"}
    rows[1]["attention_backend"] = "FLASHINFER_MLA"
    assert any(x["kind"] == "differs" and x["between"] == "engines" for x in disagreements(rows))
    s = seed_comparison(rows[0] | {"decode_path": {"sampling_backend": "flashinfer"}}, rows[1] | {"attention_backend": "TRITON_MLA"})
    assert s["same_family"] and "cannot explain" in s["verdict"]
    assert [h["aspect"] for h in s["hypotheses"]] == ["MoE runner", "all-reduce", "CUDA-graph capture", "sampling"]
