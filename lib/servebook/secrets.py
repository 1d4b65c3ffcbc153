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
_WORDS = ["api_key", "api-key", "apikey", "access_key", "access-key", "secret_key", "secret-key", "private_key", "private-key",
          "token", "password", "passwd", "secret", "passphrase"]
# each word as written in lower, UPPER, Title-Case and camelCase (api_key, API_KEY, Api-Key, ApiKey): spelled out,
# the pattern starts with literals, which the regex engine scans for several times faster than a case-blind one
_CASES = sorted({v for w in _WORDS for v in (w, w.upper(), "-".join(p.capitalize() for p in w.split("-")),
                                              "_".join(p.capitalize() for p in w.split("_")))} | {"ApiKey", "apiKey"},
                key=len, reverse=True)
# key=value, key: value, 'key': value, "key": "value" (one line: [ \t], so a key at a line's end never takes the
# next line). The pattern starts at the key's last word; the callback reads the rest of the key before it.
_KEY_VALUE = re.compile(rf"(?P<kw>{'|'.join(map(re.escape, _CASES))})(?P<q>['\"]?)[ \t]*[=:][ \t]*{_VALUE}")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# --api-key VALUE, --api-key=VALUE, --hf-token VALUE (a value is not another option)
_OPTION = re.compile(rf"--(?P<key>(?i:(?:[A-Za-z0-9]+-)*{_KEYWORD}))(?:=|[ \t]+)(?!-){_VALUE}")
_OPTION_WORD = re.compile(rf"--(?:[A-Za-z0-9]+-)*{_KEYWORD}", re.I)
# A tokenizer's special tokens (bos_token='<s>', "pad_token": "<pad>") are not credentials, nor are empty values.
_SPECIAL_TOKEN = re.compile(r"(?:^|[_.-])(?:bos|eos|pad|unk|sep|cls|mask|special|additional|image|video|audio|vision|"
                            r"start|end|stop|chat|default|max|min|num|first|last|next|per|total|output|input|prompt)[_.-]?token$", re.I)
_NOT_A_VALUE = re.compile(r"^(?:['\"]?(?:None|null|nil|true|false|\*\*\*)?['\"]?|\[\s*\])$", re.I)
_NUMBER = re.compile(r"^['\"]?[-+]?\d[\d.,]*(?:e[-+]?\d+)?[a-z%/]{0,3}['\"]?$", re.I)

# Values that look like credentials even under an innocent name (a literal start, no \\b: the callback checks the
# word boundary, which keeps the regex engine's fast literal scan).
_SECRET_VALUE = [
    re.compile(r"hf_[A-Za-z0-9]{8,}"),
    re.compile(r"sk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{8,}"),
    re.compile(r"AKIA[0-9A-Z]{12,}"),
    re.compile(r"(?i)(bearer[ \t]+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(?i)(authorization[ \t]*[:=][ \t]*(?:basic|token)[ \t]+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"(://[^/\s:@]+:)[^@\s/]+(@)"),  # user:password@host in URLs
]
# Cheap first look (str.find on the lowered text, far faster than any pattern): only the lines holding one of these
# words go through the patterns; server logs are large and most of their lines hold none. "token" in "tokens" and
# "tokenizer" is no hint (engines print throughput in tokens/s on every line).
_HINT_WORDS = ("hf_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "akia", "bearer", "authorization", "token", "passw",
               "secret", "api_key", "api-key", "apikey", "access_key", "access-key", "private_key", "private-key", "://")
_NOT_HINT_AFTER = {"token": ("s", "izer")}


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


def _masked_pair(key: str, pre: str, value: str) -> str:
    """``pre`` (the key and what joins it to its value) and the value masked, unless the value is none."""
    if _NOT_A_VALUE.match(value):
        return pre + value
    if key.lower().endswith("token"):  # a count or a tokenizer's token is no credential: "max_token: 12", "eos_token='</s>'"
        if _SPECIAL_TOKEN.search(key) or _NUMBER.match(value) or value.strip("'\"").startswith("<") or len(value.strip("'\"")) < 8:
            return pre + value
    return pre + _masked_value(value)


def _starts_word(m: re.Match) -> bool:
    i = m.start()
    return i == 0 or not (m.string[i - 1].isalnum() or m.string[i - 1] == "_")


def _sub_secret_value(m: re.Match) -> str:
    if not _starts_word(m) and m.group(0)[:3] != "://":
        return m.group(0)
    if m.re.groups == 2:
        return m.group(1) + MASK + m.group(2)
    return (m.group(1) if m.re.groups == 1 else "") + MASK


def _sub_keyword_value(m: re.Match) -> str:
    """``_KEY_VALUE``'s match, its key read back to where it starts (``hf_token``, ``NCCL_IB_PASSWORD``, ``x-api-key``)."""
    text, start, kw = m.string, m.start(), m.group("kw")
    i = start
    while i > 0 and start - i < 200 and text[i - 1] in _KEY_CHARS:
        i -= 1
    prefix = text[i:start]
    if prefix and prefix[-1] not in "_.-" and not (kw[0].isupper() and prefix[-1].islower()):  # "mytoken", not "accessToken"
        return m.group(0)
    before = text[start - len(prefix) - 1] if start - len(prefix) > 0 else ""
    if m.group("q") and before != m.group("q"):  # a closing quote with no opening one
        return m.group(0)
    if before.isalnum() or before == "_":  # within a word of other letters ("é_token")
        return m.group(0)
    return _masked_pair(prefix + kw, m.group(0)[:m.start("value") - start], m.group("value"))


def _sub_option_value(m: re.Match) -> str:
    i = m.start()
    if i and (m.string[i - 1].isalnum() or m.string[i - 1] in "_-"):
        return m.group(0)
    return _masked_pair(m.group("key"), m.group(0)[:m.start("value") - i], m.group("value"))


def _mask_patterns(text: str) -> str:
    for pattern in _SECRET_VALUE:
        text = pattern.sub(_sub_secret_value, text)
    text = _KEY_VALUE.sub(_sub_keyword_value, text)
    return _OPTION.sub(_sub_option_value, text)


def _hinted_lines(text: str) -> list[tuple[int, int]] | None:
    """The (start, end) spans of the lines of ``text`` that hold a hint word, merged and in order; None: look at all
    of it (lowering changed its length, as some non-ASCII letters do, so the positions would not match)."""
    low = text.lower()
    if len(low) != len(text):
        return None
    spans = []
    for word in _HINT_WORDS:
        skip = _NOT_HINT_AFTER.get(word, ())
        i = low.find(word)
        while i >= 0:
            after = i + len(word)
            if skip and low.startswith(skip, after):
                i = low.find(word, after)
                continue
            start = low.rfind("\n", 0, i) + 1
            end = low.find("\n", after)
            end = len(low) if end < 0 else end + 1
            spans.append((start, end))
            i = low.find(word, end)
    if len(spans) < 2:
        return spans
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def env_secret_values(env: dict | None = None, min_len: int = 6) -> list[str]:
    """The values of the secret-named variables of ``env`` (default: this process), longest first."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if v and len(v) >= min_len and is_secret_name(k)}, key=len, reverse=True)


def mask_text(text: str, values: list[str] | None = None) -> str:
    """``text`` with secrets masked: credential-looking values, secret keys' and options' values, and ``values``
    (default: this process's secret-named environment variables)."""
    values = env_secret_values() if values is None else values
    spans = _hinted_lines(text)
    if spans is None:
        text = _mask_patterns(text)
    elif spans:
        parts, at = [], 0
        for start, end in spans:
            parts += [text[at:start], _mask_patterns(text[start:end])]
            at = end
        parts.append(text[at:])
        text = "".join(parts)
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
