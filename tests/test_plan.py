"""The what-if's plan (``servebook.plan``): rows that supersede, backends the engine's own code accepts on the profiled GPU,
one nccl-tests command and one launch builder for every chapter that prints one.

Fast tests run on a copy of the recorded what-if run (never written in place); the ``envs`` tests ask SGLang 0.5.9's own
code in its prepared environment (built by ``servebook engines add``, or here).
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from servebook import plan
from servebook.cards import load_card
from servebook.nccl import decode_message_sizes, model_dims, nccl_tests_command
from servebook.paths import data_dir
from servebook.results import RunStore
from servebook.selection.accepts import accepted_here, platform_groups

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
SGLANG = "sglang==0.5.9"


@pytest.fixture
def whatif(tmp_path):
    """A copy of the recorded what-if run: what a re-execution of its chapters 03-05 starts from."""
    run = tmp_path / "whatif"
    shutil.copytree(WHATIF, run, ignore=shutil.ignore_patterns("notebooks", "*.diff"))
    return RunStore(run)


def _facts(store):
    return plan.host_facts(store, SGLANG, "kimi-k2.5", "rtx-pro-6000")


def _rows(store, table, chapter):
    return [r for r in store.rows(table) if r.get("chapter") == chapter]


# -- 1. a plan executed again supersedes its earlier rows -----------------------------------------------------------------

def test_a_renamed_purpose_supersedes_the_row_an_earlier_execution_wrote(whatif, monkeypatch):
    """The recorded run holds chapter 04's nccl-tests row under its earlier purpose ("... at the batch-1 size ..."); chapter
    04 planned again writes it under its purpose now, and the earlier row no longer stands (it stood beside the new one
    while rows were keyed by their purpose words). Planned a second time, the file is left byte for byte as it was."""
    # an earlier execution's row under words chapter 04 no longer uses (the recorded run held one until 2026-12-05)
    whatif.append("plan_commands", {"chapter": "04", "purpose": "nccl-tests at the batch-1 size (earlier words)",
                                    "command": "all_reduce_perf -b 14336 -e 14336 -g 8 -G 20 -d bfloat16",
                                    "source": plan._PLAN_SOURCE})
    before = {r["purpose"] for r in _rows(whatif, "plan_commands", "04")}
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-05T04:00:00+00:00")
    plan.plan_nccl(whatif, _facts(whatif))
    rows = _rows(whatif, "plan_commands", "04")
    assert len(rows) == len({r["purpose"] for r in rows}) == 3, rows
    assert any("batch-1 size" in p for p in before) and not any("batch-1 size" in r["purpose"] for r in rows)
    kept = {r["purpose"]: r for r in rows}
    first = whatif.table_path("plan_commands").read_bytes()
    monkeypatch.setattr("servebook.results._now", lambda: "2026-12-05T05:00:00+00:00")
    plan.plan_nccl(whatif, _facts(whatif))
    assert whatif.table_path("plan_commands").read_bytes() == first
    # a row computed again with the same words keeps when it was first recorded, a new one is stamped now; the other
    # chapters' rows are untouched
    was = {r["purpose"]: r for r in RunStore(WHATIF).rows("plan_commands")}
    assert kept["the chapter, with the book's checks"]["recorded_at"] == was["the chapter, with the book's checks"]["recorded_at"]
    assert len([r for r in rows if r["command"].startswith("all_reduce_perf")]) == 1
    recorded = [r for r in RunStore(WHATIF).rows("plan_commands") if r["chapter"] != "04"]
    assert [r for r in whatif.rows("plan_commands") if r["chapter"] != "04"] == recorded


def test_superseding_keeps_other_kinds_and_chapters_and_writes_nothing_for_an_empty_plan(tmp_path):
    store = RunStore.at(tmp_path / "run")
    store.append("plan_commands", {"chapter": "03", "purpose": "by hand", "command": "x", "source": "a note"})
    plan._supersede(store, "plan_commands", "03", [plan._cmd("03", "old words", "c")], source=plan._PLAN_SOURCE)
    plan._supersede(store, "plan_commands", "05", [plan._cmd("05", "five", "d")], source=plan._PLAN_SOURCE)
    plan._supersede(store, "plan_commands", "03", [plan._cmd("03", "new words", "c")], source=plan._PLAN_SOURCE)
    assert [(r["chapter"], r["purpose"]) for r in store.rows("plan_commands")] == [
        ("03", "by hand"), ("03", "new words"), ("05", "five")]
    plan._supersede(store, "plan_left_out", "03", [])
    assert not store.table_path("plan_left_out").exists()


# -- 2. only what the engine's own code accepts on the profiled GPU ------------------------------------------------------

def test_the_engines_own_list_is_read_with_its_platform_headers(tmp_path):
    pkg = tmp_path / "eng"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "args.py").write_text('X = 1\nCHOICES = [\n    # Common\n    "a",\n    # NVIDIA specific\n    "b",  # fast\n'
                                         '    # AMD specific\n    "c",\n]\nOTHER = ["a", "b"]\n')
    read = platform_groups(str(pkg), ["c", "b", "a"])
    assert read["where"] == "eng/sub/args.py"
    assert read["groups"] == {"a": ("Common", 4), "b": ("NVIDIA specific", 6), "c": ("AMD specific", 8)}
    (pkg / "sub" / "args.py").write_text('CHOICES = ["a", "b", "c"]\n')  # no headers: nothing to say about platforms
    assert platform_groups(str(pkg), ["a", "b", "c"]) == {}


def test_an_engine_whose_code_cannot_be_read_or_asked_keeps_every_choice_and_says_so():
    kept, left = accepted_here("sglang==0.0.1", "kimi-k2.5", "rtx-pro-6000", ["triton", "aiter"], tp_size=8)
    assert kept == ["triton", "aiter"]
    assert [r["rule"] for r in left] == ["not read", "not asked"] and all(not r["attention"] for r in left)
    assert all("0.0.1" in r["error"] for r in left), left


@pytest.fixture(scope="module")
def sglang_env():
    from servebook.selection import add_engine

    return add_engine(SGLANG, progress=None)


@pytest.mark.slow
@pytest.mark.envs
def test_the_chapter_03_plan_lists_only_what_sglang_accepts_on_capability_12(sglang_env, whatif):
    """The recorded plan listed all 17 choices of SGLang 0.5.9's parser, ROCm, NPU and Intel backends among them. Planned
    again: what its own list files under another platform and what its ServerArgs refuses under the faked RTX PRO 6000 are
    left out, each with the engine's reason, and the rest are planned; one sweep row, under its purpose now."""
    recorded = _rows(RunStore(WHATIF), "plan_commands", "03")
    facts = _facts(whatif)
    plan.plan_backends(whatif, facts)
    rows, left = _rows(whatif, "plan_commands", "03"), _rows(whatif, "plan_left_out", "03")
    planned = {r["attention"] for r in rows if r.get("flag")}
    out = {r["attention"]: r for r in left if r["attention"]}
    # the parser's choices: what the recorded plan lists and what it records as left out (before 2026-12-05 it listed all)
    choices = {r["attention"] for r in recorded if r.get("flag")} | {
        r["attention"] for r in _rows(RunStore(WHATIF), "plan_left_out", "03") if r["attention"]}
    assert planned | set(out) == choices and not planned & set(out) and all(r["of"] == len(choices) for r in left)
    groups = platform_groups(sglang_env.package_dir, sorted(choices))["groups"]
    assert {a for a, r in out.items() if r["rule"] == "platform"} == {
        b for b, (h, _) in groups.items() if h not in ("Common", "NVIDIA specific")}
    assert {"aiter", "ascend", "intel_amx", "intel_xpu", "wave"} <= set(out)
    assert out["trtllm_mha"]["rule"] == "validation" and "only supported on Blackwell GPUs (SM100)" in out["trtllm_mha"]["error"]
    assert {"triton", "flashinfer"} <= planned  # the default's choice, and the one a hardware helper kept from this GPU
    assert rows[1]["attention"] == "flashinfer" and "is_sm100_supported()" in rows[1]["purpose"]
    sweeps = [r for r in rows if r["command"].startswith("servebook book")]
    assert len(sweeps) == 1 and "decode-path agreement" in sweeps[0]["purpose"] and "greedy" not in sweeps[0]["purpose"]
    from servebook.backends.report import whatif_found

    line = next(l for l in whatif_found(whatif, facts, whatif.table("plan_commands").query("chapter == '03'")).splitlines()
                if l.startswith("- Left out"))
    assert f'data-v="{len(out)}"' in line and "AMD specific" in line and "`trtllm_mha`" in line


def test_the_page_says_how_many_were_left_out_and_why_each_figure_recomputed(tmp_path):
    """Chapter 03's what-if line from ``plan_left_out`` rows (as ``accepted_here`` writes them): the count and the list's
    size tagged and recomputed by the registry, each reason once with the backends it covers, a reading that could not be
    made said as such."""
    import pandas as pd

    from servebook.backends.report import whatif_found
    from servebook.quantities import QUANTITIES, pick
    from servebook.stated import stated_on

    store = RunStore.at(tmp_path / "run")
    at = "sglang/srt/server_args.py"
    left = [{"attention": "aiter", "rule": "platform", "reason": 'listed under "AMD specific"', "where": f"{at}:138"},
            {"attention": "wave", "rule": "platform", "reason": 'listed under "AMD specific"', "where": f"{at}:139"},
            {"attention": "trtllm_mha", "rule": "validation", "reason": "refused by its ServerArgs under the faked GPU",
             "error": "ValueError: only SM100", "where": "ServerArgs.__post_init__"},
            {"attention": None, "rule": "not read", "reason": "no headers here"}]
    plan._supersede(store, "plan_left_out", "03", [{"chapter": "03", "of": 17, **r} for r in left])
    facts = {"engine": SGLANG, "model": "kimi-k2.5", "gpus": 8, "profile": "rtx-pro-6000", "capability": "12.0"}
    text = whatif_found(store, facts, pd.DataFrame([{"command": "a"}, {"command": "b"}]))
    line = next(l for l in text.splitlines() if l.startswith("- Left out"))
    plain = re.sub(r"<[^>]+>", "", line)
    assert plain.startswith("- Left out of the plan: 3 of the 17 backends in its list, by its own code: `aiter`, `wave` "
                            f'(listed under "AMD specific" at `{at}:138-139`); `trtllm_mha` (refused by its ServerArgs '
                            "under the faked GPU: `ValueError: only SM100`).")
    assert plain.endswith(" no headers here.")
    for s in stated_on(line):
        assert pick(QUANTITIES[s.name], QUANTITIES[s.name].compute(store), s.of) == s.value, s


# -- 3. one nccl-tests command ------------------------------------------------------------------------------------------

def test_the_nccl_tests_command_spans_the_models_decode_sizes():
    card = load_card("kimi-k2.5")
    sizes = [s["bytes"] for s in decode_message_sizes(model_dims(card)["hidden_size"])]
    cmd = nccl_tests_command(card, 8)
    assert cmd == f"all_reduce_perf -b {sizes[0]} -e {sizes[-1]} -f 2 -g 8 -G 20 -d bfloat16"
    assert all(b == a * 2 for a, b in zip(sizes, sizes[1:])), "-f 2 lands on every decode size"
    assert nccl_tests_command(card, 8, env={"NCCL_PROTO": "LL"}) == "NCCL_PROTO=LL " + cmd


def test_chapter_04_plans_that_command(whatif):
    plan.plan_nccl(whatif, _facts(whatif))
    (row,) = [r for r in _rows(whatif, "plan_commands", "04") if r["command"].startswith("all_reduce_perf")]
    assert row["command"] == nccl_tests_command(load_card("kimi-k2.5"), 8)


# -- 4. one launch builder ----------------------------------------------------------------------------------------------

@pytest.mark.envs
def test_a_fix_reads_the_same_in_the_plan_and_in_the_seed_verdict(sglang_env, whatif):
    """Chapter 03's forced flashinfer launch and chapter 06's launch to try (the root cause's) are the seed verdict's
    ``seed_fixes`` command for the same change, word for word: one builder, the same arguments."""
    facts = _facts(whatif)
    fixes = {f["change"]: f["check_command"] for f in RunStore(WHATIF).rows("seed_fixes") if f["engine"] == "sglang"}
    assert plan.recommended_launch(facts, "flashinfer") == fixes["attention backend flashinfer"]
    from servebook.selection.rootcause import root_causes

    tried = plan.launch_first(facts, root_causes(whatif))
    assert [t["launch"] for t in tried] == [fixes["attention backend flashinfer"]]
    first = plan.seed_first(facts, RunStore(WHATIF).rows("seed_fixes"))
    assert "--host" not in first[0]["launch"] and "--host" not in tried[0]["launch"]
    assert json.dumps(plan.recommended_launch(facts, None, address=True)).count("--host 127.0.0.1 --port") == 1


def test_chapters_04_and_06_print_one_nccl_tests_command(whatif):
    """What-if chapter 04's plan and chapter 06's seed verdict (its "what settles it", and ``seed_fixes``' basis) name the
    same command for the same check."""
    from servebook.profile.fixes import ranked_fixes
    from servebook.profile.verdict import _cause

    plan.plan_nccl(whatif, _facts(whatif))
    (ch04,) = [r["command"] for r in _rows(whatif, "plan_commands", "04") if "all_reduce_perf" in r["command"]]
    tables = {t: RunStore(WHATIF).rows(t) for t in ("seed_comm", "seed_fixes", "seed_range", "seed_projection")}
    assert f"`{ch04}`" in _cause(tables)
    rows = RunStore(WHATIF).rows("seed_projection")
    basis = [f["basis"] for f in ranked_fixes(rows) if f["change"].startswith("the seed's NCCL block")]
    assert basis and all(b.endswith(ch04) for b in basis), basis
