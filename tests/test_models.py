"""The model builder: a slice of a card with its real dimensions, checked by independent readers
(transformers' own checkpoint loader, and servebook's safetensors-header byte count vs the config count)."""

import json

import pytest

from servebook.errors import ModelError, ParameterError
from servebook.models import build_model, engine_args_of, slice_config
from servebook.roofline import weight_bytes
from servebook.cards import load_card


@pytest.fixture(scope="module")
def dsv3_slice(tmp_path_factory):
    # deepseek-v3 at width / 16: its 3 dense layers and one MoE layer, MLA ranks and head dims as in the card
    return build_model("deepseek-v3", scale=16, out=tmp_path_factory.mktemp("m") / "dsv3", progress=None)


def test_slice_keeps_the_cards_attention_and_expert_shapes():
    card = load_card("kimi-k2.5")["config"]["text_config"]
    cfg = slice_config(load_card("kimi-k2.5"))
    assert cfg["num_hidden_layers"] == card["first_k_dense_replace"] + 1  # the dense layers and one MoE layer
    for k in ("hidden_size", "num_attention_heads", "n_routed_experts", "num_experts_per_tok", "kv_lora_rank", "q_lora_rank",
              "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "moe_intermediate_size", "vocab_size"):
        assert cfg[k] == card[k], k
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and "quantization_config" not in cfg
    # what SGLang reads and transformers' config may lack (../shared/gpu-engines/README.md)
    assert cfg["moe_layer_freq"] == 1 and cfg["topk_method"] == "noaux_tc" and cfg["ep_size"] == 1


def test_transformers_loads_the_checkpoint_names_without_missing_keys(dsv3_slice):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(str(dsv3_slice), output_loading_info=True, dtype=torch.bfloat16)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    cfg = json.loads((dsv3_slice / "config.json").read_text())
    assert type(model.model.layers[3].mlp).__name__ == "DeepseekV3MoE"  # the MoE layer is really there
    tok = AutoTokenizer.from_pretrained(str(dsv3_slice))
    assert len(tok) == cfg["vocab_size"]  # every id the model can emit decodes
    assert tok.decode([cfg["vocab_size"] - 1]) == f"<|x{cfg['vocab_size'] - 1}|>"


def test_stated_bytes_per_token_match_the_safetensors_headers(dsv3_slice):
    meta = json.loads((dsv3_slice / "servebook_model.json").read_text())
    counted = weight_bytes(dsv3_slice)  # from the files, not the config
    assert abs(meta["facts"]["slice_bytes_per_token"] - counted["bytes_per_token"]) / counted["bytes_per_token"] < 0.01
    assert abs(meta["facts"]["slice_total_bytes"] - counted["total_bytes"]) / counted["total_bytes"] < 0.01
    assert meta["facts"]["full_layers"] == 61 and meta["facts"]["full_bytes_per_token_bf16"] > meta["facts"]["slice_bytes_per_token"]


def test_dummy_weights_need_the_engines_dummy_loader(tmp_path):
    d = build_model("kimi-k2.5", weights="dummy", out=tmp_path / "k", progress=None)
    assert not list(d.glob("*.safetensors"))
    assert engine_args_of(d, "sglang") == ["--load-format", "dummy"] == engine_args_of(d, "vllm")
    with pytest.raises(ModelError, match="transformers serve cannot load it"):
        engine_args_of(d, "transformers")


def test_a_model_built_earlier_is_not_built_again(tmp_path):
    """Cached by its parameters: the same parameters again return the directory as it is (its files untouched); another
    seed builds it again."""
    said: list[str] = []
    d = build_model("kimi-k2.5", weights="dummy", out=tmp_path / "k", progress=said.append)
    stamp = (d / "config.json").stat().st_mtime_ns
    assert build_model("kimi-k2.5", weights="dummy", out=tmp_path / "k", progress=said.append) == d
    assert said[-1].endswith("(built earlier)") and (d / "config.json").stat().st_mtime_ns == stamp
    build_model("kimi-k2.5", weights="dummy", seed=1, out=tmp_path / "k", progress=said.append)
    assert said[-1].startswith("[model] ready")


@pytest.mark.parametrize("kw, name", [({"card": "no-such-card"}, "card"), ({"card": "kimi-k2.5", "scale": 7}, "scale"),
                                      ({"card": "kimi-k2.5", "layers": 99}, "layers"), ({"card": "kimi-k2.5", "weights": "zeros"}, "weights")])
def test_bad_input_is_one_line_naming_the_parameter(kw, name, tmp_path):
    with pytest.raises(ParameterError) as e:
        build_model(out=tmp_path / "x", progress=None, **kw)
    assert e.value.name == name and "\n" not in str(e.value)
