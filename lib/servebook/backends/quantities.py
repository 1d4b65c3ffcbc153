"""Chapter 03's stated quantities: each backend forced, its rate, interval, agreement and errors, each start against
its engine's default (registered into ``servebook.stated.registry``; ``servebook.quantities`` gathers every chapter's)."""

from __future__ import annotations

from ..stated.intervals import _num, starts_of
from ..stated.registry import Quantity, pairs, pct, register
from ..stated.text import marked
from . import agreement, figures


def _rows(store) -> dict:
    return {figures.row_key(r): r for r in store.rows("backends")}


def _vs_default(store) -> dict:
    """Each start's rate against its engine's default in the same mode, signed (%): what ``findings.separated`` states."""
    rows, out = _rows(store), {}
    for k, r in rows.items():
        d = rows.get(figures.default_key(r))
        a, b = _num(r.get("decode_tok_s")), _num((d or {}).get("decode_tok_s"))
        if a is not None and b:
            out[k] = 100 * (a - b) / b
    return out


def _compared_starts(store) -> dict:
    """Server starts a comparison with the default covers: the fewer of the start's and the default's."""
    rows = _rows(store)
    return {k: min(starts_of(r), starts_of(d)) for k, r in rows.items() if (d := rows.get(figures.default_key(r))) is not None}


def _tolerance(store) -> dict:
    tol = {float(r["decode_tolerance"]) for r in store.rows("backends") if isinstance(r.get("decode_tolerance"), (int, float))}
    return {None: tol.pop()} if len(tol) == 1 else ({} if tol else {None: agreement.TOLERANCE})


def _errors(store) -> dict:
    return {f"{figures.row_key(r)} | {r.get('recorded_at')}": " ".join(marked(r.get("error")).split())
            for r in store.rows("backends") if r.get("outcome") != "ok"}


def _not_run(store) -> dict:
    engines = {r.get("engine") for r in store.rows("backends") + store.rows("backends_not_run") if r.get("engine")}
    return {f"{e} | {x['attention']}": x["reason"] for e in sorted(engines) for x in figures.not_run(store, e)}


def _earlier(store) -> dict:
    engines = {r.get("engine") for r in store.rows("backends") if r.get("engine")}
    return {f"{e} | {a}": why for e in sorted(engines) for a, why in figures.earlier_attempts(store, e).items()}


def _preflight(store) -> dict:
    return {f"{p.get('engine')} | {p.get('attention')} | {p.get('recorded_at')}": str(p.get("reason") or p.get("error") or "refused")
            for p in store.rows("backends_preflight") if not p.get("ok")}


register(
    # each computed by the chapter's own figures module, which formats nothing and imports no page code
    Quantity("backend_tok_s", "single-stream decode tok/s of one forced start (engine | attention | mode; chapter 03)", figures.rates,
             tables=("backends",)),
    Quantity("backend_ci95", "95% half-width of one forced start's tok/s", figures.intervals, tables=("backends",)),
    Quantity("backend_agreement", "one start's agreement with the default (engine | attention | mode | decode, "
             "teacher-forced or greedy)", figures.agreements, tables=("backends",)),
    Quantity("backend_decode_positions", "decode positions one start's decode-path agreement counts", figures.decode_positions,
             tables=("backends",)),
    Quantity("plan_launches", "launches the what-if plans for chapter 03 on the real host", figures.plan_launches,
             tables=("plan_commands",)),
    Quantity("plan_left_out", "backends of the engine's list the what-if's chapter 03 plan leaves out: its own code does not "
             "accept them on the profiled GPU (table plan_left_out)", figures.plan_left_out, tables=("plan_left_out",)),
    Quantity("plan_choices", "backends in the engine's list, as the what-if's chapter 03 plan read it (plan_left_out.of)",
             figures.plan_choices, tables=("plan_left_out",)),
    # each start against its engine's default, as the sayers state it
    Quantity("vs_default_pct", "a start's rate against its engine's default in the same mode, signed % (engine | attention | mode)",
             _vs_default, tables=("backends",)),
    Quantity("compared_starts", "server starts a comparison with the default covers (the fewer of the two; engine | attention | mode)",
             _compared_starts, tables=("backends",)),
    Quantity("decode_tolerance_nats", "the near-tie tolerance (nats) the run's decode-path agreement used (backends.decode_tolerance; "
             "servebook.backends.agreement.TOLERANCE where no row recorded one)", _tolerance, tables=("backends",)),
    # the prose figures (issue #28 item 4)
    Quantity("backend_error", "a forced start's recorded error, whole (engine | attention | mode | recorded_at; table backends)",
             _errors, tables=("backends",)),
    Quantity("not_run_reason", "why a backend did not run, as recorded (engine | attention; backends.figures.not_run)", _not_run,
             tables=("backends", "backends_not_run", "backends_preflight")),
    Quantity("preflight_reason", "why an engine's own validation refused a backend, as recorded (engine | attention | recorded_at; "
             "table backends_preflight)", _preflight, tables=("backends_preflight",)),
    Quantity("earlier_attempt", "how an earlier attempt of a forced backend was recorded (engine | attention; "
             "backends.figures.earlier_attempts)", _earlier, tables=("backends", "backends_not_run")),
    Quantity("backend_vs_pct", "one forced start's rate against another's (not its default: eager against graph), signed % "
             "(A vs B, each engine | attention | mode)", lambda store: pairs(figures.rates(store), pct), tables=("backends",)),
    Quantity("backend_vs_starts", "server starts that comparison covers (the fewer of the two; A vs B)",
             lambda store: pairs(_rows(store), lambda a, b: min(starts_of(a), starts_of(b))), tables=("backends",)),
)
