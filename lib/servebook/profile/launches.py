"""The Triton MLA decode kernel's launch as the profile run recorded it: its grid, read from the kept traces, for the
seed verdict's words on tiles and splits (``profile.ranges``).

    profiled_launch(src, "vllm", "TRITON_MLA", "0.26.0")   # {"splits": 16, "head_blocks": 4, "label": ..., "trace": ...}
    launch_unchanged(16, 264, 376)                           # True: the caps of both GPUs leave 16 splits as they were

Both engines' ``_decode_grouped_att_m_fwd`` (``selection.mla_launch.FUNCTION``) launch ``_fwd_grouped_kernel_stage1``
on the grid (batch, head blocks, KV splits): vLLM's last dimension is the split count its host rule chose, SGLang's the
most splits a request may take (each request's own count is decided on the GPU, seed_attention_12's ``splits``). A
trace keeps each kernel's grid (``args.grid``), so the launch a profiled server ran at the profile's context is read,
not assumed. At one request the batch is 1.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STAGE1", "profiled_launch", "launch_unchanged", "split_words"]

# the first-stage kernel _decode_grouped_att_m_fwd launches in both engines' Triton decode attention (seed_attention_12's
# ``where`` cites the function); its grid's last dimension is the KV-split count
STAGE1 = "_fwd_grouped_kernel_stage1"
_GRIDS: dict = {}   # per trace file (path, mtime, size): the stage-1 grids it holds


def _grids(path: Path) -> set:
    from .kernels import load_trace

    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _GRIDS:
        events = load_trace(path).get("traceEvents", [])
        _GRIDS[key] = {tuple(e["args"]["grid"]) for e in events if isinstance(e, dict) and e.get("name") == STAGE1
                       and isinstance((e.get("args") or {}).get("grid"), list) and len(e["args"]["grid"]) == 3}
    return _GRIDS[key]


def profiled_launch(src, engine: str, backend: str, version: str) -> dict | None:
    """The stage-1 grid of the first profile of ``engine`` ``version`` with ``backend`` in ``src`` (a RunStore) whose
    kept trace holds it: ``{"splits", "head_blocks", "label", "trace"}``; None where no such trace is kept. A trace
    whose grids differ (the split count moved during the profile) is refused (ValueError)."""
    from .tables import latest_ok

    for r in latest_ok(src.rows("profile_runs")):
        if (r.get("engine"), r.get("backend"), str(r.get("version"))) != (engine, backend, str(version)) or not r.get("trace"):
            continue
        path = Path(src.path) / r["trace"]
        grids = _grids(path) if path.is_file() else set()
        if len(grids) > 1:
            raise ValueError(f"{r['trace']}: {STAGE1} ran on the grids {sorted(grids)}: the split count moved within one profile")
        if grids:
            (_, heads, splits), = grids
            return {"splits": splits, "head_blocks": heads, "label": r["label"], "trace": r["trace"]}
    return None


def launch_unchanged(splits: int, cap_here: int, cap_there: int) -> bool:
    """Whether a launch of ``splits`` KV splits on the GPU of split cap ``cap_here`` keeps its split count on a GPU of
    cap ``cap_there``: the count is min(what the context asks, the cap); below the cap here the context decided it, so
    any cap at or above it leaves it; at the cap here, only the same cap does."""
    return cap_here == cap_there or (splits < cap_here and splits <= cap_there)


def split_words(n: int) -> str:
    return f"{'one' if n == 1 else n} split{'s' * (n != 1)}"
