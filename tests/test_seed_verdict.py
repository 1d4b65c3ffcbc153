"""The seed verdict (issue #40): one host rule tested on the validation models, one collective count, each engine's
latency range, the 51.5% check, the range over the assumptions, fixes ranked by expected gain, and the recorded tables
of the what-if run recomputed from the reference run and the data files."""

from __future__ import annotations

import math

import pytest

from servebook.paths import data_dir
from servebook.profile import comm, gains, ranges
from servebook.profile.predict import HOST_RULE, host_combine
from servebook.results import RunStore
from servebook.cards import load_card

WHATIF = data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9"
REF = data_dir() / "runs" / "h200x1-prof"


def _validation():
    """prediction_check rows with a measured whole model, each with its deeper slice's profile row."""
    store = RunStore.at(REF)
    prof = {p["label"]: p for p in store.rows("profile_runs")}
    out = [(r, prof[r["from_labels"][1]]) for r in store.rows("prediction_check") if r.get("measured_ms")]
    assert len(out) >= 4, "the reference run holds the whole-model checks (Moonlight, Llama; both engines)"
    return out


def test_the_projection_host_rule_holds_on_the_validation_models():
    """The rule the projection applies (predict.HOST_RULE through host_combine) predicts each whole model within 5%;
    the serial rule (host idle added) errs by more than +20% on every one of them."""
    for r, deep in _validation():
        idle = float(deep["tpot_ms"]) - float(deep["busy_ms"])
        h = host_combine(r["gpu_full_ms"], float(deep["tpot_ms"]), idle, HOST_RULE)
        assert abs(h["ms"] - r["measured_ms"]) / r["measured_ms"] < 0.05, (r["card"], r["engine"], h["ms"], r["measured_ms"])
        serial = host_combine(r["gpu_full_ms"], float(deep["tpot_ms"]), idle, "serial")["ms"]
        assert (serial - r["measured_ms"]) / r["measured_ms"] > 0.20
        assert h["ms"] == pytest.approx(r["predicted_ms"])          # the predictor states the same rule
    rows = ranges.central_projection(RunStore.at(REF), comm.engine_latencies())["sglang"]
    idle_row = next(x for x in rows if x["category"] == "gpu idle")
    assert idle_row["host_rule"] == HOST_RULE and rows[-1]["host_rule"] == HOST_RULE
    with pytest.raises(ValueError, match="host rule"):
        host_combine(1.0, 1.0, 0.0, "additive")


def test_one_collective_count_read_per_engine():
    card = load_card("kimi-k2.5")
    table = comm.collective_table(card, 8)
    totals = {r["engine"]: r["count"] for r in table if r["site"] == "total"}
    assert totals == {"sglang": 2 * 61 + 2, "vllm": 2 * 61 + 2} and comm.collectives_per_token(card, 8) == 124
    assert all(":" in r["where"] for r in table if r["site"] != "total")            # every site cites file:line
    assert comm.collective_table(card, 1) == [] and comm.collectives_per_token(card, 1) == 0


def test_each_engine_latency_from_its_nccl_environment():
    lat = comm.engine_latencies()
    assert lat["vllm"]["env"] == "seed block" and lat["sglang"]["env"] == "default"
    for L in lat.values():
        assert L["low_us"] <= L["central_us"] <= L["high_us"] and L["central_us"] == pytest.approx((L["low_us"] + L["high_us"]) / 2)
    assert lat["sglang"]["high_us"] == pytest.approx(48.16) and lat["vllm"]["high_us"] == pytest.approx(26.20)
    assert lat["sglang"]["low_us"] == lat["vllm"]["low_us"]                           # one host kind: the same figure
    both = comm.engine_latencies(seed_env_engines=("sglang", "vllm"))
    assert both["sglang"]["high_us"] == pytest.approx(26.20)                          # with the block, SGLang's is vLLM's


def test_the_two_socket_end_is_labelled_as_one_published_host_from_its_figure():
    """The high end read "two CPU sockets, no switches, NCCL's default (SIMPLE)", as if every such host picked SIMPLE: it
    is one published host, whose NCCL version and platform picked it. The label now names that figure and quotes its
    system's hardware line and path from data/reference/allreduce-pcie-published.json."""
    figs = {f["id"]: f for f in comm.load_allreduce_reference()["figures"]}
    lat = comm.engine_latencies()
    for L in lat.values():
        fig = figs[L["high_figure"]]
        system = figs[fig["hardware"].split("same system as ", 1)[1].split()[0]] if fig["hardware"].startswith("same system") else fig
        assert L["high_host"].startswith("two CPU sockets, no switches")
        assert f"one published host ({L['high_figure']}: {system['hardware']}; {fig['path']})" in L["high_host"]
    assert "NCCL 2.28.3" in lat["sglang"]["high_host"] and "(SIMPLE)" not in lat["sglang"]["high_host"]
    assert lat["sglang"]["low_host"] == "one CPU, PCIe switches"


def test_the_seed_share_implies_a_latency_above_the_published_figures():
    imp = comm.implied_latency(124, 0.515, 63.6)
    assert imp["ms_per_token"] == pytest.approx(0.515 * 1e3 / 63.6)
    assert imp["implied_us"] == pytest.approx(imp["ms_per_token"] * 1e3 / 124)
    assert imp["above_published"] and imp["published_high_us"] == pytest.approx(48.16)
    assert not comm.implied_latency(124, 0.2, 63.6)["above_published"]
    assert comm.matching_latency(10.0, 100, 50.0) == pytest.approx((20.0 - 10.0) * 1e3 / 100)
    assert comm.matching_latency(30.0, 100, 50.0) is None


def test_the_range_adds_the_moves_and_holds_the_point():
    src = RunStore.at(REF)
    lat = comm.engine_latencies()
    central = ranges.central_projection(src, lat)
    table = ranges.assumption_table(src, central, lat, 124)
    assert {r["assumption"] for r in table} >= {"host rule", "all-reduce latency", "attention on capability 12.0",
                                                "shard shapes at TP=8", "engine version", "bandwidth ratio"}
    rng = {r["who"]: r for r in ranges.projection_range(central, table, {"sglang": 63.6, "vllm": 82.5})}
    for who in ("sglang", "vllm", "gap"):
        r = rng[who]
        assert r["low_ms"] <= r["point_ms"] <= r["high_ms"]
        col = f"{who}_ms"
        by = {}
        for x in table:   # a row that models no move (the slow-side ends) adds nothing
            by.setdefault(x["assumption"], []).extend([x[col]] if x[col] is not None else [])
        assert r["high_ms"] - r["point_ms"] == pytest.approx(sum(max([0.0] + v) for v in by.values()))
    host = next(x for x in table if x["assumption"] == "host rule")
    assert host["sglang_ms"] > 0 and host["vllm_ms"] > 0                              # serial adds the slices' idle
    ar = [x for x in table if x["assumption"] == "all-reduce latency"]
    assert sum(x["sglang_ms"] for x in ar) == pytest.approx(0.0)                      # central = the middle


def test_fixes_rank_by_expected_gain_flags_before_versions():
    base = {"gain_ms_per_token": None, "basis": "b", "check_command": "c", "label": "predicted"}
    rows = [{"engine": e, "category": "total", "predicted_ms": 15.0} for e in ("sglang", "vllm")]
    lat = comm.engine_latencies()
    fixes = [{**base, "engine": "sglang", "change": "custom PCIe all-reduce instead of NCCL", "label": "not in this version"},
             {**base, "engine": "sglang", "change": "the seed's NCCL block (...)"},
             {**base, "engine": "vllm", "change": "the seed's NCCL block (...)", "label": "already in the seed's launch"},
             {**base, "engine": "sglang", "change": "attention backend flashinfer", "gain_ms_per_token": 0.4}]
    out = gains.rank_by_expected_gain(fixes, rows, lat, 124)
    block = next(f for f in out if f["engine"] == "sglang" and "NCCL block" in f["change"])
    assert block["gain_low_ms"] == 0.0 and block["gain_high_ms"] == pytest.approx(124 * (48.16 - 26.20) / 1e3)
    assert block["expected_gain_ms"] == pytest.approx(block["gain_high_ms"] / 2) and out[0] is block
    custom = next(f for f in out if f["change"].startswith("custom"))
    assert custom["label"] == gains.NEEDS_VERSION and custom["kind"] == "version" and custom["expected_gain_ms"] > 0
    vblock = next(f for f in out if f["engine"] == "vllm")
    gained = [f["expected_gain_ms"] for f in out if f.get("expected_gain_ms") is not None]
    assert gained == sorted(gained, reverse=True)
    assert vblock["expected_gain_ms"] is None and out.index(vblock) >= len(gained)   # after every change with a gain
    # at equal expected gain a flag or environment change ranks before one that needs another version
    tie = [{**base, "engine": "sglang", "change": "custom PCIe all-reduce instead of NCCL", "label": "not in this version"},
           {**base, "engine": "sglang", "change": "MoE expert kernel at the bandwidth roofline",
            "gain_ms_per_token": 2 * custom["expected_gain_ms"]}]
    ranked = gains.rank_by_expected_gain(tie, rows, lat, 124)
    assert ranked[0]["change"].startswith("MoE") and ranked[1]["change"].startswith("custom")


def test_the_attention_alternative_is_a_check_of_unknown_sign_ranked_after_the_gains():
    """The flashinfer row said "low: 0, since no served measurement on the H200 found it faster" and ranked by the
    middle of 0 and its profile's gain, while the one served start found it slower: its low end is not known, so it
    carries no expected gain, is labelled a check of unknown sign, and ranks after every change with a gain."""
    base = {"basis": "b", "check_command": "c", "label": "predicted"}
    rows = [{"engine": e, "category": "total", "predicted_ms": 15.0} for e in ("sglang", "vllm")]
    fixes = [{**base, "engine": "sglang", "change": "attention backend flashinfer", "gain_ms_per_token": 5.0},
             {**base, "engine": "sglang", "change": "the seed's NCCL block (...)", "gain_ms_per_token": None}]
    out = gains.rank_by_expected_gain(fixes, rows, comm.engine_latencies(), 124, served_note="one start: slower")
    fi = next(f for f in out if f["change"].startswith("attention"))
    assert fi["label"] == gains.SIGN_UNKNOWN and fi["label"] != "predicted"
    assert fi["expected_gain_ms"] is None and fi["gain_ms_per_token"] is None and fi["gain_tok_s"] is None
    assert fi["gain_low_ms"] is None and fi["gain_high_ms"] == 5.0
    assert out[-1] is fi and out[0]["expected_gain_ms"] is not None    # after the NCCL block despite a larger high end
    assert "low: 0" not in fi["range_basis"] and "sign of the gain is unknown" in fi["range_basis"]
    assert "(one start: slower)" in fi["range_basis"] and "at least 2 starts each" in fi["range_basis"]


def test_the_attention_alternative_decided_faster_at_depth_on_one_machine_is_ranked_from_zero():
    """Where the profile run compared the alternative with the engine's seed backend at depth on one machine and both
    measures found it faster, its low end is 0 (kept only where the seed's host confirms it) and it is ranked by the
    middle; a comparison undecided by the rule, or one finding it slower, leaves it a check of unknown sign."""
    base = {"basis": "b", "check_command": "c", "label": "predicted", "alternative_backend": "flashinfer"}
    rows = [{"engine": e, "category": "total", "predicted_ms": 15.0} for e in ("sglang", "vllm")]
    fixes = [{**base, "engine": "sglang", "change": "attention backend flashinfer", "gain_ms_per_token": 0.8},
             {**base, "engine": "sglang", "change": "the seed's NCCL block (...)", "gain_ms_per_token": None}]
    deep = {"key": "gpu-x / unit-4", "run_id": "unit-4", "depth": 12, "seed": "triton", "agree": True,
            "starts": {"backend": 2, "seed": 3}, "verdict": {"tpot_ms": "a lower", "busy_ms": "a lower"},
            "diff_pct": {"tpot_ms": -4.27, "busy_ms": -5.52}}
    out = gains.rank_by_expected_gain(fixes, rows, comm.engine_latencies(), 124, served_note="one start: slower",
                                      depth={("sglang", "flashinfer"): deep})
    fi = next(f for f in out if f["change"].startswith("attention"))
    assert fi["label"] == "predicted" and (fi["gain_low_ms"], fi["gain_high_ms"]) == (0.0, 0.8)
    assert fi["expected_gain_ms"] == pytest.approx(0.4) and fi["gain_tok_s"] > 0
    assert (fi["depth_moe_layers"], fi["depth_starts"], fi["depth_tpot_ms_pct"], fi["depth_busy_ms_pct"]) == (12, 2, -4.27, -5.52)
    assert "low: 0" in fi["range_basis"] and "unit unit-4" in fi["range_basis"] and "-4.27%" in fi["range_basis"]
    assert "(one start: slower)" in fi["range_basis"]
    ranked = [f for f in out if f.get("expected_gain_ms") is not None]
    assert fi in ranked and [f["expected_gain_ms"] for f in ranked] == sorted((f["expected_gain_ms"] for f in ranked), reverse=True)
    for verdict, agree in (({"tpot_ms": "undecided", "busy_ms": "a lower"}, None),
                           ({"tpot_ms": "b lower", "busy_ms": "b lower"}, True),
                           ({"tpot_ms": "a lower", "busy_ms": "no difference"}, False)):
        other = gains.rank_by_expected_gain(fixes, rows, comm.engine_latencies(), 124, served_note="x",
                                            depth={("sglang", "flashinfer"): {**deep, "verdict": verdict, "agree": agree}})
        fi = next(f for f in other if f["change"].startswith("attention"))
        assert fi["label"] == gains.SIGN_UNKNOWN and fi["expected_gain_ms"] is None, verdict


def test_the_recorded_flashinfer_gain_is_taken_within_one_unit():
    """The seed verdict's flashinfer row: its gain is the whole step of triton against flashinfer, both projected from
    the slices of the one unit that measured both (h200x1-ref-backends), never triton of another machine; and that
    unit's decided comparison at 12 MoE layers is what ranks it."""
    from servebook.profile import seed
    from servebook.profile.backends_at_depth import backend_comparisons
    from servebook.profile.fixes import measured_alternative
    from servebook.results import RunStore

    ref = RunStore.at(data_dir() / "runs" / "h200x1-ref")
    m = measured_alternative(ref, "sglang", "flashinfer", against="triton")
    same = m["same_unit"]
    assert (same["machine"], same["run_id"]) == ("gpu-d45a97396d7721e4", "h200x1-ref-backends")
    assert all(lab.endswith("(h200x1-ref-backends)") for lab in same["from_labels"]["triton"])
    assert not any("(h200x1-ref" in lab for lab in same["from_labels"]["flashinfer"])      # the unit's own labels
    assert same["against_ms"] - same["backend_ms"] == pytest.approx(sum(same["by_category"].values()))
    fi = next(f for f in seed.seed_tables(RunStore.at(WHATIF))["seed_fixes"] if f["change"] == "attention backend flashinfer")
    assert fi["gain_high_ms"] == pytest.approx(same["against_ms"] - same["backend_ms"])
    assert fi["same_unit"] == "gpu-d45a97396d7721e4 | h200x1-ref-backends" and fi["gain_low_ms"] == 0.0
    (row,) = [r for r in backend_comparisons(ref.rows("profile_runs")) if r["backend"] == "flashinfer"]
    assert fi["depth_tpot_ms_pct"] == row["diff_pct"]["tpot_ms"] < -2.0 and fi["depth_busy_ms_pct"] == row["diff_pct"]["busy_ms"] < -2.0


def _plain(rows):
    # recorded_at, and where seed_attention_12 took its values (the engine code prepared on the machine that computed it)
    return [{k: v for k, v in r.items() if k not in ("recorded_at", "read")} for r in rows]


def _close(a, b, path=""):
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), path
    elif isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_the_recorded_seed_tables_are_computed_again_from_the_reference_run():
    """CI recomputes every table of the seed verdict in the committed what-if run from the profile run (REFERENCE_PROFILE_RUN) and the data files."""
    from servebook.profile.seed import SEED_TABLES, seed_tables

    store = RunStore.at(WHATIF)
    again = seed_tables(store)
    for name in SEED_TABLES:
        _close(_plain(store.rows(name)), _plain(again[name]), name)


def test_the_whatif_chapters_state_one_count_and_one_latency_rule():
    """Chapters 04 and 05 of the what-if run read the count and each engine's latency chapter 06 reads."""
    store = RunStore.at(WHATIF)
    n = comm.collectives_per_token(load_card("kimi-k2.5"), 8)
    floor = [r for r in store.rows("roofline") if r.get("chapter") == "04"]
    assert floor and {r["allreduces_per_token"] for r in floor} == {n}
    lat = {r["engine"]: r for r in store.rows("seed_comm")}
    assert {r["collectives"] for r in lat.values()} == {n}
    us = sorted(r["allreduce_us"] for r in floor if not r["latency_source"].startswith("1 us"))
    assert us == pytest.approx(sorted(r["central_us"] for r in lat.values()))


def test_chapter_06_shows_every_seed_range_field_its_verdict_quotes_and_names_whose_profiles_it_projects():
    """The verdict quoted the seed's SGLang time (seed_ms) and how far past the range's slow end it lies
    (seed_beyond_ms: 1.42 ms), while the seed_range table under it showed neither; and its opening called the projected
    profiles "this book's", in a what-if book that holds none (they are the profile run's)."""
    import re

    from servebook.paths import book_root
    from servebook.profile.seed import REFERENCE_PROFILE_RUN

    verdict = (book_root() / "lib" / "servebook" / "profile" / "verdict.py").read_text()
    quoted = set(re.findall(r"t\('seed_range', \w+, '(\w+)'", verdict)) | set(re.findall(r"seed_range \| \{r\['key'\]\} \| (\w+)", verdict))
    assert {"seed_ms", "seed_beyond_ms", "seed_gap_ms"} <= quoted
    nb = (book_root() / "notebooks" / "06_findings.py").read_text()
    shown = re.search(r'seed_tabs\["seed_range"\]\)\[\[c for c in \[(.*?)\]', nb, re.S).group(1)
    assert quoted <= set(re.findall(r'"(\w+)"', shown)), quoted - set(re.findall(r'"(\w+)"', shown))
    head = nb.split("## The verdict", 1)[1].split("# %%", 1)[0]
    assert "this book's H200 decode-step profiles" not in head and "the profile run's H200 decode-step profiles" in head
    assert REFERENCE_PROFILE_RUN != WHATIF.name


def test_what_the_seed_tried_with_flashinfer_is_read_from_its_file():
    """The ranked flashinfer change said "the seed already tried it: it relaunched SGLang with --attention-backend
    flashinfer together with the NCCL block", typed in: the seed's file says that launch changed two more options at
    once, so flashinfer was never tried alone. The note now lists every option of the file's next launch."""
    from servebook.stated.figures import seed_case

    launch = seed_case()["next_sglang_launch"]
    base = {"gain_ms_per_token": 0.4, "basis": "b", "check_command": "c", "label": "predicted"}
    rows = [{"engine": e, "category": "total", "predicted_ms": 15.0} for e in ("sglang", "vllm")]
    out = gains.rank_by_expected_gain([{**base, "engine": "sglang", "change": "attention backend flashinfer"}], rows,
                                      comm.engine_latencies(), 124)
    note = out[0]["note"]
    assert "already tried it, not alone" in note and "NCCL block" in note and "seed-case.json" in note
    assert all(o in note for o in launch["options"]) and len(launch["options"]) > 1
    assert (launch.get("rate_note") or "") in note


def test_the_serial_end_says_its_idles_come_from_slices_of_two_depths(ref_before_unit_3):
    """The host-rule row's serial end adds each engine's deeper slice's idle. Since unit 3 both are 12-MoE-layer slices,
    GPU-bound (one depth: the basis says "13-layer slice's"); with unit 3 left out, vLLM's deeper slice is unit 2's
    4-MoE-layer one, host-bound, and the basis sets the two depths side by side. Each slice's kind is recomputed here
    from its busy share."""
    from servebook.profile.depths import HOST_BOUND_SHARE
    from servebook.profile.ranges import _deep_slices_words
    from servebook.profile.seed import REFERENCE_PROFILE_RUN
    from servebook.profile.slices import select_slices

    src = RunStore.at(data_dir() / "runs" / REFERENCE_PROFILE_RUN)

    def kinds_of(store):
        out = {}
        for eng, be in ranges.SEED_BACKENDS.items():
            deep = select_slices(store.rows("profile_runs"), eng, backend=be)["deep"]
            out[eng] = (deep["layers"], "GPU-bound" if deep["busy_ms"] / deep["tpot_ms"] > HOST_BOUND_SHARE else "host-bound")
        return out

    assert kinds_of(src) == {"sglang": (13, "GPU-bound"), "vllm": (13, "GPU-bound")}
    assert _deep_slices_words(src) == "13-layer slice's"
    before = RunStore.at(ref_before_unit_3)   # the reference as it stood with units 1 and 2
    assert kinds_of(before) == {"sglang": (13, "GPU-bound"), "vllm": (5, "host-bound")}
    words = _deep_slices_words(before)
    assert "SGLang's: 13 layers, GPU-bound" in words and "vLLM's: 5 layers, host-bound" in words
    assert "slices of two depths" in words and "slices of two depths" not in _deep_slices_words(RunStore.at(REF))

def test_the_engines_are_projected_from_the_one_unit_that_holds_both_ladders():
    """The review found the seed verdict's engines read from two machines and carried by one factor. Where a unit holds
    an INT4 ladder of each engine, both projections read that unit alone (ladders.shared_unit: the deepest common
    depth, then the thinner engine's starts there): no carry, and the verdict says so. Without such a unit the carry
    stays (the state before unit 3)."""
    from servebook.profile import seed
    from servebook.profile.ladders import shared_unit
    from servebook.profile.ranges import SEED_BACKENDS
    from servebook.profile.verdict import verdict_markdown

    rows = RunStore.at(data_dir() / "runs" / "h200x1-ref").rows("profile_runs")
    assert shared_unit(rows, SEED_BACKENDS) == ("gpu-d45a97396d7721e4", "h200x1-ref-backends")   # 2 starts a side at 12
    no4 = [r for r in rows if r.get("run_id") != "h200x1-ref-backends"]
    assert shared_unit(no4, SEED_BACKENDS) == ("gpu-8ecfc16d6531c88f", "h200x1-ref-vllm2")       # SGLang's 12: 1 start
    assert shared_unit([r for r in no4 if r.get("run_id") != "h200x1-ref-vllm2"], SEED_BACKENDS) is None
    tables = seed.seed_tables(RunStore.at(WHATIF))
    tot = {r["engine"]: r for r in tables["seed_projection"] if r["category"] == "total"}
    for r in tot.values():
        assert r["shared_unit"] == "h200x1-ref-backends" and r["machine"] == "gpu-d45a97396d7721e4"
        assert r.get("carried_factor") is None and all(lab.endswith("(h200x1-ref-backends)") for lab in r["from_labels"])
        assert (r["ladder_from"], r["ladder_to"]) == (1, 12)
    md = verdict_markdown(tables)
    assert "Both engines' per-layer differences are taken on one machine, `gpu-d45a97396d7721e4`" in md
    assert "nothing is carried between machines" in md and "compared only through the anchor" not in md


def test_of_two_shared_units_alike_at_depth_the_one_whose_shallow_slices_have_more_starts_is_read():
    """Two units alike at the common depth (depth, starts there): the shallow slices the projection's ladder reads weigh
    before the recording time. An earlier copy of unit 4 with a second start of each engine's 1-MoE-layer slice is read
    in place of the later unit 4 (whose shallow slices have one start each)."""
    from servebook.profile.ladders import shared_unit
    from servebook.profile.linearity import moe_layers_of
    from servebook.profile.ranges import SEED_BACKENDS

    rows = RunStore.at(data_dir() / "runs" / "h200x1-ref").rows("profile_runs")
    four = [r for r in rows if r.get("run_id") == "h200x1-ref-backends" and r.get("ok")]
    copy = [{**r, "run_id": "earlier", "label": r["label"] + " (earlier)", "taken_at": float(r["taken_at"]) - 1e6}
            for r in four]
    shallow = [{**r, "label": r["label"] + " start 2", "role": "repeat", "start": 2} for r in copy
               if moe_layers_of(r) == 1 and (r["engine"], r.get("backend")) in SEED_BACKENDS.items()]
    assert len(shallow) == 2
    unit4 = ("gpu-d45a97396d7721e4", "h200x1-ref-backends")
    assert shared_unit(rows + copy, SEED_BACKENDS) == unit4                       # alike: the later recording
    assert shared_unit(rows + copy + shallow, SEED_BACKENDS) == (unit4[0], "earlier")


def test_without_a_shared_unit_the_engines_are_carried_through_the_anchor(ref_before_unit_3):
    from servebook.profile import seed

    tables = seed.seed_tables(RunStore.at(WHATIF), reference=ref_before_unit_3)
    tot = {r["engine"]: r for r in tables["seed_projection"] if r["category"] == "total"}
    assert tot["vllm"]["carried_factor"] is not None and "shared_unit" not in tot["vllm"]


def test_the_backends_comparison_is_read_from_the_whole_run_not_the_engines_unit(monkeypatch):
    """The engines' projections read one unit; the alternative backend's comparison at depth may come from another (a
    backends unit that holds no ladder of both engines): it is read from the whole profile run."""
    from servebook.profile import ladders, seed

    monkeypatch.setattr(ladders, "shared_unit", lambda rows, backends, **kw: ("gpu-8ecfc16d6531c88f", "h200x1-ref-vllm2"))
    tables = seed.seed_tables(RunStore.at(WHATIF))
    assert {r["shared_unit"] for r in tables["seed_projection"] if r["category"] == "total"} == {"h200x1-ref-vllm2"}
    fi = next(f for f in tables["seed_fixes"] if f["change"] == "attention backend flashinfer")
    assert fi["depth"].endswith("/ h200x1-ref-backends") and fi["gain_low_ms"] == 0.0 and fi["expected_gain_ms"] > 0
