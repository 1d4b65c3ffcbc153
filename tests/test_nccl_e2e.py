"""Chapter 04 end to end: the engine restarted per setting and measured with chapter 05's client (a real engine,
transformers serve on the embedded model; at TP=1 here, since CI has no GPU), and the engines' own all-reduce lines."""

import pytest

from servebook.engines import get_engine
from servebook.nccl.e2e import SEED_ENV, allreduce_lines, tp_decode_check, tp_settings
from servebook.results import RunStore


def test_settings_put_nccl_behind_the_custom_allreduce_switch():
    sets = tp_settings(get_engine("sglang"), best="NCCL_GRAPH_MIXING_SUPPORT=0")
    assert [s["setting"] for s in sets] == ["engine default", "custom all-reduce off",
                                            "custom all-reduce off + NCCL_GRAPH_MIXING_SUPPORT=0", "custom all-reduce off + seed block"]
    assert sets[0]["args"] == [] and all(s["args"] == ["--disable-custom-all-reduce"] for s in sets[1:])
    assert sets[2]["env"] == {"NCCL_GRAPH_MIXING_SUPPORT": "0"} and sets[3]["env"] == SEED_ENV
    assert [s["setting"] for s in tp_settings(get_engine("vllm"), best="default", seed=False)] == ["engine default", "custom all-reduce off"]


def test_allreduce_lines_are_the_engines_own():
    log = "\n".join([
        "[2026-11-30 10:00:00 TP0] Load weight begin",
        # SGLang 0.5.16 distributed/device_communicators/custom_all_reduce_v2.py:228
        "[2026-11-30 10:00:01 TP0] All Reduce config: symmetric_memory = 8.00 MB, local_buffer = 0.50 MB, multicast = False",
        # vLLM 0.26.0 distributed/device_communicators/custom_all_reduce.py:78
        "(Worker) INFO custom_all_reduce.py:78 Custom allreduce is disabled because of missing custom allreduce library",
        "NCCL version 2.28.9+cuda13.0",
        "unrelated line"])
    got = allreduce_lines(log)
    assert len(got) == 3 and "symmetric_memory" in got[0] and "disabled" in got[1] and got[2].startswith("NCCL version")


@pytest.mark.slow
def test_one_restart_per_setting_measured_and_resumable(embedded_model, tmp_path, no_leftover_servers):
    store = RunStore.open(tmp_path, "local", "e2e")
    sets = [{"setting": "engine default", "args": [], "env": {}},
            {"setting": "with an env", "args": [], "env": {"NCCL_PROTO": "LL"}}]
    rows = tp_decode_check(get_engine("transformers"), embedded_model, store, sets, tp=1, runs=2, warmup=1, max_tokens=16,
                           concurrency=2, progress=None)
    assert [r["outcome"] for r in rows] == ["ok", "ok"]
    assert all(r["decode_tok_s"] > 0 and r["c2_throughput_tok_s"] > 0 for r in rows)
    assert {r["decode_timed_to"] for r in store.rows("tp_e2e")} == {"last token"}  # the rule each row was timed by
    assert " NCCL_PROTO=LL " in " " + rows[1]["launch"] and "NCCL_PROTO" not in rows[0]["launch"]  # it reached the server's environment
    again = tp_decode_check(get_engine("transformers"), embedded_model, RunStore.at(store.path), sets, tp=1, progress=None)
    assert len(store.rows("tp_e2e")) == 2 and [r["setting"] for r in again] == ["engine default", "with an env"]


def test_rows_timed_by_two_decode_rules_are_never_compared(tmp_path):
    """A resumed run: "engine default" timed by the earlier rule (to the stream's end, no decode_timed_to), the other two
    settings by today's (to the last token). Chapter 04 and the findings pair only rows of one rule: the default is not
    a reference for "custom all-reduce off", which is then no supported change, and both pages say why."""
    from servebook.findings import tp_end_to_end
    from servebook.nccl import figures
    from servebook.nccl.report import _e2e_line

    store = RunStore.at(tmp_path / "run")
    for setting, rate, rule in (("engine default", 40.0, None), ("custom all-reduce off", 60.0, "last token"),
                                ("custom all-reduce off + NCCL_PROTO=LL", 61.0, "last token")):
        store.append("tp_e2e", {"engine": "sglang", "tp": 2, "setting": setting, "decode_tok_s": rate, "decode_tok_s_ci95": 1.0,
                                "env": {}, "args": [], "outcome": "ok", **({"decode_timed_to": rule} if rule else {})})
    rows = {r["setting"]: r for r in figures.e2e_rows(store)}
    off = rows["custom all-reduce off"]
    assert off["vs"] is None and off["measured_ms_per_token"] is None
    assert "timed to the stream's end, this one's to the last token" in off["not_compared"]
    ll = rows["custom all-reduce off + NCCL_PROTO=LL"]   # one rule: compared as before
    assert ll["vs"] == "custom all-reduce off" and ll["not_compared"] is None and ll["measured_ms_per_token"] is not None
    found = {x["setting"]: x for x in tp_end_to_end(store)}
    assert not found["custom all-reduce off"]["supported"] and found["custom all-reduce off"]["verdict"] is None
    assert "never compared" in _e2e_line({**off, "verdict": None})
