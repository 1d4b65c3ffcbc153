"""Source locations, recorded error text and the what-if's GPU count as the pages write them: inline code or tagged,
never a bare number in prose. Each statement is rendered from Markdown as the book renders it (mistune, nbconvert's
renderer) and read by ``servebook.stated.untagged_numbers``, the rule ``tests/test_stated.py`` applies to every page."""

from __future__ import annotations

import json
import shutil

import mistune
import pandas as pd
import pytest

from servebook import quantities, stated
from servebook.paths import data_dir
from servebook.results import RunStore
from servebook.selection.rootcause import cause_of

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
# a what-if's launch reason as chapter 06 recorded it before source locations were written as code
RECORDED_WHY = "sglang 0.5.9 (hypothesis): is_sm100_supported() kept `flashinfer` (sglang/srt/server_args.py:1824) from this GPU"


def _untagged(markdown: str) -> list[str]:
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(markdown)}</div>'
    return [str(u) for u in stated.untagged_numbers(page)]


def _row() -> dict:
    """Chapter 02's what-if answer for the seed case, as ``selection`` stores it (SGLang 0.5.9 on capability 12.0)."""
    return {"engine": "sglang", "version": "0.5.9", "gpu": "rtx-pro-6000", "capability": "12.0", "model": "kimi-k2.5",
            "method": "dynamic", "attention_backend": "triton", "assumptions": {"cuda_version": "12.9"},
            "decided_by": {"where": "sglang/srt/server_args.py:1833", "function": "f"},
            "helper_answers": [{"condition": "not is_sm100_supported()", "condition_line": 1823, "negated": True,
                                "helper": "is_sm100_supported()", "answer": False, "error": None,
                                "defined_at": "sglang/srt/utils/common.py:258"}],
            "alternatives": [{"condition": "is_sm100_supported()", "condition_line": 1823, "would_write": ["flashinfer"],
                              "at": ["sglang/srt/server_args.py:1824"]}]}


def test_code_fences_any_text():
    assert stated.code("return capability.major == 10") == "`return capability.major == 10`"
    fenced = stated.code("a `b` c")
    assert mistune.html(fenced).strip() == "<p><code>a `b` c</code></p>", fenced
    assert mistune.html(stated.code("`x")).strip() == "<p><code>`x</code></p>"


def test_code_locations_makes_each_source_location_code_and_nothing_else():
    made = stated.code_locations(RECORDED_WHY)
    assert made == RECORDED_WHY.replace("(sglang/srt/server_args.py:1824)", "(`sglang/srt/server_args.py:1824`)")
    assert _untagged(RECORDED_WHY) and not _untagged(made)  # the recorded text fails the rule; the shown one passes
    assert stated.code_locations(made) == made  # a location already code stays as it is
    both = "at `vllm/platforms/cuda.py:131` and cuda.py:131 (``a ` b.py:2``)"
    assert stated.code_locations(both) == "at `vllm/platforms/cuda.py:131` and `cuda.py:131` (``a ` b.py:2``)"
    for text in ("sglang 0.5.9 on capability 12.0, 8x rtx-pro-6000", "recorded 2026-12-02T04:43:52+00:00", "ratio 1.5:1"):
        assert stated.code_locations(text) == text


def test_root_cause_states_source_locations_as_code():
    c = cause_of(_row())
    assert c["decision"] == "hypothesis"
    for where in ("sglang/srt/server_args.py:1833", "sglang/srt/utils/common.py:258",
                  "sglang/srt/server_args.py:1823", "sglang/srt/server_args.py:1824"):
        assert f"`{where}`" in c["cause"], (where, c["cause"])
    assert not _untagged(c["cause"]), c["cause"]
    # with the backend's own capability check answering True: a root cause, its check (code with numbers) shown as code
    row = _row() | {"resolved": {"candidates": [{"backend": "flashinfer", "class": "X", "valid": True, "supports_capability": True,
                                                 "capability_check_at": ["/x/site-packages/sglang/k.py", 3],
                                                 "capability_check": "return capability.major in [10, 12]"}]}}
    c = cause_of(row)
    assert c["decision"] == "fallback" and "`sglang/k.py:3`" in c["cause"] and "`return capability.major in [10, 12]`" in c["cause"]
    assert not _untagged(c["cause"]), c["cause"]


def test_whatif_launch_reason_recorded_before_shows_its_location_as_code(tmp_path):
    from servebook.findings.launch import launch_commands

    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"parameters": {"engine": "sglang==0.5.9", "profile": "rtx-pro-6000"}})
    store.append("recommended_launch", {"launch": "python -m sglang.launch_server --attention-backend flashinfer", "why": RECORDED_WHY})
    (lc,) = launch_commands(store)
    assert "(`sglang/srt/server_args.py:1824`)" in lc["why"][0]
    assert not _untagged("- " + "; ".join(lc["why"]) + "."), lc["why"]


def test_launch_first_writes_its_reason_with_code(tmp_path):
    """Chapter 06's launch to try first, from the root cause, with the engine's own parser checking the command (the
    prepared SGLang 0.5.9 environment, as the what-if book uses it)."""
    from servebook import plan

    store = RunStore.at(tmp_path / "run")
    store.write_manifest({"parameters": {}})
    shutil.copy(WHATIF / "probe.json", store.path / "probe.json")
    facts = plan.host_facts(store, "sglang==0.5.9", "kimi-k2.5", "rtx-pro-6000")
    if facts["engine_python"] is None:
        pytest.skip("no prepared sglang==0.5.9 environment (servebook engines add sglang==0.5.9)")
    (first,) = plan.launch_first(facts, [cause_of(_row())])
    assert first["why"] == stated.code_locations(RECORDED_WHY) and first["decision"] == "hypothesis"
    assert "--attention-backend flashinfer" in first["launch"] and "--tensor-parallel-size 8" in first["launch"]
    assert not _untagged(first["why"])
    assert not plan.launch_first(facts, [cause_of(_row() | {"gpu": "b200"})])  # another profile's cause: nothing to try here


def test_whatif_answers_tag_the_gpu_count_and_show_locations_and_errors_as_code():
    from servebook.backends.report import whatif_found, whatif_questions
    from servebook.nccl.report import whatif_questions as nccl_questions

    store = RunStore(WHATIF)
    facts = {"engine": "sglang==0.5.9", "model": "kimi-k2.5", "profile": "rtx-pro-6000", "capability": "12.0",
             "gpus": json.loads((WHATIF / "probe.json").read_text())["gpu_count"], "interconnect": "PCIe"}
    floor = pd.DataFrame([r for r in store.rows("roofline") if r.get("chapter") == "04"])
    said = " ".join(a for _, a in nccl_questions(floor, facts))
    tags = [s for s in stated.stated_on(mistune.html(said), "04") if s.name == "host_gpu_count"]
    assert [(t.value, t.text) for t in tags] == [(facts["gpus"], str(facts["gpus"]))]
    assert quantities.expected(store, "host_gpu_count", None) == facts["gpus"]  # recomputed from the run's gpus table
    assert not _untagged(said), said
    cmds = pd.DataFrame(store.rows("plan_commands"))
    for text in [a for _, a in whatif_questions(store, facts, cmds)] + [whatif_found(store, facts, cmds)]:
        assert not _untagged(text), text
    assert "<code><span class=\"sb-q\"" in whatif_found(store, facts, cmds)  # the failure's text: tagged, shown as code
    assert any("(`sglang/srt/server_args.py:1833`)" in a for _, a in whatif_questions(store, facts, cmds))

