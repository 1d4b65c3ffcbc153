"""Host policies: environment a host requires of every launch, whatever is being measured.

    SERVEBOOK_HOST_POLICY_ENV="NCCL_NVLS_ENABLE=0" servebook book ...
    host_policy_env()   # {'NCCL_NVLS_ENABLE': '0'}

A policy is a rule of particular hosts (the lent H200 machines keep NVLink SHARP off), not a finding:
launches on the host carry it, the run's manifest records it, and no recommendation repeats it.
"""

from __future__ import annotations

import os
import re

from ..errors import ParameterError

__all__ = ["HOST_POLICY_VAR", "host_policy_env", "parse_policy_env"]

HOST_POLICY_VAR = "SERVEBOOK_HOST_POLICY_ENV"
_ITEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)")


def parse_policy_env(text: str) -> dict[str, str]:
    """``'A=1,B=2'`` or ``'A=1 B=2'`` -> ``{'A': '1', 'B': '2'}``; anything else is a ParameterError."""
    out: dict[str, str] = {}
    for item in re.split(r"[,\s]+", (text or "").strip()):
        if not item:
            continue
        m = _ITEM.fullmatch(item)
        if not m:
            raise ParameterError(HOST_POLICY_VAR, text, "NAME=VALUE pairs separated by commas, e.g. NCCL_NVLS_ENABLE=0")
        out[m[1]] = m[2]
    return out


def host_policy_env(environ: dict | None = None) -> dict[str, str]:
    """The environment the host requires of every launch, from ``SERVEBOOK_HOST_POLICY_ENV`` ({} when unset)."""
    return parse_policy_env((environ if environ is not None else os.environ).get(HOST_POLICY_VAR, ""))
