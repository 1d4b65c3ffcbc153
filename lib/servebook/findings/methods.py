"""Chapters 03 and 05 both measure the engine's default single stream: whether they measured it the same way.

    for m in default_methods(store):      # per engine measured by both: the two numbers and the method of each
        print(m["same_method"], m["differences"])
    say_default_methods(default_methods(store))   # markdown: the two numbers side by side, and what differs

Chapter 03's rate is a short check beside each forced backend (prompts of 32 tokens, twice its ``max_tokens`` out, one
warm-up, ``runs`` runs); chapter 05's is the benchmark (``input_len`` in, ``max_tokens`` out, ``warmup``, ``runs``). On
h200x1-live chapter 03 measured SGLang's default on the random-weight slice at 64 tokens (688 ± 12 tok/s) and chapter 05
on the dummy-weight slice at 128 (581 ± 76): two methods, not one number twice. Rows recorded before the method was
written on them (``bench_*`` on chapter 03's rows, ``prompts_sha`` on chapter 05's) are read from their launch line and
the code and parameters that recorded them, and say so.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ..bench.sse import EARLIER_RULE, timed_to
from ..results import RunStore
from ..stated.intervals import ONE_START, _num, _overlap, starts_of

__all__ = ["default_methods", "say_default_methods", "method_figures", "model_of_launch", "bench_method", "method_differences",
           "default_method", "workload_words"]

_LEGACY_03_INPUT_LEN = 32  # chapter 03's rate before its rows recorded the method: bench.build_prompts(tok, 32, runs + 1, seed=0)


def model_of_launch(launch: str | None) -> str | None:
    """The model directory a recorded launch line served (SGLang ``--model-path X``, vLLM ``serve X``), else None."""
    text = str(launch or "")
    m = re.search(r"--model(?:-path)?[ =](\S+)", text) or re.search(r"\bserve\s+(?!-)(\S+)", text)
    return m.group(1) if m else None


def _weights(launch: str | None) -> str | None:
    if not launch:
        return None
    return "dummy (--load-format dummy)" if re.search(r"--load-format[ =]dummy", launch) else "from the checkpoint"


def _chapter_param(store: RunStore, prefix: str, name: str) -> Any:
    """A chapter parameter as its executed notebook in the run has it (injected, else the notebook's default), else None."""
    for nb_path in sorted((store.path / "notebooks").glob(f"{prefix}_*.ipynb")):
        try:
            cells = json.loads(nb_path.read_text()).get("cells", [])
        except (OSError, ValueError):
            continue
        for tag in ("injected-parameters", "parameters"):
            for c in cells:
                if tag not in c.get("metadata", {}).get("tags", []):
                    continue
                for line in "".join(c.get("source", "")).splitlines():
                    m = re.match(rf"^{name}\s*(?::[^=]*)?=\s*(.+?)\s*(?:#.*)?$", line)
                    if m:
                        try:
                            return ast.literal_eval(m.group(1))
                        except (ValueError, SyntaxError):
                            pass
    return None


def _ch03(store: RunStore, engine: str) -> dict | None:
    rows = [r for r in store.rows("backends") if r.get("engine") == engine and r.get("attention") == "auto" and r.get("outcome") == "ok"
            and _num(r.get("decode_tok_s")) is not None]
    for mode in ("graph", "default", None):
        pick = [r for r in rows if mode is None or r.get("mode", "default") == mode]
        if pick:
            r = pick[-1]
            break
    else:
        return None
    legacy = r.get("bench_max_tokens") is None
    mt = _chapter_param(store, "03", "max_tokens") if legacy else None
    out = {"tok_s": _num(r["decode_tok_s"]), "ci95": _num(r.get("decode_tok_s_ci95")), "starts": starts_of(r),
           "model": r.get("bench_model") or model_of_launch(r.get("launch")), "weights": _weights(r.get("launch")),
           "input_tokens": r.get("bench_input_len") or _LEGACY_03_INPUT_LEN,
           "output_tokens": r.get("bench_max_tokens") or (2 * int(mt) if isinstance(mt, int) else None),
           "prompt_seed": r.get("bench_prompt_seed", 0), "prompts_sha": r.get("bench_prompts_sha"),
           "warmup": r.get("bench_warmup", 1), "runs": r.get("bench_runs") or _runs_of(r.get("bench_method")), "mode": r.get("mode"),
           "legacy": legacy, "decode_timed_to": r.get("bench_decode_timed_to") or EARLIER_RULE}
    return out


def default_method(store: RunStore, engine: str, chapter: str, label: str | None = None) -> dict | None:
    """How chapter ``chapter`` ("03" or "05") measured ``engine``'s default single stream in this run (``label``: chapter
    05's configuration), as its rows recorded it: the rate, prompt and output tokens, warm-ups, runs, starts; else None."""
    return _ch03(store, engine) if chapter == "03" else _ch05(store, engine, label)


def workload_words(m: dict | None) -> str:
    """A measurement's workload as it ran (``default_method``): "prompt tokens 32, output tokens 128, runs 3". Chapter 03
    generates twice its ``max_tokens`` parameter, so the parameter is not the workload."""
    if not m:
        return ""
    items = (("prompt tokens", "input_tokens"), ("output tokens", "output_tokens"), ("runs", "runs"))
    return ", ".join(f"{what} {m[key]}" for what, key in items if m.get(key) is not None)


def _runs_of(method: str | None) -> int | None:
    m = re.search(r"then (\d+) runs", str(method or ""))
    return int(m.group(1)) if m else None


def _ch05(store: RunStore, engine: str | None, label: str | None = None) -> dict | None:
    """Chapter 05's single stream and its method: ``engine``'s default (its first label), or the configuration ``label``."""
    from ..bench.runs import current, over_starts

    rows, _ = current(store.rows("bench_summary"))
    single = [r for r in rows if r.get("phase") == "single" and _num(r.get("decode_tok_s_mean")) is not None and (
        r.get("label") == label if label else r.get("engine") == engine and r.get("attention") in ("default", "", None))]
    if not single:
        return None
    label = single[0].get("label")
    mine = [r for r in single if r.get("label") == label]
    o = over_starts(mine)
    s = next((r for r in mine if not r.get("start")), mine[0])
    started = [r for r in store.rows("bench_starts") if r.get("label") == label]
    launch = next((r.get("launch") for r in reversed(store.rows("bench_servers")) if r.get("label") == label), None)
    params = store.manifest.get("parameters") or {}
    return {"tok_s": _num(o["mean"]), "ci95": _num(o["ci95"]), "starts": o["starts"], "label": label,
            "model": (started[-1].get("model") if started else None) or model_of_launch(launch) or params.get("model_on_host") or params.get("model"),
            "weights": _weights(launch), "input_tokens": _int(s.get("input_tokens")), "output_tokens": s.get("max_tokens"),
            "prompt_seed": s.get("prompt_seed") if s.get("prompt_seed") is not None else _chapter_param(store, "05", "seed"),
            "prompts_sha": s.get("prompts_sha"), "warmup": s.get("warmup"), "runs": s.get("runs"),
            "legacy": s.get("prompts_sha") is None, "decode_timed_to": timed_to(s)}


def _int(v):
    f = _num(v)
    return int(round(f)) if f is not None else None


_COMPARED = [("model directory", "model"), ("weights", "weights"), ("prompt tokens", "input_tokens"), ("output tokens", "output_tokens"),
             ("prompts", "prompts"), ("warm-up requests", "warmup"), ("runs per start", "runs"), ("server starts", "starts"),
             ("decode timed to", "decode_timed_to")]  # the last token's read, or the stream's end (rows recorded before: bench.sse)


def _prompts(m: dict) -> str:
    if m.get("prompts_sha"):
        return f"{m['prompts_sha']} (seed {m.get('prompt_seed')})"
    return f"seed {m.get('prompt_seed')}, {m.get('input_tokens')}-token windows" if m.get("prompt_seed") is not None else "not recorded"


def _compare(a: dict, b: dict, side_a: str, side_b: str, items=None) -> tuple[list[dict], list[dict]]:
    """Every compared item of two measurements' methods ({what, side_a: .., side_b: ..}) and those that differ. An item
    one side did not record is shown, not counted a difference."""
    method, diffs = [], []
    for what, key in items or _COMPARED:
        va, vb = (_prompts(a), _prompts(b)) if key == "prompts" else (a.get(key), b.get(key))
        method.append({"what": what, side_a: va, side_b: vb})
        if key == "prompts":
            differ = (a.get("prompts_sha") != b.get("prompts_sha") if a.get("prompts_sha") and b.get("prompts_sha")
                      else (a.get("prompt_seed"), a.get("input_tokens")) != (b.get("prompt_seed"), b.get("input_tokens")))
        else:
            differ = va is not None and vb is not None and str(va) != str(vb)
        if differ:
            diffs.append({"what": what, side_a: va, side_b: vb})
    return method, diffs


def bench_method(store: RunStore, label: str) -> dict | None:
    """How chapter 05 measured the configuration ``label`` in this run: its single-stream rate and interval, model
    directory, weights, prompt and output tokens, prompts, warm-ups, runs per start, server starts, plus the host's GPU
    count (``gpus``) and the concurrency levels its sweep reached (``levels``)."""
    from .tables import host_summary, throughput

    m = _ch05(store, None, label)
    if m is None:
        return None
    t = next((x for x in throughput(store) if x["label"] == label), {})
    return {**m, "gpus": host_summary(store).get("gpu_count"),
            "levels": "C=" + ",".join(str(c) for c in t.get("levels") or []) if t.get("levels") else None}


_ACROSS = [("GPUs on the host", "gpus"), *_COMPARED]  # what a comparison between two runs' single streams sets side by side


def method_differences(a: dict, b: dict, sweep: bool = False) -> list[dict]:
    """What differs between two runs' measurements of a configuration (two :func:`bench_method` results):
    [{what, a, b}]; ``sweep``: also the concurrency levels each sweep reached (for its peak)."""
    return _compare(a, b, "a", "b", _ACROSS + ([("sweep levels", "levels")] if sweep else []))[1]


def default_methods(store: RunStore) -> list[dict]:
    """Per engine whose default both chapters measured: {engine, ch03, ch05, differences: [{what, ch03, ch05}],
    same_method, intervals_overlap, method: [{what, ch03, ch05}] (every compared item)}. The items compared: model
    directory, weights, prompt tokens, output tokens, prompts (their fingerprint where both recorded it, else seed and
    length), warm-ups, runs per start, server starts. An item one side did not record is shown, not counted a difference."""
    out = []
    for eng in sorted({r.get("engine") for r in store.rows("backends") if r.get("engine")}):
        a, b = _ch03(store, eng), _ch05(store, eng)
        if not a or not b:
            continue
        method, diffs = _compare(a, b, "ch03", "ch05")
        method.append({"what": "decode tok/s", "ch03": a["tok_s"], "ch05": b["tok_s"]})
        method.append({"what": "95% half-width", "ch03": a["ci95"], "ch05": b["ci95"]})
        method.append({"what": "interval over", "ch03": f"{a['starts']} server starts" if a["starts"] >= 2 else ONE_START,
                       "ch05": f"{b['starts']} server starts" if b["starts"] >= 2 else ONE_START})
        out.append({"engine": eng, "ch03": a, "ch05": b, "differences": diffs, "same_method": not diffs, "method": method,
                    "intervals_overlap": _overlap(a["tok_s"], a["ci95"] or 0, b["tok_s"], b["ci95"] or 0)})
    return out


def method_figures(items: list[dict]) -> dict:
    """Every figure ``say_default_methods`` states, by subject: ``"<engine> | <what> | 03"`` (and ``| 05``) for each
    compared item of ``default_methods`` (``what`` as its ``method`` list names it: "prompt tokens", "decode tok/s",
    "95% half-width", ...), ``"<engine> | server starts | 03"`` (and ``| 05``), and ``"<engine> | change %"``: chapter 05's rate against chapter 03's, signed (%)."""
    out: dict[str, Any] = {}
    for m in items:
        for it in m["method"]:
            for side in ("03", "05"):
                out[f"{m['engine']} | {it['what']} | {side}"] = it[f"ch{side}"]
        for side in ("03", "05"):
            out[f"{m['engine']} | server starts | {side}"] = m[f"ch{side}"]["starts"]
        a, b = m["ch03"]["tok_s"], m["ch05"]["tok_s"]
        out[f"{m['engine']} | change %"] = 100 * (b - a) / a if a else None
    return out


def say_default_methods(items: list[dict]) -> str:
    """Markdown, per engine: whether chapters 03 and 05 measured its default the same way, both numbers side by side,
    and each difference of method. Every figure tagged (``default_method``, recomputed by ``method_figures``)."""
    from ..stated.tags import q

    if not items:
        return "_Chapters 03 and 05 have not both measured an engine's default in this run: nothing to set side by side._"
    lines = []
    for m in items:
        a, b, e = m["ch03"], m["ch05"], m["engine"]

        def t(what: str, side: str, fmt: str = "") -> str:
            return q("default_method", (a if side == "03" else b)[what] if what in ("tok_s", "ci95") else
                     next(it[f"ch{side}"] for it in m["method"] if it["what"] == what), fmt,
                     of=f"{e} | {_WHAT.get(what, what)} | {side}")

        nums = (f"chapter 03 {t('tok_s', '03', ',.1f')} ± {t('ci95', '03', ',.1f')} tok/s ({_over(a, e, '03')}), chapter 05 "
                f"{t('tok_s', '05', ',.1f')} ± {t('ci95', '05', ',.1f')} ({_over(b, e, '05')})")
        pct = 100 * (b["tok_s"] - a["tok_s"]) / a["tok_s"] if a["tok_s"] else None
        pct_s = q("default_method", pct, "+.1f", of=f"{e} | change %")
        if m["same_method"]:
            lines.append(f"- **{e}** default: both chapters measured it the same way (model, prompts, {t('prompt tokens', '03')} in / "
                         f"{t('output tokens', '03')} out tokens): {nums}; the intervals "
                         + ("overlap." if m["intervals_overlap"] else f"do not overlap ({pct_s}%): the spread between the two "
                                                                       "chapters' server starts, since the method is the same."))
            continue
        what = "; ".join(f"{d['what']} {t(d['what'], '03')} (03) against {t(d['what'], '05')} (05)" for d in m["differences"])
        legacy = (" Chapter 03's rows predate its recorded method: its prompts and output length are read from the code and "
                  "parameters that recorded them." if a.get("legacy") else "")
        lines.append(f"- **{e}** default, measured two ways: {nums}, {pct_s}% from chapter 03's to chapter 05's. "
                     f"The methods differ: {what}. The two numbers are not one measurement taken twice, and their intervals "
                     + ("overlap" if m["intervals_overlap"] else "do not overlap")
                     + "; how much of the difference is the method and how much the server start, this run does not separate "
                       f"(the same method in both chapters would).{legacy}")
    return "\n".join(lines)


_WHAT = {"tok_s": "decode tok/s", "ci95": "95% half-width"}  # the method list's names of the two rates


def _over(m: dict, engine: str, side: str) -> str:
    from ..stated.tags import q

    return f"over {q('default_method', m['starts'], 'd', of=f'{engine} | server starts | {side}')} server starts" \
        if m["starts"] >= 2 else ONE_START
