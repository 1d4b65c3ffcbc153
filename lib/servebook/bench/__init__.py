"""Chapter 05's benchmark: one streaming client for every engine: single stream, concurrency sweeps, the client's own ceiling.

    tok = load_tokenizer(model_dir)
    prompts = build_prompts(tok, input_len=128, n=16, seed=0)
    results = run_requests(url, model, prompts, max_tokens=128, concurrency=4, engine="transformers", tokenizer=tok)
    summary = single_stream(url, model, prompts, store=store, tokenizer=tok, runs=5, warmup=2)
    levels = concurrency_sweep(url, model, prompts, store=store, tokenizer=tok, max_concurrency=128)
    ceiling = client_ceiling(store=store, tokenizer=tok, clients=CLIENTS, tokenizer_dir=model_dir)
    verdict = ceiling_verdict(store.rows("client_ceiling"))   # servebook, httpx and bench_serving on one fake server

Modules, one job each: ``prompts`` (prompts and tokenizer), ``payload`` (request bodies), ``transport`` (the
asyncio HTTP/1.1 client, httptools), ``sse`` (events -> measurements), ``client`` (``run_requests``, here or
on a host), ``runs`` (single stream, sweep), ``stats`` (t-intervals, percentiles), ``fake`` and ``ceiling``
(the client's own limit), ``httpx_stream`` and ``bench_serving`` (a library client and SGLang's, measured beside it),
``inprocess`` (decode without a server), ``plots``, ``cli`` (``servebook bench``).

Fixed output lengths: ``ignore_eos`` for vLLM/SGLang, a ``generation_config`` with ``min_new_tokens`` for
``transformers serve``; otherwise the real length is reported.
"""

from __future__ import annotations

from .ceiling import CEILING_GOAL, CLIENTS, ceiling_check, ceiling_levels, ceiling_comparison, ceiling_verdict, client_ceiling
from .cli import _run_cli, main, register
from .client import _host_batch, _host_models, check_server, run_requests
from .fake import FakeSSEServer
from .inprocess import inprocess_decode_rate
from .payload import fixed_length_fields
from .plots import plot_latency, plot_pareto
from .prompts import Prompt, build_prompts, load_tokenizer
from .runs import (concurrency_levels, concurrency_sweep, current, over_starts, prompts_sha, record_start, remeasured, single_stream,
                   start_measured, summarize_level, sweep_stalls)
from .sse import RequestResult, finish as _finish
from .stats import mean_ci, t_quantile
from .transport import RawStream as _Raw

__all__ = [
    "Prompt",
    "RequestResult",
    "load_tokenizer",
    "build_prompts",
    "fixed_length_fields",
    "check_server",
    "run_requests",
    "single_stream",
    "current",
    "over_starts",
    "record_start",
    "start_measured",
    "prompts_sha",
    "remeasured",
    "ceiling_check",
    "concurrency_sweep",
    "sweep_stalls",
    "concurrency_levels",
    "summarize_level",
    "mean_ci",
    "t_quantile",
    "inprocess_decode_rate",
    "FakeSSEServer",
    "client_ceiling",
    "ceiling_levels",
    "ceiling_comparison",
    "ceiling_verdict",
    "CLIENTS",
    "CEILING_GOAL",
    "plot_pareto",
    "plot_latency",
    "register",
    "main",
]
