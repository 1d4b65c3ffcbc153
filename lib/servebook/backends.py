"""Chapter 03: force each attention backend, check it really ran, compare.

    rows = force_each_backend(get_engine("transformers"), model_dir, ["sdpa", "eager"], store)
    rows = force_each_backend(eng, model_dir, [None, "eager"], store, host=get_host("ssh://gpu-box"), host_model=path_there)

For each backend: start the server with it forced, read the engine's own report of what
it loaded, run greedy completions of a fixed prompt set and compare their tokens with the
engine's default, take a short single-stream measurement, stop the server, and check the
port is free again. Each outcome (ok, rejected, failed to start, crashed, wrong output)
is a row in the run's ``backends`` table; a failure never stops the sweep.

With a ``host`` that is not this process (``servebook.hosts``: SSH, or a recording) every server
starts on the host (``host.serve``), and everything that talks to it runs there too: the greedy
completions and the server-info request (servebook functions called on the host), the single-stream
measurement (chapter 05's client, ``bench.single_stream(host=...)``), the port check after stop and
the check for servers an earlier run left running. Nothing is timed across the network. The engine's
log is fetched from the host into the run directory. The tokenizer (for comparing tokens) stays here.
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


def runnable_here(name: str, smoke: bool = False, host=None) -> tuple[bool, str]:
    """Whether a backend can run on this host at all, and if not, why (recorded as 'not run here').

    With a ``host`` that is not this process, the question is answered on that host."""
    import importlib.util

    if _remote(host):
        ok, why = host.call("servebook.backends:runnable_here", {"name": name, "smoke": smoke}, timeout=120,
                            label=f"runnable_here {name}")
        return bool(ok), str(why)

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


def _decode_rate(base_url: str, model: str, engine: str, attention: str, max_tokens: int, runs: int, tokenizer, host=None) -> dict:
    """A short single-stream measurement with chapter 05's client (real streamed tokens), on ``host`` when given."""
    from . import bench

    prompts = bench.build_prompts(tokenizer, input_len=32, n=max(2, runs + 1), seed=0)
    s = bench.single_stream(base_url, model, prompts, store=None, tokenizer=tokenizer, engine=engine, attention=attention,
                            max_tokens=max_tokens, runs=runs, warmup=1, progress=False, host=host if _remote(host) else None)
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
    host=None,
    host_model: str | None = None,
) -> list[dict]:
    """Run the sweep; ``None`` in ``backends`` means the engine's default (auto).

    ``host``: where the servers and everything that talks to them run (default: here, as ``Server``);
    ``host_model``: the model directory as that host sees it (default ``model_dir``); ``model_dir``
    is still read here for the tokenizer.
    """
    from transformers import AutoTokenizer

    say = progress or (lambda _m: None)
    remote = _remote(host)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    served_from = str(host_model or model_dir)
    version = engine.version()
    reference: list[str] | None = None
    for prior in store.find("backends", engine=engine.name, attention="auto", outcome="ok"):
        reference = prior.get("completions")
    rows = []
    stale_servers = _leftovers_on(host, store.path / "servers.jsonl") if remote else leftover_servers(store.path / "servers.jsonl")
    for stale in stale_servers:
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
            launch = (engine.launch(served_from, attention=backend, port=host.free_port()) if remote
                      else engine.launch(str(model_dir), attention=backend))
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
            starting = (host.serve(launch, log_path, registry=store.path / "servers.jsonl", ready_timeout=ready_timeout, progress=say)
                        if remote else Server.start(launch, log_path, ready_timeout=ready_timeout, registry=store.path / "servers.jsonl",
                                                    progress=say))
            with starting as srv:
                row["ready_s"] = srv.ready_s
                reported = _reported_backend(engine, srv, host)
                row["reported"], row["reported_source"] = reported.get("attention"), reported.get("source")
                row["reported_device"] = reported.get("device")
                try:
                    name = engine.served_model_name(served_from)
                    if remote:  # the requests go out on the host, next to the server
                        completions = host.call("servebook.backends:greedy_completions",
                                                {"base_url": srv.base_url, "model": name, "prompts": PROBE_PROMPTS, "max_tokens": max_tokens},
                                                timeout=120 * len(PROBE_PROMPTS) + 60, label=f"greedy completions {engine.name} {label}")
                    else:
                        completions = greedy_completions(srv.base_url, name, PROBE_PROMPTS, max_tokens)
                except ServebookError as exc:
                    row.update(outcome="crashed" if _exited(srv) else "rejected", error=str(exc), log_tail=srv.log_tail(15))
                    raise _Recorded() from exc
                row["completions"] = completions
                if backend is None:
                    reference = completions
                if reference is not None:
                    row.update(compare_tokens(tokenizer, reference, completions))
                rate = _decode_rate(srv.base_url, engine.served_model_name(served_from), engine.name, label, max_tokens * 2, runs, tokenizer,
                                    host=host)
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
        row["port_free_after"] = not _port_listening_on(host, launch.port) if remote else not port_listening(launch.port)
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


def _reported_backend(engine: EngineAdapter, srv: Server, host=None) -> dict:
    """What the engine itself says it loaded: its server-info endpoint where it has one, else its log."""
    if _remote(host):  # the endpoint is asked on the host; the log is fetched from there into the run directory
        text = srv.log_tail(10 ** 7)
        info = host.call("servebook.engines._base:fetch_server_info", {"base_url": srv.base_url, "paths": list(engine.info_paths)},
                         timeout=120, label=f"server info {engine.name}") if engine.info_paths else None
        return engine.reported_backend(info, text)
    text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
    return engine.reported_backend(engine.server_info(srv.base_url), text)


# -- on a host ---------------------------------------------------------------------------------------
def _remote(host) -> bool:
    """A host whose work does not run in this process (SSH, a recording, a replay)."""
    return host is not None and not getattr(host, "in_process", True)


def _port_listening_on(host, port: int) -> bool:
    """``servers.port_listening`` on the host's 127.0.0.1."""
    return bool(host.call("servebook.servers:port_listening", {"port": int(port)}, timeout=60, label=f"port {port} listening"))


def _group_alive_on(host, pgid: int) -> bool:
    return host.run(["kill", "-0", "--", f"-{int(pgid)}"], timeout=15, label=f"alive pgid {pgid}").rc == 0


def _leftovers_on(host, registry: Path) -> list[dict]:
    """``servers.leftover_servers`` for servers started on ``host``: alive is asked there."""
    if not Path(registry).exists():
        return []
    state: dict[int, dict] = {}
    for line in Path(registry).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("host", "local") != host.spec:
            continue
        if row.get("event") == "started":
            state[row["pgid"]] = row
        elif row.get("event") == "stopped":
            state.pop(row.get("pgid"), None)
    return [r for pgid, r in state.items() if _group_alive_on(host, pgid)]
