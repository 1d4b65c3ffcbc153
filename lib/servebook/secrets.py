"""Mask anything that looks like a secret before it reaches a notebook, a table or a log.

    mask_env({"HF_TOKEN": "hf_abc", "NCCL_PROTO": "LL"})  # {'HF_TOKEN': '***', 'NCCL_PROTO': 'LL'}
    mask_value("curl -H 'Authorization: Bearer abc'")      # "... Bearer ***"
    mask_value("server_args=ServerArgs(api_key='abc', ...)")   # "... api_key='***' ..."
    mask_argv(["vllm", "serve", "m", "--api-key", "abc"])  # [..., '--api-key', '***']
    copy_masked(fd, "run/logs/server.log")                 # a server's output, masked line by line as it is written

This module imports only the standard library and nothing of servebook: the log copier runs it as it is, both
here (``python -I -c``, beside a local server) and inside the watchdog on a remote host (its source travels in
the watchdog's spec).
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["is_secret_name", "mask_env", "mask_value", "mask_text", "mask_argv", "copy_masked", "env_secret_values", "MASK"]

MASK = "***"
# A name is secret when one of its _/- separated parts says so (HF_TOKEN, NCCL_IB_PASSWORD,
# OPENAI_API_KEY), so that measurement columns such as output_tokens stay readable.
_SECRET_NAME = re.compile(
    r"(?:^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|APIKEY|CREDENTIALS?|AUTH|COOKIE)(?:$|[_-])"
    r"|(API|ACCESS|PRIVATE|SECRET)[_-]?KEY"
    r"|^SSHPASS$",  # sshpass's password variable
    re.I,
)

# A quoted or bare value after a key or an option: 'a b' (Python repr), "a\"b" (JSON), ['a', 'b'] (vLLM's
# non-default args print list-valued options so), or a bare word.
_SQ = r"'(?:[^'\\\n]|\\.)*'"
_DQ = r'"(?:[^"\\\n]|\\.)*"'
_VALUE = rf"(?P<value>{_SQ}|{_DQ}|\[[ \t]*(?:(?:{_SQ}|{_DQ})[ \t]*,?[ \t]*)+\]|[^\s'\",;&)}}\]]+)"
# The words that make a key or an option secret (its last part): api_key, hf_token, NCCL_IB_PASSWORD, --api-key.
_KEYWORD = r"(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token|password|passwd|secret|passphrase)"
# key=value, key: value, 'key': value, "key": "value" (one line: [ \t], so a key at a line's end never takes the next line)
_KEY_VALUE = re.compile(
    rf"(?P<pre>(?P<q>['\"]?)(?<![\w.-])(?P<key>(?:[A-Za-z0-9]+[_.-])*{_KEYWORD})(?P=q)[ \t]*[=:][ \t]*){_VALUE}", re.I)
# --api-key VALUE, --api-key=VALUE, --hf-token VALUE (a value is not another option)
_OPTION = re.compile(rf"(?P<pre>(?<![\w-])--(?P<key>(?:[A-Za-z0-9]+-)*{_KEYWORD})(?:=|[ \t]+))(?!-){_VALUE}", re.I)
_OPTION_WORD = re.compile(rf"--(?:[A-Za-z0-9]+-)*{_KEYWORD}", re.I)
# A tokenizer's special tokens (bos_token='<s>', "pad_token": "<pad>") are not credentials, nor are empty values.
_SPECIAL_TOKEN = re.compile(r"(?:^|[_.-])(?:bos|eos|pad|unk|sep|cls|mask|special|additional|image|video|audio|vision|"
                            r"start|end|stop|chat|default|max|min|num|first|last|next|per|total|output|input|prompt)[_.-]?token$", re.I)
_NOT_A_VALUE = re.compile(r"^(?:['\"]?(?:None|null|nil|true|false|\*\*\*)?['\"]?|\[\s*\])$", re.I)
_NUMBER = re.compile(r"^['\"]?[-+]?\d[\d.,]*(?:e[-+]?\d+)?[a-z%/]{0,3}['\"]?$", re.I)

# Values that look like credentials even under an innocent name.
_SECRET_VALUE = [
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{8,}"),
    re.compile(r"\bAKIA[0-9A-Z]{12,}"),
    re.compile(r"(?i)(\bbearer[ \t]+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(?i)(\bauthorization[ \t]*[:=][ \t]*(?:basic|token)[ \t]+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"(?i)(://[^/\s:@]+:)[^@\s/]+(@)"),  # user:password@host in URLs
]
# Cheap first look: text without any of these needs no pattern (server logs are large, most lines hold none).
_HINT = re.compile(r"hf_|sk-|gh[pousr]_|AKIA|bearer|authorization|token|passw|secret|api[_-]?key|apikey|"
                   r"access[_-]?key|private[_-]?key|passphrase|://[^/\s]*@", re.I)


# Names that match a secret word but are not secrets: the shell's working directories (PWD is also the
# common abbreviation of "password", as in DB_PWD; the bare shell variables are paths).
_NOT_SECRET = {"PWD", "OLDPWD"}


def is_secret_name(name: str) -> bool:
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def _masked_value(value: str) -> str:
    """``value`` as written (quotes and list brackets kept) with its content masked."""
    if value.startswith("["):
        return re.sub(rf"{_SQ}|{_DQ}", lambda m: m.group(0)[0] + MASK + m.group(0)[0], value)
    if value[:1] in ("'", '"'):
        return value[0] + MASK + value[0]
    return MASK


def _sub_key_value(m: re.Match) -> str:
    key, value = m.group("key"), m.group("value")
    if _NOT_A_VALUE.match(value):
        return m.group(0)
    if key.lower().endswith("token"):  # a count or a tokenizer's token is no credential: "max_token: 12", "eos_token='</s>'"
        if _SPECIAL_TOKEN.search(key) or _NUMBER.match(value) or value.strip("'\"").startswith("<") or len(value.strip("'\"")) < 8:
            return m.group(0)
    return m.group("pre") + _masked_value(value)


def env_secret_values(env: dict | None = None, min_len: int = 6) -> list[str]:
    """The values of the secret-named variables of ``env`` (default: this process), longest first."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if v and len(v) >= min_len and is_secret_name(k)}, key=len, reverse=True)


def mask_text(text: str, values: list[str] | None = None) -> str:
    """``text`` with secrets masked: credential-looking values, secret keys' and options' values, and ``values``
    (default: this process's secret-named environment variables)."""
    values = env_secret_values() if values is None else values
    if _HINT.search(text):
        for pattern in _SECRET_VALUE:
            if pattern.groups == 2:
                text = pattern.sub(lambda m: m.group(1) + MASK + m.group(2), text)
            elif pattern.groups == 1:
                text = pattern.sub(lambda m: m.group(1) + MASK, text)
            else:
                text = pattern.sub(MASK, text)
        text = _KEY_VALUE.sub(_sub_key_value, text)
        text = _OPTION.sub(_sub_key_value, text)
    for value in values:  # the literal values of secret-named variables
        if value in text:
            text = text.replace(value, MASK)
    return text


_mask_text = mask_text  # the name other modules knew


def mask_argv(argv: list | tuple) -> list:
    """A command's words with secrets masked, the word after a secret option too (``--api-key abc``)."""
    out: list = []
    after_option = False
    for word in argv:
        if not isinstance(word, str):
            out.append(mask_value(word))
            after_option = False
            continue
        if after_option and word and not word.startswith("-"):
            out.append(MASK)
        else:
            out.append(mask_text(word))
        after_option = bool(_OPTION_WORD.fullmatch(word)) and not _SPECIAL_TOKEN.search(word)
    return out


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-named variables and secret-looking values masked."""
    return {k: (MASK if is_secret_name(k) and v else mask_text(str(v))) for k, v in env.items()}


def _secret_content(value: Any) -> Any:
    """The value of a secret-named key: strings (alone or in a list) masked, anything else as it was."""
    if isinstance(value, str):
        return MASK if value else value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return type(value)(MASK if v else v for v in value)
    return mask_value(value)


def mask_value(value: Any) -> Any:
    """Recursively mask secrets in strings, dicts (by key name too) and lists (the word after ``--api-key`` too)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: (_secret_content(v) if isinstance(k, str) and is_secret_name(k) else mask_value(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_argv(list(value)))
    return value


def copy_masked(fd: int, log_path: str, values: list[str] | None = None, chunk: int = 1 << 16, max_line: int = 1 << 16) -> None:
    """Copy what ``fd`` delivers into ``log_path`` (appended), masked, until end of file.

    Whole lines are written as they arrive (``\\n`` or ``\\r`` ends one, so progress bars appear too); a line longer
    than ``max_line`` is written in pieces; what is left at end of file is written then. Bytes that are not UTF-8
    pass unchanged. ``values``: literal secrets to mask (default: the secret-named variables of this process's
    environment, which is the server's).
    """
    values = env_secret_values(min_len=4) if values is None else values
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(data: bytes) -> None:
        text = mask_text(data.decode("utf-8", "surrogateescape"), values)
        view = memoryview(text.encode("utf-8", "surrogateescape"))
        while view:
            try:
                n = os.write(out, view)
            except OSError:  # a full disk: the server must not block on its pipe, so what cannot be written is dropped
                return
            view = view[n:]

    pending = b""
    try:
        while True:
            try:
                data = os.read(fd, chunk)
            except InterruptedError:
                continue
            if not data:
                break
            pending += data
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
            if cut >= 0:
                write(pending[:cut + 1])
                pending = pending[cut + 1:]
            if len(pending) > max_line:
                write(pending)
                pending = b""
        if pending:
            write(pending)
    finally:
        os.close(out)


def _copier_main() -> None:
    """``python -I -c COPIER secrets.py LOG``: the local servers' log copier (stdin is the server's output)."""
    import signal
    import sys

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # it ends when the server's output ends, never before
        signal.signal(sig, signal.SIG_IGN)
    copy_masked(0, sys.argv[2])
