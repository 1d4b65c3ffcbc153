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
# # 03. Force each attention backend
#
# Chapter 02 showed which backend the engine *picks*. Picking is not running: a forced flag
# can be silently overridden, a kernel can refuse this GPU, and a fast backend can give wrong
# tokens. In the seed case the fix was `--attention-backend flashinfer` instead of the triton
# fallback, and it had to be checked three ways before it counted: the engine must *report*
# the backend it loaded, its greedy output must agree with the default's, and it must be faster.
#
# Here every candidate is started in turn, on 127.0.0.1, and stopped (with its whole process
# group) before the next one starts.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means a new run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
backends: str = ""  # comma-separated backends to force; empty means the engine list, filtered to what runs here
max_tokens: int = 32  # greedy tokens per probe prompt
runs: int = 3  # single-stream measurements per backend, after one warm-up
ready_timeout: int = 300  # seconds a server may take to become ready
engine_args: str = ""  # extra server flags for every start, e.g. --mem-fraction-static 0.6 (a built model's own, such as --load-format dummy, are added)
modes: str = "graph,eager"  # graph: the engine's default (CUDA graphs); eager: its own flag that turns them off; engines without one run once
preflight: bool = True  # ask the engine's own validation about every candidate first; refused ones start no server


# %% [markdown] tags=["whatif"]
# ## What-if: the plan for the real host
# `profile` is set, so there is no such GPU here and nothing below is measured. What chapter 03 measures on
# the real host: each attention backend the engine accepts, forced in turn with the engine's own flag,
# checked three ways (the backend the engine reports loading, greedy tokens against the default's, decode
# rate). The commands are the engine's own launch lines for the profiled host, recorded in the table
# `plan_commands`, ready to paste there.

# %% tags=["whatif"]
import pandas as pd
from IPython.display import Markdown

from servebook import plan
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open(host=host)
facts = plan.host_facts(store, engine, model, profile)
plan.plan_backends(store, facts)
cmds = store.table("plan_commands")
cmds = cmds[cmds["chapter"] == "03"]
pd.set_option("display.max_colwidth", None)
cmds[["purpose", "command"]]

# %% [markdown] tags=["whatif"]
# One launch per row, each stopped before the next; the last row runs the same sweep with the book's checks.

# %% [markdown] tags=["whatif"]
# ## What we found

# %% tags=["whatif"]
rc = store.table("selection")
lines = [f"- Planned, not measured: {len(cmds) - 1} launches of {facts['engine']} for {facts['model']} on "
         f"{facts['gpus']}x {facts['profile']} (capability {facts['capability']}), the default plus one per backend "
         f"its own parser accepts."]
if len(rc):
    last = rc.iloc[-1]
    lines.append(f"- Chapter 02 predicts the default resolves to `{last['attention_backend']}`; chapter 06 names the backends "
                 "the engine's code would have picked had its hardware helpers answered otherwise: force those first.")
fails = store.table("failures")
if len(fails):
    lines.append(f"- {len(fails)} recorded failure(s) so far, e.g. {fails.iloc[-1]['step']}: {str(fails.iloc[-1]['error'])[:160]}")
Markdown("\n".join(lines))

# %% [markdown] tags=["whatif"]
# Next: [04. Tune NCCL](04_tune_nccl.html) — the communication floor for this profile.

# %%
import pandas as pd

from servebook.backends import PROBE_PROMPTS, force_each_backend
from servebook.engines import get_engine
from servebook.hosts import get_host, model_on_host
from servebook.params import resolve_model
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open()
on_host = get_host(host, run_dir=store.path)  # the servers, and every request to them, run there
eng = get_engine(engine, python=None if on_host.in_process else on_host.python_exe)
eng.host = on_host
print(f"engine: {eng.name} {eng.version()} in {eng.python}")

# %% [markdown]
# ## The candidates
# The engine's own list of valid values for its attention flag (read from its code, not typed in here).

# %%
choices = eng.attention_choices()
print(f"{eng.name} accepts {eng.attention_flag} =", ", ".join(choices))

# %% [markdown]
# Before any server starts, its command line is checked against the installed engine's own argument
# parser (SGLang's `ServerArgs.add_cli_args`, vLLM's `make_arg_parser`, built in the engine's interpreter):
# a flag or value this version does not know is recorded as "rejected", naming the version, instead of
# failing somewhere in the engine's start-up.

# %%
if eng.checks_cli:
    cli = eng.cli_options()
    how = eng.attention_mechanism() if hasattr(eng, "attention_mechanism") else "flag"
    print(f"{eng.name} {eng.version()}: {len(cli['options'])} options, read from its {cli['method']}; "
          f"a backend is forced by {'the flag ' + eng.attention_flag if how == 'flag' else 'the environment variable VLLM_ATTENTION_BACKEND'}")
else:
    print(f"{eng.name} starts through servebook's own launcher; {eng.attention_flag} is its option")

# %% [markdown]
# Not every valid value can run on every host: the flash-attention kernels need a CUDA GPU of
# the right generation and their package installed. Unless `backends` names them, those are kept
# out here and the reason is recorded, so they show as "not run here", not as silently missing.

# %%
from servebook.backends import runnable_here

if backends:
    candidates = [b.strip() for b in backends.split(",") if b.strip()]
    skipped = []
else:
    candidates, skipped = [], []
    for name in choices:
        ok, why = runnable_here(name, smoke=smoke, host=on_host)
        (candidates.append(name) if ok else skipped.append({"attention": name, "reason": why}))
if smoke:  # one forced backend besides the default keeps the smoke run short
    candidates = [c for c in candidates if c == "eager"] or candidates[:1]
for s in skipped:
    if not store.done("backends_not_run", engine=eng.name, attention=s["attention"]):
        store.append("backends_not_run", {"engine": eng.name, **s})
print("will force:", ["auto (engine default)", *candidates])
pd.DataFrame(skipped)

# %% [markdown]
# ## The sweep
# `auto` first: it is the reference the others' tokens are compared with.

# %%
model_dir = resolve_model(model)
if isinstance(model_dir, dict):
    raise SystemExit(f"model '{model}' is a model card (facts only, no weights): chapter 03 needs a real model directory on this host")
import shlex

from servebook.models import engine_args_of

extra = shlex.split(engine_args) + engine_args_of(model_dir, eng.name)
sweep_modes = [m.strip() for m in modes.split(",") if m.strip()] if eng.eager_args is not None else ["default"]
print(f"modes: {', '.join(sweep_modes)}; extra server flags: {' '.join(extra) or 'none'}")
rows = force_each_backend(eng, model_dir, [None, *candidates], store, max_tokens=max_tokens,
                          runs=max(1, runs if not smoke else 2), ready_timeout=ready_timeout,
                          host=on_host, host_model=model_on_host(on_host, model, model_dir),
                          extra_args=extra, modes=sweep_modes, preflight=preflight)

# %%
table = store.table("backends")
table = table[table["engine"] == eng.name]
cols = [c for c in ["attention", "mode", "outcome", "reported", "reported_source", "tf_top1_agreement", "tf_logprob_mad", "agreement",
                    "first_divergence", "decode_tok_s", "decode_tok_s_ci95", "ttft_ms", "ready_s", "port_free_after", "error"] if c in table]
table[cols]

# %% [markdown]
# Each row is one server start. `reported` is what the engine itself said it loaded (`reported_source`:
# its server-info endpoint or the log line it came from); `agreement`
# is the share of greedy tokens equal to the default backend's.

# %%
import matplotlib.pyplot as plt
import seaborn as sns

plot = table.copy()
plot["decode_tok_s"] = pd.to_numeric(plot.get("decode_tok_s"), errors="coerce").fillna(0)
plot["label"] = plot["attention"] + (" " + plot["mode"].fillna("") if "mode" in plot else "") + "\n" + plot["outcome"].fillna("?")
fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(plot)), 3.2))
sns.barplot(data=plot, x="label", y="decode_tok_s", hue="outcome", dodge=False, ax=ax)
ax.tick_params(axis="x", labelsize=7, rotation=45)
ax.set_xlabel("")
ax.set_ylabel("decode tok/s (single stream)")
ax.set_title(f"{eng.name}: each attention backend forced (failures shown at 0)")
plt.tight_layout()

# %% [markdown]
# ## What we found

# %%
from IPython.display import Markdown

ok = table[table["outcome"] == "ok"]
lines = []
if len(ok):
    best = ok.sort_values("decode_tok_s", ascending=False).iloc[0]
    lines.append(f"- {len(ok)} of {len(table)} backend runs of {eng.name} served correct output; the fastest was "
                 f"**{best['attention']}** at {best['decode_tok_s']:.1f} tok/s single stream.")
    auto = ok[ok["attention"] == "auto"]
    if len(auto) and auto.iloc[0].get("reported"):
        lines.append(f"- Left alone, the engine reported loading **{auto.iloc[0]['reported']}**.")
    spread = ok["decode_tok_s"].max() / max(ok["decode_tok_s"].min(), 1e-9)
    ci = ok["decode_tok_s_ci95"].fillna(0) if "decode_tok_s_ci95" in ok else pd.Series(0, index=ok.index)
    worst = ok.sort_values("decode_tok_s").iloc[0]
    overlap = (best["decode_tok_s"] - ci[best.name]) <= (worst["decode_tok_s"] + ci[worst.name])
    lines.append(f"- The spread between backends was {spread:.2f}x"
                 + (", inside the 95% confidence intervals of the runs: on this host the measurement cannot tell these backends apart."
                    if overlap else ", larger than the 95% confidence intervals."))
bad = table[table["outcome"] != "ok"]
for _, r in bad.iterrows():
    lines.append(f"- **{r['attention']}**: {r['outcome']} — {r.get('error')}")
if skipped:
    lines.append("- Not run here: " + ", ".join(f"{s['attention']} ({s['reason']})" for s in skipped) + ".")
Markdown("\n".join(lines) or "No backend ran.")

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown

qa = []
rep = table[["attention", "reported", "outcome"]].fillna("-") if "reported" in table else None
qa.append(("How do you know the backend that ran is the one you forced, and not a silent fallback?",
           "Not from the flag: from the engine's own report after loading (column `reported`). In this run: "
           + ("; ".join(f"{r['attention']} -> {r['reported']} ({r['outcome']})" for _, r in rep.iterrows()) if rep is not None and len(rep) else "no backend reported")
           + ". A forced backend whose report differs is classified `overridden`."))
if len(ok):
    qa.append(("Which backend was fastest here, and is the difference one you would act on?",
               f"{best['attention']} at {best['decode_tok_s']:.1f} tok/s; act only if its 95% interval does not overlap the default's "
               "(see What we found: " + ("they overlap here, so keep the default)." if overlap else "they do not overlap here).")))
agree = table.dropna(subset=["agreement"]) if "agreement" in table else table.iloc[0:0]
qa.append(("Why compare greedy tokens against the engine's default backend instead of checking the text reads well?",
           "The embedded model's weights are random, so no text reads well; greedy decoding is deterministic, so a correct backend "
           "reproduces the default's tokens until numerical differences flip an argmax. Here: "
           + (", ".join(f"{r['attention']} {r['agreement']:.0%}" for _, r in agree.iterrows()) or "no agreement measured") + " of tokens agreed."))
Markdown(check_yourself_markdown(qa))

# %% [markdown]
# Next: [04. Tune NCCL](04_tune_nccl.html) — on a multi-GPU host, decode also waits for all-reduces.
