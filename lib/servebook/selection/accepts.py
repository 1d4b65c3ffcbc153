"""Which of an engine's attention backends its own code accepts on a GPU this host does not have (the what-if's chapter 03
plan): two readings of the engine's code, each said with where it comes from.

    kept, left = accepted_here("sglang==0.5.9", "kimi-k2.5", "rtx-pro-6000", choices, tp_size=8)
    left[0]    # {"attention": "aiter", "rule": "platform", "reason": 'listed as "AMD specific" ...', "where": "sglang/...:137"}

1. **The platform its list names** (static): the list the engine's parser takes its choices from, read with its comments;
   SGLang groups ``ATTENTION_BACKEND_CHOICES`` under headers ("# Common", "# NVIDIA specific", "# AMD specific",
   "# Other platforms"). A backend under a header that names neither "Common" nor the GPU's vendor (the first word of the
   profile's ``gpu_name``) is for another platform. An engine whose list has no such headers (vLLM's enum) is not
   filtered by this reading, and the answer says so.
2. **Its own validation** (dynamic, SGLang): ``ServerArgs`` built with each remaining backend forced, under the GPU faked
   from the profile (the what-if of chapter 02, ``whatif.py``): a backend it raises on is refused, with its words. Asked
   only where the default resolves under the same fake (else the harness, not the engine, would be judged: every backend
   is then kept and the answer says why).
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from pathlib import Path

from ..errors import ServebookError

__all__ = ["accepted_here", "platform_groups"]


def _list_with(path: Path, text: str, wanted: set[str]) -> ast.List | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            vals = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if vals and len(vals) == len(node.value.elts) and set(vals) == wanted:
                return node.value
    return None


def platform_groups(package_dir: str, choices: list[str]) -> dict:
    """The engine's own list of ``choices`` (a list literal of exactly those names in its package) with the comment
    header each name stands under: ``{"where": "sglang/srt/server_args.py", "groups": {name: (header, line)}}``, or {}
    where no such list is found or it has no headers."""
    wanted = set(choices)
    if not wanted or not package_dir:
        return {}
    probe = [f'"{c}"' for c in sorted(wanted)[:3]]
    root = os.path.dirname(os.path.realpath(package_dir))
    for path in sorted(Path(package_dir).rglob("*.py")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if not all(p in text for p in probe):
            continue
        node = _list_with(path, text, wanted)
        if node is None:
            continue
        groups, header = {}, None
        lines = text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            if tok.type == tokenize.COMMENT:
                header = tok.string.lstrip("#").strip()
            elif tok.type == tokenize.STRING and header is not None:
                groups[ast.literal_eval(tok.string)] = (header, node.lineno + tok.start[0] - 1)
        rel = os.path.relpath(path, root)
        return {"where": rel, "groups": groups} if len(groups) == len(wanted) else {}
    return {}


def _for_other_platform(header: str, vendor: str) -> bool:
    h = header.lower()
    return "common" not in h and vendor.lower() not in h


def _validation(engine: str, model: str, profile: str, names: list[str], tp_size: int) -> tuple[dict, dict | None]:
    """SGLang's ``ServerArgs`` with each of ``names`` forced under the faked GPU: ``{name: error}`` for those it refused,
    and None; or ({}, {"reason", "error"?}: why it could not be asked)."""
    from .whatif import _case, _run, _setup

    env, _hw, _libs, _reading, request = _setup(engine, profile, None, None, None, None, tp_size)
    if env.engine != "sglang":
        return {}, {"reason": f"only SGLang's ServerArgs is asked under a faked GPU here; {env.engine}'s own checks of a "
                              "forced backend were not asked, so every backend its list names on this platform is planned"}
    cases = [_case(model, {"attention_backend": n} if n else {}, tp_size)[1] for n in [None, *names]]
    r = _run(env, request | {"cases": cases}, 900)
    answers = r.get("cases") if r.get("ok") else None
    if not answers or not answers[0].get("ok"):
        why = (answers[0] if answers else r).get("error") or "no answer"
        return {}, {"reason": f"{env.engine} {env.version}'s ServerArgs did not resolve the default under the faked GPU, so no "
                              "forced backend was judged by it: every one is planned", "error": str(why)[:300]}
    return {n: str(a.get("error") or "refused")[:300] for n, a in zip(names, answers[1:]) if not a.get("ok")}, None


def accepted_here(engine: str, model: str, profile: str, choices: list[str], tp_size: int = 1) -> tuple[list[str], list[dict]]:
    """``choices`` split into the backends the engine's own code accepts on ``profile``'s GPU and those it does not
    (see the module docstring): ``(kept, left)``; ``left`` rows ``{"attention", "rule", "reason", "where", "error"?}`` plus one
    row without ``attention`` per reading that could not be made (``rule``: "not read" or "not asked", ``reason``: why,
    ``error``: the error where there was one)."""
    from ..engines.envs import resolve_engine
    from ..profiles import load_profile

    vendor = (load_profile(profile).get("gpu_name") or "").split(" ")[0]
    left: list[dict] = []
    try:
        env = resolve_engine(engine)
        read = platform_groups(env.package_dir, choices)
    except ServebookError as exc:
        read, env = {}, None
        left.append({"attention": None, "rule": "not read", "reason": "the engine's code could not be read: every choice is "
                     "planned", "error": str(exc)})
    if read:
        for name, (header, line) in read["groups"].items():
            if _for_other_platform(header, vendor):
                left.append({"attention": name, "rule": "platform", "reason": f'listed under "{header}"',
                             "where": f"{read['where']}:{line}"})
    elif env is not None:
        left.append({"attention": None, "rule": "not read",
                     "reason": f"{env.engine} {env.version}'s list of choices names no platform: every choice is planned"})
    gone = {r["attention"] for r in left}
    kept = [c for c in choices if c not in gone]
    try:
        refused, why = _validation(engine, model, profile, kept, tp_size)
    except ServebookError as exc:
        refused, why = {}, {"reason": "the engine's validation could not be asked: every backend is planned", "error": str(exc)}
    if why:
        left.append({"attention": None, "rule": "not asked", **why})
    for name, error in refused.items():
        left.append({"attention": name, "rule": "validation", "reason": "refused by its ServerArgs under the faked GPU",
                     "error": error, "where": "ServerArgs.__post_init__"})
    return [c for c in kept if c not in refused], left
