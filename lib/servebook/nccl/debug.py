"""NCCL's own account of what it did: ``NCCL_DEBUG=INFO`` lines parsed into version, env echo and algorithm choices."""

from __future__ import annotations

import re

__all__ = ["parse_nccl_debug", "debug_excerpt"]

_ALGO_IDS = {0: "TREE", 1: "RING", 2: "COLLNET_DIRECT", 3: "COLLNET_CHAIN", 4: "NVLS", 5: "NVLS_TREE", 6: "PAT"}
_PROTO_IDS = {0: "LL", 1: "LL128", 2: "SIMPLE"}
_CHOICE = re.compile(
    r"NCCL INFO (?:(?P<func>[A-Za-z]+):\s+)?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?(?: time (?P<time>[-\d.]+))?")
_VERSION = re.compile(r"NCCL INFO NCCL version (?P<version>\S+)")
_ENVSET = re.compile(r"NCCL INFO (?P<var>NCCL_\w+) set by environment to (?P<value>\S+)")


def parse_nccl_debug(text: str) -> dict:
    """NCCL_DEBUG=INFO output -> {'version', 'env': {var: value}, 'choices': [{func, bytes, algo, proto, channels, count, line}]}.

    Choices are deduplicated by (function, bytes, algo, proto, channels) with a count; numeric
    algorithm/protocol ids (older NCCL prints 'Algo 1 proto 0') are named.
    """
    version, env, seen = None, {}, {}
    for line in (text or "").splitlines():
        m = _CHOICE.search(line)
        if m:
            algo, proto = m["algo"], m["proto"]
            algo = _ALGO_IDS.get(int(algo), algo) if algo.isdigit() else algo.upper()
            proto = _PROTO_IDS.get(int(proto), proto) if proto.isdigit() else proto.upper()
            channels = int(m["hi"]) - int(m["lo"]) + 1 if m["lo"] is not None else None
            key = (m["func"] or "", int(m["bytes"]), algo, proto, channels)
            if key in seen:
                seen[key]["count"] += 1
            else:
                seen[key] = {"func": m["func"] or "", "bytes": int(m["bytes"]), "algo": algo, "proto": proto,
                             "channels": channels, "count": 1, "line": line.strip()}
            continue
        m = _VERSION.search(line)
        if m and version is None:
            version = m["version"]
            continue
        m = _ENVSET.search(line)
        if m:
            env[m["var"]] = m["value"]
    return {"version": version, "env": env, "choices": list(seen.values())}


def debug_excerpt(text: str, limit: int = 40) -> list[str]:
    """Lines worth keeping as evidence: version, env echo, and one line per distinct choice."""
    keep, seen = [], set()
    for line in (text or "").splitlines():
        if _VERSION.search(line) or _ENVSET.search(line):
            key = line.split("NCCL INFO", 1)[-1]
        else:
            m = _CHOICE.search(line)
            if not m:
                continue
            key = (m["func"], m["bytes"], m["algo"], m["proto"], m["lo"], m["hi"])
        if key in seen:
            continue
        seen.add(key)
        keep.append(line.rstrip())
        if len(keep) >= limit:
            break
    return keep
