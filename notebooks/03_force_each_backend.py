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
# *Terms used here* (all of them: the glossary): **seed case**: the investigation this book began from (Kimi-K2.5 on 8x
# RTX PRO 6000: SGLang decoded slower than vLLM), its figures quoted from `data/reference/seed-case.json`, its claims
# never taken as findings; **hardware profile**: a GPU described from its datasheet (`data/hardware`, the `profile`
# parameter), for a GPU this host does not have; **MLA**: multi-head latent attention, the compressed-KV attention of
# DeepSeek-V3 and Kimi-K2.5; **CUDA graphs / eager**: a decode step replayed from captured CUDA graphs (the engines'
# default) or launched kernel by kernel; **teacher-forced**: the default backend's output fed back to another backend as
# its input, and that backend's top next-token choice compared with the default's at every position; **decode-step
# profile**: a kernel trace of an engine's decode steps (its profiler), not a hardware profile; **slice**: a model with
# its card's architecture and full width but fewer layers (`servebook model build --layers N`), to fit one GPU.
#
# Chapter 02 showed which backend the engine *picks*. Picking is not running: a forced flag
# can be silently overridden, a kernel can refuse this GPU, and a fast backend can give wrong
# tokens. The seed case *suspected* SGLang's triton fallback and tried `--attention-backend flashinfer`
# (the seed's own account, not a finding of this book). Any such change has to be checked three ways before it
# counts: the engine must *report* the backend it loaded, its output must agree with the default's on the decode path,
# and it must be faster beyond the noise. This book's own reading (chapter 02) is that both engines fall back to a
# Triton MLA kernel on capability 12.0, so the backend choice alone does not explain the seed's gap; chapter 06 says
# what the decode-step profiles predict of the kernels' share in it.
#
# Here every candidate is served on 127.0.0.1 and measured in turn, and stopped (with its whole process group) right
# after its turn. On a GPU host each starts only after the one before has stopped. On a host without a GPU, where
# several small servers fit at once, the servers start together and are measured one at a time once all are ready
# (an idle ready server takes next to no CPU; each row's `started_with` names the others), so no start overlaps a
# measurement.

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
# `profile` (a hardware profile) is set, so there is no such GPU here and nothing below is measured. What chapter 03 measures on
# the real host: each attention backend the engine's own code accepts on that GPU, forced in turn with its own flag,
# checked three ways (the backend the engine reports loading, its decode-path token ids against the default's, decode
# rate). The commands are the engine's own launch lines for the profiled host, recorded in the table
# `plan_commands`, ready to paste there; the backends left out, and why, in `plan_left_out`.

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
from servebook.backends.report import whatif_found, whatif_questions

Markdown(whatif_found(store, facts, cmds))

# %% [markdown] tags=["whatif"]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %% tags=["whatif"]
from servebook.findings import check_yourself_markdown

Markdown(check_yourself_markdown(whatif_questions(store, facts, cmds)))

# %% [markdown] tags=["whatif"]
# Next: [04. Tune NCCL](04_tune_nccl.html) — the communication floor for this hardware profile.

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

    from servebook.engines.envs import parse_engine_spec

    engines = [SimpleNamespace(name=parse_engine_spec(spec)[0]) for spec in specs]
    print(f"measure=False: nothing is started or asked; the rows of {', '.join(e.name for e in engines)} as recorded")

# %% [markdown]
# ## The candidates
# Each engine's own list of valid values for its attention flag (read from its code, not typed in here).
# Before any server starts, its command line is checked against the installed engine's own argument
# parser (SGLang's `ServerArgs.add_cli_args`, vLLM's `make_arg_parser`, built in the engine's interpreter):
# a flag or value this version does not know is recorded as "rejected", naming the version.

# %%
from servebook.backends.report import candidates_for
from servebook.backends.figures import not_run

plans, skipped = {}, []
for eng in engines if measure else []:
    plans[eng.name], sk = candidates_for(eng, backends, smoke=smoke, host=on_host)
    skipped += sk
for s in skipped:
    if not store.done("backends_not_run", engine=s["engine"], attention=s["attention"]):
        store.append("backends_not_run", s)
pd.DataFrame([{"engine": e.name, **x} for e in engines for x in not_run(store, e.name)])

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


# %%
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
from IPython.display import Markdown, display

from servebook.backends.report import TABLE_COLUMNS, flags_note, starts_table

names = [e.name for e in engines]
table = starts_table(store, names)
display(Markdown(flags_note(" ".join(table["launch"].dropna().astype(str)).split() if "launch" in table else [])))
table[[c for c in TABLE_COLUMNS if c in table]]

# %% [markdown]
# Each row is one server start (or a refusal before one). `reported` is what the engine itself said it loaded
# (`reported_source`: its server-info endpoint or the log line it came from). `decode_agreement` is the check of the
# kernel that was forced, on the decode path, by token ids (`servebook.backends.agreement`; how it ran, below).
# `tf_top1_agreement` is teacher-forced on the prefill path only: the default's completions, prompt included, sent back
# as text and scored in one forward pass (`tf_logprob_mad`: the mean |log-prob difference| there). `agreement` is the
# share of greedy tokens equal to the default's. `decode_tok_s` and its 95% half-width are taken over the per-start
# means (`start_rates`, one per server start) where the backend ran `starts` times; `ci_over` says what the interval
# covers. The rate moves more between server starts than within one, so only intervals over starts decide "faster".

# %%
from IPython.display import Markdown

from servebook.backends.report import describe

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
from servebook.backends.report import plot_rates

plot_rates(table);

# %% [markdown]
# ## What we found

# %%
from servebook.backends.report import found_lines

Markdown(found_lines(store, names, table))

# %% [markdown]
# ## Check yourself
# Questions a new engineer should now be able to answer; each answer is computed from this run's tables.

# %%
from servebook.backends.report import questions
from servebook.findings import check_yourself_markdown

Markdown(check_yourself_markdown(questions(store, names, table)))

# %% [markdown]
# Next: [04. Tune NCCL](04_tune_nccl.html) — on a multi-GPU host, decode also waits for all-reduces.
