"""tools/rerender.sh: every phase renders a book's chapter with the same parameters (each book's live in one place,
book_args/chapter_args), read from its --dry listing; nothing is executed."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "rerender.sh"


def _dry(phase: str, tmp_path: Path) -> list[list[str]]:
    tf = tmp_path / "tf-python"  # stands in for TF_HOST_PYTHON's check (transformers 5.17.0): the 02 of the embedded books is listed
    tf.write_text("#!/bin/sh\nexit 0\n")
    tf.chmod(0o755)
    env = {**os.environ, "SB": "servebook", "TF_HOST_PYTHON": str(tf)}
    p = subprocess.run(["bash", str(SCRIPT), "--dry", phase], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return [shlex.split(line) for line in p.stdout.splitlines() if line.startswith("servebook ")]


def _by_chapter(cmds: list[list[str]]) -> dict:
    """(run, chapter) -> the command, for commands that render one chapter (--refresh-findings: chapter 06)."""
    out = {}
    for c in cmds:
        if c[1] != "html":
            continue
        chapter = "06" if "--refresh-findings" in c else c[c.index("--refresh") + 1]
        if "," not in chapter:
            out[(c[4], chapter)] = c
    return out


@pytest.mark.parametrize("chapter", ["05", "06"])
def test_a_one_chapter_phase_renders_each_book_as_rest_does(tmp_path, chapter):
    rest, alone = _by_chapter(_dry("rest", tmp_path)), _by_chapter(_dry(chapter, tmp_path))
    books = sorted(run for run, ch in alone)
    assert len(books) == 7 and all(ch == chapter for _, ch in alone)
    for run in books:
        if (run, chapter) in rest:
            assert alone[(run, chapter)] == rest[(run, chapter)], run
        else:  # rendered within a list in rest (the books' 01,03,04,05; the what-if book's 01,03-06): the same parameters
            (listed,) = [c for c in _dry("rest", tmp_path) if c[1] == "html" and c[4] == run and chapter in c[6].split(",")]
            assert alone[(run, chapter)][7:] == listed[7:], run
    assert _dry(chapter, tmp_path)[-1] == ["servebook", "front", "rendered/"]


def test_all_is_02_then_rest(tmp_path):
    assert _dry("all", tmp_path) == _dry("02", tmp_path) + _dry("rest", tmp_path)


def test_an_unknown_phase_is_one_line_naming_the_phases():
    p = subprocess.run(["bash", str(SCRIPT), "--dry", "5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == ("tools/rerender.sh: unknown phase '5'; phases: 02 rest all trust rest-live rest-book 06 05 front "
                                "(optionally after --dry)")
