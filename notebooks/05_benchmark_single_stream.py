# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05. Benchmark single stream and concurrency, against the roofline
#
# The seed case began with one number: a single user streaming from Kimi-K2.5 on 8x RTX PRO 6000
# got fewer tokens per second from SGLang than from vLLM (the seed's own figures are quoted, with their file, in
# "The seed case on paper" below). Single-stream decode speed is what one
# user feels, and it is the number this book keeps coming back to. This chapter measures it
# properly (warm-up, repeated runs, a confidence interval), then loads the server with 1, 2, 4, ...
# concurrent users to see what throughput costs each user, and finally asks how far the single-stream
# number is from what the memory bandwidth allows.
#
# One client drives every engine, so engines are compared with the same clock and the same prompts.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
compare_engines: str = ""  # more engine specs, comma-separated, benchmarked side by side with the same client and prompts
attention: str = ""  # attention backend to force, by the engines own name; empty for the engines default
engine_args: str = ""  # extra server flags, e.g. --compile for transformers serve
api: str = "completions"  # completions | chat
max_tokens: int = 128  # output tokens per request (fixed length where the engine allows)
input_len: int = 128  # prompt length in the models tokens
runs: int = 5  # single-stream runs after warm-up (mean and 95% CI over runs)
starts: int = 2  # server starts per engine: the single stream is measured after each, the 95% interval is taken over the per-start means (1: within one start only)
warmup: int = 2  # single-stream warm-up requests (not counted)
requests_per_run: int = 1  # requests per single-stream run
max_concurrency: int = 128  # the sweep doubles concurrency 1, 2, 4, ... up to this
requests_per_level: int = 5  # requests per sweep level, times the concurrency
level_time_budget_s: int = 120  # a sweep level starts no new request after this many seconds
saturation_patience: int = 2  # stop the sweep after this many levels without 10 percent more throughput; 0 runs every level
seed: int = 0  # seed of the prompt set
client_check: bool = True  # on a live SGLang server, also run SGLangs own client - sglang.bench_serving in turns with servebooks, at concurrency 1 and 8
ceiling_sglang_version: str = "0.5.9"  # SGLang version whose prepared environment (servebook engines add, never built here) runs sglang.bench_serving against the fake server beside servebooks client and httpx; empty skips it
measure: bool = True  # False: start nothing and measure nothing, re-read this run's tables (servebook html RUN --refresh 05)
seed_model: str = "kimi-k2.5"  # model card of the seed case, for its roofline
seed_profile: str = "rtx-pro-6000"  # hardware profile of the seed case
seed_tp: int = 8  # tensor-parallel size of the seed case
seed_allreduce_us: float = 0.0  # per-all-reduce latency (us) assumed for the seed case communication floor; 0: the latencies recorded in data/runs/h200x2-nccl (H200 NVLink, as in the what-if book); chapter 04 measures yours
profile_steps: int = 40  # decode steps to profile per engine with its own profiler (0: no profile)
profile_depths: str = "2,3"  # slice depths (layers) profiled for the full-model prediction; empty: only the model as given
seed_reported_tok_s: str = ""  # single-stream tok/s of the seed case, engine:value pairs (e.g. vllm:82.5,sglang:63.6); empty: the seed's own figures in data/reference/seed-case.json


# %% [markdown] tags=["whatif"]
# ## What-if: the roofline and the benchmark plan
# `profile` is set: nothing is benchmarked here. The single-stream limit is predicted from the profile
# (memory bandwidth) and the model card (bytes one decode step reads, counted layer by layer), first by
# bandwidth alone, then with chapter 04's communication floors. Stored in the table `roofline`; the
# commands to measure the real number on the host are in `plan_commands`.

# %% tags=["whatif"]
import pandas as pd
from IPython.display import Markdown

from servebook import plan
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
facts = plan.host_facts(store, engine, model, profile)
plan.plan_bench(store, facts)
roof = store.table("roofline")
roof = roof[roof["chapter"] == "05"]
roof[["case", "tok_s", "t_mem_ms", "t_comm_ms", "bytes_per_token", "bandwidth_tbs", "tp"]].round(3)

# %% [markdown] tags=["whatif"]
# A measured rate on the host is judged against these: far below the bandwidth-only line means time goes elsewhere.

# %% tags=["whatif"]
pd.set_option("display.max_colwidth", None)
cmds = store.table("plan_commands")
cmds[cmds["chapter"] == "05"][["purpose", "command"]]

# %% [markdown] tags=["whatif"]
# ## What we found

# %% tags=["whatif"]
from servebook.stated import q, seed_case, seed_sentence

subject = f"{facts['model']} on {facts['gpus']}x {facts['profile']}"
lines = []
for _, r in roof.iterrows():
    limit = (q("card_roofline_tok_s", r["tok_s"], ",.0f", of=subject) if r["case"].endswith(": bandwidth only")
             else f"{r['tok_s']:,.0f}")
    lines.append(f"- {r['case']}: at most {limit} tok/s ({r['bytes_per_token'] / 1e9:.1f} GB per token over "
                 f"{int(r['tp'])} GPUs at {r['bandwidth_tbs']} TB/s each, plus {r['t_comm_ms']:.2f} ms of all-reduce).")
lines.append("- Predicted from data files, not measured: the benchmark commands above measure the real rate on the host.")
seed = seed_case()
if (facts["model"], facts["profile"], facts["gpus"]) == (seed["model"], seed["profile"], seed["tp"]):
    lines.append(f"- This profile is the seed case's host. {seed_sentence()}")
Markdown("\n".join(lines))

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
from servebook.findings import check_yourself_markdown

bw_only = roof[roof["case"].str.endswith(": bandwidth only")]
with_comm = roof[~roof["case"].str.endswith(": bandwidth only")]
qa = []
if len(bw_only):
    b = bw_only.iloc[0]
    qa.append(("What bounds single-stream decode on this profile before any overhead, and from which files?",
               f"{b['tok_s']:,.0f} tok/s: {b['bytes_per_token'] / 1e9:.1f} GB read per token (data/models/{facts['model']}.json, "
               f"counted layer by layer) over {int(b['tp'])} GPUs at {b['bandwidth_tbs']} TB/s each (data/hardware/{facts['profile']}.json)."))
if len(with_comm):
    lo, hi = with_comm["tok_s"].min(), with_comm["tok_s"].max()
    qa.append(("Why does this page give several limits, and which one will the real host reach?",
               f"Each adds the all-reduce floor at one latency recorded on another host ({lo:,.0f} to {hi:,.0f} tok/s); the profile's own "
               "latency is unmeasured, so none of them is its limit. Chapter 04 on the real host gives the latency, chapter 05 there the "
               "real rate: far below every line means the time goes to overhead, not to bytes or all-reduces."))
Markdown(check_yourself_markdown(qa) if qa else "_No roofline was predicted here to ask about._")

# %% [markdown] tags=["whatif"]
# Next: [06. Findings](06_findings.html) — the root causes, from the engine's own code.

# %%
import json
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown

from servebook import bench, roofline
from servebook.engines import args_for, get_engine
from servebook.findings import throughput as measured_throughput
from servebook.errors import ServebookError
from servebook.models import engine_args_of
from servebook.params import resolve_model
from servebook.results import RunStore, derived_from, standing
from servebook.hosts import get_host, model_on_host

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
on_host = get_host(host, run_dir=store.path)  # servers and the benchmark client run there, next to each other
t_chapter = time.monotonic()
resolved = resolve_model(model)
model_dir = resolved if isinstance(resolved, Path) else None
engines = [e.strip() for e in [engine, *compare_engines.split(",")] if e.strip()]
if smoke:  # small and fast, still real streamed tokens
    max_tokens, input_len, runs, warmup, requests_per_run = min(max_tokens, 32), min(input_len, 32), min(runs, 3), min(warmup, 1), 1
    starts = min(starts, 2)
    max_concurrency, requests_per_level, level_time_budget_s = min(max_concurrency, 2), 1, 20
print(f"run {store.path}\nmodel: {model_dir or model}\nengines: {', '.join(engines)}; api {api}; {input_len} in / {max_tokens} out tokens")

# %% [markdown]
# ## The client, and its own ceiling
# Method: each request is an HTTP/1.1 streaming POST; while it streams, the client only
# timestamps each network read. SSE events are parsed and tokenized after the batch, so parsing
# never delays another stream. Per request we keep TTFT (with and without the wait for a
# concurrency slot), per-token inter-token latency and raw inter-chunk gaps apart (a chunk may
# carry several tokens), TPOT, end-to-end latency and the output tokens.
#
# Before trusting it with a server, we measure how fast the client itself can go: a local fake SSE
# server (not an engine) streams tokens as fast as it can, pinned to another core. Two other clients stream the same
# requests from the same fake server at the same levels, for the comparison below: httpx, and SGLang's own benchmark
# client.

# %%
tokenizer = bench.load_tokenizer(model_dir) if model_dir and measure else None
ceiling = None if len(store.rows("client_ceiling")) or not measure else bench.client_ceiling(store=store, tokenizer=tokenizer,
                               concurrencies=(1, 8) if smoke else (1, 64), tokens_per_request=2048, requests_per_level=2,
                               clients=bench.CLIENTS, bench_serving=f"sglang=={ceiling_sglang_version}" if ceiling_sglang_version else "",
                               tokenizer_dir=model_dir,
                               workdir=store.path / "bench_serving_ceiling")
ceiling_all = store.table("client_ceiling")
ceiling_df = ceiling_all[ceiling_all["client"].fillna("servebook") == "servebook"] if "client" in ceiling_all else ceiling_all
ceiling_df[["concurrency", "events_per_write", "tokens", "stream_tok_s", "client_cpu_us_per_token", "parse_us_per_token", "ttft_server_p50_s"]]

# %%
ceiling_tok_s = float(ceiling_df["stream_tok_s"].max())
per_read_us = float(ceiling_df[ceiling_df["events_per_write"] == ceiling_df["events_per_write"].min()]["client_cpu_us_per_token"].max())
print(f"client ceiling: {ceiling_tok_s:,.0f} streamed tokens/s; {per_read_us:.1f} us of client CPU per token when every token is its own network read")

# %% [markdown]
# That is the client's limit on this host. Each measurement below is checked against it after the sweep: a rate that
# uses much of it would be measuring the client, not the server.

# %% [markdown]
# ### Why servebook has an HTTP client of its own
# servebook's transport is its own asyncio code (httptools parses the HTTP), not a library. It earns that only if its
# ceiling is a set multiple of `sglang.bench_serving`'s (the goal, `bench.CEILING_GOAL`) and a library client's is not.
# The three clients took the same levels against the same fake servers, pinned to the same CPU: servebook's; httpx as
# its documentation shows it (one `AsyncClient`, `client.stream`, `aiter_bytes`, each chunk timestamped and parsed after
# the batch by the same code as servebook's); and `sglang.bench_serving` (aiohttp), run in SGLang's own interpreter.
# A client's ceiling is its highest rate over the levels; `client_busy` is the share of its core it used (servebook and
# httpx; where it is well below one, the fake server set the pace, not the client).

# %%
compare_df = pd.DataFrame(bench.ceiling_comparison(store.rows("client_ceiling")))
verdict = bench.ceiling_verdict(store.rows("client_ceiling"))
if "client" in ceiling_all:
    display(compare_df.round(2))
    display(ceiling_all.sort_values(["events_per_write", "concurrency"], kind="stable")[
        ["events_per_write", "concurrency", "client", "ok", "requests", "stream_tok_s", "client_cpu_us_per_token", "client_busy",
         "ttft_server_p50_s"]].round(3))
    for client, why in verdict["skipped"].items():
        print(f"{client} not measured: {why}")
print(f"goal: servebook's ceiling at least {verdict['goal']}x sglang.bench_serving's; {verdict['reason']}")

# %%
from servebook.stated import q


def ceiling_sentence(v: dict) -> str:
    """The verdict on servebook's own transport, every figure from the rows of `client_ceiling`."""
    if not v["compared"]:
        return f"Not compared in this run: {v['reason']}."
    rates = ", ".join(f"{k} {q('client_ceiling_tok_s', t, ',.0f', of=k)}" for k, t in v["ceilings"].items())
    out = f"Client ceilings against the fake server: {rates} tok/s."
    if not v["bench_serving_measured"]:
        return f"{out} {v['reason']}: this run does not decide whether the hand-written transport is justified."
    for k in ("servebook", "httpx"):
        if v["ratios"][k] is not None:
            out += (f" At its best level {k}'s is {q('ceiling_ratio', v['ratios'][k], '.1f', of=k)}x bench_serving's "
                    f"({'above' if v['reaches'][k] else 'below'} the goal of {v['goal']}x).")
    r = v["decided_in"] or {}
    if r.get("servebook_ratio") and r.get("httpx_ratio"):
        out += (f" The verdict is taken where engines stream, one token per network read ({r['events_per_write']} event per "
                f"write): there servebook's is {r['servebook_ratio']:.2f}x and httpx's {r['httpx_ratio']:.2f}x, their cores "
                f"{r['servebook_busy']:.0%} and {r['httpx_busy']:.0%} busy.")
    if v["justified"] is None:
        return f"{out} Not decided here: {v['reason']}."
    return (f"{out} The hand-written transport is {q('fast_path_justified', v['justified'], 'justified|not justified')} on "
            f"this host: {v['reason']}.")


display(Markdown(ceiling_sentence(verdict)))

# %% [markdown]
# The verdict is this host's: a slower or busier CPU moves all three ceilings. It is judged at one event per write
# because that is how SGLang and vLLM stream (chapter 05's `tokens_per_chunk` is 1.0 on both in the recorded H200 runs),
# and only where both clients' cores were busy there: on a machine with few cores the one-core fake server sets the pace
# at that level, and the page says so instead of deciding. Levels with many tokens per write show each client's
# parsing cost alone.

# %% [markdown]
# ## Prompts
# Seeded windows of local text (CPython's language reference) cut to exactly `input_len` tokens of
# the model's own tokenizer. Nothing is downloaded.

# %%
prompts = []
if tokenizer is not None:
    n_prompts = max(8, warmup + runs * requests_per_run, requests_per_level * max_concurrency)
    prompts = bench.build_prompts(tokenizer, input_len, min(n_prompts, 256), seed=seed)
    print(f"{len(prompts)} prompts, token lengths {sorted({p.tokens for p in prompts})}; first: {prompts[0].text[:80]!r}")
elif not measure:
    print("measure=False: nothing is started or measured; every table below is this run's, as recorded")
else:
    store.record_failure("bench", f"model {model!r} is a model card, not a local model directory: nothing to serve on this host; "
                                  "pass 'embedded' or a model directory to measure; the roofline below still applies")
    print(f"model {model!r} is a card, not a local model: nothing to serve here; the roofline below still applies")

# %% [markdown]
# ## Single stream, and the concurrency sweep, engine by engine
# Each engine is started with servebook's launcher (its process group is stopped on every path),
# warmed up, then measured. A failure (engine missing, server refusing) is recorded as a finding and
# the next engine runs. With a remote `host` the client runs on that host beside the server, so the
# network between you and the host never enters a latency; only the raw timestamps travel back.

# %%
def check_client(eng, url: str, name: str, label: str) -> None:
    """servebook's client and SGLang's own (``sglang.bench_serving``, run in the engine's interpreter) taking turns on this
    live server and workload; each metric's difference, both directions kept (table ``bench_client_check``)."""
    from servebook.bench import compare as bench_compare

    for c in (1, 8):
        have = {r["metric"] for r in store.find("bench_client_check", label=label, concurrency=c) if not r.get("harness_fault")}
        if {"ttft_ms", "itl_ms", "output_tok_s"} <= have:  # a metric servebook measured wrongly is measured again
            continue
        try:
            a = bench_compare.agreement(eng.python, url, name, model_dir, tokenizer, input_len=input_len, output_len=max_tokens,
                                        concurrency=c, num_prompts=max(4, 2 * c), engine=eng.name, repeats=1,
                                        workdir=store.path / "bench_serving")
        except (RuntimeError, ServebookError) as exc:
            store.record_failure(f"bench_serving check {label} C={c}", str(exc)[-400:])
            print(f"sglang.bench_serving at C={c} failed: {str(exc)[-200:]}")
            continue
        for metric, m in a["metrics"].items():
            store.append("bench_client_check", {"label": label, "engine": eng.name, "concurrency": c, "metric": metric,
                                                "servebook": m["servebook"], "bench_serving": m["bench_serving"], "rel_diff": m["rel_diff"],
                                                "servebook_runs": m["servebook_runs"], "bench_serving_runs": m["bench_serving_runs"],
                                                "servebook_spread": m["servebook_spread"],
                                                "method": "servebook, then bench_serving, then servebook on the same server, prompts and "
                                                          "output length; servebook's value is the mean of its two runs"})


def bench_engine(spec: str) -> None:
    eng = get_engine(spec, python=None if on_host.in_process else on_host.python_exe)
    eng.host = on_host
    label = f"{eng.name}/{attention or 'default'}" + (f" {' '.join(args_for(engine_args, eng.name))}" if args_for(engine_args, eng.name) else "")
    try:
        eng.require()
        host_model = model_on_host(on_host, model, model_dir)
        launch = eng.launch(host_model, attention=attention or None, extra=args_for(engine_args, eng.name) + engine_args_of(model_dir, eng.name),
                            port=0 if on_host.in_process else on_host.free_port())
        with on_host.serve(launch, log_path=store.path / f"server-{eng.name}.log", registry=store.path / "servers.jsonl",
                           ready_timeout=600) as srv:
            name = eng.served_model_name(host_model)
            try:
                bench.check_server(srv.base_url, host=on_host)
            except ServebookError as exc:  # the model list is a courtesy endpoint: note it, measure anyway
                store.record_failure(f"bench {label} model list", exc)
                print(f"note: {exc}")
            common = dict(store=store, tokenizer=tokenizer, engine=eng.name, attention=attention, label=label, api=api,
                          max_tokens=max_tokens, host=on_host)
            done = bench.start_measured(store, label, 0, max_tokens, warmup)
            if done:  # resuming this run: the single-stream measurement is already recorded
                single = done
            else:
                single = bench.single_stream(srv.base_url, name, prompts, runs=runs, warmup=warmup,
                                             requests_per_run=requests_per_run, start=0, **common)
            if single.get("decode_tok_s_mean") is None:  # the server died or refused every request: recorded in `failures`
                print(f"{label}: no single-stream request succeeded ({single['failed']} failed): {(single.get('errors') or ['?'])[0]}")
            else:
                print(f"{label}: {single['decode_tok_s_mean']:.1f} ± {single['decode_tok_s_ci95'] or 0:.1f} tok/s single stream")
            bench.concurrency_sweep(srv.base_url, name, prompts, max_concurrency=max_concurrency,
                                    requests_per_level=requests_per_level, level_time_budget_s=level_time_budget_s,
                                    saturation_patience=saturation_patience, **common)
            if client_check and eng.name == "sglang" and on_host.in_process and not smoke:
                check_client(eng, srv.base_url, name, label)
            loaded = getattr(eng, "loaded_from_log", lambda _t: [])(srv.log_path.read_text(errors="replace"))
            store.append("bench_servers", {"label": label, "engine": eng.name, "version": eng.version(), "launch": launch.shell(),
                                           "ready_s": srv.ready_s, "loaded": loaded})
            bench.record_start(store, single, model=host_model, launch=launch.shell(), ready_s=srv.ready_s)
        for k in range(1, starts):  # stopped and started again: only the single stream, so the interval covers restarts
            if bench.start_measured(store, label, k, max_tokens, warmup):
                continue
            again = eng.launch(host_model, attention=attention or None, extra=args_for(engine_args, eng.name)
                               + engine_args_of(model_dir, eng.name), port=0 if on_host.in_process else on_host.free_port())
            with on_host.serve(again, log_path=store.path / f"server-{eng.name}-start{k}.log", registry=store.path / "servers.jsonl",
                               ready_timeout=600) as srv:
                single = bench.single_stream(srv.base_url, name, prompts, runs=runs, warmup=warmup, requests_per_run=requests_per_run,
                                             start=k, **common)
                bench.record_start(store, single, model=host_model, launch=again.shell(), ready_s=srv.ready_s)
                print(f"{label} start {k}: {single['decode_tok_s_mean'] or 0:.1f} ± {single['decode_tok_s_ci95'] or 0:.1f} tok/s single stream")
    except ServebookError as exc:
        store.record_failure(f"bench {label}", exc)
        print(f"{label}: not measured: {exc}")


if model_dir is not None and measure:
    for spec in engines:
        bench_engine(spec)
# a resumed run that measured again with another method (more warm-up, each sweep level warmed first) keeps the older
# rows; the last of each measurement stands (`bench.current`), the pairs are shown below (`bench.remeasured`)
summary_rows, request_rows = bench.current(store.rows("bench_summary"), store.rows("bench_requests"))
summary = pd.DataFrame(summary_rows)
single_all = summary[summary["phase"] == "single"] if len(summary) else summary
single_df = single_all[single_all["decode_tok_s_mean"].notna()] if len(single_all) else single_all  # measured configs
single_cfg = single_df.drop_duplicates("label").copy()  # one row per configuration, its rate taken over server starts
if len(single_cfg):
    single_cfg["decode_tok_s_mean"] = single_cfg["label"].map({t["label"]: t["single_tok_s"] for t in measured_throughput(store)})
if len(single_df) and "start" not in single_df:
    single_df = single_df.assign(start=0)  # recorded before starts were counted: one start
single_df[["label", "start", "decode_tok_s_mean", "decode_tok_s_ci95", "ttft_s_mean", "tpot_s_mean", "itl_ms_p50", "chunk_gap_ms_p50", "tokens_per_chunk", "failed"]] if len(single_df) else "no single-stream result"

# %% [markdown]
# The single-stream rate is the mean over runs of (output tokens - 1) / (end - first token), with a 95% t-interval over runs,
# within one server start. The same configuration's rate can move more between server starts than within one (on a lent
# H200, by 13-30% for the same SGLang default on a 2-layer slice, issue #28), so each engine is stopped and started again
# `starts` times and the interval that verdicts use is taken over the per-start means:

# %%
over = pd.DataFrame([{"label": t["label"], "starts": t["starts"], "per_start_tok_s": t["start_tok_s"], "decode_tok_s": t["single_tok_s"],
                      "ci95": t["single_ci95"], "interval over": t["single_over"]} for t in measured_throughput(store)])
over.round(1) if len(over) else "no single-stream result"

# %% [markdown]
# A row with one start has only the interval within that start: it says nothing about the spread between starts, and a
# comparison with it is no verdict.

# %% [markdown]
# Chapter 03 also measures each engine's default single stream, briefly, beside every forced backend. Where both chapters
# measured it, are the two numbers one measurement taken twice? Only if the method was the same:

# %%
from servebook.findings import default_methods, say_default_methods

Markdown(say_default_methods(default_methods(store)))

# %%
req = pd.DataFrame(request_rows)
if len(req):
    single_req = req[(req["phase"] == "single") & req["ok"]]
    fig, ax = plt.subplots(figsize=(6, 3))
    for label, g in single_req.groupby("label"):
        ax.plot(g["run"], g["decode_tok_s"], "o-", label=label)
    ax.set_xlabel("run")
    ax.set_ylabel("decode tok/s")
    ax.set_title("single stream, run by run")
    ax.legend(fontsize=8)
    plt.tight_layout()

# %% [markdown]
# Run-to-run spread is what the confidence interval above summarizes.

# %% [markdown]
# ### Concurrency: throughput against what each user gets
# Every level sends `requests_per_level x C` requests with at most C in flight, all arriving at
# once. `ttft_s` includes the wait for a slot (what a queued user sees); `ttft_server_s` starts when
# the request is sent.

# %%
sweep_df = summary[summary["phase"] == "sweep"] if len(summary) else summary
sweep_ok = sweep_df[sweep_df["throughput_tok_s"].notna()] if len(sweep_df) else sweep_df
if len(sweep_ok):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    bench.plot_pareto(sweep_ok, ax=axes[0])
    bench.plot_latency(sweep_ok, "ttft_server_s", ax=axes[1])
    plt.tight_layout()
if len(sweep_df):
    display(sweep_df[["label", "concurrency", "ok", "failed", "throughput_tok_s", "per_user_tok_s", "ttft_s_p50", "ttft_server_s_p50",
                      "ttft_server_s_p99", "tpot_s_p50", "tpot_s_p99", "itl_ms_p99", "truncated"]])

# %% [markdown]
# Up and to the right is better: a server that batches trades a little per-user speed for much more total throughput; one that serializes requests stays flat.

# %%
again = bench.remeasured(store.rows("bench_summary"))  # measurements this run took twice, with another method the second time
if again:
    display(pd.DataFrame(again)[["label", "phase", "concurrency", "before", "before_method", "after", "after_method"]].round(1))

# %%
ceiling_check = pd.DataFrame(bench.ceiling_check(summary, ceiling_df, store=store))  # rates already checked are not checked again
near = ceiling_check[ceiling_check["near_ceiling"]] if len(ceiling_check) else ceiling_check
for _, r in near.iterrows():
    print(f"WARNING: {r['label']} {r['phase']} C={r['concurrency']}: {r['tok_s']:,.1f} tok/s is {r['share_of_ceiling']:.0%} of the "
          f"client's ceiling and keeps {r['client_core_share'] or 0:.0%} of its core busy: this number may be the client's, not the server's")
if len(ceiling_check):
    worst = ceiling_check.sort_values("share_of_ceiling").iloc[-1]
    print(f"highest use of the client's ceiling: {worst['share_of_ceiling']:.2%} ({worst['label']}, {worst['phase']} C={worst['concurrency']}); "
          f"warning threshold {worst['warn_at']:.0%}")

# %% [markdown]
# Every measured rate above, single-stream and each sweep level, is checked against the client ceiling measured at the
# nearest concurrency (table `bench_ceiling_check`); a rate using more than half of it is flagged, since it may then be the client's.

# %% [markdown]
# ### servebook's client against SGLang's own
# On a live SGLang server, `sglang.bench_serving` (run in SGLang's own interpreter) and servebook's client take turns on
# the same prompts and output length. `rel_diff` is (servebook - bench_serving) / bench_serving per metric, in both
# directions: TTFT as each client starts its clock, ITL per token, output tokens/s over the batch.

# %%
cc = store.table("bench_client_check")
if len(cc):
    if "harness_fault" not in cc:
        cc["harness_fault"] = None
    first = cc.drop_duplicates(["label", "concurrency", "metric"], keep="first")
    cc = cc.drop_duplicates(["label", "concurrency", "metric"], keep="last")  # a level measured again stands in its last form
    for (_, a), (_, b) in zip(first.iterrows(), cc.iterrows()):
        if pd.notna(a["harness_fault"]) and pd.isna(b["harness_fault"]):
            print(f"{b['metric']} at C={int(b['concurrency'])}: measured again after a servebook fault was fixed ({a['harness_fault'][:120]}...): "
                  f"servebook {a['servebook']:.3g} then, {b['servebook']:.3g} now; bench_serving {a['bench_serving']:.3g} then, {b['bench_serving']:.3g} now")
    display(cc[["label", "concurrency", "metric", "servebook", "bench_serving", "rel_diff", "servebook_spread"]].round(4))
    judged = cc[cc["harness_fault"].isna()]  # a row servebook measured wrongly compares nothing
    for _, r in cc[cc["harness_fault"].notna()].drop_duplicates("metric").iterrows():
        print(f"{r['metric']}: not compared, servebook's value is a harness fault: {r['harness_fault']}")
    if len(judged):
        worst = judged.loc[judged["rel_diff"].abs().idxmax()]
        print(f"largest difference: {worst['metric']} at C={int(worst['concurrency'])}: {worst['rel_diff']:+.1%} "
              f"(servebook's own run-to-run spread there: {worst['servebook_spread']:.1%})")
else:
    tried = [f for f in store.rows("failures") if str(f.get("step", "")).startswith("bench_serving check")]
    if tried:  # it ran and failed: say so with bench_serving's own last error line
        last = [ln.strip() for ln in str(tried[-1]["error"]).splitlines() if "Error" in ln] or [str(tried[-1]["error"])[-200:]]
        print(f"sglang.bench_serving did not complete on the live server ({len(tried)} attempt(s), table `failures`): {last[-1][:300]}")
    else:
        print("not measured here: needs a live SGLang server (engine or compare_engines sglang) on this machine")

# %% [markdown]
# ## Against the roofline
# At batch 1 every new token reads every active weight once, so
# `time per token >= bytes per token / memory bandwidth`. Bytes come from the model's safetensors
# headers (routed experts scaled by how many are active per token, one embedding row); bandwidth is
# the GPU's datasheet figure on a GPU host, or measured on the CPU where there is no GPU: the cell below says
# which one this run used.

# %%
roof_rows = []
# derived rows are keyed by the measurement they derive from (its last single-stream row, method included): taken again, it supersedes them
sources = {r["label"]: derived_from(r, method={k: r.get(k) for k in ("warmup", "runs", "max_tokens", "input_len")})
           for r in summary_rows if r.get("phase") == "single"}
rate_of = dict(zip(single_cfg["label"], single_cfg["decode_tok_s_mean"])) if len(single_cfg) else {}
def _stands(r, ms):  # a row written before derived rows named their source: it stands if its rate is the current one
    return any(str(r.get("case", "")).startswith(f"{lab} on ") and abs(ms(r) - 1e3 / tok) < 1e-6 * ms(r) for lab, tok in rate_of.items() if tok)
if model_dir is not None and not measure:  # the rows this run recorded, with the bandwidth of the host that measured them
    roof_rows = standing([r for r in store.rows("bench_roofline") if r.get("source") == "measured here"], sources.values(),
                         identity=("case",), legacy=lambda r: _stands(r, lambda x: 1e3 / x["measured_tok_s"]))
    if roof_rows:
        display(Markdown(f"Bandwidth for this run's roofline: **{roof_rows[0]['bandwidth_tbs'] * 1e3:,.1f} GB/s**, the "
                         f"{roof_rows[0]['bandwidth_source']} (as recorded on the host)."))
elif model_dir is not None:
    if list(model_dir.glob("*.safetensors")):
        weights = roofline.weight_bytes(model_dir)
    else:  # built without weights (the engines' --load-format dummy): the same count from the config, layer by layer
        weights = roofline.config_bytes_per_token(json.loads((model_dir / "config.json").read_text()))
        weights["total_params"] = weights["total_params"]
    bw = roofline.host_memory_bandwidth(size_mib=256 if smoke else 1024, repeats=3 if smoke else 5)
    print(f"weights: {weights['total_bytes'] / 1e6:.1f} MB in {weights['total_params'] / 1e6:.1f}M parameters; "
          f"{weights['bytes_per_token'] / 1e6:.1f} MB read per decode token")
    display(Markdown(f"Bandwidth for this run's roofline: **{bw['bandwidth_tbs'] * 1e3:,.1f} GB/s**, "
                     + (f"measured on this host's CPU ({bw['method']})." if bw.get("source") == "measured" else f"the {bw['method']}.")
                     if bw["bandwidth_tbs"] else f"No bandwidth for a roofline: {bw['method']}."))
    if bw["bandwidth_tbs"]:
        roof = roofline.decode_roofline(weights["bytes_per_token"], bw["bandwidth_tbs"],
                                        context_tokens=input_len + max_tokens // 2,
                                        kv_bytes_per_token=roofline.kv_bytes_per_token(cfg_json := json.loads((model_dir / "config.json").read_text()),
                                                                                         4.0 if cfg_json.get("torch_dtype") == "float32" else 2.0))
        for _, r in single_cfg.iterrows():
            row = {"case": f"{r['label']} on {bw['device']}", "measured_tok_s": r["decode_tok_s_mean"], "roofline_tok_s": roof["tok_s"],
                   "pct_of_roofline": 100 * r["decode_tok_s_mean"] / roof["tok_s"], "bytes_per_token": roof["bytes_per_token"],
                   "bandwidth_tbs": bw["bandwidth_tbs"], "bandwidth_source": bw["method"], "tp": 1, "source": "measured here",
                   "derived_from": sources.get(r["label"])}
            store.append("bench_roofline", row)
            roof_rows.append(row)

# %% [markdown]
# What each decode step would cost if it only had to stream its bytes, against what it took.

# %%
slice_meta = (model_dir / "servebook_model.json") if model_dir is not None else None
if slice_meta is not None and slice_meta.is_file() and roof_rows:
    f = json.loads(slice_meta.read_text())["facts"]
    bw_tbs = roof_rows[0]["bandwidth_tbs"]
    rows_x = []
    for r in roof_rows:
        t_slice = 1e3 / r["measured_tok_s"]
        eff = (f["slice_bytes_per_token"] / (bw_tbs * 1e12) * 1e3) / t_slice  # the share of the bandwidth floor the slice reached
        for what, nbytes in (("full model, bf16 like the slice", f["full_bytes_per_token_bf16"]),
                             ("full model, the card's quantization", f["full_bytes_per_token_card"])):
            floor_ms = nbytes / (bw_tbs * 1e12) * 1e3
            rows_x.append({"case": r["case"], "full_model": what, "layers": f"{f['slice_layers']} -> {f['full_layers']}",
                           "slice_ms_per_token": t_slice, "slice_share_of_floor": eff, "full_floor_ms": floor_ms,
                           "predicted_full_ms_per_token": floor_ms / eff if eff else None,
                           "label": "prediction, not measured: every layer assumed to reach the slice's share of the bandwidth floor on one GPU",
                           "derived_from": r.get("derived_from") or next((v for k, v in sources.items() if r["case"].startswith(f"{k} on ")), None)})
    for x in rows_x if measure else []:  # executed again on recorded tables (measure=False), a chapter writes nothing
        if not store.done("model_extrapolation", case=x["case"], full_model=x["full_model"], derived_from=x["derived_from"]):
            store.append("model_extrapolation", x)
    stands = standing(store.rows("model_extrapolation"), sources.values(), identity=("case", "full_model"),
                      legacy=lambda r: _stands(r, lambda x: x["slice_ms_per_token"]))
    if not stands and store.rows("model_extrapolation"):
        print("table model_extrapolation holds rows of a superseded measurement only; shown: the same computed now from the one that stands")
    display(pd.DataFrame(stands or rows_x).drop(columns=["derived_from"], errors="ignore").round(3))
    print(f"slice: {f['slice_layers']} of {f['full_layers']} layers, {f['slice_bytes_per_token'] / 1e9:.2f} GB read per token; "
          f"full model: {f['full_bytes_per_token_bf16'] / 1e9:.1f} GB in bf16, {f['full_bytes_per_token_card'] / 1e9:.1f} GB with the card's quantization")

# %% [markdown]
# The slice has the full model's width, so its kernels see the real shapes; the extrapolation above is a labelled
# prediction. It assumes time scales with bytes read at the efficiency the slice reached, which overstates the full
# model's time where fixed per-token costs (launches, sampling, the scheduler) dominate a 2-layer slice, and understates
# it where the full model needs several GPUs and their all-reduces (chapter 04). A second slice with more layers
# measured the same way would turn the assumption into a per-layer slope.

# %% [markdown]
# ### Where the time goes
# Method: the same model decoding in this process with `model.generate` (no server, no HTTP),
# timed as (N-1)/(t(N)-t(1)), with torch's default threads and with one; the faster is the model's
# own time. The gap to the served rate is the serving path; the gap from the bandwidth floor to
# in-process decode is compute and framework overhead.

# %%
breakdown = pd.DataFrame()
inproc_engine = {get_engine(e).name for e in engines} <= {"transformers"}
if roof_rows and len(single_df) and not inproc_engine:
    print("in-process decode not measured: it runs transformers' model.generate, not the kernels of "
          f"{', '.join(engines)}; the served rate is compared with the bandwidth floor only")
if roof_rows and len(single_df) and inproc_engine and not measure:
    inproc = store.table("bench_inprocess")
    print("in-process decode as recorded:" if len(inproc) else "in-process decode was not recorded in this run")
    breakdown = store.table("bench_breakdown")
    breakdown = breakdown[breakdown["label"].isin(single_df["label"])] if len(breakdown) and "label" in breakdown else breakdown
elif roof_rows and len(single_df) and inproc_engine:
    for threads in ((1,) if smoke else (None, 1)):  # torch's default threads, and one: small CPU models are often faster on one
        store.append("bench_inprocess", bench.inprocess_decode_rate(model_dir, prompts[0].text, max_tokens=max_tokens,
                                                                    attention=attention or None, repeats=1 if smoke else 3,
                                                                    threads=threads))
    inproc = store.table("bench_inprocess")
    display(inproc[["tok_s", "threads", "device", "dtype", "attention"]])
    direct = inproc.sort_values("tok_s").iloc[-1]
    first = single_cfg.iloc[0]
    if direct["tok_s"] < first["decode_tok_s_mean"]:
        print("note: in-process decode measured slower than served (the host was busier, or the server runs the model "
              "differently); the split below is then not meaningful")
    served_ms, direct_ms = 1e3 / first["decode_tok_s_mean"], 1e3 / direct["tok_s"]
    parts = roofline.time_breakdown(first["decode_tok_s_mean"], roof,
                                    compute_and_framework=direct_ms - roof["t_mem_ms"] - roof["t_comm_ms"],
                                    serving_path=served_ms - direct_ms)
    for p in parts:
        store.append("bench_breakdown", {"label": first["label"], **p})
    breakdown = store.table("bench_breakdown")
    print(f"in-process decode: {direct['tok_s']:.1f} tok/s ({direct['method']})")
breakdown

# %% [markdown]
# Shares of one served token's time; a negative "unexplained" share means the parts overlap (e.g. the server computes while streaming).

# %% [markdown]
# ### The seed case on paper
# Kimi-K2.5 (INT4) with TP=8 on RTX PRO 6000, from data files only: the bandwidth bound (the card's bytes per token
# over the profile's bandwidth; the what-if book states the same figure), then with the communication floor added
# (two all-reduces per layer, at a latency measured elsewhere or assumed: each line says which).

# %%
from servebook.findings import nccl as nccl_answer
from servebook.paths import data_dir
from servebook.stated import REFERENCE_NCCL_RUN, card_roofline, q, seed_case, seed_sentence

display(Markdown(seed_sentence()))
seed_rows, floors, seed_roof = [], [], None
try:
    card = roofline.load_model_card(seed_model)
    arch = roofline.config_bytes_per_token(card)   # layer by layer from the card's config
    avg = roofline.card_bytes_per_token(card)      # cross-check: active parameters x the checkpoint's average bytes/param
    from servebook.profiles import load_profile

    prof = load_profile(seed_profile)
    bound = card_roofline(seed_model, seed_tp, seed_profile)
    if seed_allreduce_us > 0:
        latencies = [(f"{seed_allreduce_us:g} us, an assumption (the parameter `seed_allreduce_us`)", seed_allreduce_us)]
    else:
        ref_nccl = nccl_answer(RunStore(data_dir() / "runs" / REFERENCE_NCCL_RUN)) or {}
        latencies = [(f"{ref_nccl['default_us']:.1f} us, NCCL's defaults measured over NVLink on H200 x2 (`data/runs/{REFERENCE_NCCL_RUN}`)",
                      ref_nccl["default_us"])] if ref_nccl.get("default_us") else []
        if ref_nccl.get("setting") not in (None, "default") and ref_nccl.get("best_us"):
            latencies.append((f"{ref_nccl['best_us']:.1f} us, `{ref_nccl['setting']}` measured there", ref_nccl["best_us"]))
    n_ar = roofline.allreduces_per_token(card)
    floors = [(label, roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp, allreduce_us=us,
                                               allreduces_per_token=n_ar)) for label, us in latencies]
    seed_roof = floors[0][1] if floors else roofline.decode_roofline(arch["bytes_per_token"], prof["memory_bandwidth_tbs"], tp=seed_tp,
                                                                     allreduce_us=0.0, allreduces_per_token=n_ar)
    reported = ({k.strip(): float(v) for k, v in (kv.split(":") for kv in seed_reported_tok_s.split(",") if ":" in kv)}
                if seed_reported_tok_s else seed_case()["single_stream_tok_s"])
    for eng_name, tok_s in reported.items():
        row = {"case": f"{seed_model} on {seed_tp}x {seed_profile} ({eng_name}, reported by the seed)", "measured_tok_s": float(tok_s),
               "roofline_tok_s": bound["tok_s"], "roofline_with_comm_tok_s": seed_roof["tok_s"],
               "pct_of_roofline": 100 * float(tok_s) / bound["tok_s"], "bytes_per_token": bound["bytes_per_token"],
               "bandwidth_tbs": prof["memory_bandwidth_tbs"], "t_mem_ms": seed_roof["t_mem_ms"], "t_comm_ms": seed_roof["t_comm_ms"],
               "tp": seed_tp, "allreduce_us": seed_roof["allreduce_us"], "allreduce_source": floors[0][0] if floors else None,
               "bytes_method": arch["method"],
               "source": "reported by the seed case" + ("" if seed_reported_tok_s else " (data/reference/seed-case.json)")
                         + "; roofline from the card and the profile"}
        if not store.done("bench_roofline", case=row["case"], roofline_tok_s=row["roofline_tok_s"], t_comm_ms=row["t_comm_ms"]):
            store.append("bench_roofline", row)
            for part in roofline.time_breakdown(float(tok_s), seed_roof):
                store.append("bench_breakdown", {"label": row["case"], **part})
        seed_rows.append(row)
    crossover_us = seed_roof["t_mem_ms"] * 1e3 / n_ar
    seed_lines = [
        f"- {seed_model}: {arch['active_params'] / 1e9:.1f}B active parameters, {arch['bytes_per_token'] / 1e9:.1f} GB read per token "
        f"(the card's average {avg['bytes_per_param']} B/param would say {avg['bytes_per_token'] / 1e9:.1f} GB: it undercounts the BF16 "
        "attention and shared experts).",
        f"- Bandwidth alone: at most {q('card_roofline_tok_s', bound['tok_s'], ',.0f', of=bound['subject'])} tok/s "
        f"({bound['bytes_per_token'] / 1e9:.1f} GB per token over {seed_tp} GPUs at {bound['bandwidth_tbs']} TB/s each; "
        f"`data/models/{seed_model}.json` x `data/hardware/{seed_profile}.json`).",
        *[f"- With the communication floor, {n_ar} all-reduces per token at {label}: at most {r['tok_s']:,.0f} tok/s "
          f"({r['t_comm_ms']:.2f} ms of all-reduce per token beside {r['t_mem_ms']:.2f} ms of memory time)." for label, r in floors],
        f"- The two floors are equal at {crossover_us:.1f} us per all-reduce: above that latency, all-reduce is the larger part of the "
        "limit. The seed's GPUs talk over PCIe, whose latency only chapter 04 run on that host measures.",
    ]
    display(Markdown("\n".join(seed_lines)))
except ServebookError as exc:
    store.record_failure("seed roofline", exc)
    print(f"seed roofline not computed: {exc}")

# %%
if profile and model_dir is not None and roof_rows:
    from servebook.profiles import load_profile

    p = load_profile(profile)
    what_if = roofline.decode_roofline(weights["bytes_per_token"], p["memory_bandwidth_tbs"])
    print(f"what-if: this model on one {p['name']} would be bounded at {what_if['tok_s']:,.0f} tok/s by bandwidth alone")
roofs = store.table("bench_roofline")
roofs[["case", "measured_tok_s", "roofline_tok_s", "pct_of_roofline", "source"]] if len(roofs) else "no roofline computed"

# %% [markdown]
# Measured (or reported) rates next to their limits; the seed rows' time split is in the table `bench_breakdown`.

# %% [markdown]
# ## Where a decode step's time goes
# Method: each engine's own profiler (SGLang's `/start_profile`, vLLM's `--profiler-config`; for `transformers`,
# torch's profiler around the same model decoding in this process) records tens of steady decode steps of one greedy
# stream, CUDA graphs on where the engine uses them. Steps are found in the trace by the kernel that runs once per step;
# every kernel is put in a category by the rule below (first match wins), and the time inside a step when no kernel runs
# is "gpu idle" (host scheduling, launch gaps, waiting for the sampled token; on a CPU host: time outside any operator).
# The same server is first timed without the profiler, so the profiler's own cost shows.

# %%
from servebook import profile as sbprof

if measure and model_dir is not None and profile_steps > 0 and not profile:
    sbprof.measure_chapter(store, engines, model_dir, engine_args=engine_args, steps=profile_steps, depths=profile_depths,
                           host=host, smoke=smoke)
prof = sbprof.chapter_tables(store)
prof["rules"]

# %%
if len(prof["breakdown"]):
    display(prof["breakdown"].round(3))
    sbprof.plot_breakdown(prof["breakdown_long"])
else:
    print("no decode-step profile in this run" + ("" if not len(prof["failed"]) else ": " + "; ".join(
        f"{r['label']}: {str(r.get('error'))[:160]}" for _, r in prof["failed"].iterrows())))

# %% [markdown]
# Each bar is one server's profiled step; the black tick is its time per token without the profiler. Where the bar is
# longer, the profiler's own cost is the difference.

# %% [markdown]
# ### The whole model, predicted from two slices
# Two slices of the same card that differ only in their repeated layers give the GPU time of one more layer (busy time
# per step, deeper minus shallower) and the rest (embedding, dense layers, LM head, sampling). The full model's time per
# token is the larger of the deeper slice's unprofiled time and the full model's GPU time (point: the host prepares the
# next step while the GPU runs this one, so a step takes whichever is longer), with that slice's time plus the missing
# layers' GPU time as the high end (host work kept, serial). The serial rule was the first point estimate; the first check
# on an H200 put it 25-35% above the measured whole models, whose own profiles show the GPU busy nearly all the time.
# Where the whole model was run too, its measured time and the signed error stand beside it; the bytes rule (bytes read
# per token over the bandwidth, datasheet and measured) is the roofline bound, not a prediction.

# %%
cols = ["card", "engine", "backend", "quant", "layers_measured", "predicted_ms", "low_ms", "high_ms", "measured_ms", "error_pct",
        "within_interval", "slope_ms_per_layer", "fixed_ms", "roofline_ms_datasheet", "roofline_ms_measured"]
display(prof["bandwidth"][["device", "read_tbs", "copy_tbs", "method"]] if len(prof["bandwidth"]) else "GPU memory bandwidth not measured in this run")
prof["predictions"][[c for c in cols if c in prof["predictions"]]].round(3) if len(prof["predictions"]) else "no two slice depths profiled: no prediction"

# %%
display(Markdown("\n".join(sbprof.findings(store)) or "Nothing profiled in this run."))

# %% [markdown]
# ## What we found

# %%
from servebook.findings import separated, throughput as measured_throughput
from servebook.stated import say_throughput

lines = []
for t in measured_throughput(store):  # chapter 06's definition and sentences: per label, the recorded single-stream row, its roofline
    if t["single_tok_s"] is None:
        continue
    lines += say_throughput(t, runs=runs)
    r = single_df[single_df["label"] == t["label"]].iloc[-1]
    lines.append(f"- {t['label']}: TTFT {r['ttft_s_mean'] * 1e3:.0f} ms, TPOT {r['tpot_s_mean'] * 1e3:.1f} ms, "
                 f"{r['tokens_per_chunk']:.2f} tokens per streamed chunk.")
measured = [t for t in measured_throughput(store) if t["single_tok_s"] is not None]
for t in measured[1:]:  # engines side by side: chapter 06's one comparison, each against the first engine measured
    ref = measured[0]
    lines.append(f"- {t['label']} against {ref['label']}, single stream: "
                 f"{separated(t['single_tok_s'], t['single_ci95'], ref['single_tok_s'], ref['single_ci95'], starts=(t['starts'], ref['starts']))}"
                 + (f"; sweep peak {t['peak_tok_s']:,.0f} tok/s at C={t['peak_c']} against {ref['peak_tok_s']:,.0f} at "
                    f"C={ref['peak_c']} (one batch per level: no interval, so a difference there is a hint, not a finding)."
                    if t["peak_tok_s"] and ref["peak_tok_s"] else "."))
if default_methods(store):  # chapter 03 measured the default too: the same way, or not
    lines.append(say_default_methods(default_methods(store)))
for _, r in single_df.iterrows():  # a rate still climbing over the runs is warm-up, not spread
    xs = [x for x in r.get("decode_tok_s_runs") if x is not None] if isinstance(r.get("decode_tok_s_runs"), list) else []  # a failed run has none
    if len(xs) >= 3 and xs == sorted(xs) and xs[-1] > 1.3 * xs[0]:
        lines.append(f"- {r['label']}: the single-stream rate rose in every run, {xs[0]:,.0f} to {xs[-1]:,.0f} tok/s, so its interval "
                     f"measures warm-up as much as spread. Hypothesis: the server was still warming after {warmup} warm-up requests; "
                     "settled by more warm-up requests (`warmup`) and the same runs again.")
stalls = bench.sweep_stalls(summary_rows, request_rows)
for st in stalls:
    lines.append(f"- {st['label']}: throughput fell from {st['best_before_tok_s']:,.0f} tok/s at C={st['best_before_concurrency']} to "
                 f"{st['throughput_tok_s']:,.0f} at C={st['concurrency']}; first tokens there took {st['ttft_median_s']:.2f} s "
                 f"(median) and up to {st['ttft_max_s']:.2f} s, against {st['ttft_median_best_s']:.2f} s at C={st['best_before_concurrency']}. "
                 + ("A saturated server holds its throughput and queues each request a little; this looks like a stall. "
                    "Hypothesis: kernels compiled on the first use of the new batch shape (not measured here); settled by the "
                    "same level measured again after a warm-up at that concurrency, which the sweep now does before every level "
                    "(`level_warmup`). Until then the sweep's peak is a lower bound and its stop is not a saturation point."
                    if st["stalled"] else "The first tokens do not show a stall; the cause is not settled by this run."))
for label, g in pd.DataFrame(again).groupby("label", sort=False) if again else []:  # what measuring again changed
    single, sweep = g[g["phase"] == "single"], g[g["phase"] == "sweep"].sort_values("concurrency")
    if len(single):
        r = single.iloc[-1]
        lines.append(f"- {label}: single stream measured again with {r['after_method']} (before: {r['before_method']}): "
                     f"{r['before']:,.0f} -> {r['after']:,.0f} tok/s.")
    if len(sweep):
        fell = [r for _, r in sweep.iterrows() if r["fell"]]  # bench.remeasured: sweep_stalls' rule, both times
        levels = ", ".join(f"C={int(r['concurrency'])} {r['before']:,.0f} -> {r['after']:,.0f}" for _, r in sweep.iterrows()
                           if pd.notna(r["before"]) and pd.notna(r["after"]))
        text = f"- {label}: sweep measured again with {sweep.iloc[-1]['after_method']} (before: {sweep.iloc[-1]['before_method']}), tok/s: {levels}."
        for r in fell:
            text += (f" The fall at C={int(r['concurrency'])} " + (
                ("did not recur once the level was warmed first, a " + f"{r['after'] / r['before']:.1f}x change: it was a first-use "
                 "cost at that concurrency, not saturation (which kernel or cache paid it is not measured here)."
                 if r["after"] >= 3 * r["before"] else
                 "did not recur once the level was warmed first: consistent with a first-use cost, a hypothesis only (one batch "
                 "per level each way, no interval; more batches per level would settle it).") if not r["recurred"]
                else "recurred with the level warmed first, so first use does not explain it; the cause is not settled by this run."))
        lines.append(text)
for _, r in (sweep_ok.iterrows() if len(sweep_ok) else []):  # a level held back by first-token waits, not by decode
    p50, p99, user = r.get("ttft_server_s_p50"), r.get("ttft_server_s_p99"), r.get("per_user_tok_s")
    stalled = any(st["label"] == r["label"] and st["concurrency"] == r["concurrency"] for st in stalls)  # said above
    if not stalled and pd.notna(p99) and pd.notna(p50) and pd.notna(user) and p99 > 0.5 and p99 > 10 * p50 \
            and r["throughput_tok_s"] < 0.6 * r["concurrency"] * user:
        lines.append(f"- {r['label']} at C={int(r['concurrency'])}: each user decoded at {user:,.0f} tok/s, yet a request waited up to "
                     f"{p99:.2f} s for its first token after it was sent (median {p50 * 1e3:.0f} ms), so the level's {r['throughput_tok_s']:,.0f} "
                     f"tok/s is well below {int(r['concurrency'])} users at that rate ({r['concurrency'] * user:,.0f}): the waits, not decode, "
                     "limit it, so this level is no saturation point. The cause is not settled by this run (a trace of the "
                     "engine's scheduler at that level would).")
for _, r in (single_all[single_all["decode_tok_s_mean"].isna()].iterrows() if len(single_all) else []):
    errors = r.get("errors") if isinstance(r.get("errors"), list) else []
    lines.append(f"- **{r['label']}** single stream: no request succeeded ({int(r['failed'])} failed)"
                 + (f", e.g. {str(errors[0])[:160]}" if errors else "") + "; the server log says why.")
for label, g in (sweep_df.groupby("label") if len(sweep_df) else []):
    if not g["throughput_tok_s"].notna().any():
        lines.append(f"- {label}: no request of the concurrency sweep succeeded ({int(g['failed'].sum())} failed).")
for row in seed_rows:
    lines.append(f"- {row['case']}: {row['measured_tok_s']:.1f} tok/s is {row['pct_of_roofline']:.1f}% of its bandwidth roofline "
                 f"({row['roofline_tok_s']:,.0f} tok/s); with the communication floor at {row['allreduce_source'] or 'no latency'}, "
                 f"{100 * row['measured_tok_s'] / row['roofline_with_comm_tok_s']:.1f}% of {row['roofline_with_comm_tok_s']:,.0f} tok/s.")
breakdown = store.table("bench_breakdown")
if len(breakdown):  # a row computed again by a later execution (the seed's, from today's reference figures) supersedes its older one
    breakdown = breakdown.drop_duplicates(["label", "part"], keep="last")
for label, g in (breakdown.groupby("label", sort=False) if len(breakdown) else []):
    top = g.sort_values("ms_per_token", ascending=False).iloc[0]
    total = g["ms_per_token"].sum()
    lines.append(f"- {label}: {total:.2f} ms per token, of which the largest part is {top['part']} ({top['share']:.0%}); "
                 + ", ".join(f"{r['part'].split(' (')[0]} {r['ms_per_token']:.2f} ms" for _, r in g.iterrows() if r["ms_per_token"]) + ".")
if len(cc):  # servebook's client against SGLang's own on the live server, each metric both ways (the last of each, above)
    cc = cc[cc["harness_fault"].isna()]
    def turn(r) -> str:  # a metric whose two servebook runs disagree: the run after bench_serving's, against it
        xs = r.get("servebook_runs") if isinstance(r.get("servebook_runs"), list) else []
        if r["servebook_spread"] <= 0.5 or len(xs) < 2:
            return ""
        return (f" (servebook's runs {', '.join(f'{x:,.0f}' if x >= 100 else f'{x:.3g}' for x in xs)}: its run after bench_serving's is "
                f"{(xs[-1] - r['bench_serving']) / r['bench_serving']:+.1%}; hypothesis: its first run, at a concurrency the server had "
                "not served since it started, paid a first-use cost like the first sweep's; the check now warms the server at its "
                "concurrency first)")
    per = ", ".join(f"{m} " + " / ".join(f"{r['rel_diff']:+.1%} at C={int(r['concurrency'])}{turn(r)}" for _, r in g.iterrows())
                    for m, g in cc.groupby("metric", sort=False))
    lines.append(f"- servebook's client against `sglang.bench_serving`, taking turns on the live server (servebook - bench_serving, "
                 f"relative): {per}. A difference beyond servebook's own run-to-run spread is the clients' or the server's between "
                 "turns; which, this run does not settle (more alternating turns would).")
n_near = int(ceiling_check["near_ceiling"].sum()) if len(ceiling_check) else 0
if n_near:
    lines.append(f"- **{n_near} measurement(s) came within {ceiling_check['warn_at'].iloc[0]:.0%} of the client's own ceiling** "
                 f"({ceiling_tok_s:,.0f} tokens/s against a fake server): read them as lower bounds of the server's speed.")
elif len(ceiling_check):
    lines.append(f"- The client sustained up to {ceiling_tok_s:,.0f} tokens/s against a fake server; the busiest measurement used "
                 f"{ceiling_check['share_of_ceiling'].max():.2%} of it, so the client is not what these numbers measure.")
lines.append(f"- {ceiling_sentence(verdict)}")
fails = store.table("failures")
if len(fails):
    lines.append(f"- {len(fails)} recorded failures in this run (table `failures`), e.g. {fails.iloc[-1]['step']}: {str(fails.iloc[-1]['error'])[:160]}")
print(f"chapter time {time.monotonic() - t_chapter:.0f} s")
Markdown("\n".join(lines))

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown

qa = []
if len(single_df):
    r0 = single_df.iloc[0]
    qa.append(("Why is `decode tok/s` computed from the first token on, and not as output tokens / end-to-end time?",
               f"End-to-end time includes the prefill (TTFT), which does not scale with output length. Here {r0['label']}: TTFT "
               f"{r0['ttft_s_mean'] * 1e3:.0f} ms, then {r0['decode_tok_s_mean']:.1f} tok/s; dividing all tokens by the whole time would mix the two."))
qa.append(("A server streams 4 tokens per chunk every 40 ms. What is the inter-chunk gap, and what is the per-token inter-token latency?",
           "40 ms between chunks, 10 ms per token. servebook keeps both (`chunk_gap_ms`, `itl_ms`)"
           + (f"; this run's server sent {single_df.iloc[0]['tokens_per_chunk']:.2f} tokens per chunk." if len(single_df) else ".")))
c4 = sweep_df[sweep_df["concurrency"] == 4] if len(sweep_df) else sweep_df
qa.append(("At C=4 with all requests arriving at once, why is `ttft_s` larger than `ttft_server_s` for some requests, and which would a user report?",
           "Requests beyond the free slots wait in the client's queue; `ttft_s` counts that wait, which is what the user feels"
           + (f". Here at C=4: ttft_s p50 {c4.iloc[0]['ttft_s_p50'] * 1e3:.0f} ms, ttft_server_s p50 {c4.iloc[0]['ttft_server_s_p50'] * 1e3:.0f} ms."
              if len(c4) else "; this run's sweep did not reach C=4.")))
if seed_roof is not None and seed_rows:
    qa.append(("The seed case's limit: which floor dominates, memory or communication, and what would settle it?",
               f"Memory takes {seed_roof['t_mem_ms']:.2f} ms per token on {seed_tp} GPUs; {n_ar} all-reduces take "
               f"{seed_roof['t_comm_ms']:.2f} ms at {seed_rows[0]['allreduce_source'] or 'no latency'}. The two are equal at "
               f"{crossover_us:.1f} us per all-reduce: below that memory dominates and bandwidth sets the limit, above it faster "
               "all-reduce (custom kernels, NCCL settings) matters more. Only chapter 04 on the seed's PCIe host measures its latency."))
if verdict["bench_serving_measured"]:
    r = verdict["ratios"]
    qa.append(("Why does servebook stream with an HTTP client of its own instead of httpx, and what would make you replace it?",
               f"Only a measurement keeps it: its ceiling must be at least {verdict['goal']}x sglang.bench_serving's while a library "
               f"client's is not. Here servebook's is {r['servebook']:.1f}x and httpx's "
               + (f"{r['httpx']:.1f}x" if r["httpx"] is not None else "not measured")
               + f": {verdict['reason']}. Where httpx reaches the goal" + (" (as here)" if verdict["reaches"]["httpx"] else "")
               + ", the library client should replace servebook's own."))
qa.append(("When would a benchmark number be the client's, not the server's? How does this chapter check it?",
           "When the rate uses much of what the client can stream on its core. Each rate is compared with the client ceiling at the "
           + (f"nearest concurrency; here the busiest used {ceiling_check['share_of_ceiling'].max():.2%} of it." if len(ceiling_check) else "nearest concurrency.")))
Markdown(check_yourself_markdown(qa))

# %% [markdown]
# Next: [06. Findings](06_findings.html) — what to change, from everything this run recorded.
