"""Chapter 02 beyond attention: the decode-path readers on excerpts of the engines' wheels (fast), the "cannot be read"
path (fast), and the engines' own code run under the faked GPU and topology (slow, cached environments).

The excerpts in tests/data/decode_path/ are verbatim source from the wheels; PROVENANCE.json says which file, which lines
and the file's SHA-256. Expected lines are the wheel's own line numbers (excerpt line + first_line - 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servebook.errors import EngineError, ParameterError
from servebook.selection.decode_path import (SETTINGS, conditions_at, decode_path, decode_path_table, read_collectives,
                                             read_custom_ar_rule, read_env_flags, read_greedy_sampling)

DATA = Path(__file__).with_name("data") / "decode_path"
PROV = json.loads((DATA / "PROVENANCE.json").read_text())


def _excerpt(name):
    p = PROV[name]
    return (DATA / name).read_text(), p["file"], p.get("first_line", 1) - 1


def test_custom_all_reduce_pcie_rule_from_sglang_source():
    src, rel, off = _excerpt("sglang-0.5.9-custom_all_reduce-init.py")
    rule = read_custom_ar_rule(src, rel)
    assert rule["condition"] == "world_size > 2 and not full_nvlink"
    assert int(rule["where"].rsplit(":", 1)[1]) + off == 146  # sglang 0.5.9 custom_all_reduce.py:146
    assert "more than two PCIe-only GPUs" in rule["message"]
    assert read_custom_ar_rule("def f(world_size):\n    if world_size > 2:\n        return\n", "x.py") is None  # no NVLink test


def test_moe_scheme_condition_chain_from_sglang_source():
    src, rel, off = _excerpt("sglang-0.5.9-get_moe_scheme.py")
    line = next(i for i, l in enumerate(src.splitlines(), 1) if "return CompressedTensorsWNA16MoE(self)" in l)
    assert line + off == 685  # the line the run traces (compressed_tensors.py:685)
    conds = conditions_at(src, line)
    assert conds[0] == "self._is_wNa16_group_channel(weight_quant, input_quant)"
    assert "not _is_npu" in conds and "not _is_hip" in conds
    assert any(c.startswith("not (self._is_mxint4a16") for c in conds)


def test_greedy_sampling_from_sglang_source():
    src, rel, off = _excerpt("sglang-0.5.9-sampler-forward.py")
    g = read_greedy_sampling(src, rel)
    assert g["call"] == "torch.argmax(logits, -1)" and g["conditions"] == ["sampling_info.is_all_greedy"]
    assert int(g["where"].rsplit(":", 1)[1]) + off == 106
    assert read_greedy_sampling("def f(x):\n    return x\n", "s.py") is None


def test_moe_all_reduce_site_and_its_conditions():
    src, rel, off = _excerpt("sglang-0.5.9-deepseek_v2-moe-forward_normal.py")
    sites = read_collectives("class DeepseekV2MoE:\n" + src, rel)  # the method, in a class of its own name
    ar = [s for s in sites if s["kind"] == "all_reduce"]
    assert len(ar) == 1 and ar[0]["function"] == "DeepseekV2MoE.forward_normal"
    assert "tensor_model_parallel_all_reduce(final_hidden_states)" == ar[0]["call"]
    assert "self.tp_size > 1 and not should_allreduce_fusion" in ar[0]["conditions"][0]
    assert int(ar[0]["where"].rsplit(":", 1)[1]) - 1 + off == 699  # one line added above the excerpt


def test_pcie_switches_from_vllm_envs_lines():
    text = (DATA / "vllm-0.33.0-envs-lines.txt").read_text()
    flags = read_env_flags({"vllm/envs.py": text})
    assert [f["name"] for f in flags] == ["VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"]  # the NIC mapping is no all-reduce switch
    assert flags[0]["defines"] and "bool = False" in flags[0]["text"]
    assert read_env_flags({"vllm/envs.py": "VLLM_ALLREDUCE_USE_SYMM_MEM: bool = True\n"}) == []
    assert [f["name"] for f in read_env_flags({"e.py": "VLLM_ALLREDUCE_USE_SYMM_MEM: bool = True\n"}, pcie_only=False)] == \
        ["VLLM_ALLREDUCE_USE_SYMM_MEM"]


def test_conditions_at_else_branches_are_negated():
    src = "def f(a, b):\n    if a:\n        return 1\n    elif b:\n        return 2\n    else:\n        return 3\n"
    assert conditions_at(src, 3) == ["a"]
    assert conditions_at(src, 5) == ["not a", "b"]
    assert conditions_at(src, 7) == ["not a", "not b"]


# -- what cannot be read says so ------------------------------------------------------------------

def test_a_version_without_the_code_is_not_read_and_says_why(tmp_path):
    from servebook.selection import decode_path as dp
    from servebook.engines.envs import EngineEnv

    (tmp_path / "sglang").mkdir()
    env = EngineEnv("sglang", "9.9", sys.executable, str(tmp_path / "sglang"), "cached")
    failed = {"ok": False, "error": "ModuleNotFoundError: No module named 'torch'"}
    rows = (dp._moe_rows(env, tmp_path, failed, {"quant_method": "compressed-tensors"}) + dp._collective_rows(env, tmp_path)
            + dp._graph_rows(env, tmp_path, failed) + dp._sampling_rows(env, tmp_path, failed))
    assert [r["source"] for r in rows] == ["not read"] * 4
    assert all(r["why"] and r["choice"] is None for r in rows if r["setting"] != SETTINGS[5])
    assert "No module named 'torch'" in rows[0]["why"] and "deepseek_v2.py" in rows[1]["why"]
    ar = dp._allreduce_rows(env, tmp_path, failed, 8)[0]
    assert ar["source"] == "read" and "no PCIe rule found" in ar["choice"] and "torch" in ar["why"]
    assert dp._pcie_rows(env, tmp_path)[0]["choice"].startswith("none")
    assert dp._moe_rows(env, tmp_path, failed, None)[0]["source"] == "not read"  # no quantized experts on the card


def test_bad_input_is_one_line():
    with pytest.raises(ParameterError, match="tp_size"):
        decode_path("sglang==0.5.9", tp_size=0)
    with pytest.raises(ParameterError, match="sglang==VERSION or vllm==VERSION"):
        decode_path("transformers")
    with pytest.raises(EngineError):
        decode_path("sglang==0.0.1")
    rows = decode_path_table(["sglang==0.0.1"])
    assert len(rows) == 1 and rows[0]["source"] == "not read" and "servebook engines add" in rows[0]["why"]
    assert "\n" not in rows[0]["why"]


# -- the engines' own code (slow: cached environments) ---------------------------------------------

@pytest.fixture(scope="module")
def sglang_env():
    from servebook.selection import add_engine

    return add_engine("sglang==0.5.9", progress=None)


@pytest.mark.slow
@pytest.mark.envs
def test_sglang_059_decode_path_runs_its_own_code(sglang_env):
    rows = {r["setting"]: r for r in decode_path("sglang==0.5.9", "kimi-k2.5", gpu="rtx-pro-6000", tp_size=8)}
    assert set(rows) == set(SETTINGS)
    moe, ar = rows["MoE runner"], rows["all-reduce path"]
    assert moe["source"] == "run" and moe["choice"].startswith("CompressedTensorsWNA16MoE") and "fused_marlin_moe" in moe["choice"]
    assert moe["where"] == "sglang/srt/layers/quantization/compressed_tensors/compressed_tensors.py:685"
    assert ar["source"] == "run" and ar["condition"] == "world_size > 2 and not full_nvlink"
    assert ar["where"] == "sglang/srt/distributed/device_communicators/custom_all_reduce.py:147"  # the warning under the rule
    assert "custom all-reduce (CustomAllreduce) OFF at TP=8" in ar["choice"] and "enable_flashinfer_allreduce_fusion=False" in ar["choice"]
    assert rows["CUDA-graph capture sizes"]["source"] == "run" and 1 in rows["CUDA-graph capture sizes"]["sizes"]
    assert rows["PCIe all-reduce options"]["choice"].startswith("none")
    mla = rows["MLA query and cache write"]
    assert mla["source"] == "read" and mla["where"] == "sglang/srt/models/deepseek_v2.py:1763"
    assert "flashinfer" in mla["backends"] and {"triton", "flashmla"} <= set(mla["others"])


def test_a_static_moe_reading_lists_each_method_the_branch_can_return(tmp_path):
    """vLLM 0.10.2 does not know Kimi-K2.5's architecture, so its MoE selection cannot run for it: the reading lists both
    WNA16 methods with their conditions (Marlin when check_moe_marlin_supports_layer passes), and picks neither."""
    from servebook.selection import decode_path as dp
    from servebook.engines.envs import EngineEnv

    src, rel, off = _excerpt("vllm-0.10.2-get_moe_method.py")
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(src)
    env = EngineEnv("vllm", "0.10.2", sys.executable, str(tmp_path / "vllm"), "cached")
    failed = {"ok": True, "probes": {"moe": {"error": "needs the resolved VllmConfig, which failed: ValidationError"}}}
    row = dp._moe_rows(env, tmp_path, failed, {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                               "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 32}}}})[0]
    assert row["source"] == "read" and row["choice"].startswith("one of CompressedTensorsWNA16MoEMethod, "
                                                                "CompressedTensorsWNA16MarlinMoEMethod")
    assert "int4 g32" in row["choice"] and "ValidationError" in row["why"]
    assert "CompressedTensorsWNA16MarlinMoEMethod if quant_config._is_wNa16_group_channel(weight_quant, input_quant) and " \
           "check_moe_marlin_supports_layer(layer, group_size)" in row["condition"]


# -- how the MLA decode step builds its query and writes the cache -----------------------------------

def test_sglang_059_mla_split_read_from_its_source():
    """The backends that get the rope parts apart, from the module-level list the use site sees, and the torch.cat of
    the other branch, at the wheel's own lines (the two excerpts put back at their lines)."""
    from servebook.selection.decode_read import read_mla_core_split

    lst, rel, off_l = _excerpt("sglang-0.5.9-deepseek_v2-absorb-backends.py")
    meth, _, off_m = _excerpt("sglang-0.5.9-deepseek_v2-forward_absorb_core.py")
    src = "\n" * off_l + lst + "\n" * (off_m - off_l - lst.count("\n")) + meth
    split = read_mla_core_split({rel: src})
    assert split["where"] == f"{rel}:1763" and split["function"] == "forward_absorb_core"
    assert split["backends"] == ["fa3", "nsa", "flashinfer", "cutlass_mla", "trtllm_mla", "ascend"]
    assert split["list_at"] == f"{rel}:205" and split["cat_at"] == [f"{rel}:1810", f"{rel}:1811"]
    assert "triton" not in split["backends"] and "flashmla" not in split["backends"]


def test_mla_split_binding_rules_on_synthetic_source():
    """SYNTHETIC modules: a module's own list wins over the name it imports (the last binding); an imported name is read
    where it is defined; a ``not in`` test or a function of another name is no split."""
    from servebook.selection.decode_read import read_mla_cache_writes, read_mla_core_split

    use = ("from pkg.utils import L\n\ndef forward_absorb_core(self, q, k):\n    if self.current_attention_backend in L:\n"
           "        return q\n    else:\n        q = torch.cat([q, k], dim=-1)\n        return q\n")
    utils = 'L = ["fa3", "flashinfer"]\n'
    got = read_mla_core_split({"pkg/model.py": use, "pkg/utils.py": utils})
    assert got["backends"] == ["fa3", "flashinfer"] and got["list_at"] == "pkg/utils.py:1" and got["cat_at"] == ["pkg/model.py:7"]
    own = read_mla_core_split({"pkg/model.py": use + 'L = ["fa3"]\n', "pkg/utils.py": utils})
    assert own["backends"] == ["fa3"] and own["list_at"] == "pkg/model.py:9"
    assert read_mla_core_split({"pkg/model.py": use.replace(" in L", " not in L")}) is None
    assert read_mla_core_split({"pkg/model.py": use.replace("forward_absorb_core", "forward_normal")}) is None
    missing = read_mla_core_split({"pkg/model.py": use})   # the module it imports from is not given: the list is unknown
    assert missing["backends"] is None and missing["list_at"] is None
    writes = ("class Impl:\n    def update(self, kv):\n        ops.concat_and_cache_mla(kv)\n\n"
              "def concat_and_cache_mla(kv):\n    return torch.ops._C.concat_and_cache_mla(kv)\n")
    assert read_mla_cache_writes({"a/b.py": writes}) == [{"where": "a/b.py:3", "function": "Impl.update"}]
    assert read_mla_cache_writes({"a/b.py": "x = 1\n"}) == []
    from servebook.selection.decode_read import read_mla_query_cats
    backends = ("class TritonImpl:\n    def forward_mqa(self, q):\n        if type(q) is tuple:\n"
                "            q = torch.cat(q, dim=-1)\n        return q\n\n"
                "class FlashAttnImpl:\n    def forward_mqa(self, q):\n        return q\n\n"
                "class Prefill:\n    def forward_mha(self, q):\n        return torch.cat(q)\n")
    assert read_mla_query_cats({"m/t.py": backends}) == {"TritonImpl": ["m/t.py:4"], "FlashAttnImpl": []}


def test_the_mla_row_says_what_it_cannot_read(tmp_path):
    from servebook.engines.envs import EngineEnv
    from servebook.selection import decode_path as dp

    for engine in ("sglang", "vllm"):
        (tmp_path / engine).mkdir()
        row = dp._mla_rows(EngineEnv(engine, "9.9", sys.executable, str(tmp_path / engine), "cached"), tmp_path)[0]
        assert row["setting"] == SETTINGS[6] and row["source"] == "not read" and row["choice"] is None and row["why"]
