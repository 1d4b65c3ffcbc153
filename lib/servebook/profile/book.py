"""A run of profiles only (``servebook profile run``: the H200 reference recording, h200x1-ref) rendered as a book.

    plan = html_plan(run_dir)          # (["05", "06"], {"engine": "sglang", "compare_engines": "vllm", "model": "kimi-k2.5"}) or None
    line = not_run_line(run_dir, "03_force_each_backend")   # the index's one line for a chapter such a run has no page of

Such a run recorded profiles of servers and nothing a chapter measures on its host: no probe, no backend reading, no
forced backends, no NCCL sweep, no client benchmark. ``servebook html RUN`` executes on its tables the two chapters that
read profiles (05: each profiled server and the slice depths over their starts, ``profile.depths``; 06: the seed
verdict and the units' account), measuring nothing, where the run has no executed chapter yet; the chapters that did
not run get one line each on the index naming what would fill them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHAPTERS", "profiles_only", "served_by_profiles", "html_plan", "not_run_line", "profiled_host", "profiled_words", "NOT_FOR_PROFILES",
           "leave_out_for_profiles"]

# the chapters that read a profile run's tables (executed with measure=False by ``servebook html``)
CHAPTERS = ("05", "06")
# the tag of chapter 06's cells that read what only a book's chapters 01 to 04 or the seed's what-if record (root causes,
# selection, forced backends, NCCL, the seed case, launch commands): left out of a run of profiles only
NOT_FOR_PROFILES = "not-for-profiles"
# what fills each chapter a profile run has no page of: the chapter's own measurement on a GPU host
_FILLS = {
    "01": "the host's probe (GPUs, links, engines): `servebook book --run-id ID` on the GPU host",
    "02": "the engines' backend selection read from their code: `servebook book --run-id ID --only 02` (any host "
          "with the engines' environments)",
    "03": "each attention backend forced and served on the GPU host: `servebook book --run-id ID --only 03`",
    "04": "the NCCL sweep on a host of two GPUs or more: `servebook book --run-id ID --only 04`",
}


def profiles_only(run_dir) -> bool:
    """Whether ``run_dir`` recorded profiles and no chapter's measurement: an ok row in profile_runs, no host probe
    (``probe.json``, chapter 01's) and no book parameters in its manifest (``servebook book`` records them; a profile
    run, and the chapters ``servebook html`` executes on its tables, do not)."""
    from ..results import RunStore

    store = RunStore(Path(run_dir))
    if (Path(run_dir) / "probe.json").exists() or "parameters" in store.manifest:
        return False
    return any(r.get("ok") for r in store.rows("profile_runs"))


def html_plan(run_dir) -> tuple[list[str], dict] | None:
    """``(chapters, parameters)`` that ``servebook html`` executes on a profiles-only run that has no executed chapter
    yet: ``CHAPTERS`` with the engine and model card of its profiles (the first engine profiled, the others as
    ``compare_engines``, the card they share);
    None for any other run (its chapters were executed where it was measured, or ``--refresh`` names them)."""
    from ..results import RunStore

    run_dir = Path(run_dir)
    if any((run_dir / "notebooks").glob("[0-9][0-9]_*.ipynb")) or not profiles_only(run_dir):
        return None
    rows = [r for r in RunStore(run_dir).rows("profile_runs") if r.get("ok")]
    cards = {r.get("card") for r in rows if r.get("card")}
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    params = {"engine": engines[0]}
    if len(engines) > 1:      # chapter 05 names every engine profiled (chapter 06 declares no such parameter)
        params["compare_engines"] = ",".join(engines[1:])
    if len(cards) == 1:
        params["model"] = cards.pop()
    return list(CHAPTERS), params


def not_run_line(run_dir, stem: str) -> str | None:
    """The index's line for chapter ``stem`` where ``run_dir`` is a profiles-only run and the chapter has no page:
    "not run: a run of profiles only; <what fills it>"; None otherwise (the index says "not run in this run")."""
    fills = _FILLS.get(stem[:2])
    if fills is None or not profiles_only(run_dir):
        return None
    return f"not run: a run of profiles only (servebook profile run); {fills} fills it"


def served_by_profiles(store) -> bool:
    """Whether chapter 05's purpose, a single-stream decode rate, was measured by the profile run itself: a run of
    profiles only whose ok profiles timed greedy requests without the profiler (``tpot_ms``, one stream). Chapter 05
    shows them per slice depth (``profile.depths``); ``measured.nothing_measured`` takes them as its measurement."""
    return profiles_only(store.path) and any(r.get("ok") and (r.get("tpot_ms") or 0) > 0 for r in store.rows("profile_runs"))


def profiled_host(store) -> dict:
    """What a run of profiles only knows of its host, from its ok profile rows (it has no probe): ``gpu`` (the GPUs'
    names), ``gpu_count`` (GPUs of the largest machine), ``machines`` (their identities), ``engines`` (engine and
    version as each row recorded it, ``status`` ok: each served its profiles), ``model`` (the card, with the slices'
    depths) and ``date`` (the first row's); {} for any other run."""
    if not profiles_only(store.path):
        return {}
    rows = [r for r in store.rows("profile_runs") if r.get("ok")]
    engines = sorted({(r["engine"], str(r.get("version"))) for r in rows if r.get("engine") and r.get("version")})
    cards = sorted({r.get("card") for r in rows if r.get("card")})
    layers = sorted({r["layers"] for r in rows if r.get("layers")})
    quant = {r.get("quant") for r in rows}
    model = ", ".join(cards) + (f" slices of {layers[0]} to {layers[-1]} layers" if len(layers) > 1 else
                                f" slice of {layers[0]} layers" if layers else "")
    if quant == {"card"}:
        model += ", the card's INT4 experts, dummy weights"
    return {"gpu": ", ".join(sorted({r.get("machine_gpu_name") for r in rows if r.get("machine_gpu_name")})) or None,
            "gpu_count": max((r.get("machine_gpus") or 0 for r in rows), default=0) or None,
            "machines": sorted({r.get("machine") for r in rows if r.get("machine")}),
            "engines": [{"engine": e, "version": v, "status": "ok", "source": "profile_runs"} for e, v in engines],
            "model": model or None, "date": min((str(r.get("recorded_at")) for r in rows if r.get("recorded_at")), default=None)}


def profiled_words(store, what: str) -> str:
    """Chapter 06's facts for a run of profiles only, from :func:`profiled_host`: ``what`` "engines" (each engine and
    version, "... (each profiled in this run)") or "model" (the card and the slices' depths); "" for any other run."""
    host = profiled_host(store)
    if what == "engines":
        names = ", ".join(f"{e['engine']} {e['version']}" for e in host.get("engines", []))
        return f"{names} (each profiled in this run)" if names else ""
    return host.get("model") or ""


def leave_out_for_profiles(nb, run_dir):
    """``nb`` (a chapter's notebook, before execution) without its cells tagged ``NOT_FOR_PROFILES`` where ``run_dir``
    is a run of profiles only (their sections would each be a heading over "nothing recorded"), one markdown line in
    place of the first naming the sections left out and why; ``nb`` as is for any other run."""
    import nbformat

    tagged = [i for i, c in enumerate(nb.cells) if NOT_FOR_PROFILES in c.metadata.get("tags", [])]
    if not tagged or not profiles_only(run_dir):
        return nb
    heads = [c.source.lstrip("# ").splitlines()[0] for c in (nb.cells[i] for i in tagged)
             if c.cell_type == "markdown" and c.source.startswith("## ")]
    line = nbformat.v4.new_markdown_cell(
        "Left out of this page: " + "; ".join(f"*{h}*" for h in heads) + ". A run of profiles only (`servebook profile "
        "run`) records none of what they read (chapters 01 to 04 of a book on the GPU host, or the seed case's what-if "
        "book); the index names what fills each chapter.", metadata={"tags": ["sb-left-out"]})
    keep = [c for i, c in enumerate(nb.cells) if i not in tagged]
    keep.insert(tagged[0], line)
    nb.cells = keep
    return nb
