"""The seed case in numbers: both engines projected onto 8x RTX PRO 6000 (TP=8) from this book's H200 profiles.

    rows, fixes = record_seed(store)        # tables seed_projection and seed_fixes of this run (what-if book, chapter 06)
    display(Markdown(verdict(rows)))        # the verdict in numbers, every figure tagged

On capability 12.0 both engines fall back to a Triton MLA decode kernel (chapter 02 reads it from their code), so the
projection takes each engine's Triton MLA profile (SGLang ``triton``, vLLM ``TRITON_MLA``) recorded on an H200 in the
profile run ``REFERENCE_PROFILE_RUN`` names (``data/runs/h200x1-ref``: INT4 slices, each engine's ladder on one machine)
and carries it to the seed's host by the rules of ``servebook.profile.projection``. It is a
prediction: the numbers it gives are checked against the seed's own figures, never fitted to them.
"""

from __future__ import annotations

from pathlib import Path

from .fixes import ranked_fixes

__all__ = ["MissingReferenceProfiles", "missing_profiles", "HOST_ROW", "projection_frame", "REFERENCE_PROFILE_RUN", "SEED_BACKENDS", "SEED_NCCL_ENGINES", "record_seed", "seed_tables", "SEED_TABLES", "gap_by_category", "seed_allreduce_share", "plot_latency_sweep"]

REFERENCE_PROFILE_RUN = "h200x1-ref"
from ..errors import ServebookError
from .comm import (SEED_NCCL_ENGINES, collective_table, collectives_per_token, engine_latencies, implied_latency,
                   latency_sweep, matching_latency)
from .gains import rank_by_expected_gain
from .ranges import SEED_BACKENDS, attention_12, assumption_table, central_projection, projection_range


def _reference_dir() -> Path:
    from ..paths import data_dir

    return data_dir() / "runs" / REFERENCE_PROFILE_RUN


class MissingReferenceProfiles(ServebookError):
    """The profile run lacks the slices an engine's projection subtracts: the seed verdict is not computed at all."""


def missing_profiles(src, backends: dict | None = None) -> list[str]:
    """What each engine of ``backends`` (default ``SEED_BACKENDS``) lacks in the profile run ``src`` (a RunStore) for
    the projection to subtract two of its slices on one machine, in words; empty where nothing is missing."""
    from .projection import _tables
    from .slices import select_slices
    from .units import LADDER_PLANS, labels_on_two_machines

    profiles = _tables(src)[0]
    out = [f"label {lab!r} holds profiles of machines {', '.join(ms)} (two units merged by hand: the later would replace "
           "the earlier; merge units with `servebook profile merge-unit`, which renames them)"
           for lab, ms in labels_on_two_machines(profiles).items()]
    bandwidth = {b.get("machine") for b in src.rows("memory_bandwidth") if b.get("read_tbs")}
    for eng, backend in (backends or SEED_BACKENDS).items():
        sl = select_slices(profiles, eng, backend=backend)
        if sl["shallow"] is not None and sl["deep"] is not None:
            m = sl["deep"].get("machine")
            if m and m not in bandwidth:
                out.append(f"{eng} {backend}: table memory_bandwidth holds no row of its slices' machine {m} (the "
                           "bandwidth assumption's measured end; `servebook profile run` measures it first in each unit)")
            continue
        have = sorted({int(p["layers"]) for p in profiles if p["engine"] == eng and p.get("ok")
                       and p.get("backend", "auto") == backend and p.get("layers") is not None})
        out.append(f"{eng} {backend}: table profile_runs holds " + (f"only {'/'.join(map(str, have))}-layer slices of one depth" if len(have) == 1 else
                                                            f"{'/'.join(map(str, have))}-layer slices, none two of one machine" if have else "no ok row")
                   + f" (engine {eng}, backend {backend}, mode graph); two depths of one machine are needed, a bf16 "
                   f"pair (the dense layer alone, and with one MoE layer) or an INT4 depth ladder, which "
                   f"{LADDER_PLANS.get(eng, 'a profile plan')} records")
    return out


# the projection's "gpu idle" row holds what the host adds beyond the target's GPU time under the host rule: not the idle
# time inside a profiled step that chapter 05 calls "gpu idle"; shown under its own name so one term has one meaning
HOST_ROW = "host beyond the GPU (host rule)"


def projection_frame(rows: list[dict]):
    """The projection by category and engine (ms per token) as the page shows it: its "gpu idle" row named for what it
    holds (``HOST_ROW``)."""
    import pandas as pd

    proj = pd.DataFrame(rows)
    proj = proj[proj["category"] != "total"].replace({"category": {"gpu idle": HOST_ROW}})
    return proj.pivot_table(index="category", columns="engine", values="ms_per_token").round(3)


def gap_by_category(rows: list[dict], a: str = "sglang", b: str = "vllm") -> list[dict]:
    """Per category, engine ``a``'s projected ms per token minus ``b``'s, largest first (the predicted gap's parts)."""
    ca = {r["category"]: r["ms_per_token"] for r in rows if r["engine"] == a and r["category"] != "total"}
    cb = {r["category"]: r["ms_per_token"] for r in rows if r["engine"] == b and r["category"] != "total"}
    out = [{"category": c, a: ca.get(c), b: cb.get(c),
            "diff_ms": (ca[c] - cb[c]) if ca.get(c) is not None and cb.get(c) is not None else None} for c in ca]
    return sorted(out, key=lambda r: -(r["diff_ms"] if r["diff_ms"] is not None else -1e9))


SEED_TABLES = ("seed_projection", "seed_fixes", "seed_assumptions", "seed_range", "seed_comm", "seed_collectives",
               "seed_latency_sweep", "seed_attention_12")


def seed_tables(store, reference=None) -> dict:
    """Every table of the seed verdict, computed from the profile run's profiles and the data files (nothing written):
    ``{table: rows}`` for ``SEED_TABLES``. ``reference``: the run directory of the H200 profiles (default
    ``REFERENCE_PROFILE_RUN``, the recording of the INT4 slices; the older h200x1-prof stays as evidence)."""
    from ..results import RunStore
    from ..cards import load_card
    from ..stated.figures import seed_case
    from .projection import seed_figures

    seed = seed_case()
    card = load_card(seed["model"])
    src = full = RunStore.at(reference or _reference_dir())
    gaps = missing_profiles(src)
    if gaps:
        raise MissingReferenceProfiles(f"the seed verdict is not projected from profile run {Path(str(src.path)).name}: "
                                       + "; ".join(gaps) + " (servebook.profile.seed.REFERENCE_PROFILE_RUN names the run)")
    from .anchor import on_anchor_machine
    from .ladders import OneUnit, shared_unit
    from .machines import MachineMismatch

    both = shared_unit(src.rows("profile_runs"), SEED_BACKENDS)
    if both is not None:   # a unit holding every engine's ladder: both projected from its one machine, nothing carried
        src, carried = OneUnit(src, both), []
    else:
        try:   # engines measured in two units (machines): compared only through each unit's reference configuration
            src, carried = on_anchor_machine(src, SEED_BACKENDS)
        except MachineMismatch as exc:
            raise MissingReferenceProfiles(f"the seed verdict is not projected: {exc}") from None
    n, lat = collectives_per_token(card, seed["tp"]), engine_latencies()
    central = central_projection(src, lat, tp=seed["tp"])
    name = Path(str(reference or _reference_dir())).name
    unknown = {e: rows[-1].get("unknown") for e, rows in central.items() if rows[-1].get("unknown")}
    if unknown:   # no half verdict: a category the slices do not hold leaves the total unknown
        raise MissingReferenceProfiles(f"the seed verdict is not projected from profile run {name}: " + "; ".join(
            f"{e}'s projection has no value for {', '.join(u)} (table decode_breakdown of its slices: "
            + "; ".join(r["source"] for r in central[e] if r["category"] in u)[:300] + ")" for e, u in unknown.items()))
    rows = [{**r, "reference_run": name} for e in SEED_BACKENDS for r in central[e]]
    for r in rows:   # the fields the verdict's words on units cite (only where a ladder or a carry was used)
        note = next((c for c in carried if c["engine"] == r["engine"]), None)
        if r["category"] == "total" and (note or r.get("ladder")):
            r.update({"key": f"{r['engine']} | total", **({k: v for k, v in note.items() if k != "engine"} if note else {}),
                      **({"ladder_from": r["ladder"][0], "ladder_to": r["ladder"][1]} if r.get("ladder") else {}),
                      **({"shared_unit": both[1]} if both is not None else {})})
    versions = _studied_versions(store, rows)
    for r in rows:
        if r["category"] == "total":
            r["studied_version"] = versions.get(r["engine"])
    assumptions = assumption_table(src, central, lat, n, shares=_measured_shares(src, full))
    fixes = ranked_fixes(rows, attention_alternatives=_alternatives(store, reference, versions),
                         decode_path=store.rows("decode_path"), versions=versions, seed_env_engines=SEED_NCCL_ENGINES)
    fixes = rank_by_expected_gain(fixes, rows, lat, n, store.rows("decode_path"), versions,
                                  served_note(served_alternative()), _at_depth(full))
    other = {e: next(r["predicted_ms"] for r in central[e] if r["category"] == "total")
             - next(r["ms_per_token"] for r in central[e] if r["category"] == "communication") for e in SEED_BACKENDS}
    return {"seed_projection": rows, "seed_fixes": fixes, "seed_assumptions": assumptions,
            "seed_range": projection_range(central, assumptions, seed_figures()),
            "seed_comm": _comm_rows(lat, n, other, seed_figures()), "seed_collectives": collective_table(card, seed["tp"]),
            "seed_latency_sweep": latency_sweep(other, n),
            "seed_attention_12": [{**a, "key": f"{a['engine']} | {a['version']}"} for a in attention_12()]}


def _measured_shares(src, full) -> dict:
    """How much of the weights-bound parts followed bandwidth on another GPU, per engine of the seed: the ladder of each
    engine's seed backend in a run beside the reference ``full`` with a table ``carry_check``, against the projection's
    own source ``src`` (``cross_gpu.bandwidth_shares``). Per engine, the run holding the most of the seed's engines is
    read (one machine for both where one holds both; ties: the later name); an engine no run holds is left out
    (``ranges`` lends it another's and says so)."""
    from .cross_gpu import bandwidth_shares, carry_runs

    found = []
    for run in carry_runs(full):
        got = {e: bandwidth_shares(src, run, engine=e, backend=b) for e, b in SEED_BACKENDS.items()}
        found.append({e: g for e, g in got.items() if g and g["shares"]})
    out = {}
    for e in SEED_BACKENDS:
        mine = [g for g in found if e in g]
        if mine:
            out[e] = max(reversed(mine), key=len)[e]   # max keeps the first of ties: reversed, the later name
    return out


# the runs whose chapter 03 served the SGLang attention alternative forced on an H200, against its Triton MLA backend
SERVED_RUNS = ("h200x2-live", "h200x1-trust")


def served_alternative(backend: str = "flashinfer", against: str = "triton", runs=SERVED_RUNS) -> list[dict]:
    """What chapter 03 of each run in ``runs`` measured serving SGLang with ``--attention-backend backend`` against
    ``against`` (graph mode, the last ok row of each): rates, 95% half-widths, server starts, the change, and whether the
    intervals separate. A run without both rows is left out."""
    from ..stated.intervals import _overlap, interval_of
    from ..paths import data_dir
    from ..results import RunStore

    out = []
    for run in runs:
        d = data_dir() / "runs" / run
        if not (d / "backends.jsonl").exists():
            continue
        rows = [r for r in RunStore.at(d).rows("backends") if r.get("engine") == "sglang" and r.get("mode", "graph") == "graph"
                and r.get("outcome") == "ok" and r.get("decode_tok_s") is not None]
        a = next((r for r in reversed(rows) if r.get("attention") == backend), None)
        b = next((r for r in reversed(rows) if r.get("attention") == against), None)
        if a is None or b is None:
            continue
        ia, ib = interval_of(a), interval_of(b)
        both = min(ia["starts"], ib["starts"])
        ea, eb = ia["ci95"] or 0.0, ib["ci95"] or 0.0
        apart = not _overlap(ia["mean"], ea, ib["mean"], eb)
        out.append({"run": run, "version": a.get("engine_version"), "backend": backend, "against": against,
                    "tok_s": ia["mean"], "ci95": ea, "against_tok_s": ib["mean"], "against_ci95": eb, "starts": both,
                    "change": ia["mean"] / ib["mean"] - 1, "apart": apart})
    return out


def served_words(served: list[dict]) -> str:
    """``served_note`` for prose, with no figure (the figures are in the fix's row, ``served``): each run's verdict."""
    def one(m: dict) -> str:
        if m["starts"] >= 2:
            return (f"{'no different from' if not m['apart'] else ('slower than' if m['change'] < 0 else 'faster than')} "
                    f"{m['against']} over {m['run']}'s server starts" + (" (their 95% intervals overlap)" if not m["apart"] else ""))
        return f"{'slower' if m['change'] < 0 else 'faster'} than {m['against']} within {m['run']}'s one server start"
    return ("served on the H200 (chapter 03, a slice of the model, SGLang " + ", ".join(sorted({str(m["version"]) for m in served}))
            + "): " + "; ".join(one(m) for m in served)) if served else ""


def served_note(served: list[dict]) -> str:
    """The served measurements of ``served_alternative`` in words, each with its interval and what it covers."""
    def one(m: dict) -> str:
        over = (f"over {m['starts']} server starts" if m["starts"] >= 2 else "one server start: an interval within a start only")
        verdict = ("slower" if m["change"] < 0 else "faster") if m["apart"] and m["starts"] >= 2 else \
            ("no difference (the 95% intervals overlap)" if m["starts"] >= 2 else
             ("slower" if m["change"] < 0 else "faster") + " within that start (the spread between starts not measured)")
        return (f"chapter 03 of {m['run']} served forced {m['backend']} at {m['tok_s']:,.1f} ± {m['ci95']:,.1f} tok/s against "
                f"{m['against']}'s {m['against_tok_s']:,.1f} ± {m['against_ci95']:,.1f} ({m['change']:+.0%}; {over}): {verdict}")
    return "; ".join(one(m) for m in served) + (" (a 2-layer slice on the H200, SGLang " + ", ".join(
        sorted({str(m["version"]) for m in served})) + ")" if served else "")


def _comm_rows(lat: dict, n: int, other: dict, seed_tok_s: dict) -> list[dict]:
    """Per engine: its NCCL environment in the seed, the latency range, the communication per token at each end, the
    latency at which the projection meets the seed's rate, and (SGLang) the latency the seed's all-reduce share implies."""
    out = []
    for e, L in lat.items():
        row = {**{k: L[k] for k in ("engine", "env", "low_us", "central_us", "high_us", "low_host", "high_host", "basis")},
               "collectives": n, "other_ms": other[e], "key": e,
               **{f"{k}_ms": n * L[f"{k}_us"] / 1e3 for k in ("low", "central", "high")},
               "seed_tok_s": seed_tok_s.get(e), "matching_us": matching_latency(other[e], n, seed_tok_s[e])}
        if e == "sglang":
            imp = implied_latency(n, seed_allreduce_share(), seed_tok_s[e])
            row.update({"implied_us": imp["implied_us"], "implied_ms": imp["ms_per_token"], "share": imp["share"],
                        "published_high_us": imp["published_high_us"], "published_high_figure": imp["published_high_figure"],
                        "published_low_us": imp["published_low_us"], "implied_above_published": imp["above_published"],
                        "share_at_matching": (n * row["matching_us"] / 1e3) * seed_tok_s[e] / 1e3 if row["matching_us"] else None})
        out.append(row)
    return out


def record_seed(store, reference=None) -> tuple[list[dict], list[dict]]:
    """Project both engines, range the assumptions, rank the candidate fixes by expected gain, and store every table of
    ``SEED_TABLES`` in ``store`` (each rewritten whole: computed again from newer profiles it supersedes the old; computed
    again with the same values, it is left as it was, its ``recorded_at`` the first computation's). The fixes are
    checked against chapter 02's reading of the studied versions' code (table ``decode_path`` of ``store``). Refused
    (``MissingReferenceProfiles``): the tables are emptied, so no table outlives the profile run it was computed from."""
    try:
        tables = seed_tables(store, reference)
    except MissingReferenceProfiles:   # nothing projected: the tables of an earlier profile run no longer stand
        for name in SEED_TABLES:
            if store.rows(name):
                store.replace(name, [])
        raise
    for name, rows in tables.items():
        store.replace(name, rows, unchanged="keep")  # no reader compares these tables' recorded_at with another's
    return tables["seed_projection"], tables["seed_fixes"]


# the attention backend each engine's fix would switch to on the seed's GPU
_ALTERNATIVES = {"sglang": "flashinfer"}


def _at_depth(src) -> dict:
    """``{(engine, backend): row}``: each alternative backend compared with its engine's seed backend at depth on one
    machine (``backends_at_depth.backend_comparisons`` of the whole profile run ``src``, not of the one unit the
    engines' projections read: a backends unit need not be that unit); where several units compared it, the one
    with the most starts on its thinner side (then the run id, for a fixed choice)."""
    from .backends_at_depth import backend_comparisons

    rows = backend_comparisons(src.rows("profile_runs"))
    return {(r["engine"], r["backend"]): r for r in sorted(rows, key=lambda r: (min(r["starts"].values()), r["run_id"]))}


def _alternatives(store, reference, versions: dict) -> dict:
    """``ranked_fixes``' attention alternatives: the backend's measured H200 profile carried by the attention rule where
    the profile run holds one (with what is still assumed: that it runs on the seed's GPU at all, and as on the H200),
    else the old labelled assumption (as fast as the other engine's projected attention)."""
    from ..results import RunStore
    from .fixes import measured_alternative

    src = RunStore.at(reference or _reference_dir())
    out = {}
    for eng, backend in _ALTERNATIVES.items():
        m = measured_alternative(src, eng, backend, against=SEED_BACKENDS.get(eng))
        if m is None:   # the assumption stands; what chapter 02 read of the rule that skips it still says where it comes from
            rule = _runs_there(store, eng, backend, versions.get(eng), None)
            out[eng] = (backend, None, {"assumption": f"profile run {Path(str(src.path)).name} holds no {backend} slice; {rule}"})
            continue
        m["assumption"] = _runs_there(store, eng, backend, versions.get(eng), m)
        out[eng] = (backend, m["ms"], m)
    return out


def _runs_there(store, engine: str, backend: str, version: str | None, m: dict | None) -> str:
    """What an alternative still assumes: that ``backend`` runs on the seed's GPU at all, and (``m``: measured) as it ran
    on the H200; with the rule by which ``engine`` ``version``'s auto-selection skips it there (chapter 02's table
    ``selection``), or that chapter 02 holds no such reading."""
    from ..engines import prose_name

    sel = [r for r in store.rows("selection") if r.get("engine") == engine and (version is None or r.get("version") == version)]
    skip = next(((r, a) for r in sel for a in r.get("alternatives") or [] if backend in (a.get("would_write") or [])), None)
    cap = next((r.get("capability") for r in sel if r.get("capability")), None)
    head = (f"{backend}'s MLA decode runs on capability {cap} at all" if cap else
            f"{backend}'s MLA decode runs on the seed's GPU at all")
    if m is not None:
        head += f", and as it ran on the H200 ({', '.join(m['from_labels'][1:2])}, {prose_name(engine)} {m.get('measured_version')})"
    if skip is None:
        return head + (f"; chapter 02 holds no reading of {prose_name(engine)} {version}'s rule for {backend} on this "
                       "GPU (table selection)")
    r, a = skip
    helper = next((h for h in r.get("helper_answers") or [] if h.get("condition_line") == a.get("condition_line")), {})
    where = ", ".join(f"`{x}`" for x in a.get("at") or [])
    rule = (f"`{a.get('condition')}` holds, {helper.get('answer')} on this GPU" + (f" (defined at `{helper['defined_at']}`)"
                                                                                  if helper.get("defined_at") else "")
            if helper else f"`{a.get('condition')}` holds, which it does not on this GPU")
    return (head + f"; {prose_name(engine)} {r.get('version')}'s auto-selection skips {backend} on this GPU "
            f"(chapter 02, table selection): the branch that writes it ({where}) is taken only where {rule}, and no code "
            f"read here says {backend}'s MLA kernels support this GPU - settled by forcing `--attention-backend {backend}` on "
            "the seed's host")


def _studied_versions(store, rows: list[dict]) -> dict:
    """``{engine: version}`` this book studies: the run's pinned engine (its manifest's ``engine`` parameter), else the
    version the engine's kernels were measured with."""
    from ..errors import ServebookError
    from ..engines.envs import parse_engine_spec

    out = {r["engine"]: r.get("measured_version") for r in rows if r["category"] == "total"}
    try:
        spec = (store.manifest.get("parameters") or {}).get("engine") or ""
        name, version = parse_engine_spec(spec) if spec else (None, None)
    except ServebookError:  # a damaged manifest or an engine servebook does not know: the measured versions stand
        name, version = None, None
    if name in out and version:
        out[name] = version
    return out


def _versions_line(s: dict, v: dict) -> str:
    from ..stated.tags import q

    line = (f"The kernels were measured with SGLang {q('seed_profile_version', s.get('measured_version'), of='sglang')} "
            f"and vLLM {q('seed_profile_version', v.get('measured_version'), of='vllm')} (`profile_runs`' version of "
            "each slice used).")
    off = [(e, r) for e, r in (("SGLang", s), ("vLLM", v)) if r.get("studied_version") and
           r.get("studied_version") != r.get("measured_version")]
    for name, r in off:
        eng = name.lower()
        line += (f" This book studies {name} {q('seed_studied_version', r['studied_version'], of=eng)}, whose kernels "
                 f"were not profiled: that they take what {q('seed_profile_version', r['measured_version'], of=eng)}'s "
                 f"took is an assumption, settled by profiling {name} "
                 f"{q('seed_studied_version', r['studied_version'], of=eng)}'s Triton MLA backend on the same slices.")
    return line


def seed_allreduce_share() -> float:
    """The share of SGLang's decode time the seed's own profile gave all-reduce (``data/reference/seed-case.json``)."""
    from ..stated.figures import seed_case

    return float(seed_case()["allreduce_share_of_sglang_decode"])


def profiles_sentence(store) -> str:
    """What would explain the seed's gap beyond the attention choice, said only from profiles a table holds: this run's
    decode-step profiles (``profile_runs`` with both engines' ``decode_breakdown``: chapter 06 reads them), or, in a book
    of the seed case, the H200 profiles chapter 06 projects onto its GPUs (the profile run's ``profile_runs``, the
    rule chapter 06 applies); otherwise which run and chapter measure it."""
    from ..paths import data_dir
    from .tables import engine_difference, latest_ok
    from ..results import RunStore
    from ..stated.figures import seed_case

    if engine_difference(store.rows("decode_breakdown"), store.rows("profile_runs")):
        return ("Chapter 06 says where each engine's decode step spends its time, from this run's profiles (tables "
                "`profile_runs` and `decode_breakdown`).")
    m = store.manifest
    params = m.get("parameters") or {}
    ref, seed = data_dir() / "runs" / REFERENCE_PROFILE_RUN, seed_case()
    if (params.get("profile", m.get("profile")) == seed["profile"]
            and str(params.get("model", m.get("model")) or "").startswith(seed["model"])
            and latest_ok(RunStore(ref).rows("profile_runs"))):
        return (f"Chapter 06 projects the decode-step profiles recorded on an H200 (`data/runs/{REFERENCE_PROFILE_RUN}`, "
                "table `profile_runs`) onto the seed's GPUs: a prediction, with the measurement on the real host that "
                "would settle it.")
    return ("No decode-step profile was recorded in this run when this page was executed, so nothing here says where the "
            "time goes: chapter 05 records one where the engine has a profiler endpoint (chapter 06 then reads it), and "
            "chapter 06 of the seed case's what-if book "
            f"(`servebook book --profile {seed['profile']} --engine sglang=={str(seed['engines']['sglang']).split()[0]} "
            f"--model {seed['model']}`) projects the H200 profiles of "
            f"`data/runs/{REFERENCE_PROFILE_RUN}` onto the seed's GPUs.")


def plot_latency_sweep(tables: dict, seed: dict) -> None:
    """Each engine's projected rate against one all-reduce's latency (table ``seed_latency_sweep``), the seed's two rates
    dashed, each engine's published latency range shaded, and the latency the seed's all-reduce share implies."""
    import matplotlib.pyplot as plt
    import pandas as pd

    sw = pd.DataFrame(tables["seed_latency_sweep"])
    fig, ax = plt.subplots(figsize=(9, 5))
    for e, g in sw.groupby("engine"):
        line = ax.plot(g["allreduce_us"], g["tok_s"], marker="o", label=f"{e}: projected")[0]
        ax.axhline(seed["single_stream_tok_s"][e], color=line.get_color(), ls="--", label=f"{e}: the seed's rate")
    for r in tables["seed_comm"]:
        ax.axvspan(r["low_us"], r["high_us"], alpha=0.08, color="C0" if r["engine"] == "sglang" else "C1")
        if r.get("implied_us"):
            ax.axvline(r["implied_us"], color="grey", ls=":", label="latency the seed's all-reduce share implies (SGLang)")
    ax.set_xlabel(f"one all-reduce's latency (us), {tables['seed_comm'][0]['collectives']} collectives per token")
    ax.set_ylabel("projected single-stream tok/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Seed case: projected rate against all-reduce latency (shaded: each engine's published range)")
    ax.legend()
    plt.show()
