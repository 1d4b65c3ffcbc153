"""Client fidelity: servebook's client vs sglang.bench_serving on the real embedded engine, and both ceilings.

The SGLang env is the cached one (built through the envs API when absent: ~5 min from an empty cache).
Figures are printed (run with -s) and written to the test's tmp dir as fidelity.json.
"""

from __future__ import annotations

import json
import os

import pytest

from servebook import bench
from servebook.bench import compare as bench_compare

pytestmark = [pytest.mark.slow, pytest.mark.envs]

# Tolerance. The embedded engine decodes on this host's CPU cores, the same cores both clients use;
# its own speed drifts between consecutive runs of ONE client by 12-25% (measured here: ITL 14.8 -> 20.7 ms
# between servebook runs minutes apart). So this test does NOT demonstrate the 5% agreement (that
# needs a quiet GPU engine); it catches definition errors (per-chunk ITL, slot wait counted in TTFT, wrong
# token counts), which show up as 2x or more. The bound is 50%, on each client's best of three alternating
# turns: a CI machine running other tests beside this one slowed one bench_serving turn by 53% (ITL 10.3 against
# 6.4 ms) while a definition error moves every turn alike. The 5% agreement is shown on a paced server
# instead (test_agreement_on_a_paced_server): steady, known timing, the same two clients.
TOL = 0.50


@pytest.fixture(scope="module")
def sglang_env():
    return bench_compare.ensure_bench_serving("sglang==0.5.9", progress=None)


def test_agreement_on_a_paced_server(sglang_env, embedded_model, tmp_path):
    """Both clients against a server whose timing is known and steady (first token 50 ms after the
    headers, then one token every 10 ms), taking turns, pinned to one CPU with the server on another.

    A client's own overhead can only add to TTFT and ITL and take from tok/s, and no client can read
    faster than the pacing. So: servebook never reads under the pacing, and it is within 5% of
    bench_serving or closer to the pacing than bench_serving is. (Measured here: C=1 ITL -1.1%, tok/s +2.4%,
    TTFT -7.2% with bench_serving 7.8 ms over the pacing and servebook 3.6 ms; at C=8 bench_serving's TTFT
    was 37 ms over the pacing on its one core.)"""
    tok = bench.load_tokenizer(embedded_model)
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = (cpus[0], cpus[-1]) if len(cpus) > 1 else (None, None)
    pacing = {"ttft_ms": 50.0, "itl_ms": 10.0}
    with bench.FakeSSEServer(tokens_per_event=1, events_per_write=1, delay_s=pacing["itl_ms"] / 1e3,
                             ttft_s=pacing["ttft_ms"] / 1e3, cpu=server_cpu) as fake:
        for c in (1, 8):
            a = bench_compare.agreement(sglang_env.python, fake.url, "fake-sse", embedded_model, tok, input_len=32,
                                        output_len=32, concurrency=c, num_prompts=2 * c if c > 1 else 4, engine="",
                                        repeats=3, pin_cpu=client_cpu, workdir=tmp_path / f"c{c}")
            assert a["bench_serving"]["completed"] == a["num_prompts"]
            assert all(r["completed"] == a["num_prompts"] for r in a["servebook"]["runs"])
            (bs_pid,) = {r["process_pid"] for r in a["bench_serving"]["runs"]}  # one bench_serving process, all turns
            with pytest.raises(ProcessLookupError):
                os.kill(bs_pid, 0)  # and stopped
            for metric, m in a["metrics"].items():
                sb, bs = m["servebook"], m["bench_serving"]
                print(f"paced C={c} {metric}: servebook {sb:.3f} bench_serving {bs:.3f} diff {100 * m['rel_diff']:+.1f}%")
                if metric in pacing:
                    assert sb >= pacing[metric], (c, metric, m)          # never faster than the server
                    assert sb <= 1.05 * bs, (c, metric, m)               # no more overhead than bench_serving, within 5%
                else:
                    assert sb >= 0.95 * bs, (c, metric, m)


@pytest.fixture(scope="module")
def server(embedded_model, tmp_path_factory):
    from servebook.engines import get_engine
    from servebook.servers import Server

    d = tmp_path_factory.mktemp("server")
    launch = get_engine("transformers").launch(str(embedded_model))
    with Server.start(launch, log_path=d / "server.log", registry=d / "servers.jsonl", progress=None, ready_timeout=300) as srv:
        yield srv


def test_agreement_with_bench_serving_and_ceilings(sglang_env, server, embedded_model, tmp_path):
    tok = bench.load_tokenizer(embedded_model)
    report = {"agreement": [], "ceiling": None}
    for c in (1, 8):
        a = bench_compare.agreement(sglang_env.python, server.base_url, str(embedded_model), embedded_model, tok,
                                    input_len=32, output_len=32, concurrency=c, num_prompts=max(4, 2 * c),
                                    repeats=3, workdir=tmp_path / f"c{c}")
        report["agreement"].append(a)
        assert a["bench_serving"]["completed"] == a["num_prompts"]
        assert all(s["completed"] == a["num_prompts"] for s in a["servebook"]["runs"]), a["servebook"]
        # both see the same fixed-length stream: output_len tokens per request
        assert a["bench_serving"]["output_tokens"] == a["num_prompts"] * 32
        assert all(s["output_tokens"] == a["num_prompts"] * 32 for s in a["servebook"]["runs"])
        for metric, m in a["metrics"].items():
            print(f"C={c} {metric}: best turns servebook {m['servebook_best']:.3f} bench_serving {m['bench_serving_best']:.3f} "
                  f"diff {100 * m['rel_diff_best']:+.1f}% (means {100 * m['rel_diff']:+.1f}%, servebook spread "
                  f"{100 * m['servebook_spread']:.1f}%, tol {100 * TOL:.0f}%)")
            assert abs(m["rel_diff_best"]) <= TOL, (c, metric, m)

    rows = bench_compare.ceilings(sglang_env.python, embedded_model, concurrencies=(1, 64), tokens_per_request=2048,
                                  requests_per_level=2, workdir=tmp_path / "ceiling")
    report["ceiling"] = rows
    (tmp_path / "fidelity.json").write_text(json.dumps(report, indent=1, default=str))
    for r in rows:
        print(f"ceiling C={r['concurrency']}: servebook {r['servebook_tok_s']:.0f} tok/s ({r['servebook_us_per_token']:.2f} us/tok), "
              f"bench_serving {r['bench_serving_tok_s']:.0f} tok/s ({r['bench_serving_us_per_token']:.2f} us/tok), ratio {r['ratio']:.1f}x")
        assert r["servebook_ok"] == r["bench_serving_ok"] == r["requests"]
        assert r["ratio"] >= 1.5, r


def test_three_client_ceilings_on_one_fake_server(sglang_env, embedded_model, tmp_path):
    """Chapter 05's comparison as the book runs it: servebook, httpx and sglang.bench_serving (one process for every
    level) on the same fake servers; every level measured, and the verdict read from the rows. The verdict itself is
    this host's, so it is printed, not asserted."""
    from servebook.results import RunStore

    store = RunStore.at(tmp_path / "run")
    rows = bench.client_ceiling(store=store, concurrencies=(1, 8), events_per_write=(1, 64), tokens_per_request=2048,
                                requests_per_level=2, clients=bench.CLIENTS, bench_serving=sglang_env,
                                tokenizer_dir=embedded_model, workdir=tmp_path / "bs")
    assert len(rows) == 12
    for r in rows:
        print(f"epw={r['events_per_write']} C={r['concurrency']} {r['client']}: {r['stream_tok_s'] or 0:,.0f} tok/s "
              f"({r['ok']}/{r['requests']}; {r['skipped'] or ''})")
        assert r["skipped"] is None and r["ok"] == r["requests"] and r["tokens"] == 2048 * r["requests"], r
        assert r["stream_tok_s"] > 5_000, r
    bs = [r for r in rows if r["client"] == "sglang.bench_serving"]
    assert all(f"sglang {sglang_env.version}" in r["method"] for r in bs)
    v = bench.ceiling_verdict(store.rows("client_ceiling"))
    print(v["ceilings"], v["ratios"], v["reason"])
    assert v["bench_serving_measured"]
    # decided only where both clients set the pace at one token per read; a 2-core machine usually cannot (its one-core
    # fake server caps them), and then the verdict says so instead of deciding
    r1 = v["decided_in"]
    assert r1["events_per_write"] == 1 and r1["servebook_busy"] is not None and r1["httpx_busy"] is not None
    if r1["client_bound"]:
        assert v["justified"] is (r1["servebook_reaches"] and not r1["httpx_reaches"])
    else:
        assert v["justified"] is None and "set the pace" in v["reason"]
    assert v["ratios"]["servebook"] == pytest.approx(max(r["stream_tok_s"] for r in rows if r["client"] == "servebook")
                                                     / max(r["stream_tok_s"] for r in bs))
