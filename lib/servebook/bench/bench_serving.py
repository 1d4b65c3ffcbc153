"""SGLang's own benchmark client, ``sglang.bench_serving``, run in an engine environment's interpreter.

    env = resolve_engine("sglang==0.5.9")              # servebook.engines.envs: the prepared environment, never built here
    data = write_sharegpt(["hi"] * 8, workdir / "sharegpt.json")
    res = run_bench_serving(env.python, url, "fake-sse", model_dir, data, input_len=8, output_len=256,
                            num_prompts=8, max_concurrency=8, drop_fields=(), pin_cpu=0)
    res["output_throughput"], res["completed"]

It runs in its own process through a small shim (``servebook/bench/compare_patches/bench_serving_shim.py``) that pins
it to one CPU when asked and drops named fields from the JSON bodies it posts (``servebook.bench.compare`` says why).
Chapter 05 runs it against the fake server beside servebook's client (``client_ceiling``); ``servebook.bench.compare``
against a live server, through ``_BenchServingTurns``: one process whose runs come on request, taking turns with
servebook's client's.
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


def _out_path(wd: Path, r: dict, i: int) -> Path:
    return wd / f"bs-c{r['max_concurrency']}-{time.time_ns()}-{i}.jsonl"


def _run_args(r: dict, tok_dir: Path, out: Path) -> list[str]:
    """bench_serving's command-line arguments for one run (a dict as :func:`run_bench_serving_many` takes)."""
    args = ["--backend", "vllm", "--base-url", r["url"].rstrip("/"), "--model", r["model"], "--tokenizer", str(tok_dir),
            "--dataset-name", "random", "--dataset-path", str(r["dataset_path"]), "--random-input-len", str(r["input_len"]),
            "--random-output-len", str(r["output_len"]), "--random-range-ratio", "1", "--num-prompts", str(r["num_prompts"]),
            "--max-concurrency", str(r["max_concurrency"]), "--request-rate", "inf",
            "--warmup-requests", str(r.get("warmup_requests", 1)), "--output-file", str(out), "--output-details",
            "--disable-tqdm", "--seed", "1"]
    if r.get("extra_body"):
        args += ["--extra-request-body", json.dumps(r["extra_body"])]
    return args


def _shim_env(drop_fields: Sequence[str], pin_cpu: int | None) -> dict:
    env = dict(os.environ, SERVEBOOK_PIN_CPU=str(-1 if pin_cpu is None else pin_cpu),
               SERVEBOOK_DROP_FIELDS=",".join(drop_fields), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    return env


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
    ``extra_body`` and ``warmup_requests``). ``subprocess.TimeoutExpired`` when they take over ``timeout`` seconds.
    Each result's ``_process_wall_s`` is the whole process's wall time (its imports and every run)."""
    wd = Path(workdir or tempfile.mkdtemp(prefix="bench-serving-"))
    wd.mkdir(parents=True, exist_ok=True)
    tok_dir = compat_tokenizer_dir(tokenizer_dir, wd / "tokenizer")
    args: list[str] = []
    outs = []
    for i, r in enumerate(runs):
        out = _out_path(wd, r, i)
        outs.append(out)
        args += (["--servebook-next"] if i else []) + _run_args(r, tok_dir, out)
    env = _shim_env(drop_fields, pin_cpu)
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


_MARK = "@@servebook-turn@@"  # the shim's marker lines (compare_patches/bench_serving_shim.py, --servebook-turns)


class _BenchServingTurns:
    """One ``sglang.bench_serving`` process whose runs come when asked, so that they can take turns with another
    client's on one server (``servebook.bench.compare.agreement``) while its imports are paid once.

        with _BenchServingTurns(python, tokenizer_dir, pin_cpu=0, workdir=wd) as bs:   # started; imports under way
            ...                                     # e.g. warm the server meanwhile
            bs.wait_ready()                         # imports done: from here it is idle between runs
            res = bs.run(run)                       # a dict of run_bench_serving's arguments -> its result, or why not

    Between runs the process blocks on a read of its stdin (no CPU). It runs in its own process group, watched by a
    reaper, and is stopped when the block ends whatever the reason. ``run`` returns the same as one item of
    :func:`run_bench_serving_many`, with ``_process_wall_s`` the wall time of that run alone (request to marker; the
    imports are not in it); ``subprocess.TimeoutExpired`` when a run (or the start) takes over ``timeout`` seconds."""

    def __init__(self, python: str, tokenizer_dir: str | os.PathLike, *, drop_fields: Sequence[str] = ("ignore_eos",),
                 pin_cpu: int | None = None, timeout: float = 600.0, workdir: str | os.PathLike | None = None):
        import queue

        self._wd = Path(workdir or tempfile.mkdtemp(prefix="bench-serving-"))
        self._wd.mkdir(parents=True, exist_ok=True)
        self._tok_dir = compat_tokenizer_dir(tokenizer_dir, self._wd / "tokenizer")
        self._cmd = [python, str(SHIM), "--servebook-turns"]
        self._env = _shim_env(drop_fields, pin_cpu)
        self._timeout = timeout
        self._lines: queue.Queue = queue.Queue()
        self._proc: subprocess.Popen | None = None
        self._reaper = None
        self._err = None
        self._reader = None
        self._ready = False
        self._turn = 0
        self._err_path = self._wd / f"bs-turns-{time.time_ns()}.stderr"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> "_BenchServingTurns":
        import threading

        from ..processes import _start_reaper

        self._err = open(self._err_path, "w")
        try:
            self._proc = subprocess.Popen(self._cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                          text=True, env=self._env, cwd=self._wd, start_new_session=True, bufsize=1)
            self._reaper = _start_reaper(self._proc.pid)
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._reader.start()
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.close(graceful=exc_type is None)

    def _read(self, stream) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)  # end of its output: the process is ending

    def _until_marker(self, what: str, timeout: float | None = None) -> tuple[list[str] | None, list[str]]:
        """Its output lines up to the next marker line (that line's words after the marker), or ``None`` for the
        words when its output ends first."""
        import queue

        log: list[str] = []
        timeout = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise subprocess.TimeoutExpired(self._cmd, timeout, output=f"{what}: " + "".join(log)[-3000:]) from None
            if line is None:
                return None, log
            if _MARK in line:
                return line.split(_MARK, 1)[1].split(), log
            log.append(line)

    def _failure(self, log: list[str], why: str) -> str:
        err = self._err_path.read_text(errors="replace") if self._err_path.is_file() else ""
        return f"sglang.bench_serving failed ({why}):\n{(''.join(log) + err)[-3000:]}"

    def wait_ready(self) -> None:
        """Wait for its imports (``RuntimeError`` with its log when it ends before it is ready)."""
        if self._ready:
            return
        words, log = self._until_marker("sglang.bench_serving start")
        if words != ["ready"]:
            raise RuntimeError(self._failure(log, f"rc={self._proc.wait(timeout=30)}, before its first run"))
        self._ready = True

    def run(self, run: dict, timeout: float | None = None) -> dict | str:
        """One run (a dict as :func:`run_bench_serving_many` takes): its JSONL result line, or a string saying why
        there is none. ``timeout`` (seconds) for this run instead of the one given at the start."""
        self.wait_ready()
        i, self._turn = self._turn, self._turn + 1
        out = _out_path(self._wd, run, i)
        err_at = self._err_path.stat().st_size
        t0 = time.perf_counter()
        try:
            self._proc.stdin.write(json.dumps(_run_args(run, self._tok_dir, out)) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it has ended: its output says why, below
        words, log = self._until_marker(f"sglang.bench_serving run {i}", timeout)
        wall = time.perf_counter() - t0
        if words is None:
            return self._failure(log, f"rc={self._proc.wait(timeout=30)}, during run {i}")
        if not out.is_file() or not out.read_text().strip():
            err = self._err_path.read_text(errors="replace")[err_at:]
            return f"sglang.bench_serving failed (rc={words[-1]}):\n{(''.join(log) + err)[-3000:]}"
        res = json.loads(out.read_text().strip().splitlines()[-1])
        res["_process_wall_s"] = wall
        res["_process_pid"] = self._proc.pid
        res["_log_tail"] = "".join(log)[-2000:]
        return res

    def close(self, graceful: bool = True) -> None:
        """Stop it, the whole process group: ``graceful``, its stdin is closed first and it gets 5 s to end by
        itself; otherwise (an exception on the way) it is stopped at once."""
        from ..processes import _stop_reaper, stop_process_group

        proc, self._proc = self._proc, None
        try:
            if proc is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
                try:
                    proc.wait(timeout=5 if graceful else 0.01)
                except subprocess.TimeoutExpired:
                    pass
                stop_process_group(proc.pid, grace_s=3)  # what is left of its group (at once when nothing is)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                if self._reader is not None:
                    self._reader.join(timeout=5)  # its output ends with the process
                if not (self._reader and self._reader.is_alive()):
                    proc.stdout.close()
        finally:
            _stop_reaper(self._reaper)
            self._reaper = None
            if getattr(self, "_err", None) is not None:
                self._err.close()
                self._err = None
