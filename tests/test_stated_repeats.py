"""Work done once: a reference file read once while it is unchanged, chapter 04's reference prediction computed once per
layer count, one rule for a word cut inside an unclosed bracket."""

from __future__ import annotations

import json
import os

import pytest


def test_a_reference_file_is_read_once_while_unchanged_and_again_when_it_changes(tmp_path, monkeypatch):
    from servebook.stated import figures

    (tmp_path / "reference").mkdir()
    path = tmp_path / "reference" / "case.json"
    path.write_text(json.dumps({"tp": 8, "tok": {"a": 1.0}}))
    monkeypatch.setattr(figures, "data_dir", lambda: tmp_path)
    reads = []
    real = type(path).read_text
    monkeypatch.setattr(type(path), "read_text", lambda self, *a, **k: reads.append(self.name) or real(self, *a, **k))
    first = figures.reference("case")
    first["tok"]["a"] = -1.0  # a caller changing what it was given changes nobody else's
    assert figures.reference("case") == {"tp": 8, "tok": {"a": 1.0}} and reads == ["case.json"]
    path.write_text(json.dumps({"tp": 16, "tok": {"a": 1.0}}))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new modification time whatever the clock's grain
    assert figures.reference("case")["tp"] == 16 and reads == ["case.json", "case.json"]


def test_the_reference_prediction_is_computed_once_per_layer_count(monkeypatch):
    from servebook.nccl import figures
    from servebook.nccl import quantities as nq
    from servebook.stated.text import MISSING

    if not (figures.reference_store().path / "manifest.json").exists():
        pytest.skip("no reference NCCL run (data/runs/h200x2-nccl) in this checkout")
    calls = []
    real = figures.reference_prediction
    monkeypatch.setattr(figures, "reference_prediction", lambda layers, store=None: calls.append(layers) or real(layers, store))
    nq._ref_predictions(figures.reference_store()).clear()  # whatever an earlier test computed
    said = {f: nq._ref_prediction(f"3 layers | {f}") for f in ("default ms per token", "pick", "reason")}
    assert calls == [3] and all(v is not MISSING for v in said.values()), said
    assert said == {k: v for k, v in real(3).items() if k in said}
    nq._ref_prediction("5 layers | pick")
    assert calls == [3, 5]


@pytest.mark.parametrize("text, cut", [
    ("supported: dict_keys(['ApertusForCausalLM', 'Aquil", "Aquil"),
    ("at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, lon", None),  # '<' is no bracket here
    ("void kernel(at::TensorIteratorBase&, at::native::(anonymo", "anonymo"),
    ("ValueError: x (y)", None),
    ("a finished sentence (with its bracket closed) ends here", None),
])
def test_one_rule_says_where_a_word_was_cut_inside_a_bracket(text, cut):
    """``marked`` marks exactly what the contradiction check finds unmarked: the same ``cut_word``."""
    from servebook.stated.consistency import contradictions
    from servebook.stated.text import ELLIPSIS, cut_word, marked

    assert cut_word(text) == cut
    assert marked(text) == (text[: -len(cut)] + ELLIPSIS if cut else text)
    page = {"p.html": f"<p>whatif: {text}</p>"}
    assert bool(contradictions(page, kinds=("cut off",))) == (cut is not None)
    assert contradictions({"p.html": f"<p>whatif: {marked(text)}</p>"}, kinds=("cut off",)) == []
