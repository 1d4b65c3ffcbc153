"""The seed case in numbers: both engines projected onto 8x RTX PRO 6000 (TP=8) from this book's H200 profiles.

    rows, fixes = record_seed(store)        # tables seed_projection and seed_fixes of this run (what-if book, chapter 06)
    display(Markdown(verdict(rows)))        # the verdict in numbers, every figure tagged

On capability 12.0 both engines fall back to a Triton MLA decode kernel (chapter 02 reads it from their code), so the
projection takes each engine's Triton MLA profile (SGLang ``triton``, vLLM ``TRITON_MLA``) recorded on an H200 in
``data/runs/h200x1-prof`` and carries it to the seed's host by the rules of ``servebook.profile.projection``. It is a
prediction: the numbers it gives are checked against the seed's own figures, never fitted to them.
"""

from __future__ import annotations

from pathlib import Path

from .projection import project, project_per_start, ranked_fixes

__all__ = ["REFERENCE_PROFILE_RUN", "SEED_BACKENDS", "SEED_NCCL_ENGINES", "seed_projection", "record_seed", "verdict", "gap_by_category", "seed_allreduce_share"]

REFERENCE_PROFILE_RUN = "h200x1-prof"
# what each engine runs on capability 12.0, as chapter 02 resolves it from the engines' own code
SEED_BACKENDS = {"sglang": "triton", "vllm": "TRITON_MLA"}
# engines the seed launched with its NCCL block (servebook.nccl.e2e.SEED_ENV, copied from a vLLM systemd unit; SGLang
# ran without it until the investigation copied it over: shared/seeds)
SEED_NCCL_ENGINES = ("vllm",)


def _reference_dir() -> Path:
    from ..paths import data_dir

    return data_dir() / "runs" / REFERENCE_PROFILE_RUN


def seed_projection(reference=None, **kw) -> list[dict]:
    """``seed_projection`` rows for SGLang and vLLM with their 12.0 backends (``project``'s keywords pass through)."""
    from ..results import RunStore

    src = RunStore.at(reference or _reference_dir())
    rows = []
    for engine, backend in SEED_BACKENDS.items():
        rows += [{**r, "reference_run": REFERENCE_PROFILE_RUN} for r in _engine_rows(src, engine, backend, **kw)]
    return rows


def _engine_rows(src, engine: str, backend: str, **kw) -> list[dict]:
    """``project``'s rows, each with ``starts_ms`` (and the total ``starts_tok_s``) where the 2-layer slice had other
    server starts: stated beside the projection, never in it."""
    mine = project(src, engine, backend=backend, **kw)
    starts = project_per_start(src, engine, backend=backend, **kw)
    if len(starts) > 1:
        mine[-1].update({"starts_tok_s": [x["predicted_tok_s"] for x in starts],
                         "starts_deep_labels": [x["deep_label"] for x in starts]})
        for r in mine:
            r["starts_ms"] = [x["predicted_ms"] if r["category"] == "total" else x["ms_by_category"].get(r["category"])
                              for x in starts]
    return mine


def gap_by_category(rows: list[dict], a: str = "sglang", b: str = "vllm") -> list[dict]:
    """Per category, engine ``a``'s projected ms per token minus ``b``'s, largest first (the predicted gap's parts)."""
    ca = {r["category"]: r["ms_per_token"] for r in rows if r["engine"] == a and r["category"] != "total"}
    cb = {r["category"]: r["ms_per_token"] for r in rows if r["engine"] == b and r["category"] != "total"}
    out = [{"category": c, a: ca.get(c), b: cb.get(c),
            "diff_ms": (ca[c] - cb[c]) if ca.get(c) is not None and cb.get(c) is not None else None} for c in ca]
    return sorted(out, key=lambda r: -(r["diff_ms"] if r["diff_ms"] is not None else -1e9))


def record_seed(store, reference=None) -> tuple[list[dict], list[dict]]:
    """Project both engines, rank the candidate fixes, and store both tables in ``store`` (rewritten whole: a
    projection computed again from newer profiles supersedes the old). The fixes are checked against chapter 02's
    reading of the studied versions' code (table ``decode_path`` of ``store``)."""
    rows = seed_projection(reference)
    versions = _studied_versions(store, rows)
    for r in rows:
        if r["category"] == "total":
            r["studied_version"] = versions.get(r["engine"])
    fixes = ranked_fixes(rows, attention_alternatives=_alternatives(store, reference, versions),
                         decode_path=store.rows("decode_path"), versions=versions, seed_env_engines=SEED_NCCL_ENGINES)
    store.replace("seed_projection", rows)
    store.replace("seed_fixes", fixes)
    return rows, fixes


# the attention backend each engine's fix would switch to on the seed's GPU
_ALTERNATIVES = {"sglang": "flashinfer"}


def _alternatives(store, reference, versions: dict) -> dict:
    """``ranked_fixes``' attention alternatives: the backend's measured H200 profile carried by the attention rule where
    the reference run holds one (with what is still assumed: that it runs on the seed's GPU at all, and as on the H200),
    else the old labelled assumption (as fast as the other engine's projected attention)."""
    from ..results import RunStore
    from .projection import measured_alternative

    src = RunStore.at(reference or _reference_dir())
    out = {}
    for eng, backend in _ALTERNATIVES.items():
        m = measured_alternative(src, eng, backend, against=SEED_BACKENDS.get(eng))
        if m is None:
            out[eng] = (backend, None)
            continue
        m["assumption"] = _runs_there(store, eng, backend, versions.get(eng), m)
        out[eng] = (backend, m["ms"], m)
    return out


def _runs_there(store, engine: str, backend: str, version: str | None, m: dict) -> str:
    """What a measured alternative still assumes: that ``backend`` runs on the seed's GPU at all, and as it ran on the
    H200; with the rule by which ``engine`` ``version``'s auto-selection skips it there (chapter 02's table
    ``selection``), or that chapter 02 holds no such reading."""
    names = {"sglang": "SGLang", "vllm": "vLLM"}
    sel = [r for r in store.rows("selection") if r.get("engine") == engine and (version is None or r.get("version") == version)]
    skip = next(((r, a) for r in sel for a in r.get("alternatives") or [] if backend in (a.get("would_write") or [])), None)
    cap = next((r.get("capability") for r in sel if r.get("capability")), None)
    head = (f"{backend}'s MLA decode runs on capability {cap} at all, and as it ran on the H200" if cap else
            f"{backend}'s MLA decode runs on the seed's GPU at all, and as it ran on the H200")
    head += f" ({', '.join(m['from_labels'][1:2])}, {names.get(engine, engine)} {m.get('measured_version')})"
    if skip is None:
        return head + (f"; chapter 02 holds no reading of {names.get(engine, engine)} {version}'s rule for {backend} on this "
                       "GPU (table selection)")
    r, a = skip
    helper = next((h for h in r.get("helper_answers") or [] if h.get("condition_line") == a.get("condition_line")), {})
    where = ", ".join(f"`{x}`" for x in a.get("at") or [])
    rule = (f"`{a.get('condition')}` holds, {helper.get('answer')} on this GPU" + (f" (defined at `{helper['defined_at']}`)"
                                                                                  if helper.get("defined_at") else "")
            if helper else f"`{a.get('condition')}` holds, which it does not on this GPU")
    return (head + f"; {names.get(engine, engine)} {r.get('version')}'s auto-selection skips {backend} on this GPU "
            f"(chapter 02, table selection): the branch that writes it ({where}) is taken only where {rule}, and no code "
            f"read here says {backend}'s MLA kernels support this GPU - settled by forcing `--attention-backend {backend}` on "
            "the seed's host")


def _studied_versions(store, rows: list[dict]) -> dict:
    """``{engine: version}`` this book studies: the run's pinned engine (its manifest's ``engine`` parameter), else the
    version the engine's kernels were measured with."""
    from ..errors import ServebookError
    from ..selection.envs import parse_engine_spec

    out = {r["engine"]: r.get("measured_version") for r in rows if r["category"] == "total"}
    try:
        spec = (store.manifest.get("parameters") or {}).get("engine") or ""
        name, version = parse_engine_spec(spec) if spec else (None, None)
    except ServebookError:  # a damaged manifest or an engine servebook does not know: the measured versions stand
        name, version = None, None
    if name in out and version:
        out[name] = version
    return out


def _parts_line(rows: list[dict], gap: float) -> str:
    from ..stated.tags import q

    confounded = {r["category"] for r in rows if r.get("confounded")}
    noisy = _within_starts(rows)
    parts = [g for g in gap_by_category(rows) if g["diff_ms"] is not None and g["diff_ms"] > 0.05 * max(gap, 1e-9)
             and g["category"] not in confounded and g["category"] not in noisy]
    line = (f"The projected gap is {q('seed_projected_gap_ms', gap, '.2f')} ms per token; its largest parts: "
            + ", ".join(f"{g['category']} {q('seed_projected_part_ms', g['diff_ms'], '+.2f', of=g['category'])} ms"
                        for g in parts[:4]) + ".")
    if confounded:
        line += (" Confounded, and so left out of the parts: " + ", ".join(sorted(confounded)) + " (the slices they come "
                 "from ran different attention backends; a one-layer slice of each engine's Triton backend settles them).")
    names = {"sglang": "SGLang", "vllm": "vLLM"}
    for cat, diff in noisy.items():
        starts = "; ".join(
            f"{names.get(r['engine'], r['engine'])} " + " then ".join(
                q("seed_category_start_ms", x, ".3f", of=f"{r['engine']} | {cat} | {i + 1}") for i, x in enumerate(r["starts_ms"]))
            for r in rows if r["category"] == cat and r.get("starts_ms"))
        what = ("the host time per token kept from one server start of each engine's slice" if cat == "gpu idle" else
                "projected from one server start of each engine's two-layer slice")
        line += (f" Left out of the parts: {cat} ({q('seed_projected_part_ms', diff, '+.2f', of=cat)} ms), {what}, which "
                 f"moved from one start to the next by as much as that or more in one engine at least ({starts} ms per "
                 "token): which engine takes longer there is a hypothesis these profiles do not settle; more starts of each "
                 "slice" + (", and a host-side trace of each engine's scheduler loop," if cat == "gpu idle" else "")
                 + " settle it.")
    return line


def _within_starts(rows: list[dict]) -> dict:
    """``{category: gap part}`` of a positive part no larger than one engine's start-to-start spread of that category
    (``starts_ms``: the category projected with each server start of the 2-layer slice, where it had several)."""
    out = {}
    for g in gap_by_category(rows):
        spreads = [max(r["starts_ms"]) - min(r["starts_ms"]) for r in rows if r["category"] == g["category"]
                   and r.get("starts_ms") and None not in r["starts_ms"]]
        if g["diff_ms"] is not None and g["diff_ms"] > 0 and len(spreads) >= 2 and g["diff_ms"] <= max(spreads):
            out[g["category"]] = g["diff_ms"]
    return out


def _starts_line(s: dict, v: dict) -> str:
    """What the projection gives with the other server start of each engine's 2-layer slice (same rules), where both
    engines' slices had one: how far one start of the H200 profiles moves it."""
    from ..stated.tags import q

    if not (s.get("starts_tok_s") and v.get("starts_tok_s")) or min(len(s["starts_tok_s"]), len(v["starts_tok_s"])) < 2:
        return ""
    n = min(len(s["starts_tok_s"]), len(v["starts_tok_s"]))
    others = "; ".join(
        f"start {q('seed_start_n', i + 1, 'd', of=str(i + 1))}: SGLang "
        f"{q('seed_start_tok_s', s['starts_tok_s'][i], '.1f', of=f'sglang | {i + 1}')} and vLLM "
        f"{q('seed_start_tok_s', v['starts_tok_s'][i], '.1f', of=f'vllm | {i + 1}')} tok/s, a gap of "
        f"{q('seed_start_gap_ms', s['starts_ms'][i] - v['starts_ms'][i], '.2f', of=str(i + 1))} ms per token"
        for i in range(1, n))
    return (" The projection takes the first server start of each two-layer slice; by the same rules the other starts give "
            f"({others}): the projection moves that much from one start of the H200 slices to the next, so an error or a "
            "gap smaller than that move is not settled by them (more starts of each slice settle it).")


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


def _allreduce_line(rows: list[dict], fixes: list[dict]) -> str:
    from ..nccl.e2e import SEED_ENV
    from ..stated.tags import q

    comm = {r["engine"]: r for r in rows if r["category"] == "communication"}
    c = comm.get("sglang") or next(iter(comm.values()), {})
    if not c.get("collectives"):
        return ""
    pair = next((f for f in fixes if f.get("pair_ms_per_token") is not None), None)
    block = " ".join(f"{k}={v}" for k, v in SEED_ENV.items())
    names = {"sglang": "SGLang", "vllm": "vLLM"}
    with_block = [names.get(e, e) for e in comm if e in SEED_NCCL_ENGINES]
    without = [names.get(e, e) for e in comm if e not in SEED_NCCL_ENGINES]
    line = ("**All-reduce is an open hypothesis for the gap.** The projection gives both engines the same "
            f"{q('seed_collectives', c['collectives'], 'd', of=c['engine'])} collectives per token at one published "
            f"latency ({q('seed_allreduce_us', c.get('allreduce_us'), '.2f', of=c['engine'])} us, measured on another "
            "machine than the seed's host), so it shows no all-reduce difference; but the seed launched "
            + (" and ".join(with_block) or "no engine") + f" with an NCCL block (`{block}`) and "
            + (" and ".join(without) or "no engine") + " without it.")
    if pair is not None:
        line += (" On one published dual-socket machine NCCL's all-reduce took "
                 f"{q('seed_nccl_pair_us', pair['pair_default_us'], '.2f', of='default')} us by default and "
                 f"{q('seed_nccl_pair_us', pair['pair_tuned_us'], '.2f', of='tuned')} us with LL, "
                 f"{q('seed_nccl_pair_ms', pair['pair_ms_per_token'], '.2f')} ms per token over that many collectives, "
                 "where the seed's host behaves like that machine - a difference between the engines this projection "
                 "cannot show, since it gives both one latency.")
    line += (f" The seed's own profile put all-reduce at {q('seed_allreduce_share', seed_allreduce_share(), '.1%')} of "
             "SGLang's decode time. What settles it: all-reduce at "
             f"{q('seed_message_bytes', c.get('message_bytes'), ',d', of=c['engine'])} B on the seed's host, "
             f"{q('seed_tp', c.get('tp'), 'd')} ranks under CUDA graphs, "
             "with and without the seed's NCCL settings (chapter 04 with `tp_seed_block`), and NCCL_DEBUG=INFO from "
             "each engine's launch for the protocol it picked.")
    return line


def verdict(rows: list[dict], fixes: list[dict] = ()) -> str:
    """The seed case's verdict in numbers (Markdown; every figure tagged with the quantity it is)."""
    from ..stated.tags import q

    tot = {r["engine"]: r for r in rows if r["category"] == "total"}
    if not all(e in tot and tot[e].get("predicted_ms") for e in SEED_BACKENDS):
        return ("**Verdict:** not projected - the H200 profiles of both engines' Triton MLA backends are missing from "
                f"`data/runs/{REFERENCE_PROFILE_RUN}`; the seed's gap stays unexplained here.")
    s, v = tot["sglang"], tot["vllm"]
    gap = s["predicted_ms"] - v["predicted_ms"]
    att = next((g for g in gap_by_category(rows) if g["category"] == "attention"), None)
    lines = [
        "**Verdict (predicted from measurements, not measured on that host).** On 8x RTX PRO 6000 both engines run a "
        "Triton MLA decode kernel (chapter 02, from their own code). Carried from this book's H200 profiles by the rules "
        f"below, SGLang decodes {q('seed_projected_tok_s', s['predicted_tok_s'], '.1f', of='sglang')} tok/s "
        f"(the seed measured {q('seed_tok_s', s['seed_tok_s'], '', of='sglang')}, error {q('seed_projection_error_pct', s['error_pct'], '+.1f', of='sglang')}%) "
        f"and vLLM {q('seed_projected_tok_s', v['predicted_tok_s'], '.1f', of='vllm')} tok/s (the seed measured "
        f"{q('seed_tok_s', v['seed_tok_s'], '', of='vllm')}, error {q('seed_projection_error_pct', v['error_pct'], '+.1f', of='vllm')}%). "
        + _versions_line(s, v) + _starts_line(s, v),
        _parts_line(rows, gap),
    ]
    if att and att["diff_ms"] and att["diff_ms"] > 0:
        ratio = att["sglang"] / att["vllm"] if att.get("vllm") else None
        lines.append("Why attention (a hypothesis, measured on the H200, not on the seed's GPU): at batch 1 SGLang's Triton "
                     f"MLA decode kernels take {q('seed_attention_ratio', ratio, '.1f') + ' times' if ratio else 'longer than'} as long "
                     "per layer as vLLM's Triton MLA kernels on the same slice (`data/runs/h200x1-prof`, table "
                     "`decode_breakdown`; kernel names in the traces' excerpts).")
    lines.append(_allreduce_line(rows, fixes))
    ranked = [f for f in fixes if f.get("label") == "predicted" and f.get("gain_ms_per_token") is not None]
    if ranked and ranked[0].get("alternative_ms") is not None:
        lines.append(_measured_fix_line(ranked[0]))
    elif ranked:
        f0 = ranked[0]
        lines.append(f"First change to check (predicted gain {q('seed_fix_gain_ms', f0['gain_ms_per_token'], '.2f', of='first')} ms per "
                     f"token for {f0['engine']}"
                     + (f", assuming {f0['assumption']}" if f0.get("assumption") else "") + f"): "
                     f"{f0['change']} - `{f0['check_command']}`.")
    others = sorted({f["label"] for f in fixes if f.get("label") != "predicted"})
    if others:
        lines.append("The other candidate changes in the table below carry no predicted gain: they are "
                     + ", ".join(f"*{o}*" for o in others) + " for the versions named (each row's basis says which code "
                     "or figures decided it).")
    lines.append("What settles it: profile both engines on the RTX PRO 6000 host (`servebook profile run` with a plan "
                 "of the real model) and compare each category with the projection below.")
    return "\n\n".join(x for x in lines if x)


def _measured_fix_line(f0: dict) -> str:
    """The first-ranked change where its gain comes from a measured profile of the alternative (``measured_alternative``)."""
    from ..stated.tags import q

    alt, eng = f0["alternative_backend"], f0["engine"]
    line = (f"First change to check: {f0['change']} for {eng} - `{f0['check_command']}`. Predicted gain "
            f"{q('seed_fix_gain_ms', f0['gain_ms_per_token'], '.2f', of='first')} ms per token: {alt}'s attention, measured on "
            f"the H200 and carried by the attention rule, projects to "
            f"{q('seed_fix_alternative_ms', f0['alternative_ms'], '.3f', of=f'{eng} | {alt}')} ms per token")
    if f0.get("like_for_like_gain_ms") is not None:
        line += (f" ({alt} has no one-layer slice: taking both backends' attention from their two-layer slices by one rule, "
                 f"the gain is {q('seed_fix_like_gain_ms', f0['like_for_like_gain_ms'], '.2f', of='first')} ms)")
    return line + (f". It assumes that {f0['assumption']}." if f0.get("assumption") else ".")


def seed_allreduce_share() -> float:
    """The share of SGLang's decode time the seed's own profile gave all-reduce (``data/reference/seed-case.json``)."""
    from ..stated.figures import seed_case

    return float(seed_case()["allreduce_share_of_sglang_decode"])


def profiles_sentence(store) -> str:
    """What would explain the seed's gap beyond the attention choice, said only from profiles a table holds: this run's
    decode-step profiles (``profile_runs`` with both engines' ``decode_breakdown``: chapter 06 reads them), or, in a book
    of the seed case, the H200 profiles chapter 06 projects onto its GPUs (the reference run's ``profile_runs``, the
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
