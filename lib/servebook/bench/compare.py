"""servebook's client next to ``sglang.bench_serving``: agreement on one server, and each client's ceiling.

    env = ensure_bench_serving("sglang==0.5.9")                  # cached env (built once if absent)
    rows = agreement(env.python, url, model, model_dir, tok, input_len=32, output_len=32, concurrency=8)
    ceil = ceilings(env.python, model_dir, tok)                 # both clients against FakeSSEServer

``sglang.bench_serving`` runs under the engine environment's interpreter, in its own process
(``servebook.bench.bench_serving``), through a small shim (``bench/compare_patches/bench_serving_shim.py``) that (1) pins the process to one CPU when asked and (2)
drops named fields from the JSON bodies it posts. The shim is needed because bench_serving
always sends ``ignore_eos`` (its ``--extra-request-body`` can change the value, not remove the key)
and ``transformers serve`` answers any unknown field with HTTP 422 ("Unexpected fields in the
request: {'ignore_eos'}"). Dropping it costs one ``dict.pop`` per request, outside the timed
stream. The fixed output length then comes, for both clients, from the same
``generation_config`` (``min_new_tokens == max_new_tokens``) that servebook sends to ``transformers serve``.

Workload: servebook's prompts (local text, exact token counts) are written as a ShareGPT-format
JSON; bench_serving's ``random`` dataset with ``--random-range-ratio 1`` truncates each to the
input length (minus the one special token it expects the server to add), so both send the same
text up to that token. ``--backend vllm`` (plain OpenAI /v1/completions; the ``sglang*`` backends
also query ``/get_server_info``, which only SGLang has).

Metrics compared (both clients' definitions line up this way):

* TTFT: servebook's ``ttft_server_s`` (request sent -> first text event), which is what
  bench_serving's TTFT measures (bench_serving starts its clock after the concurrency slot);
* ITL: per-token mean. bench_serving's ITL is per chunk; ``transformers serve`` sends one token per
  chunk, so here the two are the same thing;
* output tok/s: total output tokens / benchmark duration (first send -> last stream end).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .bench_serving import DEFAULT_SPEC, _BenchServingTurns, compat_tokenizer_dir, run_bench_serving, write_sharegpt
from .ceiling import client_ceiling
from .client import run_requests
from .payload import fixed_length_fields
from .prompts import build_prompts, load_tokenizer
from .sse import RequestResult

__all__ = ["ensure_bench_serving", "write_sharegpt", "compat_tokenizer_dir", "run_bench_serving", "servebook_metrics", "agreement", "ceilings"]



def ensure_bench_serving(spec: str = DEFAULT_SPEC, progress=None):
    """The cached SGLang environment (built through the envs API when absent) where bench_serving runs."""
    from ..errors import EngineError
    from ..engines.envs import resolve_engine
    from ..selection.envs import add_engine

    try:
        env = resolve_engine(spec)
    except EngineError:
        env = add_engine(spec, progress=progress)
    return env


def _bs_metrics(res: dict) -> dict:
    itls = [x for per in res.get("itls", []) for x in per]
    return {"ttft_ms": res["mean_ttft_ms"], "itl_ms": res["mean_itl_ms"], "output_tok_s": res["output_throughput"],
            "completed": res["completed"], "output_tokens": res["total_output_tokens"], "duration_s": res["duration"],
            "n_itl": len(itls), "process_pid": res.get("_process_pid"), "wall_s": res.get("_process_wall_s")}


def servebook_metrics(results: Sequence[RequestResult]) -> dict:
    """The same three figures from servebook's per-request results (definitions in the module docstring)."""
    ok = [r for r in results if r.ok]
    itl = [x for r in ok for x in r.itl_ms]
    duration = max(r.e2e_s for r in ok)  # e2e_s counts from the batch start: all requests arrive at once
    return {"ttft_ms": 1e3 * sum(r.ttft_server_s for r in ok) / len(ok), "itl_ms": sum(itl) / len(itl),
            "output_tok_s": sum(r.output_tokens for r in ok) / duration, "completed": len(ok),
            "output_tokens": sum(r.output_tokens for r in ok), "duration_s": duration, "n_itl": len(itl),
            "errors": sorted({r.error for r in results if r.error})[:3]}


def _refused_fields(engine: str) -> tuple[str, ...]:
    """Fields of bench_serving's requests the server refuses: ``transformers serve`` answers ``ignore_eos`` with HTTP 422
    (its fixed length comes in ``generation_config``); SGLang and vLLM take it, so both clients send the same body."""
    return ("ignore_eos",) if (engine or "").split("==")[0].strip().lower() == "transformers" else ()


def agreement(python: str, url: str, model: str, model_dir: str | os.PathLike, tokenizer, *, input_len: int = 32,
              output_len: int = 32, concurrency: int = 1, num_prompts: int | None = None, seed: int = 0,
              engine: str = "transformers", repeats: int = 1, pin_cpu: int | None = None,
              workdir: str | os.PathLike | None = None) -> dict:
    """servebook's client and bench_serving taking turns on one server and workload (servebook, then
    ``repeats`` x (bench_serving, servebook)); each metric's mean over each client's runs and their difference.

    Taking turns brackets the server's own drift; ``pin_cpu`` puts both clients on that CPU (the server
    elsewhere). ``engine`` decides the fixed-length request fields (``""`` for none). All of bench_serving's turns run
    in one process (its imports paid once, during the warm-up), which waits on its stdin, without CPU, while servebook
    runs; each of its runs records ``process_pid`` and ``wall_s`` (that run's wall time, the imports not in it)."""
    n = num_prompts or max(4, 2 * concurrency)
    wd = Path(workdir or tempfile.mkdtemp(prefix="bench-compare-"))
    wd.mkdir(parents=True, exist_ok=True)
    prompts = build_prompts(tokenizer, input_len, n, seed=seed)
    data = write_sharegpt(prompts, wd / "sharegpt.json")
    gen = fixed_length_fields(engine, output_len)
    bs_run_args = {"url": url, "model": model, "dataset_path": data, "input_len": input_len, "output_len": output_len,
                   "num_prompts": n, "max_concurrency": concurrency, "extra_body": gen or None}

    def sb_run() -> dict:
        return servebook_metrics(run_requests(url, model, prompts, max_tokens=output_len, concurrency=concurrency,
                                                    engine=engine, tokenizer=tokenizer, pin_cpu=pin_cpu))

    # one bench_serving process for all its turns (its imports, seconds of CPU, paid once), idle between them
    with _BenchServingTurns(python, str(model_dir), drop_fields=_refused_fields(engine), pin_cpu=pin_cpu,
                            workdir=wd) as bs:
        def bs_run() -> dict:
            res = bs.run(bs_run_args)
            if isinstance(res, str):
                raise RuntimeError(res)
            return _bs_metrics(res)

        # warm the server at this concurrency first (bench_serving imports meanwhile; nothing is measured yet): an
        # engine pays a first-use cost for a batch size it has not served yet (h200x1-live, C=8: servebook's first
        # run waited 466 ms for first tokens, its run after bench_serving 21 ms)
        run_requests(url, model, prompts[:concurrency], max_tokens=output_len, concurrency=concurrency, engine=engine,
                     tokenizer=tokenizer)
        bs.wait_ready()  # from here it waits on its stdin, without CPU, while servebook runs
        sbs, bss = [sb_run()], []
        for _ in range(max(1, repeats)):
            bss.append(bs_run())
            sbs.append(sb_run())
    rows = {}
    for k in ("ttft_ms", "itl_ms", "output_tok_s"):
        sb_vals, bs_vals = [r[k] for r in sbs], [r[k] for r in bss]
        sbk, bsk = sum(sb_vals) / len(sb_vals), sum(bs_vals) / len(bs_vals)
        # each client's best turn: load from elsewhere on the host only slows a turn, so the best turns are the two
        # clients' least disturbed readings (a definition error moves every turn alike and shows there as well)
        best = max if k == "output_tok_s" else min
        sbb, bsb = best(sb_vals), best(bs_vals)
        rows[k] = {"servebook": sbk, "bench_serving": bsk, "rel_diff": (sbk - bsk) / bsk,
                   "servebook_runs": sb_vals, "bench_serving_runs": bs_vals,
                   "servebook_spread": (max(sb_vals) - min(sb_vals)) / sbk,
                   "servebook_best": sbb, "bench_serving_best": bsb, "rel_diff_best": (sbb - bsb) / bsb}
    return {"concurrency": concurrency, "num_prompts": n, "input_len": input_len, "output_len": output_len,
            "repeats": max(1, repeats), "metrics": rows, "servebook": {"runs": sbs}, "bench_serving": {**bss[-1], "runs": bss}}


def ceilings(python: str, model_dir: str | os.PathLike, tokenizer=None, *, concurrencies: Sequence[int] = (1, 64),
             events_per_write: int = 64, tokens_per_request: int = 2048, requests_per_level: int = 2,
             workdir: str | os.PathLike | None = None) -> list[dict]:
    """Streamed tokens/s each client sustains against :class:`~servebook.bench.FakeSSEServer` (:func:`~servebook.bench.client_ceiling`: server
    on the last CPU, client on the first, the clients taking turns level by level), same requests for both; rows per
    concurrency with the ratio servebook / bench_serving."""
    from ..engines.envs import resolve_engine

    env = resolve_engine("sglang", engine_python=python)
    rows = client_ceiling(tokenizer=tokenizer, concurrencies=concurrencies, events_per_write=(events_per_write,),
                                tokens_per_request=tokens_per_request, requests_per_level=requests_per_level,
                                clients=("servebook", "sglang.bench_serving"), bench_serving=env, tokenizer_dir=model_dir,
                                workdir=workdir)
    out = []
    for c in concurrencies:
        sbr, bsr = (next(r for r in rows if r["concurrency"] == c and r["client"] == k) for k in ("servebook", "sglang.bench_serving"))
        if bsr["stream_tok_s"] is None:
            raise RuntimeError(f"sglang.bench_serving at C={c}: {bsr['skipped']}")
        out.append({"concurrency": c, "events_per_write": events_per_write, "tokens_per_request": tokens_per_request,
                    "requests": sbr["requests"],
                    "servebook_tok_s": sbr["stream_tok_s"], "servebook_us_per_token": 1e6 / sbr["stream_tok_s"],
                    "servebook_ttft_p50_s": sbr["ttft_p50_s"], "servebook_ok": sbr["ok"],
                    "bench_serving_tok_s": bsr["stream_tok_s"], "bench_serving_us_per_token": 1e6 / bsr["stream_tok_s"],
                    "bench_serving_ttft_p50_s": bsr["ttft_p50_s"], "bench_serving_ok": bsr["ok"],
                    "ratio": sbr["stream_tok_s"] / bsr["stream_tok_s"], "client_cpu": sbr["client_cpu"], "server_cpu": sbr["server_cpu"]})
    return out


if __name__ == "__main__":  # quick look: python -m servebook.bench.compare URL MODEL_DIR
    env = ensure_bench_serving()
    tok = load_tokenizer(sys.argv[2])
    for c in (1, 8):
        print(json.dumps(agreement(env.python, sys.argv[1], sys.argv[2], sys.argv[2], tok, concurrency=c)["metrics"], indent=1))
    print(json.dumps(ceilings(env.python, sys.argv[2]), indent=1))
