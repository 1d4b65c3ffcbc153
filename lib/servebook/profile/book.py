"""A run of profiles only (``servebook profile run``: the H200 reference recording, h200x1-ref) rendered as a book.

    plan = html_plan(run_dir)          # (["05", "06"], {"engine": "sglang", "model": "kimi-k2.5"}) or None
    line = not_run_line(run_dir, "03_force_each_backend")   # the index's one line for a chapter such a run has no page of

Such a run recorded profiles of servers and nothing a chapter measures on its host: no probe, no backend reading, no
forced backends, no NCCL sweep, no client benchmark. ``servebook html RUN`` executes on its tables the two chapters that
read profiles (05: each profiled server and the slice depths over their starts, ``profile.depths``; 06: the seed
verdict and the units' account), measuring nothing, where the run has no executed chapter yet; the chapters that did
not run get one line each on the index naming what would fill them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHAPTERS", "profiles_only", "served_by_profiles", "html_plan", "not_run_line"]

# the chapters that read a profile run's tables (executed with measure=False by ``servebook html``)
CHAPTERS = ("05", "06")
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
    yet: ``CHAPTERS`` with the engine and model card of its profiles (the first engine profiled, the card they share);
    None for any other run (its chapters were executed where it was measured, or ``--refresh`` names them)."""
    from ..results import RunStore

    run_dir = Path(run_dir)
    if any((run_dir / "notebooks").glob("[0-9][0-9]_*.ipynb")) or not profiles_only(run_dir):
        return None
    rows = [r for r in RunStore(run_dir).rows("profile_runs") if r.get("ok")]
    cards = {r.get("card") for r in rows if r.get("card")}
    params = {"engine": rows[0]["engine"]}
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
