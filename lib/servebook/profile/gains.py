"""The seed case's candidate changes ranked by expected gain, each with its range and the command that checks it.

    fixes = rank_by_expected_gain(ranked_fixes(rows, ...), rows, lat, n, decode_path)    # table seed_fixes

``fixes.ranked_fixes`` proposes the changes and reads, in chapter 02's ``decode_path``, which exist in the studied
versions. Here each change gets a gain at both ends of what it depends on (``gain_low_ms``, ``gain_high_ms``) and an
expected gain (the middle: nothing here says which end the seed's host is nearer), and the communication changes are
costed per engine from ``comm.engine_latencies``: the seed's NCCL block for an engine launched without it, a custom or
one-shot PCIe all-reduce where a newer version of the engine has one. Ranked by expected gain; at equal gain a flag or an
environment change before one that needs another version. A change with no gain here says why in its label (already the
default, already in the seed's launch, no effect in this version), never "not computable" without the measurement.
"""

from __future__ import annotations

from .comm import SEED_NCCL_ENGINES, custom_latency
from .fixes import NOT_IN_VERSION, _launch

__all__ = ["NEEDS_VERSION", "SIGN_UNKNOWN", "KIND_ORDER", "seed_tried", "rank_by_expected_gain"]



def seed_tried(option: str = "--attention-backend flashinfer") -> str:
    """What the seed did with ``option``, from ``data/reference/seed-case.json`` (``next_sglang_launch``): its next SGLang
    launch changed it together with the NCCL block and the other options, so it was never tried alone; that launch's
    rate, where the seed recorded one. The file, not a sentence typed here: it said "together with the NCCL block" and
    left out the two other options the launch changed at once."""
    from ..stated.figures import seed_case

    launch = seed_case()["next_sglang_launch"]
    others = [o for o in launch["options"] if o != option]
    rate = launch.get("single_stream_tok_s")
    return (f"the seed already tried it, not alone: its next SGLang launch changed {option} together with the NCCL block"
            + "".join(f", {o}" for o in others[:-1]) + (f" and {others[-1]}" if others else "")
            + " at once (data/reference/seed-case.json, from shared/seeds); "
            + (f"that launch ran {rate} tok/s, all of them together" if rate is not None
               else f"that launch's rate is {launch.get('rate_note') or 'not recorded'}"))

NEEDS_VERSION = "predicted, needs another version"
# a change whose gain may be either sign (an alternative attention backend): a check to run, no expected gain
SIGN_UNKNOWN = "a check: sign unknown"
KIND_ORDER = {"flag": 0, "environment": 0, "version": 1}
_PCIE_ENV = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "sglang", "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "vllm"}


def _tok_s_gain(total: float, gain_ms: float | None) -> float | None:
    return None if gain_ms is None or total - gain_ms <= 0 else 1e3 / (total - gain_ms) - 1e3 / total


def _with_range(f: dict, total: float, low: float | None, high: float | None, kind: str, why: str) -> dict:
    exp = None if low is None or high is None else (low + high) / 2
    return {**f, "gain_low_ms": low, "gain_high_ms": high, "expected_gain_ms": exp, "gain_ms_per_token": exp,
            "gain_tok_s": _tok_s_gain(total, exp), "gain_low_tok_s": _tok_s_gain(total, low),
            "gain_high_tok_s": _tok_s_gain(total, high), "kind": kind, "range_basis": why,
            "key": f"{f['engine']} | {f['change']}"}


def _nccl_block(f: dict, total: float, lat: dict, n: int) -> dict:
    eng = f["engine"]
    if eng in SEED_NCCL_ENGINES:
        return {**f, "kind": "environment", "key": f"{eng} | {f['change']}"}
    blk = next(v for e, v in lat.items() if e in SEED_NCCL_ENGINES) if any(e in SEED_NCCL_ENGINES for e in lat) else None
    if blk is None:
        return {**f, "kind": "environment", "key": f"{eng} | {f['change']}"}
    mine = lat[eng]
    low, high = (n * max(0.0, mine[k] - blk[k]) / 1e3 for k in ("low_us", "high_us"))
    why = (f"{n} collectives x ({eng} without the block - with it) at each kind of host: {mine['low_host']}: "
           f"{mine['low_us']:.2f} - {blk['low_us']:.2f} us; {mine['high_host']}: {mine['high_us']:.2f} - {blk['high_us']:.2f} us "
           "(the published same-host pair); expected: the middle")
    return _with_range({**f, "label": "predicted"}, total, low, high, "environment", why)


def _newer_pcie(decode_path: list[dict], engine: str, studied: str | None) -> dict | None:
    """Chapter 02's reading of a version of ``engine`` other than ``studied`` that has a PCIe all-reduce switch."""
    return next((r for r in decode_path if r.get("engine") == engine and r.get("version") != studied
                 and r.get("setting") == "PCIe all-reduce options" and not str(r.get("choice", "")).startswith("none")), None)


def _custom(f: dict, total: float, lat: dict, n: int, decode_path: list[dict], versions: dict) -> dict:
    eng, mine = f["engine"], lat[f["engine"]]
    cust, label = custom_latency(mine.get("message_bytes", 14336))
    newer = _newer_pcie(decode_path, eng, versions.get(eng))
    low, high = 0.0, n * max(0.0, mine["low_us"] - cust) / 1e3
    why = (f"{mine['low_host']}: {n} collectives x ({mine['low_us']:.2f} - {cust:.2f}) us, the custom kernel against NCCL "
           f"on the same published host ({label.split(';')[0]}); {mine['high_host']}: 0, since the page that published the "
           "kernel found it slower than NCCL on two-socket hosts without switches; expected: the middle")
    if f.get("label") == NOT_IN_VERSION and newer is not None:
        env = next((k for k in _PCIE_ENV if k in str(newer.get("choice"))), None)
        cmd = _launch(eng, 8, {eng: newer["version"]}, env={env: "1"} if env else {})
        return _with_range({**f, "label": NEEDS_VERSION, "needs_version": newer["version"], "check_command": cmd,
                            "basis": f"{f['basis']}; {eng} {newer['version']} has it (chapter 02 read {newer['choice']!r} at "
                                     f"{newer.get('where')})"}, total, low, high, "version", why)
    if f.get("label") == NOT_IN_VERSION:
        return _with_range({**f, "label": NEEDS_VERSION, "needs_version": "a version with the switch (open PR)"},
                           total, low, high, "version", why)
    if f.get("label") != "predicted":   # chapter 02 holds no reading of the version's code: no gain until it does
        return {**f, "kind": "environment", "key": f"{eng} | {f['change']}", "range_basis": why}
    return _with_range(f, total, low, high, "environment", why)


def _attention(f: dict, total: float, served: str, depth: dict | None = None) -> dict:
    """An alternative attention backend. Its high end is its H200 profile carried to the seed's GPU (the whole step of
    both backends from one machine's slices where the profile run has them, ``fixes.measured_alternative``). Its low
    end: 0 where the profile run compared it with the engine's seed backend at depth on one machine and both measures
    found it faster (``depth``: that row of ``backends_at_depth.backend_comparisons``; the change is kept only where the
    seed's host confirms it, so it costs nothing where it does not help), the middle its expected gain; otherwise not
    known: the served measurements on the H200 (``served``) did not find it faster and no code read says its MLA kernels
    run on capability 12.0, so the sign of its gain is unknown and it carries no expected gain (ranked after those that
    do)."""
    g = f.get("gain_ms_per_token")
    settle = ("settled by serving the seed's host with this option alone against the default, at least 2 starts each "
              "(chapter 03)")
    if depth and depth.get("agree") and set(depth["verdict"].values()) == {"a lower"} and g is not None:
        why = (f"high: the alternative measured on the H200 and carried to the seed's GPU; low: 0, where it does not run "
               f"faster on the seed's host and is not kept; on the H200 it is faster at {depth['depth']} MoE layers on one "
               f"machine (unit {depth['run_id']}, {depth['starts']['backend']} and {depth['starts']['seed']} starts): "
               f"served time per token {depth['diff_pct']['tpot_ms']:+.2f}%, GPU busy {depth['diff_pct']['busy_ms']:+.2f}% "
               f"against {depth['seed']}, each beyond the starts rule's margin; the 2-layer slices' served measurements gave no "
               f"verdict between them ({served}); no code read here says its MLA kernels run on capability 12.0; {settle}")
        row = _with_range({**f, "note": seed_tried(), "served": served, "depth": depth["key"], "depth_run_id": depth["run_id"],
                           "depth_moe_layers": depth["depth"], "depth_starts": min(depth["starts"].values()),
                           **{f"depth_{m}_pct": v for m, v in depth["diff_pct"].items()}}, total, 0.0, g, "flag", why)
        return row
    why = ("high: the alternative's attention measured on the H200 and carried by the attention rule; low: not known, "
           "so the sign of the gain is unknown and no expected gain is given: the served measurements on the H200 did not "
           "find it faster (" + served + ") and no code read here says its MLA kernels run on capability 12.0; " + settle)
    row = _with_range({**f, "label": SIGN_UNKNOWN, "note": seed_tried(), "served": served}, total, None, g, "flag", why)
    return {**row, "gain_ms_per_token": None, "gain_tok_s": None}


def rank_by_expected_gain(fixes: list[dict], rows: list[dict], lat: dict, n: int, decode_path: list[dict] = (),
                          versions: dict | None = None, served_note: str = "", depth: dict | None = None) -> list[dict]:
    """``fixes`` (``ranked_fixes``) with gain ranges and expected gains, ranked: predicted changes by expected gain (a
    flag or environment change before another version at equal gain), then the changes that carry none, with why.
    ``depth``: ``{(engine, backend): row}`` of ``backends_at_depth.backend_comparisons`` (the alternative backends
    compared at depth on one machine, :func:`_attention`)."""
    totals = {r["engine"]: r["predicted_ms"] for r in rows if r["category"] == "total"}
    versions = versions or {}
    out = []
    for f in fixes:
        total = totals.get(f["engine"])
        if f["change"].startswith("the seed's NCCL block"):
            out.append(_nccl_block(f, total, lat, n))
        elif f["change"].startswith("custom PCIe all-reduce"):
            out.append(_custom(f, total, lat, n, list(decode_path), versions))
        elif f["change"].startswith("attention backend") and f.get("label") == "predicted":
            out.append(_attention(f, total, served_note or "a served measurement of it on the H200 is not in this run",
                                  (depth or {}).get((f["engine"], f.get("alternative_backend")))))
        else:
            g = f.get("gain_ms_per_token")
            out.append(_with_range(f, total, 0.0, g, "flag", "upper bound from the projection; low: 0") if g is not None
                       else {**f, "kind": "flag", "key": f"{f['engine']} | {f['change']}"})
    for f in out:
        for k in ("gain_low_ms", "gain_high_ms", "expected_gain_ms"):
            f.setdefault(k, None)
    has = [f for f in out if f.get("expected_gain_ms") is not None]
    rest = [f for f in out if f.get("expected_gain_ms") is None]
    has.sort(key=lambda f: (-round(f["expected_gain_ms"], 6), KIND_ORDER.get(f.get("kind"), 2)))
    return has + rest


