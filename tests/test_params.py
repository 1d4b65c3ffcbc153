import ast
import math
import string

import pytest
from hypothesis import given, settings, strategies as st

from servebook.cli import main
from servebook.errors import ParameterError
from servebook.params import PARAMS, validate


def test_defaults_are_valid():
    values = validate({})
    assert values == {name: p.default for name, p in PARAMS.items()}


@pytest.mark.parametrize("name,value,needle", [
    ("engine", "tgi", "valid engines: transformers, sglang, vllm"),
    ("engine", "sglang==", "NAME==VERSION"),
    ("host", "gpu-box", "valid hosts"),
    ("model", "/no/such/dir", "no such directory"),
    ("smoke", "maybe", "true or false"),
    ("colour", "red", "unknown parameter"),
])
def test_invalid_values_name_the_parameter(name, value, needle):
    with pytest.raises(ParameterError) as info:
        validate({name: value})
    message = str(info.value)
    assert message.startswith(f"parameter '{name}'") and needle in message
    assert "\n" not in message


def test_model_dir_without_config(tmp_path):
    with pytest.raises(ParameterError, match="no config.json"):
        validate({"model": str(tmp_path)})


def test_cli_rejects_bad_engine_in_one_line(capsys):
    assert main(["book", "--engine", "tgi", "--out", "/tmp/unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parameter 'engine'" in err and "valid engines" in err


_text = st.text(alphabet=string.ascii_letters + string.digits + "=/:._-@ ", max_size=30)


@settings(max_examples=150, deadline=None)
@given(engine=_text, host=_text, model=_text)
def test_any_input_is_accepted_or_a_one_line_parameter_error(engine, host, model):
    try:
        validate({"engine": engine, "host": host, "model": model})
    except ParameterError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("parameter '")


@pytest.mark.parametrize("extra, name", [
    ({"max_tokens": "-5"}, "max_tokens"), ({"runs": "0"}, "runs"), ({"api": "foo"}, "api"),
    ({"warmup": "-1"}, "warmup"), ({"seed_profile": "no-such-gpu"}, "seed_profile"),
    ({"matrix_models": "kimi-k2.5,no-such-model"}, "matrix_models"), ({"seed_allreduce_us": "-1"}, "seed_allreduce_us"),
    ({"ceiling_concurrencies": "1,0"}, "ceiling_concurrencies"), ({"ceiling_concurrencies": "1;8"}, "ceiling_concurrencies"),
    ({"ceiling_tokens": "0"}, "ceiling_tokens"),
])
def test_chapter_parameters_are_checked_before_anything_runs(tmp_path, extra, name):
    from servebook.book import run_book

    with pytest.raises(ParameterError) as err:
        run_book({"smoke": True}, out=tmp_path / "site", runs_root=tmp_path / "runs", extra=extra, progress=None)
    assert err.value.name == name and "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()  # nothing ran, no run directory


def test_embedded_model_sizes_chapter_05_and_p_wins():
    """The embedded CPU model runs chapter 05's method on its own workload sizes; -p NAME=VALUE overrides them."""
    from servebook.book import _sized_defaults
    from servebook.chapters import chapters

    selected = [c for c in chapters() if c.number in ("03", "05")]
    declared = {c.stem: {"max_tokens": {}, "input_len": {}, "runs": {}} for c in selected}
    said = []
    sized = _sized_defaults(selected, declared, {"model": "embedded"}, {"input_len": 64}, said.append)
    assert sized == {"05_benchmark_single_stream": {"max_tokens": 32}}
    assert said and "max_tokens=32" in said[0]
    assert _sized_defaults(selected, declared, {"model": "/models/llama"}, {}, said.append) == {}


def test_model_defaults_name_parameters_the_chapters_declare():
    """A sized default for a parameter its chapter no longer declares would be dropped without a word (book._sized_defaults
    keeps only declared names): each one must name a parameter of that chapter, with a value of its declared type."""
    from servebook.chapters import chapters, notebook_parameters
    from servebook.params import MODEL_DEFAULTS

    by_number = {c.number: c for c in chapters()}
    for model, per_chapter in MODEL_DEFAULTS.items():
        for number, values in per_chapter.items():
            declared = notebook_parameters(by_number[number].source)
            for name, value in values.items():
                assert name in declared, f"MODEL_DEFAULTS[{model!r}][{number!r}] names {name!r}, which chapter {number} does not declare"
                assert type(value).__name__ == declared[name]["inferred_type_name"], (model, number, name, declared[name])


@pytest.mark.parametrize("text, smoke, levels", [
    ("1,64", False, (1, 64)), ("1,64", True, (1, 8)),   # the notebook's defaults: what chapter 05 measured before they were parameters
    ("1,8", False, (1, 8)), (" 8, 1 ", False, (1, 8)), ("1,16,64", True, (1, 8)), ("4", False, (4,)),
])
def test_ceiling_levels_from_the_parameter(text, smoke, levels):
    from servebook.bench import ceiling_levels

    assert ceiling_levels(text, smoke) == levels


@pytest.mark.parametrize("text", ["", "0", "1,,8", "1;8", "-1,8", "one", "1.5", "\u00b2"])
def test_ceiling_levels_refuse_what_is_not_a_list_of_concurrencies(text):
    from servebook.bench import ceiling_levels

    with pytest.raises(ParameterError) as err:
        ceiling_levels(text)
    assert err.value.name == "ceiling_concurrencies" and "\n" not in str(err.value)


def test_chapter_05_ceiling_keeps_a_level_near_the_sweeps_top():
    """bench.ceiling_check compares each rate with the client's ceiling at the nearest measured concurrency (log scale):
    sized for a model or not, the sweep's top level must have a ceiling level within a factor of 2, or the busiest rates
    are checked against a ceiling measured at far fewer streams."""
    from servebook.bench import ceiling_levels, concurrency_levels
    from servebook.chapters import chapters, notebook_parameters
    from servebook.params import MODEL_DEFAULTS

    declared = notebook_parameters(next(c for c in chapters() if c.number == "05").source)
    notebook = {k: ast.literal_eval(declared[k]["default"]) for k in ("max_concurrency", "ceiling_concurrencies")}
    assert notebook == {"max_concurrency": 128, "ceiling_concurrencies": "1,64"}
    for sized in [{}, *(per.get("05", {}) for per in MODEL_DEFAULTS.values())]:
        p = {**notebook, **sized}
        top = concurrency_levels(p["max_concurrency"])[-1]
        nearest = min(ceiling_levels(p["ceiling_concurrencies"]), key=lambda lv: abs(math.log(lv / top)))
        assert 0.5 <= nearest / top <= 2, (sized, top, nearest)
