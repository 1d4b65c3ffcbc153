"""tools/gpu-stage/device.sh: every step's chapter commands come from one source (its `chapter` function), checked by
printing the jobs each step would start (DRY=1: nothing is unpacked, started or killed) and parsing them."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVICE_SH = ROOT / "tools" / "gpu-stage" / "device.sh"
STEPS = ("prep", "main", "one", "more", "check", "trust", "all", "restart")


def _jobs(step: str, tmp_path: Path, **env) -> dict[str, list[dict]]:
    """The book commands of each job STEP would start: {job: [{"only": "03", "model": ..., "params": {...}}, ...]}."""
    run_env = os.environ | {"DRY": "1", "OUT": str(tmp_path / "out"), "BACKENDS": "sglang: triton"} | env
    out = subprocess.run(["bash", str(DEVICE_SH), step], cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    jobs: dict[str, list[dict]] = {}
    current = None
    for line in out.stdout.splitlines():
        if m := re.match(r"\[job (\S+)\]$", line):
            current = jobs.setdefault(m.group(1), [])
        elif current is not None and "servebook.cli book" in line:
            argv = shlex.split(line)
            params = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-p")
            current.append({"only": argv[argv.index("--only") + 1], "model": argv[argv.index("--model") + 1], "params": params})
    return jobs


def test_the_chapter_commands_have_one_source():
    text = DEVICE_SH.read_text()
    body = re.search(r"^chapter\(\) \{\n(.*?)^\}", text, re.S | re.M)
    assert body, "device.sh defines chapter()"
    rest = text.replace(body.group(0), "")
    assert "--only" not in rest.replace('--only \\"\\$ONLY\\"', ""), "a step writes a chapter command of its own"
    assert not re.search(r"-p (runs|max_concurrency|ready_timeout)=", rest), "shared chapter parameters outside chapter()"


@pytest.mark.parametrize("step", STEPS)
def test_every_step_starts_parsable_book_commands(step, tmp_path):
    jobs = _jobs(step, tmp_path)
    books = [b for cmds in jobs.values() for b in cmds]
    assert books, f"{step}: no book command"
    for b in books:
        p = b["params"]
        if "03" in b["only"]:
            assert p["compare_engines"] == "vllm" and p["runs"] == "3" and p["ready_timeout"] == "420"
            assert p["engine_args"].startswith("sglang: --cuda-graph-max-bs 16") and "vllm: --max-num-seqs 16" in p["engine_args"]
        if b["only"] == "05":
            assert (p["max_concurrency"], p["requests_per_level"], p["runs"]) == ("16", "3", "5")
        if b["only"] == "04":
            assert p["timeout_s"] == "120"


def test_trust_compares_the_engines_before_forcing_backends(tmp_path):
    main = _jobs("trust", tmp_path)["main"]
    assert [b["only"] for b in main] == ["01", "05", "03"]
    ch05, ch03 = main[1]["params"], main[2]["params"]
    assert ch05["compare_engines"] == "vllm" and ch05["starts"] == ch03["starts"] == "2"
    assert ch05["max_tokens"] == ch03["max_tokens"] == "64" and ch05["input_len"] == "32"
    assert main[1]["model"] == main[2]["model"], "chapters 03 and 05 measure the same model directory"
    assert ch03["backends"].startswith("sglang: triton,flashmla; vllm: FLASHMLA")


def test_trust_narrows_to_what_a_resumed_run_lacks(tmp_path):
    main = _jobs("trust", tmp_path, TRUST_CHAPTERS="03", TRUST_BACKENDS="sglang: ; vllm: FLASHMLA,TRITON_MLA")["main"]
    assert [b["only"] for b in main] == ["03"]
    assert main[0]["params"]["backends"] == "sglang: ; vllm: FLASHMLA,TRITON_MLA"


def _ref(tmp_path: Path, **env) -> str:
    """What `device.sh ref` prints (DRY=1) with a stage folder of its own and the kept copy of the JIT cache in tmp_path."""
    outside = {k: v for k, v in os.environ.items() if k != "TVMFFI_CACHE"}   # only what the test names
    run_env = outside | {"DRY": "1", "OUT": str(tmp_path / "out"), "STAGE_DIR": str(tmp_path / "stage"),
                         "TVMFFI_KEPT": str(tmp_path / "kept.tgz"), "RUN_ID": "unit-t", "REF_LAYERS": "13"} | env
    out = subprocess.run(["bash", str(DEVICE_SH), "ref"], cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_ref_keeps_a_carried_jit_cache_and_says_when_there_is_none(tmp_path):
    """Session 32 named the cache by a path of the typing machine (TVMFFI_CACHE), the device had none, and SGLang's
    first start compiled for 441 s without a word. The carried .stage/cache/tvmffi.tgz is now copied where a later
    call's carry cannot remove it, picked when the job starts, and a missing cache is said, naming what was looked for."""
    none = _ref(tmp_path)
    assert "no JIT cache on this machine" in none and "would be carried in" not in none and "[job ref]" in none
    gone = _ref(tmp_path, TVMFFI_CACHE="/nowhere/tvmffi-in.tgz")
    assert "TVMFFI_CACHE=/nowhere/tvmffi-in.tgz not found" in gone
    cache = tmp_path / "stage" / "cache" / "tvmffi.tgz"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"the cache")
    carried = _ref(tmp_path, TVMFFI_CACHE="/nowhere/tvmffi-in.tgz")   # a wrong name, a carried cache: the kept copy
    assert f"JIT cache kept: {tmp_path / 'kept.tgz'}" in carried and (tmp_path / "kept.tgz").read_bytes() == b"the cache"
    assert f"would be carried in ({tmp_path / 'kept.tgz'})" in carried and "no JIT cache" not in carried
    cache.unlink()                                                      # the next call's carry removed .stage/cache
    later = _ref(tmp_path)
    assert f"would be carried in ({tmp_path / 'kept.tgz'})" in later and "JIT cache kept" not in later
