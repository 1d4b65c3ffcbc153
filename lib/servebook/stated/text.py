"""What a page shows for a value: the Python value a table cell holds, and its text.

    text_of(78.2416, ",.1f")                    # '78.2'
    text_of(False, "supported|not supported")   # 'not supported'
    plain(numpy.float64("nan"))                 # None: the run did not give it
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MISSING", "plain", "text_of"]

MISSING = object()  # a quantity the run's tables do not give


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
