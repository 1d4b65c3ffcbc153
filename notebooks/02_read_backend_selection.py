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
# # 02 · Read the backend-selection logic from the engine's own code
#
# Chapter 01 told us which GPU we have. The next question decides most of the performance:
# **which attention kernel will the engine run on it, and which rule in its code made that choice?**
# The original case lost a third of its decode speed here: SGLang picked a slow attention backend
# on an RTX PRO 6000 (compute capability 12.0), because a branch for a faster one was guarded by
# a check for another GPU family. Prose about this contradicts itself; the engine's code does not.
# So this chapter reads that code (statically, with Python's AST) and runs it (the engine's own
# resolution, with the GPU faked from a hardware profile), for this host and for GPUs we do not have.

# %% tags=["parameters"]
run_dir = ""            # str: this run's directory (set by `servebook book`); "" = a new run under runs/
host = "local"          # str: "local"
engine = "transformers" # str: transformers | sglang | vllm, optionally ==VERSION
model = "embedded"      # str: "embedded", a card in data/models (e.g. "kimi-k2.5"), or a model directory
profile = ""            # str: a hardware profile in data/hardware for what-if; "" = this host
smoke = False           # bool: small workloads (tests, CI)
engine_python = ""      # str: an interpreter where `engine` is installed; "" = servebook's own / a cached environment
compare_engines = "sglang==0.5.9,sglang==0.5.23"  # str: two engine versions whose decision matrices are compared
matrix_profiles = "h200,b200,rtx-pro-6000"         # str: hardware profiles (comma-separated) for the matrix
matrix_models = "kimi-k2.5,deepseek-v3,llama-3.1-8b,qwen3-30b-a3b,gpt-oss-120b"  # str: model cards for the matrix
prepare_envs = False    # bool: build missing engine environments (`servebook engines add`, minutes, needs the package index)

# %%
import servebook
from servebook.results import RunStore
from servebook.selection import (add_engine, decision_matrix, list_engines, matrix_diff, read_selection,
                                 render_tree, resolve_engine, whatif)
from servebook.selection.whatif import static_reading

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
store.write_manifest({"chapter": "02", "engine": engine, "model": model, "profile": profile, "smoke": smoke})
print("servebook", servebook.__version__, "| run:", store.path)

# %% [markdown]
# ## 1. Where does the engine choose? (static reading)
# We parse the engine's source with the AST and list every assignment of the attention backend,
# with the if/elif chain above it. Conditions are tagged *hardware* (capability checks),
# *model* (MLA, architecture lists), *kernel-lib* (is a library importable) or *user* (flags).

# %%
env = None
try:
    env = resolve_engine(engine, engine_python or None)
    reading = static_reading(env)
    for s in reading.attention_sites():
        store.append("selection_sites", {"engine": env.engine, "version": env.version, "where": s.where, "function": s.function,
                                         "target": s.target, "value": s.value, "hardware": s.hardware, "model": s.model,
                                         "conditions": [str(c) for c in s.conditions]})
    print(f"{env.engine} {env.version}: {len(reading.attention_sites())} attention-backend sites in {len(reading.files)} files")
    print(render_tree(reading.attention_sites())[:6000])
except servebook.ServebookError as exc:
    store.record_failure("static_reading", exc, engine=engine)
    print("static reading failed:", exc)

# %% [markdown]
# Each `=>` line is a place where the engine's code writes its choice; the lines above it are the
# conditions that must hold for the program to get there.

# %% [markdown]
# ## 2. The answer for this host and model (dynamic)
# Now we run the engine's own resolution in a subprocess (the engine's interpreter), with the GPU
# faked from `profile` when one is given, and trace which of the sites above it reached.

# %%
answer = None
try:
    answer = whatif(engine, model, gpu=profile or None, engine_python=engine_python or None)
    store.append("selection", {k: answer.get(k) for k in ("engine", "version", "model", "architecture", "mla", "gpu", "capability",
                                                          "method", "attention_backend", "prefill_attention_backend",
                                                          "decode_attention_backend", "moe_runner_backend", "decided_by",
                                                          "conditions", "logs", "assumptions", "reason")} | {"case": "this-host"})
    print(f"{answer['engine']} {answer['version']} on {answer['gpu']}: attention = {answer['attention_backend']} "
          f"(moe/experts = {answer.get('moe_runner_backend')}), method = {answer['method']}")
    if answer.get("decided_by"):
        d = answer["decided_by"]
        print(f"decided by {d['where']} in {d['function']}: {d['target']} = {d['value']}")
    for c in answer.get("conditions", []):
        print(f"  because {c['text']}  [{', '.join(c['kinds'])}]")
    print("assumptions:", answer["assumptions"]["kernel_libs"] or "this host as it is",
          "| kernel libs seen:", {k: v for k, v in answer["assumptions"].get("kernel_libs_seen", {}).items() if v} or "none")
except servebook.ServebookError as exc:
    store.record_failure("whatif_this_host", exc, engine=engine, model=model)
    print("what-if failed:", exc)

# %% [markdown]
# That is the engine's own answer, with the line of code that produced it and the conditions that led there.
# For transformers nothing GPU-specific decides: with no `attn_implementation` requested,
# `get_correct_attn_implementation` takes `sdpa` when the model class supports it, else `eager`.

# %% [markdown]
# ## 3. The key case: an MLA model on three GPUs, with the engine versions to compare
# Kimi-K2.5 and DeepSeek-V3 use MLA attention. The original case ran Kimi-K2.5 on RTX PRO 6000
# (capability 12.0). We ask each SGLang version what it would pick there, on B200 (10.0) and on H200 (9.0).

# %%
versions = [v.strip() for v in compare_engines.split(",") if v.strip()]
prepared = {f"{e['engine']}=={e['version']}" for e in list_engines()}
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
    else:
        print(f"{spec}: no environment cached; skipped (run `servebook engines add {spec}` or set prepare_envs=True)"
              + (" — smoke mode never builds one" if smoke else ""))
print("engine environments used:", usable or "none")

# %%
profiles = [p.strip() for p in matrix_profiles.split(",") if p.strip()]
models = [m.strip() for m in matrix_models.split(",") if m.strip()]
if smoke:
    models = models[:2]
matrices = {}
for spec in usable:
    rows = decision_matrix(spec, profiles, models,
                           on_error=lambda g, m, e, s=spec: store.record_failure("whatif", e, engine=s, gpu=g, model=m))
    for r in rows:
        store.append("selection_matrix", r | {"engine_spec": spec})
    matrices[spec] = rows
print({spec: len(rows) for spec, rows in matrices.items()} or "no matrix: no SGLang/vLLM environment is cached on this machine")

# %%
import pandas as pd

tables = {}
for spec in matrices:
    df = store.table("selection_matrix")
    df = df[df["engine_spec"] == spec]
    tables[spec] = df.pivot_table(index="model", columns="gpu", values="attention_backend", aggfunc="last").reindex(columns=profiles)
    print(f"\n{spec}: attention backend by model x GPU")
    print(tables[spec].to_string())

# %% [markdown]
# Each cell is what the engine's own `ServerArgs` resolved for that model on that GPU (read back from the stored rows).

# %%
import matplotlib.pyplot as plt
import seaborn as sns

if tables:
    fig, axes = plt.subplots(1, len(tables), figsize=(5 * len(tables), 0.6 * len(models) + 1.5), squeeze=False)
    for ax, (spec, t) in zip(axes[0], tables.items()):
        codes = {b: i for i, b in enumerate(sorted({str(v) for v in t.values.ravel()}))}
        sns.heatmap(t.map(lambda v: codes[str(v)]), annot=t.astype(str), fmt="", cbar=False, cmap="tab10", ax=ax)
        ax.set_title(spec)
    plt.tight_layout()
    plt.show()
else:
    print("no heatmap: no engine environment cached")

# %% [markdown]
# Same colour, same backend; compare rows (models) across columns (GPUs).

# %% [markdown]
# ## 4. What changed between the versions?

# %%
diff = []
if len(matrices) >= 2:
    a, b = list(matrices)[:2]
    diff = matrix_diff(matrices[a], matrices[b])
    for d in diff:
        store.append("selection_diff", d | {"a_spec": a, "b_spec": b})
    for d in diff:
        print(f"{d['model']} on {d['gpu']}: {a} {d['a']} ({d['a_decided_by']}) -> {b} {d['b']} ({d['b_decided_by']})")
    print(f"{len(diff)} cells differ between {a} and {b}")
else:
    print("version diff skipped: it needs two cached engine environments", f"(have {len(matrices)})")

# %% [markdown]
# ## What we found

# %%
found = []
if answer:
    found.append(f"- On this host, {answer['engine']} {answer['version']} resolves `{answer['attention_backend']}` for `{model}` "
                 f"({answer['method']}; decided at {(answer.get('decided_by') or {}).get('where', 'n/a')}).")
for spec, rows in matrices.items():
    for r in rows:
        if r["model"] in ("kimi-k2.5", "deepseek-v3") and r.get("attention_backend"):
            found.append(f"- {spec}: {r['model']} on {r['gpu']} (capability {r.get('capability')}) -> `{r['attention_backend']}`"
                         f" (decided at {r.get('decided_by')})")
if diff:
    found.append(f"- {len(diff)} model x GPU cells change between {list(matrices)[0]} and {list(matrices)[1]}.")
if not matrices:
    found.append("- No SGLang/vLLM environment was cached, so the MLA x GPU matrix was not computed here "
                 "(`servebook engines add sglang==0.5.9`).")
failures = store.rows("failures")
found.append(f"- {len(failures)} step(s) failed and were recorded in {store.table_path('failures').name}." if failures else "- No step failed.")
print("\n".join(found))

# %% [markdown]
# Whatever backend the engine picks, the next question is what it costs: chapter 03
# (`03_compare_backends`) forces each backend in turn and measures it.
