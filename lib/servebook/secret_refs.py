"""Secrets given to the book never enter a notebook: each is replaced by a reference that is resolved at launch.

    hide_secrets({"engine_args": "--api-key s3cret-1"})   # {'engine_args': '--api-key ${SERVEBOOK_SECRET_1}'}
                                                          # (os.environ["SERVEBOOK_SECRET_1"] = "s3cret-1", registered)
    resolve_refs(["--api-key", "${SERVEBOOK_SECRET_1}"])  # ['--api-key', 's3cret-1']: what the server is started with
    mask_notebook(nb)                                     # cells, outputs and metadata masked (images kept)
    with masked_notebook_writes(target): papermill.execute_notebook(source, target, ...)

The value travels to the chapters' kernels (which inherit the book's environment) and to the servers they start in
the variable only; papermill's injected cell, the notebook's parameters metadata, the manifest and every printed
launch line hold the reference. Every notebook papermill writes passes through ``mask_notebook`` as it is written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from contextlib import contextmanager
from typing import Any

from .errors import ParameterError
from .secrets import argv_secret_values, mask_text, mask_value, register, registered, url_passwords

__all__ = ["hide_secrets", "resolve_refs", "mask_notebook", "masked_notebook_writes", "mask_known", "REF_PREFIX"]

REF_PREFIX = "SERVEBOOK_SECRET_"
_REF = re.compile(r"\$\{(" + REF_PREFIX + r"\d+)\}")


def _secrets_in(text: str) -> list[str]:
    """The secrets a parameter's text holds: credential options' values (``--api-key X``, in each engine's part of
    ``"sglang: ...; vllm: ..."``), URL passwords, and values already registered."""
    found = set(url_passwords(text)) | {v for v in registered() if v in text}
    for part in text.split(";"):
        head, sep, rest = part.partition(":")
        words = rest if sep and re.fullmatch(r"\s*[A-Za-z_]+\s*", head) else part
        try:
            found.update(argv_secret_values(shlex.split(words)))
        except ValueError:  # unbalanced quotes: the engine's own parser says so at launch
            found.update(argv_secret_values(words.split()))
    return sorted((f for f in found if f and f in text), key=len, reverse=True)


def _reference(value: str) -> str:
    """The variable holding ``value`` (a new one when no variable of this process holds it yet)."""
    for k, v in os.environ.items():
        if k.startswith(REF_PREFIX) and v == value:
            return k
    n = 1 + max([int(k[len(REF_PREFIX):]) for k in os.environ if k.startswith(REF_PREFIX) and k[len(REF_PREFIX):].isdigit()] or [0])
    os.environ[f"{REF_PREFIX}{n}"] = value
    return f"{REF_PREFIX}{n}"


def hide_secrets(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each secret in a string value replaced by ``${SERVEBOOK_SECRET_<n>}``; the values go to this
    process's environment (the kernels and servers it starts inherit them) and are registered for masking."""
    out = {}
    for name, value in params.items():
        if isinstance(value, str) and value:
            for secret in _secrets_in(value):
                register(secret)
                value = value.replace(secret, "${" + _reference(secret) + "}")
        out[name] = value
    return out


def _resolve(word: Any) -> Any:
    if not isinstance(word, str) or "${" + REF_PREFIX not in word:
        return word

    def value(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise ParameterError("secret reference", m.group(0), f"the secret it refers to is set by `servebook book` in the "
                                 f"chapters' environment; run the chapter through servebook book, or set {m.group(1)}")
        return os.environ[m.group(1)]

    return _REF.sub(value, word)


def resolve_refs(words: Any) -> Any:
    """A command's words (or an environment's values) with the book's secret references replaced by their values."""
    if isinstance(words, dict):
        return {k: _resolve(v) for k, v in words.items()}
    return [_resolve(w) for w in words]


_KEEP_MIME = ("image/png", "image/jpeg", "image/gif", "image/webp")


def _joined(value: Any) -> Any:
    """A notebook's multi-line string as one string (files store it as a list of lines; a wrapped value spans two)."""
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _mask_field(holder: dict, key: str, values: list[str]) -> None:
    """``holder[key]`` masked (a string, or lines joined first); left as it was stored when nothing was masked."""
    value = _joined(holder.get(key))
    masked = mask_text(value, values) if isinstance(value, str) else mask_value(value, values)
    if masked != value:
        holder[key] = masked


def _mask_output(out: dict, values: list[str]) -> None:
    for key in ("text", "evalue", "ename"):
        if key in out:
            _mask_field(out, key, values)
    if isinstance(out.get("traceback"), list):
        out["traceback"] = [mask_text(s, values) if isinstance(s, str) else s for s in out["traceback"]]
    data = out.get("data") or {}
    for mime in list(data):
        if mime not in _KEEP_MIME:
            _mask_field(data, mime, values)


def mask_notebook(nb: dict) -> dict:
    """``nb`` (a notebook as a dict or NotebookNode) masked in place: every cell's source, outputs (images kept as they
    are) and metadata, and the notebook's metadata (papermill's parameters too). Returns it."""
    values = registered()
    nb["metadata"] = mask_value(nb.get("metadata", {}), values)
    for cell in nb.get("cells", []):
        _mask_field(cell, "source", values)
        cell["metadata"] = mask_value(cell.get("metadata", {}), values)
        for out in cell.get("outputs", []):
            _mask_output(out, values)
    if type(nb).__name__ == "NotebookNode":  # the masked parts as NotebookNodes again (attribute access)
        import nbformat

        nb.update(nbformat.from_dict(dict(nb)))
    return nb


def mask_known(text: str) -> str:
    """``text`` (a rendered page) with every registered value masked, as written or escaped; no patterns: a page's
    markup and scripts must stay as they are."""
    from .secrets import _mask_values

    return _mask_values(text, registered())


class _MaskedWrites:
    """A papermill I/O handler for one path: each notebook written there is masked first."""

    def __init__(self, local):
        self.local = local

    def write(self, buf, path):
        import nbformat

        nb = mask_notebook(json.loads(buf))
        return self.local.write(nbformat.writes(nbformat.from_dict(nb)), path)

    def __getattr__(self, name):  # read, listdir, pretty_path, cwd: as the local handler does them
        return getattr(self.local, name)


@contextmanager
def masked_notebook_writes(target: str | os.PathLike):
    """While inside, every notebook papermill writes to ``target`` is masked (``mask_notebook``) as it is written."""
    from papermill.iorw import papermill_io

    entry = (str(target), _MaskedWrites(papermill_io.get_handler("local")))
    papermill_io._handlers.insert(0, entry)
    try:
        yield
    finally:
        papermill_io._handlers.remove(entry)

