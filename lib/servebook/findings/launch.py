"""The launch command chapter 06 recommends per engine: a forced backend or NCCL setting only where the run
measured that it helps, written by the engine's own adapter (:func:`servebook.engines.user_command`)."""

from __future__ import annotations

from ..engines import user_command
from ..stated.tags import q
from ..stated.text import code_locations
from ..results import RunStore
from .intervals import _overlap
from .tables import backends, host_summary, nccl, selection, throughput

__all__ = ["launch_commands"]


def launch_commands(store: RunStore, found_backends: list[dict] | None = None, found_nccl: dict | None = None,
                    host: dict | None = None) -> list[dict]:
    """A recommended launch command per engine the run studied: a forced backend only where it was measurably
    faster and correct; NCCL variables only where they beat the defaults and the engine runs on several GPUs."""
    params = store.manifest.get("parameters") or {}
    if params.get("profile"):  # what-if: nothing was measured; the launch to try first comes from the root causes
        engine = str(params.get("engine") or "").split("==")[0]
        rec = store.rows("recommended_launch")
        if rec:
            return [{"engine": engine, "command": r["launch"], "env": {},
                     "why": [f"what-if on the {params['profile']} profile: {code_locations(r['why'])}; try it first on the real host, "
                             "then check it there with chapter 03 (reported backend, greedy agreement, decode rate)"]} for r in rec]
        return [{"engine": engine, "command": "", "env": {},
                 "why": [f"what-if on the {params['profile']} profile: no fallback caused by a hardware helper was found; "
                         "keep the engine's default and measure on the real host (chapters 03 and 05)"]}]
    found_backends = backends(store) if found_backends is None else found_backends
    found_nccl = nccl(store) if found_nccl is None else found_nccl
    host = host_summary(store) if host is None else host
    sel = {s["engine"]: s for s in selection(store) if s.get("case") == "this-host"}
    engines = [b["engine"] for b in found_backends] + [e for e in sel if e not in {b["engine"] for b in found_backends}]
    engines += [r.get("engine") for r in throughput(store) if r.get("engine") and r.get("engine") not in engines]
    engines += [r.get("engine") for r in store.rows("tp_e2e") if r.get("engine") and r.get("engine") not in engines]
    model = host.get("model") or "MODEL"
    model_ref = "MODEL" if model in ("embedded", None) else model
    tp = max(1, int(host.get("gpu_count") or 1))
    out = []
    for eng in dict.fromkeys(engines):
        b = next((x for x in found_backends if x["engine"] == eng), {})
        attention, extra = None, []
        env: dict[str, str] = {}
        why = []
        if b.get("change_supported"):
            attention = b["best"]
            why.append(f"{b['best']} was faster than the default beyond both 95% intervals and agreed with it on "
                       f"{(b.get('best_agreement') or 0):.0%} of greedy tokens")
        elif b.get("correct"):
            why.append("no forced backend beat the default beyond the 95% intervals: keep the engine's own choice"
                       + (f" ({b['default_reported']})" if b.get("default_reported") else ""))
        else:
            why.append("no backend measurement in this run: the engine's own choice"
                       + (f" ({sel[eng]['backend']}, chapter 02)" if eng in sel else ""))
        n = found_nccl or {}
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
                why.append(f"at TP={best['tp']}, {best['setting']}: {best['verdict']} against {best['vs']} (chapter 04, measured end to end)")
            else:
                why.append(f"at TP={e2e[0]['tp']}, no communication setting beat the engine's default beyond the 95% intervals "
                           "(chapter 04, measured end to end): keep the engine's all-reduce and NCCL's defaults")
        elif eng != "transformers" and tp > 1 and n.get("backend") == "nccl":
            why.append("NCCL: not confirmed end to end in this run, so no variables are set"
                       + (f" (the grid predicts `{n['setting']}`: {q('nccl_fact', n.get('reason'), of='reason')}; chapter 04 with "
                          "tp_check measures it)" if n.get("setting") not in (None, "default") else f" ({q('nccl_fact', n.get('reason'), of='reason')})"))
        text = user_command(eng, model_ref, attention=attention, tp=tp, env=env,
                            extra_args=extra, version=b.get("version"))
        out.append({"engine": eng, "command": text, "env": env, "why": why})
    return out


def _beats_default(e2e: list[dict], best: dict) -> bool:
    """Whether ``best`` (measured against "custom all-reduce off") is also faster than the engine's default beyond the intervals."""
    d = next((x for x in e2e if x["setting"] == "engine default"), None)
    return bool(d and d["tok_s"] and best["tok_s"] and best["tok_s"] > d["tok_s"]
                and not _overlap(best["tok_s"], best["ci95"] or 0, d["tok_s"], d["ci95"] or 0))

