"""README's typed figures of the H200 reference agree with the recorded tables they summarise (a unit merged later that
moves them fails here until README says the new figures)."""

from __future__ import annotations

import re

from servebook.paths import data_dir
from servebook.results import RunStore

ROOT = data_dir().parent
REF = data_dir() / "runs" / "h200x1-ref"


def _deepest_prediction(engine: str) -> float:
    rows = [r for r in RunStore.at(REF).rows("slice_linearity") if r["engine"] == engine and r.get("kind") == "prediction"]
    return max(rows, key=lambda r: int(str(r["depths"]).split("->")[-1]))["busy_error_pct"]


def test_readme_states_the_recorded_linearity_and_margin():
    text = " ".join(ROOT.joinpath("README.md").read_text().split())
    m = re.search(r"within ([+-]\d+\.\d)% for SGLang, ([+-]\d+\.\d)% for vLLM", text)
    assert m, "README's h200x1-ref entry no longer states the deepest slice's prediction error per engine"
    assert (m.group(1), m.group(2)) == (f"{_deepest_prediction('sglang'):+.1f}", f"{_deepest_prediction('vllm'):+.1f}")
    from servebook.profile.starts import EQUIVALENCE_PCT

    assert f"beyond the {EQUIVALENCE_PCT:g}% margin" in text


def test_readme_and_recorded_state_the_backends_verdicts_the_tables_give():
    """The backend figures typed into README's h200x1-ref entry and RECORDED.md's unit-6 section are the page's
    (``backend_comparisons``: % of the two means' mean), recomputed here from profile_runs."""
    from servebook.profile.backends_at_depth import backend_comparisons

    got = {(c["run_id"], c["word"]): c for c in backend_comparisons(RunStore.at(REF).rows("profile_runs"))}
    fm, de, fa3 = (got[("h200x1-ref-backends3", "FLASHMLA")], got[("h200x1-ref-backends3", "default")],
                   got[("h200x1-ref-backends2", "fa3")])
    readme = " ".join(ROOT.joinpath("README.md").read_text().split())
    assert f"`fa3` (unit 5, {fa3['diff_pct']['tpot_ms']:+.1f}% served)" in readme
    assert f"its `TRITON_MLA` on both ({fm['diff_pct']['tpot_ms']:+.1f}% served, unit 6)" in readme
    recorded = " ".join(REF.joinpath("RECORDED.md").read_text().split())
    unit6 = recorded[recorded.index("## Unit 6"):]
    assert (f"**{fm['diff_pct']['tpot_ms']:+.2f}%**; GPU busy {fm['mean']['backend']['busy_ms']:.3f} against "
            f"{fm['mean']['seed']['busy_ms']:.3f} ms, **{fm['diff_pct']['busy_ms']:+.2f}%**") in unit6
    assert f"served {de['diff_pct']['tpot_ms']:+.2f}%, GPU busy {de['diff_pct']['busy_ms']:+.2f}%" in unit6
