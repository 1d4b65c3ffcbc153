"""Every subcommand of ``servebook --help``, given a wrong run path, an unknown chapter or an unknown parameter, answers
in one line naming the problem (and the fix), exit status 2: never a traceback, never an empty result written."""

from __future__ import annotations

import json
import shutil

import pytest

from servebook.cli import build_parser, main
from servebook.paths import data_dir

TRUST = data_dir() / "runs" / "h200x1-trust"

# (subcommand, argv with NOWHERE for a missing path and RUN for a copy of a recorded run's manifest, words the line holds)
CASES = [
    ("book", ["book", "--only", "09"], "valid chapters"),
    ("book", ["book", "-p", "nope=1"], "'nope'"),
    ("book", ["book", "--host", "replay:NOWHERE"], "no cassette.jsonl"),
    ("html", ["html", "NOWHERE"], "it does not exist"),
    ("html", ["html", "RUN", "--refresh", "09"], "'09'"),
    ("html", ["html", "RUN", "--refresh", "06,09"], "'09'"),  # before 06 runs (the run's manifest is left as it was)
    ("html", ["html", "RUN", "--refresh", "06", "-p", "nope=1"], "no chapter of --refresh 06 declares it"),
    ("html", ["html", "RUN", "-p", "max_tokens=3"], "add --refresh NN"),
    ("probe", ["probe", "--host", "replay:NOWHERE"], "no cassette.jsonl"),
    ("probe", ["probe", "--profile", "nope"], "known profiles"),
    ("whatif", ["whatif", "--engine", "sglang", "--gpu", "h200", "--model", "NOWHERE"], "has no config.json"),
    ("engines", ["engines", "add", "nope==1"], "unknown engine 'nope'"),
    ("bench", ["bench", "--url", "notaurl"], "'url'"),
    ("compare", ["compare", "NOWHERE", "RUN"], "a run directory with manifest.json"),
    ("model", ["model", "build", "nope"], "no model card 'nope'"),
    ("profile", ["profile", "run", "--plan", "NOWHERE"], "No such file or directory"),
    ("profile", ["profile", "predict", "NOWHERE"], "it does not exist"),
    ("profile", ["profile", "linearity", "NOWHERE"], "it does not exist"),
    ("profile", ["profile", "more-starts", "--plan", "NOWHERE", "--run-dir", "NOWHERE", "--out", "OUT"], "it does not exist"),
    ("profile", ["profile", "merge-unit", "NOWHERE", "RUN"], "it does not exist"),
    ("profile", ["profile", "carry", "NOWHERE", "RUN"], "'reference_dir'"),
    ("profile", ["profile", "carry", "RUN", "NOWHERE"], "'target_dir'"),
    ("front", ["front", "NOWHERE"], "a folder of rendered books"),
    ("front", ["front", "OUT", "--runs", "NOWHERE"], "not a folder"),
]


def test_the_cases_cover_every_subcommand():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {c for c, _, _ in CASES}


@pytest.mark.parametrize("command,argv,words", CASES, ids=[" ".join(a[:3]) for _, a, _ in CASES])
def test_a_wrong_path_chapter_or_parameter_is_one_line(tmp_path, capsys, command, argv, words):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRUST / "manifest.json", run / "manifest.json")
    (tmp_path / "out").mkdir()
    where = {"NOWHERE": str(tmp_path / "nowhere"), "RUN": str(run), "OUT": str(tmp_path / "out")}
    argv = [where.get(a, a.replace("NOWHERE", where["NOWHERE"])) for a in argv]
    if command == "book":
        argv += ["--out", str(tmp_path / "book"), "--runs", str(tmp_path / "runs")]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own usage error
        rc = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0], lines[0]
    assert not (tmp_path / "nowhere").exists(), "a wrong path is not created"
    assert not (run / "notebooks").exists() and not (run / "chapters.jsonl").exists(), "no chapter was executed"
    assert json.loads((run / "manifest.json").read_text()) == json.loads((TRUST / "manifest.json").read_text())


@pytest.mark.parametrize("command", ["book", "html", "probe", "whatif", "bench", "compare", "front"])
def test_an_unknown_option_is_one_line(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--no-such-option"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1 and "error:" in lines[0] and "--help" in lines[0]  # (a required one first)
