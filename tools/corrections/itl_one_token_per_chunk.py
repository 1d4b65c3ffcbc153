"""Recompute the per-token ITL of a recorded run whose server streamed one token per chunk (2026-12-01).

Before commit "per-token ITL follows the server's count", servebook spread each chunk gap over the tokenizer's re-count of
the chunk's text. On the full-width Kimi slices (random or dummy weights) that text re-tokenized into about 10x the tokens
the server generated (h200x1-live: 1,217 re-counted for 128 generated), so ``itl_ms`` came out about 10x too small while
``chunk_gaps_ms``, TTFT, TPOT and the decode rates were right. Where a request's ``n_chunks`` equals the server's
``output_tokens_usage`` (one token per chunk), the per-token ITL is exactly its chunk gaps: this rewrites ``itl_ms``,
``itl_p50_ms`` and ``itl_p99_ms`` of those requests, then the ITL fields of each ``bench_summary`` row from its own
requests (the requests of a measurement recorded after the previous summary of it, as ``bench.current`` assigns them).
Other rows are left as they are and counted.

    python tools/corrections/itl_one_token_per_chunk.py data/runs/h200x1-live [more runs]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
from servebook.bench.runs import requests_of  # noqa: E402
from servebook.bench.stats import percentile  # noqa: E402


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def correct(run: Path) -> dict:
    reqs, summ = _rows(run / "bench_requests.jsonl"), _rows(run / "bench_summary.jsonl")
    fixed = 0
    for q in reqs:
        if q.get("output_tokens_usage") is not None and q.get("n_chunks") == q["output_tokens_usage"] and q.get("chunk_gaps_ms"):
            if q.get("itl_ms") != q["chunk_gaps_ms"]:
                fixed += 1
            q["itl_ms"] = list(q["chunk_gaps_ms"])
            q["itl_p50_ms"], q["itl_p99_ms"] = percentile(q["itl_ms"], 50), percentile(q["itl_ms"], 99)
            q["chunk_count_source"] = "one per chunk (the server's count; recomputed by tools/corrections/itl_one_token_per_chunk.py)"
    redone = 0
    for s, mine in requests_of(summ, reqs):  # each summary with the requests recorded for it (as bench.current assigns them)
        mine = [q for q in mine if q.get("ok")]
        odd = [q for q in mine if not str(q.get("chunk_count_source", "")).startswith("one per chunk")]
        if not mine or s.get("itl_corrected"):
            continue
        if odd:  # the per-chunk split of those requests is unknown: no ITL rather than a wrong one
            for f in ("itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "itl_ms_mean"):
                if f in s:
                    s[f] = None
            s["itl_corrected"] = (f"not recomputable: {len(odd)} request(s) streamed a number of chunks other than their "
                                  "tokens, so how their gaps split per token is unknown (tools/corrections/itl_one_token_per_chunk.py)")
            redone += 1
            continue
        itl = [x for q in mine for x in q["itl_ms"]]
        for p in (50, 90, 99):
            if f"itl_ms_p{p}" in s:
                s[f"itl_ms_p{p}"] = percentile(itl, p)
        if "itl_ms_mean" in s:
            s["itl_ms_mean"] = statistics.mean(itl)
        s["itl_corrected"] = "recomputed from chunk gaps, one token per chunk (tools/corrections/itl_one_token_per_chunk.py)"
        redone += 1
    _write(run / "bench_requests.jsonl", reqs)
    _write(run / "bench_summary.jsonl", summ)
    return {"run": str(run), "requests": len(reqs), "requests_fixed": fixed, "summaries": len(summ), "summaries_recomputed": redone}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(correct(Path(arg)))
