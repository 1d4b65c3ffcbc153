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


def test_a_derived_row_is_keyed_by_its_measurement_and_superseded_when_it_is_taken_again(tmp_path):
    """A derived table (model_extrapolation) writes a row per measurement it derives from, its method included; when the
    measurement is taken again (another method), the new row is written and only it stands."""
    from servebook.results import derived_from, standing

    store = RunStore.at(tmp_path / "run")
    first = store.append("bench_summary", {"label": "a", "phase": "single", "warmup": 2, "decode_tok_s_mean": 605.0})
    again = store.append("bench_summary", {"label": "a", "phase": "single", "warmup": 10, "decode_tok_s_mean": 581.0})
    for src in (first, again):
        key = derived_from(src, method={"warmup": src["warmup"]})
        row = {"case": "a on H200", "full_model": "bf16", "derived_from": key, "slice_ms_per_token": 1e3 / src["decode_tok_s_mean"]}
        assert not store.done("model_extrapolation", case="a on H200", full_model="bf16", derived_from=key)  # a new source: written
        store.append("model_extrapolation", row)
        assert store.done("model_extrapolation", case="a on H200", full_model="bf16", derived_from=key)
    now = [derived_from(again, method={"warmup": 10})]
    rows = standing(store.rows("model_extrapolation"), now, identity=("case", "full_model"))
    assert [r["slice_ms_per_token"] for r in rows] == [1e3 / 581.0]
    # rows written before derived rows named their source: the reader's rule says which stand
    store.append("model_extrapolation", {"case": "a on H200", "full_model": "card", "slice_ms_per_token": 1e3 / 605.0})
    store.append("model_extrapolation", {"case": "a on H200", "full_model": "card", "slice_ms_per_token": 1e3 / 581.0})
    rows = standing(store.rows("model_extrapolation"), now, identity=("case", "full_model"),
                    legacy=lambda r: abs(r["slice_ms_per_token"] - 1e3 / 581.0) < 1e-9)
    assert sorted((r["full_model"], round(r["slice_ms_per_token"], 4)) for r in rows) == [("bf16", 1.7212), ("card", 1.7212)]
    assert len(standing(store.rows("model_extrapolation"), [])) == 2  # no legacy rule: the old rows stand, the keyed ones do not


def test_the_committed_extrapolation_shows_only_rows_of_the_current_measurement():
    """h200x1-live's model_extrapolation was written for the first chapter 05 measurement (2 warm-ups) and never again
    (its `done` key ignored the method); the measurement standing now (10 warm-ups) gives none of its rows."""
    from servebook.bench import current
    from servebook.paths import book_root
    from servebook.results import standing

    store = RunStore(book_root() / "data" / "runs" / "h200x1-live")
    rows, _ = current(store.rows("bench_summary"))
    now = {r["label"]: r["decode_tok_s_mean"] for r in rows if r.get("phase") == "single"}
    old = store.rows("model_extrapolation")
    assert len(old) == 4
    stands = standing(old, [], legacy=lambda r: any(r["case"].startswith(f"{k} on ") and abs(r["slice_ms_per_token"] - 1e3 / v) < 1e-6
                                                    for k, v in now.items()))
    assert stands == [], "a row of the superseded measurement stands"


def test_a_correction_by_the_tool_is_stamped_and_said_under_the_table(tmp_path):
    """tools/corrections/mark_rows.py changes rows and stamps them; say_corrections names the tool and the reason;
    running it again changes nothing."""
    from servebook.paths import book_root
    from servebook.results import corrections, say_corrections

    tool = book_root() / "tools" / "corrections" / "mark_rows.py"
    store = RunStore.at(tmp_path / "run")
    other = RunStore.at(tmp_path / "misnamed")
    store.append("backends_preflight", {"engine": "vllm", "attention": "FLASHINFER_MLA", "ok": False})
    store.append("backends_preflight", {"engine": "vllm", "attention": "TRITON_MLA", "ok": True})
    other.append("backends", {"engine": "sglang", "attention": "auto", "outcome": "ok"})
    assert say_corrections(store, "backends_preflight", "backends") == ""
    run = lambda *a: subprocess.run([sys.executable, str(tool), *map(str, a)], capture_output=True, text=True, check=True).stdout  # noqa: E731
    out = run(store.path, "backends_preflight", "--where", "attention=FLASHINFER_MLA", "--set", "ok=null", "--set", "harness_fault=true",
              "--reason", "the preflight ran outside the engine's config context")
    assert "'rows_changed': 1" in out
    assert "'rows_changed': 0" in run(store.path, "backends_preflight", "--where", "attention=FLASHINFER_MLA", "--set", "ok=null",
                                      "--set", "harness_fault=true", "--reason", "the preflight ran outside the engine's config context")
    run(store.path, "backends", "--from-run", other.path, "--where", "attention=auto", "--reason", "the run was named wrongly")
    rows = store.rows("backends_preflight")
    assert rows[0]["ok"] is None and rows[0]["harness_fault"] is True and rows[0]["corrected"]["by"] == "tools/corrections/mark_rows.py"
    assert "corrected" not in rows[1]
    said = say_corrections(store, "backends_preflight", "backends")
    assert ("- corrected: 1 row of `backends_preflight`, `harness_fault`, `ok` set, by tools/corrections/mark_rows.py "
            "(the preflight ran outside the engine's config context)") in said
    assert "1 row of `backends`, moved from run misnamed, by tools/corrections/mark_rows.py (the run was named wrongly)" in said
    assert len(corrections(store, "backends")) == 1
    with pytest.raises(subprocess.CalledProcessError):
        run(store.path, "backends", "--set", "x=1", "--reason", " ")


def test_the_committed_corrections_are_said():
    """The hand corrections of h200x1-live (before the tool) and the ITL tool's are each said, with their reason."""
    from servebook.paths import book_root
    from servebook.results import say_corrections

    store = RunStore(book_root() / "data" / "runs" / "h200x1-live")
    assert "moved from run h200x2-live" in say_corrections(store, "backends") and "device.sh named the run wrongly" in say_corrections(store, "backends")
    assert "reconstructed afterwards" in say_corrections(store, "failures")
    assert "harness" in say_corrections(store, "backends_preflight")
    itl = say_corrections(store, "bench_summary")
    assert "by tools/corrections/itl_one_token_per_chunk.py (recomputed from chunk gaps, one token per chunk)" in itl
    assert "ITL not recomputable" in itl


def test_a_derived_table_is_replaced_whole_and_a_failed_write_keeps_the_old_one(tmp_path, monkeypatch):
    store = RunStore.at(tmp_path / "run")
    store.append("matrix", {"gpu": "h200", "pick": "fa3"})
    store.append("matrix", {"gpu": "h200", "pick": "fa3"})  # an earlier execution's duplicate
    got = store.replace("matrix", [{"gpu": "h200", "pick": "fa3"}, {"gpu": "b200", "pick": "trtllm_mla", "token": "hf_abcdefghijklmnopqrstuvwxyz1234"}])
    assert [r["gpu"] for r in store.rows("matrix")] == ["h200", "b200"] and got == store.rows("matrix")
    assert "hf_abcdefghijklmnopqrstuvwxyz1234" not in store.table_path("matrix").read_text(), "a replaced table is masked too"

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("servebook.results.os.replace", fail)
    with pytest.raises(ResultsError, match="disk holding it is full"):
        store.replace("matrix", [{"gpu": "a100", "pick": "triton"}])
    assert [r["gpu"] for r in store.rows("matrix")] == ["h200", "b200"], "the old table stays as it was"


def test_a_withdrawn_row_is_said_and_left_out_of_the_findings(tmp_path):
    """A row that is not this run's (mark_rows.py --set withdrawn=true) stays in the table, stamped; the findings skip it."""
    from servebook.findings.tables import selection
    from servebook.paths import book_root
    from servebook.results import say_corrections

    store = RunStore.at(tmp_path / "run")
    for version in ("5.17.0", "5.24.0"):
        store.append("selection", {"case": "this-host", "engine": "transformers", "version": version, "attention_backend": "sdpa"})
    tool = book_root() / "tools" / "corrections" / "mark_rows.py"
    subprocess.run([sys.executable, str(tool), str(store.path), "selection", "--where", "version=5.24.0", "--set", "withdrawn=true",
                    "--reason", "read on another machine"], check=True, capture_output=True)
    assert [s["version"] for s in selection(store)] == ["5.17.0"]
    assert [r["version"] for r in store.rows("selection")] == ["5.17.0"], "every reader leaves it out"
    assert len(store.rows("selection", withdrawn=True)) == 2, "kept in the table"
    assert "1 row of `selection`, withdrawn (not this run's: left out of its findings), by tools/corrections/mark_rows.py " \
           "(read on another machine)" in say_corrections(store, "selection")
