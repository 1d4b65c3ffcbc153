"""The full model's decode step predicted from two slices of the same card, measured on the same GPU.

    p = predict_full(shallow, deep, full_layers=27, dense_layers=1, moe=True)
    p["predicted_ms"], p["low_ms"], p["high_ms"], p["slope_ms"], p["fixed_ms"]

Two slices that differ only in how many repeated layers they hold (MoE layers for a MoE card, all layers
otherwise) give, from their profiles, the GPU time one more layer costs (``slope_ms``: busy time per step of the
deeper minus the shallower, per extra layer) and the rest (``fixed_ms``: embedding, the dense layers, LM head,
sampling). The host's share is taken from the deeper slice as measured without the profiler:

- serial (the point estimate): the deeper slice's unprofiled time per token plus the missing layers' GPU time -
  host work that does not overlap the GPU stays what it was;
- overlapped (the low end): the larger of that slice's time per token and the full model's GPU busy time - host
  work hidden behind the GPU's.

The bytes rule (bytes read per token over the bandwidth) stays beside it as the roofline bound, not a prediction.
"""

from __future__ import annotations

__all__ = ["predict_full", "varying_layers"]


def varying_layers(layers: int, dense_layers: int, moe: bool) -> int:
    """How many of ``layers`` are the repeated kind the slope measures (MoE layers of a MoE card, else all)."""
    return max(0, layers - dense_layers) if moe else layers


def predict_full(shallow: dict, deep: dict, *, full_layers: int, dense_layers: int = 0, moe: bool = False) -> dict:
    """Predict the full model's time per token from two profiled slices.

    ``shallow``/``deep``: rows of the table ``profile_runs`` (``layers``, ``busy_ms``, ``tpot_ms``, ``step_ms``).
    Returns predicted/low/high ms per token and the parts they come from (all in ms per step).
    """
    x1 = varying_layers(int(shallow["layers"]), dense_layers, moe)
    x2 = varying_layers(int(deep["layers"]), dense_layers, moe)
    x_full = varying_layers(int(full_layers), dense_layers, moe)
    if x2 <= x1:
        raise ValueError(f"the deeper slice must hold more repeated layers than the shallower ({x2} <= {x1})")
    slope = (float(deep["busy_ms"]) - float(shallow["busy_ms"])) / (x2 - x1)
    fixed = float(shallow["busy_ms"]) - x1 * slope
    gpu_full = fixed + x_full * slope
    serial = float(deep["tpot_ms"]) + (x_full - x2) * slope
    overlapped = max(float(deep["tpot_ms"]), gpu_full)
    return {
        "predicted_ms": serial, "low_ms": min(overlapped, serial), "high_ms": max(overlapped, serial),
        "slope_ms": slope, "fixed_ms": fixed, "gpu_full_ms": gpu_full,
        "host_ms": float(deep["tpot_ms"]) - float(deep["busy_ms"]),
        "layers_measured": f"{shallow['layers']},{deep['layers']}", "repeated_layers_full": x_full,
        "method": (f"GPU busy per step from the profiles of {shallow['layers']}- and {deep['layers']}-layer slices: "
                   f"{slope:.3f} ms per {'MoE ' if moe else ''}layer, {fixed:.3f} ms the rest; point = the "
                   f"{deep['layers']}-layer slice's unprofiled time per token + {x_full - x2} more layers' GPU time (host "
                   "work kept, serial); low end = the larger of that time and the full model's GPU time (host hidden "
                   "behind the GPU)"),
    }
