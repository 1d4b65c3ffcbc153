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
# This chapter measures nothing. It reads what chapters 01 to 05 recorded in this run's
# directory and states what to change. Every statement below is computed from those tables;
# where a chapter recorded nothing or failed, it says so instead of guessing.

# %% tags=["parameters"]
run_dir: str = ""  # directory of this run, set by servebook book; empty means the newest run under runs/
host: str = "local"  # where the engines run: local
engine: str = "transformers"  # transformers, sglang or vllm (a version may be pinned, see README)
model: str = "embedded"  # embedded, a model card in data/models (e.g. kimi-k2.5), or a model directory
profile: str = ""  # a hardware profile in data/hardware for what-if; empty means this host
smoke: bool = False  # small workloads for tests and CI

# %%
import pandas as pd
from IPython.display import Markdown

from servebook.results import RunStore, find_runs

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
params = manifest.get("parameters", {})
versions = manifest.get("versions", {})
fp = manifest.get("host_fingerprint", {})
pd.DataFrame([
    {"what": "host", "value": f"{fp.get('hostname')} — {fp.get('cpu_count')} CPUs, {fp.get('memory_gib')} GiB, GPUs: {', '.join(fp.get('gpus') or []) or 'none'}"},
    {"what": "engine under study", "value": params.get("engine")},
    {"what": "model", "value": params.get("model")},
    {"what": "versions", "value": ", ".join(f"{k} {v}" for k, v in versions.items() if v)},
    {"what": "git revision", "value": manifest.get("git_revision")},
])

# %% [markdown]
# ## Root causes
# Why the engine chose what it chose, from chapter 02's what-if answers: the rule that wrote the choice
# (file:line in the engine's code), the engine's own answers to the hardware helpers on the path to it,
# and the backend the other side of a skipped branch would have written. A fallback counts as a root
# cause when a helper's answer keeps this GPU out of a path its family should take (judged by chapter
# 01's rules). Stored as the table `root_causes`; the launch to try first forces the missed backend.

# %%
from servebook.selection.rootcause import record_root_causes

causes = record_root_causes(store)
for c in causes:
    print(f"[{c['decision']}] {c['cause']}\n")
    for h in c["helper_answers"]:
        print(f"    {h['helper']} -> {h['answer']!r}  ({h['verdict']}; defined at {h['defined_at']}: {h.get('definition') or '?'})")
    print()
if not causes:
    print("no what-if answer recorded in this run (chapter 02), so no root cause to state")

# %%
launch_first = []
if params.get("profile") and causes:
    from servebook import plan

    facts = plan.host_facts(store, params.get("engine"), params.get("model"), params.get("profile"))
    for c in causes:
        if c["decision"] == "fallback" and c["engine"] == facts["engine"].split("==")[0] and c["gpu"] == facts["profile"]:
            for m in c["missed"]:
                for backend in m["would_write"]:
                    launch_first.append({"why": f"{c['engine']} {c['version']}: {m['helper']} kept `{backend}` ({', '.join(m['at'])}) from this GPU",
                                         "launch": plan.recommended_launch(facts, backend)})
    for row in launch_first:
        if not store.done("recommended_launch", launch=row["launch"]):
            store.append("recommended_launch", row)
    text = ("Try first, on the real host (then check it with chapter 03: the backend the engine reports, greedy agreement, "
            "decode rate; a missed backend may not support this GPU):\n\n" +
            "\n\n".join(f"{r['why']}:\n\n```\n{r['launch']}\n```" for r in launch_first)) if launch_first else \
        "No fallback caused by a hardware helper: keep the engine's default and measure (chapters 03 and 05)."
    display(Markdown(text))

# %% [markdown]
# ## Chapter by chapter

# %%
def table(name: str) -> pd.DataFrame:
    return store.table(name)

findings = []

backends_t = table("backends")
if len(backends_t):
    ok = backends_t[backends_t["outcome"] == "ok"]
    if len(ok):
        best = ok.sort_values("decode_tok_s", ascending=False).iloc[0]
        auto = ok[ok["attention"] == "auto"]
        auto_rate = float(auto.iloc[0]["decode_tok_s"]) if len(auto) else None
        gain = f" ({best['decode_tok_s'] / auto_rate - 1:+.0%} vs the engine's default)" if auto_rate else ""
        ci = ok["decode_tok_s_ci95"].fillna(0) if "decode_tok_s_ci95" in ok else pd.Series(0, index=ok.index)
        ties = [r["attention"] for i, r in ok.iterrows() if i != best.name
                and r["decode_tok_s"] + ci[i] >= best["decode_tok_s"] - ci[best.name]]
        noise = f"; not distinguishable from {', '.join(ties)} (95% intervals overlap)" if ties else ""
        findings.append({"chapter": "03", "finding": f"fastest correct attention backend for {best['engine']}: {best['attention']} "
                         f"at {best['decode_tok_s']:.1f} tok/s{gain}{noise}",
                         "launch": best.get("launch") if not ties else None})
    for _, r in backends_t[backends_t["outcome"] != "ok"].iterrows():
        findings.append({"chapter": "03", "finding": f"{r['engine']} {r['attention']}: {r['outcome']} ({r.get('error')})", "launch": None})
else:
    findings.append({"chapter": "03", "finding": "no backend sweep recorded in this run", "launch": None})

ar = table("allreduce")
if len(ar):
    one = ar.sort_values("bytes").iloc[0]
    findings.append({"chapter": "04", "finding": f"smallest decode all-reduce ({int(one['bytes'])} B): {one['us_median']:.1f} us "
                     f"({one['backend']}, {one['mode']}, env {one['env']})", "launch": None})
else:
    findings.append({"chapter": "04", "finding": "no all-reduce measurement recorded in this run", "launch": None})

summary = table("bench_summary")
if len(summary):
    for _, r in summary.iterrows():
        rate = r.get("decode_tok_s_mean", r.get("decode_tok_s"))
        findings.append({"chapter": "05", "finding": f"{r.get('engine')} single stream ({r.get('attention', 'auto')}): "
                         f"{rate} tok/s at concurrency {r.get('concurrency', 1)}", "launch": None})
else:
    findings.append({"chapter": "05", "finding": "no benchmark summary recorded in this run", "launch": None})

failures = table("failures")
if len(failures):  # one line per distinct failure, with how often it happened
    grouped = failures.groupby(["step", "error"], sort=False).size().reset_index(name="times")
    for _, r in grouped.iterrows():
        times = f" ({r['times']} times)" if r["times"] > 1 else ""
        findings.append({"chapter": "-", "finding": f"failed step: {r['step']}: {r['error']}{times}", "launch": None})
findings_df = pd.DataFrame(findings)
findings_df

# %% [markdown]
# ## What to change

# %%
launch_lines = [f for f in findings if f.get("launch")]
if launch_lines:
    best = launch_lines[0]
    text = f"Start the engine with the fastest correct backend found in chapter 03:\n\n```\n{best['launch']}\n```"
else:
    text = ("No launch change is supported by this run's data: either nothing was measured, or the "
            "backends' measured differences were inside their confidence intervals. Keep the engine's default.")
Markdown(text)

# %% [markdown]
# ## What we found

# %%
chapters_t = table("chapters")
failed_chapters = chapters_t[chapters_t["status"] != "ok"].to_dict("records") if len(chapters_t) else []
lines = [f"- {len(findings)} findings from {len(store.tables())} recorded tables."]
if failed_chapters:
    lines.append("- Chapters that failed in this run: " + ", ".join(c["chapter"] for c in failed_chapters) + ".")
Markdown("\n".join(lines))
