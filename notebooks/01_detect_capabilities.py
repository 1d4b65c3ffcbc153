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
# # 01. Detect capabilities, and what the engines conclude about them
#
# *Terms used here* (all of them: the glossary): **seed case**: the investigation this book began from (Kimi-K2.5 on 8x
# RTX PRO 6000: SGLang decoded slower than vLLM), its figures quoted from `data/reference/seed-case.json`, its claims
# never taken as findings; **hardware profile**: a GPU described from its datasheet (`data/hardware`, the `profile`
# parameter), for a GPU this host does not have; **MLA**: multi-head latent attention, the compressed-KV attention of
# DeepSeek-V3 and Kimi-K2.5.

# %%
# The case's figures, tagged (servebook.stated): the seed's GPU count and its profile's compute capability
from IPython.display import Markdown

from servebook.profiles import load_profile
from servebook.stated import q, seed_case

_seed = seed_case()
_cap = q("profile_capability", load_profile(_seed["profile"])["capability"], of=_seed["profile"])
Markdown(f"The investigation this book follows began with one number. {q('seed_tp', _seed['tp'], 'd')} RTX PRO 6000 Blackwell "
         f"GPUs reported **compute capability {_cap}**, SGLang's single-stream decode trailed vLLM's (by how much: the first "
         "computed cell below, from the seed's own figures), and **the seed suspected** that SGLang's fast attention paths, "
         "guarded by a check for `major == 10` (datacenter Blackwell, B200/GB200), let those GPUs fall through to a slower "
         "backend. What the book found: chapter 02 reads from both engines' own code that *both* fall back to a Triton MLA "
         f"kernel on {_cap}, so the fallback alone cannot explain the gap; which profiles could say what does, and where "
         "this run's chapter 06 finds them, is stated under the seed's figures below.")

# %% [markdown]
# So before measuring anything we write down two things side by side:
#
# 1. **what the hardware is**: GPU model, capability, SM family, memory, links between GPUs, and the
#    driver, CUDA, torch and NCCL actually in use (NVML first, `nvidia-smi` as fallback);
# 2. **what each engine concludes about it**: its own helpers (`is_sm100_supported()`, vLLM's
#    `current_platform.has_device_capability(...)`, transformers' `is_torch_bf16_gpu_available()` ...),
#    called in the engine's own interpreter, each judged against the hardware.
#
# With `profile` (a hardware profile) set, the same report is made for a GPU you do not have (datasheet facts from
# `data/hardware/`), and the engines are asked with torch's capability faked to that GPU's.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
engine_python: str = ""  # interpreter where the engines are installed; empty means this kernel
measure: bool = True  # False: probe nothing, re-read this run's probe (servebook html RUN --refresh 01)

# %%
import json
import platform
import sys

import pandas as pd
from IPython.display import HTML, Markdown, display

import servebook
from servebook import probe as sbp
from servebook.hosts import get_host
from servebook.profiles import list_profiles
from servebook.render import excerpt_html
from servebook.stated.text import marked
from servebook.results import RunStore, show_corrections

store = RunStore.at(run_dir) if run_dir else RunStore.open()
print(f"servebook {servebook.__version__}, Python {platform.python_version()}, run: {store.path}")

# %% [markdown]
# ## The case this book follows

# %%
from servebook.selection.report import profiles_sentence
from servebook.stated import seed_sentence

# what would explain the gap is said only from decode-step profiles a table holds (this run's, or the H200 ones chapter 06 projects)
Markdown(seed_sentence() + " " + profiles_sentence(store))

# %%
# What-if with a pinned engine (e.g. sglang==0.5.9): that version's helpers are asked in its prepared environment.
if profile and not engine_python and "==" in engine and measure:
    from servebook.selection import resolve_engine

    try:
        engine_python = resolve_engine(engine).python
        print(f"what-if: asking {engine}'s helpers in {engine_python}")
    except servebook.ServebookError as exc:
        store.record_failure("engine environment", exc, engine=engine)
        print(f"{engine}: {exc}")

# %% [markdown]
# ## Probe
# One call gathers everything; it is stored in the run (`probe.json` plus tidy tables) **before**
# anything below reads it. In smoke mode the P2P copy is smaller (`p2p_bytes` in the call below).

# %%
report = None
if not measure:
    print("measure=False: nothing is probed; the probe and tables below are this run's, as recorded on its host")
resumed = measure and (store.path / "probe.json").exists() and store.done("versions")  # a run id executed again
if resumed:
    print("resumed: this run's probe is recorded, so nothing is probed again (servebook book --again probes again)")
try:
    report = None if not measure or resumed else sbp.probe(profile or None, host=get_host(host, run_dir=store.path), python=engine_python or None,
                       p2p_bytes=(16 if smoke else 256) * 2**20)
    if report is not None:
        sbp.record(store, report)
except servebook.ServebookError as exc:
    store.record_failure("probe", exc)
    print(f"probe failed: {exc}")
    print(f"known hardware profiles: {', '.join(list_profiles())}")
except Exception as exc:  # a failed measurement is a finding, not the end of the book
    store.record_failure("probe", exc)
    print(f"probe failed: {type(exc).__name__}: {exc}")

# Everything below reads the stored run, not the variable.
report = json.loads((store.path / "probe.json").read_text()) if (store.path / "probe.json").exists() else None
print("stored tables:", ", ".join(store.tables()))
if report:
    print(f"source: {report['source']}" + (f" (profile {report['profile']}: datasheet facts, nothing measured)" if report["profile"] else "")
          + f"; probe took {report['elapsed_s']} s")

# %% [markdown]
# ## The GPUs
# Name as `nvidia-smi` prints it, compute capability, and the SM family with its common names:
# the family is what engines branch on.

# %%
gpus = store.table("gpus")
if gpus.empty:
    display(Markdown("**No GPU on this host.** NVML, `nvidia-smi` and torch see none; the table stays empty and "
                     "the engines' GPU paths cannot run here. The chapters that need a GPU say so and continue."))
else:
    display(gpus[["index", "name", "capability", "family", "sm_count", "memory_gib", "sm_mhz", "max_sm_mhz",
                  "power_limit_w", "mig_mode", "ecc_mode", "busy"]])

# %% [markdown]
# ## Software actually in use
# `cuda` is the CUDA version the driver supports; `torch_cuda` the one torch was built with; `nccl`
# the NCCL version torch was built with and `nccl_loaded` the library this process really mapped. The packages are the
# ones of the Python that probed this host (the notebook's kernel); each engine runs in its own environment, whose
# transformers can differ: the engines table below gives the engines' own versions.

# %%
versions = store.table("versions")
if not versions.empty:
    row = versions.iloc[0].to_dict()
    core = ["driver", "cuda", "cuda_runtime", "cuda_toolkit", "torch", "torch_cuda", "nccl", "nccl_loaded", "python"]
    display(pd.DataFrame({"component": core, "version": [row.get(k) for k in core]}))
    pkgs = {k[4:]: v for k, v in row.items() if k.startswith("pkg_") and isinstance(v, str)}
    display(pd.DataFrame({"package": list(pkgs), "version": list(pkgs.values()), "of": "the probing Python (this kernel)"}))

# %% [markdown]
# ## How the GPUs are linked
# `nvidia-smi topo -m`: NV# is NVLink (# bonded links); PIX/PXB are PCIe switches; PHB, NODE and SYS go
# through the CPU, the last across sockets. Best to worst: NV# > PIX > PXB > PHB > NODE > SYS.

# %%
topo_rows = store.table("topology")
if report and len(report.get("gpus", [])) >= 2 and not topo_rows.empty:
    import matplotlib.pyplot as plt
    import seaborn as sns

    codes = topo_rows.pivot(index="src", columns="dst", values="link")
    ranks = topo_rows.pivot(index="src", columns="dst", values="rank").astype(float)
    size = max(3.0, 0.6 * len(codes) + 1.5)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    sns.heatmap(ranks, annot=codes.fillna("X"), fmt="", cmap="viridis", vmin=0, vmax=6, cbar_kws={"label": "link (SYS=0 ... NV#>=5)"}, ax=ax)
    ax.set_title(("assumed (profile): " if report["source"] == "profile" else "") + "GPU-to-GPU links")
    plt.show()
    affinity = (report.get("topology") or {}).get("affinity") or {}
    if affinity:
        display(pd.DataFrame(affinity).T)
else:
    why = "no GPU" if not report or not report.get("gpus") else "one GPU: there is no GPU-to-GPU link to draw"
    if report and len(report.get("gpus", [])) >= 2:
        why = "nvidia-smi topo -m gave no matrix on this host"
    display(Markdown(f"No topology heatmap: {why}."))

# %% [markdown]
# ## Peer-to-peer: access and measured copies
# Access comes from `torch.cuda.can_device_access_peer`; bandwidth and latency from real copies, the
# method stated below. NVLink shows hundreds of GB/s; PCIe through a switch tens; across sockets less.

# %%
p2p_rows = store.table("p2p")
if not p2p_rows.empty:
    cols = [c for c in ["src", "dst", "peer_access", "bandwidth_gbs", "latency_us", "bytes", "iters", "error"] if c in p2p_rows]
    display(p2p_rows[cols])
    print("method:", p2p_rows["method"].dropna().iloc[0] if p2p_rows["method"].notna().any() else "-")
else:
    print("P2P:", ((report or {}).get("p2p") or {}).get("note") or "not measured")

# %% [markdown]
# ## Environment that steers NCCL, CUDA, torch and the engines
# Anything that looks like a secret is shown as `***`.

# %%
env = (report or {}).get("env") or {}
display(pd.DataFrame({"variable": list(env), "value": list(env.values())}) if env else
        Markdown("No `NCCL_*`, `CUDA_*`, `TORCH_*`, `SGLANG_*`, `VLLM_*` or `HF_*` variable is set."))

# %% [markdown]
# ## What the engines conclude
# Each engine's own helpers, in its own interpreter, beside what the hardware says. A **mismatch**
# contradicts the hardware; a **gap** is the seed case: consistent, but a Blackwell GPU of one line
# (sm_12x) is kept out of paths written for the other (sm_10x), or the reverse.

# %%
engines_t = store.table("engines")
if not engines_t.empty:
    display(engines_t[[c for c in ["engine", "version", "status", "helpers", "mismatches", "gaps", "error"] if c in engines_t]])
helpers = store.table("engine_helpers")
if not helpers.empty:
    display(helpers[["engine", "helper", "answer", "expected", "verdict"]])

# %% [markdown]
# ## What this host is

# %%
if report:
    display(Markdown(sbp.describe_host(report, tagged=True)))

# %% [markdown]
# ## What we found
# Generated from the stored answers: the engine conclusions that disagree with the hardware or leave
# this GPU out, and the warnings the probe raised.

# %%
if report:
    found = sbp.findings(report)
    lines = [f"- {f}" for f in found] or ["- Every engine helper that could be judged agrees with the hardware."]
    warn = [w for w in report.get("warnings", []) if not any(w.endswith(f.split(': ', 1)[-1]) for f in found)]
    lines += [f"- {q('probe_warning', w, of=str(i))}" for i, w in enumerate(report.get("warnings", [])) if w in warn]  # as recorded
    display(Markdown("\n".join(lines)))
failures = store.table("failures")
if not failures.empty:  # each distinct failure once, whole, folded under its first line, with the steps that recorded it
    steps_of: dict[str, list] = {}
    for r in store.rows("failures"):
        steps_of.setdefault(marked(r.get("error")), []).append(r.get("step"))
    display(HTML("".join(excerpt_html(f"{', '.join(map(str, dict.fromkeys(steps)))}"
                                      + (" (recorded more than once)" if len(steps) > 1 else "") + f": {err}")
                         for err, steps in steps_of.items())))
    show_corrections(store, "failures")  # a row changed after it was recorded says so, by what and why

# %% [markdown]
# ## Summary and next step
# We now know the capability each engine will branch on, and whether its own helpers agree. Chapter 02
# (`02_read_backend_selection`) reads each engine's backend-selection code and shows which attention
# and MoE backends it picks for this GPU (or for a hardware profile) and which condition decided it.

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself, check_yourself_markdown

Markdown(check_yourself_markdown(check_yourself(store, "01")))
