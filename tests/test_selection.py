"""Chapter 02: static reading, transformers what-if, cards, bad input (fast); SGLang envs (slow, cached)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebook.errors import EngineError, ModelError, ParameterError
from servebook.selection import find_sites, list_cards, load_card, materialize, read_selection, render_tree, whatif
from servebook.selection.envs import list_engines, parse_engine_spec, resolve_engine

SYNTH = '''
def is_sm100_supported():
    return cap()[0] == 10

class Args:
    def choose(self, model_arch):
        if model_arch in ["DeepseekV3ForCausalLM"]:
            if is_sm100_supported():
                self.attention_backend = "trtllm_mla"
        elif self.use_mla:
            self.attention_backend = "flashinfer" if has_flashinfer() else "triton"
        else:
            overrides["attention_backend"] = self._default_attn_backend()

    def _default_attn_backend(self):
        if is_hopper():
            return "fa3"
        return "triton"
'''


def test_ast_reader_on_synthetic_source():
    sites = find_sites(SYNTH, {"attention_backend"})
    got = [(s.line, s.target, s.value, s.function) for s in sites]
    assert (9, "attention_backend", '"trtllm_mla"', "Args.choose") in got
    mla = [s for s in sites if s.value == '"triton"' and s.function == "Args.choose"]
    assert mla and [str(c) for c in mla[0].conditions] == [
        'not (model_arch in ["DeepseekV3ForCausalLM"])', "self.use_mla", "not (has_flashinfer())"]
    trt = next(s for s in sites if s.value == '"trtllm_mla"')
    assert trt.hardware and trt.model
    # the called function's returns are followed
    assert any(s.function == "Args._default_attn_backend" and s.value == '"fa3"' for s in sites)
    assert "=> attention_backend" in render_tree(sites)


def test_ast_reader_on_real_transformers_source():
    import transformers

    r = read_selection(Path(transformers.__file__).parent, "transformers", transformers.__version__)
    funcs = {s.function for s in r.sites}
    assert any(f.endswith("get_correct_attn_implementation") for f in funcs)
    assert any(s.value == '"sdpa"' for s in r.sites)


def test_transformers_whatif_embedded_this_host():
    r = whatif("transformers", "embedded")
    assert r["method"] == "dynamic"
    # established by running transformers' own resolution (AutoModelForCausalLM.from_config, no
    # attn_implementation requested): DeepseekV3 supports sdpa -> get_correct_attn_implementation takes "sdpa"
    assert r["attention_backend"] == "sdpa"
    assert r["decided_by"]["function"].endswith("get_correct_attn_implementation")


def test_cards_are_facts_with_sources(tmp_path):
    assert {"kimi-k2.5", "deepseek-v3", "llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b", "embedded"} <= set(list_cards())
    for name in list_cards():
        c = load_card(name)
        assert c["config"]["architectures"] and c["parameters"]["total"] >= c["parameters"]["active"] > 0
        assert c["bytes_per_param"] > 0 and c["sources"]["config"]
    from servebook.embedded import EMBEDDED_CONFIG
    assert load_card("embedded")["config"] == EMBEDDED_CONFIG
    d = materialize("kimi-k2.5", root=tmp_path)
    assert sorted(os.listdir(d)) == ["config.json"]
    assert json.loads((d / "config.json").read_text())["architectures"] == ["KimiK25ForConditionalGeneration"]


def test_bad_input_is_one_line():
    with pytest.raises(EngineError, match="engines: transformers, sglang, vllm"):
        parse_engine_spec("tgi")
    with pytest.raises(EngineError, match="not prepared"):
        resolve_engine("sglang==0.0.0")
    with pytest.raises(EngineError, match="no such interpreter"):
        resolve_engine("sglang", engine_python="/nonexistent/python")
    with pytest.raises(EngineError, match="not installed"):
        resolve_engine("sglang", engine_python=sys.executable)
    with pytest.raises(ModelError, match="no config.json"):
        whatif("transformers", "/tmp")
    with pytest.raises(ModelError, match="no model card"):
        whatif("transformers", "no-such-card")
    with pytest.raises(ParameterError):
        whatif("transformers", "embedded", gpu="no-such-gpu")


def test_unknown_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["FooForCausalLM"], "model_type": "foo_bar"}))
    with pytest.raises(ModelError, match="does not know architecture"):
        whatif("transformers", str(tmp_path))


def test_cli_standalone():
    p = subprocess.run([sys.executable, "-m", "servebook.selection.cli", "whatif", "--engine", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "unknown engine" in p.stderr


# -- SGLang environments (slow: first build downloads pure-python deps; cached afterwards) --------
SGLANG_OLD, SGLANG_NEW = "sglang==0.5.9", "sglang==0.5.23"


@pytest.mark.slow
@pytest.mark.parametrize("spec", [SGLANG_OLD, SGLANG_NEW])
def test_sglang_env_and_static_reading(spec):
    from servebook.selection import add_engine

    env = add_engine(spec, progress=None)
    r = read_selection(env.package_dir, "sglang", env.version)
    values = {s.value for s in r.sites if "attention_backend" in s.target or s.target.startswith("return of")}
    assert '"triton"' in values and '"fa3"' in values
    assert "is_sm100_supported" in r.helpers
