"""What a page shows for a value: the Python value a table cell holds, and its text.

    text_of(78.2416, ",.1f")                    # '78.2'
    text_of(False, "supported|not supported")   # 'not supported'
    plain(numpy.float64("nan"))                 # None: the run did not give it
    code("x == 10")                             # '`x == 10`': Markdown inline code, whatever backticks the text holds
    code_locations("kept (a/b.py:12) from")     # 'kept (`a/b.py:12`) from': source locations in recorded prose as code
    clip("ncclInvalidUsage: This usually reflects ...", 30)   # 'ncclInvalidUsage: This …': cut between words, marked
    marked("eturn future.result()\n   ^^^^")      # '…eturn future.result()\n   ^^^^': a cut made when it was recorded, marked
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["MISSING", "plain", "text_of", "code", "code_locations", "clip", "cut_word", "marked", "ELLIPSIS", "number_word"]

ELLIPSIS = "…"

MISSING = object()  # a quantity the run's tables do not give

_NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def number_word(k: int) -> str:
    """A count in prose, as a word below ten ("no", "one", ... "nine"; a figure in words is no stated quantity), else
    its digits."""
    return _NUMBER_WORDS[k] if 0 <= k < len(_NUMBER_WORDS) else str(k)


def plain(value: Any) -> Any:
    """numpy and pandas scalars as the Python values they hold; NaN as None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def text_of(value: Any, fmt: str = "") -> str:
    """What a page shows for ``value``: ``format(value, fmt)``; for a bool, ``fmt`` is "text if true|text if false"."""
    value = plain(value)
    if isinstance(value, bool):
        yes, _, no = (fmt or "yes|no").partition("|")
        return yes if value else no
    if value is None:
        return "n/a"
    if fmt.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)  # a count read back from a table as 5.0
    return format(value, fmt)


def code(text: Any) -> str:
    """``text`` as Markdown inline code (a source location, a line of an engine's code, a recorded error): fenced by
    more backticks than any run of them inside it, so the text shows as it was recorded."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# a source location: a file name with an extension, after optional folders, then ":line" (sglang/srt/server_args.py:1824)
_LOCATION = re.compile(r"(?<![\w./\-])(?:[\w.\-]+/)*[\w\-]+\.[A-Za-z]\w*:\d+(?![\w:])")

_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)  # Markdown inline code: a run of backticks to the next equal run


def code_locations(text: str) -> str:
    """Recorded prose (a why, a cause written before source locations were written as code) with each source location
    ``path/file.py:123`` outside inline code made inline code; the rest unchanged."""
    text, out, at = str(text), [], 0
    for span in _CODE_SPAN.finditer(text):  # inline code spans stay as they are
        out += [_LOCATION.sub(lambda m: f"`{m.group(0)}`", text[at:span.start()]), span.group(0)]
        at = span.end()
    return "".join(out) + _LOCATION.sub(lambda m: f"`{m.group(0)}`", text[at:])


def clip(text: str, width: int) -> str:
    """``text`` whole where it fits in ``width`` characters; else cut at the last space (or line break) before it and
    marked with " …", never inside a word. A text with no space to cut at keeps ``width`` characters and the mark."""
    text = str(text)
    if len(text) <= width:
        return text
    room = max(width - 2, 1)
    cut = max(text.rfind(" ", 0, room), text.rfind("\n", 0, room))
    return (text[:cut] if cut > 0 else text[:room]).rstrip(" ,;:([{'\"") + " " + ELLIPSIS


_CUT_START = re.compile(r"^[a-z_]\w*[^\n]*\n\s+\^")          # a traceback's code line (over its ^^^ line), its start cut off
_CUT_END = re.compile(r"(?:[\[(,{]\s*['\"]?|['\"])[A-Za-z_]\w*$")      # a word inside an unclosed bracket or quote


def cut_word(text: str) -> str | None:
    """The partial word a text ends on inside an unclosed bracket or quote, a cut made mid-word
    (``dict_keys(['ApertusForCausalLM', 'Aquil``: ``Aquil``); None when it ends otherwise. ``marked`` marks it, the
    contradiction check (``consistency``) finds it where nothing marked it."""
    opened = any(text.count(o) > text.count(c) for o, c in (("[", "]"), ("(", ")"), ("{", "}")))
    return re.search(r"\w+$", text).group(0) if opened and _CUT_END.search(text) else None


def marked(text: str) -> str:
    """A recorded text as recorded, its cuts marked where it shows one: a traceback whose first code line lost its
    start (``eturn future.result()`` over a ``^^^`` line) gets "…" before it; a text ending on a word inside an unclosed
    bracket or quote (``dict_keys(['ApertusForCausalLM', 'Aquil``, :func:`cut_word`) loses that partial word for " …"."""
    text = str(text)
    if _CUT_START.match(text):
        text = ELLIPSIS + text
    word = cut_word(text)
    return text[:len(text) - len(word)] + ELLIPSIS if word else text

