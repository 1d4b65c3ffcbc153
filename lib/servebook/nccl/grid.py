"""NCCL settings to measure: ``parse_grid('NCCL_PROTO=LL;NCCL_ALGO=Ring')``, the built-in grid, and their checks.

A variable that the host's policy fixes (``servebook.hosts.host_policy_env``, e.g. ``NCCL_NVLS_ENABLE=0`` on the
lent machines) is not a setting to tune: the grid may only repeat the policy's value.
"""

from __future__ import annotations

import difflib
import re

from ..errors import ServebookError
from ..hosts import HOST_POLICY_VAR, host_policy_env

__all__ = ["KNOWN_VARS", "SEED_RECIPE", "Setting", "parse_grid", "builtin_grid"]

# NCCL variables a grid may set. NCCL_DEBUG* are servebook's own (it parses them); a variable the host's
# policy fixes may only repeat the policy's value.
KNOWN_VARS = {
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
    "NCCL_LL128_NTHREADS", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_NET_GDR_LEVEL",
    "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_CROSS_NIC", "NCCL_CGA_CLUSTER_SIZE", "NCCL_LAUNCH_MODE",
    "NCCL_TUNER_PLUGIN", "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER",
    "NCCL_NVLS_ENABLE", "NCCL_NET_GDR_READ", "NCCL_PXN_DISABLE", "NCCL_MNNVL_ENABLE", "NCCL_CHECKS_DISABLE",
}
_PROTOS = {"LL", "LL128", "SIMPLE"}
_ALGOS = {"RING", "TREE", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT"}
_P2P_LEVELS = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"}
_INT_VARS = {"NCCL_P2P_DISABLE", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
             "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_LL128_NTHREADS", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
             "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_NVLS_ENABLE", "NCCL_CGA_CLUSTER_SIZE",
             "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER", "NCCL_IB_DISABLE"}



class Setting(dict):
    """An NCCL env setting: a dict of variables with a label ('default' when empty)."""

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.items()) or "default"

    def __hash__(self):  # settings are compared by label
        return hash(self.label)


def _check_var(name: str, value: str) -> None:
    if name.startswith("NCCL_DEBUG"):
        raise ServebookError(f"{name} is set by servebook itself (it parses NCCL's debug output); leave it out of the grid")
    if name not in KNOWN_VARS:
        close = difflib.get_close_matches(name, sorted(KNOWN_VARS), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ServebookError(f"unknown NCCL variable {name!r} in the grid{hint}")
    if value == "":
        raise ServebookError(f"{name} has no value in the grid; write {name}=VALUE")
    policy = host_policy_env()
    if name in policy and value != policy[name]:
        raise ServebookError(f"{name} is fixed to {policy[name]} by this host's policy ({HOST_POLICY_VAR}); leave it out of the grid")
    if name == "NCCL_PROTO":
        bad = [t for t in value.lstrip("^").split(",") if t.upper() not in _PROTOS]
        if bad:
            raise ServebookError(f"NCCL_PROTO value {value!r}: {bad[0]!r} is not a protocol (LL, LL128, Simple)")
    if name == "NCCL_ALGO":
        bad = [t for t in value.lstrip("^").split(",") if t.upper() not in _ALGOS]
        if bad:
            raise ServebookError(f"NCCL_ALGO value {value!r}: {bad[0]!r} is not an algorithm (Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT)")
    if name == "NCCL_P2P_LEVEL" and value.upper() not in _P2P_LEVELS and not value.isdigit():
        raise ServebookError(f"NCCL_P2P_LEVEL value {value!r} is not one of LOC, NVL, PIX, PXB, PHB, SYS")
    if name in _INT_VARS and not re.fullmatch(r"-?\d+", value):
        raise ServebookError(f"{name} takes an integer, not {value!r}")


def parse_grid(text: str) -> list[Setting]:
    """'A=1,B=2;C=3' -> [Setting(A=1,B=2), Setting(C=3)]; 'default' or an empty item is the default.

    Settings are separated by ';', variables by ','. A value may itself be a comma list
    (NCCL_PROTO=LL,LL128): a comma-separated piece without '=' continues the previous value.
    """
    out: list[Setting] = []
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        s = Setting()
        last = None
        if item.lower() == "default":
            out.append(s)
            continue
        for piece in item.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if "=" in piece:
                k, v = (p.strip() for p in piece.split("=", 1))
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                    raise ServebookError(f"{k!r} in the grid is not a variable name; write NAME=VALUE pairs")
                k = k.upper() if k.upper().startswith("NCCL_") else k
                s[k] = v
                last = k
            elif last is not None:
                s[last] = f"{s[last]},{piece}"
            else:
                raise ServebookError(f"{piece!r} in the grid is not NAME=VALUE; settings look like NCCL_PROTO=LL,NCCL_ALGO=Ring")
        for k, v in s.items():
            _check_var(k, v)
        if s.label not in {o.label for o in out}:
            out.append(s)
    return out


SEED_RECIPE = "NCCL_PROTO=LL,NCCL_ALGO=Ring,NCCL_P2P_LEVEL=SYS,NCCL_MAX_NCHANNELS=16,NCCL_BUFFSIZE=16777216,NCCL_NTHREADS=512"


def builtin_grid() -> list[Setting]:
    """Defaults first, then the settings nccl-tests was run with, then the other knobs and the seed recipe."""
    return parse_grid(";".join([
        "default", "NCCL_PROTO=LL", "NCCL_PROTO=LL128", "NCCL_PROTO=Simple", "NCCL_P2P_DISABLE=1",
        "NCCL_ALGO=Ring", "NCCL_ALGO=Tree", "NCCL_P2P_LEVEL=SYS", "NCCL_MAX_NCHANNELS=2",
        "NCCL_MAX_NCHANNELS=16", "NCCL_BUFFSIZE=16777216", "NCCL_NTHREADS=512", SEED_RECIPE,
    ]))

