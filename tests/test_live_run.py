"""The recorded live run (data/runs/h200x2-live: SGLang 0.5.16 on an H200, a full-width Kimi-K2.5 slice), checked
without a GPU: what the engine reported against what its own validation resolved, and the rendered book against
the tables it was made from."""

import json
import re
from pathlib import Path

import pytest

from servebook.book import render_book
from servebook.findings import collect
from servebook.results import RunStore

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200x2-live"


@pytest.fixture(scope="module")
def store():
    return RunStore.at(RUN)


def test_the_engine_ran_what_its_own_validation_resolved(store):
    gpus = store.rows("gpus")
    assert {g["name"] for g in gpus} == {"NVIDIA H200"} and {g["capability"] for g in gpus} == {"9.0"}
    rows = [r for r in store.rows("backends") if r["engine"] == "sglang"]
    assert {r["engine_version"] for r in rows} == {"0.5.16"}
    auto = [r for r in rows if r["attention"] == "auto"]
    pre = {r["attention"]: r for r in store.rows("backends_preflight")}
    # two independent sources: the live server's /server_info, and prepare_server_args in its own process
    assert {r["reported"] for r in auto} == {pre["auto"]["resolved"]["attention_backend"]}
    for r in rows:
        if r["outcome"] == "ok" and r["attention"] != "auto":
            assert r["reported"] == r["attention"], r  # forced and really loaded
            assert r["tf_top1_agreement"] >= 0.9 and r["port_free_after"]
    # refused by SGLang's own code, with its own words, and never started
    assert all("only supported on" in pre[b]["error"] for b in ("trtllm_mla", "cutedsl_mla", "tokenspeed_mla"))
    (cm,) = [r for r in rows if r["attention"] == "cutlass_mla"]
    assert cm["error"].startswith("RuntimeError: cutlass_mla_decode is only supported on compute capability 10.0")


def test_the_rendered_book_states_the_tables(store, tmp_path):
    out = tmp_path / "book"
    render_book(RUN, out)
    page = re.sub(r"<[^>]+>", "", (out / "06_findings.html").read_text())
    f = collect(store)
    (b,) = f.backends
    assert f"{b['default_tok_s']:.1f} ± {b['default_ci95']:.1f}" in page
    for o in b["others"]:  # each forced backend against the default, the verdict computed from the intervals
        assert f"{o['tok_s']:.1f} ± {o['ci95']:.1f}" in page and o["verdict"].split(" (")[0] in page
    (t,) = f.throughput
    assert f"{t['single_tok_s']:.1f} ± {t['single_ci95']:.1f}" in page and "vllm" not in json.dumps(f.throughput)
    # each page opens with its answer, the same computed statements
    first = (out / "03_force_each_backend.html").read_text()
    box = first[first.index("This run, in short"):first.index("</ul>", first.index("This run, in short"))]
    assert f"{b['default_tok_s']:.1f} ± {b['default_ci95']:.1f}" in box and "cutlass_mla" in box
    assert "Launch for sglang" in (out / "06_findings.html").read_text()
    # the chapters that did not finish say so on their pages
    status = {r["chapter"]: r for r in store.rows("chapters")}
    assert status["03_force_each_backend"]["status"] == "failed" and "sb-failed" in (out / "03_force_each_backend.html").read_text()


def test_chapter_02s_prediction_is_what_ran(store):
    """Chapter 02 (SGLang's own resolution with the GPU faked as an H200, run on a CPU) against the live H200 server."""
    (pred,) = [r for r in store.rows("selection") if r.get("case") == "profile h200" and r["engine"] == "sglang"]
    assert pred["version"] == "0.5.16" and pred["method"] == "dynamic"
    live = {r["reported"] for r in store.rows("backends") if r["attention"] == "auto" and r["outcome"] == "ok"}
    assert live == {pred["attention_backend"]}
