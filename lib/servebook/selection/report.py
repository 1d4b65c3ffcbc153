"""Chapter 02's page: the printed answers, the matrix tables and heatmap, and the sentences, built from the run's tables
with every stated number tagged (``servebook.stated.q``; the figures come from ``servebook.selection.figures``).

    show(answer); row = selection_row(answer, "seed")
    print_decode_path(rows); tables = matrix_tables(store, matrices, profiles); plot_matrix(tables, models)
    Markdown(found_lines(store, seed_pair, matrices, diff)); questions(store)

``UNTAGGED`` lists what the page states in prose without a tag, and why it cannot carry one.
"""

from __future__ import annotations

from ..stated import q
from . import figures
from ..profile.seed import profiles_sentence  # noqa: F401 - chapter 01 calls it from here

__all__ = ["UNTAGGED", "SELECTION_FIELDS", "show", "selection_row", "append_once", "ask", "print_seed_pair", "print_decode_path", "matrix_tables", "matrix_caption", "plot_matrix",
           "print_disagreements", "print_diff", "found_lines", "questions", "sites_sentence", "profiles_sentence"]

UNTAGGED = {
    "engine versions, file:line locations and capabilities": "identifiers read from the engine's code and the hardware "
    "profile, not quantities (the backend each resolution picks is tagged: selected_backend)",
    "the seed case's comparison verdict (seed_comparison)": "written by servebook.selection.compare from the two what-if "
    "answers; it names backends and lines, no measured number",
}

SELECTION_FIELDS = ("engine", "version", "model", "architecture", "mla", "gpu", "capability", "method", "attention_backend",
                    "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend", "decided_by", "conditions",
                    "logs", "assumptions", "reason", "helper_answers", "alternatives", "resolved", "decode_path",
                    "candidates_checked")


def selection_row(ans: dict, case: str) -> dict:
    """The row table ``selection`` keeps of one what-if answer."""
    return {k: ans.get(k) for k in SELECTION_FIELDS} | {"case": case}


def append_once(store, table: str, row: dict, *key: str) -> None:
    """Append ``row`` unless an equal row (on ``key``) is already recorded: executing chapter 02 again on a recorded run
    (``servebook html --refresh 02``) must not state each answer twice."""
    if not store.done(table, **{k: row.get(k) for k in key}):
        store.append(table, row)


def _record_answer(store, row: dict) -> None:
    """Append a what-if answer to table ``selection`` unless the latest answer recorded for the same case and question
    (engine, version, model, GPU) is this one: executing chapter 02 again states each answer once, and an answer that
    returns after another (a rebuilt environment answering dynamically again) is recorded again, so the latest row is
    the latest answer (``answers.standing_answers``)."""
    import json

    same = store.find("selection", **{k: row.get(k) for k in ("case", "engine", "version", "model", "gpu")})
    said = lambda r: json.dumps([r.get(k) for k in ("method", "attention_backend", "decided_by")], sort_keys=True, default=str)  # noqa: E731
    if not same or said(same[-1]) != said(row):
        store.append("selection", row)


def ask(store, spec: str, model: str, case: str, step: str, gpu: str | None = None, **kw) -> dict | None:
    """One what-if (``servebook.selection.whatif``), recorded in table ``selection`` once and printed; a failure is
    recorded under ``step`` and printed, and gives None."""
    from ..errors import ServebookError
    from .whatif import whatif

    try:
        ans = whatif(spec, model, gpu=gpu, **kw)
    except ServebookError as exc:
        store.record_failure(step, exc, engine=spec, model=model, gpu=gpu)
        from ..stated.text import marked

        print(f"{spec}: what-if failed:", marked(str(exc)))   # a message cut before it reached here says so
        return None
    _record_answer(store, selection_row(ans, case))
    show(ans)
    return ans


def print_seed_pair(pair: dict) -> None:
    """The seed comparison's verdict, then each other decode-path setting and the chapter that measures it."""
    print("\n" + pair["verdict"])
    for h in pair["hypotheses"]:
        sides = "; ".join(f"{k}: {v}" for k, v in h.items() if k not in ("aspect", "measure_in"))
        print(f"  {h['aspect']:<20} {sides}  -> measure in chapter {h['measure_in']}")


def show(ans: dict) -> None:
    """Print one what-if answer: the backend, the line that decided, the conditions on the way, the assumptions."""
    print(f"{ans['engine']} {ans['version']} | {ans['model']} on {ans['gpu']} (capability {ans['capability'] or 'this host'}): "
          f"attention = {ans['attention_backend']} (moe/experts = {ans.get('moe_runner_backend')}), method = {ans['method']}")
    if ans.get("decided_by"):
        d = ans["decided_by"]
        print(f"  decided by {d['where']} in {d['function']}: {d['target']} = {d['value']}")
    for c in ans.get("conditions", []):
        print(f"    because {c['text']}  [{', '.join(c['kinds'])}]")
    for line in ans.get("logs", [])[:6]:
        print(f"  engine log: {line}")
    if ans["method"] != "dynamic":
        print("  static only:", ans.get("reason"))
    a = ans["assumptions"]
    print(f"  assumptions: kernel libs {a['kernel_libs'] or 'this host as it is'}; CUDA {a.get('cuda_version')} ({a.get('cuda_source')})")


def sites_sentence(store, engine: str, version: str, n_sites: int) -> str:
    """How many lines, assignments and files of a version's code write the attention backend (all from the table)."""
    of = f"{engine} {version}"
    files = figures.site_files(store).get(of)
    return (f"{of}: {q('selection_sites', n_sites, 'd', of=of)} lines of its code, in "
            f"{q('selection_site_files', files, 'd', of=of)} file{'' if files == 1 else 's'}, write the attention backend "
            f"({q('selection_assignments', figures.assignments(store).get(of), 'd', of=of)} assignments: a line that sets two "
            "targets, or sets one twice, counts once; chapter 06 counts the same way).")


def print_decode_path(rows: list[dict]) -> None:
    """Setting by setting, each engine version's choice, where its code makes it, and the condition."""
    import pandas as pd

    from ..stated.text import clip
    from .decode_path import SETTINGS

    dp = pd.DataFrame(rows)
    dp["engine"] = dp["engine"] + " " + dp["version"].astype(str)
    dp["setting"] = pd.Categorical(dp["setting"], [*SETTINGS, "(all)"], ordered=True)
    for setting, g in dp.sort_values("setting", kind="stable").groupby("setting", observed=True):
        print(f"\n{setting}")
        for r in g.itertuples():
            print(f"  {r.engine:<14} [{r.source}] {r.choice}"
                  + (f"\n{'':17}at {r.where}" if isinstance(r.where, str) else "")
                  + (f"\n{'':17}condition: {clip(r.condition, 300)}" if isinstance(r.condition, str) and r.condition else "")
                  + (f"\n{'':17}({r.why})" if isinstance(r.why, str) and r.source != "run" else ""))


def matrix_tables(store, specs, profiles: list[str]) -> dict:
    """Per engine version: attention backend by model x GPU, read back from table ``selection_matrix`` (printed too)."""
    tables = {}
    df_all = store.table("selection_matrix")
    for spec in specs:
        df = df_all[df_all["engine_spec"] == spec].copy()
        df["cell"] = [f"{b}" if m == "dynamic" else ("(static)" if m == "static" else "(error)")
                      for b, m in zip(df["attention_backend"], df["method"])]
        tables[spec] = df.pivot_table(index="model", columns="gpu", values="cell", aggfunc="last").reindex(columns=profiles)
        print("\n" + matrix_caption(spec, [c for c in tables[spec].values.ravel() if isinstance(c, str)]))
        print(tables[spec].to_string())
        print(df[["gpu", "model", "attention_backend", "moe_runner_backend", "decided_by"]].to_string(index=False))
    return tables


def matrix_caption(spec: str, cells: list[str]) -> str:
    """The caption over one engine version's matrix: what its cells are, counted. A cell is the backend the engine's own
    resolution code returned when run here (dynamic), or "(static)" where that code did not decide it, or "(error)"
    where the what-if failed (``matrix_tables`` writes them)."""
    n, static, error = len(cells), cells.count("(static)"), cells.count("(error)")
    parts = [f"{n - static - error} of {n} cells the backend the engine's own selection code returned, run here with the GPU "
             "faked (dynamic)"]
    if static:
        parts.append(f"{static} \"(static)\": that code did not decide the cell, only the reading of its source covers it")
    if error:
        parts.append(f"{error} \"(error)\": the what-if failed (table failures)")
    return f"{spec}: attention backend by model x GPU; " + "; ".join(parts)


def plot_matrix(tables: dict, n_models: int):
    """One heatmap per engine version; the same colour is the same backend in every panel."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    if not tables:
        return None
    fig, axes = plt.subplots(1, len(tables), figsize=(5 * len(tables), 0.6 * n_models + 1.5), squeeze=False)
    labels = sorted({str(v) for t in tables.values() for v in t.values.ravel()})
    codes = {b: i for i, b in enumerate(labels)}
    for ax, (spec, t) in zip(axes[0], tables.items()):
        sns.heatmap(t.map(lambda v: codes[str(v)]), annot=t.astype(str), fmt="", cbar=False, cmap="tab10",
                    vmin=0, vmax=max(9, len(labels) - 1), ax=ax)
        ax.set_title(spec)
    fig.tight_layout()
    return fig


def print_disagreements(dis: list[dict]) -> None:
    """Each disagreement between engines or versions, with both lines that wrote the backends."""
    for d in dis:
        if d["kind"] == "differs":
            print(f"{d['model']} on {d['gpu']} ({d['between']}): {d['a']} `{d['a_backend']}` ({d['a_decided_by']}) vs "
                  f"{d['b']} `{d['b_backend']}` ({d['b_decided_by']})")
    print(f"{sum(d['kind'] == 'differs' for d in dis)} disagreements, {sum(d['kind'] != 'differs' for d in dis)} pairs not "
          "comparable (a side resolved only statically or failed)")


def print_diff(diff: list[dict], a: str, b: str) -> None:
    """Each cell that changed between two versions, with the lines that wrote it."""
    for d in diff:
        where = (f" (attention written at {d['a_decided_by']} -> {d['b_decided_by']})" if "attention_backend" in d["changed"]
                 else f" (attention unchanged; its sites: {d['a_decided_by']} -> {d['b_decided_by']})")
        print(f"{d['model']} on {d['gpu']}: {a} {d['a']} -> {b} {d['b']}{where}")
    print(f"{len(diff)} cells differ between {a} and {b} (cells both versions resolved dynamically)")


def _because(r: dict) -> str:
    conds = r.get("because") or [c.get("text") for c in (r.get("conditions") or []) if c.get("text")]
    return "; ".join(f"`{c}`" for c in conds) if conds else ""


def found_lines(store, seed_pair: dict | None, matrices: dict, diff: list[dict]) -> str:
    """'What we found': every answer the run recorded (chapter 06's lines), the seed comparison, the matrix's MLA rows
    with the condition that decided each (not only its file:line), and what changed between the versions."""
    from ..stated import say_selection

    found = say_selection(store)
    if seed_pair:
        from ..stated import seed_case

        found.append(f"- Seed case, both engines (tensor parallel {q('seed_tp', seed_case()['tp'], 'd')}): {seed_pair['verdict']} "
                     "Other decode-path settings each "
                     "engine's code fixes, to measure: "
                     + "; ".join(f"{h['aspect']} (chapter {h['measure_in']})" for h in seed_pair["hypotheses"]) + ".")
    n_dis = figures.disagreement_count(store).get(None)
    if matrices and n_dis is not None:
        found.append(f"- {q('matrix_disagreements', n_dis, 'd')} engine/version disagreements in the matrix "
                     "(table `selection_disagreements`).")
    for spec, rows in matrices.items():
        for r in rows:
            if r.get("mla") and r.get("method") == "dynamic":
                why = _because(r)
                found.append(f"- {spec}: {r['model']} on {r['gpu']} (capability {r.get('capability')}) -> `{r['attention_backend']}` "
                             f"(decided at `{r.get('decided_by')}`" + (f", because {why})" if why else ")"))
    for d in diff:
        for field in d["changed"]:
            found.append(f"- {d['model']} on {d['gpu']}: `{field}` changes from `{d['a'][field]}` ({d['a_version']}) to "
                         f"`{d['b'][field]}` ({d['b_version']})"
                         + (f", written at `{d['a_decided_by']}` and `{d['b_decided_by']}`." if field == "attention_backend" else "."))
    if not matrices:
        found.append("- No SGLang/vLLM environment was cached, so the MLA x GPU matrix was not computed here "
                     "(`servebook engines add sglang==0.5.9`).")
    n = figures.failure_count(store)[None]
    found.append(f"- {q('failed_steps', n, 'd')} step(s) of this run failed and were recorded in "
                 f"{store.table_path('failures').name}." if n else "- No step failed.")
    return "\n".join(found)


def questions(store) -> list[tuple[str, str]]:
    """Chapter 02's 'Check yourself': the pick of the case this book studies (this host, or the profile it fakes), the
    kind of condition that decides it, and the seed case's rule. A case is stated as missing only when no answer for it
    was recorded."""
    from ..findings.tables import selection
    from ..stated import selection_of
    from ..standing import standing_answers

    standing = standing_answers(store)  # an answer a later one superseded is not stated
    said = {(r.get("case"), r.get("engine"), r.get("version"), r.get("model"), r.get("gpu"), r.get("method"),
             r.get("attention_backend")) for r in standing}
    rows = [s for s in selection(store)
            if (s.get("case"), s["engine"], s["version"], s["model"], s.get("gpu"), s["method"], s["backend"]) in said]
    own = [s for s in rows if s.get("case") != "seed"]
    seed = [s for s in rows if s.get("case") == "seed" and s.get("method") == "dynamic"]
    qa = []
    if own:
        s = own[0]
        where = "this host" if s.get("case") == "this-host" else f"{s['gpu']} (the profile this book fakes)"
        raw = next(r for r in standing if r.get("case") == s.get("case") and r.get("engine") == s["engine"])
        pick = (q("selected_backend", s["backend"], of=selection_of(raw), code=True) if s["method"] == "dynamic" else f"`{s['backend']}`")
        qa.append((f"Which attention backend does {s['engine']} {s['version']} pick for `{s['model']}` on {where}, and which line decides it?",
                   f"{pick}, written at `{s.get('where')}` in `{s.get('function')}` ({s['method']} reading)."))
        kinds = s.get("kinds") or []
        qa.append(("Is that choice driven by the GPU, the model, an installed kernel library, or a user flag? What would change it?",
                   f"Conditions on the way: {'; '.join(s['rule']) or 'none'} (kinds: {', '.join(kinds) or 'none'}). "
                   + ("No hardware condition is involved, so another GPU would get the same answer; " if "hardware" not in kinds
                      else "A hardware condition is involved: another GPU can get another backend; ")
                   + "passing the engine's attention flag changes it (chapter 03 forces each value)."))
    elif not seed:
        qa.append(("Which attention backend does the engine pick here?",
                   "No answer was recorded in this run: chapter 02's what-if failed or did not run (see the failures table)."))
    if seed:
        s = seed[0]
        qa.append((f"In the seed case ({s['engine']} {s['version']}, {s['model']} on {s['gpu']}), which backend is picked, and by which rule?",
                   f"`{s['backend']}` at `{s.get('where')}`, because {'; '.join(s['rule'][-3:])}: the fast branch's check does not "
                   f"cover capability {s.get('capability')}. That this costs speed was the seed's suspicion; the book found the other "
                   "engine falls back to a Triton MLA kernel too (the comparison above), so the choice alone does not explain the "
                   "gap. " + profiles_sentence(store)))
    return qa
