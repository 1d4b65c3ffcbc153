"""Chapter 03's page (servebook.backends.report) on recorded runs: what its counts count."""

import re

from servebook import findings as sbf
from servebook.paths import book_root
from servebook.results import RunStore

RUNS = book_root() / "data" / "runs"


def test_chapter_03_counts_configurations_and_the_server_starts_they_took():
    """h200x1-trust: each backend row is a configuration (a backend in one mode); those that served correct output were
    started twice (its `starts` parameter). The page names the rows configurations, not starts, and states the server
    starts they took, tagged and recomputed by the registry."""
    from servebook.backends.report import found_lines, starts_table
    from servebook.stated.intervals import starts_of
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    store = RunStore(RUNS / "h200x1-trust")
    table = starts_table(store, ["sglang", "vllm"])
    text = found_lines(store, ["sglang", "vllm"], table)
    plain = re.sub(r"<[^>]+>", "", text)
    assert "starts tried" not in plain
    for b in sbf.backends(store):
        rows = [r for r in store.rows("backends") if r.get("engine") == b["engine"]]
        assert b["server_starts"] == sum(starts_of(r) for r in rows) > b["tried"] == len(rows)
        assert f"**{b['engine']}**: {b['tried']} configurations tried" in plain
        assert f"{b['server_starts']} server starts in all" in plain
    computed: dict = {}
    for s in stated_on(text):  # each quantity recomputed once, however many figures it tags
        if s.name not in computed:
            computed[s.name] = QUANTITIES[s.name].compute(store)
        assert pick(QUANTITIES[s.name], computed[s.name], s.of) == s.value, s


def test_plot_rates_draws_nothing_when_no_backend_produced_a_rate(tmp_path):
    """Every backend failed to start: the rows carry no rate column at all (the fresh-clone crash: numpy.float64.fillna)."""
    import matplotlib

    matplotlib.use("Agg")
    from servebook.backends.report import plot_rates, starts_table

    store = RunStore.at(tmp_path / "run")
    for attention in ("auto", "eager"):
        store.append("backends", {"engine": "transformers", "attention": attention, "outcome": "failed to start",
                                  "error": "transformers exited with code 1 during start"})
    table = starts_table(store, ["transformers"])
    assert "decode_tok_s" not in table and len(table) == 2
    assert plot_rates(table) is None
    store.append("backends", {"engine": "transformers", "attention": "sdpa", "outcome": "ok", "decode_tok_s": 20.0,
                              "decode_tok_s_ci95": 2.0})
    fig = plot_rates(starts_table(store, ["transformers"]))
    assert fig is not None and [b.get_width() for b in fig.axes[0].patches] == [20.0]


def test_the_figure_caption_counts_what_it_draws():
    """h200x1-trust's chapter 03 figure: one bar per configuration that produced a rate, each over its own server starts.
    The caption's counts are those bars and the starts behind them (it once called 7 bars "7 starts drawn")."""
    import matplotlib

    matplotlib.use("Agg")
    from servebook.backends.report import plot_rates, starts_table

    table = starts_table(RunStore(RUNS / "h200x1-trust"), ["sglang", "vllm"])
    fig = plot_rates(table)
    bars = len(fig.axes[0].patches)
    drawn = table[table["start_rates"].apply(lambda v: isinstance(v, list) and len(v) > 0)]
    assert bars == len(drawn) == 7
    starts = sum(len(v) for v in drawn["start_rates"])
    assert f"{bars} configurations (engine, backend, mode) drawn" in fig.sb_caption
    assert f"({starts} starts in all)" in fig.sb_caption and starts == 14 and "starts drawn" not in fig.sb_caption
