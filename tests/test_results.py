import json
import os
import signal
import subprocess
import sys
import time

import pytest

from servebook.errors import ResultsError
from servebook.results import RunStore


def test_append_read_and_resume(tmp_path):
    store = RunStore.open(tmp_path, host="gpu-box", run_id="r1")
    store.append("decode", {"attn": "sdpa", "tok_s": 12.5})
    again = RunStore.open(tmp_path, host="gpu-box", run_id="r1")
    assert again.path == store.path
    assert again.done("decode", attn="sdpa") and not again.done("decode", attn="eager")
    assert again.table("decode")["tok_s"].tolist() == [12.5]
    assert again.manifest["run_id"] == "r1"


def test_secrets_never_reach_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnop")
    store = RunStore.open(tmp_path, run_id="s")
    store.write_manifest({"env": {"HF_TOKEN": "hf_abcdefghijklmnop", "NCCL_PROTO": "LL"}})
    store.append("t", {"cmd": "curl -H 'Authorization: Bearer sekret123' http://x", "note": "token=hunter22"})
    blob = "".join(p.read_text() for p in store.path.iterdir())
    assert "hf_abcdefghijklmnop" not in blob and "sekret123" not in blob and "hunter22" not in blob
    assert store.manifest["env"]["NCCL_PROTO"] == "LL"


def test_killed_writer_keeps_finished_rows(tmp_path):
    """A run killed midway keeps every row it finished; a torn last line is skipped."""
    code = (
        "import sys, time\n"
        "from servebook.results import RunStore\n"
        f"s = RunStore.at({str(tmp_path / 'run')!r})\n"
        "i = 0\n"
        "while True:\n"
        "    s.append('m', {'i': i}); i += 1\n"
        "    if i == 20: print('ready', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    path = tmp_path / "run" / "m.jsonl"
    with open(path, "a") as fh:  # simulate a torn write
        fh.write('{"i": 99')
    store = RunStore.at(tmp_path / "run")
    rows = store.rows("m")
    assert len(rows) >= 20
    assert [r["i"] for r in rows] == list(range(len(rows)))


def test_unwritable_run_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot create the run directory"):
        RunStore.at(blocker / "run")


def test_the_working_directory_is_not_a_secret(monkeypatch):
    from servebook.secrets import is_secret_name, mask_value

    monkeypatch.setenv("PWD", "/home/me/servebook")
    monkeypatch.setenv("DB_PWD", "hunter2-long")
    assert not is_secret_name("PWD") and not is_secret_name("OLDPWD") and is_secret_name("DB_PWD")
    assert mask_value("cd /home/me/servebook; login hunter2-long") == "cd /home/me/servebook; login ***"
