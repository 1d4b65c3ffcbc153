"""The full model's decode step predicted from two slices of the same card, measured on the same GPU (one recording
unit: ``machines.require_one_unit`` refuses two).

    p = predict_full(shallow, deep, full_layers=27, dense_layers=1, moe=True)
    p["predicted_ms"], p["low_ms"], p["high_ms"], p["slope_ms"], p["fixed_ms"]

Two slices that differ only in how many repeated layers they hold (MoE layers for a MoE card, all layers
otherwise) give, from their profiles, the GPU time one more layer costs (``slope_ms``: busy time per step of the
deeper minus the shallower, per extra layer) and the rest (``fixed_ms``: embedding, the dense layers, LM head,
sampling). The host's share is taken from the deeper slice as measured without the profiler:

- overlapped (the point estimate): the larger of that slice's time per token and the full model's GPU busy time -
  the host prepares the next step while the GPU runs this one (SGLang's overlap scheduler, vLLM's asynchronous
  scheduling), so a step takes whichever is longer;
- serial (the high end): the deeper slice's unprofiled time per token plus the missing layers' GPU time - host work
  that does not overlap the GPU stays what it was.

The serial rule was this module's first point estimate; the first check on an H200 (``data/runs/h200x1-prof``,
Moonlight-16B-A3B and Llama-3.1-8B whole, both engines) put it 25-35% above the measured full models while the
overlapped rule landed within 5%, and the full models' own profiles show the GPU busy 96-99% of a step: the host's
work is hidden there. The serial rule stays as the interval's upper end.

The bytes rule (bytes read per token over the bandwidth) stays beside it as the roofline bound, not a prediction.
"""

from __future__ import annotations

__all__ = ["HOST_RULE", "HOST_RULE_RUN", "HOST_RULES", "host_combine", "predict_full", "varying_layers"]

# The host-time rule every prediction of this package uses (the full-model predictor here and the seed projection,
# ``servebook.profile.projection``): "overlapped", the one the whole models of ``data/runs/h200x1-prof`` validated; "serial"
# (host time added to the GPU time) is the bound beside it.
HOST_RULE = "overlapped"
# the run whose whole models validated it (Moonlight-16B-A3B and Llama-3.1-8B whole, both engines): a profile run without
# a whole model (the INT4 slices of h200x1-ref) borrows its check (``ranges._host_rule_words``)
HOST_RULE_RUN = "h200x1-prof"
HOST_RULES = {"overlapped": "the larger of the host's time per step and the GPU's (the host prepares the next step while "
                            "the GPU runs this one)",
              "serial": "the GPU's time plus the host's idle time (host work that does not overlap the GPU stays)"}


def host_combine(gpu_ms: float, host_step_ms: float, host_idle_ms: float, rule: str = HOST_RULE) -> dict:
    """A step's time from its GPU time and the host's: ``{"ms", "idle_ms", "overlapped_ms", "serial_ms", "rule"}``.

    ``host_step_ms``: the time per step the host needs (a slice's unprofiled time per token); ``host_idle_ms``: that
    slice's idle time (its time per token minus its GPU busy time). ``rule`` picks ``ms`` (``HOST_RULES``)."""
    if rule not in HOST_RULES:
        raise ValueError(f"host rule {rule!r}: use one of {', '.join(HOST_RULES)}")
    overlapped, serial = max(float(host_step_ms), float(gpu_ms)), float(gpu_ms) + float(host_idle_ms)
    ms = overlapped if rule == "overlapped" else serial
    return {"ms": ms, "idle_ms": ms - float(gpu_ms), "overlapped_ms": overlapped, "serial_ms": serial, "rule": rule}


def varying_layers(layers: int, dense_layers: int, moe: bool) -> int:
    """How many of ``layers`` are the repeated kind the slope measures (MoE layers of a MoE card, else all)."""
    return max(0, layers - dense_layers) if moe else layers


def predict_full(shallow: dict, deep: dict, *, full_layers: int, dense_layers: int = 0, moe: bool = False) -> dict:
    """Predict the full model's time per token from two profiled slices.

    ``shallow``/``deep``: rows of the table ``profile_runs`` (``layers``, ``busy_ms``, ``tpot_ms``, ``step_ms``).
    Returns predicted/low/high ms per token and the parts they come from (all in ms per step).
    """
    from .machines import require_one_unit

    require_one_unit([shallow, deep], "the full model predicted from two slices")
    x1 = varying_layers(int(shallow["layers"]), dense_layers, moe)
    x2 = varying_layers(int(deep["layers"]), dense_layers, moe)
    x_full = varying_layers(int(full_layers), dense_layers, moe)
    if x2 <= x1:
        raise ValueError(f"the deeper slice must hold more repeated layers than the shallower ({x2} <= {x1})")
    slope = (float(deep["busy_ms"]) - float(shallow["busy_ms"])) / (x2 - x1)
    fixed = float(shallow["busy_ms"]) - x1 * slope
    gpu_full = fixed + x_full * slope
    host = host_combine(gpu_full, float(deep["tpot_ms"]), float(deep["tpot_ms"]) - float(deep["busy_ms"]))
    serial, overlapped = host["serial_ms"], host["overlapped_ms"]
    return {
        "predicted_ms": overlapped, "low_ms": min(overlapped, serial), "high_ms": max(overlapped, serial),
        "slope_ms": slope, "fixed_ms": fixed, "gpu_full_ms": gpu_full,
        "host_ms": float(deep["tpot_ms"]) - float(deep["busy_ms"]),
        "layers_measured": f"{shallow['layers']},{deep['layers']}", "repeated_layers_full": x_full,
        "method": (f"GPU busy per step from the profiles of {shallow['layers']}- and {deep['layers']}-layer slices: "
                   f"{slope:.3f} ms per {'MoE ' if moe else ''}layer, {fixed:.3f} ms the rest; point = the larger of the "
                   f"{deep['layers']}-layer slice's unprofiled time per token and the full model's GPU time (host work "
                   f"hidden behind the GPU); high end = that slice's time + {x_full - x2} more layers' GPU time (serial)"),
    }
