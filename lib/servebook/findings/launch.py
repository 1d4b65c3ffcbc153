"""The launch command chapter 06 recommends per engine: a forced backend or NCCL setting only where the run
measured that it helps, at the tensor-parallel size the run's measurements ran at (read from the launches they
recorded, never assumed from the host's GPU count), written by the engine's own adapter
(:func:`servebook.engines.user_command`)."""

from __future__ import annotations

import re

from ..engines import user_command
from ..stated.tags import q
from ..stated.text import code_locations
from ..results import RunStore
from ..stated.intervals import _overlap
from .tables import backends, host_summary, nccl, selection, throughput

__all__ = ["launch_commands"]


def _tried(store: RunStore, launch: str) -> str:
    """What the seed case already did with a launch's forced attention backend, and what was measured serving it (the
    seed verdict's row of ``seed_fixes`` for that backend), so a reader does not take it for untried."""
    from ..profile.seed import served_alternative, served_words

    m = re.search(r"--attention-backend (\S+)", launch or "")
    row = next((f for f in store.rows("seed_fixes") if m and f.get("change") == f"attention backend {m.group(1)}"
                and f.get("note")), None)
    if row is None:
        return ""
    served = served_words(served_alternative(m.group(1)))
    ranked = row.get("expected_gain_ms") is not None
    return (f" ({row['note']}" + (f"; {served}" if served else "")
            + ("; the seed verdict ranks it by its expected gain, above)" if ranked else
               f"; the seed verdict gives it no expected gain ({row.get('label')}), so it is a check, not a ranked change)"))


def ranked_fixes(store: RunStore) -> list[dict]:
    """The seed verdict's changes with an expected gain (table ``seed_fixes``, in its order: ranked by expected gain),
    each with ``rank`` (1 = the largest gain) and ``versions_above`` (how many ranked above it need another version of
    an engine)."""
    fixes = [f for f in store.rows("seed_fixes") if f.get("expected_gain_ms") is not None]
    return [{**f, "rank": i + 1, "versions_above": sum(1 for g in fixes[:i] if g.get("kind") == "version")}
            for i, f in enumerate(fixes)]


def _fix_of(fixes: list[dict], launch: str) -> dict | None:
    """The row of ``fixes`` (``seed_fixes`` rows) a launch tries: the one whose check command it is, or that forces the
    attention backend it forces."""
    m = re.search(r"--attention-backend (\S+)", launch or "")
    return next((f for f in fixes if f.get("check_command") == launch
                 or (m and f.get("change") == f"attention backend {m.group(1)}")), None)


def _rank(store: RunStore, launch: str) -> str:
    """Where a what-if launch stands among the seed verdict's changes ranked by expected gain (:func:`ranked_fixes`), and
    why the changes ranked above it are not launches to try here (another version of the engine), so that "first" and
    "next" are not read as that ranking: "" where the launch is no row of it."""
    fixes = ranked_fixes(store)
    f = _fix_of(fixes, launch)
    if f is None:
        return ""
    of = f.get("change")
    return (f" (ranked {q('seed_fix_rank', f['rank'], 'd', of=of)} of {q('seed_fixes_ranked', len(fixes), 'd')} by "
            "expected gain in `seed_fixes`"
            + (f"; {q('seed_fix_versions_above', f['versions_above'], 'd', of=of)} of the changes ranked above it need "
               "another version of an engine, so they are no launch here" if f["versions_above"] else "") + ")")


def launch_commands(store: RunStore, found_backends: list[dict] | None = None, found_nccl: dict | None = None,
                    host: dict | None = None) -> list[dict]:
    """A recommended launch command per engine the run studied: a forced backend only where it was measurably
    faster and correct; NCCL variables only where they beat the defaults and the engine runs on several GPUs."""
    params = store.manifest.get("parameters") or {}
    if params.get("profile"):  # what-if: nothing was measured; the launch to try first comes from the root causes
        return _whatif_commands(store, params)
    found_backends = backends(store) if found_backends is None else found_backends
    found_nccl = nccl(store) if found_nccl is None else found_nccl
    host = host_summary(store) if host is None else host
    sel = {s["engine"]: s for s in selection(store) if s.get("case") == "this-host"}
    model = host.get("model") or "MODEL"
    model_ref = "MODEL" if model in ("embedded", None) else model
    gpus = int(host.get("gpu_count") or 0)
    out = []
    for eng in _engines_studied(store, found_backends, sel):
        b = next((x for x in found_backends if x["engine"] == eng), {})
        measured = _measured_tp(store, eng)
        tp = max(measured, default=1)  # a size the run served this engine at; the engine's default when none was recorded
        attention, why = _backend_choice(b, sel, eng)
        extra, env, tp = _nccl_choice(found_nccl or {}, eng, tp, gpus, why)
        if eng != "transformers":  # its server has no tensor parallelism
            why.append(_tp_line(measured, tp, gpus, attention))
        beside = _measured_with(store, eng)
        if beside:
            why.append(f"the rates were measured with `{beside}` as well (this run's own launch lines); the command leaves "
                       "them out: add them to reproduce those rates")
        text = user_command(eng, model_ref, attention=attention, tp=tp, env=env,
                            extra_args=extra, version=b.get("version"))
        out.append({"engine": eng, "command": text, "env": env, "why": why})
    return out


def _whatif_commands(store: RunStore, params: dict) -> list[dict]:
    """A what-if run's launches to try on the real host, in the order of its recommended launches (root causes), each
    with the chapters that check it there; the engine's default where no hardware helper caused a fallback."""
    engine = str(params.get("engine") or "").split("==")[0]
    rec = store.rows("recommended_launch")
    if rec:
        fixes = ranked_fixes(store)
        return [{"engine": engine, "command": r["launch"], "env": {}, "decision": r.get("decision"),
                 "fix": _fix_of(store.rows("seed_fixes"), r["launch"]), "rank": _fix_of(fixes, r["launch"]),
                 "ranked": len(fixes),
                 "why": [f"what-if on the {params['profile']} hardware profile: {code_locations(r['why'])}; try it "
                         + ("first" if i == 0 else "next") + " on the real host, then check it there with "
                         + ("chapter 04 (all-reduce with and without the setting) and chapter 05 (decode rate)"
                            if r.get("decision") == "predicted" else
                            "chapter 03 (reported backend, decode-path agreement, decode rate)") + _rank(store, r["launch"])
                         + _tried(store, r["launch"])]}
                for i, r in enumerate(rec)]
    return [{"engine": engine, "command": "", "env": {},
             "why": [f"what-if on the {params['profile']} profile: no fallback caused by a hardware helper was found; "
                     "keep the engine's default and measure on the real host (chapters 03 and 05)"]}]


def _engines_studied(store: RunStore, found_backends: list[dict], sel: dict) -> list[str]:
    """The engines the run studied, once each: chapter 03's, then chapter 02's, then those only benchmarked (05) or
    measured end to end at TP>1 (04)."""
    engines = [b["engine"] for b in found_backends] + [e for e in sel if e not in {b["engine"] for b in found_backends}]
    engines += [r.get("engine") for r in throughput(store) if r.get("engine") and r.get("engine") not in engines]
    engines += [r.get("engine") for r in store.rows("tp_e2e") if r.get("engine") and r.get("engine") not in engines]
    return list(dict.fromkeys(engines))


def _backend_choice(b: dict, sel: dict, eng: str) -> tuple[str | None, list[str]]:
    """The attention backend to force (None: the engine's own choice) and why, from chapter 03's measurement."""
    if b.get("change_supported"):
        return b["best"], [f"{b['best']} was faster than the default beyond both 95% intervals and agreed with it on "
                           f"{(b.get('best_agreement') or 0):.0%} of greedy tokens"]
    if b.get("correct"):
        return None, ["no forced backend beat the default beyond the 95% intervals: keep the engine's own choice"
                      + (f" ({b['default_reported']})" if b.get("default_reported") else "")]
    return None, ["no backend measurement in this run: the engine's own choice"
                  + (f" ({sel[eng]['backend']}, chapter 02)" if eng in sel else "")]


def _nccl_choice(n: dict, eng: str, tp: int, gpus: int, why: list[str]) -> tuple[list[str], dict[str, str], int]:
    """The engine arguments, NCCL variables and TP size of the communication setting chapter 04 measured faster end to
    end (none where nothing beat the default), with why appended to ``why``."""
    extra: list[str] = []
    env: dict[str, str] = {}
    e2e = [x for x in (n.get("measured_effect") or []) if x.get("engine") == eng]
    if eng != "transformers" and e2e:
        # only what the engine itself measured faster at TP>1, beyond the intervals: against its default, the
        # custom all-reduce off; against that, an NCCL block (which reaches decode only with the custom one off)
        best = max((x for x in e2e if x["supported"]), key=lambda x: x["tok_s"] or 0, default=None)
        off = next((x for x in e2e if x["setting"] == "custom all-reduce off"), None)
        if best is not None and (best["setting"] == "custom all-reduce off" or (off and off["supported"]) or
                                 best["setting"] != "custom all-reduce off" and _beats_default(e2e, best)):
            extra += list(best["args"])
            env.update({k: str(v) for k, v in best["env"].items()})
            tp = int(best["tp"])  # the size the setting was measured faster at
            why.append(f"at TP={best['tp']}, {best['setting']}: {best['verdict']} against {best['vs']} (chapter 04, measured end to end)")
        else:
            why.append(f"at TP={e2e[0]['tp']}, no communication setting beat the engine's default beyond the 95% intervals "
                       "(chapter 04, measured end to end): keep the engine's all-reduce and NCCL's defaults")
    elif eng != "transformers" and n.get("backend") == "nccl" and n.get("within_spread"):
        why.append(f"NCCL: no setting is supported, so no variables are set (the grid's fastest, `{n['setting']}`: "
                   f"{q('nccl_fact', n.get('reason'), of='reason')}; a gain no more than the run-to-run spread between two "
                   "recordings of the grid, chapter 04)")
    elif eng != "transformers" and (tp > 1 or gpus > 1) and n.get("backend") == "nccl":
        why.append("NCCL: not confirmed end to end in this run, so no variables are set"
                   + (f" (the grid predicts `{n['setting']}`: {q('nccl_fact', n.get('reason'), of='reason')}; chapter 04 with "
                      "tp_check measures it)" if n.get("setting") not in (None, "default") else f" ({q('nccl_fact', n.get('reason'), of='reason')})"))
    return extra, env, tp


_TP_FLAG = re.compile(r"(?:--tensor-parallel-size|--tp-size|--tp)[ =](\d+)")
_TP_TABLES = {"backends": "03", "bench_servers": "05", "bench_starts": "05"}


def _measured_tp(store: RunStore, engine: str) -> dict[int, list[str]]:
    """The tensor-parallel sizes this run served ``engine`` at, each with the chapters that measured there: read from
    the launch line every recorded server start wrote (chapters 03 and 05; a line without the flag ran at the
    engine's default, 1) and from chapter 04's end-to-end rows (``tp_e2e``)."""
    seen = [(int(m.group(1)) if (m := _TP_FLAG.search(str(r["launch"]))) else 1, chapter)
            for table, chapter in _TP_TABLES.items() for r in store.rows(table) if r.get("engine") == engine and r.get("launch")]
    seen += [(int(r["tp"]), "04") for r in store.rows("tp_e2e") if r.get("engine") == engine and r.get("tp")]
    out: dict[int, list[str]] = {}
    for size, chapter in seen:
        if chapter not in out.setdefault(size, []):
            out[size].append(chapter)
    return dict(sorted(out.items()))


def _tp_line(measured: dict[int, list[str]], tp: int, gpus: int, attention: str | None) -> str:
    """Why the command runs at ``tp``: the sizes the run measured at (by chapter), and what it did not measure where
    the host has more GPUs than the measurements used."""
    n_gpus = q("host_gpu_count", gpus, "d") if gpus else None
    if not measured:
        return ("tensor parallelism left at the engine's default (TP=1): no server start of this engine is recorded in "
                "this run, so no size was measured" + (f" (the host has {n_gpus} GPUs)" if gpus > 1 else ""))
    at = "; ".join(f"TP={k} (chapter{'s' if len(v) > 1 else ''} {' and '.join(sorted(v))})" for k, v in measured.items())
    line = f"measured at {at}"
    if attention and tp not in {k for k, v in measured.items() if "03" in v}:
        line += f"; the forced backend was measured at TP={min(k for k, v in measured.items() if '03' in v)} only"
    if gpus > max(measured):
        line += (f", on {'one' if max(measured) == 1 else 'some'} of {n_gpus} GPUs; TP={gpus} not measured here, so the command "
                 f"runs at TP={tp}")
    return line


_OWN = {"--model-path", "--model", "--host", "--port", "--tensor-parallel-size", "--tp-size", "--tp", "--attention-backend"}


def _measured_with(store: RunStore, engine: str) -> str:
    """The arguments the recorded launches of ``engine``'s default (chapter 03's ``auto``, chapter 05's servers) carried
    beside the model, address, TP size and backend that the recommended command writes itself (the run's ``engine_args``,
    ``--load-format dummy`` for a slice without weights), each once in the order first launched; "" where none."""
    import shlex

    lines = [r.get("launch") for r in store.rows("backends")
             if r.get("engine") == engine and r.get("attention") == "auto" and r.get("mode") != "eager"]  # the mode recommended
    lines += [r.get("launch") for r in store.rows("bench_servers") if r.get("engine") == engine]
    sets = []
    for line in filter(None, lines):
        words, extra, i = shlex.split(str(line)), [], 0
        while i < len(words) and not words[i].startswith("--"):
            i += 1  # interpreter, module, "serve MODEL"
        while i < len(words):
            w = words[i]
            has_value = i + 1 < len(words) and not words[i + 1].startswith("--")
            if w.split("=")[0] not in _OWN:
                extra.append(w + (f" {words[i + 1]}" if has_value else ""))
            i += 2 if has_value else 1
        sets.append(extra)
    return " ".join(dict.fromkeys(a for extra in sets for a in extra))  # each once, in the order first launched


def _beats_default(e2e: list[dict], best: dict) -> bool:
    """Whether ``best`` (measured against "custom all-reduce off") is also faster than the engine's default beyond the intervals."""
    d = next((x for x in e2e if x["setting"] == "engine default"), None)
    return bool(d and d["tok_s"] and best["tok_s"] and best["tok_s"] > d["tok_s"]
                and not _overlap(best["tok_s"], best["ci95"] or 0, d["tok_s"], d["ci95"] or 0))

