"""The what-if book's chapter 06 box "This run, in short": each launch to try on the real host says what it is
(predicted or a hypothesis, from ``recommended_launch``), its expected gain and rank among the seed verdict's changes
(``seed_fixes``), and that the seed already tried it with other changes where it did; a book's own launch is unchanged."""

from __future__ import annotations

from servebook.findings.boxes import _answers, _launch_line
from servebook.findings.launch import ranked_fixes
from servebook.paths import book_root
from servebook.results import RunStore


def test_the_whatif_launches_say_decision_gain_and_rank():
    store = RunStore.at(book_root() / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9")
    lines = [x for x in _answers(store)["06"] if x.startswith("Launch for")]
    rec = store.rows("recommended_launch")
    assert len(lines) == len(rec)
    fixes = ranked_fixes(store)
    for line, r in zip(lines, rec):
        assert f"({r['decision']}" in line and f"`{r['launch']}`" in line, line
        f = next((f for f in fixes if f["check_command"] == r["launch"]
                  or ("--attention-backend" in r["launch"] and f["change"] == "attention backend " + r["launch"].split()[-1])), None)
        if f is not None:
            assert f"expected gain {f['expected_gain_ms']:.2f} ms per token" in line, line
            assert f"ranked {f['rank']} of {len(fixes)} by expected gain" in line, line
            if f.get("note"):
                assert f["note"].split(":")[0] in line


def test_a_books_own_launch_is_said_as_before():
    assert _launch_line({"engine": "vllm", "command": "vllm serve m", "why": ["measured"]}) == "Launch for vllm: vllm serve m"
    said = _launch_line({"engine": "sglang", "command": "x", "decision": "hypothesis", "fix": {"change": "c"}, "rank": None})
    assert said == "Launch for sglang (hypothesis; no expected gain in `seed_fixes`): `x`"
