"""The notebooks' structure: numbered, one parameters cell, common parameters as the CLI defines them."""

import ast

import pytest

from servebook.chapters import chapters, notebook_parameters
from servebook.params import PARAMS

EXPECTED = ["01_detect_capabilities", "02_read_backend_selection", "03_force_each_backend",
            "04_tune_nccl", "05_benchmark_single_stream", "06_findings"]


def test_six_chapters_in_reading_order():
    assert [c.stem for c in chapters()] == EXPECTED


@pytest.mark.parametrize("stem", EXPECTED)
def test_parameters_cell(stem):
    import jupytext

    chapter = next(c for c in chapters() if c.stem == stem)
    nb = jupytext.read(chapter.source)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one parameters cell"
    # nothing derived: every statement is a plain assignment of a literal
    for node in ast.parse(tagged[0].source).body:
        assert isinstance(node, (ast.Assign, ast.AnnAssign)), ast.dump(node)
        ast.literal_eval(node.value)
    declared = notebook_parameters(chapter.source)
    assigned = [n.target.id if isinstance(n, ast.AnnAssign) else n.targets[0].id for n in ast.parse(tagged[0].source).body]
    assert sorted(declared) == sorted(assigned), "papermill must read every parameter (a line with two '=' is skipped)"
    assert "run_dir" in declared
    for name, p in PARAMS.items():
        assert name in declared, f"{stem} does not declare {name}"
        assert ast.literal_eval(declared[name]["default"]) == p.default, name
        assert declared[name]["inferred_type_name"] == p.type.__name__, name
        assert declared[name]["help"], f"{stem}: parameter {name} has no comment"
    for name, spec in declared.items():
        assert spec["inferred_type_name"] in ("str", "int", "float", "bool"), f"{stem}: {name} needs a type annotation"


@pytest.mark.parametrize("stem", EXPECTED)
def test_story_shape(stem):
    text = next(c for c in chapters() if c.stem == stem).source.read_text()
    assert "What we found" in text
    i = EXPECTED.index(stem)
    if i + 1 < len(EXPECTED):
        assert EXPECTED[i + 1] in text, "ends with a pointer to the next chapter"


@pytest.mark.parametrize("stem", EXPECTED)
def test_check_yourself_in_every_mode(stem):
    """Every page a reader can get ends with questions: on a real host, and in a what-if run (its own cells)."""
    import nbformat

    from servebook.chapters import _read_notebook, _select_cells

    chapter = next(c for c in chapters() if c.stem == stem)
    for whatif in (False, True):
        nb = _select_cells(nbformat.from_dict(_read_notebook(chapter.source)), whatif=whatif)
        assert any("## Check yourself" in c.source for c in nb.cells if c.cell_type == "markdown"), (stem, "what-if" if whatif else "host")


def test_chapter_05_is_prose_over_the_package():
    """Chapter 05 (issue #30): at most 400 lines, no code cell over 40 lines; its figures' exceptions listed with reasons."""
    import jupytext

    from servebook.bench.chapter import UNTAGGED

    chapter = next(c for c in chapters() if c.stem == "05_benchmark_single_stream")
    assert len(chapter.source.read_text().splitlines()) <= 400
    nb = jupytext.read(chapter.source)
    long = [c.source.splitlines()[0] for c in nb.cells
            if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []) and len(c.source.splitlines()) > 40]
    assert not long, long
    assert UNTAGGED and all(isinstance(v, str) and len(v) > 20 for v in UNTAGGED.values())
