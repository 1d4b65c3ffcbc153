"""Chapter 05: the concurrency sweep's stop, one rule where it is recorded and where a page reads it again.

The sweep's levels are given (``runs._sweep_level`` replaced by one that records a level of a chosen throughput): the
stop's rule, its recording and the page's reading of it are the real ones."""

from __future__ import annotations

import pytest

from servebook import bench
from servebook.bench import figures, runs
from servebook.bench.saturation import SATURATION_GROWTH, fell, grew, stop_words
from servebook.results import RunStore

PROMPTS = [bench.Prompt(text=f"p{i}", tokens=2) for i in range(4)]


def _sweep(tmp_path, monkeypatch, throughputs: dict, patience: int = 1, extra: dict | None = None) -> RunStore:
    """A sweep over ``throughputs`` ({C: tok/s}) with the stop rule at work, recorded in a fresh run; ``extra``: more
    columns of a level's summary row ({C: {column: value}})."""
    def level(url, model, prompts, key, common, store, n, request_rate, progress, warm):
        s = {**key, "requests": n, "ok": n, "failed": 0, "throughput_tok_s": throughputs[key["concurrency"]],
             **(extra or {}).get(key["concurrency"], {})}
        store.append("bench_summary", s)
        return s
    monkeypatch.setattr(runs, "_sweep_level", level)
    store = RunStore.at(tmp_path / "run")
    bench.concurrency_sweep("http://127.0.0.1:9", "m", PROMPTS, store=store, label="a", levels=sorted(throughputs),
                            saturation_patience=patience, progress=False)
    return store


def test_a_sweep_whose_last_level_fell_15_percent_is_a_fall_where_recorded_and_on_the_page(tmp_path, monkeypatch):
    """h200x1-trust's SGLang sweep: 911.6 tok/s at C=2, 773.4 at C=4 (-15%). The old code recorded "saturated" (a fall
    counted only below half the best) while the page said "fell 15%", and the stall listing (0.75 x best) left it out."""
    store = _sweep(tmp_path, monkeypatch, {1: 483.4, 2: 911.6, 4: 773.4, 8: 2000.0})
    (stop,) = store.rows("bench_sweep_stops")
    (page,) = figures.sweep_parameters(store)
    assert stop["stopped_before"] == 8 and stop["levels_run"] == [1, 2, 4]
    assert stop["stopped_by"] == page["stopped_by"] == "throughput fell"
    assert page["why"] == stop["reason"] and "fell 15%" in page["why"]
    (st,) = bench.sweep_stalls(store.rows("bench_summary"), [])
    assert (st["concurrency"], st["best_before_concurrency"]) == (4, 2)


def test_a_level_that_held_is_saturation_everywhere_and_no_fall(tmp_path, monkeypatch):
    store = _sweep(tmp_path, monkeypatch, {1: 483.4, 2: 911.6, 4: 880.0, 8: 2000.0})  # -3.5%: within the band
    (stop,) = store.rows("bench_sweep_stops")
    (page,) = figures.sweep_parameters(store)
    assert stop["stopped_by"] == page["stopped_by"] == "saturation" and page["why"] == stop["reason"]
    assert bench.sweep_stalls(store.rows("bench_summary"), []) == []


@pytest.mark.parametrize("p99, kind", [(1.07, "first-token waits"), (0.03, "saturation")])
def test_a_level_that_held_while_its_first_tokens_waited_is_no_saturation(tmp_path, monkeypatch, p99, kind):
    """h200x1-live's vLLM sweep: C=4 held within the band (693.7 -> 697.1 tok/s) while one request waited 1.07 s for its
    first token (median 28 ms) and each user decoded at 354 tok/s, so 4 users would make 1,417: the page called the stop
    "saturated" and, further down, "no saturation point". One rule now names it, where recorded and where read again;
    the same level without the wait is saturation."""
    waits = {4: {"ttft_server_s_p50": 0.028, "ttft_server_s_p99": p99, "per_user_tok_s": 354.0}}
    store = _sweep(tmp_path, monkeypatch, {1: 400.0, 2: 693.7, 4: 697.1, 8: 2000.0}, extra=waits)
    (stop,) = store.rows("bench_sweep_stops")
    (page,) = figures.sweep_parameters(store)
    assert stop["stopped_by"] == page["stopped_by"] == kind and page["why"] == stop["reason"]
    assert ("not a saturation point" in page["why"]) == (kind != "saturation")
    assert ("1.07 s" in page["why"]) == (kind != "saturation")


def test_the_band_is_one_both_ways():
    """10% each way, from the band's one home; ``bench.saturation`` hands on the same objects."""
    from servebook.stated import band

    assert (SATURATION_GROWTH, grew, fell) == (band.SATURATION_GROWTH, band.grew, band.fell)
    assert grew(1101.0, 1000.0) and not grew(1099.0, 1000.0) and fell(899.0, [1000.0]) and not fell(901.0, [1000.0])
    best = 1000.0
    assert grew(best * (1 + SATURATION_GROWTH) + 1, best) and not grew(best * (1 + SATURATION_GROWTH) - 1, best)
    assert fell(best * (1 - SATURATION_GROWTH) - 1, [best]) and not fell(best * (1 - SATURATION_GROWTH) + 1, [best])
    assert not fell(None, [best]) and not grew(None, best)
    assert stop_words([(1, 100.0)]) is None and stop_words([(1, 100.0), (2, None)]) is None


def test_a_stop_recorded_by_the_old_rule_is_read_by_the_new_one_and_the_page_says_so(tmp_path, monkeypatch):
    """A row written before ``stopped_by`` existed, calling a 15% fall saturation: the page shows the one rule's kind and
    names what was recorded; a row that agrees is shown as it is."""
    store = _sweep(tmp_path, monkeypatch, {1: 483.4, 2: 911.6, 4: 773.4, 8: 2000.0})
    old = {k: v for k, v in store.rows("bench_sweep_stops")[0].items() if k not in ("stopped_by", "recorded_at", "execution")}
    old["reason"] = "throughput grew less than 10% over 911.6 tok/s for 1 levels: saturated"
    (tmp_path / "run" / "bench_sweep_stops.jsonl").unlink()
    store.append("bench_sweep_stops", old)
    (page,) = figures.sweep_parameters(store)
    assert page["stopped_by"] == "throughput fell"
    assert page["why"].startswith("throughput fell 15%") and "recorded it as saturation when the sweep ran" in page["why"]
    old["reason"] = "throughput fell to 263.5 tok/s from a best of 891.3: not saturation by itself"  # the old rule's fall
    (tmp_path / "run" / "bench_sweep_stops.jsonl").unlink()
    store.append("bench_sweep_stops", old)
    (page,) = figures.sweep_parameters(store)
    assert page["stopped_by"] == "throughput fell" and "recorded it as" not in page["why"]


@pytest.mark.parametrize("run, label, kind", [("h200x1-trust", "sglang", "throughput fell"), ("h200x1-trust", "vllm", "throughput fell"),
                                              ("h200x1-live", "vllm", "first-token waits"), ("h200x1-book", "transformers", "saturation")])
def test_recorded_runs_one_kind_per_sweep_and_the_stall_listing_agrees(run, label, kind):
    from servebook.paths import book_root

    store = RunStore(book_root() / "data" / "runs" / run)
    (page,) = [p for p in figures.sweep_parameters(store) if p["label"].startswith(label + "/")]
    assert page["stopped_by"] == kind
    listed = {s["concurrency"] for s in bench.sweep_stalls(*runs.current(store.rows("bench_summary"), store.rows("bench_requests")))
              if s["label"] == page["label"]}
    assert (page["last_level"] in listed) == (kind == "throughput fell")


@pytest.mark.parametrize("last, flagged", [(911.6 * 0.89, True), (911.6 * 0.91, False)])
def test_the_pages_saturation_check_holds_a_saturation_stop_to_the_band(last, flagged):
    """``stated``'s contradiction check reads the band from its one home (``stated.band``, which ``bench.saturation``
    imports): a stop called "saturation" is flagged where its last level lies 11% below its best, and not at 9%."""
    from servebook.stated.consistency import contradictions

    def table(header, *rows):
        return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</tbody></table>")
    html = (table(["", "label", "stopped_by", "why"], ["0", "a", "saturation", "held"])
            + table(["", "label", "concurrency", "throughput_tok_s"],
                    *[[str(i), "a", str(c), f"{t:.1f}"] for i, (c, t) in enumerate(((1, 483.4), (2, 911.6), (4, last)))]))
    assert bool(contradictions({"p.html": html}, kinds=("saturation",))) == flagged


def test_a_sweep_whose_last_levels_failed_stopped_on_failures_not_saturation():
    from servebook.bench.saturation import FELL, stop_words

    why, kind = stop_words([(1, 100.0), (2, 200.0), (4, None), (8, None)])
    assert kind == FELL and "C=4, 8 served no request successfully" in why and "not saturation" in why
    assert "saturated" not in why
