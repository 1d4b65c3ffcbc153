"""The seed projection's assumption rows (servebook.profile.ranges): their figures come from table seed_attention_12, the
hardware files and the profile run, and follow them when they change."""

from pathlib import Path

import pytest

from servebook.paths import data_dir
from servebook.profile import projection, ranges
from servebook.profiles import load_profile
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-prof"


def test_the_attention_move_is_zero_only_where_no_version_keys_on_the_capability():
    att = ranges.attention_12()
    moves, words = ranges._attention_move(att, ranges.SEED_BACKENDS)
    assert moves == {"sglang": 0.0, "vllm": 0.0}
    assert "constants on 9.0 and 12.0 in every version read" in words
    assert "only where 0.5.16 and vLLM cap it" in words                     # the versions with an SM-cap rule
    keyed = [dict(a) for a in att]
    v = next(a for a in keyed if a["engine"] == "vllm")
    v["capability_key"] = "on the capability at :22"
    moves, words = ranges._attention_move(keyed, ranges.SEED_BACKENDS)
    assert moves == {"sglang": 0.0, "vllm": None}
    assert "keys on the capability in vllm 0.26.0: on the capability at :22" in words and "every version read" not in words


def test_the_version_words_quote_the_split_grids_of_the_table():
    att = [dict(a) for a in ranges.attention_12()]
    end, words = ranges._version_words(att)
    assert end == "SGLang 0.5.9's split grid"
    assert "profiled at 0.5.16, whose MLA split grid is 256 on these GPUs; 0.5.9 (studied) launches 8 " in words
    profiled = next(a for a in att if a["version"] == "0.5.16")
    profiled["split_cap_12_0"] = 512
    assert "whose MLA split grid is 256 on the H200, 512 on the RTX PRO 6000;" in ranges._version_words(att)[1]


def test_the_gpus_figures_follow_the_hardware_files(monkeypatch):
    """Another seed GPU of capability 12.0 (the RTX 5090's hardware file): the bandwidth, the split caps and the words
    follow its file."""
    monkeypatch.setattr(projection, "TARGET", "rtx-5090")
    gpu = load_profile("rtx-5090")
    assert f"RTX 5090 {gpu['memory_bandwidth_tbs']} TB/s" in ranges._bandwidth_words()[1]
    v = next(a for a in ranges.attention_12() if a["engine"] == "vllm")
    assert v["split_cap_12_0"] == 2 * gpu["sm_count"] and v["split_cap_9_0"] == 2 * load_profile("h200")["sm_count"]
    monkeypatch.setattr(projection, "TARGET", "b200")                        # capability 10.0: no column for it
    with pytest.raises(ValueError, match="split_cap_10_0"):
        ranges.split_gpus()


def test_the_host_rule_words_state_the_profile_runs_errors():
    """The spans are the whole models' errors of the run (prediction_check's own error_pct for the central rule)."""
    store = RunStore.at(REF)
    errs = [r["error_pct"] for r in store.rows("prediction_check") if r.get("measured_ms")]
    words = ranges._host_rule_words(store)
    assert f"the whole models of h200x1-prof validated ({min(errs):+.0f}% to {max(errs):+.0f}%)" in words
    assert "(it errs +25% to +35% on those models)" in words
    # a run of slices only (h200x1-ref) borrows the check of the run that validated the rule, and says so
    empty = ranges._host_rule_words(_Empty())
    assert f"the whole models of h200x1-prof validated ({min(errs):+.0f}% to {max(errs):+.0f}%)" in empty
    assert "empty-run measured no whole model, so the check is h200x1-prof's" in empty


class _Empty:
    path = "empty-run"

    def rows(self, _table):
        return []


def test_the_shared_memory_words_come_from_the_hardware_files():
    """The attention row's open question quotes each GPU's opt-in shared memory per block from its hardware file."""
    h200, pro = load_profile("h200"), load_profile("rtx-pro-6000")
    assert (h200["shared_memory_per_block_optin_bytes"], pro["shared_memory_per_block_optin_bytes"]) == (227 * 1024, 99 * 1024)
    words = ranges._smem(pro, h200)
    assert "capability 12.0's 101,376 B of shared memory per block (the H200 allows 232,448 B)" in words
    words = ranges._smem({**pro, "shared_memory_per_block_optin_bytes": None}, {**h200, "shared_memory_per_block_optin_bytes": 1024})
    assert "12.0's (not in its hardware file) of" in words and "allows 1,024 B" in words


# -- the words on tiles, splits and slice depth come from the profile run (issue #39's leftovers) --------------------
def test_the_split_words_follow_the_profiled_launches_in_the_traces():
    """Each capped version's profiled split count (its trace's stage-1 grid) against its caps on both GPUs: unchanged
    as recorded; a cap below the profiled count on the seed's GPU is said to change the launch; no trace: not read."""
    from servebook.profile.launches import launch_unchanged, profiled_launch

    store = RunStore.at(REF)
    v = profiled_launch(store, "vllm", "TRITON_MLA", "0.26.0")
    s = profiled_launch(store, "sglang", "triton", "0.5.16")
    assert v["head_blocks"] == s["head_blocks"] == 64 // 16        # Kimi's 64 heads in blocks of BLOCK_H 16
    att = [dict(a) for a in ranges.attention_12()]
    words = ranges._attention_move(att, ranges.SEED_BACKENDS, store)[1]
    assert "only where 0.5.16 and vLLM cap it, which leaves 0.5.16's launch at this context unchanged;" in words
    sg = next(a for a in att if a["version"] == "0.5.16")
    sg["split_cap_12_0"] = s["splits"] // 2
    words = ranges._attention_move(att, ranges.SEED_BACKENDS, store)[1]
    assert (f"which changes this context's launch of 0.5.16 ({s['splits']} splits profiled, caps {sg['split_cap_9_0']} "
            f"and {s['splits'] // 2})") in words
    words = ranges._attention_move(att, ranges.SEED_BACKENDS, _Empty())[1]
    assert "whether that changes this context's launch is not read for 0.5.16 and vLLM: no kept trace" in words
    assert launch_unchanged(16, 264, 376) and launch_unchanged(256, 256, 256) and not launch_unchanged(256, 256, 512)
    assert not launch_unchanged(16, 264, 8) and launch_unchanged(8, 8, 8)


def test_vllm_s_split_count_is_said_fixed_at_capture_from_max_model_len_not_unchanged():
    """vLLM 0.26.0 computes the Triton MLA split count from max_model_len when it captures the decode CUDA graph
    (attention-12.json's split_count_at): its profiled count is the slices' max_model_len's, not a launch the seed's GPU
    leaves unchanged; the words say so as a hypothesis with the profile that settles it, and the cap on the seed's GPU."""
    from servebook.cards import load_card
    from servebook.models import slice_config
    from servebook.profile.launches import profiled_launch
    from servebook.stated.figures import seed_case

    store = RunStore.at(data_dir() / "runs" / "h200x1-ref")
    splits = profiled_launch(store, "vllm", "TRITON_MLA", "0.26.0")["splits"]
    sliced = slice_config(load_card(seed_case()["model"]))["max_position_embeddings"]
    att = ranges.attention_12()
    cap = next(a for a in att if a["engine"] == "vllm")["split_cap_12_0"]
    words = ranges._attention_move(att, ranges.SEED_BACKENDS, store)[1]
    assert "which leaves this context's launch unchanged" not in words
    assert "vLLM's split count is not this context's: it is computed when the decode CUDA graph is captured, from max_model_len (" in words
    assert "vllm/v1/worker/gpu_model_runner.py:2292-2296" in words
    assert f"its profiled {splits} splits are those of the slices' max_model_len, {sliced:,}" in words
    assert f"at most its cap of {cap} on the RTX PRO 6000" in words
    assert "a hypothesis, settled by profiling vLLM's slice with max_model_len at the full model's" in words
    # the profiled count is the capture rule's at the slices' length (8192 // 512 = 16), not the context's (1 split)
    assert splits == max(1, sliced // 512) and splits > 1


def test_the_recorded_capture_citation_holds_in_vllm_s_code():
    """The lines split_count_at cites say what the row says, where vLLM 0.26.0's environment is prepared."""
    import re as _re

    from servebook.engines.envs import resolve_engine
    from servebook.errors import EngineError

    try:
        env = resolve_engine("vllm==0.26.0")
    except EngineError:
        pytest.skip("vllm==0.26.0 is not prepared here (servebook engines add vllm==0.26.0)")
    rec = next(r for r in ranges.recorded_attention() if r["engine"] == "vllm")
    want = {"gpu_model_runner.py:2292-2296": "max_seq_len = self.max_model_len",
            "triton_mla.py:51-53": "UNIFORM_SINGLE_TOKEN_DECODE", ":241-244": "attn_metadata.max_seq_len"}
    files = {"gpu_model_runner.py": "v1/worker/gpu_model_runner.py", "triton_mla.py": "v1/attention/backends/mla/triton_mla.py"}
    for cite, text in want.items():
        assert cite in rec["split_count_at"]["where"]
        name = cite.split(":")[0] or "triton_mla.py"
        lo, hi = map(int, _re.search(r":(\d+)-(\d+)", cite).groups())
        lines = (Path(env.package_dir) / files[name]).read_text().splitlines()[lo - 1:hi]
        assert any(text in ln for ln in lines), (cite, lines)


def test_the_version_words_read_vllm_s_tiles_and_splits():
    from servebook.profile.launches import profiled_launch

    store = RunStore.at(REF)
    att = [dict(a) for a in ranges.attention_12()]
    splits = profiled_launch(store, "vllm", "TRITON_MLA", "0.26.0")["splits"]
    assert f"vLLM's Triton MLA kernel (the same tiles, {splits} splits in its profiled launch) took" in ranges._version_words(att, store)[1]
    next(a for a in att if a["engine"] == "vllm")["block_n"] = 64
    assert "(tiles that differ: block_n 64 against 32) took" in ranges._version_words(att, _Empty())[1]


def test_the_serial_rule_names_the_depth_of_the_slices_it_reads():
    assert "each engine's 2-layer slice's H200 idle per token" in ranges._host_rule_words(RunStore.at(REF))
    # since unit 3, both engines' deeper slices are 12-MoE-layer ones (the two-depth wording: test_seed_verdict)
    words = ranges._host_rule_words(RunStore.at(data_dir() / "runs" / "h200x1-ref"))
    assert "each engine's 13-layer slice's H200 idle per token" in words and "slices of two depths" not in words


def test_the_slow_side_row_says_the_range_is_one_sided_and_where_the_seed_rates_sit():
    """The range's per-kernel ends only shorten the step, and both seed rates sit at or past the slow ends: the last
    row of seed_assumptions says which rows lengthen nothing, names the slow-side ends no row models, and places each
    seed rate from the range itself (a hypothesis of a common fast bias, with its settling profile); it moves nothing."""
    from servebook.profile import comm
    from servebook.profile.projection import seed_figures

    src = RunStore.at(data_dir() / "runs" / "h200x1-ref")
    lat = comm.engine_latencies()
    central = ranges.central_projection(src, lat)
    table = ranges.assumption_table(src, central, lat, 124)
    row = table[-1]
    assert row["assumption"] == "slow-side ends" and row["sglang_ms"] is row["vllm_ms"] is row["gap_ms"] is None
    body = table[:-1]
    assert ranges.projection_range(central, table, seed_figures()) == ranges.projection_range(central, body, seed_figures())
    longer = {r["assumption"] for r in body if any((r[c] or 0) > 0 for c in ("sglang_ms", "vllm_ms"))}
    assert longer == {"host rule", "all-reduce latency"}
    assert "the ends of attention on capability 12.0, shard shapes at TP=8, engine version, bandwidth ratio, bandwidth scaling only shorten" in row["basis"]
    assert "only the host rule and the all-reduce latency have an end that lengthens it" in row["basis"]
    assert "achievable read bandwidth below its datasheet" in row["basis"] and "reading 1/8 of the bytes" in row["basis"]
    rng = {r["who"]: r for r in ranges.projection_range(central, body, seed_figures())}
    s, v = rng["sglang"], rng["vllm"]
    assert f"SGLang's 63.6 tok/s lies {s['seed_ms'] - s['high_ms']:.2f} ms per token past its slow end" in row["basis"]
    # since unit 3 (vLLM's deeper slice GPU-bound, its serial end no longer adding a host-bound slice's idle) vLLM's rate
    # lies past its slow end too; the wording for a rate short of it ("short of its slow end, N%") stays in the code
    assert v["seed_ms"] > v["high_ms"]
    assert f"vLLM's 82.5 tok/s lies {v['seed_ms'] - v['high_ms']:.2f} ms per token past its slow end" in row["basis"]
    assert "hypothesis of a common fast bias" in row["basis"] and "decode-step profile of each engine on the seed's host" in row["basis"]
    # a seed rate in the middle of its range: no common-bias sentence
    mid = {"sglang": 1e3 / s["point_ms"], "vllm": 82.5}
    assert "common fast bias" not in ranges.assumption_table(src, central, lat, 124, seed=mid)[-1]["basis"]
