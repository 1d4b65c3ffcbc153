"""Mask anything that looks like a secret before it reaches a notebook, a table or a log.

    mask_env({"HF_TOKEN": "hf_abc", "NCCL_PROTO": "LL"})  # {'HF_TOKEN': '***', 'NCCL_PROTO': 'LL'}
    mask_value("curl -H 'Authorization: Bearer abc'")      # "... Bearer ***"
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["is_secret_name", "mask_env", "mask_value", "MASK"]

MASK = "***"
# A name is secret when one of its _/- separated parts says so (HF_TOKEN, NCCL_IB_PASSWORD,
# OPENAI_API_KEY), so that measurement columns such as output_tokens stay readable.
_SECRET_NAME = re.compile(
    r"(?:^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|APIKEY|CREDENTIALS?|AUTH|COOKIE)(?:$|[_-])"
    r"|(API|ACCESS|PRIVATE|SECRET)[_-]?KEY"
    r"|^SSHPASS$",  # sshpass's password variable
    re.I,
)
# Values that look like credentials even under an innocent name.
_SECRET_VALUE = [
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{8,}"),
    re.compile(r"\bAKIA[0-9A-Z]{12,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(?i)((?:token|password|passwd|secret|api[_-]?key)\s*[=:]\s*)[^\s'\",;&]+"),
    re.compile(r"(?i)(://[^/\s:@]+:)[^@\s/]+(@)"),  # user:password@host in URLs
]


# Names that match a secret word but are not secrets: the shell's working directories (PWD is also the
# common abbreviation of "password", as in DB_PWD; the bare shell variables are paths).
_NOT_SECRET = {"PWD", "OLDPWD"}


def is_secret_name(name: str) -> bool:
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def _mask_text(text: str) -> str:
    for pattern in _SECRET_VALUE:
        if pattern.groups == 2:
            text = pattern.sub(lambda m: m.group(1) + MASK + m.group(2), text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    # Also mask the literal values of secret-named variables of this process.
    for name, value in os.environ.items():
        if value and len(value) >= 6 and is_secret_name(name) and value in text:
            text = text.replace(value, MASK)
    return text


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-named variables and secret-looking values masked."""
    return {k: (MASK if is_secret_name(k) and v else _mask_text(str(v))) for k, v in env.items()}


def mask_value(value: Any) -> Any:
    """Recursively mask secrets in strings, dicts (by key name too) and lists."""
    if isinstance(value, str):
        return _mask_text(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v else mask_value(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_value(v) for v in value)
    return value
