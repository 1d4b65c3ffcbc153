"""``servebook bench --url URL --model NAME``: the benchmark client against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from ..errors import ParameterError
from .client import check_server, run_requests
from .prompts import build_prompts, load_tokenizer
from .runs import concurrency_sweep, single_stream

__all__ = ["register", "main"]


def _engine_from_server(url: str) -> str:
    import httpx

    try:
        data = httpx.get(url.rstrip("/") + "/v1/models", timeout=5).json().get("data", [])
    except Exception:  # noqa: BLE001
        return ""
    owner = (data[0].get("owned_by") or "").lower() if data else ""
    for name in ("vllm", "sglang"):
        if name in owner:
            return name
    return "transformers" if owner == "local" else ""


_CLI_HELP = "single-stream and concurrency benchmark of any OpenAI-compatible server (chapter 05)"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="model name the server expects (default: the first of /v1/models)")
    p.add_argument("--tokenizer", default="", help="local tokenizer directory (default: --model when it is a directory)")
    p.add_argument("--engine", default="", help="transformers | sglang | vllm (default: guessed from /v1/models)")
    p.add_argument("--api", default="completions", choices=["completions", "chat"])
    p.add_argument("--concurrency", default="1", help="comma-separated levels, e.g. 1,2,4,8")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--requests-per-level", type=int, default=5)
    p.add_argument("--out", default="", help="run directory (default: a new run under runs/)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``servebook`` command (servebook.cli calls this for each plugin module)."""
    p = subparsers.add_parser("bench", help=_CLI_HELP, description=_CLI_HELP)
    _add_arguments(p)
    p.set_defaults(func=_run_cli)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``servebook bench``: benchmark any OpenAI-compatible server."""
    p = argparse.ArgumentParser(prog="servebook bench", description=_CLI_HELP)
    _add_arguments(p)
    return _run_cli(p.parse_args(argv))


def _check_url(url: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and url.isprintable()
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise ParameterError("url", url, "an http:// or https:// URL of the server, e.g. http://127.0.0.1:8000")


def _run_cli(a: argparse.Namespace) -> int:
    from ..errors import ServebookError
    from ..results import RunStore

    try:
        try:
            levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
        except ValueError:
            levels = []
        if not levels or min(levels) < 1:
            raise ParameterError("concurrency", a.concurrency, "comma-separated positive integers, e.g. 1,2,4")
        for name, least in (("input_len", 1), ("output_len", 1), ("runs", 1), ("warmup", 0), ("requests_per_level", 1)):
            if getattr(a, name) < least:
                raise ParameterError(name, getattr(a, name), f"an integer of {least} or more")
        _check_url(a.url)
        models = check_server(a.url)
        model = a.model or (models[0] if models else "")
        if not model:
            raise ParameterError("model", a.model, "the server lists no model; pass --model")
        tok_path = a.tokenizer or (model if Path(model).is_dir() else "")
        if not tok_path:
            raise ParameterError("tokenizer", a.tokenizer, "a local tokenizer directory (prompts are built from it; nothing is downloaded)")
        tok = load_tokenizer(tok_path)
        engine = a.engine or _engine_from_server(a.url)
        prompts = build_prompts(tok, a.input_len, max(8, a.runs + a.warmup), seed=0)
        _probe_completion(a.url, model, prompts[0], a.api, engine, tok)
        store = RunStore.at(a.out) if a.out else RunStore.open()
        out = []
        if 1 in levels:
            out.append(single_stream(a.url, model, prompts, store=store, tokenizer=tok, engine=engine, api=a.api,
                                     max_tokens=a.output_len, runs=a.runs, warmup=a.warmup, progress=not a.json))
        others = [c for c in levels if c != 1]
        if others:
            out.extend(concurrency_sweep(a.url, model, prompts, store=store, tokenizer=tok, engine=engine, api=a.api,
                                         max_tokens=a.output_len, levels=others, requests_per_level=a.requests_per_level,
                                         progress=not a.json))
    except ServebookError as exc:
        print(f"servebook bench: {exc}", file=sys.stderr)
        return 2
    broken = [s for s in out if not s.get("ok")]
    if a.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        for s in out:
            print(_summary_line(s))
        print(f"results: {store.path}")
    if broken:
        levels = ", ".join(f"C={s['concurrency']}" for s in broken)
        why = "; ".join(sorted({str(e) for s in broken for e in (s.get("errors") or [])}))[:300] or "no reason recorded"
        print(f"servebook bench: every request at {levels} failed ({why}); nothing was measured there: the requests and "
              f"their errors are in {store.path}; check the server's log", file=sys.stderr)
        return 1
    return 0


def _probe_completion(url: str, model: str, prompt, api: str, engine: str, tok) -> None:
    """One short completion before anything is measured or recorded: a server that answers none is named here, in one
    line, instead of after a whole benchmark of failed requests."""
    from ..errors import ServerError

    (r,) = run_requests(url, model, [prompt], max_tokens=2, api=api, engine=engine, tokenizer=tok)
    if not r.ok:
        raise ServerError(f"{url} answers /v1/models but its first completion for model {model!r} failed ({r.error}); "
                          f"nothing was measured: check the server's log, --model and --api")


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _summary_line(s: dict) -> str:
    """One printed line per level; a statistic nothing measured (every request failed) prints as n/a."""
    if s["phase"] == "single":
        ms = lambda v: None if v is None else v * 1e3  # noqa: E731
        return (f"C=1  decode {_fmt(s['decode_tok_s_mean'], '.1f')} ± {_fmt(s['decode_tok_s_ci95'] or 0, '.1f')} tok/s "
                f"(95% CI, {s['runs']} runs)  TTFT {_fmt(ms(s['ttft_s_mean']), '.1f')} ms  "
                f"TPOT {_fmt(ms(s['tpot_s_mean']), '.2f')} ms  failed {s['failed']}")
    return (f"C={s['concurrency']:<4} throughput {_fmt(s['throughput_tok_s'], '.1f')} tok/s  per-user "
            f"{_fmt(s['per_user_tok_s'], '.1f')} tok/s  TTFT p50/p99 {_fmt(s['ttft_s_p50'], '.3f')}/"
            f"{_fmt(s['ttft_s_p99'], '.3f')} s  failed {s['failed']}")
