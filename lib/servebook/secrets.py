"""Mask secrets before they reach a notebook, a table or a log: by value first, then by pattern.

    register("s3cret-value")                               # a value this process saw at launch: masked wherever it appears
    registered()                                           # the registered values and this environment's credentials
    mask_text("db s3cret-value ok")                        # 'db *** ok' (also across a line wrap or colour codes)
    mask_env({"HF_TOKEN": "hf_abc", "NCCL_PROTO": "LL"})   # {'HF_TOKEN': '***', 'NCCL_PROTO': 'LL'}
    mask_value({"cmd": "x --api-key abc", "n": 3})         # {'cmd': 'x --api-key ***', 'n': 3}
    mask_argv(["vllm", "serve", "m", "--api-key", "abc"])  # [..., '--api-key', '***']
    copy_masked(fd, "run/logs/server.log")                 # a server's output, masked line by line as it is written

The first layer works like a CI system's registered secrets: every value of an environment variable or option whose
name suggests a credential (``_secret_patterns.is_credential_name``: key, token, secret, pass, pwd, cred, auth,
cookie, session), every URL password, and every value a caller registers is replaced wherever it appears, also
JSON-, HTML- or percent-escaped. Numbers and booleans are never registered. The second layer
(``_secret_patterns.mask_patterns``) masks secrets by their shape, for those the book never saw.

Values reach other processes through their environment: the variables ``SERVEBOOK_SECRET_<n>`` (the book's
references, ``secret_refs``) and ``SERVEBOOK_SECRET_VALUES`` (a JSON list, for the log copier) are read by
``registered()`` there. This module and ``_secret_patterns`` import only the standard library and nothing of
servebook: the log copier runs their source as it is (``masker_source``), both here (``python -I -c``, beside a
local server) and inside the watchdog on a remote host.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

try:
    from ._secret_patterns import (MASK, OPTION_WORD, SPECIAL_TOKEN, is_credential_name, is_secret_name,
                                   looks_like_a_number, mask_patterns, url_passwords)
except ImportError:  # run from source (the log copier, the watchdog): _secret_patterns' source ran first in this namespace
    pass

__all__ = ["MASK", "register", "registered", "credential_values", "argv_secret_values", "is_secret_name",
           "is_credential_name", "mask_env", "mask_value", "mask_text", "mask_argv", "copy_masked", "env_secret_values",
           "masker_source", "VALUES_VAR"]

VALUES_VAR = "SERVEBOOK_SECRET_VALUES"  # a JSON list of values to mask, for a process started to mask (the copier)
_REGISTERED: set[str] = set()
_NOT_VALUES = {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "auto", "default", "***", "(none)"}


def _registrable(value: Any, strict: bool = True) -> bool:
    """A value worth masking everywhere: a string of 4 or more characters that is no number, boolean, masked value or
    short lower-case word (under 8 letters; under 12 and at least 6 characters under a name only the broad rule calls
    secret, ``strict`` False)."""
    if not isinstance(value, str) or len(value.strip()) < 4 or looks_like_a_number(value):
        return False
    if value.strip().lower() in _NOT_VALUES or MASK in value or value.startswith("${SERVEBOOK_SECRET"):
        return False
    if re.fullmatch(r"[a-z]+", value) and len(value) < (8 if strict else 12):  # a word ("strict", "ubuntu"), not a secret
        return False
    return strict or len(value) >= 6


def register(*values: Any) -> None:
    """Register secret values seen at launch: from now on this process masks them wherever they appear."""
    for v in values:
        if _registrable(v):
            _REGISTERED.add(v)
        if isinstance(v, str):
            _REGISTERED.update(p for p in url_passwords(v) if _registrable(p))


def credential_values(env: dict) -> list[str]:
    """The values of ``env`` worth registering: those of credential-named variables, and every URL password."""
    out = set()
    for k, v in env.items():
        if not isinstance(v, str) or not v:
            continue
        if k == VALUES_VAR:
            try:
                out.update(x for x in json.loads(v) if _registrable(x))
            except (ValueError, TypeError):
                pass
            continue
        if is_credential_name(str(k)) and _registrable(v, strict=is_secret_name(str(k))):
            out.add(v)
        if "://" in v:
            out.update(p for p in url_passwords(v) if _registrable(p))
    return sorted(out, key=len, reverse=True)


def argv_secret_values(argv: list | tuple) -> list[str]:
    """The values of a command's credential-named options (``--api-key X``, ``--auth-token=X``) and URL passwords."""
    out, words = [], [str(w) for w in argv]
    for i, word in enumerate(words):
        if word.startswith("--") and "=" in word:
            name, _, value = word.partition("=")
            if is_credential_name(name[2:]) and _registrable(value):
                out.append(value)
        elif word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            if is_credential_name(word[2:]) and not SPECIAL_TOKEN.search(word) and _registrable(words[i + 1]):
                out.append(words[i + 1])
        if "://" in word:
            out += [p for p in url_passwords(word) if _registrable(p)]
    return out


_ENV_CACHE: dict = {}


def registered(env: dict | None = None) -> list[str]:
    """The values masked by value: the registered ones and ``env``'s credentials (default: this process's), longest first."""
    if env is None:
        key = hash(frozenset(os.environ.items())), len(_REGISTERED)
        if key not in _ENV_CACHE:
            _ENV_CACHE.clear()
            _ENV_CACHE[key] = sorted(set(credential_values(dict(os.environ))) | _REGISTERED, key=len, reverse=True)
        return _ENV_CACHE[key]
    return sorted(set(credential_values(env)) | _REGISTERED, key=len, reverse=True)


def env_secret_values(env: dict | None = None, min_len: int = 4) -> list[str]:
    """The credential values of ``env`` (default: this process's), registered ones included, longest first."""
    return [v for v in registered(env) if len(v) >= min_len]


# -- masking by value -----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _variants(value: str) -> tuple[str, ...]:
    """``value`` as written, and as JSON, Python repr, HTML and a URL escape it."""
    import html
    import urllib.parse

    forms = {value, json.dumps(value)[1:-1], repr(value)[1:-1], html.escape(value), html.escape(value, quote=False),
             urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe="")}
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


# between two characters of a value: colour codes, or a line wrap (and the next line's indentation)
_GAP = r"(?:\x1b\[[0-?]*[ -/]*[@-~]|\r?\n[ \t]*)*"


@functools.lru_cache(maxsize=4096)
def _gap_pattern(value: str) -> re.Pattern:
    return re.compile(_GAP.join(re.escape(c) for c in value))


def _mask_values(text: str, values: list[str]) -> str:
    """``values`` (longest first, so a value holding another is masked whole) masked in ``text``: as written, escaped,
    and cut by a line wrap or colour codes."""
    gaps = "\x1b" in text or "\n" in text
    for value in values:
        if gaps and len(value) >= 4 and (value[:2] in text or value[-2:] in text):  # wrapped, or coloured in parts
            text = _gap_pattern(value).sub(lambda m: MASK + "\n" * m.group(0).count("\n"), text)
        for form in _variants(value):
            if form in text:
                text = text.replace(form, MASK)
    return text


def mask_text(text: str, values: list[str] | None = None) -> str:
    """``text`` with secrets masked: ``values`` (default: ``registered()``) wherever they appear, then the patterns."""
    values = registered() if values is None else values
    return mask_patterns(_mask_values(text, values))


_mask_text = mask_text  # the name other modules knew


def mask_argv(argv: list | tuple, values: list[str] | None = None) -> list:
    """A command's words with secrets masked, the word after a secret option too (``--api-key abc``)."""
    values = registered() if values is None else values
    out: list = []
    after_option = False
    for word in argv:
        if not isinstance(word, str):
            out.append(_mask_value(word, values))
            after_option = False
            continue
        if after_option and word and not word.startswith("-"):
            out.append(MASK)
        else:
            out.append(mask_text(word, values))
        after_option = (bool(OPTION_WORD.fullmatch(word)) or (word.startswith("--") and is_credential_name(word[2:]))) \
            and not SPECIAL_TOKEN.search(word)
    return out


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` with credential-named variables and secret values masked."""
    values = registered()
    return {k: (MASK if v and (is_secret_name(k) or (is_credential_name(k) and _registrable(str(v), strict=False)))
                else mask_text(str(v), values)) for k, v in env.items()}


def _secret_content(value: Any, values: list[str]) -> Any:
    """The value of a secret-named key: strings (alone or in a list) masked, anything else as it was."""
    if isinstance(value, str):
        return MASK if value else value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return type(value)(MASK if v else v for v in value)
    return _mask_value(value, values)


def _mask_value(value: Any, values: list[str]) -> Any:
    if isinstance(value, str):
        return mask_text(value, values)
    if isinstance(value, dict):
        return {k: (_secret_content(v, values) if isinstance(k, str) and is_secret_name(k) else _mask_value(v, values))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_argv(_across_items(list(value), values), values))
    return value


_PEM_BEGIN_TEXT = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END_TEXT = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")


def _across_items(items: list, values: list[str]) -> list:
    """Lines stored one per item (a log tail): a value wrapped from one item onto the next is masked in both, and
    the lines of a PEM private key between its armour lines are masked."""
    if len(items) < 2 or not all(isinstance(w, str) and "\n" not in w for w in items):
        return items
    if values:
        joined = "\n".join(items)
        masked = _mask_values(joined, values)
        if masked != joined and masked.count("\n") == joined.count("\n"):
            items = masked.split("\n")
    in_pem, out = False, []
    for word in items:
        if in_pem and not _PEM_END_TEXT.search(word):
            word = MASK
        elif in_pem:
            in_pem = False
            word = MASK + word[_PEM_END_TEXT.search(word).start():]
        else:
            begin = list(_PEM_BEGIN_TEXT.finditer(word))
            in_pem = bool(begin) and not _PEM_END_TEXT.search(word, begin[-1].end())
        out.append(word)
    return out


def mask_value(value: Any, values: list[str] | None = None) -> Any:
    """Recursively mask secrets in strings, dicts (by key name too) and lists (the word after ``--api-key`` too);
    numbers and booleans are returned as they are."""
    return _mask_value(value, registered() if values is None else values)


# -- the log copier ---------------------------------------------------------------------------------------------------
_PEM_BEGIN = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(rb"-----END [A-Z0-9 ]*PRIVATE KEY-----")
_ANSI_TAIL = re.compile(rb"(?:\x1b\[[0-?]*[ -/]*[@-~]|[\r\n \t])+$")
_RISKY_END = re.compile(r"(?i)(?:[=:]|--[\w-]+|bearer|basic|digest|token|authorization|cookie)\s*$")


def _ends_with_a_value_start(line: bytes, values: list[bytes]) -> bool:
    """``line`` ends with the first characters (3 or more) of a value: the rest may come on the next line."""
    tail = _ANSI_TAIL.sub(b"", line[-4096:])
    return any(tail.endswith(v[:k]) for v in values for k in range(min(len(v) - 1, 64), 2, -1))


def _safe_cut(data: bytes, limit: int, values: list[bytes]) -> int:
    """Where to cut a line longer than ``limit``: at a space before it that splits no key from its value and no
    value, else at ``limit``; never inside a registered value."""
    cut = limit
    for i in range(limit, max(limit - 16384, 1), -1):
        if data[i - 1:i] in (b" ", b"\t", b",", b";") and not _RISKY_END.search(data[max(0, i - 64):i].decode("utf-8", "replace")):
            cut = i
            break
    for v in values:
        lo = max(0, cut - len(v) + 1)
        at = data.find(v, lo, cut + len(v) - 1)
        if 0 <= at < cut:
            cut = max(at, 1)
    return cut


class _Copier:
    """The state of one log copy: what is held back (a line whose end may start a wrapped value, a PEM key not yet
    ended) and the values to mask."""

    def __init__(self, out: int, values: list[str], max_line: int):
        self.out, self.values, self.max_line = out, values, max_line
        self.raw = [v.encode("utf-8", "surrogateescape") for v in values]
        self.pending = b""
        self.in_pem = False

    def write(self, data: bytes) -> None:
        if self.in_pem:  # the rest of a PEM key whose END line is not yet here
            end = _PEM_END.search(data)
            if not end:
                return self._put(MASK.encode() + b"\n" if data.endswith(b"\n") else MASK.encode())
            self.in_pem = False
            self._put(MASK.encode() + b"\n")
            data = data[end.start():]
        text = mask_text(data.decode("utf-8", "surrogateescape"), self.values)
        begins = list(_PEM_BEGIN.finditer(data))
        if begins and not _PEM_END.search(data, begins[-1].end()):
            self.in_pem = True
        self._put(text.encode("utf-8", "surrogateescape"))

    def _put(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out, view)
            except OSError:  # a full disk: the server must not block on its pipe, so what cannot be written is dropped
                return
            view = view[n:]

    def feed(self, data: bytes) -> None:
        """Write the whole lines of what has arrived; hold a last line that may continue on the next."""
        self.pending += data
        cut = max(self.pending.rfind(b"\n"), self.pending.rfind(b"\r"))
        if cut >= 0:
            ready, rest = self.pending[:cut + 1], self.pending[cut + 1:]
            last = max(ready.rfind(b"\n", 0, len(ready) - 1), ready.rfind(b"\r", 0, len(ready) - 1)) + 1
            if self.raw and _ends_with_a_value_start(ready[last:], self.raw):
                ready, rest = ready[:last], ready[last:] + rest
            self.pending = rest
            if ready:
                self.write(ready)
        while len(self.pending) > self.max_line:
            cut = _safe_cut(self.pending, self.max_line, self.raw)
            self.write(self.pending[:cut])
            self.pending = self.pending[cut:]

    def flush(self, whole: bool) -> None:
        """Write what is held: all of it (``whole``: end of file), or only whole lines (the output went quiet)."""
        if whole or self.pending.endswith((b"\n", b"\r")):
            data, self.pending = self.pending, b""
            if data:
                self.write(data)


def copy_masked(fd: int, log_path: str, values: list[str] | None = None, chunk: int = 1 << 16, max_line: int = 1 << 16,
                hold_s: float = 0.3) -> None:
    """Copy what ``fd`` delivers into ``log_path`` (appended), masked, until end of file.

    Whole lines are written as they arrive (``\\n`` or ``\\r`` ends one, so progress bars appear too); a line that
    ends with the start of a registered value waits for the next line (at most ``hold_s`` seconds), so a value
    wrapped onto it is masked whole; a line longer than ``max_line`` is written in pieces cut at a space that
    splits no secret; what is left at end of file is written then. Bytes that are not UTF-8 pass unchanged.
    ``values``: literal secrets to mask (default: ``registered()`` of this process, whose environment is the server's).
    """
    import select

    values = env_secret_values() if values is None else values
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    copier = _Copier(out, values, max_line)
    try:
        while True:
            if copier.pending:
                try:
                    ready, _, _ = select.select([fd], [], [], hold_s)
                except InterruptedError:
                    continue
                if not ready:
                    copier.flush(whole=False)
                    if copier.pending:  # a partial line: wait for its end without a timeout
                        select.select([fd], [], [])
                    continue
            try:
                data = os.read(fd, chunk)
            except InterruptedError:
                continue
            if not data:
                break
            copier.feed(data)
        copier.flush(whole=True)
    finally:
        os.close(out)


def masker_source() -> str:
    """The source the log copier and the remote watchdog run: ``_secret_patterns`` then this module."""
    here = os.path.dirname(os.path.abspath(__file__))
    parts = []
    for name in ("_secret_patterns.py", "secrets.py"):
        with open(os.path.join(here, name)) as fh:
            parts.append(fh.read())
    return parts[0] + "\n" + parts[1].replace("from __future__ import annotations\n", "", 1)


def _copier_main() -> None:
    """``python -I -c COPIER LOG``: the local servers' log copier (stdin is the server's output)."""
    import signal
    import sys

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # it ends when the server's output ends, never before
        signal.signal(sig, signal.SIG_IGN)
    copy_masked(0, sys.argv[-1])
