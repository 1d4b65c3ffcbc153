"""The whole model predicted from two slices of one recording unit only (``profile.tables.prediction_rows``): rows
without machine identity of two UTC days are two units (h200x1-prof: one lent machine per day), never subtracted."""

from __future__ import annotations

import re

import pytest

from servebook.profile.machines import MachineMismatch, recording_unit
from servebook.profile.predict import predict_full
from servebook.profile.tables import prediction_rows, prediction_subject

DAY1, DAY2 = 1_796_119_200.0, 1_796_119_200.0 + 86_400   # 2026-12-01 and 2026-12-02, 10:00 UTC


def _row(label, layers, busy, taken_at, role="slice", engine="sglang", backend="auto", quant="bf16"):
    return {"label": label, "ok": True, "card": "moonlight-16b-a3b", "engine": engine, "backend": backend, "mode": "graph",
            "quant": quant, "role": role, "layers": layers, "busy_ms": busy, "tpot_ms": busy + 0.5, "step_ms": busy + 0.6,
            "taken_at": taken_at, "machine": None}


def test_the_days_are_two_units():
    assert (recording_unit(_row("a", 2, 1.0, DAY1)), recording_unit(_row("b", 2, 1.0, DAY2))) == ("2026-12-01", "2026-12-02")


def test_slices_of_two_days_are_never_paired_and_one_day_still_predicts():
    rows = [_row("sg 2L", 2, 1.0, DAY1), _row("sg 5L", 5, 1.6, DAY2),                          # depths on two days only
            _row("vl 2L", 2, 1.0, DAY1, engine="vllm"), _row("vl 5L", 5, 1.6, DAY1, engine="vllm"),  # one day: predicts
            _row("vl 5L again", 5, 9.0, DAY2, engine="vllm", role="repeat"),
            _row("vl full", 27, 6.0, DAY2, engine="vllm", role="full")]                        # whole model: another day
    got = {r["engine"]: r for r in prediction_rows(rows)}
    sg, vl = got["sglang"], got["vllm"]
    # no pair across the days: the configuration is stated, with which unit holds which depth, and no figure
    assert sg["predicted_ms"] is None and sg["from_labels"] == ["sg 2L", "sg 5L"]
    assert [(h["unit"], h["labels"]) for h in sg["unpaired"]] == [("2026-12-01", ["sg 2L"]), ("2026-12-02", ["sg 5L"])]
    assert "2026-12-01: sg 2L" in sg["reason"] and "one unit" in sg["reason"]
    # the one-day pair predicts as before (slope 0.2 ms per MoE layer), unit named; the other day's whole model and
    # second start are left out, not compared with it
    assert vl["unit"] == "2026-12-01" and vl["from_labels"] == ["vl 2L", "vl 5L"]
    assert vl["slope_ms_per_layer"] == pytest.approx(0.2) and vl["measured_ms"] is None and vl["error_pct"] is None
    assert vl["unpaired"] == [{"unit": "2026-12-02", "labels": ["vl 5L again", "vl full"], "layers": [5, 27]}]


def test_each_unit_predicts_on_its_own_and_is_named():
    rows = [_row("a 2L", 2, 1.0, DAY1), _row("a 5L", 5, 1.6, DAY1),
            _row("b 2L", 2, 1.1, DAY2), _row("b 5L", 5, 2.0, DAY2), _row("b full", 27, 7.0, DAY2, role="full")]
    one, two = prediction_rows(rows)
    assert (one["unit"], two["unit"]) == ("2026-12-01", "2026-12-02")
    assert one["slope_ms_per_layer"] == pytest.approx(0.2) and two["slope_ms_per_layer"] == pytest.approx(0.3)
    assert one["measured_ms"] is None and two["measured_ms"] == 7.5 and two["from_labels"] == ["b 2L", "b 5L", "b full"]
    assert prediction_subject(one) == "moonlight-16b-a3b | sglang | auto | graph | bf16 | 2026-12-01"
    assert prediction_subject(two).endswith(" | 2026-12-02")


def test_a_second_start_pairs_within_its_unit():
    """h200x1-prof's Triton slices: the 1-layer on the second day, the 2-layer's first start on the first and its second
    start on the second; the pair is the second day's."""
    rows = [_row("t 2L", 2, 1.0, DAY1, backend="triton"), _row("t 5L", 5, 1.6, DAY2, backend="triton"),
            _row("t 2L start 2", 2, 1.3, DAY2, backend="triton", role="repeat")]
    (r,) = prediction_rows(rows)
    assert r["unit"] == "2026-12-02" and r["from_labels"] == ["t 2L start 2", "t 5L"]
    assert r["slope_ms_per_layer"] == pytest.approx(0.1)
    assert [h["labels"] for h in r["unpaired"]] == [["t 2L"]]


def test_the_dense_only_slice_is_borrowed_from_the_same_unit_only():
    rows = [_row("bf16 1L", 1, 0.8, DAY1), _row("int4 2L", 2, 1.0, DAY2, quant="card")]
    (r,) = [x for x in prediction_rows(rows) if x["quant"] == "card"]
    assert r["predicted_ms"] is None and [h["unit"] for h in r["unpaired"]] == ["2026-12-01", "2026-12-02"]
    (same,) = prediction_rows([{**rows[0], "taken_at": DAY2}, rows[1]])
    assert same["quant"] == "card" and same["from_labels"] == ["bf16 1L", "int4 2L"] and same["unit"] == "2026-12-02"


def test_predict_full_refuses_two_days_without_identity():
    with pytest.raises(MachineMismatch, match="2 days"):
        predict_full(_row("a", 2, 1.0, DAY1), _row("b", 5, 1.6, DAY2), full_layers=27, dense_layers=1, moe=True)
    assert predict_full(_row("a", 2, 1.0, DAY2), _row("b", 5, 1.6, DAY2), full_layers=27, dense_layers=1,
                        moe=True)["slope_ms"] == pytest.approx(0.2)


def test_the_page_states_a_configuration_recorded_but_not_predicted(tmp_path):
    """Nothing silently vanishes: chapter 05's line for depths of two units names each unit's profiles and what settles
    it; a predicted line names its unit."""
    from servebook.profile.chapter import findings
    from servebook.profile.tables import write_predictions
    from servebook.results import RunStore

    store = RunStore.at(tmp_path / "run")
    for r in (_row("sg 2L", 2, 1.0, DAY1), _row("sg 5L", 5, 1.6, DAY2),
              _row("vl 2L", 2, 1.0, DAY1, engine="vllm"), _row("vl 5L", 5, 1.6, DAY1, engine="vllm")):
        store.append("profile_runs", r)
    write_predictions(store)
    lines = [re.sub(r"<span[^>]*>|</span>", "", x) for x in findings(store) if x.startswith("- moonlight")]
    (sg,) = [x for x in lines if "with sglang" in x]
    (vl,) = [x for x in lines if "with vllm" in x]
    assert "recorded but not predicted" in sg and "`2026-12-01` holds `sg 2L`" in sg and "`2026-12-02` holds `sg 5L`" in sg
    assert "both depths profiled in one unit" in sg
    assert "predicted from the 2,5-layer slices" in vl and "one recording unit, `2026-12-01`" in vl


def test_two_runs_on_one_machine_are_two_units():
    """A second loan can land on the same GPUs: rows of two runs (``run_id``) of one machine are never paired."""
    one = {"machine": "gpu-same", "run_id": "unit-a"}
    two = {"machine": "gpu-same", "run_id": "unit-b"}
    rows = [{**_row("t 2L", 2, 1.0, DAY1), **one}, {**_row("t 5L", 5, 1.6, DAY1), **two}]
    (r,) = prediction_rows(rows)
    assert r["predicted_ms"] is None
    assert [h["unit"] for h in r["unpaired"]] == ["gpu-same of unit-a", "gpu-same of unit-b"]
    rows.append({**_row("t 5L b", 5, 1.6, DAY1), **one})     # the same run's deeper slice pairs
    (r,) = prediction_rows(rows)
    assert r["unit"] == "gpu-same of unit-a" and r["from_labels"] == ["t 2L", "t 5L b"]
