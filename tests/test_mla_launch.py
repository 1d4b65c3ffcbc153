"""The Triton MLA decode kernel's launch, read from the engines' own code (servebook.selection.mla_launch), against the
rows recorded in data/reference/attention-12.json (table seed_attention_12, chapter 06 of the what-if book)."""

import pytest

from servebook.errors import EngineError
from servebook.profile.ranges import attention_row, recorded_attention
from servebook.selection.mla_launch import capability_words, read_mla_launch_source

# the versions CI prepares (tests/test_selection.py, test_whatif_book.py, test_whatif_vllm.py, test_engines_cli.py build
# them with add_engine): here they are built too when missing, so the check runs in CI; the others only where prepared
CI_BUILDS = {"sglang==0.5.9", "sglang==0.5.23", "vllm==0.10.2", "vllm==0.26.0", "vllm==0.33.0"}

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


def test_an_unprepared_version_keeps_the_recorded_row_and_says_so():
    rec = recorded_attention()[0]
    row = attention_row(rec, None, None, "no sglang==0.5.9 environment here")
    assert {k: v for k, v in row.items() if k != "read"} == {k: rec[k] for k in row if k != "read"}
    assert row["read"] == "recorded (attention-12.json): no sglang==0.5.9 environment here"


def _env(spec: str):
    from servebook.engines.envs import resolve_engine

    if spec in CI_BUILDS:
        from servebook.selection import add_engine

        return add_engine(spec, progress=None)
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
    from servebook.selection.mla_launch import read_default_kv_splits, read_mla_launch

    env = _env(f"{rec['engine']}=={rec['version']}")
    r = read_mla_launch(env.package_dir, rec["engine"], rec["version"])
    read = {k: r[k] for k in ("where", "block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages")}
    assert read == {k: rec[k] for k in read}
    assert [b["line"] for b in r["platform_branches"]] == rec["platform_lines"]
    assert [b["line"] for b in r["capability_branches"]] == rec["capability_lines"]
    assert capability_words(r) == rec["capability_key"]
    assert read_default_kv_splits(env.package_dir, rec["engine"]) == rec["kv_splits_default"]
    row = attention_row(rec, r, read_default_kv_splits(env.package_dir, rec["engine"]), "here")
    assert {k: v for k, v in row.items() if k != "read"} == {k: rec[k] for k in row if k != "read"}
    assert row["read"].startswith(f"read from {rec['engine']} {rec['version']}'s code")


def test_a_value_the_code_leaves_open_stays_recorded_and_the_row_says_why():
    rec = recorded_attention()[0]
    r = read_mla_launch_source(SNIPPET, "pkg/decode.py")
    row = attention_row(rec, r, None, "a snippet")
    assert (row["num_warps"], row["num_stages"]) == (rec["num_warps"], rec["num_stages"])
    assert row["where"] == r["where"] and row["capability_key"] == capability_words(r)
    assert "num_warps, num_stages as recorded" in row["read"] and "`tune` :20" in row["read"]
