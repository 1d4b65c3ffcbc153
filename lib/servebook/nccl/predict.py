"""From microseconds to tokens: per-token communication time per setting, the recommendation, its launch lines.

The recommendation never carries a host policy (``servebook.hosts.host_policy_env``): that is a rule of the
host, recorded in the run's manifest, not a finding of the grid.
"""

from __future__ import annotations

from .grid import Setting, parse_grid

__all__ = ["per_token_prediction", "recommend", "env_block"]

def _graph_points(ar):
    """Standard-shape graph rows of the torch path (what an engine's captured decode step issues)."""
    g = ar[(ar["mode"] == "graph") & (ar["path"] == "torch")]
    if "shape_study" in g:
        g = g[g["shape_study"] != True]  # noqa: E712
    return g


def per_token_prediction(ar, layers: int, batches: list[dict], allreduces_per_layer: int = 2):
    """Per-token communication time for each setting: all-reduces per token x graph latency at the model's size."""
    import pandas as pd

    g = _graph_points(ar)
    out = []
    default = g[g["setting"] == "default"]
    for s in batches:
        for setting, grp in g.groupby("setting"):
            pt = grp[grp["bytes"] == s["bytes"]]
            if pt.empty:
                continue
            lat = float(pt["us_median"].iloc[0])
            base = default[default["bytes"] == s["bytes"]]
            base_lat = float(base["us_median"].iloc[0]) if len(base) else float("nan")
            n = allreduces_per_layer * layers
            out.append({"setting": setting, "batch": s["batch"], "bytes": s["bytes"], "us_per_allreduce": lat,
                        "allreduces_per_token": n, "ms_per_token": n * lat / 1000,
                        "delta_ms_vs_default": n * (lat - base_lat) / 1000, "sum_ok": bool(pt["sum_ok"].all())})
    return pd.DataFrame(out)


FIDELITY = 0.15  # servebook's graph-replayed batch-1 latency within this share of nccl-tests' is the fidelity target (report)
NOISE = 0.05  # a setting must beat NCCL's defaults by more than this share per token, and be no more than this share slower


def recommend(pred, noise: float = NOISE) -> dict:
    """The setting with the lowest batch-1 per-token time, if it beats default by more than ``noise``; else default.

    A setting whose sum check failed anywhere is never recommended.
    """
    if pred is None or len(pred) == 0:
        return {"setting": None, "reason": "nothing was measured"}
    b1 = pred[pred["batch"] == pred["batch"].min()]
    ok = b1[b1["sum_ok"]]
    bad = sorted(set(b1[~b1["sum_ok"]]["setting"]))
    if ok.empty:
        return {"setting": None, "reason": "no setting passed the sum check", "excluded": bad}
    best = ok.sort_values("ms_per_token").iloc[0]
    default = ok[ok["setting"] == "default"]
    if default.empty:
        return {"setting": best["setting"], "reason": "default was not measured", "excluded": bad}
    # no regression: a setting slower than default by more than the noise at any measured decode size is out
    worse = set()
    for setting, grp in pred[pred["sum_ok"]].groupby("setting"):
        if (grp["delta_ms_vs_default"] > grp["ms_per_token"] * noise).any():
            worse.add(setting)
    ok = ok[~ok["setting"].isin(worse - {"default"})]
    best = ok.sort_values("ms_per_token").iloc[0]
    d = default.iloc[0]
    if best["setting"] == "default" or best["ms_per_token"] > d["ms_per_token"] * (1 - noise):
        return {"setting": "default", "reason": (f"no setting beats NCCL's own choice by more than {noise:.0%} at batch {int(d['batch'])} "
                                                  f"({d['ms_per_token']:.3f} ms/token default; best {best['setting']} {best['ms_per_token']:.3f})"),
                "excluded": bad}
    return {"setting": best["setting"], "reason": (f"{best['ms_per_token']:.3f} ms/token vs {d['ms_per_token']:.3f} default at batch "
                                                    f"{int(best['batch'])} ({-best['delta_ms_vs_default']:.3f} ms/token saved), "
                                                    "and no slower than default at any measured decode batch"),
            "excluded": bad, "slower_somewhere": sorted(worse)}


def env_block(setting_label: str | None, model_ref: str = "<model>", tp: int = 2) -> str:
    """A shell env block and launch commands per engine for the recommended setting (the engines' own commands,
    :func:`servebook.engines.user_command`)."""
    s = parse_grid(setting_label) if setting_label and setting_label != "default" else [Setting()]
    env = dict(s[0] if s else {})
    lines = [f"export {k}={v}" for k, v in env.items()]
    if not env:
        lines.insert(0, "# NCCL's own choices measured best here: nothing to force")
    from ..engines import user_command

    lines += ["", "# vLLM (its custom all-reduce serves small messages on NVLink unless --disable-custom-all-reduce)",
              user_command("vllm", model_ref, tp=tp),
              "# SGLang (same note: --disable-custom-all-reduce routes decode all-reduces through NCCL)",
              user_command("sglang", model_ref, tp=tp)]
    return "\n".join(lines)

