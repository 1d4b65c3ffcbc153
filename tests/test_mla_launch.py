"""The Triton MLA decode kernel's launch, read from the engines' own code (servebook.selection.mla_launch), against the
rows recorded in data/reference/attention-12.json (table seed_attention_12, chapter 06 of the what-if book)."""


import pytest

from servebook.errors import EngineError
from servebook.profile import ranges
from servebook.profile.ranges import attention_row, recorded_attention, split_gpus
from servebook.profiles import load_profile
from servebook.selection.mla_launch import capability_words, read_mla_launch_source, split_cap

# the versions CI prepares (tests/test_selection.py, test_whatif_book.py, test_whatif_vllm.py, test_engines_cli.py build
# them with add_engine): here they are built too when missing, so the check runs in CI; the others only where prepared
CI_BUILDS = {"sglang==0.5.9", "sglang==0.5.23", "vllm==0.10.2", "vllm==0.26.0", "vllm==0.33.0"}
# the versions only this file needs, whose source is all it reads: built static-only (the engine alone, no requirements;
# 1.8 s for sglang 0.5.16 with an empty uv cache, 2026-12-04), so the row the verdict quotes is checked in CI too
STATIC_BUILDS = {"sglang==0.5.16"}

SNIPPET = '''
import triton
_is_hip = is_hip()
_BH = 16

def _decode_grouped_att_m_fwd(q, k_buffer, v_buffer, num_kv_splits, is_mla=False, tune=False):
    BLOCK = 32
    Lk = k_buffer.shape[-1]
    Lv = v_buffer.shape[-1]
    if _is_hip and Lk >= 576:
        BLOCK = 16
    if Lk == 576:
        BLOCK_DMODEL = 512
        BLOCK_DPE = triton.next_power_of_2(Lk - Lv)
    else:
        BLOCK_DMODEL = triton.next_power_of_2(Lk)
        BLOCK_DPE = 0
    num_stages = 2
    warps = 4
    if tune:
        warps = 8
    if torch.cuda.get_device_capability()[0] == 12:
        num_stages = 1
    kernel[grid](q, BLOCK_N=BLOCK, BLOCK_H=_BH, BLOCK_DMODEL=BLOCK_DMODEL, BLOCK_DPE=BLOCK_DPE, num_warps=warps,
                 num_stages=num_stages)
'''


def test_the_reader_follows_the_launch_and_its_branches():
    r = read_mla_launch_source(SNIPPET, "pkg/decode.py")
    assert (r["block_n"], r["block_h"], r["block_dmodel"], r["block_dpe"]) == (32, 16, 512, 64)
    assert r["where"] == "pkg/decode.py:6-25 (_decode_grouped_att_m_fwd)"
    # a caller's argument decides the warps, the capability test the stages: neither is guessed
    assert r["num_warps"] is None and r["num_stages"] is None and set(r["unread"]) == {"num_warps", "num_stages"}
    assert [t["line"] for t in r["open_tests"]] == [20, 22]
    assert [(b["line"], b["rocm_only"], b["on_cuda"]) for b in r["platform_branches"]] == [(10, True, False)]
    assert [b["line"] for b in r["capability_branches"]] == [22]
    assert capability_words(r) == "on the capability at :22 (a branch for ROCm only, :10)"


def test_a_source_without_the_function_is_a_one_line_error():
    with pytest.raises(EngineError, match=r"^x\.py defines no _decode_grouped_att_m_fwd") as err:
        read_mla_launch_source("def other():\n    pass\n", "x.py")
    assert "\n" not in str(err.value)
    with pytest.raises(EngineError, match=r"cannot parse y\.py") as err:
        read_mla_launch_source("def (:\n", "y.py")
    assert "\n" not in str(err.value)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def test_an_unprepared_version_computes_its_split_caps_from_the_hardware_files():
    """Without an environment a row evaluates its recorded split rule at data/hardware's SM counts: vLLM caps at 2 x SMs,
    SGLang 0.5.16 at the SMs' next power of two (at least the kv-split default), 0.5.9 takes the default uncapped - the
    rules written here as the engines' code states them, apart from the recorded text the row evaluates."""
    h200, rtx = load_profile("h200"), load_profile("rtx-pro-6000")
    assert set(split_gpus()) == {"split_cap_9_0", "split_cap_12_0"} and (h200["capability"], rtx["capability"]) == ("9.0", "12.0")
    recs = {r["version"]: r for r in recorded_attention()}
    rows = {v: attention_row(r, None, None, "no environment here") for v, r in recs.items()}
    caps = {v: (r["split_cap_9_0"], r["split_cap_12_0"]) for v, r in rows.items()}
    assert caps["0.26.0"] == (2 * h200["sm_count"], 2 * rtx["sm_count"])
    default = recs["0.5.16"]["kv_splits_default"]["value"]
    assert caps["0.5.16"] == (max(default, _pow2(h200["sm_count"])), max(default, _pow2(rtx["sm_count"])))
    assert caps["0.5.9"] == (recs["0.5.9"]["kv_splits_default"]["value"],) * 2
    # the recorded prose beside them names the same figures
    assert f"{h200['sm_count']} and {rtx['sm_count']} SMs round up to {caps['0.5.16'][1]}" in rows["0.5.16"]["splits"]
    for v, r in rows.items():
        assert r["read"].startswith("recorded (attention-12.json): no environment here; the split caps = "), v
        assert {k: r[k] for k in ("block_n", "num_stages", "where")} == {k: recs[v][k] for k in ("block_n", "num_stages", "where")}


def test_the_split_rule_is_evaluated_not_assumed():
    """A changed rule changes the caps; a rule that does not cap by the SM count, or takes an argument the reader cannot
    give, is a one-line error."""
    rec = next(r for r in recorded_attention() if r["engine"] == "vllm")
    rule = rec["split_rule"]
    four = {**rule, "source": rule["source"].replace("_SPLIT_OCCUPANCY_MULTIPLIER = 2", "_SPLIT_OCCUPANCY_MULTIPLIER = 4")}
    assert four["source"] != rule["source"]
    row = attention_row({**rec, "split_rule": four}, None, None, "a changed rule")
    assert (row["split_cap_9_0"], row["split_cap_12_0"]) == tuple(4 * p["sm_count"] for p in split_gpus().values())
    by_context = {**rule, "source": "def _compute_num_kv_splits(max_seq_len, sm_count):\n    return max_seq_len // 512\n"}
    with pytest.raises(EngineError, match="no cap by SM count") as err:
        split_cap(by_context, 188)
    assert "\n" not in str(err.value)
    odd = {**rule, "source": "def _compute_num_kv_splits(max_seq_len, sm_count, page_size):\n    return sm_count\n"}
    with pytest.raises(EngineError, match="takes page_size") as err:
        split_cap(odd, 188)
    assert "\n" not in str(err.value)


_DECODE = """
def _decode_grouped_att_m_fwd(q, k_buffer, v_buffer, num_kv_splits, is_mla=False):
    Lk = k_buffer.shape[-1]
    kernel[grid](q, BLOCK_N=32, BLOCK_H=16, BLOCK_DMODEL=512, BLOCK_DPE=64, num_warps=4, num_stages=STAGES)
"""


def test_attention_reads_are_kept_until_the_code_changes(tmp_path, host_named_sglang):
    """A host-named SGLang environment (SERVEBOOK_PYTHON_SGLANG): a second read returns what the first read; a changed
    kernel file is read again."""
    site, _ = host_named_sglang()
    kernel = site / "sglang" / "kernels" / "ops" / "attention" / "decode_attention.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text(_DECODE.replace("STAGES", "2"))
    first = ranges._read_launch("sglang", "0.5.16")
    assert first[0]["num_stages"] == 2 and first[3] == "the engine-python sglang==0.5.16 environment"
    assert ranges._read_launch("sglang", "0.5.16") is first
    kernel.write_text(_DECODE.replace("STAGES", "3 + 1"))
    again = ranges._read_launch("sglang", "0.5.16")
    assert again is not first and again[0]["num_stages"] == 4


def _env(spec: str):
    from servebook.engines.envs import resolve_engine

    if spec in CI_BUILDS | STATIC_BUILDS:
        from servebook.selection import add_engine

        return add_engine(spec, progress=None, requirements=spec not in STATIC_BUILDS)
    try:
        return resolve_engine(spec)
    except EngineError:
        pytest.skip(f"{spec} is not prepared here (servebook engines add {spec})")


@pytest.mark.slow
@pytest.mark.envs
@pytest.mark.parametrize("rec", recorded_attention(), ids=lambda r: f"{r['engine']}=={r['version']}")
def test_the_recorded_rows_are_what_the_code_says(rec):
    """Each recorded row against the reader on its version's environment: a difference means the data or the reader is
    wrong, and fails."""
    from servebook.selection.mla_launch import read_default_kv_splits, read_mla_launch, read_split_rule

    env = _env(f"{rec['engine']}=={rec['version']}")
    r = read_mla_launch(env.package_dir, rec["engine"], rec["version"])
    read = {k: r[k] for k in ("where", "block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages")}
    assert read == {k: rec[k] for k in read}
    assert [b["line"] for b in r["platform_branches"]] == rec["platform_lines"]
    assert [b["line"] for b in r["capability_branches"]] == rec["capability_lines"]
    assert capability_words(r) == rec["capability_key"]
    assert read_default_kv_splits(env.package_dir, rec["engine"]) == rec["kv_splits_default"]
    rule = read_split_rule(env.package_dir, rec["engine"])
    assert rule == rec.get("split_rule") and (rule is None) == rec["split_caps_are_default"]
    row = attention_row(rec, r, read_default_kv_splits(env.package_dir, rec["engine"]), "here", rule)
    assert {k: row[k] for k in rec if k in row and k != "read"} == {k: rec[k] for k in rec if k in row and k != "read"}
    recorded = attention_row(rec, None, None, "not read")
    assert {c: row[c] for c in split_gpus()} == {c: recorded[c] for c in split_gpus()}
    assert row["read"].startswith(f"read from {rec['engine']} {rec['version']}'s code")


def test_a_value_the_code_leaves_open_stays_recorded_and_the_row_says_why():
    rec = recorded_attention()[0]
    r = read_mla_launch_source(SNIPPET, "pkg/decode.py")
    row = attention_row(rec, r, None, "a snippet")
    assert (row["num_warps"], row["num_stages"]) == (rec["num_warps"], rec["num_stages"])
    assert row["where"] == r["where"] and row["capability_key"] == capability_words(r)
    assert "num_warps, num_stages as recorded" in row["read"] and "`tune` :20" in row["read"]
