"""Chapter 03's figures, computed from a run's tables and nothing else: what the page states and what
``servebook.stated`` recomputes to check it (no formatting, no page code).

    rates(store)["vllm | TRITON_MLA | graph"]          # decode tok/s of that start (its last row)
    agreements(store)["vllm | FLASHMLA | graph | decode"]
    not_run(store, "vllm")                             # what did not run, each backend once, and why
"""

from __future__ import annotations

from typing import Any

__all__ = ["row_key", "default_key", "rates", "intervals", "agreements", "decode_positions", "not_run", "asked_not_started",
           "earlier_attempts", "default_ran_as", "plan_launches"]

AGREEMENTS = {"decode": "decode_agreement", "teacher-forced": "tf_top1_agreement", "greedy": "agreement"}


def row_key(r: dict) -> str:
    """The subject of one start's figures: ``"engine | attention | mode"``."""
    return f"{r.get('engine')} | {r.get('attention')} | {r.get('mode') or 'default'}"


def default_key(r: dict) -> str:
    """The start a start is compared with (``vs_default_pct``): its engine's default (``auto``) in the same mode."""
    return row_key({**r, "attention": "auto"})


def _field(store, field: str) -> dict[str, Any]:
    out = {}
    for r in store.rows("backends"):
        if isinstance(r.get(field), (int, float)) and not isinstance(r.get(field), bool):
            out[row_key(r)] = r[field]
    return out


def rates(store) -> dict[str, float]:
    """Single-stream decode tok/s of every start that measured one (the last row of each engine, backend and mode)."""
    return _field(store, "decode_tok_s")


def intervals(store) -> dict[str, float]:
    """The 95% half-width beside each rate."""
    return _field(store, "decode_tok_s_ci95")


def agreements(store) -> dict[str, float]:
    """Each start's agreement with the default: ``"... | decode"`` (decode-step token ids), ``"... | teacher-forced"``
    (prefill path), ``"... | greedy"`` (greedy tokens)."""
    out = {}
    for kind, field in AGREEMENTS.items():
        out.update({f"{k} | {kind}": v for k, v in _field(store, field).items()})
    return out


def decode_positions(store) -> dict[str, float]:
    """Decode positions the decode-path agreement was counted over."""
    return _field(store, "decode_positions")


def _defaults_loaded(store, engine: str) -> set:
    return {r.get("reported") for r in store.rows("backends")
            if r.get("engine") == engine and r.get("attention") == "auto" and r.get("outcome") == "ok" and r.get("reported")}


def not_run(store, engine: str) -> list[dict]:
    """What did not run for ``engine``, each backend once (table ``backends_not_run``), without the backends that have a
    row in ``backends`` (tried: their row says how it went; an earlier attempt is in ``earlier_attempts``), without
    the backend the default loaded (it ran, as the default) and without those the engine's own validation was asked about
    (``asked_not_started`` says what it answered: a resumption that left a backend out of its list wrote "not in this run's
    backends list" for a backend the run's first list named and the engine refused). ``[{"attention", "reason"}]``."""
    tried = {r.get("attention") for r in store.rows("backends") if r.get("engine") == engine}
    loaded = _defaults_loaded(store, engine)
    asked = {p.get("attention") for p in store.rows("backends_preflight") if p.get("engine") == engine}
    out, seen = [], set()
    for r in store.rows("backends_not_run"):
        a = r.get("attention")
        if r.get("engine") != engine or a in tried or a in loaded or a in asked or a in seen:
            continue
        seen.add(a)
        out.append({"attention": a, "reason": r.get("reason")})
    return out


def asked_not_started(store, engine: str) -> list[dict]:
    """The backends the engine's own validation was asked about (``backends_preflight``) that have no row in ``backends``
    and are not the one the default loaded, each once with its latest answer: ``[{"attention", "ok", "reason",
    "recorded_at"}]`` (``ok`` False: refused before any start; True: accepted, and no start was recorded)."""
    tried = {r.get("attention") for r in store.rows("backends") if r.get("engine") == engine}
    skip = tried | _defaults_loaded(store, engine)
    latest: dict[str, dict] = {}
    for p in store.rows("backends_preflight"):
        if p.get("engine") == engine and p.get("attention") not in skip:
            latest[p.get("attention")] = p
    return [{"attention": a, "ok": bool(p.get("ok")), "reason": str(p.get("reason") or p.get("error") or "refused"),
             "recorded_at": p.get("recorded_at")} for a, p in latest.items()]


def earlier_attempts(store, engine: str) -> dict[str, str]:
    """Backends with a row in ``backends`` that ``backends_not_run`` also lists: what that earlier record said."""
    tried = {r.get("attention") for r in store.rows("backends") if r.get("engine") == engine}
    return {r["attention"]: r.get("reason") for r in store.rows("backends_not_run")
            if r.get("engine") == engine and r.get("attention") in tried}


def default_ran_as(store, engine: str) -> list[str]:
    """Backends ``backends_not_run`` lists for ``engine`` that the default (auto) reported loading: they ran."""
    loaded = _defaults_loaded(store, engine)
    return sorted({r["attention"] for r in store.rows("backends_not_run") if r.get("engine") == engine and r.get("attention") in loaded})


def plan_launches(store) -> dict[None, int]:
    """The what-if's planned launches (table ``plan_commands``, chapter 03), the closing sweep line not counted."""
    n = sum(1 for r in store.rows("plan_commands") if r.get("chapter") == "03")
    return {None: n - 1} if n else {}


def plan_left_out(store) -> dict[None, int]:
    """The backends of the engine's list that the what-if's chapter 03 plan leaves out (table ``plan_left_out``: the
    engine's own code does not accept them on the profiled GPU)."""
    rows = [r for r in store.rows("plan_left_out") if r.get("chapter") == "03"]
    return {None: sum(1 for r in rows if r.get("attention"))} if rows else {}


def plan_choices(store) -> dict[None, int]:
    """How many backends the engine's list holds, as the what-if's chapter 03 plan read it (``plan_left_out.of``)."""
    of = {r.get("of") for r in store.rows("plan_left_out") if r.get("chapter") == "03" and r.get("of") is not None}
    return {None: of.pop()} if len(of) == 1 else {}
