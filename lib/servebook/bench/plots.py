"""Plots of chapter 05, read from the stored summary table."""

from __future__ import annotations

__all__ = ["plot_pareto", "plot_latency", "label_axes"]


def label_axes(ax, title: str, xlabel: str, ylabel: str | None = None, *, legend_size: int = 8, grid: bool = False):
    """The tail of every chapter 05 plot: axis labels, title, a light grid where asked, the legend; returns ``ax``.
    The page's figure hook (``servebook.pagefigures``) makes each figure's alt text and caption from these."""
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_title(title)
    if grid:
        ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    return ax


def plot_pareto(summary, ax=None):
    """Throughput (tok/s, all users) vs per-user decode tok/s, one line per config; labels are C."""
    import matplotlib.pyplot as plt

    df = summary[summary["phase"] == "sweep"] if "phase" in summary else summary
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for label, g in df.groupby("label"):
        g = g.sort_values("concurrency")
        ax.plot(g["per_user_tok_s"], g["throughput_tok_s"], marker="o", label=label)
        for _, r in g.iterrows():
            if r["per_user_tok_s"] is not None and r["throughput_tok_s"] is not None:
                ax.annotate(f"C={int(r['concurrency'])}", (r["per_user_tok_s"], r["throughput_tok_s"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=8)
    return label_axes(ax, "throughput vs per-user speed", "per-user decode tok/s", "throughput, output tok/s", grid=True)


def plot_latency(summary, metric: str = "ttft_s", ax=None):
    """p50/p90/p99 of ``metric`` (``ttft_s``, ``ttft_server_s``, ``tpot_s``, ``e2e_s``, ``itl_ms``) vs concurrency."""
    import matplotlib.pyplot as plt

    df = summary[summary["phase"] == "sweep"] if "phase" in summary else summary
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for label, g in df.groupby("label"):
        g = g.sort_values("concurrency")
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            col = f"{metric}_p{q}"
            if col in g:
                ax.plot(g["concurrency"], g[col], style, marker="o", label=f"{label} p{q}")
    ax.set_xscale("log", base=2)
    return label_axes(ax, f"{metric} percentiles", "concurrency", metric, legend_size=7, grid=True)


# ---------------------------------------------------------------------------------------
