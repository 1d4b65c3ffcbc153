"""Chapter 04, end to end: the engine itself at tensor parallelism, restarted under each communication setting.

    rows = tp_decode_check(get_engine("sglang"), model_dir, store, tp_settings(eng, best="NCCL_GRAPH_MIXING_SUPPORT=0"), tp=2)

A microbenchmark of all-reduce predicts a change in time per token; this measures it. For each setting the
server is started with ``--tensor-parallel-size tp`` and the setting's flags and environment, warmed up, and
measured with chapter 05's client: single-stream decode (mean and 95% interval over runs, timed by the rule each row
records, ``decode_timed_to``: rows without it, from before that rule, were timed to the stream's end) and the
throughput of one batch at ``concurrency``. Which all-reduce path the engine used is read from the engine
itself: its resolved settings (SGLang's ``/server_info`` ``disable_custom_all_reduce``) and the lines its own
log writes about all-reduce. An engine's custom all-reduce serves small messages without NCCL, so NCCL
variables can only reach decode when it is off: the settings below say which is which. Rows go to the
run's ``tp_e2e`` table; a setting that fails is a row with the engine's own error line, and the rest go on.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

from ..errors import EngineError, ServebookError, ServerError
from ..results import RunStore
from ..servers import Server

__all__ = ["tp_settings", "tp_decode_check", "tp_check_engines", "allreduce_lines", "SEED_ENV"]

# The seed case's environment block, copied there from a vLLM systemd unit tuned for PCIe
# (shared/seeds: NCCL_PROTO=LL, NCCL_ALGO=Ring, NCCL_P2P_LEVEL=SYS, 16 channels, 16 MB buffers, 512 threads).
SEED_ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
            "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
# What the engines' own code logs about its all-reduce: SGLang 0.5.16 distributed/parallel_state.py:450
# ("Setup Custom allreduce failed ..."), :468 ("[AR] All-reduce call path: NCCL"), custom_all_reduce_v2.py:228
# ("All Reduce config: symmetric_memory ..."); vLLM 0.26.0 distributed/device_communicators/custom_all_reduce.py:78-151
# ("Custom allreduce is disabled because ..."), flashinfer_all_reduce.py:108/121 ("Using/Auto-selected flashinfer
# allreduce backend"), and NCCL's own "NCCL version" banner.
_AR_LINE = re.compile(r"(?i)(custom ?all.?reduce|all.?reduce (call path|config)|allreduce backend|symm(etric)?[_ ]mem|"
                      r"pynccl|NCCL version|quick ?all.?reduce)")
_DISABLE_CUSTOM_AR = "--disable-custom-all-reduce"  # SGLang 0.5.x and vLLM: the same flag, checked against each parser


def _env_of(label: str) -> dict:
    from .grid import parse_grid

    if not label or label == "default":
        return {}
    (setting,) = parse_grid(label)
    return dict(setting)


def tp_settings(engine, best: str | None = None, seed: bool = True) -> list[dict]:
    """The settings to restart the engine with: its default, its custom all-reduce off (plain NCCL), that plus
    the NCCL setting chapter 04's grid recommends (``best``, a grid label), and that plus the seed's block."""
    off = [_DISABLE_CUSTOM_AR]
    out = [{"setting": "engine default", "args": [], "env": {}, "nccl_reaches_decode": "no: the engine's custom all-reduce, where it starts"},
           {"setting": "custom all-reduce off", "args": off, "env": {}, "nccl_reaches_decode": "yes"}]
    if best and best != "default":
        out.append({"setting": f"custom all-reduce off + {best}", "args": off, "env": _env_of(best), "nccl_reaches_decode": "yes",
                    "from_grid": best})
    if seed:
        out.append({"setting": "custom all-reduce off + seed block", "args": off, "env": dict(SEED_ENV), "nccl_reaches_decode": "yes"})
    return out


def allreduce_lines(log_text: str, limit: int = 12) -> list[str]:
    """The engine's own log lines about its all-reduce path (deduplicated, first ``limit``)."""
    seen, out = set(), []
    for line in log_text.splitlines():
        if _AR_LINE.search(line):
            key = re.sub(r"^\S+ \S+ ", "", line.strip())[-200:]
            if key not in seen:
                seen.add(key)
                out.append(line.strip()[-300:])
        if len(out) >= limit:
            break
    return out


def tp_decode_check(engine, model_dir: str | Path, store: RunStore, settings: list[dict], *, tp: int = 2, runs: int = 5,
                    warmup: int = 2, max_tokens: int = 64, concurrency: int = 8, input_len: int = 128,
                    extra_args: list[str] | tuple[str, ...] = (), ready_timeout: float = 600,
                    progress: Callable[[str], None] | None = print) -> list[dict]:
    """Start ``engine`` at ``tp`` once per setting and measure decode; rows in ``tp_e2e`` (resumable)."""
    from .. import bench

    say = progress or (lambda _m: None)
    tokenizer = bench.load_tokenizer(model_dir)
    prompts = bench.build_prompts(tokenizer, input_len, max(warmup + runs, concurrency * 2), seed=0)
    version = engine.version()
    rows = []
    for s in settings:
        done = store.find("tp_e2e", engine=engine.name, setting=s["setting"], tp=tp)
        if done:
            say(f"{engine.name} TP={tp} {s['setting']}: already measured in this run, skipped")
            rows.extend(done)
            continue
        row = {"engine": engine.name, "engine_version": version, "tp": tp, "setting": s["setting"], "env": s["env"],
               "args": s["args"], "nccl_reaches_decode": s.get("nccl_reaches_decode"), "from_grid": s.get("from_grid")}
        t0 = time.monotonic()
        try:
            launch = engine.launch(str(model_dir), tp=tp, extra=list(extra_args) + list(s["args"]), env=s["env"])
            row["launch"] = launch.shell()
            log = store.path / "logs" / f"tp{tp}-{engine.name}-{re.sub(r'[^A-Za-z0-9]+', '_', s['setting'])}.log"
            with Server.start(launch, log, ready_timeout=ready_timeout, registry=store.path / "servers.jsonl", progress=say) as srv:
                row["ready_s"] = srv.ready_s
                info = engine.server_info(srv.base_url) if engine.info_paths else None
                if info and "disable_custom_all_reduce" in info:
                    row["disable_custom_all_reduce"] = info["disable_custom_all_reduce"]
                name = engine.served_model_name(str(model_dir))
                label = f"{engine.name} TP={tp} {s['setting']}"
                single = bench.single_stream(srv.base_url, name, prompts, tokenizer=tokenizer, engine=engine.name, label=label,
                                             max_tokens=max_tokens, runs=runs, warmup=warmup, progress=False)
                row.update(decode_tok_s=single["decode_tok_s_mean"], decode_tok_s_ci95=single["decode_tok_s_ci95"],
                           decode_tok_s_runs=single["decode_tok_s_runs"], itl_ms_p50=single.get("itl_ms_p50"), failed=single["failed"],
                           decode_timed_to=single.get("decode_timed_to"))  # the rule (bench.sse); a row without it: the stream's end
                res = bench.run_requests(srv.base_url, name, prompts[: concurrency * 2], max_tokens=max_tokens, concurrency=concurrency,
                                         engine=engine.name, tokenizer=tokenizer, desc=f"C={concurrency}")
                lvl = bench.summarize_level(res)
                row.update({f"c{concurrency}_throughput_tok_s": lvl.get("throughput_tok_s"), f"c{concurrency}_failed": lvl.get("failed")})
                row["allreduce_log"] = allreduce_lines(srv.log_path.read_text(errors="replace"))
                row["outcome"] = "ok" if srv.alive() and single["decode_tok_s_mean"] else "failed"
        except ServerError as exc:
            from ..servers import engine_error

            row.update(outcome="failed to start", error=engine_error(exc.log_tail) or str(exc), log_tail=exc.log_tail[-1500:])
        except (EngineError, ServebookError) as exc:
            row.update(outcome="failed", error=str(exc))
        row["seconds"] = round(time.monotonic() - t0, 1)
        store.append("tp_e2e", row)
        rows.append(row)
        tok = row.get("decode_tok_s")
        say(f"{engine.name} TP={tp} {s['setting']}: {row['outcome']}" + (f", {tok:.1f} tok/s" if tok else f" ({row.get('error')})"))
    return rows


def tp_check_engines(engines: list, model_dir, store: RunStore, *, tp: int, runs: int, engine_args: str = "",
                     best: str | None = None, seed: bool = True) -> None:
    """Chapter 04's end-to-end check: each engine restarted at tensor parallelism ``tp`` under each of its
    ``tp_settings`` (``best``: the grid's pick on this host), setting by setting with the engines in turn, so the
    comparisons that matter most are measured first. ``engine_args``: per-engine server flags ("sglang: ...; vllm: ...")."""
    from ..engines import args_for
    from ..models import engine_args_of

    plan = [(e, args_for(engine_args, e.name) + engine_args_of(model_dir, e.name), tp_settings(e, best=best, seed=seed))
            for e in engines]
    for i in range(max((len(p[2]) for p in plan), default=0)):
        for e, extra, sets in plan:
            if i < len(sets):
                tp_decode_check(e, model_dir, store, [sets[i]], tp=tp, runs=runs, extra_args=extra,
                                progress=lambda m, n=e.name: print(f"[{n}] {m}", flush=True))
