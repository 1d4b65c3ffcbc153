"""Chapter 03's decode agreement: a perturbed decode is flagged, a correct one passes.

A stub engine (a real HTTP server speaking vLLM's and SGLang's token-id formats) runs a small deterministic "model";
it can flip a share of its decode-step tokens or add noise to its decode-step logits, leaving its prefill (the first
token of each request) untouched, as a broken decode kernel would. Then the real engine: transformers serve on the
embedded model, its default against eager, and against a decode-only noisy attention registered in the server.
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

import servebook.backends
from servebook.backends import agreement
from servebook.backends.outputs import _disagreement, _disagrees, greedy_completions
from servebook.errors import ServebookError
from servebook.backends.report import describe

VOCAB = 64
PROMPTS = [[1, 5, 9, 2], [7, 7, 3], [11, 40, 2, 8, 30], [60, 1]]


def _logprobs(ctx: list[int], noise: float = 0.0) -> list[float]:
    rng = random.Random(hash(tuple(ctx[-6:])) & 0xFFFFFFFF)
    logits = [rng.gauss(0, 2.0) for _ in range(VOCAB)]
    if noise:
        nrng = random.Random(len(ctx) * 7919 + 1)
        logits = [x + nrng.gauss(0, noise) for x in logits]
    m = max(logits)
    z = m + math.log(sum(math.exp(x - m) for x in logits))
    return [x - z for x in logits]


class _Stub:
    """The stub model: greedy decode with top-k log-probabilities; ``flip`` / ``noise`` perturb decode steps only."""

    def __init__(self, flip: float = 0.0, noise: float = 0.0):
        self.flip, self.noise, self.requests = flip, noise, 0

    def decode(self, ids: list[int], n: int, k: int):
        ctx, out = list(ids), []
        for step in range(n):
            lp = _logprobs(ctx, self.noise if step > 0 else 0.0)
            order = sorted(range(VOCAB), key=lambda t: -lp[t])
            t = order[0]
            if step > 0 and self.flip and random.Random(len(ctx) * 31 + ctx[-1]).random() < self.flip:
                t = order[-1]  # far outside any tolerance
            out.append((t, lp[t], [(i, lp[i]) for i in order[:k]]))
            ctx.append(t)
        return out


def _serve(stub: _Stub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            stub.requests += 1
            if self.path == "/v1/completions":  # vLLM: return_tokens_as_token_ids, return_token_ids
                assert isinstance(body["prompt"], list) and body["return_tokens_as_token_ids"] and body["temperature"] == 0
                steps = stub.decode(body["prompt"], body["max_tokens"], body["logprobs"])
                ans = {"choices": [{"text": "", "token_ids": [t for t, _, _ in steps], "logprobs": {
                    "tokens": [f"token_id:{t}" for t, _, _ in steps], "token_logprobs": [lp for _, lp, _ in steps],
                    "top_logprobs": [{f"token_id:{i}": v for i, v in top} for _, _, top in steps]}}]}
            elif self.path == "/generate":  # SGLang native: [logprob, id, text] triples
                assert body["return_logprob"] and body["sampling_params"]["temperature"] == 0
                steps = stub.decode(body["input_ids"], body["sampling_params"]["max_new_tokens"], body["top_logprobs_num"])
                ans = {"text": "", "meta_info": {"output_token_logprobs": [[lp, t, None] for t, lp, _ in steps],
                                                 "output_top_logprobs": [[[v, i, None] for i, v in top] for _, _, top in steps]}}
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(ans).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def stubs():
    started = []

    def start(**kw):
        stub = _Stub(**kw)
        srv, url = _serve(stub)
        started.append(srv)
        return stub, url

    yield start
    for s in started:
        s.shutdown()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_correct_decode_passes_and_a_perturbed_one_is_flagged(stubs, engine):
    _, ref_url = stubs()
    ref = agreement.reference_decodes(engine, ref_url, "m", PROMPTS, max_tokens=12)
    assert [len(r["ids"]) for r in ref] == [12] * 4 and all(len(t) == agreement.TOP_K for r in ref for t in r["top"])

    same, url = stubs()
    got = agreement.decode_agreement(engine, url, "m", PROMPTS, ref)
    assert got["decode_agreement"] == 1.0 and got["decode_positions"] == 4 * 11 and got["decode_tolerance"] == agreement.TOLERANCE
    assert got["decode_requests"] == 4 and got["decode_first_divergence"] is None and not _disagrees(got)
    assert got["decode_logprob_mad"] == 0.0 and "decode" in got["decode_path"]

    flipped, url = stubs(flip=0.3)
    bad = agreement.decode_agreement(engine, url, "m", PROMPTS, ref)
    assert bad["decode_agreement"] < agreement.MIN_AGREEMENT and _disagrees(bad)
    assert bad["decode_prefill_agreement"] == 1.0  # the prefill is right: only the decode kernel is wrong
    assert bad["decode_requests"] > 4  # re-anchored on the default's tokens after each flip
    first = bad["decode_first_divergence"]
    assert first["forced"] != first["default"] and first["position"] >= 1
    assert "decode agreement with the default backend is" in _disagreement(bad)


def test_logit_noise_beyond_the_tolerance_is_flagged_and_within_it_passes(stubs):
    _, ref_url = stubs()
    ref = agreement.reference_decodes("vllm", ref_url, "m", PROMPTS, max_tokens=16)
    _, noisy = stubs(noise=3.0)
    bad = agreement.decode_agreement("vllm", noisy, "m", PROMPTS, ref)
    assert bad["decode_agreement"] < agreement.MIN_AGREEMENT, bad
    _, quiet = stubs(noise=0.01)  # kernel-sized differences: near-ties are tolerated
    ok = agreement.decode_agreement("vllm", quiet, "m", PROMPTS, ref)
    assert ok["decode_agreement"] >= agreement.MIN_AGREEMENT and 0 < ok["decode_logprob_mad"] < agreement.TOLERANCE, ok


def test_a_near_tie_within_the_tolerance_counts_as_agreement():
    ref = [{"ids": [3, 4, 5], "lp": [-1.0, -1.0, -1.0], "top": [[[3, -1.0]], [[4, -1.0], [9, -1.05]], [[5, -1.0], [8, -1.5]]]}]
    forced = {(): [3, 9, 5], (3, 4): [8]}  # after the prompt [0]; after [0] + the default's first two tokens

    def fake(ids, n):  # position 1: a near-tie (9 vs 4, 0.05 nats); position 2 after re-anchoring: 8 vs 5, 0.5 nats
        return {"ids": forced[tuple(ids[1:])][:n], "lp": [None] * n, "top": []}

    got = agreement.compare_decodes(ref, [[0]], fake, tolerance=0.1)
    assert got["decode_positions"] == 1 and got["decode_agreement"] == 1.0 and got["decode_near_ties"] == 1
    assert got["decode_prefill_positions"] == 2 and got["decode_prefill_agreement"] == 0.5  # 8 vs 5 came from a prefill


def test_an_engine_without_the_request_is_not_a_verdict(stubs):
    _, url = stubs()
    ref = agreement.reference_decodes("transformers", url, "m", PROMPTS, max_tokens=4)  # the stub has no /servebook/decode
    assert "unsupported" in ref and "404" in ref["unsupported"]
    got = agreement.decode_agreement("transformers", url, "m", PROMPTS, ref)
    assert got["decode_agreement"] is None and "404" in got["decode_note"]


def test_one_json_post_serves_both_checks_and_the_status_meaning_is_the_callers(stubs):
    """``agreement`` and ``outputs`` post through one helper: a 404 is "no such request" to the decode check
    (DecodeUnsupported, not a verdict) and a failure to the greedy completions (ServebookError)."""
    pkg = Path(servebook.backends.__file__).parent
    assert [p.name for p in sorted(pkg.glob("*.py")) if "urllib.request.Request(" in p.read_text()] == ["_http.py"]
    _, url = stubs()
    with pytest.raises(ServebookError, match="answered HTTP 404") as exc:
        greedy_completions(f"{url}/elsewhere", "m", ["x"], max_tokens=2, timeout=10)
    assert not isinstance(exc.value, agreement.DecodeUnsupported)
    with pytest.raises(agreement.DecodeUnsupported, match="answered HTTP 404"):
        agreement._post(f"{url}/elsewhere", {}, 10)


def test_a_run_recorded_before_the_check_says_so():
    old = pd.DataFrame([{"engine": "sglang", "attention": "auto", "mode": "graph", "outcome": "ok", "tf_top1_agreement": 1.0}])
    assert "not recorded in this run" in describe(old)
    new = old.assign(decode_agreement=1.0, decode_positions=124, decode_tolerance=0.1)
    text = re.sub(r"<[^>]+>", "", describe(new))  # as the page shows it (its figures are tagged spans)
    assert "decode path" in text and "0.1 nats" in text and "/generate" in text and "Under 90%" in text


# ---------------------------------------------------------------------------------------------
# the real engine: transformers serve on the embedded model
# ---------------------------------------------------------------------------------------------
_NOISY = textwrap.dedent('''
    import runpy, sys, torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def noisy_decode(module, query, key, value, attention_mask, **kw):
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kw)
        if query.shape[-2] == 1:  # a decode step: a broken decode kernel; the prefill stays exact
            g = torch.Generator().manual_seed(int(key.shape[-2]))
            out = out + 3.0 * torch.randn(out.shape, generator=g).to(out)
        return out, weights

    AttentionInterface.register("sdpa", noisy_decode)  # the server accepts only its listed names: this one is sdpa, broken
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
''')


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_transformers_serve_default_eager_and_a_broken_decode_kernel(embedded_model, tmp_path, no_leftover_servers):
    from servebook.backends import force_each_backend
    from servebook.engines import get_engine
    from servebook.results import RunStore

    eng = get_engine("transformers")
    launch = eng.launch

    def launch_with_noisy(model, attention=None, **kw):  # "noisy_decode": the real server, its sdpa function replaced
        if attention != "noisy_decode":
            return launch(model, attention=attention, **kw)
        real = launch(model, attention="sdpa", **kw)
        real.cmd = [real.cmd[0], "-c", _NOISY, *real.cmd[1:]]
        return real

    eng.launch = launch_with_noisy
    eng.same_backend = lambda asked, reported: asked == reported or (asked == "noisy_decode" and reported == "sdpa")
    store = RunStore.at(tmp_path / "run")
    rows = force_each_backend(eng, embedded_model, [None, "eager", "noisy_decode"], store, max_tokens=8, runs=2,
                              ready_timeout=240, progress=None, preflight=False)
    by = {r["attention"]: r for r in rows}
    auto, eager, noisy = by["auto"], by["eager"], by["noisy_decode"]
    for r in (auto, eager):
        assert r["outcome"] == "ok", (r.get("outcome"), r.get("error"), r.get("decode_note"))
        assert r["decode_agreement"] >= agreement.MIN_AGREEMENT and r["decode_positions"] >= 4 * 7
        assert "/servebook/decode" in r["decode_path"]
    assert auto["decode_agreement"] == 1.0  # the default against its own reference decode, asked again
    # the reference decode is the server's own greedy output: its ids spell the server's /v1/completions text
    tok = __import__("transformers").AutoTokenizer.from_pretrained(str(embedded_model))
    for ref, text in zip(auto["decode_reference"], auto["completions"]):
        assert tok.decode(ref["ids"], skip_special_tokens=True).startswith(text)
    assert noisy.get("reported") == "sdpa", {k: v for k, v in noisy.items() if k in ("outcome", "error", "launch", "log_tail")}
    assert noisy["outcome"] == "wrong output" and noisy["decode_agreement"] < agreement.MIN_AGREEMENT, noisy.get("decode_agreement")
    assert noisy["decode_prefill_agreement"] == 1.0  # prefill untouched: only the decode steps were broken


@pytest.mark.slow
def test_a_recorded_run_without_the_check_still_renders_and_says_so(tmp_path, monkeypatch):
    """Chapter 03 executed again (measure=False) on a run recorded before the decode check: the page renders and states
    that decode agreement was not recorded in that run."""
    import re
    import shutil
    from pathlib import Path

    from servebook.book import refresh_chapter
    from servebook.render import render_book

    recorded = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200x1-live"
    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "no-engines"))
    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    row = refresh_chapter(run, "03", {"compare_engines": "vllm", "model": str(recorded / "models" / "kimi-slice")})
    assert row["status"] == "ok", row
    render_book(run, tmp_path / "book")
    page = re.sub(r"<[^>]+>", "", (tmp_path / "book" / "03_force_each_backend.html").read_text())
    assert "Decode agreement: not recorded in this run" in page
    assert "decode: not recorded in this run" in page  # the check-yourself answer too
