"""SGLang's own benchmark client, ``sglang.bench_serving``, run in an engine environment's interpreter.

    env = resolve_engine("sglang==0.5.9")              # servebook.selection.envs: the prepared environment, never built here
    data = write_sharegpt(["hi"] * 8, workdir / "sharegpt.json")
    res = run_bench_serving(env.python, url, "fake-sse", model_dir, data, input_len=8, output_len=256,
                            num_prompts=8, max_concurrency=8, drop_fields=(), pin_cpu=0)
    res["output_throughput"], res["completed"]

It runs in its own process through a small shim (``servebook/bench/compare_patches/bench_serving_shim.py``) that pins
it to one CPU when asked and drops named fields from the JSON bodies it posts (``servebook.bench.compare`` says why).
Chapter 05 runs it against the fake server beside servebook's client (``client_ceiling``); ``servebook.bench.compare``
against a live server.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

from .prompts import Prompt

__all__ = ["DEFAULT_SPEC", "write_sharegpt", "compat_tokenizer_dir", "run_bench_serving", "run_bench_serving_many"]

DEFAULT_SPEC = "sglang==0.5.9"  # the SGLang whose bench_serving the fidelity tests and chapter 05 run
# Runs inside the engine env: pin, strip fields, then bench_serving's own __main__ (a real file).
SHIM = Path(__file__).parent / "compare_patches" / "bench_serving_shim.py"


def write_sharegpt(prompts: Sequence[Prompt | str], path: str | os.PathLike) -> Path:
    """A ShareGPT-format JSON (two turns per conversation) holding ``prompts``: bench_serving's local dataset."""
    rows = [{"id": f"servebook-{i}", "conversations": [
        {"from": "human", "value": p.text if isinstance(p, Prompt) else str(p)},
        {"from": "gpt", "value": "ok"}]} for i, p in enumerate(prompts)]
    path = Path(path)
    path.write_text(json.dumps(rows))
    return path


def compat_tokenizer_dir(model_dir: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A copy of the model's tokenizer files that transformers 4.x can load.

    transformers 5 writes ``tokenizer_class: TokenizersBackend``, which the engine env's transformers
    (4.57 in sglang 0.5.9) does not know; the same ``tokenizer.json`` loads as ``PreTrainedTokenizerFast``.
    Unchanged when the class is another one."""
    src, dest = Path(model_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "special_tokens_map.json", "chat_template.jinja"):
        if (src / name).is_file():
            (dest / name).write_bytes((src / name).read_bytes())
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        cfg.pop("backend", None)
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dest


def run_bench_serving(python: str, url: str, model: str, tokenizer_dir: str, dataset_path: str | os.PathLike, *,
                      input_len: int, output_len: int, num_prompts: int, max_concurrency: int,
                      extra_body: dict | None = None, drop_fields: Sequence[str] = ("ignore_eos",),
                      pin_cpu: int | None = None, warmup_requests: int = 1, timeout: float = 600.0,
                      workdir: str | os.PathLike | None = None) -> dict:
    """Run ``sglang.bench_serving`` once; its JSONL result line (``--output-details``: per-request lists too)."""
    run = {"url": url, "model": model, "dataset_path": dataset_path, "input_len": input_len, "output_len": output_len,
           "num_prompts": num_prompts, "max_concurrency": max_concurrency, "extra_body": extra_body,
           "warmup_requests": warmup_requests}
    (res,) = run_bench_serving_many(python, tokenizer_dir, [run], drop_fields=drop_fields, pin_cpu=pin_cpu, timeout=timeout,
                                    workdir=workdir)
    if isinstance(res, str):
        raise RuntimeError(res)
    return res


def run_bench_serving_many(python: str, tokenizer_dir: str | os.PathLike, runs: Sequence[dict], *,
                           drop_fields: Sequence[str] = ("ignore_eos",), pin_cpu: int | None = None,
                           timeout: float = 600.0, workdir: str | os.PathLike | None = None) -> list[dict | str]:
    """Several runs of ``sglang.bench_serving`` in one process (its imports take seconds): per run, its JSONL result
    line, or a string saying why there is none. Each run is a dict of :func:`run_bench_serving`'s arguments (``url``,
    ``model``, ``dataset_path``, ``input_len``, ``output_len``, ``num_prompts``, ``max_concurrency``, optionally
    ``extra_body`` and ``warmup_requests``). ``subprocess.TimeoutExpired`` when they take over ``timeout`` seconds."""
    wd = Path(workdir or tempfile.mkdtemp(prefix="bench-serving-"))
    wd.mkdir(parents=True, exist_ok=True)
    tok_dir = compat_tokenizer_dir(tokenizer_dir, wd / "tokenizer")
    args: list[str] = []
    outs = []
    for i, r in enumerate(runs):
        out = wd / f"bs-c{r['max_concurrency']}-{time.time_ns()}-{i}.jsonl"
        outs.append(out)
        args += (["--servebook-next"] if i else []) + [
            "--backend", "vllm", "--base-url", r["url"].rstrip("/"), "--model", r["model"], "--tokenizer", str(tok_dir),
            "--dataset-name", "random", "--dataset-path", str(r["dataset_path"]), "--random-input-len", str(r["input_len"]),
            "--random-output-len", str(r["output_len"]), "--random-range-ratio", "1", "--num-prompts", str(r["num_prompts"]),
            "--max-concurrency", str(r["max_concurrency"]), "--request-rate", "inf",
            "--warmup-requests", str(r.get("warmup_requests", 1)), "--output-file", str(out), "--output-details",
            "--disable-tqdm", "--seed", "1"]
        if r.get("extra_body"):
            args += ["--extra-request-body", json.dumps(r["extra_body"])]
    env = dict(os.environ, SERVEBOOK_PIN_CPU=str(-1 if pin_cpu is None else pin_cpu),
               SERVEBOOK_DROP_FIELDS=",".join(drop_fields), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    t0 = time.perf_counter()
    proc = subprocess.run([python, str(SHIM), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=wd)
    wall = time.perf_counter() - t0
    results: list[dict | str] = []
    for out in outs:
        if not out.is_file() or not out.read_text().strip():
            results.append(f"sglang.bench_serving failed (rc={proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
            continue
        res = json.loads(out.read_text().strip().splitlines()[-1])
        res["_process_wall_s"] = wall
        res["_log_tail"] = proc.stdout[-2000:]
        results.append(res)
    return results
