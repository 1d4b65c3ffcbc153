"""Chapter 05's tables and plots, read from the run's tables: the last of each measurement, the starts, the sweep, graphs
against eager, SGLang's own client beside servebook's, the client's ceiling and the roofline rows that stand.

    m = measured(store)                 # summary rows, single-stream and sweep frames (the last of each measurement)
    plot_sweep(m["sweep_ok"]); plot_graph_vs_eager(store); cc, notes = client_check(store)
"""

from __future__ import annotations

import re

__all__ = ["measured", "starts_table", "plot_single_runs", "plot_sweep", "graph_eager_pairs", "plot_graph_vs_eager",
           "client_check", "show_ceiling_comparison", "ceiling_warnings", "roofline_shown"]


# -- what was measured ------------------------------------------------------------------------------------------------
def measured(store) -> dict:
    """The recorded benchmark as the chapter shows it: the last of each measurement (``bench.current``; a resumed run that
    measured again with another method keeps the older rows) as rows and pandas frames: ``summary_rows``,
    ``request_rows``, ``summary``, ``single_all`` (every single-stream row), ``single_df`` (those with a rate, one per
    start), ``single_cfg`` (one per configuration, its rate over server starts), ``sweep_df``, ``sweep_ok``."""
    import pandas as pd

    from ..findings import throughput
    from .runs import current

    summary_rows, request_rows = current(store.rows("bench_summary"), store.rows("bench_requests"))
    summary = pd.DataFrame(summary_rows)
    single_all = summary[summary["phase"] == "single"] if len(summary) else summary
    single_df = single_all[single_all["decode_tok_s_mean"].notna()] if len(single_all) else single_all
    single_cfg = single_df.drop_duplicates("label").copy()
    if len(single_cfg):
        single_cfg["decode_tok_s_mean"] = single_cfg["label"].map({t["label"]: t["single_tok_s"] for t in throughput(store)})
    if len(single_df) and "start" not in single_df:
        single_df = single_df.assign(start=0)  # recorded before starts were counted: one start
    sweep_df = summary[summary["phase"] == "sweep"] if len(summary) else summary
    sweep_ok = sweep_df[sweep_df["throughput_tok_s"].notna()] if len(sweep_df) else sweep_df
    return {"summary_rows": summary_rows, "request_rows": request_rows, "summary": summary, "single_all": single_all,
            "single_df": single_df, "single_cfg": single_cfg, "sweep_df": sweep_df, "sweep_ok": sweep_ok}


def starts_table(store):
    """Per configuration: server starts, the per-start means, and the rate and 95% interval the verdicts use."""
    import pandas as pd

    from ..findings import throughput

    return pd.DataFrame([{"label": t["label"], "starts": t["starts"], "per_start_tok_s": t["start_tok_s"], "decode_tok_s": t["single_tok_s"],
                          "ci95": t["single_ci95"], "interval over": t["single_over"]} for t in throughput(store)])


def plot_single_runs(request_rows):
    """Single-stream decode tok/s run by run, one line per configuration (None when nothing was measured)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from .plots import label_axes

    req = pd.DataFrame(request_rows)
    if not len(req):
        return None
    single_req = req[(req["phase"] == "single") & req["ok"]]
    fig, ax = plt.subplots(figsize=(6, 3))
    for label, g in single_req.groupby("label"):
        ax.plot(g["run"], g["decode_tok_s"], "o-", label=label)
    label_axes(ax, "single stream, run by run", "run", "decode tok/s")
    plt.tight_layout()
    return ax


def plot_sweep(sweep_ok):
    """Throughput against per-user speed (labels C=n placed so they do not overlap) and TTFT percentiles by concurrency."""
    import matplotlib.pyplot as plt

    from .plots import plot_latency, plot_pareto

    if not len(sweep_ok):
        return None
    n = sweep_ok["label"].nunique()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2 + 0.25 * 3 * n))
    plot_pareto(sweep_ok, ax=axes[0])
    plot_latency(sweep_ok, "ttft_server_s", ax=axes[1])
    for ax in axes:  # legends below the axes, so no line, point or C=n label sits under one
        ax.margins(x=0.08, y=0.12)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=1)
    plt.tight_layout()
    _spread_labels(axes[0])
    return axes


def _spread_labels(ax, min_gap_pt: float = 10.0) -> None:
    """Move the C=n annotations of ``ax`` apart vertically (in display points) so that no two overlap."""
    texts = [t for t in ax.texts if t.get_text().startswith("C=")]
    if len(texts) < 2:
        return
    ax.figure.canvas.draw()
    placed: list[tuple[float, float, float]] = []  # (x0, x1, y) of labels already placed, display coordinates
    dpi_pt = ax.figure.dpi / 72.0
    for t in sorted(texts, key=lambda t: t.get_window_extent().y0):
        bb = t.get_window_extent()
        y, shift = bb.y0, 0.0
        while any(bb.x0 < x1 and bb.x1 > x0 and abs(y + shift - py) < min_gap_pt * dpi_pt for x0, x1, py in placed):
            shift += min_gap_pt * dpi_pt / 2
        if shift:
            dx, dy = t.xyann
            t.xyann = (dx, dy + shift / dpi_pt)
        placed.append((bb.x0, bb.x1, y + shift))


def graph_eager_pairs(store) -> dict[str, dict[str, float]]:
    """``{configuration: {"graph": ms, "eager": ms}}`` for each configuration measured both ways, like with like: a
    configuration is the engine, the model slice, its quantization and the backend (chapter 05's profiles, unprofiled
    time per token), or the engine, the model and the backend (chapter 03's forced backends, 1000 / decode tok/s), so a
    bf16 graph slice is never set against an INT4 eager one."""
    from ..profile.tables import latest_ok

    pairs: dict[str, dict[str, float]] = {}
    for r in latest_ok(store.rows("profile_runs")):
        key = (f"05 profile: {r['engine']} {r.get('card')}-{r.get('layers')}L {r.get('quant') or 'bf16'} "
               f"{r.get('backend') or 'auto'}")
        if r.get("tpot_ms"):
            pairs.setdefault(key, {})[r.get("mode")] = r["tpot_ms"]
    for r in store.rows("backends"):
        if r.get("outcome") == "ok" and r.get("decode_tok_s"):
            model = str(r.get("bench_model") or "").rstrip("/").rsplit("/", 1)[-1]
            key = f"03 forced: {r['engine']}{' ' + model if model else ''} {r.get('reported') or r.get('attention')}"
            pairs.setdefault(key, {})[r.get("mode")] = 1e3 / r["decode_tok_s"]
    return {k: v for k, v in pairs.items() if "eager" in v and "graph" in v}


def plot_graph_vs_eager(store):
    """Time per token with CUDA graphs and eagerly, for each configuration the run measured both ways
    (``graph_eager_pairs``: like with like). None when the run has no eager row."""
    import matplotlib.pyplot as plt

    from .plots import label_axes

    both = graph_eager_pairs(store)
    if not both:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(both) + 1.2))
    ys = range(len(both))
    ax.barh([y - 0.2 for y in ys], [v["graph"] for v in both.values()], height=0.4, label="CUDA graphs", color="#4C72B0")
    ax.barh([y + 0.2 for y in ys], [v["eager"] for v in both.values()], height=0.4, label="eager", color="#DD8452")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(list(both), fontsize=8)
    ax.invert_yaxis()
    label_axes(ax, "CUDA graphs against eager, per configuration (engine, model slice, quantization, backend)",
               "ms per output token (single stream)")
    plt.tight_layout()
    return ax


# -- servebook's client against SGLang's own, on the live server ------------------------------------------------------------
def client_check(store):
    """``bench_client_check`` as the page shows it: (the last row of each label, level and metric as a frame, the notes
    printed under it: a metric measured again after a harness fault, the largest difference, or why nothing ran)."""
    import pandas as pd

    cc = store.table("bench_client_check")
    notes = []
    if not len(cc):
        tried = [f for f in store.rows("failures") if str(f.get("step", "")).startswith("bench_serving check")]
        if tried:  # it ran and failed: say so with bench_serving's own last error line
            last = [ln.strip() for ln in str(tried[-1]["error"]).splitlines() if "Error" in ln] or [str(tried[-1]["error"])[-200:]]
            notes.append(f"sglang.bench_serving did not complete on the live server ({len(tried)} attempt(s), table `failures`): {last[-1]}")
        else:
            notes.append("not measured here: needs a live SGLang server (engine or compare_engines sglang) on this machine")
        return cc, notes
    if "harness_fault" not in cc:
        cc["harness_fault"] = None
    first = cc.drop_duplicates(["label", "concurrency", "metric"], keep="first")
    cc = cc.drop_duplicates(["label", "concurrency", "metric"], keep="last")  # a level measured again stands in its last form
    for (_, a), (_, b) in zip(first.iterrows(), cc.iterrows()):
        if pd.notna(a["harness_fault"]) and pd.isna(b["harness_fault"]):
            fault = re.sub(r",?\s*not measured again", ", not yet measured again when the correction was written", str(a["harness_fault"]))
            notes.append(f"{b['metric']} at C={int(b['concurrency'])}: measured again after a servebook fault was fixed ({fault}): "
                         f"servebook {a['servebook']:.3g} then, {b['servebook']:.3g} now; bench_serving {a['bench_serving']:.3g} then, {b['bench_serving']:.3g} now")
    judged = cc[cc["harness_fault"].isna()]  # a row servebook measured wrongly compares nothing
    for _, r in cc[cc["harness_fault"].notna()].drop_duplicates("metric").iterrows():
        notes.append(f"{r['metric']}: not compared, servebook's value is a harness fault: {r['harness_fault']}")
    if len(judged):
        worst = judged.loc[judged["rel_diff"].abs().idxmax()]
        notes.append(f"largest difference: {worst['metric']} at C={int(worst['concurrency'])}: {worst['rel_diff']:+.1%} "
                     f"(servebook's own run-to-run spread there: {worst['servebook_spread']:.1%})")
    return cc, notes


# -- small displays ----------------------------------------------------------------------------------------------------
def show_ceiling(ceiling_df) -> tuple[float | None, float | None]:
    """servebook's own client-ceiling rows shown, and ``(ceiling_tok_s, per_read_us)``: the most streamed tokens/s, and the
    client CPU per token where every token is its own network read. ``(None, None)``, said in one line, where the run
    never measured the client (a run re-executed with ``measure=False`` that holds no ``client_ceiling``)."""
    from IPython.display import display

    if not len(ceiling_df):
        print("client ceiling: not measured in this run (table client_ceiling is empty; measure=True measures it): "
              "no rate below is checked against the client")
        return None, None
    display(ceiling_df[["concurrency", "events_per_write", "tokens", "stream_tok_s", "client_cpu_us_per_token", "parse_us_per_token",
                        "ttft_server_p50_s"]])
    ceiling_tok_s = float(ceiling_df["stream_tok_s"].max())
    per_read_us = float(ceiling_df[ceiling_df["events_per_write"] == ceiling_df["events_per_write"].min()]["client_cpu_us_per_token"].max())
    print(f"client ceiling: {ceiling_tok_s:,.0f} streamed tokens/s; {per_read_us:.1f} us of client CPU per token when every token "
          "is its own network read")
    return ceiling_tok_s, per_read_us


def show_ceiling_comparison(store, verdict: dict, ceiling_all) -> None:
    """The three clients' ceilings side by side and level by level (where the run compared them), and the goal."""
    import pandas as pd
    from IPython.display import display

    from .ceiling import ceiling_comparison

    if "client" in ceiling_all:
        display(pd.DataFrame(ceiling_comparison(store.rows("client_ceiling"))).round(2))
        display(ceiling_all.sort_values(["events_per_write", "concurrency"], kind="stable")[
            ["events_per_write", "concurrency", "client", "ok", "requests", "stream_tok_s", "client_cpu_us_per_token", "client_busy",
             "ttft_server_p50_s"]].round(3))
        for client, why in verdict["skipped"].items():
            print(f"{client} not measured: {why}")
    print(f"goal: servebook's ceiling at least {verdict['goal']}x sglang.bench_serving's; {verdict['reason']}")


def ceiling_warnings(ceiling_check_df) -> list[str]:
    """A warning per rate near the client's ceiling, and the highest use of it (``bench.ceiling_check`` rows)."""
    out = []
    if not len(ceiling_check_df):
        return out
    for _, r in ceiling_check_df[ceiling_check_df["near_ceiling"]].iterrows():
        out.append(f"WARNING: {r['label']} {r['phase']} C={r['concurrency']}: {r['tok_s']:,.1f} tok/s is {r['share_of_ceiling']:.0%} of the "
                   f"client's ceiling and keeps {r['client_core_share'] or 0:.0%} of its core busy: this number may be the client's, not the server's")
    worst = ceiling_check_df.sort_values("share_of_ceiling").iloc[-1]
    out.append(f"highest use of the client's ceiling: {worst['share_of_ceiling']:.2%} ({worst['label']}, {worst['phase']} C={worst['concurrency']}); "
               f"warning threshold {worst['warn_at']:.0%}")
    return out


def roofline_shown(store, host_roof: dict, seed: dict, show: bool = True):
    """The rows of ``bench_roofline`` that stand now, as one frame: this run's standing "measured here" rows
    (``host_roofline``) and the seed rows this execution computed (``seed_roofline``); with the sentence that says how many
    earlier rows the table keeps unshown (superseded by a later measurement of the same case, or computed by an earlier
    rule), so no superseded row sits beside its current one under the same label. ``show``: print the sentence and return
    the frame (a notebook cell's last value); else ``(frame, sentence)``."""
    import pandas as pd

    rows = list(host_roof.get("rows") or []) + list(seed.get("rows") or [])
    kept = len(store.rows("bench_roofline")) - len(rows)
    cols = ["case", "measured_tok_s", "roofline_tok_s", "pct_of_roofline", "source", "recorded_at"]
    df = pd.DataFrame(rows)
    df = df[[c for c in cols if c in df]] if len(df) else df
    note = (f"The rows that stand now; {kept} earlier row{'' if kept == 1 else 's'} of table `bench_roofline` (superseded by "
            "a later measurement of the same case, or computed by an earlier rule) stay in the table, not shown."
            if kept > 0 else "Every row of table `bench_roofline`.")
    if show:
        print(note)
        return df if len(df) else "no roofline computed"
    return df, note
