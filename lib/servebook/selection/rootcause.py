"""Root causes: why the engine chose what it chose on that GPU, in plain words, tied to its evidence.

    from servebook.selection.rootcause import root_causes, record_root_causes
    causes = root_causes(store)        # from chapter 02's standing `selection` rows (and chapter 01's helper verdicts)
    cause_of(whatif("sglang==0.5.9", "kimi-k2.5", gpu="rtx-pro-6000"))["cause"]   # one answer, no run
    causes[0]["decision"]              # 'fallback' | 'hypothesis' | 'hardware-selected' | 'rule' | 'unresolved'
    causes[0]["cause"]                 # "sglang 0.5.9 writes `triton` ... because is_sm100_supported() answered False ..."
    record_root_causes(store)          # the same records, stored as the table `root_causes`

The evidence comes from the engine's own code and answers, never from prose: the rule is the
site the what-if traced (``decided_by``), the helper answers are what the engine's own helpers
returned *in the same process, under the same faked GPU* (``whatif`` asks every hardware helper
that guards an attention-backend site), and the backend the GPU missed is read from the branch
of the same if/elif chain that the helper's answer skipped (vLLM: a backend whose own validation
accepts the GPU, left out of the priority list used). A fallback is called a *root cause* only where
the engine's or kernel library's own capability check says the missed backend supports the GPU
(``evidence.support_evidence``); otherwise it is a *hypothesis*, with the measurement that settles it.
Chapter 01's verdict on each helper answer (``probe.judge_helper``: agrees / gap / mismatch) is kept
on the record as context; it is not evidence of support.
"""

from __future__ import annotations

import ast
import os
import re

from ..stated.text import code
from .evidence import backend_checks, missed_outside_priorities, settle_by, support_evidence
from .static import _parse, classify

__all__ = ["helper_expressions", "helper_requests", "explain", "cause_of", "root_causes", "record_root_causes"]


def helper_expressions(text: str) -> list[str]:
    """The hardware helper reads in a condition: ``not is_sm100_supported() and x`` -> ``['is_sm100_supported()']``.

    Boolean operators and ``not`` are opened; what remains (calls, attributes, names, comparisons) is kept
    when it reads like a hardware check (the same words the static reading tags ``hardware`` with)."""
    try:
        node = _parse(text, mode="eval").body
    except SyntaxError:
        return []
    out: list[str] = []

    def visit(n):
        if isinstance(n, ast.BoolOp):
            for v in n.values:
                visit(v)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            visit(n.operand)
        elif isinstance(n, (ast.Call, ast.Attribute, ast.Name, ast.Compare, ast.Subscript)):
            expr = ast.unparse(n)
            if "hardware" in classify(expr) and not any(isinstance(x, ast.Lambda) for x in ast.walk(n)) and expr not in out:
                out.append(expr)

    visit(node)
    return out


def _hardware_conditions(site) -> list:
    return [c for c in site.conditions if "hardware" in c.kinds]


def helper_requests(reading, targets=None) -> list[dict]:
    """What to ask the engine after its resolution: every hardware helper read on the way to an attention site."""
    seen, out = set(), []
    for s in reading.sites:
        if targets is not None and s.target not in targets and not s.target.startswith("return of"):
            continue
        for c in _hardware_conditions(s):
            for expr in helper_expressions(c.text):
                key = (s.path, expr)
                if key not in seen:
                    seen.add(key)
                    out.append({"file": s.path, "expr": expr})
    return out


def _rel(path_line, package_dir: str) -> str | None:
    if not path_line:
        return None
    path, line = path_line
    root = os.path.dirname(os.path.realpath(package_dir))
    real = os.path.realpath(path)
    rel = os.path.relpath(real, root) if real.startswith(root + os.sep) else path
    return f"{rel}:{line}"


def explain(site, sites: list, helpers: list[dict] | None, package_dir: str) -> dict:
    """For the decided site: each hardware condition on its path with the engine's own answer to its helpers,
    and, where the path went through the negative side of a condition, what the positive side would have written."""
    if site is None:
        return {"helper_answers": [], "alternatives": []}
    answers = {(os.path.realpath(h["file"]), h["expr"]): h for h in (helpers or [])}
    rows, alts = [], []
    for c in _hardware_conditions(site):
        for expr in helper_expressions(c.text):
            h = answers.get((os.path.realpath(site.path), expr))
            rows.append({"condition": str(c), "condition_line": c.line, "negated": c.negated, "helper": expr,
                         "answer": h.get("answer") if h else None, "error": (h.get("error") if h else "not asked"),
                         "defined_at": _rel(h.get("defined_at"), package_dir) if h else None,
                         "definition": h.get("source") if h else None})
        if c.negated:  # the site is on the else side: the if side is what this condition kept from the GPU
            other = [s for s in sites if s.path == site.path and s.function == site.function and s is not site
                     and any(o.line == c.line and not o.negated for o in s.conditions)
                     and (s.target == site.target or s.target.startswith("return of"))]
            if other:
                alts.append({"condition": c.text, "condition_line": c.line,
                             "would_write": sorted({s.value.strip("\"'") for s in other}),
                             "at": [s.where for s in sorted(other, key=lambda s: s.line)]})
    return {"helper_answers": rows, "alternatives": alts}


def _gpu_for(row: dict) -> dict | None:
    cap = row.get("capability")
    if not cap:
        return None
    from ..probe import _finish_gpu

    return _finish_gpu({"capability": str(cap), "name": row.get("gpu")})


def _judge(helper: str, answer, gpu: dict | None, cuda: str | None) -> dict:
    from ..probe import judge_helper

    if gpu is None:
        return {"verdict": "unknown", "expected": None, "meaning": "no GPU to judge against"}
    j = judge_helper({"name": helper, "answer": answer}, gpu, 1, cuda)
    return {k: j.get(k) for k in ("verdict", "expected", "meaning")}


def _short(helper: str) -> str:
    """``sglang.srt.utils.common.is_sm100_supported()`` and ``get_platform().is_sm100`` -> the helper's own name."""
    return re.sub(r"\(.*\)$", "", helper.strip().split(".")[-1])


def _plain(v) -> str:
    return {True: "True", False: "False", None: "None"}.get(v, repr(v)) if isinstance(v, (bool, type(None))) else repr(v)


def _one(row: dict, verdicts_01: dict) -> dict:
    d = row.get("decided_by") or {}
    at = _rule_fields(row, d)
    rule = at["rule"] or ""
    helpers = _judged_helpers(row, verdicts_01, at["cuda_assumed"])
    alts = {a["condition_line"]: a for a in row.get("alternatives") or []}
    # A fallback: a negated hardware condition on the path whose helper answered falsy, with a positive branch the GPU
    # missed (SGLang), or a backend whose own validation accepts this GPU left out of the priority list used (vLLM).
    # A branch whose guard rightly says "not this hardware" (chapter 01's rules: the answer agrees, e.g. is_hip() False on
    # NVIDIA, is_hopper...() False on Blackwell) was written for other hardware and is not counted as missed.
    chosen = row.get("attention_backend")
    causing = [h for h in helpers if h["negated"] and not h.get("error") and not h.get("answer") and h["condition_line"] in alts
               and not (h.get("verdict") == "agrees" and h.get("expected") is False)
               and [w for w in alts[h["condition_line"]]["would_write"] if w != chosen]]
    positive = [h for h in helpers if not h["negated"] and h.get("answer") and not h.get("error")]
    who = f"{row.get('engine')} {row.get('version')}"
    where = f"{row.get('model')} on {row.get('gpu')} (capability {row.get('capability') or 'this host'})"
    base = _base(row, d, at, chosen, helpers, causing)
    if row.get("method") != "dynamic" or not rule:
        return base | {"decision": "unresolved", "cause": f"{who}: the engine's own resolution did not decide `{_backend_of(row)}` "
                       f"here ({row.get('reason') or 'no traced rule'}); only the static reading answers, so no root cause is claimed."}
    missed, parts = _missed(row, causing, alts, chosen, rule, at["rule_file"] or "")
    if missed:
        return _missed_cause(row, base, missed, parts, f"{who} falls back to `{chosen}` for {where} at `{rule}` "
                             f"({d.get('function')}): ", f"{who} picks `{chosen}` for {where} at `{rule}`")
    if positive:
        h = positive[-1]
        return base | {"decision": "hardware-selected", "cause": (
            f"{who} picks `{chosen}` for {where} at `{rule}`: `{h['helper']}` answered {_plain(h['answer'])}, "
            f"so the branch written for this GPU was taken; no helper answer on the path contradicts the hardware.")}
    return base | {"decision": "rule", "cause": (
        f"{who} picks `{chosen}` for {where} at `{rule}`: no hardware helper on the path answered against this GPU "
        f"(the deciding conditions are " + (", ".join(f"`{h['condition']}`" for h in helpers) or "model/user rules only") + ")"
        + _only_valid(row) + ".")}


def _judged_helpers(row: dict, verdicts_01: dict, cuda: str | None) -> list[dict]:
    """Each helper answer on the path, judged against the GPU (chapter 01's rules) at the CUDA version the reading
    assumed (``cuda``), with chapter 01's own verdict."""
    gpu = _gpu_for(row)
    helpers = []
    for h in row.get("helper_answers") or []:
        j = _judge(h["helper"], h.get("answer"), gpu, cuda) if not h.get("error") else {"verdict": "error", "expected": None,
                                                                                        "meaning": h["error"]}
        name = _short(h["helper"])
        ch01 = verdicts_01.get(name)
        helpers.append({**h, **j, "chapter01_verdict": ch01})
    return helpers


def _rule_fields(row: dict, d: dict) -> dict:
    """The deciding rule (``file:line``, its file and line) and the CUDA version the reading assumed, worked out once."""
    rule = d.get("where") or ""
    rule_file, _, rule_line = rule.rpartition(":")
    return {"rule": rule or None, "rule_file": rule_file or None, "rule_line": int(rule_line) if rule_line.isdigit() else None,
            "cuda_assumed": (row.get("assumptions") or {}).get("cuda_version")}


def _base(row: dict, d: dict, at: dict, chosen, helpers: list[dict], causing: list[dict]) -> dict:
    """The fields of a root-cause record every decision shares: who, where, the deciding rule (``at``:
    ``_rule_fields``) and the helper answers."""
    return {"engine": row.get("engine"), "version": row.get("version"), "gpu": row.get("gpu"), "capability": row.get("capability"),
            "model": row.get("model"), "case": row.get("case"), "chosen": chosen, "rule": at["rule"],
            "rule_file": at["rule_file"], "rule_line": at["rule_line"],
            "rule_function": d.get("function"), "helper_answers": helpers,
            "missed": [], "causing_helpers": [h["helper"] for h in causing],
            "cuda_assumed": at["cuda_assumed"], "evidence": [], "settle_by": []}


def _missed(row: dict, causing: list[dict], alts: dict, chosen, rule: str, rule_file: str) -> tuple[list[dict], list[str]]:
    """The branches this GPU skipped (a helper's falsy answer, or a valid backend left out of the priority list), each
    with what it would have written, and the words saying so."""
    missed, parts = [], []
    for h in causing:
        a = alts[h["condition_line"]]
        missed.append({"helper": h["helper"], "would_write": [w for w in a["would_write"] if w != chosen], "at": a["at"]})
        parts.append(f"`{h['helper']}` answered {_plain(h['answer'])} for capability {row.get('capability')}"
                     + (f" (defined at `{h['defined_at']}`)" if h.get("defined_at") else "")
                     + f", so the branch at {_line_in(rule_file, h['condition_line'])} that would write "
                     + " or ".join(f"`{v}`" for v in a["would_write"]) + f" ({', '.join(f'`{x}`' for x in a['at'])}) was skipped")
    for c in missed_outside_priorities(row):
        missed.append({"helper": f"the priority list at {rule}", "would_write": [c["backend"]], "at": [rule]})
        parts.append(f"`{c['backend']}` passes its own validation here but is not in the priority list at `{rule}`")
    return missed, parts


def _missed_cause(row: dict, base: dict, missed: list[dict], parts: list[str], falls: str, picks: str) -> dict:
    """The decision where branches were skipped: a fallback where a skipped backend's own check accepts this GPU,
    hardware-selected where every one rejects it, else a hypothesis with the measurement that settles it."""
    chosen = base["chosen"]
    names = list(dict.fromkeys(b for m in missed for b in m["would_write"] if b != chosen))
    evidence = [e | {"backend": b} for b in names if (e := support_evidence(row, b))]
    supported = [e for e in evidence if e["answer"] and e["valid_for_this_model"]]
    unknown = [b for b in names if b not in {e["backend"] for e in evidence}]
    base = base | {"missed": missed, "evidence": evidence, "settle_by": [settle_by(row, b) for b in unknown]}
    head = falls + "; ".join(parts) + "."
    said = "; ".join(f"`{e['backend']}`'s own check at `{e['at']}` answers {e['answer']}" for e in evidence)
    if supported:
        return base | {"decision": "fallback", "cause": head + " Root cause: " + "; ".join(
            f"`{e['backend']}`'s own check at `{e['at']}` ({code(e['check'])}) answers True for this capability" for e in supported) + "."}
    if not unknown:
        return base | {"decision": "hardware-selected", "cause": (
            f"{picks}: the backends of the branches this GPU skipped reject it by "
            f"their own checks ({said}); not a fallback the engine could avoid.")}
    return base | {"decision": "hypothesis", "cause": head + " Hypothesis, not a root cause: no code the what-if could run "
                   "or read (the engine's, or its kernel library's: GPU-only libraries are stubbed here) says "
                   + " or ".join(f"`{b}`" for b in unknown) + " supports this capability"
                   + (f" ({said})" if said else "") + ". Settle it " + base["settle_by"][0] + "."}


def _only_valid(row: dict) -> str:
    checks = backend_checks(row)
    if not checks:
        return ""
    ok = sorted(b for b, c in checks.items() if c.get("valid"))
    return f"; the backends whose own validation accepts this GPU and model: {', '.join(ok) or 'none'}"


def _line_in(file: str, line) -> str:
    """A line of the rule's file as a source location in code (``sglang/srt/server_args.py:1823``)."""
    return f"`{file}:{line}`" if file else f"line `{line}`"


def _backend_of(row: dict) -> str:
    return str(row.get("attention_backend") or "the attention backend")


def cause_of(answer: dict) -> dict:
    """The root-cause record of one ``whatif`` answer (no run needed): ``cause_of(whatif(...))["cause"]``."""
    return _one(answer, {})


def root_causes(store) -> list[dict]:
    """One record per what-if answer of chapter 02 that stands (table ``selection`` as ``answers.standing_answers`` reads
    it: an answer a later one superseded is left out), one per (engine, version, gpu, model)."""
    from ..standing import standing_answers

    rows = standing_answers(store) if "selection" in store.tables() else []
    verdicts = {}
    if "engine_helpers" in store.tables():
        for h in store.rows("engine_helpers"):
            verdicts[_short(str(h.get("helper", "")))] = h.get("verdict")
    latest = {}
    for r in rows:
        latest[(r.get("engine"), r.get("version"), r.get("gpu"), r.get("model"))] = r
    return [_one(r, verdicts) for r in latest.values()]


def record_root_causes(store) -> list[dict]:
    """``root_causes`` stored as the table ``root_causes`` (rows already recorded for a case are not repeated)."""
    out = root_causes(store)
    for c in out:
        key = {k: c[k] for k in ("engine", "version", "gpu", "model")}
        if not store.done("root_causes", **key):
            store.append("root_causes", c)
    return out
