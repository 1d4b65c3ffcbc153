"""The backends on the deepest slice (issue #39 item 6), each against its engine's seed backend within one recording
unit: the real backends units of h200x1-ref (unit 4, ``h200x1-ref-backends``; unit 5, ``h200x1-ref-backends2``; unit 6,
``h200x1-ref-backends3``), and
h200x1-ref's rows before them (unit 3,
``h200x1-ref-vllm2``, its 12-MoE-layer slices) altered into a SYNTHETIC backends unit for the cases unit 4 does not hold
(two measures that disagree, a backend of another unit)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from servebook.paths import data_dir
from servebook.profile.anchor import common_depth
from servebook.profile.backends_at_depth import backend_comparisons, backends_markdown
from servebook.profile.ranges import SEED_BACKENDS
from servebook.profile.tables import latest_ok
from servebook.results import RunStore
from servebook.stated.text import MISSING

REF = data_dir() / "runs" / "h200x1-ref"
UNIT3, OTHER, UNIT4 = "h200x1-ref-vllm2", "h200x1-ref", "h200x1-ref-backends"   # OTHER: unit 1, another machine
UNIT5, UNIT6 = "h200x1-ref-backends2", "h200x1-ref-backends3"


def _real():
    return RunStore.at(REF).rows("profile_runs")


def _before_unit_4():
    """The reference's rows before its backends units (4, 5 and 6)."""
    return [r for r in _real() if r.get("run_id") not in (UNIT4, UNIT5, UNIT6)]


def _like(r: dict, backend, start: int, busy: float, tpot: float, *, reported="same", at: float = 0.0) -> dict:
    """A SYNTHETIC start made from real row ``r``: another backend, start, GPU busy and served time (factors of r's)."""
    be = "default" if backend is None else backend
    base = re.sub(r" start \d+| \(h200x1-ref[-\w]*\)", "", r["label"]).replace(r["backend"], be)
    label = base + (f" start {start}" if start > 1 else "") + f" ({r['run_id']}, synthetic)"
    return {**r, "backend": backend, "label": label, "start": start, "role": "slice" if start == 1 else "repeat",
            "busy_ms": r["busy_ms"] * busy, "tpot_ms": r["tpot_ms"] * tpot, "taken_at": float(r["taken_at"]) + 60 + at,
            "reported_backend": backend if reported == "same" else reported}


def _synthetic() -> list[dict]:
    rows = _before_unit_4()
    deep = {(r["engine"], r["run_id"]): r for r in rows if r.get("layers") == 13 and r.get("ok") and r.get("start") == 1}
    sg, vl, vl_other = deep[("sglang", UNIT3)], deep[("vllm", UNIT3)], deep[("sglang", OTHER)]
    return rows + [
        _like(sg, "triton", 2, 1.0006, 0.9994),                       # the seed's second start in unit 3
        _like(sg, "flashinfer", 1, 0.95, 1.001, at=1), _like(sg, "flashinfer", 2, 0.9502, 0.9995, at=2),  # kernels only
        _like(vl, "FLASHMLA", 1, 0.93, 0.93, at=3),                   # one start: undecided
        _like(vl, None, 1, 0.90, 0.90, reported="FLASHMLA", at=4), _like(vl, None, 2, 0.901, 0.899, reported="FLASHMLA", at=5),
        # vLLM FLASHMLA in unit 1 too, another machine with no vLLM seed slice at 12 MoE layers: never compared, not pooled
        {**_like(vl, "FLASHMLA", 1, 0.80, 0.80, at=6), "run_id": OTHER, "machine": vl_other["machine"],
         "label": f"vllm kimi-13L int4 FLASHMLA ({OTHER}, synthetic)"},
        {**_like(vl, "FLASHMLA", 2, 0.80, 0.80, at=7), "run_id": OTHER, "machine": vl_other["machine"],
         "label": f"vllm kimi-13L int4 FLASHMLA start 2 ({OTHER}, synthetic)"},
    ]


def _by(rows):
    return {(c["run_id"], c["engine"], c["word"]): c for c in rows}


def test_the_real_backends_unit_decides_flashinfer_and_not_the_one_start_backends():
    """Unit 4 (2026-12-06): SGLang flashinfer against triton, two starts each, lower on both measures beyond the 2%
    margin; vLLM's FLASHMLA and its default one start each: undecided. Nothing is compared across units."""
    rows = _real()
    assert common_depth(latest_ok(rows), SEED_BACKENDS) == 12
    got = _by(backend_comparisons(rows))
    assert set(got) == {(UNIT4, "sglang", "flashinfer"), (UNIT4, "vllm", "FLASHMLA"), (UNIT4, "vllm", "default"),
                        (UNIT5, "sglang", "flashmla"), (UNIT5, "sglang", "fa3"), (UNIT6, "vllm", "FLASHMLA"),
                        (UNIT6, "vllm", "default")}
    # unit 6 (2026-12-07, session 32): vLLM's FLASHMLA and its default against TRITON_MLA, two starts each on a machine
    # of its own: FLASHMLA higher than TRITON_MLA on both measures beyond the 2% margin; the default within it
    fm6, de6 = got[(UNIT6, "vllm", "FLASHMLA")], got[(UNIT6, "vllm", "default")]
    assert fm6["starts"] == de6["starts"] == {"backend": 2, "seed": 2} and fm6["machine"] == de6["machine"]
    assert fm6["verdict"] == {"busy_ms": "b lower", "tpot_ms": "b lower"} and fm6["agree"] is True
    assert all(fm6["diff_pct"][m] > fm6["margin_pct"][m] for m in fm6["diff_pct"])
    assert de6["verdict"] == {"busy_ms": "no difference", "tpot_ms": "no difference"} and de6["agree"] is True
    assert de6["reported"]["backend"] == ["FLASH_ATTN_MLA"] and all(abs(x) < 2 for x in de6["diff_pct"].values())
    fi, fm, de = got[(UNIT4, "sglang", "flashinfer")], got[(UNIT4, "vllm", "FLASHMLA")], got[(UNIT4, "vllm", "default")]
    # unit 5 (2026-12-06, session 29): fa3 lower than triton on both measures beyond the 2% margin; flashmla within it
    fa3, mla = got[(UNIT5, "sglang", "fa3")], got[(UNIT5, "sglang", "flashmla")]
    assert fa3["starts"] == mla["starts"] == {"backend": 2, "seed": 2} and fa3["machine"] == mla["machine"] != fi["machine"]
    assert fa3["verdict"] == {"busy_ms": "a lower", "tpot_ms": "a lower"} and fa3["agree"] is True
    assert mla["verdict"] == {"busy_ms": "no difference", "tpot_ms": "no difference"} and mla["agree"] is True
    assert all(-mla["margin_pct"][m] < mla["diff_pct"][m] < 0 for m in mla["diff_pct"])
    assert fi["starts"] == {"backend": 2, "seed": 2} and fi["verdict"] == {"busy_ms": "a lower", "tpot_ms": "a lower"}
    assert fi["agree"] is True and all(fi["diff_pct"][m] < -fi["margin_pct"][m] for m in fi["diff_pct"])
    assert fm["starts"] == {"backend": 1, "seed": 2} and set(fm["verdict"].values()) == {"undecided"} and fm["agree"] is None
    assert de["backend"] == "auto" and de["reported"]["backend"] == ["FLASH_ATTN_MLA"] and de["agree"] is None
    words = re.sub(r"<span[^>]*>|</span>", "", backends_markdown(list(got.values())))
    assert "| SGLang | `flashinfer` against `triton` | 2 / 2 |" in words and "`default` (the log: `FLASH_ATTN_MLA`)" in words
    assert "| SGLang | `fa3` against `triton` | 2 / 2 |" in words and f"(unit `{UNIT5}`" in words
    # unit 4's one-start rows point at the unit that decided them, without pooling its starts
    assert words.count(f"Unit `{UNIT6}` decided it with two starts or more on each side") == 2
    assert "| vLLM | `FLASHMLA` against `TRITON_MLA` | 2 / 2 |" in words and "| vLLM | `FLASHMLA` against `TRITON_MLA` | 1 / 2 |" in words
    wo6 = [r for r in rows if r.get("run_id") != UNIT6]   # the pointer comes from unit 6's rows, not typed in
    assert "decided it with" not in backends_markdown(backend_comparisons(wo6))
    assert backend_comparisons(_before_unit_4()) == [] and backends_markdown([]) == ""   # units 1-3: no other backend


def test_each_backend_against_its_seed_backend_within_one_unit():
    rows = _synthetic()
    assert common_depth(latest_ok(rows), SEED_BACKENDS) == 12
    got = _by(backend_comparisons(rows))
    assert set(got) == {(UNIT3, "sglang", "flashinfer"), (UNIT3, "vllm", "FLASHMLA"), (UNIT3, "vllm", "default")}
    fi, fm, de = got[(UNIT3, "sglang", "flashinfer")], got[(UNIT3, "vllm", "FLASHMLA")], got[(UNIT3, "vllm", "default")]
    machine = next(r["machine"] for r in rows if r.get("run_id") == UNIT3)
    assert {c["machine"] for c in got.values()} == {machine} and fi["seed"] == "triton" and fm["seed"] == "TRITON_MLA"
    # unit 1's FLASHMLA starts are neither compared nor pooled; the seed's starts are unit 3's only
    assert fm["starts"] == {"backend": 1, "seed": 2} and fi["starts"] == {"backend": 2, "seed": 2}
    seed = [r["busy_ms"] for r in rows if r.get("run_id") == UNIT3 and r.get("layers") == 13 and r["engine"] == "vllm"
            and r.get("backend") == "TRITON_MLA" and r.get("ok")]
    assert len(seed) == 2 and fm["mean"]["seed"]["busy_ms"] == pytest.approx(sum(seed) / 2)
    # verdicts: flashinfer's kernels are lower, its served time is not -> disagree; default lower on both -> agree
    assert fi["verdict"] == {"busy_ms": "a lower", "tpot_ms": "no difference"} and fi["agree"] is False
    assert de["verdict"] == {"busy_ms": "a lower", "tpot_ms": "a lower"} and de["agree"] is True
    assert set(fm["verdict"].values()) == {"undecided"} and fm["agree"] is None
    for c in got.values():   # % of the mean of the two means, anchor.ratio_gap's basis
        for m, x in c["compare"].items():
            assert c["diff_pct"][m] == pytest.approx(200 * x["diff"] / (x["a_mean"] + x["b_mean"]))
            assert c["margin_pct"][m] == pytest.approx(200 * x["margin"] / (x["a_mean"] + x["b_mean"]))
    # the null backend: the engine's default, its raw value and what the engine's log said it used kept
    assert de["backend"] is None and de["reported"]["backend"] == ["FLASHMLA"]
    # without unit 3's vLLM seed slices, unit 3's vLLM backends are not compared (nor against another unit's seed)
    no_seed = [r for r in rows if not (r.get("run_id") == UNIT3 and r.get("backend") == "TRITON_MLA")]
    assert [(c["run_id"], c["engine"], c["word"]) for c in backend_comparisons(no_seed, 12)] == [(UNIT3, "sglang", "flashinfer")]


def _store(tmp_path, rows) -> RunStore:
    """A copy of the reference run's tables (no traces, no logs) with ``rows`` as its profile_runs."""
    path = tmp_path / "h200x1-ref"
    path.mkdir(parents=True)
    for p in [REF / "manifest.json", *REF.glob("*.jsonl")]:
        shutil.copyfile(p, path / p.name)
    (path / "profile_runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return RunStore.at(path)


def test_the_section_states_every_figure_tagged_and_recomputed(tmp_path):
    import mistune
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from servebook import quantities as _all  # noqa: F401  every chapter's quantities registered
    from servebook import stated
    from servebook.stated.registry import expected
    from servebook.stated.tags import stated_on

    store = _store(tmp_path, _synthetic())
    md = backends_markdown(backend_comparisons(store.rows("profile_runs")))
    words = re.sub(r"<span[^>]*>|</span>", "", md)
    assert "`default` (the log: `FLASHMLA`) against `TRITON_MLA`" in words
    assert "served time says no difference beyond the margin, the GPU busy time says `flashinfer` lower. Hypothesis:" in words
    assert "`FLASHMLA` has one start" in words and words.count("Hypothesis") == 1
    table = markdown2html_mistune(md)   # as the book renders it: one table, eight cells a row (no "|" in a tag's subject)
    assert table.count("<table>") == 1 and table.count("<tr>") == 4 and table.count("<td>") == 3 * 8
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    tags = stated_on(md)
    assert {t.name for t in tags} == {"slice_backend_ms", "slice_backend_starts", "slice_backend_gap_ms", "slice_backend_diff_pct",
                                      "slice_backend_margin_pct", "slice_backend_moe_layers"}
    for t in tags:
        assert expected(store, t.name, t.of) == pytest.approx(t.value), (t.name, t.of)
    # the check can fail: another value is not what the run gives, and the real tables give none of these figures
    t = next(t for t in tags if t.name == "slice_backend_ms")
    assert expected(store, t.name, t.of) != pytest.approx(t.value * 1.01)
    assert expected(_store(tmp_path / "real", _before_unit_4()), t.name, t.of) is MISSING


def test_chapter_06_adds_the_section_only_where_rows_exist(tmp_path):
    from servebook.profile.chapter import where_time_goes

    real = where_time_goes(RunStore.at(REF))
    assert "\n\n**Backends at" in real and f"(unit `{UNIT4}`" in real
    before = where_time_goes(_store(tmp_path / "before", _before_unit_4()))
    assert before and "Backends at" not in before
    store = _store(tmp_path, _synthetic())
    section = backends_markdown(backend_comparisons(store.rows("profile_runs")))
    assert section.startswith("**Backends at")
    # after the units' list, a paragraph and table of their own (a blank line: not a list item's continuation)
    assert where_time_goes(store).endswith("\n\n" + section)


def test_chapter_05_names_a_null_backend_as_the_engines_default():
    from servebook.profile import depths

    assert depths._what("vllm", None, "card", "graph", "kimi-k2.5").startswith("vLLM (its default backend, INT4 experts")
    assert "None" not in depths._what("vllm", None, "card", "graph", "kimi-k2.5")
