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
# # 06. Findings
#
# *Terms used here* (all of them: the glossary): **seed case**: the investigation this book began from (Kimi-K2.5 on 8x
# RTX PRO 6000: SGLang decoded slower than vLLM), its figures quoted from `data/reference/seed-case.json`, its claims
# never taken as findings; **hardware profile**: a GPU described from its datasheet (`data/hardware`, the `profile`
# parameter), for a GPU this host does not have; **decode-step profile**: a kernel trace of an engine's decode steps
# (its profiler), not a hardware profile; **slice**: a model with its card's architecture and full width but fewer
# layers (`servebook model build --layers N`), to fit one GPU; **MLA**: multi-head latent attention, the compressed-KV
# attention of DeepSeek-V3 and Kimi-K2.5; **gpu idle**: the time inside a profiled decode step when no kernel runs;
# **host-bound**: a step whose time goes mostly to that idle time (host work, launch gaps), not to kernels.
#
# This chapter measures nothing. It reads what chapters 01 to 05 recorded in this run's
# directory and states what to change. Every statement below is computed from those tables;
# where a chapter recorded nothing or failed, it says so instead of guessing.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means the newest run under runs/
host: str = "local"  # where the engines run: local, ssh://user@host[:port] or replay:RUN_DIR (this chapter works here)
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI
compare_with: str = ""  # other run dirs, comma separated
sbseed_profile: str = "rtx-pro-6000"  # the seed case's hardware profile: a what-if book on it opens with the seed's projection
sbseed_model: str = "kimi-k2.5"  # the seed case's model card

# %%
import pandas as pd
from IPython.display import Markdown, display

from servebook import findings as sbf
from servebook.results import RunStore, find_runs, show_corrections

if run_dir:
    store = RunStore.at(run_dir)
else:
    runs = list(find_runs("runs"))
    if not runs:
        raise SystemExit("no run found under runs/: run the book first (make book)")
    store = runs[-1]
manifest = store.manifest
print(f"run {store.path}")
print("tables recorded:", ", ".join(store.tables()) or "none")

# %% [markdown]
# ## This run

# %%
from servebook.profile.book import profiled_words   # a run of profiles only: its engines and slices (not the engine parameter)
from servebook.provenance import describe_revision

params = manifest.get("parameters", {})
versions = manifest.get("versions", {})
fp, _unrec = manifest.get("host_fingerprint", {}), "not in this run's manifest (a run of profiles only keeps its host in its profile rows: \"The host\" below)"
pd.DataFrame([
    {"what": "host", "value": f"{fp.get('hostname')} — {fp.get('cpu_count')} CPUs, {fp.get('memory_gib')} GiB, GPUs: {', '.join(fp.get('gpus') or []) or 'none'}" if fp else _unrec},
    {"what": "engine under study", "value": params.get("engine") or profiled_words(store, "engines") or _unrec},
    {"what": "model", "value": params.get("model") or profiled_words(store, "model") or _unrec},
    {"what": "versions of the kernel that executed this page (each engine's own: chapter 01's engines table)",
     "value": ", ".join(f"{k} {v}" for k, v in versions.items() if v) or _unrec},
    {"what": "code", "value": describe_revision(manifest.get("git_revision"))},
])

# %% [markdown]
# ## The verdict
# What is slow, by how much, and why - each statement says whether it is measured, read from an engine's code, or
# predicted - and what to run next. For the seed case (the what-if book on the RTX PRO 6000) the numbers are a
# projection of the profile run's H200 decode-step profiles (named below); for a live run they are its own (chapter 05).

# %%
from servebook import profile as sbprof
from servebook.profile import seed as sbseed
from servebook.profile import verdict as sbverdict

seed_rows, seed_fixes, seed_tabs = [], [], {}
if params.get("profile") == sbseed_profile and str(params.get("model", "")).startswith(sbseed_model):
    try:
        seed_rows, seed_fixes = sbseed.record_seed(store)
        seed_tabs = {name: store.rows(name) for name in sbseed.SEED_TABLES}
        display(Markdown(sbverdict.verdict_markdown(seed_tabs)))
    except sbseed.MissingReferenceProfiles as exc:   # no half verdict: what is missing, and which plan records it
        display(Markdown(f"**Verdict:** {exc}."))
elif sbprof.where_time_goes(store):
    display(Markdown("**Where each engine's time goes (measured, chapter 05's profiles):**\n\n" + sbprof.where_time_goes(store)))
else:
    display(Markdown("**Verdict:** no decode-step profile in this run (chapter 05 records one where the engine has a profiler "
                     "endpoint), so this chapter can say how fast each configuration was, not where its time went."))

# %% [markdown] tags=["not-for-profiles"]
# ## Root causes
# Why the engine chose what it chose, from chapter 02's what-if answers: the rule that wrote the choice
# (file:line in the engine's code), the engine's own answers to the hardware helpers on the path to it,
# and the backend the other side of a skipped branch would have written. A fallback counts as a root
# cause only where the engine's or kernel library's own code says the missed backend supports this GPU
# (vLLM: the backend class's `supports_compute_capability`); otherwise it is a *hypothesis*, and the record
# says which measurement on the real host settles it. Chapter 01's verdict on each helper answer is shown
# as context, not as evidence. Stored as the table `root_causes`; the launch to try first forces the missed backend.

# %% tags=["not-for-profiles"]
from servebook.selection.rootcause import record_root_causes

causes = record_root_causes(store)
for c in causes:
    print(f"[{c['decision']}] {c['cause']}\n")
    for h in c["helper_answers"]:
        print(f"    {h['helper']} -> {h['answer']!r}  ({h['verdict']}; defined at {h['defined_at']}: {h.get('definition') or '?'})")
    print()
if not causes:
    print("no what-if answer recorded in this run (chapter 02), so no root cause to state")
for pair in (store.rows("seed_comparison") if "seed_comparison" in store.tables() else [])[-1:]:
    print("Both engines on this GPU:", pair["verdict"])
    for h in pair["hypotheses"]:
        sides = "; ".join(f"{k}: {v}" for k, v in h.items() if k not in ("aspect", "measure_in"))
        print(f"  hypothesis to measure in chapter {h['measure_in']}: {h['aspect']} differs? {sides}")

# %%
launch_first = []
if params.get("profile") and (causes or seed_fixes):
    from servebook import plan

    facts = plan.host_facts(store, params.get("engine"), params.get("model"), params.get("profile"))
    # the seed verdict's first change (largest expected gain) leads; then the launches the root causes name
    launch_first = plan.seed_first(facts, seed_fixes) + plan.launch_first(facts, causes)
    store.replace("recommended_launch", launch_first, unchanged="keep")  # derived from this chapter's tables: computed again whole
    text = ("Try first, on the real host, in this order: the seed verdict's first change, then the launches the root causes "
            "name; this is not the ranking by expected gain, which `seed_fixes` holds and each recommended launch command below "
            "states. Then check each: chapter 04 for an NCCL "
            "setting, chapter 03 for a backend - the backend the engine reports, the decode-path agreement, the decode rate; a "
            "missed backend may not support this GPU:\n\n" +
            "\n\n".join(f"{r['why']}:\n\n```\n{r['launch']}\n```" for r in launch_first)) if launch_first else \
        "No fallback caused by a hardware helper: keep the engine's default and measure (chapters 03 and 05)."
    display(Markdown(text))

# %% [markdown]
# ## How to read this chapter
# Each statement below is computed by `servebook.findings` from the tables chapters 01-05 stored, and
# links to the cell of that chapter that shows the data. Where a measurement's 95% confidence
# interval overlaps another's, the statement says that **no change is supported**: a faster mean
# inside the noise is not a finding.

# %%
f = sbf.collect(store)
by_chapter = {}
for c in f.claims:
    by_chapter.setdefault(c.chapter, []).append(c)


def show(chapter):
    claims = by_chapter.get(chapter, [])
    return Markdown("\n".join(f"- {c.markdown()}" for c in claims) or f"_Chapter {chapter} recorded nothing in this run._")

# %% [markdown]
# ## The host

# %%
show("01")

# %% [markdown]
# The capability and the links are the two facts every later decision depends on: the engines
# branch on the first, all-reduce latency depends on the second.

# %% [markdown] tags=["not-for-profiles"]
# ## What each engine picks, and why

# %% tags=["not-for-profiles"]
sel = pd.DataFrame(f.selection)
display(sel[[c for c in ["case", "engine", "version", "model", "gpu", "backend", "method", "where", "kinds", "sites"] if c in sel]]
        if len(sel) else Markdown("_No selection recorded._"))
show("02")

# %% [markdown] tags=["not-for-profiles"]
# `where` is the line of the engine's code that wrote the choice; `kinds` says whether the conditions
# on the way were about the hardware, the model, an installed kernel library or a user flag.

# %% [markdown] tags=["not-for-profiles"]
# ## The fastest backend against the default

# %% tags=["not-for-profiles"]
bk = pd.DataFrame(f.backends)
display(bk[[c for c in ["engine", "tried", "correct", "server_starts", "best", "best_tok_s", "best_ci95", "default_reported", "default_tok_s",
                        "default_ci95", "change_supported"] if c in bk]] if len(bk) else Markdown("_No backend was forced._"))
show_corrections(store, "backends", "backends_preflight", "backends_not_run")  # rows changed after they were recorded
show("03")

# %% [markdown] tags=["not-for-profiles"]
# `tried` and `correct` count configurations (a backend, forced or the default, in one mode); `server_starts` counts the
# server starts they took. `change_supported` is true only when the fastest backend's interval lies wholly above the
# default's and its greedy output agreed with the default's.

# %% [markdown] tags=["not-for-profiles"]
# ## NCCL for decode-sized all-reduces

# %% tags=["not-for-profiles"]
show("04")

# %% [markdown] tags=["not-for-profiles"]
# The prediction multiplies the measured latency by the all-reduces a token makes in its layers (two per layer; a whole
# model's count, read in the engines' code, adds the embedding's all-reduce and the logits' all-gather: the what-if
# book's table `seed_collectives`);
# it becomes a finding only when an engine at `TP>1` is benchmarked with and without the setting.

# %% [markdown]
# ## Throughput and the roofline

# %%
tp = pd.DataFrame(f.throughput)
display(tp[[c for c in ["label", "single_tok_s", "single_ci95", "runs", "c1_tok_s", "peak_tok_s", "peak_c", "pct_of_roofline",
                        "roofline_tok_s"] if c in tp]] if len(tp) else Markdown("_No benchmark recorded._"))
show_corrections(store, "bench_summary", "bench_client_check")
show("05")

# %% [markdown]
# `pct_of_roofline` compares single-stream decode with the bandwidth bound: every token reads every
# active weight once, so it cannot beat bytes per token / memory bandwidth.

# %% [markdown] tags=["not-for-profiles"]
# ## The seed case in numbers

# %% tags=["not-for-profiles"]
# The seed's figures, tagged (servebook.stated): its profile's compute capability and its tensor-parallel size
from servebook.profiles import load_profile
from servebook.stated import q, seed_case

_seed = seed_case()
_tp = q("seed_tp", _seed["tp"], "d")
Markdown("Shown in the what-if book of the seed case. Each category of the H200 profiles (both engines' Triton MLA backends, the "
         f"kernel they run on capability {q('profile_capability', load_profile(_seed['profile'])['capability'], of=_seed['profile'])}) "
         f"carried to Kimi-K2.5 on {_tp}x RTX PRO 6000 at TP={_tp} (`servebook.profile.projection`): weights-bound kernels (MoE "
         "experts, dense GEMMs) by the bandwidth ratio and each rank's share of the bytes, never below the smallest such kernel "
         "measured; attention, routing, norms and sampling kept as measured (latency-bound at batch 1); host time by the one "
         "host rule (the longer of the host's time and the GPU's); communication = the collectives per token read in each "
         "engine's code (the one count chapters 04, 05 and 06 state) x that engine's all-reduce latency, a range over "
         f"published {_tp}-rank PCIe figures chosen by the NCCL environment the seed launched it with "
         "(`data/reference/allreduce-pcie-published.json`). Every row says its source and rule; the row \"host beyond the GPU\" is "
         "what the host's time per step adds beyond the projected GPU time (not chapter 05's \"gpu idle\", the time inside a "
         "profiled step when no kernel runs).")

# %% tags=["not-for-profiles"]
if seed_rows:
    display(sbseed.projection_frame(seed_rows))
    display(pd.DataFrame(seed_tabs["seed_range"])[[c for c in ["who", "point_ms", "low_ms", "high_ms", "point_tok_s", "low_tok_s",
                                                               "high_tok_s", "seed_tok_s", "seed_ms", "seed_beyond_ms",
                                                               "seed_gap_ms", "seed_inside"]
                                                   if c in pd.DataFrame(seed_tabs["seed_range"])]].round(2))
else:
    print("not the seed case's what-if book: no projection here")

# %% [markdown] tags=["not-for-profiles"]
# ### The evidence: the profile run's decode-step profiles
# The projection's inputs as the profile run recorded them (`servebook.profile.seed.REFERENCE_PROFILE_RUN`, named below;
# the rows the projection uses are shown here; its own book, of profiles only, has chapters 05 and 06): the slices each engine's projection subtracts (one MoE layer =
# the deeper slice minus the shallower one over the MoE layers between them, both taken on one machine), their kernel time per decode step by category ("gpu idle": the time inside a profiled step
# when no kernel runs), the whole-model checks of the host rule, and each slice's longest kernels in its trace excerpt.

# %% tags=["not-for-profiles"]
from servebook.profile.evidence import reference_evidence

if seed_rows:
    _ev = reference_evidence()
    print(f"profile run: data/runs/{_ev['run'].rstrip('/').rsplit('/', 1)[-1]}")
    display(pd.DataFrame(_ev["slices"]).round(3))
    display(pd.DataFrame(_ev["breakdown"]).pivot_table(index="category", columns="slice", values="ms_per_step").round(3))
    display(pd.DataFrame(_ev["checks"]).round(2))
    display(pd.DataFrame(_ev["kernels"]))
    print("\n".join(_ev["notes"]))

# %% [markdown] tags=["not-for-profiles"]
# The assumptions, each moved alone to its end (the others central): how many ms per token it adds to (or takes from) each
# engine and the gap (SGLang minus vLLM). The range above is all of them together. Table `seed_assumptions`.

# %% tags=["not-for-profiles"]
pd.DataFrame(seed_tabs["seed_assumptions"])[["assumption", "end", "sglang_ms", "vllm_ms", "gap_ms", "basis"]].round(3) if seed_rows else None

# %% [markdown] tags=["not-for-profiles"]
# Communication per engine (table `seed_comm`): the collectives per token (the sites in table `seed_collectives`, read in each
# engine's code), each engine's all-reduce latency range by the NCCL environment it ran with in the seed, the latency at which
# the projection meets the seed's rate, and the latency the seed's own all-reduce share implies.

# %% tags=["not-for-profiles"]
if seed_rows:
    display(pd.DataFrame(seed_tabs["seed_comm"])[[c for c in ["engine", "env", "collectives", "low_us", "central_us", "high_us",
                                                              "low_ms", "central_ms", "high_ms", "matching_us", "implied_us",
                                                              "published_high_us"] if c in pd.DataFrame(seed_tabs["seed_comm"])]].round(2))
    display(pd.DataFrame(seed_tabs["seed_collectives"])[["engine", "site", "kind", "per", "count", "message_bytes", "where"]])

# %% [markdown] tags=["not-for-profiles"]
# Each engine's projected rate against one all-reduce's latency (every other part at its central value), the seed's two rates
# marked: where each engine's line crosses its seed rate is the latency at which the projection meets it (table
# `seed_latency_sweep`).

# %% tags=["not-for-profiles"]
if seed_rows:
    sbseed.plot_latency_sweep(seed_tabs, _seed)

# %% [markdown] tags=["not-for-profiles"]
# The Triton MLA decode kernel's launch on the seed's GPUs against the H200, read in each version's code (table
# `seed_attention_12`): block sizes, warps, stages, and how the KV split count is decided.

# %% tags=["not-for-profiles"]
pd.DataFrame(seed_tabs["seed_attention_12"])[["engine", "version", "role", "block_n", "block_h", "block_dmodel", "block_dpe",
                                              "num_warps", "num_stages", "capability_key", "split_cap_9_0", "split_cap_12_0",
                                              "splits", "where"]] if seed_rows else None

# %% [markdown] tags=["not-for-profiles"]
# Candidate changes, ranked by their expected gain (the middle of each change's range; a flag or environment change before one
# that needs another version at equal gain); each is a prediction with the command that checks it on the real host.

# %% tags=["not-for-profiles"]
pd.DataFrame(seed_fixes)[[c for c in ["engine", "change", "expected_gain_ms", "gain_low_ms", "gain_high_ms", "gain_tok_s", "label",
                                      "kind", "check_command", "range_basis", "note"] if c in pd.DataFrame(seed_fixes)]].round(2) if seed_fixes else "no candidate changes: not the seed case"

# %% [markdown] tags=["not-for-profiles"]
# ## Recommended launch commands

# %% tags=["not-for-profiles"]
Markdown("\n\n".join(f"**{lc['engine']}**\n\n```\n{lc['command']}\n```\n\n" + "\n".join(f"- {w}" for w in lc["why"])
                     for lc in f.launch) or "No engine was studied in this run, so there is nothing to recommend.")

# %% tags=["not-for-profiles"]
Markdown(f"This is a what-if run on the `{params['profile']}` profile: nothing was measured, so a launch above is a hypothesis "
         "to try first on the real host (it comes from the root causes above), not a measured recommendation; chapter 03 run "
         "there settles it." if params.get("profile") else
         "A flag or variable appears only where this run measured that it helps; otherwise the engine's own choice stands. "
         "Add your usual `--host`, `--port` and model arguments.")

# %% [markdown]
# ## Failures recorded

# %%
pd.DataFrame(f.failures) if f.failures else Markdown("No step failed in this run.")

# %% [markdown]
# A failed measurement is kept as a finding with its reason; the chapters went on without it.

# %% [markdown]
# ## Comparison with other runs
# With `compare_with` set (run directories, comma separated), this run and those stand side by side:
# capability, selected backends, best NCCL setting, tok/s at C=1 and at peak, with deltas against
# this run. A quantity a run did not record shows as `missing`. A delta is a verdict only where both runs measured
# the same way, over server starts; otherwise its row lists what differs (workload, weights, warm-ups, sweep levels,
# host). The same table on the command line: `servebook compare RUN_A RUN_B ...`.

# %%
from servebook.stated import q

others = [p.strip() for p in compare_with.split(",") if p.strip()]
across = []  # single stream of the same engine in another run: a verdict only over server starts, measured the same way
if others:
    comparison = sbf.compare_runs([str(store.path), *others], name="compare_with")
    display(Markdown(sbf.compare_markdown(comparison)))
    across = sbf.across_runs(store, f.throughput, others)
    display(Markdown("\n".join(f"- {a['text']}." for a in across) or "No other run measured the same engine single stream."))
else:
    print("compare_with is empty: no other run to compare with (servebook book ... -p compare_with=DIR1,DIR2)")

# %% [markdown]
# ## What we found

# %%
from servebook.stated import say_allreduce, say_backends, say_selection, say_throughput

found = ["**What each engine picks** (chapter 02)", ""] + (say_selection(store) or ["- No backend selection was recorded in this run."])
found += ["", "**The fastest backend against the default** (chapter 03)", ""]
found += ([f"- {b['engine']}: {say_backends(b)}" for b in f.backends if b.get("correct") and b.get("default_tok_s") is not None]
          or ["- No backend was forced in this run, or none served correct output."])
found += ["", "**All-reduce** (chapter 04)", "", f"- {say_allreduce(f.nccl)}"]
found += ["", "**Throughput and the roofline** (chapter 05)", ""]
found += [line for t in f.throughput for line in say_throughput(t)] or [f"- {c.markdown()}" for c in by_chapter.get("05", [])[-1:]]
found += ["", "**What to run**", ""]
found += [f"- {lc['engine']}: `{lc['command']}` — " + "; ".join(lc["why"]) + "." for lc in f.launch if lc.get("command")]
for a in across:
    if a["faster"] and a["extra"]:
        cmd = next((lc["command"] for lc in f.launch if lc["engine"] == a["engine"] and lc.get("command")), a["engine"])
        found.append(f"- {a['engine']} with `{a['extra']}` (measured in `{a['run']}`, not in this run): `{cmd} {a['extra']}` — "
                     f"{a['verdict']} against this run's `{a['base']}`; confirm it on this host with chapter 05 "
                     f"(`-p engine_args=\"{a['extra']}\"`).")
if f.failures:
    found.append(f"- {q('failures_recorded', sum(x['times'] for x in f.failures), 'd')} recorded failures "
                 f"({q('failures_distinct', len(f.failures), 'd')} distinct), listed above; a failed measurement is a finding, not a result.")
Markdown("\n".join(found))

# %% [markdown]
# ## Check yourself

# %%
qa = sbf.check_yourself(store, "06")
if params.get("profile"):  # a what-if run measured nothing: its questions are about what to try and what settles it
    qa = sbf.whatif_questions(params["profile"], launch_first, causes)
Markdown(sbf.check_yourself_markdown(qa))
