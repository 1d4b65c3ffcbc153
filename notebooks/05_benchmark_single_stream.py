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
# *Terms used here*: **seed case**: the investigation this book began from (`data/reference/seed-case.json`); **hardware
# profile**: a GPU from its datasheet (`data/hardware`); **TTFT**, **TPOT**, **ITL**: time to first token, per output
# token after it, between two tokens; **slice**: a model with its card's width and fewer layers; **model card**: a
# model's facts (`data/models`); **CUDA graphs / eager**: a step replayed from captured graphs, or launched kernel by
# kernel; **decode-step profile**: a kernel trace of decode steps; **gpu idle**: time in a profiled step with no kernel
# running; **host-bound**: a step mostly gpu idle.
#
# The seed case began with one number: a single user streaming from Kimi-K2.5 on 8x RTX PRO 6000 got fewer tokens per
# second from SGLang than from vLLM (the seed's own figures are quoted, with their file, in "The seed case on paper"
# below). Single-stream decode speed is what one user feels, and it is the number this book keeps coming back to. This
# chapter measures it properly (warm-up, repeated runs, a confidence interval), then loads the server with a doubling
# number of concurrent users (the levels each sweep ran are stated below, read from its rows) to see what throughput
# costs each user, and finally asks how far the single-stream number is from what the memory bandwidth allows. One
# client drives every engine, so engines are compared with the same clock and the same prompts.

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
ceiling_concurrencies: str = "1,64"  # concurrencies of the client ceiling against the fake server, comma-separated (smoke: at most 8); keep one near the top of the sweep: each rate is checked against the nearest
ceiling_tokens: int = 2048  # tokens per request the fake server streams for the client ceiling
measure: bool = True  # False: start nothing and measure nothing, re-read this run's tables (servebook html RUN --refresh 05)
seed_model: str = "kimi-k2.5"  # model card of the seed case, for its roofline
seed_profile: str = "rtx-pro-6000"  # hardware profile of the seed case
seed_tp: int = 8  # tensor-parallel size of the seed case
seed_allreduce_us: float = 0.0  # per-all-reduce latency (us) assumed for the seed case communication floor; 0: chapter 06's rule (each engine's published 8-rank PCIe range, profile.comm) on a PCIe profile, data/runs/h200x2-nccl's NVLink latencies otherwise; chapter 04 measures yours
profile_steps: int = 40  # decode steps to profile per engine with its own profiler (0: no profile)
profile_depths: str = "2,3"  # slice depths (layers) profiled for the full-model prediction; empty: only the model as given
seed_reported_tok_s: str = ""  # single-stream tok/s of the seed case, engine:value pairs (e.g. vllm:82.5,sglang:63.6); empty: the seed's own figures in data/reference/seed-case.json


# %% [markdown] tags=["whatif"]
# ## What-if: the roofline and the benchmark plan
# `profile` (a hardware profile) is set: nothing is benchmarked here. The single-stream limit is predicted from the hardware profile
# (memory bandwidth) and the model card (bytes one decode step reads, counted layer by layer), first by
# bandwidth alone, then with chapter 04's communication floors. Stored in the table `roofline`; the
# commands to measure the real number on the host are in `plan_commands`.

# %% tags=["whatif"]
from IPython.display import Markdown

from servebook import plan
from servebook.bench import chapter as ch05
from servebook.findings import check_yourself_markdown
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
facts = plan.host_facts(store, engine, model, profile)
plan.plan_bench(store, facts)
roof = store.table("roofline")
roof = roof[roof["chapter"] == "05"]
roof[["case", "tok_s", "t_mem_ms", "t_comm_ms", "bytes_per_token", "bandwidth_tbs", "tp"]].round(3)

# %% [markdown] tags=["whatif"]
# A measured rate on the host is judged against these: far below the bandwidth-only line means time goes elsewhere.
# The commands that measure it there:

# %% tags=["whatif"]
cmds = store.table("plan_commands")
cmds[cmds["chapter"] == "05"][["purpose", "command"]]

# %% [markdown] tags=["whatif"]
# ## What we found

# %% tags=["whatif"]
Markdown("\n".join(ch05.whatif_found(roof, facts)))

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
qa = ch05.whatif_check_yourself(roof, facts)
Markdown(check_yourself_markdown(qa) if qa else "_No roofline was predicted here to ask about._")

# %% [markdown] tags=["whatif"]
# Next: [06. Findings](06_findings.html) — the root causes, from the engine's own code.

# %%
import time
from pathlib import Path

import pandas as pd
from IPython.display import Markdown

from servebook import bench
from servebook import profile as sbprof
from servebook.bench import chapter as ch05
from servebook.findings import check_yourself_markdown, default_methods, say_default_methods
from servebook.hosts import get_host
from servebook.params import resolve_model
from servebook.results import RunStore
from servebook.stated import seed_sentence

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
on_host = get_host(host, run_dir=store.path)  # servers and the benchmark client run there, next to each other
t_chapter = time.monotonic()
resolved = resolve_model(model)
model_dir = resolved if isinstance(resolved, Path) else None
engines = [e.strip() for e in [engine, *compare_engines.split(",")] if e.strip()]
w = ch05.Workload.of(globals()).sized(smoke)  # the parameters above; with smoke small and fast, still real streamed tokens
shown = model_dir.relative_to(Path.cwd()) if model_dir and model_dir.is_relative_to(Path.cwd()) else (model_dir or model)
print(f"run {store.path}\nmodel: {shown}\nengines: {', '.join(engines)}; " + (f"{w}" if measure else "this execution's parameters, "
      f"measuring nothing: {w}; what the run measured with (tokens, runs, requests per level) is read from its rows below"))

# %% [markdown]
# ## The client, and its own ceiling
# Method: each request is an HTTP/1.1 streaming POST; while it streams, the client only timestamps each network read.
# SSE events are parsed and tokenized after the batch, so parsing never delays another stream. Per request we keep TTFT
# (with and without the wait for a concurrency slot), per-token inter-token latency and raw inter-chunk gaps apart (a
# chunk may carry several tokens), TPOT (from the first token to the last), the wait after the last token until the
# stream ends (`tail_s`: in end-to-end latency, not in TPOT), end-to-end latency and the output tokens.
#
# Before trusting it with a server, we measure how fast the client itself can go: a local fake SSE server (not an
# engine) streams tokens as fast as it can, pinned to another core. Two other clients stream the same requests from the
# same fake server at the same levels, for the comparison below: httpx, and SGLang's own benchmark client.

# %%
tokenizer = bench.load_tokenizer(model_dir) if model_dir and measure else None
if not len(store.rows("client_ceiling")) and measure:
    bench.client_ceiling(store=store, tokenizer=tokenizer, concurrencies=bench.ceiling_levels(ceiling_concurrencies, smoke),
                         tokens_per_request=ceiling_tokens, requests_per_level=2, clients=bench.CLIENTS, tokenizer_dir=model_dir,
                         workdir=store.path / "bench_serving_ceiling", bench_serving=f"sglang=={ceiling_sglang_version}" if ceiling_sglang_version else "")
ceiling_all, ceiling_df = ch05.ceiling_tables(store)
ceiling_tok_s, per_read_us = ch05.show_ceiling(ceiling_df)   # (None, None): not measured in this run

# %% [markdown]
# That is the client's limit on this host. Each measurement below is checked against it after the sweep: a rate that
# uses much of it would be measuring the client, not the server.
#
# ### Why servebook has an HTTP client of its own
# servebook's transport is its own asyncio code (httptools parses the HTTP), not a library. It earns that only if its
# ceiling is a set multiple of `sglang.bench_serving`'s (the goal, `bench.CEILING_GOAL`) and a library client's is not.
# The three clients took the same levels against the same fake servers, pinned to the same CPU: servebook's; httpx as
# its documentation shows it (one `AsyncClient`, `client.stream`, `aiter_bytes`, each chunk timestamped and parsed after
# the batch by the same code as servebook's); and `sglang.bench_serving` (aiohttp), run in SGLang's own interpreter.
# A client's ceiling is its highest rate over the levels; `client_busy` is the share of its core it used (servebook and
# httpx; where it is well below one, the fake server set the pace, not the client).

# %%
verdict = bench.ceiling_verdict(store.rows("client_ceiling"))
ch05.show_ceiling_comparison(store, verdict, ceiling_all)
Markdown(ch05.ceiling_sentence(verdict))

# %% [markdown]
# The verdict is this host's: a slower or busier CPU moves all three ceilings. It is judged at one event per write because
# that is how SGLang and vLLM stream (each server's `tokens_per_chunk` is stated under "What we found"), and only where
# both clients' cores were busy there: on a machine with few cores the one-core fake server sets the pace at that level,
# and the page says so instead of deciding. Levels with many tokens per write show each client's parsing cost alone.

# %% [markdown]
# ## Prompts
# Seeded windows of local text (CPython's language reference) cut to exactly `input_len` tokens of
# the model's own tokenizer. Nothing is downloaded.

# %%
prompts = []
if tokenizer is not None:
    prompts = bench.build_prompts(tokenizer, w.input_len, w.n_prompts(), seed=seed)
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
# network between you and the host never enters a latency; only the raw timestamps travel back. On a live SGLang
# server, SGLang's own client (`sglang.bench_serving`) takes turns with servebook's (`client_check`). Each engine is then
# stopped and started again `starts - 1` times for the single stream alone.

# %%
if model_dir is not None and measure:
    ch05.measure_engines(store, engines, on_host=on_host, model=model, model_dir=model_dir, prompts=prompts, tokenizer=tokenizer, w=w)
# the last of each measurement stands (`bench.current`); one measured again with another method is shown below
m = ch05.measured(store)
single_df, single_cfg, sweep_df, sweep_ok = m["single_df"], m["single_cfg"], m["sweep_df"], m["sweep_ok"]
single_df[["label", "start", "decode_tok_s_mean", "decode_tok_s_ci95", "ttft_s_mean", "tpot_s_mean", "itl_ms_p50", "chunk_gap_ms_p50",
           "tokens_per_chunk", "failed"]] if len(single_df) else "no single-stream result"

# %% [markdown]
# The single-stream rate is the mean over runs of each request's `(output_tokens - 1) / (last_token - first_token)`, each token
# timed by the network read that brought it (the rule of this run's rows is stated just below), with a 95% t-interval over runs,
# within one server start. The same configuration's rate can move more between server starts than within one (issue #28
# found the same SGLang default on a slice of Kimi-K2.5 on a lent H200 moving by more from start to start than within one), so
# each engine is stopped and started again `starts` times and the interval that verdicts use is taken over the per-start means:

# %%
display(Markdown(ch05.say_decode_rule(store)))
ch05.starts_table(store).round(1)

# %% [markdown]
# A row with one start has only the interval within that start: it says nothing about the spread between starts, and a
# comparison with it is no verdict.
#
# Chapter 03 also measures each engine's default single stream, briefly, beside every forced backend. Where both chapters
# measured it, are the two numbers one measurement taken twice? Only if the method was the same:

# %%
display(Markdown(say_default_methods(default_methods(store))))
ch05.plot_single_runs(m["request_rows"]);

# %% [markdown]
# Run-to-run spread is what the confidence interval above summarizes.
#
# ### Concurrency: throughput against what each user gets
# Every level sends `requests_per_level x C` requests with at most C in flight, all arriving at once. `ttft_s` includes the wait
# for a slot (what a queued user sees); `ttft_server_s` starts when the request is sent. The sweep doubles C until throughput
# stops growing (by `bench.runs.SATURATION_GROWTH` over the best level before) for `saturation_patience` levels (saturation), a
# level hits `level_time_budget_s`, or C reaches `max_concurrency`. What it ran with, read from the recorded levels (not from
# the parameters cell), and why it stopped:

# %%
display(pd.DataFrame(ch05.sweep_parameters(store)))
display(Markdown("\n".join(ch05.say_sweep_stops(store)) or "_No concurrency sweep in this run._"))
ch05.plot_sweep(sweep_ok)
if len(sweep_df):
    display(sweep_df[["label", "concurrency", "ok", "failed", "throughput_tok_s", "per_user_tok_s", "ttft_s_p50", "ttft_server_s_p50",
                      "ttft_server_s_p99", "tpot_s_p50", "tpot_s_p99", "itl_ms_p99", "truncated"]])

# %% [markdown]
# Up and to the right is better: a server that batches trades a little per-user speed for much more total throughput; one
# that serializes requests stays flat. Measurements this run took twice, with another method the second time:

# %%
again = bench.remeasured(store.rows("bench_summary"))  # measurements this run took twice, with another method the second time
if again:
    display(pd.DataFrame(again)[["label", "phase", "concurrency", "before", "before_method", "after", "after_method"]].round(1))

# %%
ceiling_check = pd.DataFrame(bench.ceiling_check(m["summary"], ceiling_df, store=store))  # rates already checked are not checked again
print("\n".join(ch05.ceiling_warnings(ceiling_check)))

# %% [markdown]
# Every measured rate above, single-stream and each sweep level, is checked against the client ceiling measured at the
# nearest concurrency (table `bench_ceiling_check`); a rate using more than half of it is flagged, since it may then be the client's.
#
# ### servebook's client against SGLang's own
# On a live SGLang server, `sglang.bench_serving` (run in SGLang's own interpreter) and servebook's client take turns on
# the same prompts and output length. `rel_diff` is (servebook - bench_serving) / bench_serving per metric, in both
# directions: TTFT as each client starts its clock, ITL per token, output tokens/s over the batch.

# %%
cc, notes = ch05.client_check(store)
if len(cc):
    display(cc[["label", "concurrency", "metric", "servebook", "bench_serving", "rel_diff", "servebook_spread"]].round(4))
print("\n".join(notes))

# %% [markdown]
# ## Against the roofline
# At batch 1 every new token reads every active weight once, so `time per token >= bytes per token / memory bandwidth`.
# Bytes come from the model's safetensors headers (routed experts scaled by how many are active per token, one embedding
# row); bandwidth is the GPU's datasheet figure on a GPU host, or measured on the CPU where there is no GPU: the cell
# below says which one this run used.

# %%
host_roof = ch05.host_roofline(store, model_dir, single_cfg, measure=measure, w=w)
roof_rows = host_roof["rows"]
Markdown(host_roof["note"])

# %%
x = ch05.extrapolation(store, model_dir, roof_rows, measure=measure, sources=host_roof["sources"], stands=host_roof.get("stands"))
x.round(3) if x is not None else "no slice of a larger model here: nothing to extrapolate"

# %% [markdown]
# Above: the full model's decode step at the share of its bandwidth floor the slice reached, on one GPU (TP=1, no
# all-reduce; `gpus_to_hold_weights`: the GPUs its weights alone need). A labelled prediction, by the bytes rule: the
# slice's whole time scales with bytes read, which overstates the full model's time where fixed per-token costs (LM head,
# launches, sampling, the scheduler) are much of a shallow slice's, and leaves out the all-reduces of the GPUs it needs
# (chapter 04). "The whole model, predicted from two slices" below measures a per-layer slope instead, and says why the two differ.
#
# ### Where the time goes
# Method: the same model decoding in this process with `model.generate` (no server, no HTTP),
# timed as `(N-1)/(t(N)-t(1))`, with torch's default threads and with one thread; the faster is the model's
# own time. The gap to the served rate is the serving path; the gap from the bandwidth floor to
# in-process decode is compute and framework overhead.

# %%
ch05.inprocess_breakdown(store, model_dir, host_roof["roof"], single_cfg, single_df, engines, prompts, measure=measure, w=w) if roof_rows else "no roofline row above: nothing to break down"

# %% [markdown]
# Shares of one served token's time; a negative "unexplained" share means the parts overlap (e.g. the server computes while streaming).
#
# ### The seed case on paper
# Kimi-K2.5 (INT4) on the seed's RTX PRO 6000 GPUs (as many as its file says), from data files only: the bandwidth bound
# (the card's bytes per token over the hardware profile's bandwidth; the what-if book states the same figure), then with
# the communication floor added (on a PCIe hardware profile the what-if book's rule: the collectives per token read in
# each engine's code, at that engine's published eight-rank PCIe latency; each line says which).

# %%
display(Markdown(seed_sentence()))
seed = ch05.seed_roofline(store, seed_model=seed_model, seed_profile=seed_profile, seed_tp=seed_tp, seed_allreduce_us=seed_allreduce_us,
                          seed_reported_tok_s=seed_reported_tok_s)
display(Markdown("\n".join(seed["lines"])))
print(ch05.what_if_line(profile, host_roof["weights"]))
ch05.roofline_shown(store, host_roof, seed)

# %% [markdown]
# Measured (or reported) rates next to their limits; the seed rows' time split is in the table `bench_breakdown`.
#
# ## Where a decode step's time goes
# Method: each engine's own profiler (SGLang's `/start_profile`, vLLM's `--profiler-config`; for `transformers`,
# torch's profiler around the same model decoding in this process) records tens of steady decode steps of one greedy
# stream, CUDA graphs on where the engine uses them. Steps are found in the trace by the kernel that runs once per step;
# every kernel is put in a category by the rule below (first match wins), and the time inside a step when no kernel runs
# is "gpu idle" (host scheduling, launch gaps, waiting for the sampled token; on a CPU host: time outside any operator).
# The same server is first timed without the profiler, so the profiler's own cost shows.

# %%
if measure and model_dir is not None and profile_steps > 0 and not profile:
    sbprof.measure_chapter(store, engines, model_dir, engine_args=engine_args, steps=profile_steps, depths=profile_depths,
                           host=host, smoke=smoke)
prof = sbprof.chapter_tables(store)
prof["rules"]

# %%
sbprof.show_breakdown(prof)

# %% [markdown]
# Each bar is one server's profiled step; the black tick is its time per token without the profiler. Where the bar is
# longer, the profiler's own cost is the difference.
#
# Where this run measured a configuration both with CUDA graphs and eagerly (this chapter's decode-step profiles, or chapter 03's
# forced backends), the two times per token side by side:

# %%
ch05.plot_graph_vs_eager(store) or print("no configuration measured both with CUDA graphs and eagerly in this run")

# %% [markdown]
# ### The whole model, predicted from two slices
# Two slices of the same card and of one recording unit (one machine; rows without machine identity: one UTC day; column
# `unit`) that differ only in their repeated layers give the GPU time of one more layer (busy time per step, deeper minus
# shallower) and the rest (embedding, dense layers, LM head, sampling); depths found only in different units are listed,
# not predicted. The full model's time per token is the larger of the deeper slice's unprofiled time and the full model's
# GPU time (point: the host prepares the next step while the GPU runs this one, so a step takes whichever is longer), with
# that slice's time plus the missing layers' GPU time as the high end (host work kept, serial: the first point estimate).
# Where the whole model ran in the same unit, its measured time and signed error stand beside it (how far the rule is from
# it); the bytes rule (bytes per token over the bandwidth, datasheet and measured) is the roofline bound, not a prediction.

# %%
display(prof["bandwidth"][["device", "read_tbs", "copy_tbs", "method"]] if len(prof["bandwidth"]) else "GPU memory bandwidth not measured in this run")
display(sbprof.prediction_table(prof))
Markdown("\n".join(sbprof.findings(store) + ch05.say_prediction_tok_s(store)) or "Nothing profiled in this run.")

# %% [markdown]
# ## What we found

# %%
lines = ch05.found(store, m, runs=w.runs, warmup=w.warmup, verdict=verdict, ceiling_tok_s=ceiling_tok_s, ceiling_check_df=ceiling_check,
                   seed=seed)
print(f"chapter time {time.monotonic() - t_chapter:.0f} s")
Markdown("\n".join(lines))

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
Markdown(check_yourself_markdown(ch05.check_yourself(m, verdict=verdict, ceiling_check_df=ceiling_check, seed=seed, seed_tp=seed_tp)))

# %% [markdown]
# Next: [06. Findings](06_findings.html) — what to change, from everything this run recorded.
