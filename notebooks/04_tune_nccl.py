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
# In the seed case profiling put all-reduce at about half of SGLang's decode time on PCIe GPUs.
#
# This chapter measures exactly those message sizes, the way engines issue them.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
max_batch: int = 64  # largest decode batch whose message size is measured
timeout_s: int = 180  # seconds one torchrun launch may take before it is killed

# %%
import json

import pandas as pd

from servebook.nccl import allreduce_bench, available_backend, decode_message_sizes
from servebook.params import resolve_model
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open()
resolved = resolve_model(model)
config = resolved if isinstance(resolved, dict) else json.loads((resolved / "config.json").read_text())
config = config.get("config", config)
hidden = int(config["hidden_size"])
backend, world = available_backend()
print(f"model hidden size {hidden}; collective backend here: {backend} with {world} processes")

# %% [markdown]
# ## What can be measured on this host

# %%
if backend == "nccl":
    note = f"{world} CUDA GPUs: NCCL all-reduce, timed eagerly and replayed from a CUDA graph."
else:
    note = ("Fewer than two CUDA GPUs, so there is no NCCL all-reduce to tune here. The same method runs "
            "with **gloo on the CPU** (two processes over loopback): it shows how the measurement works, "
            "and its numbers say nothing about NCCL or GPUs.")
print(note)

# %% [markdown]
# ## Message sizes from the model
# One all-reduce per layer-half per decode step, each `hidden_size x batch x bytes`.

# %%
batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_batch]
if smoke:
    batches = batches[:3]
sizes = decode_message_sizes(hidden, dtype_bytes=2, batches=batches)
pd.DataFrame(sizes)

# %% [markdown]
# ## Measurement
# Method: one process per device under `torchrun`, each launch bounded by `timeout_s`; every size is
# checked (the reduced sum must be exact) before it is timed; median over repeats of a 50-call loop
# (on GPUs also a CUDA graph of 50 calls replayed, the way engines decode).

# %%
env_label = "default"
if not store.done("allreduce", env=env_label, backend=backend):
    try:
        rows = allreduce_bench([s["bytes"] for s in sizes], backend=backend, world_size=world,
                               iters=20 if smoke else 50, repeats=3 if smoke else 7, timeout_s=timeout_s)
        batch_of = {s["bytes"]: s["batch"] for s in sizes}
        for r in rows:
            store.append("allreduce", {**r, "batch": batch_of.get(r["bytes"])})
    except Exception as exc:  # a failed measurement is a finding
        store.record_failure("allreduce default", exc)
        print("measurement failed:", exc)
ar = store.table("allreduce")
ar

# %%
import matplotlib.pyplot as plt
import seaborn as sns

if len(ar):
    fig, ax = plt.subplots(figsize=(6, 3))
    sns.lineplot(data=ar, x="bytes", y="us_median", hue="mode", style="env", marker="o", ax=ax)
    ax.set_xscale("log")
    ax.set_ylabel("latency per all-reduce (us)")
    ax.set_title(f"all-reduce latency ({backend}, {world} processes, {ar['device'].iloc[0]})")
    plt.tight_layout()

# %% [markdown]
# ## What we found

# %%
from IPython.display import Markdown

if len(ar):
    one = ar.sort_values("bytes").iloc[0]
    text = (f"- At batch 1 the decode all-reduce is {int(one['bytes'])} bytes; measured {one['us_median']:.1f} us per call "
            f"({one['mode']}, {backend} on {one['device']}); the sum check {'passed' if ar['sum_ok'].all() else 'FAILED'}.\n")
    if backend != "nccl":
        text += "- These are CPU gloo numbers: the NCCL grid (protocols, algorithms, P2P levels) needs a host with two or more GPUs.\n"
else:
    text = "- No all-reduce measurement succeeded here; see the failures table of this run."
Markdown(text)

# %% [markdown]
# Next: [05. Benchmark single stream](05_benchmark_single_stream.html) — what a user waits for, token by token.
