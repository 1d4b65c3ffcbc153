"""The seed projection as a range: each assumption moved to its ends, how far it moves each engine and the gap.

    central = central_projection(src, lat)              # {engine: rows}: every assumption at its central value
    table = assumption_table(src, central, lat)         # one row per assumption end (table seed_assumptions)
    rng = projection_range(central, table)              # point, low and high per engine and for the gap (seed_range)
    attention_12()                                      # the Triton MLA launch per version (seed_attention_12)

Each assumption is moved alone to each of its ends, the others at their central value (``seed_assumptions``: the move of
each engine's ms per token and of the gap, SGLang minus vLLM); the range is all of them together at the ends that
lengthen or shorten the total (``seed_range``: the sum of the moves, exact here because the categories add up and the
host rule's maximum is decided by the GPU time, several ms above the host's). An end that moves both engines (a kind of
host, a bandwidth) moves them together, so the gap's range is not the difference of the engines' ranges.
"""

from __future__ import annotations

from .projection import project

__all__ = ["SEED_BACKENDS", "central_projection", "assumption_table", "projection_range", "attention_12", "recorded_attention",
           "attention_row", "ATTENTION_REFERENCE"]

# what each engine runs on capability 12.0, as chapter 02 resolves it from the engines' own code
SEED_BACKENDS = {"sglang": "triton", "vllm": "TRITON_MLA"}

# The Triton MLA decode kernel's launch in each version the verdict uses (table seed_attention_12): read from the version's
# own code where its environment is prepared (servebook.selection.mla_launch), else the recorded rows with their citations
# (data/reference/attention-12.json); the split caps are a computation over SM counts outside the kernel, kept there as
# cited data (SGLang's kv-split default excepted, which is read).
ATTENTION_REFERENCE = "attention-12.json"
_SHOWN = ("engine", "version", "role", "where", "block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages",
          "capability_key", "split_cap_9_0", "split_cap_12_0", "splits")
_LAUNCH = ("block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages")


def recorded_attention() -> list[dict]:
    """The recorded rows (``data/reference/attention-12.json``), citations and the structured lines they cite."""
    import json

    from ..paths import data_dir

    return json.loads((data_dir() / "reference" / ATTENTION_REFERENCE).read_text())["rows"]


def _read_launch(engine: str, version: str) -> tuple[dict | None, dict | None, str]:
    """(launch, kv-split default, where it was read) from the prepared environment, or (None, None, why not)."""
    from ..engines.envs import resolve_engine
    from ..errors import EngineError
    from ..selection.mla_launch import read_default_kv_splits, read_mla_launch

    try:
        env = resolve_engine(f"{engine}=={version}")
    except EngineError:
        return None, None, f"no {engine}=={version} environment here (servebook engines add {engine}=={version})"
    try:
        return (read_mla_launch(env.package_dir, engine, version), read_default_kv_splits(env.package_dir, engine),
                f"the {env.source} {engine}=={version} environment")
    except (EngineError, OSError) as exc:
        return None, None, f"its code could not be read: {str(exc).splitlines()[0]}"


def attention_row(rec: dict, launch: dict | None, default: dict | None, at: str) -> dict:
    """One row of seed_attention_12: ``rec`` (recorded) with what ``launch`` read in place of it; ``read`` says which."""
    from ..selection.mla_launch import capability_words

    row = {k: rec[k] for k in _SHOWN}
    if launch is None:
        return {**row, "read": f"recorded ({ATTENTION_REFERENCE}): {at}"}
    row.update({k: launch[k] for k in _LAUNCH if launch[k] is not None})
    row.update(where=launch["where"], capability_key=capability_words(launch))
    kept = [k for k in _LAUNCH if launch[k] is None]
    split = "the split caps' SM-count rule kept as recorded"
    if rec.get("split_caps_are_default") and default is not None:
        row["split_cap_9_0"] = row["split_cap_12_0"] = default["value"]
        split = f"the split caps = the kv-split default read at {default['where']}, no SM cap as recorded"
    if default and rec.get("kv_splits_default") and default != rec["kv_splits_default"]:
        row["splits"] += f" [read now: default {default['value']} at {default['where']}; the text above is as recorded]"
    opened = ", ".join(f"`{t['test']}` :{t['line']}" for t in launch["open_tests"]) or "none"
    note = f"; {', '.join(kept)} as recorded, not settled by the code alone (tests it leaves open: {opened})" if kept else ""
    return {**row, "read": f"read from {rec['engine']} {rec['version']}'s code ({at}){note}; {split}"}


def attention_12() -> list[dict]:
    """Table seed_attention_12: each recorded version's launch, read where its environment is prepared."""
    return [attention_row(rec, *_read_launch(rec["engine"], rec["version"])) for rec in recorded_attention()]


_SMEM = ("not read: whether Triton fits these tiles at num_stages 2 in capability 12.0's 101,376 B of shared memory per "
         "block (the H200 allows 232,448 B); the seed's runs decoded on 12.0 with both engines, so the kernels launched there")


def central_projection(src, lat: dict, n: int | None = None, backends: dict = SEED_BACKENDS, **kw) -> dict:
    """``{engine: project rows}`` with every assumption at its central value: the host rule of ``predict.HOST_RULE``, the
    engine's central all-reduce latency (``lat``: ``comm.engine_latencies``), datasheet bandwidths, kernel floors."""
    return {e: project(src, e, backend=b, allreduce_us=lat[e]["central_us"],
                       allreduce_source=f"central of the engine's range: {lat[e]['basis']}", **kw)
            for e, b in backends.items()}


def _total(rows: list[dict]) -> float | None:
    return rows[-1]["predicted_ms"]


def _cat(rows: list[dict], cat: str) -> float | None:
    return next((r["ms_per_token"] for r in rows if r["category"] == cat), None)


def _row(assumption: str, end: str, moves: dict, basis: str) -> dict:
    s, v = moves.get("sglang"), moves.get("vllm")
    gap = None if s is None or v is None else s - v
    return {"assumption": assumption, "end": end, "sglang_ms": s, "vllm_ms": v, "gap_ms": gap, "basis": basis,
            "key": f"{assumption} | {end}"}


def _moved(src, central: dict, lat: dict, backends: dict, **change) -> dict:
    """Each engine's move (ms per token) when ``project`` is run with ``change`` instead of the central values."""
    out = {}
    for e, b in backends.items():
        rows = project(src, e, backend=b, allreduce_us=lat[e]["central_us"], allreduce_source="central", **change)
        out[e] = None if _total(rows) is None or _total(central[e]) is None else _total(rows) - _total(central[e])
    return out


def assumption_table(src, central: dict, lat: dict, n: int, backends: dict = SEED_BACKENDS) -> list[dict]:
    """One row per end of each assumption: how far it moves each engine's ms per token and the gap (table
    ``seed_assumptions``). ``n``: collectives per token."""
    rows = [_row("host rule", "serial (host idle added)",
                 {e: (r[-1].get("serial_ms") or r[-1]["predicted_ms"]) - r[-1]["predicted_ms"] for e, r in central.items()},
                 "central: overlapped, the rule the whole models of h200x1-prof validated (-4% to +1%); the serial rule "
                 "adds each engine's 2-layer slice's H200 idle per token (it errs +25% to +35% on those models)")]
    for end, field, host in (("one CPU with PCIe switches", "low_us", "low_host"), ("two CPU sockets, no switches", "high_us", "high_host")):
        rows.append(_row("all-reduce latency", end, {e: n * (lat[e][field] - lat[e]["central_us"]) / 1e3 for e in backends},
                         "; ".join(f"{e} {lat[e][field]:.2f} us ({lat[e][host]}, {lat[e]['env']})" for e in backends)
                         + f"; x {n} collectives per token; central: the middle of each engine's range"))
    rows.append(_row("attention on capability 12.0", "as read", {e: 0.0 for e in backends},
                     "the Triton MLA decode kernel takes the same tile, warp and stage constants on 9.0 and 12.0 in every "
                     "version read (table seed_attention_12); the split count keys on the SM count only where 0.5.16 and "
                     "vLLM cap it, which leaves this context's launch unchanged; " + _SMEM))
    rows.append(_row("shard shapes at TP=8", "no kernel floor", _moved(src, central, lat, backends, floor_us=0.0),
                     "central: each memory-bound kernel kept at least as long as the shortest such kernel on the H200 (it "
                     "reads 1/8 of the bytes per rank but keeps its launch and latency); the end: bytes alone. Attention's "
                     "grid at TP=8 holds one block of 16 heads (8 heads per rank) against four at TP=1: latency-bound at "
                     "this context, kept as measured"))
    vllm_att = _cat(central.get("vllm", []), "attention")
    sg = {"sglang": None, "vllm": 0.0}
    if vllm_att is not None and "sglang" in backends:
        rows_s = project(src, "sglang", backend=backends["sglang"], allreduce_us=lat["sglang"]["central_us"],
                         allreduce_source="central", attention_ms=vllm_att,
                         attention_source="vLLM's projected Triton MLA attention (one split at this context)")
        sg["sglang"] = _total(rows_s) - _total(central["sglang"])
    rows.append(_row("engine version", "SGLang 0.5.9's split grid", sg,
                     "SGLang's kernels were profiled at 0.5.16, whose MLA split grid is 256 on these GPUs; 0.5.9 (studied) "
                     "launches 8 (seed_attention_12). At that end SGLang's attention takes what vLLM's Triton MLA kernel "
                     "(the same tiles, one split here) took: a hypothesis, settled by profiling SGLang 0.5.9's triton "
                     "backend on the same slices. vLLM: the seed's version is not stated; 0.26.0's kernels are kept"))
    rows.append(_row("bandwidth ratio", "H200 measured read bandwidth", _moved(src, central, lat, backends, bandwidth="measured"),
                     "central: datasheet over datasheet (H200 4.8 TB/s, RTX PRO 6000 1.792 TB/s); the end: the H200's "
                     "measured read bandwidth (table memory_bandwidth of the profile run) over the datasheet"))
    return rows


def projection_range(central: dict, table: list[dict], seed: dict | None = None) -> list[dict]:
    """Per engine and for the gap: the point (every assumption central) and the range, all assumptions together at the
    ends that shorten (low) or lengthen (high) the ms per token: the sum of the moves below / above 0 (table
    ``seed_range``). ``seed``: the seed's tok/s per engine, set beside the range (never an input)."""
    out = []
    by = {}
    for r in table:
        by.setdefault(r["assumption"], []).append(r)
    for who in ("sglang", "vllm", "gap"):
        col = f"{who}_ms"
        point = (_total(central["sglang"]) - _total(central["vllm"])) if who == "gap" else _total(central[who])
        lo = sum(min([0.0] + [r[col] for r in rs if r[col] is not None]) for rs in by.values())
        hi = sum(max([0.0] + [r[col] for r in rs if r[col] is not None]) for rs in by.values())
        row = {"who": who, "point_ms": point, "low_ms": point + lo, "high_ms": point + hi, "key": who,
               "how": "all assumptions together at the ends that shorten (low) or lengthen (high) it: the sum of their moves"}
        if who != "gap":
            row.update({"point_tok_s": 1e3 / point, "low_tok_s": 1e3 / row["high_ms"], "high_tok_s": 1e3 / row["low_ms"]})
            if seed and seed.get(who):
                row["seed_tok_s"] = seed[who]
                row["seed_inside"] = row["low_tok_s"] <= seed[who] <= row["high_tok_s"]
        elif seed and seed.get("sglang") and seed.get("vllm"):
            row["seed_gap_ms"] = 1e3 / seed["sglang"] - 1e3 / seed["vllm"]
            row["seed_inside"] = row["low_ms"] <= row["seed_gap_ms"] <= row["high_ms"]
        out.append(row)
    return out
