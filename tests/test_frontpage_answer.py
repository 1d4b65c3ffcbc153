"""The front page's answer for the seed case (``servebook.frontpage_answer``) read from the committed what-if book's
tables: what the likely cause says of the seed's gap, and what settles the first change."""

from __future__ import annotations

import html
from pathlib import Path
import re

from servebook import frontpage_answer
from servebook.paths import book_root
from servebook.results import RunStore

WHATIF = "whatif-rtx-pro-6000-sglang-0.5.9"


def _store():
    return RunStore.at(book_root() / "data" / "runs" / WHATIF)


def _row(answer: str, field: str) -> str:
    """One row of the answer's table as plain text (tags dropped, entities read)."""
    cell = re.search(rf"<tr><th>{re.escape(field)}</th><td>(.*?)</td></tr>", answer, flags=re.S).group(1)
    return html.unescape(re.sub(r"<[^>]+>", "", cell))


def _answer(store=None) -> str:
    return frontpage_answer.seed_answer([{"store": store or _store(), "name": WHATIF}])


def test_the_likely_cause_states_the_part_of_the_seeds_gap_the_projection_does_not_locate():
    """The projection places only part of the seed's gap; the rest (the seed's gap minus the projected gap, which is
    SGLang's remainder minus vLLM's) is stated, computed from seed_range, as not located, with the profile that settles
    it; "outside" follows the seed's gap where seed_range says so, and a range across zero is said to include zero."""
    rng = {r["who"]: r for r in _store().rows("seed_range")}
    g, s, v = rng["gap"], rng["sglang"], rng["vllm"]
    cause = _row(_answer(), "likely cause")
    rest = g["seed_gap_ms"] - g["point_ms"]
    assert abs(rest - ((s["seed_ms"] - s["point_ms"]) - (v["seed_ms"] - v["point_ms"]))) < 1e-9
    assert f"The other {rest:.2f} ms of the seed's gap is not located" in cause, cause
    assert f"{s['seed_ms'] - s['point_ms']:.2f} ms longer than its projected {s['point_ms']:.2f}" in cause, cause
    assert f"{v['seed_ms'] - v['point_ms']:.2f} ms longer than its projected {v['point_ms']:.2f}" in cause, cause
    assert "hypothesis until a decode-step profile of SGLang on the seed's host" in cause
    assert f"places {g['point_ms']:.2f} ms per token of the seed's {g['seed_gap_ms']:.2f} ms gap" in cause, cause
    where = "outside" if g["seed_inside"] is False else "inside"
    assert f"the seed's {g['seed_gap_ms']:.2f} lies {where} it" in cause, cause
    assert ("includes zero" in cause) == (g["low_ms"] <= 0 <= g["high_ms"]), cause


def test_the_unlocated_part_follows_the_table():
    """Other recorded figures give other words: the numbers are read from seed_range, never typed."""
    from servebook.profile.verdict import unlocated

    rows = {"sglang": {"seed_ms": 20.0, "point_ms": 14.5}, "vllm": {"seed_ms": 12.0, "point_ms": 11.0},
            "gap": {"seed_gap_ms": 8.0, "point_ms": 3.5}}
    assert unlocated(rows) == {"sglang": 5.5, "vllm": 1.0, "gap": 4.5}
    assert unlocated({"gap": {"seed_gap_ms": None, "point_ms": 1.0}}) == {}


def test_what_settles_the_nccl_change_names_the_debug_subsystems_the_book_captures_with(tmp_path):
    """NCCL prints its per-collective choice (``AllReduce: N Bytes -> Algo X proto Y``) in the log the book captures
    with its own debug variables (``nccl.launch``): the front page and chapter 06 give those same variables (with
    TUNING or COLL among the subsystems), what to look for, and the rate check with its deciding rule."""
    from servebook.nccl.launch import _nccl_env
    from servebook.profile.seed import SEED_TABLES
    from servebook.profile.verdict import verdict_markdown

    env = _nccl_env(None, tmp_path, {})
    subsys = env["NCCL_DEBUG_SUBSYS"]
    assert {"TUNING", "COLL"} & set(subsys.split(","))
    store = _store()
    settle = _row(_answer(store), "what settles it")
    chapter = verdict_markdown({t: store.rows(t) for t in SEED_TABLES})
    for text in (settle, chapter):
        assert f"NCCL_DEBUG={env['NCCL_DEBUG']} NCCL_DEBUG_SUBSYS={subsys}" in text, text
        assert "Bytes -> Algo" in text and "proto" in text
        assert "servebook book --only 05" in text and "starts=2" in text
        assert "95% intervals of the single-stream rate do not overlap" in text


def test_how_sure_names_the_versions_machines_and_the_host_rules_checks():
    """What the projection rests on beyond the H200 profiles: the engine version profiled in place of the seed's, the
    two machines where the profiles come from two, and the run and models the host rule was checked on, with how many
    checks fell outside the predicted interval - each read from the tables."""
    from servebook.frontpage_answer import _host_rule_checks
    from servebook.profile.predict import HOST_RULE_RUN

    store = _store()
    sure = _row(_answer(store), "how sure")
    tot = {r["engine"]: r for r in store.rows("seed_projection") if r["category"] == "total"}
    for eng, r in tot.items():
        assert f"{r['measured_version']}'s kernels stand in for the seed's" in sure, sure
        if r["studied_version"] != r["measured_version"]:
            assert f"the seed's {r['studied_version']} (an assumption" in sure
    if len({r["machine"] for r in tot.values()}) > 1:
        assert all(r["machine"] in sure for r in tot.values()) and "two H200 machines" in sure
    checks, tps = _host_rule_checks(HOST_RULE_RUN)
    assert checks and tps, "the host rule's run holds its whole-model checks and server launches"
    assert f"data/runs/{HOST_RULE_RUN}" in sure and all(c["card"] in sure for c in checks)
    assert all(f"--tensor-parallel-size {x}" in sure for x in tps)
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    outside = sum(c.get("within_interval") is False for c in checks)
    assert f"{words.get(outside, 'none')} of its {words[len(checks)]} checks outside the predicted interval" in sure, sure


def test_the_step_handoff_locations_hold_what_the_verdict_says():
    """The code locations the verdict cites for each engine's per-step hand-off to its ranks (SGLang's gloo broadcast,
    vLLM's shared-memory queue) hold the named code in the cached studied versions' source; the verdict says them."""
    import glob

    import pytest

    from servebook.engines.envs import engines_root
    from servebook.profile.seed import SEED_TABLES
    from servebook.profile.verdict import STEP_HANDOFF, verdict_markdown

    store = _store()
    chapter = verdict_markdown({t: store.rows(t) for t in SEED_TABLES})
    assert "waiting for the slowest one" in chapter and "per-rank trace of each decode step's first all-reduce" in chapter
    for engine, (version, locs) in STEP_HANDOFF.items():
        roots = glob.glob(str(engines_root() / f"{engine}-{version}-py*" / "lib" / "python*" / "site-packages"))
        if not roots:
            pytest.skip(f"{engine} {version} is not prepared here (servebook engines add {engine}=={version})")
        for where, holds in locs:
            path, line = where.rsplit(":", 1)
            text = (Path(roots[0]) / path).read_text().splitlines()[int(line) - 1]
            assert holds in text, (where, text)
            assert f"`{where}`" in chapter


def test_the_nccl_blocks_gain_is_said_as_its_two_cases_over_the_seeds_rate_too():
    """The NCCL block's expected gain is the middle of an either-or (NCCL already picks LL: the low end; picks SIMPLE:
    the high end, from one published host named with its NCCL version): both cases are said, in ms and over the seed's
    own rate as well as the projected one, computed from seed_fixes and seed_range; the middle is said to be no outcome."""
    from servebook.profile.seed import SEED_TABLES
    from servebook.profile.verdict import verdict_markdown

    store = _store()
    f0 = next(f for f in store.rows("seed_fixes") if f.get("expected_gain_ms") is not None)
    assert "NCCL" in f0["change"]
    seed = {r["who"]: r for r in store.rows("seed_range")}[f0["engine"]]
    chapter = html.unescape(re.sub(r"<[^>]+>", "", verdict_markdown({t: store.rows(t) for t in SEED_TABLES})))
    for text in (_row(_answer(store), "first change"), chapter):
        for end in ("low", "high"):
            assert f"{f0[f'gain_{end}_ms']:.2f} ms per token: the seed's SGLang {seed['seed_tok_s']:.1f} tok/s would become " \
                   f"{1e3 / (seed['seed_ms'] - f0[f'gain_{end}_ms']):.1f}" in text, text
            assert f"would gain {f0[f'gain_{end}_tok_s']:+.1f}" in text
        assert "picks SIMPLE" in text and "NCCL 2." in text, "the high end's host is named with its NCCL version"
        assert "not an outcome either gives" in text
