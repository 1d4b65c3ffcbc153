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
# tokens. The seed case's first suspicion was SGLang's triton fallback, and the change it tried was
# `--attention-backend flashinfer`; any such change has to be checked three ways before it counts: the engine
# must *report* the backend it loaded, its output must agree with the default's on the decode path, and it must be
# faster beyond the noise. (Chapter 02 shows both engines fall back to Triton MLA on 12.0; chapter 06 says what the
# profiles predict of the kernels' share in the seed's gap.)
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
backends: str = ""  # comma-separated backends to force, or per engine: sglang: a,b; vllm: X; empty means the engine list, filtered to what runs here
max_tokens: int = 32  # greedy tokens per probe prompt
runs: int = 3  # single-stream measurements per backend, after one warm-up
starts: int = 2  # server starts per backend whose output was correct: its rate is measured after each, the 95% interval taken over the per-start means (1: within one start only)
ready_timeout: int = 300  # seconds a server may take to become ready
engine_args: str = ""  # extra server flags for every start, e.g. --mem-fraction-static 0.6 (a built model's own, such as --load-format dummy, are added)
modes: str = "graph,eager"  # graph: the engine's default (CUDA graphs); eager: its own flag that turns them off; engines without one run once
eager_backends: str = ""  # backends that also run in eager mode, comma-separated ("auto" is the default); empty: every backend
preflight: bool = True  # ask the engine's own validation about every candidate first; refused ones start no server
compare_engines: str = ""  # more engine specs, comma-separated, swept the same way (each on its own GPU, in parallel, when the host has enough)
measure: bool = True  # False: start nothing, re-read this run's tables (servebook html RUN --refresh 03)


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
from servebook.stated import q, selection_of

rc = store.table("selection")
lines = [f"- Planned, not measured: {len(cmds) - 1} launches of {facts['engine']} for {facts['model']} on "
         f"{facts['gpus']}x {facts['profile']} (capability {facts['capability']}), the default plus one per backend "
         f"its own parser accepts."]
if len(rc):
    last = rc.iloc[-1]
    lines.append(f"- Chapter 02 predicts the default resolves to "
                 f"{q('selected_backend', last['attention_backend'], of=selection_of(last.to_dict()), code=True)}; chapter 06 names the backends "
                 "the engine's code would have picked had its hardware helpers answered otherwise: force those first.")
fails = store.table("failures")
if len(fails):
    lines.append(f"- {len(fails)} recorded failure(s) so far, e.g. {fails.iloc[-1]['step']}: {str(fails.iloc[-1]['error'])[:160]}")
Markdown("\n".join(lines))

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
from servebook.findings import check_yourself_markdown

first = cmds.iloc[0] if len(cmds) else None
qa = [("Nothing was measured on this page. What would you run first on the real host, and how would you know the backend "
       "you forced is the one that ran?",
       (f"The engine's default, `{first['command']}`, then one launch per backend (the table above). " if first is not None else
        "The launches of the table above (none was planned here). ")
       + "A forced backend counts only when the engine reports loading it (its server info or its log), its decode-step "
         "token ids agree with the default's, and its decode rate is measured: a flag alone proves nothing.")]
if len(rc):
    last = rc.iloc[-1]
    qa.append(("Which backend does chapter 02 predict the engine's default resolves to here, and is that a measurement?",
               f"`{last['attention_backend']}`, from {last['engine']} {last['version']}'s own resolution with the GPU faked "
               f"({(last.get('decided_by') or {}).get('where')}). A prediction from the engine's code: chapter 03 on the real "
               "host checks it against what the server reports."))
Markdown(check_yourself_markdown(qa))

# %% [markdown] tags=["whatif"]
# Next: [04. Tune NCCL](04_tune_nccl.html) — the communication floor for this profile.

# %%
import shlex

import pandas as pd

from servebook.backends import PROBE_PROMPTS, force_each_backend, runnable_here
from servebook.findings import ONE_START
from servebook.engines import args_for, get_engine
from servebook.hosts import get_host, model_on_host
from servebook.models import engine_args_of
from servebook.params import resolve_model
from servebook.results import RunStore

store = RunStore.at(run_dir) if run_dir else RunStore.open()
on_host = get_host(host, run_dir=store.path)  # the servers, and every request to them, run there
specs = [e.strip() for e in [engine, *compare_engines.split(",")] if e.strip()]
engines = []
for spec in specs if measure else []:
    e = get_engine(spec, python=None if on_host.in_process else on_host.python_exe)
    e.host = on_host
    engines.append(e)
    print(f"engine: {e.name} {e.version()} in {e.python}")
if not measure:  # the recorded rows only: no engine is asked anything here
    from types import SimpleNamespace

    from servebook.selection.envs import parse_engine_spec

    engines = [SimpleNamespace(name=parse_engine_spec(spec)[0]) for spec in specs]
    print(f"measure=False: nothing is started or asked; the rows of {', '.join(e.name for e in engines)} as recorded")

# %% [markdown]
# ## The candidates
# Each engine's own list of valid values for its attention flag (read from its code, not typed in here).
# Before any server starts, its command line is checked against the installed engine's own argument
# parser (SGLang's `ServerArgs.add_cli_args`, vLLM's `make_arg_parser`, built in the engine's interpreter):
# a flag or value this version does not know is recorded as "rejected", naming the version.

# %%
def listed_for(text: str, name: str):
    """The backends the `backends` parameter names for engine `name`: "a,b" for every engine, or per engine
    "sglang: triton,flashmla; vllm: FLASHMLA"; None when it names none for this engine."""
    parts = [p.strip() for p in (text or "").split(";") if p.strip()]
    tagged = {p.split(":", 1)[0].strip().lower(): p.split(":", 1)[1] for p in parts if ":" in p}
    if tagged:
        return [b.strip() for b in tagged[name].split(",") if b.strip()] if name in tagged else None
    return [b.strip() for b in text.split(",") if b.strip()] if parts else None


def candidates_for(eng):
    choices = eng.attention_choices()
    how = eng.attention_mechanism() if hasattr(eng, "attention_mechanism") else "flag"
    if eng.checks_cli:
        cli = eng.cli_options()
        print(f"{eng.name} {eng.version()}: {len(cli['options'])} options, read from its {cli['method']}; a backend is forced by "
              f"{'the flag ' + eng.attention_flag if how == 'flag' else 'the environment variable VLLM_ATTENTION_BACKEND'}")
    print(f"{eng.name} accepts {eng.attention_flag} =", ", ".join(choices))
    listed = listed_for(backends, eng.name)
    picked, skipped = [], []
    if listed is not None:  # the run names its candidates: the others are recorded as not run, with that reason
        picked = listed
        skipped = [{"engine": eng.name, "attention": n, "reason": "not in this run's `backends` list"} for n in choices if n not in listed]
    else:
        for name in choices:
            ok, why = runnable_here(name, smoke=smoke, host=on_host)
            (picked.append(name) if ok else skipped.append({"engine": eng.name, "attention": name, "reason": why}))
    if smoke:  # one forced backend besides the default keeps the smoke run short
        picked = [c for c in picked if c == "eager"] or picked[:1]
    return picked, skipped


plans, skipped = {}, []
for eng in engines if measure else []:
    plans[eng.name], sk = candidates_for(eng)
    skipped += sk
if not measure:
    skipped = [r for r in store.rows("backends_not_run") if r["engine"] in {e.name for e in engines}]
for s in skipped:
    if not store.done("backends_not_run", engine=s["engine"], attention=s["attention"]):
        store.append("backends_not_run", s)
pd.DataFrame(skipped)

# %% [markdown]
# Not every valid value can run on every host: transformers' flash-attention kernels need a CUDA GPU and their
# package, and are kept out here with the reason unless `backends` names them. For SGLang and vLLM every value is a
# candidate, and the engine's own validation (`preflight`) is asked about each before anything starts: SGLang's
# `prepare_server_args` (the function its launcher calls) and vLLM's backend classes' `validate_configuration`
# for this GPU and this model's attention shape. What they refuse is recorded with their own reason.

# %% [markdown]
# ## The sweep
# `auto` first: it is the reference the others' tokens are compared with. `mode` says whether the engine captured
# CUDA graphs (its default) or ran eagerly (its own flag). With several engines and as many GPUs, each engine's
# sweep runs on its own GPU at the same time.

# %%
import concurrent.futures as cf
import os

model_dir = resolve_model(model)
if isinstance(model_dir, dict):
    raise SystemExit(f"model '{model}' is a model card (facts only, no weights): chapter 03 needs a real model directory on this host; "
                     f"build one with `servebook model build {model}`")
gpus = 0
if on_host.in_process:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
parallel = len(engines) > 1 and gpus >= len(engines)
visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] or [str(i) for i in range(gpus)]


def sweep(i, eng):
    extra = args_for(engine_args, eng.name) + engine_args_of(model_dir, eng.name)
    eng_modes = [m.strip() for m in modes.split(",") if m.strip()] if eng.eager_args is not None else ["default"]
    env = {"CUDA_VISIBLE_DEVICES": visible[i]} if parallel else {}
    print(f"{eng.name}: modes {', '.join(eng_modes)}; extra server flags: {' '.join(extra) or 'none'}"
          + (f"; on GPU {visible[i]}" if env else ""))
    return force_each_backend(eng, model_dir, [None, *plans[eng.name]], store, max_tokens=max_tokens,
                              runs=max(1, runs if not smoke else 2), ready_timeout=ready_timeout,
                              host=on_host, host_model=model_on_host(on_host, model, model_dir),
                              extra_args=extra, modes=eng_modes, preflight=preflight, env=env,
                              eager_only=[b.strip() for b in eager_backends.split(",") if b.strip()],
                              starts=1 if smoke else starts,
                              progress=(lambda m, n=eng.name: print(f"[{n}] {m}", flush=True)))


if not measure:
    outcomes = {}
elif parallel:
    import transformers  # noqa: F401 - resolved once here, before the threads (its lazy imports are not thread-safe)

    with cf.ThreadPoolExecutor(len(engines)) as pool:
        futures = {e.name: pool.submit(sweep, i, e) for i, e in enumerate(engines)}
    outcomes = {name: f.exception() for name, f in futures.items()}
else:
    outcomes = {}
    for i, e in enumerate(engines):
        try:
            sweep(i, e)
            outcomes[e.name] = None
        except Exception as exc:  # one engine's failure never loses the other's rows
            outcomes[e.name] = exc
for name, exc in outcomes.items():
    if exc is not None:
        store.record_failure(f"chapter 03 sweep {name}", exc, engine=name)
        print(f"{name}: the sweep stopped: {type(exc).__name__}: {exc}")

# %%
names = [e.name for e in engines]
table = store.table("backends")
table = table[table["engine"].isin(names)] if len(table) else table
if len(table) and "mode" not in table:
    table["mode"] = "default"
if len(table):  # each start's rate (field `start` in the row's `starts` list); a row recorded before starts were counted had one
    table["start_rates"] = [[round(x["decode_tok_s"], 1) for x in v if isinstance(x, dict) and x.get("decode_tok_s") is not None]
                            if isinstance(v, list) else None for v in (table["starts"] if "starts" in table else [None] * len(table))]
    table["ci_over"] = [f"{len(v)} server starts" if isinstance(v, list) and len(v) >= 2 else ONE_START for v in table["start_rates"]]
cols = [c for c in ["engine", "attention", "mode", "outcome", "reported", "reported_source", "decode_agreement", "decode_positions",
                    "decode_tolerance", "tf_top1_agreement", "tf_logprob_mad", "agreement",
                    "decode_tok_s", "decode_tok_s_ci95", "ci_over", "start_rates", "ttft_ms", "ready_s", "port_free_after", "error"] if c in table]
pd.set_option("display.max_colwidth", 160)
table[cols]

# %% [markdown]
# Each row is one server start (or a refusal before one). `reported` is what the engine itself said it loaded
# (`reported_source`: its server-info endpoint or the log line it came from). `decode_agreement` is the check of the
# kernel that was forced, on the decode path, by token ids (`servebook.agreement`; how it ran, below).
# `tf_top1_agreement` is teacher-forced on the prefill path only: the default's completions, prompt included, sent back
# as text and scored in one forward pass (`tf_logprob_mad`: the mean |log-prob difference| there). `agreement` is the
# share of greedy tokens equal to the default's. `decode_tok_s` and its 95% half-width are taken over the per-start
# means (`start_rates`, one per server start) where the backend ran `starts` times; `ci_over` says what the interval
# covers. The rate moves more between server starts than within one, so only intervals over starts decide "faster".

# %%
from IPython.display import Markdown

from servebook.agreement import describe

Markdown(describe(table))

# %% [markdown]
# A start whose decode kernel gives other tokens than the default's, beyond a near-tie, is `wrong output` even when its
# prefill agrees.

# %%
pre = store.table("backends_preflight")
if len(pre):
    pre = pre[pre["engine"].isin(names)]
    display(pre[[c for c in ("engine", "attention", "ok", "error", "resolved") if c in pre]])
    print("method:", "; ".join(sorted({str(m) for m in pre["method"].dropna()})))

# %% [markdown]
# The engines' own validation, asked once per candidate without starting a server. `resolved` for `auto` is what the
# engine would pick on this GPU for this model, from its own code.

# %%
import matplotlib.pyplot as plt
import seaborn as sns

plot = table.copy()
if len(plot):
    plot["decode_tok_s"] = pd.to_numeric(plot.get("decode_tok_s"), errors="coerce").fillna(0)
    plot = plot[plot["outcome"].isin(["ok", "overridden", "wrong output"]) | (plot["decode_tok_s"] > 0)]
if len(plot):
    plot["label"] = plot["engine"] + " " + plot["attention"] + " " + plot["mode"].fillna("")
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(plot) + 1.2))
    ax.barh(plot["label"], plot["decode_tok_s"], xerr=pd.to_numeric(plot.get("decode_tok_s_ci95"), errors="coerce").fillna(0),
            color=["tab:blue" if o == "ok" else "tab:red" for o in plot["outcome"]])
    ax.invert_yaxis()
    ax.set_xlabel("decode tok/s, single stream (bars: 95% interval; red: not ok)")
    ax.set_title("each attention backend that started, forced")
    plt.tight_layout()

# %% [markdown]
# ## What we found

# %%
from IPython.display import Markdown

from servebook.findings import backends as compared_backends, default_methods, say_default_methods, separated, starts_of
from servebook.stated import say_backends

lines = []
verdicts = {b["engine"]: b for b in compared_backends(store)}  # chapter 06's definition: the fastest correct start vs the default
for name in names:
    t = table[table["engine"] == name]
    ok = t[t["outcome"] == "ok"]
    if not len(t):
        continue
    lines.append(f"**{name}**: {len(ok)} of {len(t)} starts served output that agrees with the default backend.")
    b = verdicts.get(name) or {}
    if b.get("correct") and b.get("default_tok_s") is not None:
        lines.append(f"- The answer (chapter 06 states the same): {say_backends(b)} Each start against the default:")
    modes_auto = {}  # the default's start in each mode
    for mode, g in ok.groupby("mode"):
        auto = g[g["attention"] == "auto"]
        if not len(auto):
            continue
        a = modes_auto[mode] = auto.iloc[0]
        ranked = g.sort_values("decode_tok_s", ascending=False)
        for _, r in ranked.iterrows():
            if r["attention"] == "auto":
                continue
            verdict = separated(r["decode_tok_s"], r.get("decode_tok_s_ci95"), a["decode_tok_s"], a.get("decode_tok_s_ci95"),
                                starts=(starts_of(r.to_dict()), starts_of(a.to_dict())))
            lines.append(f"- {mode}: **{r['attention']}** {r['decode_tok_s']:.1f} ± {r.get('decode_tok_s_ci95') or 0:.1f} tok/s vs the default "
                         f"(`{a.get('reported')}`) {a['decode_tok_s']:.1f} ± {a.get('decode_tok_s_ci95') or 0:.1f}: {verdict}")
    if "eager" in modes_auto and ("graph" in modes_auto or "default" in modes_auto):  # what CUDA graphs are worth here
        e, gr = modes_auto["eager"], modes_auto.get("graph", modes_auto.get("default"))
        lines.append(f"- CUDA graphs off (eager), the default `{e.get('reported')}`: {e['decode_tok_s']:.1f} ± {e.get('decode_tok_s_ci95') or 0:.1f} "
                     f"tok/s against {gr['decode_tok_s']:.1f} ± {gr.get('decode_tok_s_ci95') or 0:.1f} with them: "
                     f"{separated(e['decode_tok_s'], e.get('decode_tok_s_ci95'), gr['decode_tok_s'], gr.get('decode_tok_s_ci95'), starts=(starts_of(e.to_dict()), starts_of(gr.to_dict())))}.")
    for _, r in t[t["outcome"] != "ok"].iterrows():
        lines.append(f"- **{r['attention']}** ({r['mode']}): {r['outcome']} — {str(r.get('error'))[:300]}")
for f in store.rows("failures"):  # a sweep (or the chapter) that stopped: its rows so far are above, the rest never ran
    if str(f.get("step", "")).startswith("chapter 03 sweep") and f.get("engine") in names:
        later = len(table) and ((table["engine"] == f["engine"]) & (table["recorded_at"].astype(str) > str(f.get("recorded_at")))).any()
        lines.append(f"- **{f['engine']}**: " + ("an earlier sweep of this run stopped (measured again later: the rows above): "
                                                 if later else "the sweep stopped: ") + str(f["error"])[:400])
    elif str(f.get("step", "")).startswith("chapter 03_"):
        lines.append(f"- An execution of this chapter stopped in this run: {str(f['error'])[:400]}")
if default_methods(store):  # chapter 05 measured the default too: the same way, or not
    lines.append(say_default_methods(default_methods(store)))
if skipped:
    lines.append("- Not run here: " + ", ".join(f"{s['engine']} {s['attention']} ({s['reason']})" for s in skipped) + ".")
Markdown("\n".join(lines) or "No backend ran.")

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.findings import check_yourself_markdown

qa = []
rep = table[["engine", "attention", "mode", "reported", "outcome"]].fillna("-") if "reported" in table else None
qa.append(("How do you know the backend that ran is the one you forced, and not a silent fallback?",
           "Not from the flag: from the engine's own report after loading (column `reported`). In this run: "
           + ("; ".join(f"{r['engine']} {r['attention']} ({r['mode']}) -> {r['reported']} ({r['outcome']})" for _, r in rep.iterrows())
              if rep is not None and len(rep) else "no backend reported")
           + ". A forced backend whose report differs is classified `overridden`."))
tf = table.dropna(subset=["tf_top1_agreement"]) if "tf_top1_agreement" in table else table.iloc[0:0]
agree = table.dropna(subset=["agreement"]) if "agreement" in table else table.iloc[0:0]
dec = table.dropna(subset=["decode_agreement"]) if "decode_agreement" in table else table.iloc[0:0]
qa.append(("Why compare decode-step token ids at the default's prefix, and not only greedy text, against the default backend?",
           "The weights are random, so no text reads well, and near-tied logits let two correct kernels pick different argmaxes; "
           "in a greedy run one flip changes every later token. Compared at the default's prefix, with near-ties tolerated, a "
           "flip costs one position; and only tokens from decode steps run the decode kernel that was forced. Here, decode: "
           + (", ".join(f"{r['engine']} {r['attention']} {r['mode']} {r['decode_agreement']:.0%} of {r['decode_positions']:.0f}"
                        for _, r in dec.iterrows()) or "not recorded in this run")
           + "; teacher-forced (prefill only): "
           + (", ".join(f"{r['engine']} {r['attention']} {r['mode']} {r['tf_top1_agreement']:.0%}" for _, r in tf.iterrows()) or "not measured")
           + "; greedy: " + (", ".join(f"{r['engine']} {r['attention']} {r['mode']} {r['agreement']:.0%}" for _, r in agree.iterrows())
                             or "not measured") + "."))
for name, b in verdicts.items():
    if name in names and b.get("correct") and b.get("default_tok_s") is not None:
        qa.append((f"Should you force a different attention backend for {name} on this host?",
                   (f"Yes: `{b.get('best_reported') or b['best']}` was faster than the default beyond both 95% intervals, with correct output."
                    if b["change_supported"] else
                    f"No: the fastest correct start, `{b.get('best_reported') or b['best']}` ({b['best_tok_s']:,.1f} ± {b['best_ci95']:,.1f} "
                    f"tok/s), is not faster than the default (`{b['default_reported']}`, {b['default_tok_s']:,.1f} ± "
                    f"{b['default_ci95']:,.1f}) beyond both intervals; the data supports no change. Chapter 06 says the same.")))
Markdown(check_yourself_markdown(qa))

# %% [markdown]
# Next: [04. Tune NCCL](04_tune_nccl.html) — on a multi-GPU host, decode also waits for all-reduces.
