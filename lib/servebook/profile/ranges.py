"""The seed projection as a range: each assumption moved to its ends, how far it moves each engine and the gap.

    central = central_projection(src, lat)              # {engine: rows}: every assumption at its central value
    table = assumption_table(src, central, lat)         # one row per assumption end (table seed_assumptions)
    rng = projection_range(central, table)              # point, low and high per engine and for the gap (seed_range)
    attention_12()                                      # the Triton MLA launch per version (seed_attention_12)

Each assumption is moved alone to each of its ends, the others at their central value (``seed_assumptions``: the move of
each engine's ms per token and of the gap, SGLang minus vLLM); the range is all of them together at the ends that
lengthen or shorten the total (``seed_range``: the sum of the moves, exact here because the categories add up and the
host rule's maximum is decided by the GPU time, several ms above the host's). An end that moves both engines (a kind of
host, a bandwidth) moves them together, so the gap's range is not the difference of the engines' ranges. The last row
(``_slow_side``) moves nothing: it says which ends lengthen nothing, the slow-side ends no row models, and where the seed's
rates sit in the range.

Every figure the rows' words state comes from data: the versions, launches and split caps from ``attention_12()``, the
GPUs' capabilities, SM counts and bandwidths from data/hardware (``projection.MEASURED_ON``, ``TARGET``), the host rule's
errors from the profile run's whole models, the heads from the seed model's card. ``attention_12()`` reads each engine's
code once per (engine, version, environment), again only when a file it read changes.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._range_rows import projection_range, row as _row, total as _total
from .projection import project

__all__ = ["SEED_BACKENDS", "central_projection", "assumption_table", "projection_range", "attention_12", "recorded_attention",
           "attention_row", "split_gpus", "ATTENTION_REFERENCE"]

# what each engine runs on capability 12.0, as chapter 02 resolves it from the engines' own code
SEED_BACKENDS = {"sglang": "triton", "vllm": "TRITON_MLA"}

# The Triton MLA decode kernel's launch in each version the verdict uses (table seed_attention_12): read from the version's
# own code where its environment is prepared (servebook.selection.mla_launch), else the recorded rows with their citations
# (data/reference/attention-12.json). The split caps are computed: the version's SM-cap rule (read, else its recorded text)
# at the SM counts of the two GPUs of the projection (data/hardware), or the kv-split default where it has no such rule.
ATTENTION_REFERENCE = "attention-12.json"
_SHOWN = ("engine", "version", "role", "where", "block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages",
          "capability_key", "split_cap_9_0", "split_cap_12_0", "splits")
_LAUNCH = ("block_n", "block_h", "block_dmodel", "block_dpe", "num_warps", "num_stages")
# what attention_12 read per version, kept while the files it read are unchanged (_read_launch)
_READ: dict = {}


def recorded_attention() -> list[dict]:
    """The recorded rows (``data/reference/attention-12.json``), citations and the structured lines they cite."""
    import json

    from ..paths import data_dir

    return json.loads((data_dir() / "reference" / ATTENTION_REFERENCE).read_text())["rows"]


def split_gpus() -> dict:
    """``{column: hardware profile}`` for the split-cap columns: the GPU the slices were profiled on and the seed's GPU
    (``projection.MEASURED_ON``, ``TARGET``), each column named for its capability (``split_cap_9_0``)."""
    gpus = {f"split_cap_{p['capability'].replace('.', '_')}": p for p in _gpus()}
    if set(gpus) != {k for k in _SHOWN if k.startswith("split_cap_")}:
        raise ValueError(f"the projection's GPUs give the columns {sorted(gpus)}, not the table's; rename them in ranges._SHOWN")
    return gpus


def _stamp(pkg: str, engine: str) -> tuple:
    """What the read depends on: each file the readers open (path, mtime, size); a rebuilt environment changes it."""
    from pathlib import Path

    from ..selection.mla_launch import KERNEL_FILES, SPLIT_CAP_RULES

    files = [*KERNEL_FILES.get(engine, []), *(f for f, _ in SPLIT_CAP_RULES.get(engine, [])), "srt/server_args.py"]
    out = []
    for rel in files:
        try:
            st = (Path(pkg) / rel).stat()
        except OSError:
            continue
        out.append((rel, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _read_launch(engine: str, version: str) -> tuple[dict | None, dict | None, dict | None, str]:
    """(launch, kv-split default, split rule, where they were read) from the prepared environment, or (None, None, None,
    why not). Kept per (engine, version, environment) while the files read are unchanged (``_READ``)."""
    from ..engines.envs import resolve_engine
    from ..errors import EngineError
    from ..selection.mla_launch import read_default_kv_splits, read_mla_launch, read_split_rule

    try:
        env = resolve_engine(f"{engine}=={version}")
    except EngineError:
        return None, None, None, f"no {engine}=={version} environment here (servebook engines add {engine}=={version})"
    key, stamp = (engine, version, env.python, env.package_dir), _stamp(env.package_dir, engine)
    if key in _READ and _READ[key][0] == stamp:
        return _READ[key][1]
    try:
        got = (read_mla_launch(env.package_dir, engine, version), read_default_kv_splits(env.package_dir, engine),
               read_split_rule(env.package_dir, engine), f"the {env.source} {engine}=={version} environment")
    except (EngineError, OSError) as exc:
        got = None, None, None, f"its code could not be read: {str(exc).splitlines()[0]}"
    _READ[key] = (stamp, got)
    return got


def _split_caps(rec: dict, default: dict | None, rule: dict | None, read: bool) -> tuple[dict, str]:
    """The split-cap columns and the words saying where they came from: the SM-cap rule (``rule`` read, else the recorded
    one) at each GPU's SM count, or the kv-split default (``default`` read, else the recorded one) where the version has
    no such rule."""
    from ..selection.mla_launch import split_cap

    gpus = split_gpus()
    sms = " and ".join(f"{p['sm_count']} SMs ({p['profile']})" for p in gpus.values())
    kv = default if default is not None else rec.get("kv_splits_default")
    if rec.get("split_caps_are_default"):
        how = "read" if read and default is not None else "recorded"
        return ({c: kv["value"] for c in gpus},
                f"the split caps = the kv-split default {how} at {kv['where']}, no SM cap as recorded")
    use = rule if rule is not None else rec["split_rule"]
    how = (f"the SM-cap rule read at {use['where']}" if rule is not None else
           f"the SM-cap rule as recorded from {use['where']}" + (" (not found in this version's code)" if read else ""))
    return ({c: split_cap(use, p["sm_count"], kv["value"] if kv else None) for c, p in gpus.items()},
            f"the split caps = {how}, at {sms} (data/hardware)")


def attention_row(rec: dict, launch: dict | None, default: dict | None, at: str, rule: dict | None = None) -> dict:
    """One row of seed_attention_12: ``rec`` (recorded) with what ``launch``, ``default`` and ``rule`` read in place of it
    (the split caps computed either way, ``_split_caps``); ``read`` says which."""
    from ..selection.mla_launch import capability_words

    row = {k: rec[k] for k in _SHOWN if k in rec}
    caps, split = _split_caps(rec, default, rule, launch is not None)
    row.update(caps)
    row = {k: row[k] for k in _SHOWN}
    if launch is None:
        return {**row, "read": f"recorded ({ATTENTION_REFERENCE}): {at}; {split}"}
    row.update({k: launch[k] for k in _LAUNCH if launch[k] is not None})
    row.update(where=launch["where"], capability_key=capability_words(launch))
    kept = [k for k in _LAUNCH if launch[k] is None]
    if default and rec.get("kv_splits_default") and default != rec["kv_splits_default"]:
        row["splits"] += f" [read now: default {default['value']} at {default['where']}; the text above is as recorded]"
    opened = ", ".join(f"`{t['test']}` :{t['line']}" for t in launch["open_tests"]) or "none"
    note = f"; {', '.join(kept)} as recorded, not settled by the code alone (tests it leaves open: {opened})" if kept else ""
    return {**row, "read": f"read from {rec['engine']} {rec['version']}'s code ({at}){note}; {split}"}


def attention_12() -> list[dict]:
    """Table seed_attention_12: each recorded version's launch, read where its environment is prepared."""
    out = []
    for rec in recorded_attention():
        launch, default, rule, at = _read_launch(rec["engine"], rec["version"])
        out.append(attention_row(rec, launch, default, at, rule))
    return out


def _host_rule_words(src) -> str:
    """The host-rule assumption's basis: how far each rule's prediction of the whole models measured in the profile run
    (``src``: table prediction_check, each model's deeper slice in profile_runs) falls from the measured time."""
    from .predict import HOST_RULE, HOST_RULE_RUN, host_combine

    errs: dict = {HOST_RULE: [], "serial": []}
    run = Path(str(getattr(src, "path", "the profile run"))).name
    idle_of = _deep_slices_words(src)
    borrowed = None
    if not _whole_models(src):   # a run of slices only (h200x1-ref): the check of the run that validated the rule
        from ..paths import data_dir
        from ..results import RunStore

        if (data_dir() / "runs" / HOST_RULE_RUN / "prediction_check.jsonl").is_file():
            borrowed = f"; {run} measured no whole model, so the check is {HOST_RULE_RUN}'s"
            src, run = RunStore.at(data_dir() / "runs" / HOST_RULE_RUN), HOST_RULE_RUN
    prof = {p["label"]: p for p in src.rows("profile_runs")}
    for r in src.rows("prediction_check"):
        deep = prof.get((r.get("from_labels") or [None, None])[1])
        if not r.get("measured_ms") or deep is None:
            continue
        h = host_combine(r["gpu_full_ms"], float(deep["tpot_ms"]), float(deep["tpot_ms"]) - float(deep["busy_ms"]))
        for rule, ms in ((HOST_RULE, h["ms"]), ("serial", h["serial_ms"])):
            errs[rule].append(100 * (ms - r["measured_ms"]) / r["measured_ms"])
    span = {k: f"{min(v):+.0f}% to {max(v):+.0f}%" if v else "no whole model measured" for k, v in errs.items()}
    return (f"central: {HOST_RULE}, the rule the whole models of {run} validated ({span[HOST_RULE]}); the serial rule adds "
            f"each engine's {idle_of} {_short(_gpus()[0])} idle per token "
            f"(it errs {span['serial']} on those models)" + (borrowed or ""))


def _deep_slices_words(src, backends: dict = SEED_BACKENDS) -> str:
    """Which slice's idle the serial rule adds (the projection's deeper slice, ``slices.select_slices``), in words from
    the profile run's rows: "2-layer slice's" where every engine's is that deep, else each engine's depth."""
    from ..engines import prose_name
    from .machines import MachineMismatch
    from .depths import HOST_BOUND_SHARE
    from .slices import select_slices

    rows, depth, bound = src.rows("profile_runs"), {}, {}
    for eng, be in backends.items():
        try:
            deep = select_slices(rows, eng, backend=be)["deep"]
        except MachineMismatch:
            deep = None
        depth[eng] = None if deep is None else deep.get("layers")
        if deep is not None and deep.get("busy_ms") and deep.get("tpot_ms"):
            bound[eng] = "GPU-bound" if deep["busy_ms"] / deep["tpot_ms"] > HOST_BOUND_SHARE else "host-bound"
    if None not in depth.values() and len(set(depth.values())) == 1:
        return f"{next(iter(depth.values()))}-layer slice's"
    known = {e: n for e, n in depth.items() if n is not None}
    # two depths: the gap at the serial end sets the engines' idles at two depths side by side; say which kind each is
    mixed = len(set(bound.values())) > 1 and len(known) == len(depth)
    return "deeper slice's" + (" (" + ", ".join(f"{prose_name(e)}'s: {n} layers" + (f", {bound[e]}" if mixed else "")
                                                if n is not None else f"{prose_name(e)}'s: none profiled"
                                                for e, n in depth.items())
                               + ("; slices of two depths, so the gap at this end sets a GPU-bound slice's idle against a "
                                  "host-bound one's, not the engines at one depth" if mixed else "") + ")"
                               if known else "")


def _whole_models(src) -> bool:
    """Whether the profile run measured a whole model its slices predict (a prediction_check row with measured_ms)."""
    return any(r.get("measured_ms") for r in src.rows("prediction_check"))


def _shard_words(att: list[dict]) -> tuple[int, str]:
    """The seed's TP and the shard-shapes assumption's basis: the attention grid's head blocks per rank from the seed
    model's heads (its card) and the kernels' BLOCK_H (table seed_attention_12)."""
    from ..cards import load_card
    from ..stated.figures import seed_case
    from .comm import _text

    seed = seed_case()
    tp, heads = int(seed["tp"]), int(_text(load_card(seed["model"]))["num_attention_heads"])
    block = {a["block_h"] for a in att}
    if len(block) != 1:
        raise ValueError(f"the versions read launch BLOCK_H {sorted(block)}: the shard-shapes words assume one")
    bh, per_rank = block.pop(), heads // tp
    shard, whole = -(-per_rank // bh), -(-heads // bh)   # head blocks of the grid per rank at the seed's TP and at TP=1

    from ..stated.text import number_word as word

    return tp, ("central: each memory-bound kernel kept at least as long as the shortest such kernel on the "
                f"{_short(_gpus()[0])} (it reads 1/{tp} of the bytes per rank but keeps its launch and latency); the end: "
                f"bytes alone. Attention's grid at TP={tp} holds {word(shard)} block{'s' * (shard != 1)} of {bh} heads "
                f"({per_rank} heads per rank) against {word(whole)} at TP=1: latency-bound at this context, kept as measured")


def _smem(target: dict, measured_on: dict) -> str:
    def smem(p: dict) -> str:  # the opt-in maximum per block, data/hardware (the CUDA programming guide's table)
        b = p.get("shared_memory_per_block_optin_bytes")
        return f"{b:,} B" if b else "(not in its hardware file)"

    return (f"not read: whether Triton fits these tiles at num_stages 2 in capability {target['capability']}'s {smem(target)} of "
            f"shared memory per block (the {_short(measured_on)} allows {smem(measured_on)}); the seed's runs decoded on "
            f"{target['capability']} with both engines, so the kernels launched there")


def _short(profile: dict) -> str:
    """A hardware profile's short name in prose: ``h200`` -> H200, ``rtx-pro-6000`` -> RTX PRO 6000."""
    return profile["profile"].replace("-", " ").upper()


def _who(row: dict, att: list[dict]) -> str:
    """A version in prose: its number where the table holds several of its engine (SGLang), else the engine's name."""
    from ..engines import prose_name

    several = sum(a["engine"] == row["engine"] for a in att) > 1
    return row["version"] if several else prose_name(row["engine"])


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _attention_move(att: list[dict], backends: dict, src=None) -> tuple[dict, str]:
    """The attention-on-12.0 assumption from table seed_attention_12 (``att``): no move where no version read keys its
    launch on the capability; None (not projected) for an engine where one does. Its basis in words; whether the split
    caps change this context's launch is read from the profile run ``src``'s traces (``_cap_words``)."""
    gpus = split_gpus()
    caps = [p["capability"] for p in gpus.values()]
    keyed = [a for a in att if not a["capability_key"].startswith("none")]
    moves = {e: None if any(a["engine"] == e for a in keyed) else 0.0 for e in backends}
    if keyed:
        head = ("the Triton MLA decode kernel's launch keys on the capability in " + _and([f"{a['engine']} {a['version']}: "
                f"{a['capability_key']}" for a in keyed]) + " (table seed_attention_12): not projected for that engine; "
                f"a kernel profile on {caps[-1]} settles it")
    else:
        head = (f"the Triton MLA decode kernel takes the same tile, warp and stage constants on {_and(caps)} in every "
                "version read (table seed_attention_12)")
    recs = {(r["engine"], r["version"]): r for r in recorded_attention()}
    capped = [a for a in att if not recs.get((a["engine"], a["version"]), {}).get("split_caps_are_default")]
    split = (f"; the split count keys on the SM count only where {_and([_who(a, att) for a in capped])} cap it"
             + _cap_words(capped, att, backends, src, recs)) if capped else "; no version read caps the split count by the SM count"
    measured_on, target = _gpus()
    return moves, head + split + "; " + _smem(target, measured_on)


def _cap_words(capped: list[dict], att: list[dict], backends: dict, src, recs: dict | None = None) -> str:
    """Whether the SM caps of ``capped`` (rows of seed_attention_12) change this context's launch between the two GPUs:
    each version's profiled split count (its kept trace's grid, ``launches.profiled_launch``) against its cap on the
    GPU it ran on and on the seed's (``launches.launch_unchanged``). A version whose recorded row says its count is fixed
    at CUDA-graph capture from another length (``split_count_at`` in ``recs``, the recorded rows by (engine, version))
    is said apart (``_capture_words``): its count on the seed follows that length, not the GPU."""
    from .launches import launch_unchanged, profiled_launch, split_words

    recs = recs or {}
    here, there = split_gpus()
    unread, changed, kept, fixed = [], [], [], []
    for a in capped:
        got = profiled_launch(src, a["engine"], backends.get(a["engine"]), a["version"]) if src is not None else None
        at = recs.get((a["engine"], a["version"]), {}).get("split_count_at")
        if got is None:
            unread.append(_who(a, att))
        elif at:
            fixed.append(_capture_words(a, att, got["splits"], at, there))
        elif not launch_unchanged(got["splits"], a[here], a[there]):
            changed.append(f"{_who(a, att)} ({split_words(got['splits'])} profiled, caps {a[here]} and {a[there]})")
        else:
            kept.append(_who(a, att))
    if changed:
        out = ", which changes this context's launch of " + _and(changed)
    elif unread:
        out = (f"; whether that changes this context's launch is not read for {_and(unread)}: no kept trace of its "
               "profiled launch")
    else:
        out = f", which leaves {_and(kept)}'s launch at this context unchanged" if kept else ""
    return out + "".join("; " + f for f in fixed)


def _capture_words(a: dict, att: list[dict], splits: int, at: dict, there: str) -> str:
    """A version whose split count is computed at CUDA-graph capture (``at``: the recorded ``split_count_at``): its
    profiled count is the slices' length's, the seed's count is its own, up to the cap on the seed's GPU (``there``).
    The slices' length from ``models.slice_config`` of the seed model's card; the full model's from the card."""
    from ..cards import load_card
    from ..models import slice_config
    from ..stated.figures import seed_case
    from .comm import _text
    from .launches import split_words

    card = load_card(seed_case()["model"])
    sliced, full = slice_config(card)["max_position_embeddings"], _text(card).get("max_position_embeddings")
    full_words = f"the full model's {full:,}" if full else "the model's card records no max_position_embeddings"
    who, gpu = _who(a, att), _short(split_gpus()[there])
    cites = re.sub(r" \([^)]*\)", "", at["where"])
    return (f"{who}'s split count is not this context's: it is computed when the decode CUDA graph is captured, from "
            f"{at['what'].split(',')[0]} ({cites}, read {at['read'].split(' in ')[0]}), so its profiled "
            f"{split_words(splits)} are those of the slices' max_model_len, {sliced:,} (servebook.models.slice_config), "
            f"and the seed's {who} launched the count of its own "
            f"max_model_len (not recorded: the full model's unless --max-model-len set it lower; {full_words}), at most "
            f"its cap of {a[there]} on the {gpu}. {who}'s attention is kept as profiled at {split_words(splits)}: a "
            f"hypothesis, settled by profiling {who}'s slice with max_model_len at the full model's")


def _grid(row: dict, here: bool = True) -> str:
    """A version's MLA split cap on the two GPUs: one figure where they agree ("256 on these GPUs"), else each GPU's."""
    gpus = split_gpus()
    vals = {c: row[c] for c in gpus}
    if len(set(vals.values())) == 1:
        return f"{next(iter(vals.values()))}" + (" on these GPUs" if here else "")
    return ", ".join(f"{v} on the {_short(gpus[c])}" for c, v in vals.items())


def _version_words(att: list[dict], src=None, backend: str = SEED_BACKENDS["vllm"]) -> tuple[str, str]:
    """The engine-version assumption's end and basis, its versions and split grids from table seed_attention_12; vLLM's
    tiles against SGLang's studied version's (the same table) and its profiled split count (``src``'s trace of it)."""
    studied = next(a for a in att if a["engine"] == "sglang" and a["role"] == "studied")
    profiled = next(a for a in att if a["engine"] == "sglang" and a["role"].startswith("profiled"))
    vllm = next(a for a in att if a["engine"] == "vllm")
    return (f"SGLang {studied['version']}'s split grid",
            f"SGLang's kernels were profiled at {profiled['version']}, whose MLA split grid is {_grid(profiled)}; "
            f"{studied['version']} (studied) launches {_grid(studied, here=False)} (seed_attention_12). At that end SGLang's "
            f"attention takes what vLLM's Triton MLA kernel ({_vllm_launch_words(studied, vllm, src, backend)}) took: a "
            "hypothesis, settled by "
            f"profiling SGLang {studied['version']}'s triton backend on the same slices. vLLM: the seed's version is not "
            f"stated; {vllm['version']}'s kernels are kept")


def _vllm_launch_words(studied: dict, vllm: dict, src, backend: str) -> str:
    """vLLM's launch beside SGLang's studied version's: the same tiles or which differ (seed_attention_12), and the
    split count its profile ran (``launches.profiled_launch``) where a trace of it is kept."""
    from .launches import profiled_launch, split_words

    differ = [f"{k} {vllm[k]} against {studied[k]}" for k in _LAUNCH if vllm.get(k) != studied.get(k)]
    tiles = "the same tiles" if not differ else "tiles that differ: " + ", ".join(differ)
    got = profiled_launch(src, "vllm", backend, vllm["version"]) if src is not None else None
    return tiles + (f", {split_words(got['splits'])} in its profiled launch" if got else "")


def _gpus() -> tuple[dict, dict]:
    """The hardware profiles of the GPU the slices were profiled on and the seed's GPU (``projection``)."""
    from ..profiles import load_profile
    from .projection import MEASURED_ON, TARGET

    return load_profile(MEASURED_ON), load_profile(TARGET)


def _bandwidth_words() -> tuple[str, str]:
    """The bandwidth assumption's end and basis, the datasheet figures from data/hardware."""
    src, dst = _gpus()
    basis = (f"central: datasheet over datasheet ({_short(src)} {src['memory_bandwidth_tbs']} TB/s, {_short(dst)} "
             f"{dst['memory_bandwidth_tbs']} TB/s); the end: the {_short(src)}'s measured read bandwidth (table "
             "memory_bandwidth of the profile run) over the datasheet")
    return f"{_short(src)} measured read bandwidth", basis


def _scaling_row(src, central: dict, lat: dict, backends: dict, shares: dict | None) -> dict:
    """The bandwidth-scaling assumption: every weights-bound part takes the whole ratio (central), or only the share of
    it another GPU's ladder measured (``shares``: ``{engine: cross_gpu.bandwidth_shares(...)}``, an engine without its
    own taking another's, said; moves None where no such run is beside the reference)."""
    from ..engines import prose_name
    from .cross_gpu import _ratio, shares_words
    from .projection import MEMORY_BOUND, TARGET

    own = {e: g for e, g in (shares or {}).items() if g and g.get("shares")}
    if not own:
        return _row("bandwidth scaling", "as measured on another GPU", {e: None for e in backends},
                    "not measured: no run beside the reference holds a table carry_check with a depth ladder "
                    "(servebook profile carry, tools/gpu-stage/xgpu-plan-h100.json)")
    lent = next(iter(own.values()))
    use = {e: own.get(e, lent) for e in backends}
    cats = tuple(c for c in MEMORY_BOUND if c != "attention")
    moves = {e: _moved(src, central, lat, {e: b}, scaled_share=use[e]["shares"])[e] for e, b in backends.items()}
    borrowed = [e for e in backends if e not in own]
    gpus = sorted({g["target"]["gpu"] or g["profile"] for g in own.values()})
    return _row("bandwidth scaling", f"the shares measured on an {' and an '.join(gpus)}", moves,
                "central: each weights-bound part takes the whole bandwidth ratio; the end: only the share of it that "
                "each part took on another GPU, " + "; ".join(shares_words(g, cats) for g in own.values())
                + f". Each part = (1 - share) kept + share x the seed's ratio {_ratio(TARGET):.2f} (a part fixed in "
                "time plus one that follows bandwidth, fitted on two GPUs of one chip and carried to another): a "
                "hypothesis" + "".join(f"; {prose_name(e)}'s kernels take {prose_name(lent['engine'])}'s shares, not "
                                       f"measured for {prose_name(e)}" for e in borrowed)
                + "; settled by slices measured on the seed's GPU")


def central_projection(src, lat: dict, n: int | None = None, backends: dict = SEED_BACKENDS, **kw) -> dict:
    """``{engine: project rows}`` with every assumption at its central value: the host rule of ``predict.HOST_RULE``, the
    engine's central all-reduce latency (``lat``: ``comm.engine_latencies``), datasheet bandwidths, kernel floors."""
    return {e: project(src, e, backend=b, allreduce_us=lat[e]["central_us"],
                       allreduce_source=f"central of the engine's range: {lat[e]['basis']}", **kw)
            for e, b in backends.items()}


def _cat(rows: list[dict], cat: str) -> float | None:
    return next((r["ms_per_token"] for r in rows if r["category"] == cat), None)


def _moved(src, central: dict, lat: dict, backends: dict, **change) -> dict:
    """Each engine's move (ms per token) when ``project`` is run with ``change`` instead of the central values."""
    out = {}
    for e, b in backends.items():
        rows = project(src, e, backend=b, allreduce_us=lat[e]["central_us"], allreduce_source="central", **change)
        out[e] = None if _total(rows) is None or _total(central[e]) is None else _total(rows) - _total(central[e])
    return out


def assumption_table(src, central: dict, lat: dict, n: int, backends: dict = SEED_BACKENDS, seed: dict | None = None,
                     shares: dict | None = None) -> list[dict]:
    """One row per end of each assumption: how far it moves each engine's ms per token and the gap (table
    ``seed_assumptions``), and last the slow-side ends no row models (``_slow_side``, no moves). ``n``: collectives per
    token; ``seed``: the seed's tok/s per engine (default ``projection.seed_figures()``); ``shares``: what another GPU
    measured of the weights-bound parts' scaling with bandwidth (``cross_gpu.bandwidth_shares``; None: not measured)."""
    rows = [_row("host rule", "serial (host idle added)",
                 {e: (r[-1].get("serial_ms") or r[-1]["predicted_ms"]) - r[-1]["predicted_ms"] for e, r in central.items()},
                 _host_rule_words(src))]
    for end, field, host in (("one CPU with PCIe switches", "low_us", "low_host"), ("two CPU sockets, no switches", "high_us", "high_host")):
        rows.append(_row("all-reduce latency", end, {e: n * (lat[e][field] - lat[e]["central_us"]) / 1e3 for e in backends},
                         "; ".join(f"{e} {lat[e][field]:.2f} us ({lat[e][host]}, {lat[e]['env']})" for e in backends)
                         + f"; x {n} collectives per token; central: the middle of each engine's range"))
    att = attention_12()
    rows.append(_row(f"attention on capability {_gpus()[1]['capability']}", "as read", *_attention_move(att, backends, src)))
    tp, basis = _shard_words(att)
    rows.append(_row(f"shard shapes at TP={tp}", "no kernel floor", _moved(src, central, lat, backends, floor_us=0.0), basis))
    vllm_att = _cat(central.get("vllm", []), "attention")
    sg = {"sglang": None, "vllm": 0.0}
    if vllm_att is not None and "sglang" in backends:
        rows_s = project(src, "sglang", backend=backends["sglang"], allreduce_us=lat["sglang"]["central_us"],
                         allreduce_source="central", attention_ms=vllm_att,
                         attention_source="vLLM's projected Triton MLA attention")
        sg["sglang"] = _total(rows_s) - _total(central["sglang"])
    end, basis = _version_words(att, src, backends.get("vllm", SEED_BACKENDS["vllm"]))
    rows.append(_row("engine version", end, sg, basis))
    end, basis = _bandwidth_words()
    rows.append(_row("bandwidth ratio", end, _moved(src, central, lat, backends, bandwidth="measured"), basis))
    rows.append(_scaling_row(src, central, lat, backends, shares))
    from ._slow_side import slow_side_row
    from .projection import seed_figures

    return rows + [slow_side_row(rows, central, seed_figures() if seed is None else seed, tp)]
