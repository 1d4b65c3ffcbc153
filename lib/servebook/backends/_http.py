"""One JSON POST to a served engine, for chapter 03's checks (``agreement``, ``outputs``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Callable

from ..errors import ServebookError


def post_json(url: str, body: dict, timeout: float,
              http_error: Callable[[int, str], ServebookError] = lambda code, message: ServebookError(message)) -> dict:
    """The server's JSON answer to ``body``. An HTTP error is raised as ``http_error(code, message)`` (what a status
    means is the caller's: ``agreement`` reads 4xx/501 as "this server has no such request"); no answer at all (reset,
    refused, timed out, a torn answer) is a ServebookError naming the server's log."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:400]
        raise http_error(exc.code, f"{url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServebookError(f"{url} gave no answer ({type(exc).__name__}: {exc}); the server may have died, see its log") from exc
