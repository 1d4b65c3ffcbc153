"""The second layer of masking: secrets recognised by their shape, for those the book never saw (an engine prints them).

    mask_patterns("curl -H 'X-Auth-Token: abc123'")     # "curl -H 'X-Auth-Token: ***'"
    is_credential_name("MY_SERVICE_TOKEN")              # True: its value is registered at launch (``secrets.register``)
    url_passwords("postgres://:p@ss/w@db:5432/x")       # ['p@ss/w']

Standard library only, and nothing of servebook: ``secrets.masker_source()`` sends this file's source, then
``secrets.py``'s, to the log copier and to the watchdog on a remote host, which run them as they are.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "is_secret_name", "is_credential_name", "url_passwords", "mask_patterns", "looks_like_a_number"]

MASK = "***"
# A name is secret when one of its _/- separated parts says so (HF_TOKEN, NCCL_IB_PASSWORD, OPENAI_API_KEY), so that
# measurement columns such as output_tokens stay readable: the rule for a table's keys, whose values are masked whole.
_SECRET_NAME = re.compile(
    r"(?:^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|APIKEY|CREDENTIALS?|AUTH|COOKIE)(?:$|[_-])"
    r"|(API|ACCESS|PRIVATE|SECRET)[_-]?KEY"
    r"|^SSHPASS$",  # sshpass's password variable
    re.I,
)
# Names that match a secret word but are not secrets: the shell's working directories (PWD is also the common
# abbreviation of "password", as in DB_PWD; the bare shell variables are paths), a desktop's session, ssh's agent.
_NOT_SECRET = {"PWD", "OLDPWD", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS", "XDG_SESSION_DESKTOP", "XDG_SESSION_ID",
               "DESKTOP_SESSION", "SESSION_MANAGER", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "XAUTHORITY", "KEYTIMEOUT"}
# The broad rule for registering values at launch (environment variables, options): a part of the name holds one of
# these words (MY_SERVICE_TOKEN, DbPass, x-auth, SESSIONID, --ssl-keyfile) ...
_CREDENTIAL_WORDS = ("key", "token", "secret", "pass", "pwd", "cred", "auth", "cookie", "session")
# ... unless the part is one of these (max_tokens, --tokenizer, author, keyboard: counts, paths and words, not secrets)
_NOT_CREDENTIAL_PARTS = {"tokens", "tokenizer", "tokenizers", "tokenize", "tokenization", "tokenized", "author", "authors",
                         "authored", "keyboard", "keymap", "keyword", "keywords", "keys", "passes", "passed", "passthrough",
                         "bypass", "compass", "passage", "monkey", "hotkey"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """A table key or variable whose value is masked whole (the narrow rule: ``HF_TOKEN``, ``api_key``)."""
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def is_credential_name(name: str) -> bool:
    """A variable or option whose value is registered as a secret at launch (the broad rule)."""
    if name.upper().lstrip("-") in _NOT_SECRET:
        return False
    parts = [p.lower() for p in re.split(r"[^A-Za-z0-9]+", _CAMEL.sub("_", name)) if p]
    return any(p not in _NOT_CREDENTIAL_PARTS and any(w in p for w in _CREDENTIAL_WORDS) for p in parts)


# a number, with a unit at most (64, 0.95, 1e-4, 8,192, 12GB, 12.3ms, 95%): never a secret, never masked after a count's name
_NUMBER = re.compile(r"^['\"]?[-+]?\d[\d,_]*(?:\.\d+)*(?:e[-+]?\d+)?(?:%|[kmgtp]i?b|[kmgtp]|[mun]?s|x|/s)?['\"]?$", re.I)


def looks_like_a_number(value: str) -> bool:
    return bool(_NUMBER.match(value.strip()))


# -- URLs and DSNs with user info: scheme://user:password@host, the user may be empty, the password may hold @ and / ----
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_WORD_END = re.compile(r"[\s'\"`<>]")
_USER = re.compile(r"[^/:@?#\s]*:")


def _url_password_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each URL password in ``text``: from the colon after the user to the word's last @."""
    spans = []
    for m in _URL_START.finditer(text):
        start = m.end()
        if spans and start < spans[-1][1]:
            continue
        end_m = _WORD_END.search(text, start)
        word = text[start:end_m.start() if end_m else len(text)]
        user = _USER.match(word)
        at = word.rfind("@")
        if not user or at < user.end() or not (word[at + 1:at + 2].isalnum() or word[at + 1:at + 2] == "["):
            continue
        if word[user.end():at] and word[user.end():at] != MASK:
            spans.append((start + user.end(), start + at))
    return spans


def url_passwords(text: str) -> list[str]:
    return [text[a:b] for a, b in _url_password_spans(text)]


def _mask_urls(text: str) -> str:
    for a, b in reversed(_url_password_spans(text)):
        text = text[:a] + MASK + text[b:]
    return text


# -- key=value, options, headers, query strings ---------------------------------------------------------------------
# A quoted or bare value after a key or an option: 'a b' (Python repr), "a\"b" (JSON), ['a', 'b'] (vLLM's
# non-default args print list-valued options so), or a bare word.
_SQ = r"'(?:[^'\\\n]|\\.)*'"
_DQ = r'"(?:[^"\\\n]|\\.)*"'
_VALUE = rf"(?P<value>{_SQ}|{_DQ}|\[[ \t]*(?:(?:{_SQ}|{_DQ})[ \t]*,?[ \t]*)+\]|\$\{{[A-Za-z0-9_]+\}}|[^\s'\",;&)}}\]]+)"
# the book's reference to a secret (``secret_refs``): no secret itself, shown as it is
_REFERENCE = re.compile(r"\$\{SERVEBOOK_SECRET_\d+\}")
# The words that make a key or an option secret (its last part): api_key, hf_token, NCCL_IB_PASSWORD, --api-key.
_KEYWORD = (r"(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token|password|passwd|secret|passphrase"
            r"|pwd|cookie|credentials?|auth|session[_-]?id|sessionid)")
_WORDS = ["api_key", "api-key", "apikey", "access_key", "access-key", "secret_key", "secret-key", "private_key", "private-key",
          "token", "password", "passwd", "secret", "passphrase", "pwd", "cookie", "credential", "credentials", "auth",
          "session_id", "session-id", "sessionid"]
# Words whose values may be counts or flags: a number is not masked after them (a password may be a number).
_COUNTABLE = ("token", "auth", "cookie", "session", "credential")
# Words said in prose too ("per token: GPU-bound", "auth: required"): alone before an unquoted value, they make it a
# secret only when it mixes letters and digits.
_BROAD_KEYS = ("token", "auth", "pwd", "cookie", "credential", "credentials", "session_id", "session-id", "sessionid")
_MIXED = re.compile(r"[A-Za-z].*\d|\d.*[A-Za-z]")
# each word as written in lower, UPPER, Title-Case and camelCase (api_key, API_KEY, Api-Key, ApiKey): spelled out,
# the pattern starts with literals, which the regex engine scans for several times faster than a case-blind one
_CASES = sorted({v for w in _WORDS for v in (w, w.upper(), "-".join(p.capitalize() for p in w.split("-")),
                                              "_".join(p.capitalize() for p in w.split("_")))} | {"ApiKey", "apiKey", "sessionId"},
                key=len, reverse=True)
# key=value, key: value, 'key': value, "key": "value" (one line: [ \t], so a key at a line's end never takes the
# next line). The pattern starts at the key's last word; the callback reads the rest of the key before it.
_KEY_VALUE = re.compile(rf"(?P<kw>{'|'.join(map(re.escape, _CASES))})(?P<q>['\"]?)[ \t]*[=:][ \t]*{_VALUE}")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# --api-key VALUE, --api-key=VALUE, --hf-token VALUE (a value is not another option)
_OPTION = re.compile(rf"--(?P<key>(?i:(?:[A-Za-z0-9]+-)*{_KEYWORD}))(?:=|[ \t]+)(?!-){_VALUE}")
OPTION_WORD = re.compile(rf"--(?:[A-Za-z0-9]+-)*{_KEYWORD}", re.I)
# A tokenizer's special tokens (bos_token='<s>', "pad_token": "<pad>") are not credentials, nor are empty values.
SPECIAL_TOKEN = re.compile(r"(?:^|[_.-])(?:bos|eos|pad|unk|sep|cls|mask|special|additional|image|video|audio|vision|"
                           r"start|end|stop|chat|default|max|min|num|first|last|next|per|total|output|input|prompt)[_.-]?token$", re.I)
_NOT_A_VALUE = re.compile(r"^(?:['\"]?(?:None|null|nil|true|false|\*\*\*)?['\"]?|\[\s*\])$", re.I)
# An HTTP header whose name says credential (X-Api-Key, X-Auth-Token, Private-Token, Cookie, Authorization, ...):
# at a line's start or after a space or quote; the value runs to the line's end or to the quote that opened the header.
_HEADER = re.compile(r"(?:^|(?<=[\s'\"]))(?P<name>(?:[A-Za-z0-9]+-)+[A-Za-z0-9]+|(?i:cookie|authorization|apikey))"
                     r"[ \t]*:[ \t]*(?=\S)", re.M)
_AUTH_SCHEME = re.compile(r"(?i)(?:bearer|basic|digest|token|negotiate|ntlm|apikey|key|hmac-[\w-]+|aws4-hmac-sha256)[ \t]+(?=\S)")
# ?key=..., &token=..., &api_key=... in a query string (&amp; as HTML writes it)
_QUERY = re.compile(r"(?P<pre>[?&](?:amp;)?(?P<name>[A-Za-z0-9_.\-\[\]]+)=)(?P<value>[^&#\s'\"<>]+)")
_QUERY_NAMES = {"key", "sig", "signature", "code", "access_token", "id_token", "refresh_token", "client_secret", "x-amz-signature",
                "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential"}
# PEM private keys: the body between the armour lines
_PEM = re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(.*?)(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)

# Values that look like credentials even under an innocent name (a literal start, no \\b: the callback checks the
# word boundary, which keeps the regex engine's fast literal scan).
_SECRET_VALUE = [
    re.compile(r"hf_[A-Za-z0-9]{8,}"),
    re.compile(r"sk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{8,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{8,}"),
    re.compile(r"xox[abposrce]-[A-Za-z0-9-]{8,}"),  # Slack bot, user, app-level ... tokens
    re.compile(r"xapp-[A-Za-z0-9-]{8,}"),
    re.compile(r"eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*"),  # a JWT: header.payload.signature
    re.compile(r"AKIA[0-9A-Z]{12,}"),
    re.compile(r"(?i)(bearer[ \t]+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(?i)(authorization[ \t]*[:=][ \t]*(?:basic|token|digest)[ \t]+)[A-Za-z0-9._~+/=-]{4,}"),
]
# Cheap first look (str.find on the lowered text, far faster than any pattern): only the lines holding one of these
# words go through the patterns; server logs are large and most of their lines hold none. "token" in "tokens" and
# "tokenizer" is no hint (engines print throughput in tokens/s on every line).
_HINT_WORDS = ("hf_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat", "xox", "xapp-", "eyj", "akia", "bearer",
               "auth", "token", "pass", "pwd", "secret", "key", "cookie", "session", "cred", "://", "?", "-----begin")
_NOT_HINT_AFTER = {"token": ("s", "izer")}


def _masked_value(value: str) -> str:
    """``value`` as written (quotes and list brackets kept) with its content masked."""
    if value.startswith("["):
        return re.sub(rf"{_SQ}|{_DQ}", lambda m: m.group(0)[0] + MASK + m.group(0)[0], value)
    if value[:1] in ("'", '"'):
        return value[0] + MASK + value[0]
    return MASK


def _masked_pair(key: str, pre: str, value: str) -> str:
    """``pre`` (the key and what joins it to its value) and the value masked, unless the value is none."""
    if _NOT_A_VALUE.match(value) or _REFERENCE.fullmatch(value.strip("'\"")):
        return pre + value
    low = key.lower()
    if any(w in low for w in _COUNTABLE) and _NUMBER.match(value):  # "max_token: 12", "auth: 1"
        return pre + value
    if low.endswith("token"):  # a tokenizer's token is no credential: "eos_token='</s>'"
        if SPECIAL_TOKEN.search(key) or value.strip("'\"").startswith("<") or len(value.strip("'\"")) < 8:
            return pre + value
    return pre + _masked_value(value)


def _starts_word(m: re.Match) -> bool:
    i = m.start()
    return i == 0 or not (m.string[i - 1].isalnum() or m.string[i - 1] == "_")


def _sub_secret_value(m: re.Match) -> str:
    if not _starts_word(m):
        return m.group(0)
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
    value = m.group("value")
    if kw.lower() in _BROAD_KEYS and not prefix and value[:1] not in "'\"[" and not _MIXED.search(value):
        return m.group(0)  # a bare word in prose ("per token: GPU-bound", "auth: required"): a value has letters and digits
    return _masked_pair(prefix + kw, m.group(0)[:m.start("value") - start], m.group("value"))


def _sub_option_value(m: re.Match) -> str:
    i = m.start()
    if i and (m.string[i - 1].isalnum() or m.string[i - 1] in "_-"):
        return m.group(0)
    return _masked_pair(m.group("key"), m.group(0)[:m.start("value") - i], m.group("value"))


def _header_value_end(text: str, start: int, quote: str) -> int:
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    if quote:
        i = start
        while True:
            i = text.find(quote, i, end)
            if i < 0 or text[i - 1] != "\\":
                break
            i += 1
        end = end if i < 0 else i
    while end > start and text[end - 1] in " \t\r":
        end -= 1
    return end


def _mask_headers(text: str) -> str:
    out, at = [], 0
    for m in _HEADER.finditer(text):
        if m.start() < at:
            continue
        name = m.group("name")
        if not is_credential_name(name) and name.lower() not in ("authorization", "proxy-authorization"):
            continue
        start = m.end()
        scheme = _AUTH_SCHEME.match(text, start)
        if scheme:
            start = scheme.end()
        quote = text[m.start() - 1] if m.start() and text[m.start() - 1] in "'\"" else ""
        end = _header_value_end(text, start, quote)
        value = text[start:end]
        if not value or value == MASK or _NOT_A_VALUE.match(value) or (_NUMBER.match(value) and not scheme):
            continue
        out += [text[at:start], MASK]
        at = end
    return "".join(out) + text[at:] if out else text


def _sub_query(m: re.Match) -> str:
    name, value = m.group("name"), m.group("value")
    if name.lower() not in _QUERY_NAMES and not is_credential_name(name):
        return m.group(0)
    if value == MASK or _NUMBER.match(value) or _NOT_A_VALUE.match(value):
        return m.group(0)
    return m.group("pre") + MASK


def mask_pem(text: str) -> str:
    """PEM private key bodies masked (the armour lines kept); a key without its END line is masked to the end."""
    if "-----BEGIN" not in text:
        return text
    return _PEM.sub(lambda m: m.group(1) + ("\n" if "\n" in m.group(2) else "") + MASK
                    + ("\n" if m.group(3) and "\n" in m.group(2) else "") + m.group(3), text)


def _mask_patterns_all(text: str) -> str:
    for pattern in _SECRET_VALUE:
        text = pattern.sub(_sub_secret_value, text)
    text = _mask_urls(text) if "://" in text else text
    text = _mask_headers(text) if ":" in text else text
    text = _QUERY.sub(_sub_query, text) if "=" in text else text
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


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def _mask_ansi_lines(text: str) -> str:
    """Lines with escape codes: masked without them where the codes hid a secret (its colours are then lost)."""
    out = []
    for line in text.splitlines(keepends=True):
        if "\x1b" in line:
            plain = _ANSI.sub("", line)
            masked = _mask_patterns_all(plain)
            line = masked if masked != plain else line
        out.append(line)
    return "".join(out)


def mask_patterns(text: str) -> str:
    """``text`` with credential-shaped values masked: known token prefixes, JWTs, PEM bodies, auth headers, URL
    passwords, query-string keys, secret keys' and options' values."""
    text = mask_pem(text)
    if "\x1b" in text:
        text = _mask_ansi_lines(text)
    spans = _hinted_lines(text)
    if spans is None:
        return _mask_patterns_all(text)
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], _mask_patterns_all(text[start:end])]
        at = end
    parts.append(text[at:])
    return "".join(parts)
