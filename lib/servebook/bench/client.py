"""The benchmark client: send streaming requests to an OpenAI-compatible server, here or on the server's host.

    results = run_requests(url, model, prompts, max_tokens=128, concurrency=4, engine="transformers", tokenizer=tok)

With a ``host`` that is not this process the client runs on that host, next to the server, and sends back its raw
timestamps and bytes; they are parsed here by the same code, so per-request records are identical to a local run.
"""

from __future__ import annotations

import json
import random
from typing import Sequence

from ..errors import ParameterError, ServerError
from .payload import endpoint, fixed_length_fields, request_body
from .prompts import Prompt
from .sse import RequestResult, against_set, finish
from .transport import RAW_FIELDS, RawStream, run_batch, run_coro

__all__ = ["run_requests", "check_server"]


def _host_batch(url: str, bodies: list, concurrency: int, api: str, arrivals, request_timeout: float,
                time_budget_s, desc: str = "requests") -> list[dict]:
    """Host side of a remote batch: run it and return each raw stream as JSON (reads base64)."""
    import base64

    raws, _cpu = run_coro(run_batch(url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, False, desc))
    return [{**{k: getattr(r, k) for k in RAW_FIELDS}, "reads": [base64.b64encode(b).decode() for b in r.reads]} for r in raws]


def _raws_on_host(host, url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, desc) -> list[RawStream]:
    import base64

    n = len(bodies)
    kwargs = dict(url=url, bodies=bodies, concurrency=concurrency, api=api, arrivals=arrivals,
                  request_timeout=request_timeout, time_budget_s=time_budget_s, desc=desc)
    budget = (time_budget_s or request_timeout * max(1, -(-n // concurrency))) + request_timeout + 60
    # The label names the interaction in a cassette: no URL (its port changes) and no model path (it differs between
    # the machine that recorded and the one that replays).
    rows = host.call("servebook.bench.client:_host_batch", kwargs, timeout=budget,
                     label=f"bench {desc} n={n} C={concurrency} api={api} max_tokens={bodies[0].get('max_tokens') if bodies else None}")
    out = []
    for row in rows:
        raw = RawStream(index=row["index"])
        for k in RAW_FIELDS:
            setattr(raw, k, row[k])
        raw.reads = [base64.b64decode(b) for b in row["reads"]]
        out.append(raw)
    return out


def _host_models(url: str, timeout: float = 5.0) -> dict:
    """Host side of check_server: GET /v1/models with the standard library."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=timeout) as resp:
            return {"status": resp.status, "body": resp.read().decode(errors="replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": ""}
    except (OSError, urllib.error.URLError) as exc:
        return {"status": None, "error": f"{type(exc).__name__}: {exc}"}


def check_server(url: str, timeout: float = 5.0, host=None) -> list[str]:
    """The model names ``url`` serves (GET /v1/models); ServerError naming the URL when it cannot be reached."""
    if host is not None and not host.in_process:
        ans = host.call("servebook.bench.client:_host_models", {"url": url, "timeout": timeout}, timeout=timeout + 60, label="bench /v1/models")
        if ans.get("status") is None:
            raise ServerError(f"cannot reach the server at {url} from {host.spec} ({ans.get('error')}); is it running?")
        if ans["status"] != 200:
            raise ServerError(f"{url}/v1/models answered HTTP {ans['status']}; is this an OpenAI-compatible server?")
        try:
            return [m.get("id") for m in json.loads(ans["body"]).get("data", [])]
        except (ValueError, AttributeError) as exc:
            raise ServerError(f"{url}/v1/models did not return the OpenAI model list; is this an OpenAI-compatible server?") from exc
    import httpx

    try:
        resp = httpx.get(url.rstrip("/") + "/v1/models", timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServerError(f"cannot reach the server at {url} ({type(exc).__name__}: {exc}); start it or pass the right --url") from exc
    if resp.status_code != 200:
        raise ServerError(f"{url}/v1/models answered HTTP {resp.status_code}; is this an OpenAI-compatible server?")
    try:
        return [m.get("id") for m in resp.json().get("data", [])]
    except (ValueError, AttributeError) as exc:
        raise ServerError(f"{url}/v1/models did not return the OpenAI model list; is this an OpenAI-compatible server?") from exc


def run_requests(
    url: str,
    model: str,
    prompts: Sequence[Prompt | str],
    *,
    max_tokens: int = 128,
    concurrency: int = 1,
    api: str = "completions",
    engine: str = "",
    tokenizer=None,
    fixed_length: bool = True,
    request_rate: float | None = None,
    seed: int = 0,
    request_timeout: float = 300.0,
    time_budget_s: float | None = None,
    extra_body: dict | None = None,
    progress: bool = False,
    desc: str = "requests",
    pin_cpu: int | None = None,
    host=None,
    ceiling_tok_s: float | None = None,
    judge_set: bool = True,
) -> list[RequestResult]:
    """Send one request per prompt, at most ``concurrency`` at a time, and measure each.

    All requests arrive at once (``request_rate=None``: a closed loop, later requests wait
    for a slot, and that wait is in their ``ttft_s``) or as a seeded Poisson process of
    ``request_rate`` requests/s. After ``time_budget_s`` no new request starts; those are
    returned as failed with the reason. Failures never raise: each is a result with ``error``.

    With ``host`` (a ``servebook.hosts`` host that is not this process) the client runs on that host,
    next to the server, and sends back its raw timestamps and bytes; they are parsed here by the same
    code, so per-request records are identical to a local run.

    ``ceiling_tok_s``: the hardware's ceiling for one stream, where one is known; a request timed above it is untimed
    (``sse.implausible``), as is one whose rate comes from too few reads, alone or against the batch's other rates
    (``sse.against_set``). ``judge_set=False`` leaves that last judgement to the caller, for a measurement made of several
    calls (a single stream's runs are judged once, together: ``runs._single_runs``).
    """
    if concurrency < 1:
        raise ParameterError("concurrency", concurrency, "1 or more")
    endpoint(api)
    texts = [p.text if isinstance(p, Prompt) else str(p) for p in prompts]
    bodies = [request_body(api, model, t, max_tokens, engine, fixed_length, extra_body) for t in texts]
    arrivals = None
    if request_rate:
        rng = random.Random(seed)
        t, arrivals = 0.0, []
        for _ in bodies:
            arrivals.append(t)
            t += rng.expovariate(request_rate)
    if host is not None and not host.in_process:
        raws = _raws_on_host(host, url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, desc)
    else:
        raws, _cpu = run_coro(run_batch(url, bodies, concurrency, api, arrivals, request_timeout, time_budget_s, progress, desc), pin_cpu)
    expect = max_tokens if fixed_length and fixed_length_fields(engine, max_tokens) else None
    results = [finish(r, api, tokenizer, expect, ceiling_tok_s) for r in raws]
    return against_set(results) if judge_set else results


# ---------------------------------------------------------------------------------------
