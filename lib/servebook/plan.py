"""What-if mode for chapters 03 to 05: what would be measured on the real host, predicted and planned.

    from servebook import plan
    facts = plan.host_facts(store, engine="sglang==0.5.9", model="kimi-k2.5", profile="rtx-pro-6000")
    plan.plan_backends(store, facts)     # 03: one forced launch per backend the engine's code accepts on that GPU
    plan.plan_nccl(store, facts)         # 04: decode all-reduce sizes, the communication floor, the grid command
    plan.plan_bench(store, facts)        # 05: the roofline from the profile and the card, the benchmark commands
    plan.recommended_launch(facts, "flashinfer")   # the engine's launch line with that backend forced

Nothing here measures: every row says it is a plan or a prediction (``source``), and every number
is computed from a data file (the hardware profile, the model card, a recorded run) named in the row.
Rows go to the tables ``plan_commands`` (ready-to-paste commands, by chapter) and ``roofline``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from .errors import ServebookError

__all__ = ["host_facts", "plan_backends", "plan_nccl", "plan_bench", "recommended_launch", "launch_first", "seed_first"]

_PORT = 30000
_RECORDED_NCCL = "h200x2-nccl"  # data/runs/: graph-replayed all-reduce latencies measured on 2x H200 (NVLink)


def host_facts(store, engine: str, model: str, profile: str) -> dict:
    """The profiled host as chapter 01 stored it (GPU count, capability), the engine's interpreter, the model card."""
    from .profiles import load_profile
    from .cards import load_card

    prof = load_profile(profile)
    report = {}
    if (store.path / "probe.json").exists():
        report = json.loads((store.path / "probe.json").read_text())
    count = int(report.get("gpu_count") or 8)  # the probe's default GPU count for a profile
    card = load_card(model)
    python = None
    try:
        from .engines.envs import resolve_engine

        python = resolve_engine(engine).python
    except ServebookError as exc:
        store.record_failure("plan: engine environment", exc, engine=engine)
    return {"engine": engine, "engine_python": python, "model": model, "model_ref": card.get("hf_repo") or model,
            "card": card, "profile": prof["profile"], "profile_data": prof, "gpus": count,
            "capability": prof["capability"], "interconnect": (prof.get("interconnect") or {}).get("kind")}


def _adapter(facts: dict):
    from .engines import get_engine

    return get_engine(facts["engine"], python=facts.get("engine_python"))


def recommended_launch(facts: dict, attention: str | None, env: dict | None = None, address: bool = False) -> str:
    """The engine's launch command on the profiled host with ``attention`` forced (None: the engine's default): the one
    builder of every launch the plan shows, :func:`servebook.engines.user_command` with the arguments the seed verdict's
    ``seed_fixes`` (``profile.fixes``) and chapter 06's recommended launches give it (model, TP size, the forced backend,
    ``env``), so one fix reads the same on every page; checked against the prepared environment's own parser.
    ``address``: also ``--host 127.0.0.1 --port {_PORT}``, for the launch a command beside it talks to (chapter 05's
    benchmark names that URL)."""
    from .engines import user_command

    where = {"host": "127.0.0.1", "port": _PORT} if address else {}
    return user_command(facts["engine"], facts["model_ref"], attention=attention, tp=facts["gpus"], env=env,
                        python=facts.get("engine_python"), check=True, **where)


_PLAN_SOURCE = "plan: not run (what-if)"


def _cmd(chapter: str, purpose: str, command: str, **extra: Any) -> dict:
    return {"chapter": chapter, "purpose": purpose, "command": command, "source": _PLAN_SOURCE, **extra}


def _supersede(store, table: str, chapter: str, rows: list[dict], source: str | None = None) -> list[dict]:
    """Chapter ``chapter``'s rows of ``table`` (of ``source``, where given: the rows of that kind) replaced by ``rows``,
    the chapters in order: a plan or prediction is computed again whole at each execution, so a row whose words changed
    (a purpose renamed, a backend no longer planned) supersedes the earlier one instead of standing beside it. A row
    computed again with the same values keeps its earlier stamps, and where every value is the same the file is left as it
    was (no new ``recorded_at``: a what-if executed again changes no file)."""
    from .executions import execution_id, values_of

    held = store.rows(table, withdrawn=True, executions="all")
    mine = lambda r: r.get("chapter") == chapter and (source is None or r.get("source") == source)  # noqa: E731
    if not rows and not any(mine(r) for r in held):
        return held  # nothing planned, nothing to supersede: no file written
    earlier = {values_of(r): r for r in held if mine(r)}
    stamp = {"execution": store.execution.get("id") or 1, "execution_id": execution_id()}
    new = [earlier.get(values_of(r)) or {**r, **stamp} for r in rows]
    others = [r for r in held if not mine(r)]
    return store.replace(table, sorted(others + new, key=lambda r: str(r.get("chapter"))), unchanged="keep")


def _book_cmd(facts: dict, only: str, extra: str = "") -> str:
    return (f"servebook book --engine {shlex.quote(facts['engine'])} --model /models/{facts['model_ref'].split('/')[-1]}"
            f" --only {only}" + (f" {extra}" if extra else ""))


def _attention_choices(eng) -> list[str]:
    """The engine's own valid values for its attention flag. A prepared environment (no GPU wheels) cannot import
    every module the parser's file imports; SGLang's parser is then read with those modules stubbed."""
    from .errors import EngineError

    try:
        return eng.attention_choices()
    except EngineError:
        if eng.name != "sglang":
            raise
    from pathlib import Path

    from .interpreters import GPU_ONLY, SELECTION_LIBS
    from .selection.envs import DEFAULT_KERNEL_LIBS

    libs = DEFAULT_KERNEL_LIBS.get("sglang", {})
    request = {"flag": eng.attention_flag, "stubs": [m for m in GPU_ONLY if m not in SELECTION_LIBS],
               "visible": [m for m, v in libs.items() if v], "absent": [m for m, v in libs.items() if not v]}
    script = str(Path(__file__).parent / "selection" / "_sglang_choices.py")
    return eng._script_json([script, json.dumps(request)], "could not read SGLang's --attention-backend choices "
                            "(GPU-only modules stubbed)", timeout=300)


def plan_backends(store, facts: dict) -> list[dict]:
    """Chapter 03's plan: the backends of the engine's own list that its own code accepts on the profiled GPU
    (:func:`servebook.selection.accepts.accepted_here`), one forced launch each, and the book command. The backends left
    out, each with its reason and where the engine's code says it, go to table ``plan_left_out``."""
    eng = _adapter(facts)
    try:
        choices = _attention_choices(eng)
    except ServebookError as exc:
        store.record_failure("plan: attention choices", exc, engine=facts["engine"])
        choices = []
    from .selection.accepts import accepted_here

    kept, left = accepted_here(facts["engine"], facts["model"], facts["profile"], choices, tp_size=facts["gpus"]) \
        if choices else ([], [])
    missed = _missed_here(store, facts, eng.name)
    rows = [_cmd("03", "the engine's default (reference for decode-path agreement)", recommended_launch(facts, None),
                 attention="auto")]
    for name in sorted(kept, key=lambda b: (b not in missed, b)):
        why = f": first, {missed[name]}" if name in missed else ""
        rows.append(_cmd("03", f"force {eng.attention_flag} {name}{why}", recommended_launch(facts, name), attention=name,
                         flag=eng.attention_flag))
    rows.append(_cmd("03", "the whole sweep, checked (reported backend, decode-path agreement with the default, decode rate)",
                     _book_cmd(facts, "01,02,03")))
    _supersede(store, "plan_commands", "03", rows, source=_PLAN_SOURCE)
    _supersede(store, "plan_left_out", "03", [{"chapter": "03", "engine": facts["engine"], "of": len(choices), **r}
                                              for r in left])
    return rows


def _missed_here(store, facts: dict, engine: str) -> dict[str, str]:
    """The backends chapter 02's what-if says a hardware helper kept from this GPU (planned first), with why."""
    from .selection.rootcause import root_causes

    missed: dict[str, str] = {}
    for c in root_causes(store):
        if c["decision"] in ("fallback", "hypothesis") and c["gpu"] == facts["profile"] and c["engine"] == engine:
            for m in c["missed"]:
                for b in m["would_write"]:
                    missed.setdefault(b, f"{m['helper']} kept it from this GPU ({', '.join(m['at'])})")
    return missed


def seed_first(facts: dict, fixes: list[dict]) -> list[dict]:
    """The seed verdict's first change for this engine (``profile.gains``: the largest expected gain in ``seed_fixes``), as
    chapter 06's first launch to try: its own check command, ahead of the launches the root causes name."""
    eng = facts["engine"].split("==")[0]
    f = next((f for f in fixes if f.get("expected_gain_ms") is not None and f["engine"] == eng), None)
    if f is None:
        return []
    return [{"why": (f"{eng} (predicted): the seed verdict's first change, `{f['change']}`, the largest expected gain in "
                     "`seed_fixes` (its range and what settles it are in the verdict above)"),
             "launch": f["check_command"], "decision": "predicted"}]


def launch_first(facts: dict, causes: list[dict]) -> list[dict]:
    """Chapter 06's launches to try first on the profiled host: one per backend a hardware helper kept from this GPU
    (``causes``: :func:`servebook.selection.rootcause.root_causes`, a fallback or a hypothesis of this engine on this
    profile), each with why (source locations as code) and the cause's decision."""
    from .stated.text import code, code_locations

    out = []
    for c in causes:
        if c["decision"] in ("fallback", "hypothesis") and c["engine"] == facts["engine"].split("==")[0] and c["gpu"] == facts["profile"]:
            for m in c["missed"]:
                for backend in m["would_write"]:
                    out.append({"why": f"{c['engine']} {c['version']} ({c['decision']}): {code_locations(m['helper'])} kept "
                                       f"`{backend}` ({', '.join(code(a) for a in m['at'])}) from this GPU",
                                "launch": recommended_launch(facts, backend), "decision": c["decision"]})
    return out


def _nccl_latencies(hidden: int) -> list[dict]:
    """Graph-replayed all-reduce latency at batch 1 from the recorded H200 x2 run (NVLink), for the card's width."""
    from .paths import data_dir
    from .results import RunStore

    path = data_dir() / "runs" / _RECORDED_NCCL
    if not (path / "manifest.json").exists():
        return []
    rec = RunStore(path)
    ar = rec.table("allreduce")
    if ar.empty:
        return []
    size = hidden * 2
    sel = ar[(ar["bytes"] == size) & (ar["mode"] == "graph") & (ar["path"] == "torch")]
    if "shape_study" in sel:
        sel = sel[sel["shape_study"] != True]  # noqa: E712
    if sel.empty:
        return []
    by = sel.groupby("setting")["us_median"].median()
    out = [{"setting": "default", "us": float(by["default"])}] if "default" in by else []
    best = by.idxmin()
    if best != "default":
        out.append({"setting": best, "us": float(by[best])})
    return [o | {"bytes": size, "measured_on": f"data/runs/{_RECORDED_NCCL} (2x H200, NVLink, NCCL graph replay)"} for o in out]


def _collectives(facts: dict) -> int:
    """Collectives per decode token at the profile's GPU count: the one count of ``profile.comm`` (read in the engines'
    code) that chapters 04, 05 and 06 all state; 2 per layer where the card has no vocabulary to count the rest."""
    from .profile.comm import collectives_per_token
    from .roofline import allreduces_per_token

    try:
        return collectives_per_token(facts["card"], max(2, int(facts["gpus"])))
    except (KeyError, TypeError, ValueError):
        return allreduces_per_token(facts["card"])


def _floor_latencies(facts: dict, message_bytes: int) -> list[dict]:
    """One all-reduce's latency for the communication floor: on a PCIe profile, each engine's central latency and range
    from published 8-rank PCIe figures by the NCCL environment the seed ran it with (``profile.comm``: the rule chapter 06
    uses); on an NVLink profile, the H200 x2 NVLink grid's."""
    if facts["interconnect"] == "NVLink":
        return _nccl_latencies(message_bytes // 2)
    from .profile.comm import engine_latencies

    out = []
    for eng, L in engine_latencies(message_bytes).items():
        out.append({"setting": f"{eng} ({'the seed' + chr(39) + 's NCCL block' if L['env'] == 'seed block' else 'NCCL default'})",
                    "us": L["central_us"], "allreduce_us_low": L["low_us"], "allreduce_us_high": L["high_us"],
                    "bytes": message_bytes, "measured_on": ("published 8-rank PCIe figures, central of "
                                                           f"{L['low_us']:.2f}-{L['high_us']:.2f} us "
                                                           "(data/reference/allreduce-pcie-published.json; profile.comm)")})
    return out


def plan_nccl(store, facts: dict) -> list[dict]:
    """Chapter 04's plan: decode all-reduce sizes, the communication floor per token, and the grid command."""
    from .nccl import model_dims, nccl_tests_command

    dims = model_dims(facts["card"])
    per_token = _collectives(facts)
    rows = []
    for r in _floor_latencies(facts, dims["hidden_size"] * 2):
        row = {"chapter": "04", "case": f"communication floor, TP={facts['gpus']}, batch 1, latency {r['setting']}",
               "allreduces_per_token": per_token, "allreduce_us": r["us"], "t_comm_ms": per_token * r["us"] / 1e3,
               "message_bytes": r["bytes"], "latency_source": r["measured_on"],
               "caveat": "the real latency here is measured by chapter 04 on the host" if facts["interconnect"] != "NVLink" else "",
               "source": "prediction: card x recorded latency"}
        rows.append({**row, **{k: r[k] for k in ("allreduce_us_low", "allreduce_us_high") if k in r}})
    sens = {"chapter": "04", "case": f"communication floor per microsecond of all-reduce latency, TP={facts['gpus']}",
            "allreduces_per_token": per_token, "allreduce_us": 1.0, "t_comm_ms": per_token / 1e3,
            "message_bytes": dims["hidden_size"] * 2, "latency_source": "1 us (sensitivity)", "caveat": "",
            "source": "prediction: card"}
    rows.append(sens)
    # derived from data files and published figures: computed again whole, superseding an older count or latency rule
    _supersede(store, "roofline", "04", rows)
    _supersede(store, "plan_commands", "04", [
        _cmd("04", "NCCL grid at the model's decode sizes (graph-replayed, sums checked)",
             f"python -m servebook.nccl --model {facts['model']} --out runs/nccl-{facts['profile']}"),
        _cmd("04", "nccl-tests reference at the model's decode sizes, batch 1 to 64 (graph mode, as engines issue it)",
             nccl_tests_command(facts["card"], facts["gpus"])),
        _cmd("04", "the chapter, with the book's checks", _book_cmd(facts, "04"))], source=_PLAN_SOURCE)
    return rows


def plan_bench(store, facts: dict) -> list[dict]:
    """Chapter 05's plan: the single-stream roofline from the profile and the card, and the benchmark commands."""
    from . import roofline

    card, prof = facts["card"], facts["profile_data"]
    arch = roofline.config_bytes_per_token(card)
    bw = prof["memory_bandwidth_tbs"]
    rows = []
    one = roofline.decode_roofline(arch["bytes_per_token"], bw, tp=facts["gpus"], allreduce_us=0.0,
                                   allreduces_per_token=roofline.allreduces_per_token(card)) if facts["gpus"] > 1 else \
        roofline.decode_roofline(arch["bytes_per_token"], bw)
    cases = [("bandwidth only", one)]
    for lat in store.find("roofline", chapter="04"):
        if lat.get("latency_source", "").startswith("1 us"):
            continue
        cases.append((f"bandwidth + {lat['case'].split(', ')[-1]} ({lat['allreduce_us']:.1f} us)",
                      roofline.decode_roofline(arch["bytes_per_token"], bw, tp=facts["gpus"], allreduce_us=lat["allreduce_us"],
                                               allreduces_per_token=lat["allreduces_per_token"])))
    for label, r in cases:
        row = {"chapter": "05", "case": f"{facts['model']} on {facts['gpus']}x {facts['profile']}, batch 1: {label}",
               "tok_s": r["tok_s"], "tok_s_bandwidth": r["tok_s_bandwidth"], "t_mem_ms": r["t_mem_ms"], "t_comm_ms": r["t_comm_ms"],
               "bytes_per_token": r["bytes_per_token"], "bandwidth_tbs": bw, "tp": facts["gpus"],
               "bytes_method": arch["method"], "source": f"prediction: data/models/{facts['model']}.json x data/hardware/{facts['profile']}.json"}
        rows.append(row)
    # derived from data files and chapter 04's floor: computed again whole, superseding an older floor
    _supersede(store, "roofline", "05", rows)
    _supersede(store, "plan_commands", "05", [
        _cmd("05", "start the engine as it would run by default, at the address the benchmark below names",
             recommended_launch(facts, None, address=True), attention="auto"),
        _cmd("05", "single stream and concurrency sweep against it (same client for every engine)",
             f"servebook bench --url http://127.0.0.1:{_PORT} --engine {facts['engine'].split('==')[0]} --concurrency "
             f"1,2,4,8,16,32,64 --out runs/bench-{facts['profile']}"),
        _cmd("05", "the chapter, with the roofline against what was measured", _book_cmd(facts, "05"))], source=_PLAN_SOURCE)
    return rows
