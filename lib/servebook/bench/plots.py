"""Plots of chapter 05, read from the stored summary table."""

from __future__ import annotations

__all__ = ["plot_pareto", "plot_latency"]


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
    ax.set_xlabel("per-user decode tok/s")
    ax.set_ylabel("throughput, output tok/s")
    ax.set_title("throughput vs per-user speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    ax.set_xlabel("concurrency")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} percentiles")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


# ---------------------------------------------------------------------------------------
