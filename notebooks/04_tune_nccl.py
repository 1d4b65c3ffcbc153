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
# # 04. Tune NCCL for decode-sized all-reduces
#
# *Terms used here* (all of them: the glossary): **seed case**: the investigation this book began from (Kimi-K2.5 on 8x
# RTX PRO 6000: SGLang decoded slower than vLLM), its figures quoted from `data/reference/seed-case.json`, its claims
# never taken as findings; **hardware profile**: a GPU described from its datasheet (`data/hardware`, the `profile`
# parameter), for a GPU this host does not have; **CUDA graphs / eager**: a decode step replayed from captured CUDA
# graphs (the engines' default) or launched kernel by kernel.
#
# Under tensor parallelism every decode step ends each layer's attention and MLP with an
# all-reduce of the residual stream: `hidden_size x batch x 2 bytes`, kilobytes at decode batch sizes (this run's
# model's message is stated below, from its config). Those messages are tiny, so their cost is latency, not bandwidth, and
# latency is what NCCL's protocol (LL, LL128, Simple), algorithm and transport settings change.
# What the seed case claimed about this part is quoted below, as its claim.
#
# This chapter measures exactly those message sizes, the way engines issue them (replayed from
# CUDA graphs), over a grid of NCCL settings, checks every result, reads back what NCCL actually
# chose, and turns the measurements into a per-token prediction and an env block.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
max_batch: int = 64  # largest decode batch whose message size is measured
timeout_s: int = 180  # seconds one torchrun launch may take before it is killed
nccl_grid: str = ""  # extra NCCL settings: settings separated by semicolons, variables by commas
builtin_grid: bool = True  # also measure the built-in grid (protocols, algorithms, P2P, channels, buffers, threads)
all_reduce_perf: str = ""  # path to nccl-tests all_reduce_perf; empty means look on PATH
tp_check: str = ""  # engines (sglang, vllm) to restart at tensor parallelism under each setting and measure end to end; empty: none
tp: int = 0  # tensor-parallel size of that check; 0 means every GPU of this host
tp_engine_args: str = ""  # server flags for that check, e.g. "sglang: --cuda-graph-max-bs 16; vllm: --max-num-seqs 16"
tp_runs: int = 5  # single-stream runs per setting in that check (after two warm-up requests)
tp_seed_block: bool = True  # also measure the seed case's NCCL block (copied there from a vLLM unit tuned for PCIe)
measure: bool = True  # False: start nothing, re-read this run's tables (servebook html RUN --refresh 04)


# %% [markdown] tags=["whatif"]
# ## What-if: the plan for the real host
# `profile` (a hardware profile) is set: no all-reduce is measured here. What chapter 04 measures on the real host: NCCL
# all-reduce at this model's decode message sizes, replayed from CUDA graphs, over a grid of NCCL settings.
# Until then, the communication floor per token is predicted: the collectives per token read in each engine's code
# (the count chapters 05 and 06 use) times one all-reduce's latency. On a PCIe hardware profile that latency is each engine's own,
# a range over published eight-rank PCIe figures chosen by the NCCL environment the seed ran it with (the rule chapter 06
# uses); on an NVLink hardware profile it is the lent H200 x2 machine's (`data/runs/h200x2-nccl`). Said as such: a host has its own
# latency, which is the point of running the grid there. Stored in the table `roofline`.

# %% tags=["whatif"]
import pandas as pd
from IPython.display import Markdown

from servebook import plan
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
facts = plan.host_facts(store, engine, model, profile)
plan.plan_nccl(store, facts)
floor = store.table("roofline")
floor = floor[floor["chapter"] == "04"]
floor[[c for c in ["case", "allreduces_per_token", "allreduce_us", "allreduce_us_low", "allreduce_us_high", "t_comm_ms",
               "message_bytes", "latency_source"] if c in floor]].round(3)

# %% [markdown] tags=["whatif"]
# Per token, every layer waits for two all-reduces at batch 1, and the embedding and the logits add one collective each:
# the floor is their count times one all-reduce's latency.

# %% tags=["whatif"]
cmds = store.table("plan_commands")
cmds[cmds["chapter"] == "04"][["purpose", "command"]]

# %% [markdown] tags=["whatif"]
# ## What we found

# %% tags=["whatif"]
from servebook.nccl.report import whatif_found

Markdown(whatif_found(floor, facts))

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
from servebook.findings import check_yourself_markdown
from servebook.nccl.report import whatif_questions

qa = whatif_questions(floor, facts)
Markdown(check_yourself_markdown(qa) if qa else "_Nothing was predicted here to ask about: the model card gives no layer count._")

# %% [markdown] tags=["whatif"]
# Next: [05. Benchmark single stream](05_benchmark_single_stream.html) — the roofline for this hardware profile.

# %%
import json

import pandas as pd
from IPython.display import Markdown, display

from servebook.nccl import (
    STANDARD_SWEEP, builtin_grid as _builtin, available_backend, find_all_reduce_perf, message_sizes, model_dims,
    parse_grid, per_token_prediction, recommend, run_grid,
)
from servebook.findings import nccl as nccl_answer
from servebook.hosts import get_host
from servebook.nccl.figures import reference_store
from servebook.nccl.report import (
    SEED_INTRO, e2e_view, env_blocks, failure_table, fidelity_table, found_lines, gap_lines, grid_table, host_note,
    load_reference, plot_latency, prediction, questions, reference_summary, shape_table, this_run_answer,
)
from servebook.params import resolve_model
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open()
on_host = get_host(host, run_dir=store.path)  # every torchrun launch runs there
resolved = resolve_model(model)
config = resolved if isinstance(resolved, dict) else json.loads((resolved / "config.json").read_text())
dims = model_dims(config)
hidden, layers = dims["hidden_size"], dims["num_hidden_layers"]
settings = (_builtin() if builtin_grid else []) + parse_grid(nccl_grid)  # a bad grid stops here with a one-line error
if measure:
    backend, world = available_backend(on_host)
else:  # the collective backend and process count the host measured with, from its rows
    recorded = store.rows("allreduce")
    backend, world = (recorded[0].get("backend"), int(recorded[0].get("world_size") or 0)) if recorded else ("none", 0)
    print("measure=False: nothing is started; every table below is this run's, as recorded")
print(f"model {model}: hidden size {hidden}, {layers} layers; collective backend {'here' if measure else 'on the recording host'}: {backend} with {world} processes")

# %% [markdown]
# ## What can be measured on this host
# First what the seed claimed about this part (its claim, quoted), then what this host can measure.

# %%
from servebook.stated import q, seed_case

display(Markdown(SEED_INTRO.format(share=q("seed_allreduce_share", seed_case()["allreduce_share_of_sglang_decode"], ".0%"))))
display(Markdown(host_note(backend, world, len(settings))))

# %% [markdown]
# ## Message sizes from the model
# One all-reduce after attention and one after the MLP per layer per decode step, each
# `hidden_size x batch x 2 bytes`; next to them a standard sweep (`STANDARD_SWEEP`, kilobytes to megabytes).

# %%
batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_batch]
if smoke:
    batches = batches[:3]
sizes = message_sizes(hidden, 2, batches, sweep=(1024, 65536) if smoke else STANDARD_SWEEP)
pd.DataFrame(sizes)

# %% [markdown]
# ## Measurement on this host
# Method (`servebook.nccl`): one bounded `torchrun` launch per setting, one process per GPU, NCCL
# bound to its device (`device_id`), workers write their rows after every size and leave with
# `os._exit` (teardown can hang). Per size: the sum is checked on every rank, eagerly and through a
# captured graph; **graph**: `iters` all-reduces captured in one CUDA graph, the graph launched `launches` times
# after a barrier, per-call time = elapsed / (`iters` x `launches`) (each row records both; CUDA events on the first rank, and the host clock: the
# nccl-tests `-G` method), median of repeats; **eager**: a Python loop. With NCCL, the same is done
# for `ncclAllReduce` called through CuPy on torch's stream (isolating what ProcessGroupNCCL adds), and
# NCCL's own `NCCL_DEBUG=INFO` lines say which algorithm and protocol ran. A launch that fails or hangs
# is killed with its process group and recorded; the grid goes on.

# %%
arp = find_all_reduce_perf(all_reduce_perf, host=on_host) if measure else None
summary = run_grid(store, sizes, settings, timeout_s=timeout_s, backend=backend, world_size=world,
                   all_reduce_perf=arp if backend == "nccl" else None, smoke=smoke, host=on_host) if measure else "as recorded"
if backend == "nccl" and not arp and measure:
    store.record_failure("nccl-tests", "all_reduce_perf not found (PATH or the all_reduce_perf parameter)", setting="nccl-tests")
ar = store.table("allreduce")
print(summary)
ar[[c for c in ("setting", "path", "mode", "bytes", "batch", "us_median", "us_wall", "sum_ok", "backend", "device") if c in ar]]

# %%
plot_latency(ar, backend, world, [s["bytes"] for s in sizes if s.get("source") == "model"] or
             [hidden * 2 * b for b in batches]);

# %% [markdown]
# One line per setting (colour) and mode (dash): graph-replayed is how engines issue decode all-reduces.

# %% [markdown]
# ## This run's answer
# The setting this run's own grid picks for the batch-1 decode message, by the rule chapter 06 states too
# (`servebook.findings.nccl`: a setting must beat NCCL's defaults by more than `nccl.predict.NOISE` per token at batch 1,
# be no more than that much slower at any measured decode batch, and pass every sum check), and its latency. Where the
# pick's gain is no larger than the spread between two recordings of the same grid, no setting is supported: this
# answer, chapter 06's and its launch command say so alike.

# %%
here, ref_answer = nccl_answer(store) or {}, nccl_answer(reference_store()) or {}
ref = load_reference(ref_answer)
tried = set(ar["setting"].dropna().unique()) if len(ar) and "setting" in ar else set()
answer = this_run_answer(store, here, ref_answer, tried)
Markdown(answer)

# %% [markdown]
# ## The reference grid: `data/runs/h200x2-nccl`
# One grid measured on the lent 2x H200 machine (`python -m servebook.nccl --model kimi-k2.5`; the command and host
# facts are in its manifest), shown in every book as a worked example of reading a grid. Its numbers are that host's,
# not this run's: the section above is this run's answer.

# %%
display(Markdown(reference_summary(ref)))
grid_table(ref)

# %% [markdown]
# ### Fidelity against nccl-tests
# The target: servebook's graph-replayed latency at the batch-1 size within `nccl.predict.FIDELITY` of nccl-tests `all_reduce_perf -g 2 -G 20`
# on the same hardware. nccl-tests is not installed on the lent machine and it has no internet to build it, so its
# figures come from a reference file, `data/reference/nccl-tests-h200.json` (what it holds and how it was measured is
# written in it).

# %%
fidelity_table(ref)

# %% [markdown]
# ### Where the gap comes from
# Hypothesis by hypothesis, each measured in the reference grid's run; every figure below is computed from its tables.

# %%
Markdown(gap_lines(ref))

# %%
shape_table(ref)

# %%
failure_table(ref)

# %% [markdown]
# ## From microseconds to tokens
# Per token each layer does two all-reduces (after attention, after the MLP), so per-token communication
# time = `2 x layers x latency` at the model's message size. The prediction below uses the reference grid's
# graph latencies (torch path, the nccl-tests graph shape) with this chapter's model when it is the same width as
# the reference's model, else the reference model's own shape.

# %%
pred_tbl, rec_pick, shape_note, use_layers = prediction(ref, hidden, layers)
print(shape_note)
pred_tbl

# %% [markdown]
# ### Env blocks: the reference's pick, and this run's

# %%
print(env_blocks(ref, rec_pick, here, model))

# %% [markdown]
# Caveats the data cannot remove: `NCCL_GRAPH_MIXING_SUPPORT=0` is only safe when NCCL work captured in
# one graph is never outstanding at the same time as work from another graph or uncaptured NCCL calls on
# the same communicator (engines that replay decode graphs and run prefill eagerly on one stream satisfy
# that; check yours). vLLM and SGLang route small all-reduces on NVLink through their own custom
# all-reduce kernels unless told not to, in which case NCCL settings do not reach those calls. A grid's pick is
# a prediction until the engine itself, at TP=2 with that env, is measured faster: the next section does that
# where `tp_check` names an engine, and says what this run measured.

# %% [markdown]
# ## End to end: the engine itself at tensor parallelism
# A microsecond saved per all-reduce is a prediction about tokens per second; this section measures it. Each engine in
# `tp_check` is restarted once per setting with `--tensor-parallel-size`, warmed up, and measured with chapter 05's
# client (single stream, mean and 95% interval over `tp_runs` runs; and one batch at C=8). The settings: the engine's
# default; its custom all-reduce off (`--disable-custom-all-reduce`, so decode all-reduces go through NCCL); that plus the
# setting this chapter's grid recommends *on this host*; and that plus the seed's block. NCCL variables reach decode only
# with the custom all-reduce off. Which path ran is read from the engine: its resolved settings and its own log lines.

# %%
from servebook.engines import get_engine
from servebook.nccl.e2e import tp_check_engines

tp_engines = [e.strip() for e in tp_check.split(",") if e.strip()]
tp_size = tp or world
ar_here = store.table("allreduce")
graph_here = ar_here[(ar_here["mode"] == "graph") & (ar_here["path"] == "torch")] if len(ar_here) else ar_here
pred_here = per_token_prediction(ar_here, layers, message_sizes(hidden, 2, [1], sweep=())) if len(graph_here) else pd.DataFrame()
rec_here = recommend(pred_here) if len(pred_here) else {"setting": None, "reason": "no graph-replayed NCCL rows in this run"}
if not measure:
    print("measure=False: the end-to-end rows as recorded" if len(store.rows("tp_e2e")) else "no end-to-end row was recorded in this run")
elif tp_engines and (backend != "nccl" or tp_size < 2 or not on_host.in_process or isinstance(resolved, dict)):
    why = ("this host has fewer than two CUDA GPUs" if backend != "nccl" or tp_size < 2 else
           "the model is a card, not a model directory" if isinstance(resolved, dict) else "it runs on this machine only (not through a remote host yet)")
    store.record_failure("tp end to end", f"not measured: {why}")
    print(f"end-to-end check not run: {why}")
elif tp_engines:
    print(f"this run's grid recommends: {rec_here['setting']} ({rec_here['reason']})")
    tp_check_engines([get_engine(e) for e in tp_engines], resolved, store, tp=tp_size, runs=tp_runs, engine_args=tp_engine_args,
                     best=rec_here.get("setting"), seed=tp_seed_block)

# %%
from servebook.backends.report import flags_note

e2e = e2e_view(store, pred_here)
if len(e2e):
    display(Markdown(flags_note(" ".join(" ".join(r.get("args") or []) for r in store.rows("tp_e2e")).split())))
    display(e2e)

# %% [markdown]
# `predicted_ms_per_token`: the grid's change in graph-replayed all-reduce latency at this model's batch-1 message size, times
# two all-reduces per layer (the layers' own; a whole model's count, read in the engines' code, adds the embedding's
# all-reduce and the logits' all-gather: the what-if book's table `seed_collectives`). `measured_ms_per_token`: the change in time per token against the row named in `vs`. A
# verdict is a change only where the 95% intervals separate.

# %% [markdown]
# ## What we found

# %%
Markdown(found_lines(store, answer, e2e, ref, pred_tbl, rec_pick, use_layers))

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown

Markdown(check_yourself_markdown(questions(here, ref, hidden)))

# %% [markdown]
# Next: [05. Benchmark single stream](05_benchmark_single_stream.html) — what a user waits for, token by token.
