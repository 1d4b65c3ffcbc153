"""Chapter 03: force each attention backend, check it really ran, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)

For each backend: start the server with it forced, read the engine's own report of what
it loaded, run greedy completions of a fixed prompt set and compare their tokens with the
engine's default, take a short single-stream measurement, stop the server, and check the
port is free again. Each outcome (ok, rejected, failed to start, crashed, wrong output)
is a row in the run's ``backends`` table; a failure never stops the sweep.
"""

from __future__ import annotations

import os

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from .engines import CLIRejected, EngineAdapter
from .errors import EngineError, ServebookError, ServerError
from .results import RunStore
from .servers import Server, leftover_servers, port_listening

__all__ = ["PROBE_PROMPTS", "force_each_backend", "greedy_completions", "compare_tokens", "runnable_here", "engine_error"]

# A fixed, seeded prompt set: the same for every backend and engine.
PROBE_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Attention backends differ in",
    "In 1969, the first",
]


# transformers' flash-attention implementations and the package each one imports.
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface", "flash_attention_4": "flash_attn"}


def runnable_here(name: str, smoke: bool = False) -> tuple[bool, str]:
    """Whether a backend can run on this host at all, and if not, why (recorded as 'not run here')."""
    import importlib.util

    if name.startswith("flash_attention"):
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            return False, "needs a CUDA GPU"
        pkg = _FLASH_PACKAGES.get(name, "flash_attn")
        if importlib.util.find_spec(pkg) is None:
            return False, f"needs the {pkg} package"
    if "/" in name:  # a hub kernel (e.g. kernels-community/flash-attn2): fetched from the Hugging Face Hub at load
        if importlib.util.find_spec("kernels") is None:
            return False, "a hub kernel: needs the kernels package, and the Hub to fetch the kernel from"
    if name == "flex_attention" and smoke:
        return False, "skipped in smoke mode (compiles kernels on first use)"
    return True, ""


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:400]
        raise ServebookError(f"{url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:  # reset, refused, timed out, a torn answer
        raise ServebookError(f"{url} gave no answer ({type(exc).__name__}: {exc}); the server may have died, see its log") from exc


def greedy_completions(base_url: str, model: str, prompts: list[str], max_tokens: int, timeout: float = 120) -> list[str]:
    """Greedy (temperature 0) completions, one request per prompt."""
    out = []
    for prompt in prompts:
        data = _post(f"{base_url}/v1/completions",
                     {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": False},
                     timeout)
        out.append(data["choices"][0]["text"])
    return out


def compare_tokens(tokenizer, reference: list[str], candidate: list[str]) -> dict:
    """Token agreement between two sets of completions and the first divergence."""
    total = same = 0
    first = None
    for i, (a, b) in enumerate(zip(reference, candidate)):
        ta, tb = tokenizer.encode(a, add_special_tokens=False), tokenizer.encode(b, add_special_tokens=False)
        n = max(len(ta), len(tb))
        total += n
        for j in range(n):
            if j < len(ta) and j < len(tb) and ta[j] == tb[j]:
                same += 1
            elif first is None:
                first = {"prompt": i, "token": j}
    return {"agreement": round(same / total, 4) if total else None, "first_divergence": first}


def _decode_rate(base_url: str, model: str, engine: str, attention: str, max_tokens: int, runs: int, tokenizer) -> dict:
    """A short single-stream measurement with chapter 05's client (real streamed tokens)."""
    from . import bench

    prompts = bench.build_prompts(tokenizer, input_len=32, n=max(2, runs + 1), seed=0)
    s = bench.single_stream(base_url, model, prompts, store=None, tokenizer=tokenizer, engine=engine, attention=attention,
                            max_tokens=max_tokens, runs=runs, warmup=1, progress=False)
    return {
        "decode_tok_s": s["decode_tok_s_mean"],
        "decode_tok_s_ci95": s["decode_tok_s_ci95"],
        "ttft_ms": s["ttft_s_mean"] * 1000 if s["ttft_s_mean"] is not None else None,
        "bench_failed": s["failed"],
        "bench_method": s["method"],
    }


def force_each_backend(
    engine: EngineAdapter,
    model_dir: Path,
    backends: list[str | None],
    store: RunStore,
    *,
    max_tokens: int = 32,
    runs: int = 3,
    ready_timeout: float = 300,
    progress: Callable[[str], None] | None = print,
) -> list[dict]:
    """Run the sweep; ``None`` in ``backends`` means the engine's default (auto)."""
    from transformers import AutoTokenizer

    say = progress or (lambda _m: None)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    version = engine.version()
    reference: list[str] | None = None
    for prior in store.find("backends", engine=engine.name, attention="auto", outcome="ok"):
        reference = prior.get("completions")
    rows = []
    for stale in leftover_servers(store.path / "servers.jsonl"):
        # A server an earlier, crashed run of this same run id started and never stopped. It is reported,
        # not killed: its pid may since have been reused by an unrelated program.
        note = {"engine": stale.get("engine"), "pid": stale.get("pid"), "pgid": stale.get("pgid"), "port": stale.get("port"),
                "cmd": stale.get("cmd"), "action": "reported, not stopped"}
        if not store.done("stale_servers", pid=note["pid"], port=note["port"]):
            store.append("stale_servers", note)
        say(f"warning: a server from an earlier run of {store.path.name} still runs (pid {note['pid']}, port {note['port']}): "
            f"servebook leaves it alone; stop it with `kill -- -{note['pgid']}` once you have checked it is yours")
    for backend in backends:
        label = backend or "auto"
        if store.done("backends", engine=engine.name, attention=label):
            say(f"{engine.name} {label}: already measured in this run, skipped")
            rows.extend(store.find("backends", engine=engine.name, attention=label))
            continue
        row = {"engine": engine.name, "engine_version": version, "attention": label}
        t0 = time.monotonic()
        try:
            launch = engine.launch(str(model_dir), attention=backend)
        except EngineError as exc:  # nothing was started: the engine's own CLI refuses the flag or value, or cannot be read
            row.update(outcome="rejected" if isinstance(exc, CLIRejected) else "failed", error=str(exc),
                       seconds=round(time.monotonic() - t0, 1))
            store.append("backends", row)
            rows.append(row)
            say(f"{engine.name} {label}: {row['outcome']} before start ({exc})")
            continue
        row["launch"] = launch.shell()
        log_path = store.path / "logs" / f"{engine.name}-{label.replace('/', '--')}.log"
        try:
            with Server.start(launch, log_path, ready_timeout=ready_timeout, registry=store.path / "servers.jsonl",
                              progress=say) as srv:
                row["ready_s"] = srv.ready_s
                reported = _reported_backend(engine, srv)
                row["reported"], row["reported_source"] = reported.get("attention"), reported.get("source")
                row["reported_device"] = reported.get("device")
                try:
                    completions = greedy_completions(srv.base_url, engine.served_model_name(str(model_dir)), PROBE_PROMPTS, max_tokens)
                except ServebookError as exc:
                    row.update(outcome="crashed" if _exited(srv) else "rejected", error=str(exc), log_tail=srv.log_tail(15))
                    raise _Recorded() from exc
                row["completions"] = completions
                if backend is None:
                    reference = completions
                if reference is not None:
                    row.update(compare_tokens(tokenizer, reference, completions))
                rate = _decode_rate(srv.base_url, engine.served_model_name(str(model_dir)), engine.name, label, max_tokens * 2, runs, tokenizer)
                row.update(rate)
                if not srv.alive():
                    row.update(outcome="crashed", error="the server exited during the run", log_tail=srv.log_tail(15))
                elif str(reported.get("device") or "").startswith("cpu") and _gpu_visible(launch):
                    row.update(outcome="overridden", error="the engine loaded the model on the CPU although a GPU is visible "
                                                           "(a full or busy GPU makes device 'auto' fall back silently)")
                elif _overridden(engine, backend, reported):
                    row.update(outcome="overridden", error=f"asked for {backend}, the engine reports {row['reported']} "
                                                           f"(from its {row['reported_source']})")
                elif row.get("agreement") is not None and row["agreement"] < 0.5:
                    row.update(outcome="wrong output", error=f"only {row['agreement']:.0%} of tokens agree with the default backend")
                else:
                    row["outcome"] = "ok"
        except _Recorded:
            pass
        except ServerError as exc:
            rejected = backend is not None and _rejection(exc.log_tail, backend)
            row.update(outcome="rejected" if rejected else "failed to start",
                       error=rejected or engine_error(exc.log_tail) or str(exc), server_error=str(exc),
                       log_tail=exc.log_tail[-2000:])
        except ServebookError as exc:
            row.update(outcome="failed", error=str(exc))
        row["port_free_after"] = not port_listening(launch.port)
        row["seconds"] = round(time.monotonic() - t0, 1)
        store.append("backends", row)
        rows.append(row)
        say(f"{engine.name} {label}: {row.get('outcome')}" + (f" ({row.get('error')})" if row.get("error") else ""))
    return rows


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def engine_error(log_tail: str) -> str | None:
    """The engine's own error in a log tail: the last exception line of its traceback, else its last ERROR line."""
    lines = [l.strip() for l in (log_tail or "").splitlines() if l.strip()]
    for line in reversed(lines):
        if _EXC_LINE.match(line):
            return line[:400]
    for line in reversed(lines):
        if " ERROR " in f" {line} " or line.startswith("ERROR"):
            return line[:400]
    return None


def _gpu_visible(launch) -> bool:
    """Whether the server's environment sees an NVIDIA GPU (nvidia-smi -L, limited by its CUDA_VISIBLE_DEVICES)."""
    import shutil
    import subprocess

    visible = launch.env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not shutil.which("nvidia-smi"):
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU " in out.stdout


def _overridden(engine: EngineAdapter, backend: str | None, reported: dict) -> bool:
    """A forced backend the engine reports it did not use (decode, and prefill where it says)."""
    if not backend:
        return False
    seen = [reported.get("attention"), reported.get("prefill")]
    return any(r and not engine.same_backend(backend, r) for r in seen)


def _rejection(log_tail: str, backend: str) -> str | None:
    """The engine's own error line when it refused ``backend`` at start, else None."""
    for line in reversed(log_tail.splitlines()):
        # an import failure that happens to name the backend's kernel package is not a refusal of the flag
        if "Error" in line and backend in line and not re.search(r"ModuleNotFoundError|ImportError|No module named", line):
            return line.strip()[:400]
    return None


def _exited(srv: Server, wait_s: float = 3.0) -> bool:
    """Whether the server died; a process killed mid-request may take a moment to finish exiting."""
    import subprocess

    try:
        srv.proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


class _Recorded(Exception):
    """The row already says what went wrong."""


def _reported_backend(engine: EngineAdapter, srv: Server) -> dict:
    """What the engine itself says it loaded: its server-info endpoint where it has one, else its log."""
    text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
    return engine.reported_backend(engine.server_info(srv.base_url), text)
