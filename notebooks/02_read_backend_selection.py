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
# # 02. Read the backend-selection logic from the engine's own code
#
# *Terms used here* (all of them: the glossary): **seed case**: the investigation this book began from (Kimi-K2.5 on 8x
# RTX PRO 6000: SGLang decoded slower than vLLM), its figures quoted from `data/reference/seed-case.json`, its claims
# never taken as findings; **hardware profile**: a GPU described from its datasheet (`data/hardware`, the `profile`
# parameter), for a GPU this host does not have; **MLA**: multi-head latent attention, the compressed-KV attention of
# DeepSeek-V3 and Kimi-K2.5; **model card**: a model's config facts in `data/models` (layers, widths, quantization);
# **CUDA graphs / eager**: a decode step replayed from captured CUDA graphs (the engines' default) or launched kernel by
# kernel.
#
# Chapter 01 told us which GPU we have. The next question: **which attention kernel will the engine run on it, and
# which rule in its code made that choice?** The seed case *suspected* this choice: on an RTX PRO 6000 (compute
# capability 12.0) SGLang fell to a Triton attention backend, because the branch for a faster one is guarded by a check
# for another GPU family, and the seed took that fallback for the cause of its slower decode (the seed's suspicion, and
# what the gap was: the cell below). This chapter reads the engine's code (statically, with Python's AST) and runs it
# (the engine's own resolution, with the GPU faked from a hardware profile), for this host and for GPUs we do not have.
# Its finding, from both engines' own code: vLLM falls back to a Triton MLA kernel on capability 12.0 as well, so the backend
# choice alone does not explain the gap between them.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR (this chapter works here)
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI; never builds engine environments
engine_python: str = ""  # interpreter where the engines are installed; empty means this kernel
seed_engine: str = "sglang"  # engine of the seed case (the original investigation)
seed_version: str = "0.5.9"  # its version
seed_model: str = "kimi-k2.5"  # model card of the seed case
seed_profile: str = "rtx-pro-6000"  # hardware profile of the seed case
compare_engine: str = "sglang"  # engine whose versions are compared
compare_versions: str = "0.5.9,0.5.23"  # two versions of it whose decision matrices are compared, comma-separated
vllm_versions: str = "0.26.0,0.33.0,0.10.2"  # vLLM versions beside it (the first is the seed's other engine), comma-separated
matrix_profiles: str = "a100,h200,b200,rtx-pro-6000"  # hardware profiles for the matrix (capability 8.0, 9.0, 10.0, 12.0), comma-separated
matrix_models: str = "kimi-k2.5,deepseek-v3,llama-3.1-8b,qwen3-30b-a3b,gpt-oss-120b"  # model cards for the matrix, comma-separated
prepare_envs: bool = False  # build missing engine environments (servebook engines add; minutes; needs the package index)
cached_versions: bool = True  # ask the cached environments of the versions named above (seed case, vLLM, matrix); False: only the engine of this kernel (the embedded book's default, so that its time does not depend on what this machine has cached)

# %%
import servebook
from servebook.results import RunStore, show_corrections
from servebook.selection import (add_engine, decision_matrix, list_engines, matrix_diff, read_selection,
                                 render_tree, resolve_engine, whatif)
from servebook.selection.whatif import remember_answers, static_reading

# The same what-if (same engine environment, GPU, model, assumptions) is asked more than once below (this book's case,
# the seed case, a matrix cell): each is asked of the engine once in this chapter and its answer kept for the others.
remember_answers()
store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
store.write_manifest({"chapter": "02", "engine": engine, "model": model, "profile": profile, "smoke": smoke})
print("servebook", servebook.__version__, "| run:", store.path)

# %%
from IPython.display import Markdown, display

from servebook.selection.report import append_once, ask, print_seed_pair, sites_sentence
from servebook.stated import seed_sentence, site_count

Markdown(seed_sentence())

# %% [markdown]
# ## 1. Where does the engine choose? (static reading)
# We parse the engine's source with the AST and list every assignment of the attention backend,
# with the if/elif chain above it. Conditions are tagged *hardware* (capability checks),
# *model* (MLA, architecture lists), *kernel-lib* (is a library importable) or *user* (flags).
# The seed case is the original investigation: Kimi-K2.5 (MLA) with SGLang on an RTX PRO 6000 (capability 12.0).
# If no environment for the seed engine is cached, we read the engine this kernel has (`engine`).

# %%
cached = {f"{e['engine']}=={e['version']}" for e in list_engines()}
prepared = cached if cached_versions or prepare_envs else set()  # the cached versions this chapter asks


def skipped(spec):
    """Why ``spec`` is not asked here: not cached, or cached and left out (cached_versions=False)."""
    if spec in cached:
        return f"{spec}: not asked in this book (cached, but cached_versions is off; -p cached_versions=true asks it)"
    return f"{spec}: no environment cached; skipped (servebook engines add {spec})"


if not (cached_versions or prepare_envs):
    print("cached engine environments are not asked in this book (cached_versions=False): it reads the engine of this "
          "kernel only, so it does the same work on any machine; -p cached_versions=true asks "
          + (", ".join(sorted(cached)) if cached else "those cached (none here)"))
seed_spec = f"{seed_engine}=={seed_version}"
tree_engine = seed_spec if seed_spec in prepared else engine
env = None
reading = None
try:
    env = resolve_engine(tree_engine, engine_python or None if tree_engine == engine else None)
    reading = static_reading(env)
    for s in reading.attention_sites():
        append_once(store, "selection_sites", {"engine": env.engine, "version": env.version, "where": s.where, "function": s.function,
                                        "target": s.target, "value": s.value, "hardware": s.hardware, "model": s.model,
                                        "conditions": [str(c) for c in s.conditions]}, "engine", "version", "where", "target", "value")
    display(Markdown(sites_sentence(store, env.engine, env.version, site_count(store, env.engine, env.version))))
    print(render_tree(reading.attention_sites())[: 2500 if smoke else 6000])
    for name in ("is_sm100_supported", "is_hopper_with_cuda_12_3"):
        if name in reading.helpers:
            h = reading.helpers[name]
            print(f"\n{name} is defined at {h.get('where', '?')}:\n{h.get('excerpt', '')[:400]}")
except servebook.ServebookError as exc:
    store.record_failure("static_reading", exc, engine=tree_engine)
    print("static reading failed:", exc)

# %% [markdown]
# Each `=>` line is a place where the engine's code writes its choice; the lines above it are the
# conditions that must hold for the program to get there.

# %% [markdown]
# ## 2. The answer (dynamic): this host, then the seed case
# Now we run the engine's own resolution in a subprocess (the engine's interpreter), with the GPU
# faked from a hardware profile when one is given, and trace which of the sites above it reached.
# The what-if states its assumptions: which kernel libraries the host has (by default what the engine
# pins), and which CUDA version (by default the engine's own cuda-python pin, not the hardware profile's minimum).

# %%
answer = ask(store, engine, model, f"profile {profile}" if profile else "this-host", "whatif_this_host", gpu=profile or None,
             engine_python=engine_python or None)
seed = ask(store, seed_spec, seed_model, "seed", "whatif_seed", gpu=seed_profile) if seed_spec in prepared else None
show_corrections(store, "selection")  # a row changed after it was recorded says so, by what and why
if seed_spec not in prepared:
    print(f"seed case skipped: {skipped(seed_spec)}")

# %% [markdown]
# ### The seed case in the other engine
# The original case compared two engines on the same GPU. vLLM's own selection runs the same way: its CUDA platform's
# priority list for this capability (`_get_backend_priorities` in `vllm/platforms/cuda.py`) and each candidate backend's
# own `validate_configuration` / `supports_compute_capability`, with only vLLM's compiled extensions stubbed (they need
# libcuda; the answer lists them). Same model, same GPU, the same tensor-parallel size as in the case (its file gives it).

# %%
from servebook.selection.compare import seed_comparison
from servebook.selection.rootcause import cause_of

vllm_specs = [f"vllm=={v.strip()}" for v in vllm_versions.split(",") if v.strip()]
seed_other, seed_pair = None, None
for spec in vllm_specs[:1] if smoke else vllm_specs:
    if spec not in prepared:
        print(skipped(spec))
        continue
    ans = ask(store, spec, seed_model, "seed", "whatif_seed", gpu=seed_profile, tp_size=8)
    if ans:
        print("  root cause:", cause_of(ans)["cause"])
        seed_other = seed_other or ans
if seed and seed_other:
    seed_sg = whatif(seed_spec, seed_model, gpu=seed_profile, tp_size=8)  # the same launch shape for both engines
    seed_pair = seed_comparison(seed_sg, seed_other)
    store.append("seed_comparison", seed_pair, unchanged="keep")  # executed again with the same verdict: not written again
    print_seed_pair(seed_pair)

# %% [markdown]
# That is the engine's own answer, with the line of code that produced it and the conditions that led there.
# For transformers nothing GPU-specific decides: with no `attn_implementation` requested,
# `get_correct_attn_implementation` takes `sdpa` when the model class supports it, else `eager`.

# %% [markdown]
# ### Beyond attention: the rest of the seed case's decode path, from each engine's own code
# The MoE method for the card's INT4 routed experts, the all-reduce path at the case's tensor-parallel size and the rule that decides
# it, the PCIe all-reduce switches each version carries, the collectives a decoder layer issues, the CUDA-graph sizes,
# the greedy sampling path, and how the MLA decode step builds its query and writes the cache per attention backend. `run`: the engine's own function ran with the GPU faked and no NVLink between its GPUs;
# `read`: read from its source (the row says why it could not run); `not read`: the row says what is missing.

# %%
import pandas as pd

from servebook.selection.decode_path import decode_path_table
from servebook.selection.report import print_decode_path

sglang_specs = [f"{compare_engine}=={v.strip()}" for v in compare_versions.split(",") if v.strip()]
dp_specs = [s for s in dict.fromkeys([seed_spec] + ([] if smoke else sglang_specs) + vllm_specs[:1 if smoke else None])
            if s in prepared]
# the seed case's decode path (30-100 s per engine version) is read in the what-if book and in books of SGLang or vLLM;
# the embedded CPU book and smoke runs (tests, CI) leave it out and say how to get it
read_dp = bool(profile) or (not smoke and not engine.startswith("transformers"))
dp_rows = decode_path_table(dp_specs, seed_model, seed_profile, tp_size=8,
                            on_error=lambda e, exc: store.record_failure("decode_path", exc, engine=e)) if read_dp else []
if not read_dp:
    print("the seed case's decode path is not read in this book: `servebook book --profile rtx-pro-6000 --engine "
          "sglang==0.5.9 --model kimi-k2.5 --only 02` reads it (a few minutes per engine version)")
for r in dp_rows:
    append_once(store, "decode_path", r, "engine", "version", "setting", "model", "gpu")
if dp_rows:
    print_decode_path(dp_rows)
else:
    print("decode path skipped: " + ("; ".join(skipped(s) for s in [seed_spec] + vllm_specs[:1]) if read_dp else "not read in this book"))

# %% [markdown]
# Read the all-reduce row first: where an engine's own rule turns custom all-reduce off on PCIe-only GPUs, every
# reduction of every decoder layer goes through NCCL, and the per-step cost is what chapter 04 times; the rows in table
# `decode_path` are what chapter 05's measurements are set against.
#
# The MLA row says which attention backends each SGLang version hands the rope parts to apart; for every other backend
# (its fallback `triton` among them) the model code joins q and k with `torch.cat` on every attention layer. Chapter 06 of
# the H200 reference book shows what that path launches per layer, kernel by kernel, against `fa3` and `flashinfer`.

# %% [markdown]
# ## 3. The decision matrix: model cards x GPUs, for the engine versions to compare
# Kimi-K2.5 and DeepSeek-V3 use MLA attention; Llama and Qwen3 use GQA. We ask each engine version
# what it would pick on each GPU. In smoke mode: two GPUs and two models, and only cached environments.

# %%
versions = [f"{compare_engine}=={v.strip()}" for v in compare_versions.split(",") if v.strip()]
versions += [v for v in (vllm_specs[:1] if smoke else vllm_specs) if v not in versions]  # both engines in one matrix
usable = []
for spec in versions:
    if spec in prepared:
        usable.append(spec)
    elif prepare_envs and not smoke:
        try:
            add_engine(spec)
            usable.append(spec)
        except servebook.ServebookError as exc:
            store.record_failure("engines_add", exc, engine=spec)
            print(f"{spec}: could not prepare: {exc}")
    elif spec in cached:
        print(skipped(spec))
    else:
        print(f"{spec}: no environment cached; skipped (run `servebook engines add {spec}` or set prepare_envs)"
              + (" (smoke mode never builds one)" if smoke else ""))
print("engine environments used:", usable or "none")

# %%
profiles = [p.strip() for p in matrix_profiles.split(",") if p.strip()]
models = [m.strip() for m in matrix_models.split(",") if m.strip()]
if smoke:  # one GPU, two models: one engine process per version, the versions side by side
    profiles = [p for p in profiles if p == "b200"] or profiles[:1]
    models = models[:2]
from concurrent.futures import ThreadPoolExecutor

from servebook.selection.record import record_matrix


def matrix_of(spec):
    return decision_matrix(spec, profiles, models, workers=1 if smoke else 2,
                           on_error=lambda g, m, e, s=spec: store.record_failure("whatif", e, engine=s, gpu=g, model=m))


with ThreadPoolExecutor(max_workers=2 if smoke else 1) as pool:
    matrices = dict(zip(usable, pool.map(matrix_of, usable)))
matrix_mode = "write"  # computed again from the engines' code: replaced whole, or kept where the values are the same
if matrices:  # (and no answer that stands changes: servebook.selection.record); its derived tables follow it
    matrix_mode = record_matrix(store, [r | {"engine_spec": spec} for spec, rows in matrices.items() for r in rows])
none_asked = ("no SGLang/vLLM environment is cached on this machine" if cached_versions or prepare_envs
              else "cached environments are not asked in this book (-p cached_versions=true)")
print({spec: len(rows) for spec, rows in matrices.items()} or f"no matrix: {none_asked}")

# %%
from servebook.selection.report import matrix_tables

tables = matrix_tables(store, matrices, profiles)

# %% [markdown]
# Each cell is what the engine's own resolution returned for that model on that GPU (read back from the stored rows),
# with the file:line that wrote it.

# %%
from servebook.selection.report import plot_matrix

plot_matrix(tables, len(models)) if tables else print(f"no heatmap: {none_asked}")

# %% [markdown]
# Same colour, same backend, in both panels; compare rows (models) across columns (GPUs).

# %% [markdown]
# ### Both engines side by side, and where they disagree
# One row per model and GPU, one column per engine version. A disagreement between engines counts only where the
# backends' names point at different kernel libraries (SGLang's `triton` and vLLM's `TRITON_MLA` are both Triton
# kernels, though different programs); between versions of one engine, any change of name counts.

# %%
from servebook.selection.compare import disagreements, side_by_side
from servebook.selection.report import print_diff
from servebook.selection.report import print_disagreements

all_rows = [r for rows in matrices.values() for r in rows]
if all_rows:
    print(pd.DataFrame(side_by_side(all_rows)).to_string(index=False))
dis = disagreements(all_rows)
if matrices:  # derived from the matrix: replaced whole with it, so one execution's rows are counted, never several
    store.replace("selection_disagreements", dis, unchanged=matrix_mode)
print_disagreements(dis)

# %% [markdown]
# ## 4. What changed between the versions?

# %%
diff = []
if len(matrices) >= 2:
    a, b = list(matrices)[:2]
    diff = matrix_diff(matrices[a], matrices[b])
    store.replace("selection_diff", [d | {"a_spec": a, "b_spec": b} for d in diff], unchanged=matrix_mode)  # as the matrix
    print_diff(diff, a, b)
else:
    print("version diff skipped: it needs two engine environments asked", f"(have {len(matrices)}; {none_asked})")

# %% [markdown]
# ## What we found

# %%
from servebook.selection.report import found_lines

# read back from the stored answers (every case this run recorded), each stated once; chapter 06 states the same lines
Markdown(found_lines(store, seed_pair, matrices, diff))

# %% [markdown]
# Whatever backend the engine picks, the next question is what it costs: chapter 03
# (`03_force_each_backend`) forces each backend in turn and measures it.

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown
from servebook.selection.report import questions

Markdown(check_yourself_markdown(questions(store)))
