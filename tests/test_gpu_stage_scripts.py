"""tools/gpu-stage/park.sh and merge-unit.sh, the two steps every recording unit repeats around its device calls: the
runs moved out of the tree and back without losing or overwriting anything, and a unit's snapshot (runs.tgz,
traces.tgz, device logs, the JIT-cache pieces, made by the real `snap.sh` that `device.sh` calls) merged into a reference run by the
real `servebook profile` commands. Small hand-built runs in tmp_path (the rows of test_reference_units)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from test_reference_units import _ladder_a, _run, _unit_b

from servebook.results import RunStore

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "tools" / "gpu-stage"


def _sh(script: Path, *args: str, cwd: Path = ROOT, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], cwd=cwd, env=os.environ | env, capture_output=True, text=True,
                          timeout=300)


def _repo(tmp_path: Path) -> Path:
    """A repository-shaped folder with park.sh in its place, two runs and a rendered book."""
    repo = tmp_path / "repo"
    (repo / "tools" / "gpu-stage").mkdir(parents=True)
    shutil.copy(STAGE / "park.sh", repo / "tools" / "gpu-stage" / "park.sh")
    for run in ("run-a", "run-b"):
        (repo / "data" / "runs" / run).mkdir(parents=True)
        (repo / "data" / "runs" / run / "profile_runs.jsonl").write_text(f"{run}\n")
    (repo / "rendered").mkdir()
    (repo / "rendered" / "index.html").write_text("book\n")
    return repo


def test_park_moves_the_runs_out_and_unpark_puts_them_back(tmp_path):
    repo, park = _repo(tmp_path), tmp_path / "parked"
    script = repo / "tools" / "gpu-stage" / "park.sh"
    out = _sh(script, "park", PARK=str(park))
    assert out.returncode == 0, out.stderr
    assert (repo / "data" / "runs").is_dir() and not any((repo / "data" / "runs").iterdir())
    assert not (repo / "rendered").exists() and (park / "runs" / "run-b" / "profile_runs.jsonl").read_text() == "run-b\n"
    assert "parked in" in _sh(script, "status", PARK=str(park)).stdout
    again = _sh(script, "park", PARK=str(park))   # parked twice: refused, nothing moved over the parked runs
    assert again.returncode == 1 and "already holds parked runs" in again.stderr
    assert (park / "runs" / "run-a" / "profile_runs.jsonl").read_text() == "run-a\n"
    out = _sh(script, "unpark", PARK=str(park))
    assert out.returncode == 0, out.stderr
    assert (repo / "data" / "runs" / "run-a" / "profile_runs.jsonl").read_text() == "run-a\n"
    assert (repo / "rendered" / "index.html").read_text() == "book\n" and not (park / "runs").exists()
    nothing = _sh(script, "unpark", PARK=str(park))
    assert nothing.returncode == 1 and "nothing parked" in nothing.stderr


def test_unpark_refuses_to_cover_runs_written_while_parked(tmp_path):
    repo, park = _repo(tmp_path), tmp_path / "parked"
    script = repo / "tools" / "gpu-stage" / "park.sh"
    assert _sh(script, "park", PARK=str(park)).returncode == 0
    (repo / "data" / "runs" / "new-unit").mkdir()   # a unit unpacked into the tree while parked
    out = _sh(script, "unpark", PARK=str(park))
    assert out.returncode == 1 and "data/runs is not empty" in out.stderr and "nothing was moved" in out.stderr
    assert (park / "runs" / "run-a").is_dir() and (repo / "data" / "runs" / "new-unit").is_dir()


def test_park_refuses_a_park_folder_inside_the_repository_and_unknown_actions(tmp_path):
    repo = _repo(tmp_path)
    script = repo / "tools" / "gpu-stage" / "park.sh"
    inside = _sh(script, "park", PARK=str(repo / "parked"))
    assert inside.returncode == 1 and "inside the repository" in inside.stderr
    assert (repo / "data" / "runs" / "run-a").is_dir()
    bad = _sh(script, "hide", PARK=str(tmp_path / "parked"))
    assert bad.returncode == 1 and "unknown action 'hide'" in bad.stderr


def _device_out(tmp_path: Path) -> tuple[Path, Path]:
    """What `device.sh ref` leaves under $OUT for unit `unit-b`, made by the real snap.sh from device-shaped folders in
    tmp_path (the runs, the job logs, a built model, JIT caches of more than one 15 MB piece): the snapshot folder and
    the cache archive snap.sh packed."""
    _run(tmp_path / "remote" / "local-vm" / "unit-b", _unit_b(), with_logs=True)
    jobs, model, home = tmp_path / "jobs", tmp_path / "models" / "kimi-13L-int4", tmp_path / "home"
    for d in (jobs, model, home / "tvm-ffi" / "k", home / "flashinfer", tmp_path / "state"):
        d.mkdir(parents=True)
    (model / "config.json").write_text('{"num_hidden_layers": 13}')
    (model / "servebook_model.json").write_text("{}")
    (home / "tvm-ffi" / "k" / "kernel.so").write_bytes(os.urandom(16_000_000))   # incompressible: two pieces
    (jobs / "ref.log").write_text("profile: batch 1\n")
    files = tmp_path / "files"
    env = {"OUT": str(files), "RUNS": str(tmp_path / "remote"), "JOBS": str(jobs), "MODELS": str(tmp_path / "models"),
           "CACHE_HOME": str(home), "STATE": str(tmp_path / "state")}
    first = _sh(STAGE / "snap.sh", **env)
    assert first.returncode == 0 and "snapshot:" in first.stdout, first.stderr
    assert not list(files.glob("tvmffi.tgz.part*"))            # the first batch still running: no caches yet
    (jobs / "ref.log").write_text("profile: batch 1\nprofile: batch 2\n")
    assert "JIT caches" in _sh(STAGE / "snap.sh", **env).stdout
    assert sorted(p.name for p in files.glob("tvmffi.tgz.part*")) == ["tvmffi.tgz.part00", "tvmffi.tgz.part01"]
    for p in files.glob("tvmffi.tgz.part*"):
        p.rename(tmp_path / p.name)                               # fetched; a later call does not send them again
    assert "JIT caches" not in _sh(STAGE / "snap.sh", **env).stdout and not list(files.glob("tvmffi.tgz.part*"))
    for p in tmp_path.glob("tvmffi.tgz.part*"):
        p.rename(files / p.name)
    with tarfile.open(files / "runs.tgz") as t:
        names = t.getnames()
    assert "./models/kimi-13L-int4/config.json" in names and not any("/traces/" in n for n in names)
    return files, tmp_path / "state" / "tvmffi.tgz"


def test_merge_unit_sh_merges_a_device_snapshot_and_derives_the_tables_again(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a(), with_logs=True)
    files, packed = _device_out(tmp_path)
    env = {"FILES": str(files), "RUN": "unit-b", "TARGET": str(dest.path), "CACHE_OUT": str(tmp_path / "cache" / "t.tgz"),
           "SB": f"{sys.executable} -m servebook.cli"}
    out = _sh(STAGE / "merge-unit.sh", **env)
    assert out.returncode == 0, out.stderr
    labels = [p["label"] for p in dest.rows("profile_runs")]
    assert "sglang kimi-13L int4 triton (unit-b)" in labels and len(labels) == len(set(labels)) == 8
    assert {r["engine"] for r in dest.rows("slice_linearity")} == {"sglang", "vllm"}   # derived again, both engines
    assert {r["machine"] for r in dest.rows("prediction_check")} == {"gpu-a", "gpu-b"}
    logs = dest.path / "logs" / "unit-b"
    assert (logs / "device-ref.log").read_text().endswith("profile: batch 2\n") and (logs / "device-gpus.txt").is_file()
    assert (logs / "profile-x.log").read_text() == "unit-b\n"
    assert (dest.path / "traces" / "sglang_kimi-13L_int4_triton_(unit-b).excerpt.json").is_file()
    assert (tmp_path / "cache" / "t.tgz").read_bytes() == packed.read_bytes()
    with tarfile.open(tmp_path / "cache" / "t.tgz") as t:
        assert {"tvm-ffi/k/kernel.so", "flashinfer"} <= set(t.getnames())
    again = _sh(STAGE / "merge-unit.sh", **env)   # the same snapshot merged twice adds nothing
    assert again.returncode == 0 and len(RunStore.at(dest.path).rows("profile_runs")) == 8


def test_merge_unit_sh_names_what_is_wrong_with_its_input(tmp_path):
    dest = _run(tmp_path / "ref", _ladder_a())
    files, _ = _device_out(tmp_path)
    base = {"TARGET": str(dest.path), "CACHE_OUT": str(tmp_path / "c.tgz"), "SB": f"{sys.executable} -m servebook.cli"}
    wrong = _sh(STAGE / "merge-unit.sh", FILES=str(files), RUN="unit-c", **base)
    assert wrong.returncode == 1 and "holds no run 'unit-c'" in wrong.stderr and "local-vm/unit-b" in wrong.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = _sh(STAGE / "merge-unit.sh", FILES=str(empty), RUN="unit-b", **base)
    assert none.returncode == 1 and "no runs.tgz" in none.stderr
    parked = _sh(STAGE / "merge-unit.sh", FILES=str(files), RUN="unit-b", **{**base, "TARGET": str(tmp_path / "gone")})
    assert parked.returncode == 1 and "park.sh unpark" in parked.stderr
    assert len(dest.rows("profile_runs")) == 4   # nothing merged by a refused call
