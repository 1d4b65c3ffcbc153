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
# Under tensor parallelism every decode step ends each layer's attention and MLP with an
# all-reduce of the residual stream: `hidden_size x batch x 2 bytes`, 14 KB for a 7,168-wide
# model at batch 1. Those messages are tiny, so their cost is latency, not bandwidth, and
# latency is what NCCL's protocol (LL, LL128, Simple), algorithm and transport settings change.
# The seed's own profile put all-reduce at about half of SGLang's decode time on its PCIe GPUs (the share is in
# `data/reference/seed-case.json`, quoted, not measured here); chapter 05's profiles and chapter 06's projection say
# how large a part it is predicted to be, and this chapter measures the latency that part is made of.
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
# `profile` is set: no all-reduce is measured here. What chapter 04 measures on the real host: NCCL
# all-reduce at this model's decode message sizes, replayed from CUDA graphs, over a grid of NCCL settings.
# Until then, the communication floor per token is predicted from the model card (all-reduces per token)
# and the latency recorded on the lent H200 x2 machine (`data/runs/h200x2-nccl`), said as such: a PCIe
# host has its own latency, which is the point of running the grid there. Stored in the table `roofline`.

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
floor[["case", "allreduces_per_token", "allreduce_us", "t_comm_ms", "message_bytes", "latency_source"]].round(3)

# %% [markdown] tags=["whatif"]
# Per token, every layer waits for two all-reduces at batch 1: the floor is their count times one all-reduce's latency.

# %% tags=["whatif"]
pd.set_option("display.max_colwidth", None)
cmds = store.table("plan_commands")
cmds[cmds["chapter"] == "04"][["purpose", "command"]]

# %% [markdown] tags=["whatif"]
# ## What we found

# %% tags=["whatif"]
lines = []
per_us = floor[floor["latency_source"].str.startswith("1 us")]
if len(per_us):
    lines.append(f"- Predicted, not measured: {int(per_us.iloc[0]['allreduces_per_token'])} all-reduces per token, so every "
                 f"microsecond of all-reduce latency costs {per_us.iloc[0]['t_comm_ms']:.3f} ms per token at batch 1 on "
                 f"{facts['gpus']}x {facts['profile']} ({facts['interconnect']}).")
from servebook.stated import q

measured = floor[~floor["latency_source"].str.startswith("1 us")]
for _, r in measured.iterrows():
    setting = r["case"].split("latency ")[-1]
    lines.append(f"- At {q('ref_allreduce_us', r['allreduce_us'], ',.1f', of=setting)} us with `{setting}`, measured in "
                 f"{r['latency_source']}, that is {r['t_comm_ms']:.2f} ms per token."
                 + (f" {r['caveat'][0].upper() + r['caveat'][1:]}." if r["caveat"] else ""))
Markdown("\n".join(lines) or "- No prediction: the model card gives no layer count.")

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
from servebook.findings import check_yourself_markdown

qa = []
if len(measured):
    r0 = measured.iloc[0]
    qa.append(("Which all-reduce latency does this page's communication floor use, and why is it not this profile's own?",
               f"{r0['allreduce_us']:.1f} us, recorded in `{r0['latency_source']}`: a lent H200 x2 over NVLink, the only grid the book "
               f"has measured. The profile's {facts['gpus']} GPUs talk over {facts['interconnect']}, so its real latency comes only from "
               "this chapter's grid run on that host (the commands above)."))
if len(per_us):
    qa.append(("What does one microsecond of all-reduce latency cost per token here, and why does that make a small latency "
               "difference matter?",
               f"{per_us.iloc[0]['t_comm_ms']:.3f} ms per token at batch 1: {int(per_us.iloc[0]['allreduces_per_token'])} all-reduces "
               "per token, each paid in series, so a few microseconds per call add up to a large share of a token's time."))
Markdown(check_yourself_markdown(qa) if qa else "_Nothing was predicted here to ask about: the model card gives no layer count._")

# %% [markdown] tags=["whatif"]
# Next: [05. Benchmark single stream](05_benchmark_single_stream.html) — the roofline for this profile.

# %%
import json

import pandas as pd
from IPython.display import Markdown, display

from servebook.nccl import (
    STANDARD_SWEEP, builtin_grid as _builtin, available_backend, env_block, find_all_reduce_perf, message_sizes,
    model_dims, parse_grid, per_token_prediction, recommend, run_grid,
)
from servebook.hosts import get_host
from servebook.params import resolve_model
from servebook.paths import data_dir
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

# %%
if backend == "nccl":
    note = (f"{world} CUDA GPUs: NCCL all-reduce over {len(settings)} settings, timed eagerly and replayed from CUDA graphs.")
else:
    note = ("Fewer than two CUDA GPUs, so there is no NCCL all-reduce to tune here: with one GPU a model runs "
            "without tensor parallelism and makes no all-reduce at all. The same method runs with **gloo on the CPU** "
            "(two processes over loopback, default settings only: NCCL variables do not apply to gloo): it shows how "
            "the measurement works, and its numbers say nothing about NCCL or GPUs. The prediction for TP=2 below "
            "uses the recorded H200 x2 run.")
display(Markdown(note))

# %% [markdown]
# ## Message sizes from the model
# One all-reduce after attention and one after the MLP per layer per decode step, each
# `hidden_size x batch x 2 bytes`; next to them a standard sweep from 1 KB to 16 MB.

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
# captured graph; **graph**: 20 all-reduces captured in one CUDA graph, the graph launched 20 times
# after a barrier, per-call time = elapsed / 400 (CUDA events on rank 0, and the host clock: the
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
import matplotlib.pyplot as plt
import seaborn as sns

if len(ar):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    sns.lineplot(data=ar, x="bytes", y="us_median", hue="setting", style="mode", marker="o", ax=ax)
    ax.set_xscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("latency per all-reduce (us)")
    label = "NCCL" if backend == "nccl" else "CPU/gloo, not NCCL"
    ax.set_title(f"all-reduce latency here ({label}, {world} processes)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="setting / mode", title_fontsize=8)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# One line per setting (colour) and mode (dash): graph-replayed is how engines issue decode all-reduces.

# %% [markdown]
# ## This run's answer
# The setting this run's own grid picks for the batch-1 decode message, by the rule chapter 06 states too
# (`servebook.findings.nccl`: a setting must beat NCCL's defaults by more than 5% per token at batch 1, be no more than
# 5% slower at any measured decode batch, and pass every sum check), and its latency.

# %%
from servebook.findings import nccl as nccl_answer
from servebook.stated import REFERENCE_NCCL_RUN, q, reference, say_allreduce

here = nccl_answer(store) or {}
ref_answer = nccl_answer(RunStore(data_dir() / "runs" / REFERENCE_NCCL_RUN)) or {}
answer_lines = [f"- {say_allreduce(here)}"]
if here.get("backend") == "nccl":
    tried = set(ar["setting"].dropna().unique()) if len(ar) and "setting" in ar else set()
    ref_pick = ref_answer.get("setting")
    if ref_pick and ref_pick not in (None, "default") and ref_pick not in tried:
        answer_lines.append(f"- This run's grid did not include `{ref_pick}`, the setting the reference grid below "
                            f"(`data/runs/{REFERENCE_NCCL_RUN}`) picks on its host: run this chapter again with "
                            f"`-p nccl_grid=\"{ref_pick}\"` to measure it here before using it.")
display(Markdown("\n".join(answer_lines)))

# %% [markdown]
# ## The reference run: `data/runs/h200x2-nccl`
# One grid measured on the lent 2x H200 machine (`python -m servebook.nccl --model kimi-k2.5`; the command and host
# facts are in its manifest), shown in every book as a worked example of reading a grid. Its numbers are that host's,
# not this run's: the section above is this run's answer.

# %%
import re

rec = RunStore(data_dir() / "runs" / REFERENCE_NCCL_RUN)
rar = rec.table("allreduce")
rused = rec.table("nccl_used")
rfail = rec.table("failures")
rman = rec.manifest
rinfo = rec.table("launch_info")
std = rar[(rar["shape_study"] != True) & (rar["path"] != "raw-single-process")]  # noqa: E712
b1 = rman["hidden_size"] * 2
links = sorted(set(re.findall(r"\bNV\d+\b", rman.get("topology") or "")))
nccl_version = ", ".join(sorted(rinfo["nccl_torch"].dropna().unique())) if "nccl_torch" in rinfo else "not recorded"
display(Markdown(f"{rman.get('world_size')} GPUs ({', '.join(sorted({g.split(', ')[1] for g in str(rman.get('gpus', '')).splitlines() if ', ' in g}))}), "
                 f"linked by {'/'.join(links) or 'not recorded'}, NCCL {nccl_version}: {rar['setting'].nunique()} settings, "
                 f"{std['bytes'].nunique()} message sizes ({rman.get('model')}'s decode sizes for batch {min(rman['batches'])}-"
                 f"{max(rman['batches'])} plus a sweep), the torch and raw paths, eager and graph-replayed."))
grid_tbl = std[std["bytes"].isin([b1, b1 * 4, b1 * 16, b1 * 64])].pivot_table(
    index="setting", columns=["bytes", "path", "mode"], values="us_median").round(1)
used = rused[(rused["launch"] == "torchrun")].drop_duplicates(["setting", "bytes", "algo", "proto"])
used_b1 = used[used["bytes"] == b1].groupby("setting").apply(
    lambda g: "/".join(f"{a} {p} x{c}ch" for a, p, c in zip(g["algo"], g["proto"], g["channels"])), include_groups=False)
grid_tbl[("NCCL used", f"at {b1} B", "")] = used_b1
grid_tbl

# %% [markdown]
# ### Fidelity against nccl-tests
# The target: servebook's graph-replayed latency at the batch-1 size within 15% of nccl-tests `all_reduce_perf -g 2 -G 20`
# on the same hardware. nccl-tests is not installed on the lent machine and it has no internet to build it, so its
# figures come from a reference file, `data/reference/nccl-tests-h200.json` (what it holds and how it was measured is
# written in it).

# %%
nccl_tests = reference("nccl-tests-h200")
NCCL_TESTS_B1 = {s: by[str(b1)] for s, by in nccl_tests["us"].items() if str(b1) in by}
g14 = std[(std["bytes"] == b1) & (std["mode"] == "graph")].pivot_table(index="setting", columns="path", values="us_median")
mix_name = ref_answer.get("setting") if ref_answer.get("setting") not in (None, "default") else "NCCL_GRAPH_MIXING_SUPPORT=0"
mix = g14.loc[mix_name, "torch"] if mix_name in g14.index else float("nan")
ref_default = NCCL_TESTS_B1.get("default", float("nan"))
fid = pd.DataFrame([{"setting": s, "nccl-tests -G (us)": ref, "servebook torch graph (us)": g14.loc[s, "torch"],
                     "ratio": g14.loc[s, "torch"] / ref,
                     "raw ncclAllReduce graph (us)": g14.loc[s].get("raw-per-process")}
                    for s, ref in NCCL_TESTS_B1.items() if s in g14.index])
fid.loc[len(fid)] = {"setting": f"{mix_name} vs default", "nccl-tests -G (us)": ref_default,
                     "servebook torch graph (us)": mix, "ratio": mix / ref_default,
                     "raw ncclAllReduce graph (us)": g14.loc[mix_name].get("raw-per-process") if mix_name in g14.index else None}
fid.round(2)

# %% [markdown]
# ### Where the gap comes from
# Hypothesis by hypothesis, each measured in the reference run; every figure below is computed from its tables.

# %%
both = g14.dropna(subset=["torch", "raw-per-process"]) if {"torch", "raw-per-process"} <= set(g14.columns) else g14.iloc[0:0]
raw_gap = (both["raw-per-process"] / both["torch"] - 1).abs()
gstd = std[(std["bytes"] == b1) & (std["mode"] == "graph")]
clock_gap = (gstd["us_wall"] / gstd["us_median"] - 1).abs()
shape = rar[(rar["setting"] == "default") & (rar["bytes"] == b1) & (rar["mode"] == "graph")]
per_graph = shape[shape["path"] == "torch"].sort_values("iters")
capture_failed = rfail[rfail["error"].str.contains("StreamCaptureUnsupported", na=False)] if len(rfail) else rfail
d14 = g14.loc["default", "torch"]
gap_lines = [
    f"- **ProcessGroupNCCL's event record/wait around each captured collective**: refuted. `ncclAllReduce` called directly "
    f"through CuPy on torch's stream, captured the same way, is within {raw_gap.max():.1%} of `torch.distributed.all_reduce` "
    f"across the {len(both)} settings measured both ways ({raw_gap.get('default', float('nan')):.1%} with the defaults; the two "
    "graph columns above).",
    f"- **Timing method**: refuted. CUDA events on rank 0 and the host clock around the launches agree within "
    f"{clock_gap.max():.1%} (`us_median` against `us_wall`, {len(gstd)} graph-replayed rows at {b1} B), because "
    f"{int(per_graph['iters'].mul(per_graph['launches']).max()) if len(per_graph) else 'many'} calls are timed per sample.",
    "- **Graph shape**: large (the shape table below). With NCCL's defaults the per-call latency grows with the number of "
    "all-reduces captured in one graph: " + ", ".join(f"{r['us_median']:.1f} us with {int(r['iters'])} per graph"
                                                      for _, r in per_graph.iterrows()) + ".",
    f"- **NCCL's graph-mixing support** (`NCCL_GRAPH_MIXING_SUPPORT`, on by default): with `{mix_name}` the same measurement "
    f"drops from {q('ref_allreduce_us', d14, ',.1f', of='default')} us to {q('ref_allreduce_us', mix, ',.1f', of=mix_name)} us at "
    f"{b1} B, {abs(mix / ref_default - 1):.0%} {'below' if mix < ref_default else 'above'} nccl-tests' {ref_default:.2f} us with "
    "mixing on. With mixing support NCCL orders every captured launch against other graphs and uncaptured work on the "
    "communicator; that costs a few microseconds per all-reduce in this multi-process, captured setting.",
    f"- **One process driving both GPUs** (the nccl-tests `-g 2` shape): not measured. The single-process CuPy path ran its "
    f"eager loops but its graph capture failed in {capture_failed['setting'].nunique()} of {rar['setting'].nunique()} settings "
    f"with `cudaErrorStreamCaptureUnsupported` (failures table), so whether nccl-tests' {ref_default:.2f} us with mixing "
    "support on comes from its single-process launch remains open.",
]
Markdown("\n".join(gap_lines))

# %%
shape[["path", "iters", "launches", "us_median", "us_wall"]].rename(
    columns={"iters": "all-reduces per graph", "launches": "graph launches"}).sort_values(["path", "all-reduces per graph"]).round(2)

# %%
rfail[[c for c in ("setting", "step", "error") if c in rfail]].assign(error=lambda d: d["error"].str.slice(0, 160))

# %% [markdown]
# ## From microseconds to tokens
# Per token each layer does two all-reduces (after attention, after the MLP), so per-token communication
# time = `2 x layers x latency` at the model's message size. The prediction below uses the reference run's
# graph latencies (torch path, the nccl-tests graph shape) with this chapter's model when it is the same width as
# the reference's model, else the reference model's own shape.

# %%
same_shape = bool(hidden == rman["hidden_size"] and layers)
use_layers, use_hidden = (layers, hidden) if same_shape else (rman["num_hidden_layers"], rman["hidden_size"])
print(f"shape used: {use_layers} layers, hidden size {use_hidden} "
      + ("(this chapter's model)" if same_shape else f"({rman.get('model')}, the reference's model: this model is {hidden} wide)"))
pred_sizes = [s for s in message_sizes(use_hidden, 2, rman["batches"], sweep=())]
pred = per_token_prediction(rar, use_layers, pred_sizes)
rec_pick = recommend(pred)
pred_tbl = pred.pivot_table(index="setting", columns="batch", values="ms_per_token").round(3)
pred_tbl

# %% [markdown]
# ### Env blocks: the reference's pick, and this run's

# %%
rcard = resolve_model(rman.get("model", ""), build=False) if rman.get("model") else {}
print(f"the reference grid (data/runs/{REFERENCE_NCCL_RUN}, its host) picks: {rec_pick['setting']}  ({rec_pick['reason']})")
print(env_block(rec_pick["setting"], model_ref=(rcard.get("hf_repo") if isinstance(rcard, dict) else None) or "<model>"))
here_setting = here.get("setting") if here.get("backend") == "nccl" else None
if here_setting and here_setting != "default":
    print(f"\nthis run's grid picks: {here_setting}  ({here.get('reason')})")
    print(env_block(here_setting, model_ref=model if model != "embedded" else "<model>"))
else:
    print("\nthis run's grid picks nothing to export: "
          + (here.get("reason") or "no all-reduce recorded") if here else "\nthis run recorded no all-reduce")

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
from servebook.engines import args_for, get_engine
from servebook.findings import separated
from servebook.models import engine_args_of
from servebook.nccl.e2e import tp_decode_check, tp_settings

e2e = pd.DataFrame()
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
    plan_tp = []
    for spec in tp_engines:
        teng = get_engine(spec)
        plan_tp.append((teng, args_for(tp_engine_args, teng.name) + engine_args_of(resolved, teng.name),
                        tp_settings(teng, best=rec_here.get("setting"), seed=tp_seed_block)))
    # setting by setting, engines in turn: the comparisons that matter most are measured first
    for i in range(max(len(p[2]) for p in plan_tp)):
        for teng, extra, sets in plan_tp:
            if i < len(sets):
                tp_decode_check(teng, resolved, store, [sets[i]], tp=tp_size, runs=tp_runs, extra_args=extra,
                                progress=lambda m, n=teng.name: print(f"[{n}] {m}", flush=True))
e2e = store.table("tp_e2e")
if len(e2e):
    n_ar = 2 * layers  # after attention and after the MLP, per layer (chapter 05's count)
    rows = []
    for (eng_name, tpn), g in e2e.groupby(["engine", "tp"]):
        base = g[g["setting"] == "custom all-reduce off"]
        dflt = g[g["setting"] == "engine default"]
        for _, r in g.iterrows():
            ref = dflt if r["setting"] == "custom all-reduce off" else base if r["setting"] != "engine default" else None
            pred = None
            if r.get("from_grid") and len(pred_here):
                p = pred_here[(pred_here["setting"] == r["from_grid"]) & (pred_here["batch"] == 1)]
                pred = float(p["delta_ms_vs_default"].iloc[0]) if len(p) else None
            meas = None
            if ref is not None and len(ref) and r.get("decode_tok_s") and ref.iloc[0].get("decode_tok_s"):
                meas = 1000 / r["decode_tok_s"] - 1000 / ref.iloc[0]["decode_tok_s"]
            rows.append({"engine": eng_name, "tp": tpn, "setting": r["setting"], "outcome": r["outcome"],
                         "decode_tok_s": r.get("decode_tok_s"), "ci95": r.get("decode_tok_s_ci95"),
                         "c8_tok_s": r.get("c8_throughput_tok_s"),
                         "vs": None if ref is None or not len(ref) else ref.iloc[0]["setting"],
                         "verdict": None if ref is None or not len(ref) else separated(r.get("decode_tok_s"), r.get("decode_tok_s_ci95"),
                                                                                         ref.iloc[0].get("decode_tok_s"), ref.iloc[0].get("decode_tok_s_ci95")),
                         "predicted_ms_per_token": pred, "measured_ms_per_token": meas,
                         "allreduce_path": "; ".join(r.get("allreduce_log") or [])[:300] if isinstance(r.get("allreduce_log"), list) else None})
    e2e_view = pd.DataFrame(rows)
    display(e2e_view)

# %% [markdown]
# `predicted_ms_per_token`: the grid's change in graph-replayed all-reduce latency at this model's batch-1 message size, times
# two all-reduces per layer. `measured_ms_per_token`: the change in time per token against the row named in `vs`. A
# verdict is a change only where the 95% intervals separate.

# %% [markdown]
# ## What we found

# %%
lines = ["**This run**", ""] + answer_lines
if len(e2e):
    for _, r in e2e_view.iterrows():
        if r["vs"]:
            lines.append(f"- End to end, {r['engine']} TP={int(r['tp'])}, {r['setting']}: "
                         + (f"{r['decode_tok_s']:.1f} ± {r['ci95'] or 0:.1f} tok/s, {r['verdict']} against {r['vs']}"
                            if r["decode_tok_s"] == r["decode_tok_s"] and r["decode_tok_s"] else f"{r['outcome']}")
                         + (f"; predicted {r['predicted_ms_per_token']:+.3f} ms/token, measured {r['measured_ms_per_token']:+.3f}"
                            if r["predicted_ms_per_token"] is not None and r["measured_ms_per_token"] is not None else "") + ".")
else:
    lines.append("- Not measured here: the end-to-end engine confirmation (`tp_check` names the engines to restart at TP>1).")
for c in store.rows("chapters"):  # an execution of this chapter that stopped on the host: what it had measured is above
    if c.get("chapter") == "04_tune_nccl" and c.get("status") == "failed":
        lines.append(f"- An execution of this chapter stopped in this run: {str(c.get('error'))[:300]}")
lines += ["", f"**The reference run** (`data/runs/{REFERENCE_NCCL_RUN}`, its host, not this one)", ""]
lines.append(f"- {b1} B (batch 1): NCCL's default graph-replayed all-reduce took {d14:.1f} us, {d14 / ref_default:.2f}x "
             f"nccl-tests' {ref_default:.2f} us; with `{mix_name}` it took {mix:.1f} us ({mix / ref_default:.2f}x, "
             f"{'within' if abs(mix / ref_default - 1) <= 0.15 else 'outside'} the 15% target).")
lines.append(f"- ProcessGroupNCCL adds nothing measurable: raw ncclAllReduce on the same stream took "
             f"{g14.loc['default', 'raw-per-process']:.1f} us.")
forced = used[(used["bytes"] == b1) & (used["setting"] == "NCCL_PROTO=LL128")]
if len(forced):
    lines.append(f"- Forcing NCCL_PROTO=LL128 also changed the algorithm at {b1} B: NCCL ran {forced['algo'].iloc[0]}/"
                 f"{forced['proto'].iloc[0]} (from its debug output); forced protocols are slower there: LL128 "
                 f"{g14.loc['NCCL_PROTO=LL128', 'torch']:.1f} us, Simple {g14.loc['NCCL_PROTO=Simple', 'torch']:.1f} us.")
big = std[(std["bytes"] == 16777216) & (std["mode"] == "graph") & (std["path"] == "torch")].set_index("setting")["us_median"]
seed = [s for s in big.index if s.startswith("NCCL_PROTO=LL,NCCL_ALGO=Ring")]
if seed:
    lines.append(f"- The seed's PCIe recipe is {g14.loc[seed[0], 'torch']:.1f} us at {b1} B but {big[seed[0]]:.0f} us at 16 MB "
                 f"against {big['default']:.0f} us default: LL forced onto large messages halves bandwidth.")
if "failures" in rec.tables() and (rfail["setting"] == "NCCL_ALGO=Tree").any():
    lines.append("- NCCL_ALGO=Tree alone breaks Broadcast (no algorithm available): torch's object broadcast failed under it.")
lines.append(f"- Prediction for TP=2, {use_layers} layers, batch 1: {pred_tbl.loc['default'].iloc[0]:.2f} ms/token of all-reduce "
             f"with defaults; that grid picks {q('ref_allreduce_setting', rec_pick['setting'], code=True)} ({rec_pick['reason']}).")
lines.append("- Not done: nccl-tests on the same grid (not installed, no internet to build) and the single-process graph path "
             "(capture failed).")
Markdown("\n".join(lines))

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown

if here.get("backend") == "nccl":
    pick = here.get("setting") or "default"
    pick_us = here.get("best_us") if pick != "default" else here.get("default_us")
    mine = f"`{pick}`" + (f" at {pick_us:,.1f} us per all-reduce at {here['b1_bytes']} B" if pick_us is not None else "")
    qa = [("Which NCCL setting does this run's own grid pick for the batch-1 decode message, and why not simply copy the reference "
           "run's pick?", f"{mine} ({here.get('reason')}). A grid's pick is a property of its host (links, NCCL version, topology): "
           "the reference run's is measured on its H200 x2, this one here; and either stays a prediction until the engine at TP>1 "
           "is measured faster with it (end to end above).")]
elif here:
    qa = [("This run measured all-reduce with gloo on the CPU. What can you conclude about NCCL from it?",
           f"Nothing: {here.get('default_us') or float('nan'):,.1f} us per gloo all-reduce over loopback is not an NCCL latency on GPUs, and "
           "a one-GPU deployment makes no all-reduce at all. The method is the same; only a host with two or more GPUs measures NCCL.")]
else:
    qa = [("This run recorded no all-reduce. What would you check first?", "The failures table of this run, then run chapter 04 on "
           "a host with two or more GPUs.")]
qa += [
    ("Why is a decode all-reduce small, and what sets its size?",
     f"It carries one hidden-state vector per sequence in the batch: batch x hidden x 2 bytes in BF16, not the weights. "
     f"For this run's model at batch 1 that is {hidden * 2} bytes (the reference's model: {b1}), so latency, not bandwidth, decides its cost."),
    (f"What did `{mix_name}` change on the reference H200 x2 host, and when would you not use it?",
     f"Graph-replayed {b1} B all-reduce: {d14:.1f} us with defaults, {mix:.1f} us with it. Not safe when NCCL work from one "
     "CUDA graph can be outstanding at the same time as work from another graph or eager calls on the same communicator."),
]
Markdown(check_yourself_markdown(qa))

# %% [markdown]
# Next: [05. Benchmark single stream](05_benchmark_single_stream.html) — what a user waits for, token by token.
