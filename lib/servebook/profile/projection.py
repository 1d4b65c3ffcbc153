"""The seed case projected from H200 slice profiles: Kimi-K2.5 on 8x RTX PRO 6000 (PCIe, TP=8), per category.

    rows = project(RunStore.at("runs/local-vm/prof"), "sglang")           # table seed_projection
    fixes = ranked_fixes(rows + project(store, "vllm"))                  # table seed_fixes (predicted)

Nothing here is measured on the target: every number is an H200 profile (table ``decode_breakdown``) carried to
the full model and onto the target GPU by the rules below, each named in the row it produced (``rule``) with the
figures it used (``source``). A part that has no recorded input is ``None`` with the reason, never 0.

The rules, in order:

1. Full model on the H200 (per decode step, per category): the 1-layer slice (embedding, the dense layer, LM head,
   sampling) is the *fixed* part; the 2-layer slice minus the 1-layer slice is *one MoE layer*; the full model is
   fixed + 60 MoE layers (61 layers, ``first_k_dense_replace`` 1). Where the INT4 2-layer slice (``quant`` card) was
   recorded, the MoE experts of one layer are that slice's experts minus the 1-layer slice's; otherwise the bf16
   experts times the INT4/bf16 bytes ratio of a routed-expert weight (labelled as such). Both slices are taken with the
   projected backend where it has a 1-layer slice (``h200x1-prof`` has them for SGLang ``triton`` and vLLM
   ``TRITON_MLA``). Only as a fallback, where the 2-layer slice ran another attention backend than the 1-layer one,
   attention per layer is that slice's / 2,
   and every other category's MoE layer is taken between the slices of one backend (the default's 2-layer minus its
   1-layer) plus half the backend's own difference at 2 layers (its extra kernels counted per layer: an upper bound
   where some run once per step); with no such pair the category is marked ``confounded``. A per-layer difference
   below 0 is the noise of the subtraction: taken as 0, and the row's ``source`` says so.
2. Memory-bound categories (attention, MoE experts, dense GEMM) onto the target: times the bandwidth ratio (H200 /
   target, datasheet TB/s, or the H200's measured read bandwidth from table ``memory_bandwidth``) times the TP share
   of the bytes each rank reads (MoE experts 1/tp: every expert's intermediate dimension is split; dense GEMM counted
   from the config: q_a/kv_a projections and the router are replicated, the rest split, LM head vocab-parallel;
   attention 1: MLA's latent KV cache is read whole by every rank), and never below a floor: the category's kernels
   per step (from the trace excerpts) x the smallest duration of a kernel of that category in the H200 excerpts (a
   kernel that short does not get shorter with fewer bytes). No excerpt: no floor, and the row says so.
3. Latency-bound categories (MoE routing, norm/rope/elementwise, sampling, other) kept as measured on the H200
   (no clock scaling unless ``clock_ratio`` is given).
4. Communication: the H200 slices ran at TP=1, so their communication is replaced by collectives per token (2
   all-reduces per decoder layer + 1 for the vocab-parallel embedding + 1 gather of the logits; read in SGLang
   0.5.16 and vLLM 0.26.0 ``models/deepseek_v2.py``, ``layers/vocab_parallel_embedding.py``,
   ``layers/logits_processor.py``) x one all-reduce's latency at the decode message (hidden 7168 x bf16 = 14,336 B)
   from a published series in ``data/reference/allreduce-pcie-published.json`` (or the caller's figure): one latency
   for every engine, measured on another machine - an assumption, never evidence that the engines' all-reduce is equal.
5. Host time, by the one host rule of this package (``servebook.profile.predict.HOST_RULE``, "overlapped": the rule the
   whole models of ``h200x1-prof`` validated): a step takes the larger of the host's time per step (the deeper slice's
   unprofiled time per token on the H200 host; the target's host CPU is unknown) and the target's GPU time (the sum of
   the categories above), so the "gpu idle" row is what the host adds beyond the GPU (0 where the GPU is longer); the
   "serial" rule (that slice's idle time added, ``serial_ms``) is the bound beside it. Profiles of role "repeat" (another
   server start of a slice) never enter the projection; the idle row states what the deep slice's other starts gave
   (``starts_host_ms``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from .comm import _data_dir, _default_allreduce, _figure, _text, allreduce_latency, load_allreduce_reference
from .kernels import CATEGORIES, classify
from .machines import require_one_machine
from .tables import latest_breakdown, latest_ok

__all__ = ["MEMORY_BOUND", "LATENCY_BOUND", "load_allreduce_reference", "allreduce_latency", "collectives_per_token",
           "tp_shares", "kernel_floors", "select_slices", "h200_parts", "project", "ranked_fixes", "seed_figures",
           "measured_alternative", "project_per_start",
           "NOT_IN_VERSION", "ALREADY_DEFAULT", "NO_EFFECT", "NOT_COMPUTABLE", "ALREADY_IN_SEED", "UNCHECKED"]

MEMORY_BOUND = ("attention", "moe experts", "dense gemm")
LATENCY_BOUND = ("moe routing", "norm/rope/elementwise", "sampling", "other")


# -- the model card ------------------------------------------------------------------------------
def _card_facts(card: dict) -> dict:
    """Layers, MoE layers, decode message bytes and the INT4/bf16 bytes ratio of a routed-expert weight."""
    from ..roofline import _quant_bytes

    c = _text(card)
    layers = int(c["num_hidden_layers"])
    dense = min(layers, int(c.get("first_k_dense_replace") or 0)) if c.get("n_routed_experts") else layers
    qb = _quant_bytes(c)
    return {"layers": layers, "dense_layers": dense, "moe_layers": layers - dense, "hidden": int(c["hidden_size"]),
            "message_bytes": int(c["hidden_size"]) * 2, "expert_bytes_ratio": (qb / 2.0) if qb else None,
            "expert_bytes_card": qb}


def collectives_per_token(card: dict, tp: int) -> dict:
    """Collectives one decode token pays at ``tp`` ranks, from the one table every chapter reads
    (``servebook.profile.comm.collective_table``: the sites read in each engine's code): 2 all-reduces per decoder layer
    (after attention's o_proj, after the MLP/MoE), 1 for the vocab-parallel embedding, 1 gather of the logits."""
    if tp <= 1:
        return {"count": 0, "allreduces": 0, "gathers": 0, "rule": "tp 1: no collectives"}
    from .comm import collective_table, collectives_per_token as _count

    n = _count(card, tp)
    tot = next(r for r in collective_table(card, tp) if r["site"] == "total")
    layers = int(_text(card)["num_hidden_layers"])
    return {"count": n, "allreduces": tot["allreduces"], "gathers": n - tot["allreduces"],
            "rule": (f"{2 * layers} all-reduces (2 per decoder layer) + 1 (vocab-parallel embedding) + 1 logits gather, "
                     "read in each engine's code (table seed_collectives: file:line per site); the gather is costed at the "
                     "all-reduce latency")}


def tp_shares(card: dict, tp: int) -> dict:
    """The share of each memory-bound category's bytes one rank reads at ``tp``, for the fixed part and one MoE
    layer: MoE experts 1/tp; attention 1 (MLA's latent KV cache is read whole by every rank); dense GEMM counted
    from the config (replicated: q_a, kv_a, router; split: q_b, kv_b, o_proj, MLPs, shared experts, LM head)."""
    c = _text(card)
    h, heads = c["hidden_size"], c["num_attention_heads"]
    rope, nope, v = c.get("qk_rope_head_dim", 0), c.get("qk_nope_head_dim", 0), c.get("v_head_dim", 0)
    rep_attn = h * (c.get("q_lora_rank") or 0) + h * (c.get("kv_lora_rank", 0) + rope)
    split_attn = ((c.get("q_lora_rank") or h) * heads * (nope + rope) + c.get("kv_lora_rank", 0) * heads * (nope + v)
                  + heads * v * h)
    shared = (c.get("n_shared_experts") or 0) * 3 * h * (c.get("moe_intermediate_size") or 0)
    fixed_rep, fixed_split = rep_attn, split_attn + 3 * h * c["intermediate_size"] + c["vocab_size"] * h
    moe_rep, moe_split = rep_attn + (c.get("n_routed_experts") or 0) * h, split_attn + shared

    def share(rep: float, split: float) -> float:
        return (rep + split / tp) / (rep + split)

    return {"fixed": {"attention": 1.0, "moe experts": 1.0 / tp, "dense gemm": share(fixed_rep, fixed_split)},
            "moe": {"attention": 1.0, "moe experts": 1.0 / tp, "dense gemm": share(moe_rep, moe_split)}}


# -- recorded tables -----------------------------------------------------------------------------
def _tables(source) -> tuple[list[dict], list[dict], list[dict], dict]:
    """(profile_runs, decode_breakdown, memory_bandwidth, excerpts by label) from a RunStore, a run directory or a
    dict of tables (``{"profile_runs": [...], "decode_breakdown": [...], "excerpts": {label: excerpt}}``)."""
    if isinstance(source, dict):
        return (list(source.get("profile_runs", [])), list(source.get("decode_breakdown", [])),
                list(source.get("memory_bandwidth", [])), dict(source.get("excerpts", {})))
    if isinstance(source, (str, Path)):
        from ..results import RunStore

        source = RunStore.at(source)
    # rows recorded before machine identities name no run: tag them with this one, so rows of two runs never meet
    run = Path(source.path).name
    profiles = [{"run_id": run, **p} for p in source.rows("profile_runs")]
    excerpts = {}
    for p in profiles:
        path = Path(source.path) / "traces" / (p["label"].replace(" ", "_").replace("/", "_") + ".excerpt.json")
        if path.is_file():
            excerpts[p["label"]] = json.loads(path.read_text())
    return profiles, source.rows("decode_breakdown"), source.rows("memory_bandwidth"), excerpts


def recorded_day(row: dict | None) -> str | None:
    """The UTC day a profile was taken (``taken_at``, epoch seconds): the recording session it belongs to. The lent
    machines of one reference run change between days, so two slices are subtracted only where their days agree."""
    from datetime import datetime, timezone

    if not row or row.get("taken_at") is None:
        return None
    return datetime.fromtimestamp(float(row["taken_at"]), tz=timezone.utc).date().isoformat()


def recording_unit(row: dict | None) -> str | None:
    """What two slices must share to be subtracted: the machine a profile was measured on where the row names it
    (``machine``, a hash of its GPUs' UUIDs), else the UTC day it was taken (one lent machine per day in the older runs)."""
    if not row:
        return None
    return row.get("machine") or recorded_day(row)


def select_slices(profile_rows: Iterable[dict], engine: str, *, backend: str = "auto", mode: str = "graph",
                  card: str = "kimi-k2.5", same_day: bool = True) -> dict:
    """The last ok profiles an engine's projection uses: the 1- and 2-layer bf16 slices with ``backend``, the 2-layer
    one from the same recording unit as the 1-layer one (``recording_unit``: the row's machine, else its day; another
    server start of it, role "repeat", where the first start was taken on another machine: the difference of two slices
    is never taken across machines); the 1-layer slice of the default backend where ``backend`` has none (said in
    ``notes``), and the INT4 2-layer slice with the 1-layer slice of its own unit (``int4_base``: the experts of one
    layer are their difference). ``same_day=False``: the old choice (first starts only, any unit). Missing ones are
    None; ``cross_day`` lists pairs that could only be taken across units.
    """
    rows = [r for r in latest_ok(profile_rows) if r["engine"] == engine and r.get("card") == card
            and r.get("role", "slice") in ("slice", "repeat")]

    def pick(layers: int, quant: str, be: str | None, modes: tuple[str, ...], day: str | None = None,
             roles: tuple[str, ...] = ("slice",)) -> dict | None:
        for role in roles:
            for m in modes:
                for r in rows:
                    if int(r["layers"]) == layers and r.get("quant", "bf16") == quant and r.get("mode") == m and \
                            r.get("role", "slice") == role and (be is None or r.get("backend", "auto") == be) and \
                            (day is None or recording_unit(r) == day):
                        return r
        return None

    notes, cross = [], []
    both = ("slice", "repeat")
    shallow = pick(1, "bf16", backend, (mode,))
    deep = None
    if shallow is not None:
        deep = pick(2, "bf16", backend, (mode,), recording_unit(shallow) if same_day else None, both if same_day else ("slice",))
    if shallow is None and backend != "auto":
        deep = pick(2, "bf16", backend, (mode,))
        day = recording_unit(deep) if same_day and deep is not None else None
        shallow = pick(1, "bf16", "auto", (mode,), day) or pick(1, "bf16", None, (mode,), day)
        if shallow is not None:
            notes.append(f"no 1-layer slice with backend {backend}: the fixed part comes from {shallow['label']} (taken the "
                         f"same day); attention per layer = the 2-layer slice's attention / 2")
    if deep is None and shallow is not None and same_day:
        deep = pick(2, "bf16", backend, (mode,))
        if deep is not None:
            cross.append(f"{deep['label']} - {shallow['label']}")
    if deep is not None and deep.get("role") == "repeat":
        notes.append(f"the 2-layer slice is {deep['label']}, the start taken the same day as {shallow['label']} (the first "
                     "start was taken another day, on another lent machine)")
    int4 = pick(2, "card", backend, (mode, "eager", "graph")) or pick(2, "card", None, (mode, "eager", "graph"))
    int4_base = None
    if int4 is not None:
        int4_base = (pick(1, "bf16", None, (mode, "eager", "graph"), recording_unit(int4)) if same_day else shallow)
        if int4_base is None:
            int4_base = shallow
            cross.append(f"{int4['label']} - {shallow['label'] if shallow else '?'}")
        elif int4_base is not shallow:
            notes.append(f"experts of one layer = {int4['label']} - {int4_base['label']} (the 1-layer slice taken the same day)")
    # the 2-layer slice of the 1-layer slice's backend: a per-layer difference is taken between slices of one backend
    deep_same = None
    if shallow is not None and deep is not None and shallow.get("backend", "auto") != deep.get("backend", "auto"):
        deep_same = pick(2, "bf16", shallow.get("backend", "auto"), (mode,),
                         recording_unit(shallow) if same_day else None, both if same_day else ("slice",))
        notes.append(f"per MoE layer (every category but attention and experts) = {deep_same['label']} - {shallow['label']} "
                     f"(one backend); {deep['label']} - {deep_same['label']} (the backend's difference at 2 layers) "
                     "spread over both layers" if deep_same is not None else
                     f"no 2-layer slice with {shallow['label']}'s backend: the other categories mix two backends (confounded)")
    require_one_machine([shallow, deep, int4, int4_base, deep_same], f"the {engine} projection's slice subtraction")
    return {"shallow": shallow, "deep": deep, "int4": int4, "int4_base": int4_base, "deep_same": deep_same,
            "notes": notes, "cross_day": cross,
            "days": sorted({d for d in (recorded_day(r) for r in (shallow, deep, int4, int4_base, deep_same) if r) if d})}


def _cats(breakdown_rows: list[dict], row: dict | None) -> dict:
    """``{category: ms per step}`` of one profile (only the categories the table holds)."""
    if row is None:
        return {}
    return {r["category"]: float(r["ms_per_step"]) for r in breakdown_rows
            if r["label"] == row["label"] and r.get("taken_at") == row.get("taken_at")}


def h200_parts(breakdown_rows: list[dict], slices: dict, expert_bytes_ratio: float | None) -> dict:
    """Per category ``{"fixed", "moe", "how"}`` in ms per step on the H200 (``None`` where unknown, with the reason):
    fixed = the 1-layer slice; one MoE layer = 2-layer minus 1-layer (experts from the INT4 slice where recorded), both
    of one backend where the 2-layer slice ran another (rule 1 of this module); ``confounded`` where they cannot be."""
    s, d, q, a = slices["shallow"], slices["deep"], slices["int4"], slices.get("deep_same")
    cs, cd, cq, ca = (_cats(breakdown_rows, r) for r in (s, d, q, a))
    qb = slices.get("int4_base") or s
    cqb = _cats(breakdown_rows, qb)
    mixed = s is not None and d is not None and s.get("backend", "auto") != d.get("backend", "auto")
    out = {}
    for cat in CATEGORIES:
        if cat in ("gpu idle", "communication"):
            continue
        if s is None or d is None or cat not in cs or cat not in cd:
            missing = [n for n, r, c in (("1-layer", s, cs), ("2-layer", d, cd)) if r is None or cat not in c]
            out[cat] = {"fixed": None, "moe": None, "how": f"unknown: no {' / '.join(missing)} slice row for {cat}"}
            continue
        fixed, moe = cs[cat], cd[cat] - cs[cat]
        how = f"fixed = {s['label']}; one MoE layer = {d['label']} - {s['label']}"
        confounded = False
        if cat == "attention" and mixed:
            fixed, moe = cd[cat] / 2, cd[cat] / 2
            how = f"attention per layer = {d['label']} / 2 (every layer's MLA is the same)"
        elif mixed and a is not None and cat in ca:
            # one MoE layer between slices of one backend; the deep slice's backend adds (or saves) cd - ca at 2 layers,
            # spread over both layers like its attention (an upper bound where some of it runs once per step)
            extra = cd[cat] - ca[cat]
            fixed, moe = cs[cat] + extra / 2, ca[cat] - cs[cat] + extra / 2
            how = (f"fixed = {s['label']} + half the backend's difference; one MoE layer = {a['label']} - {s['label']} "
                   f"(one backend) + half of {d['label']} - {a['label']} ({extra:+.4f} ms at 2 layers, counted per layer: "
                   "an upper bound where part of it runs once per step; a 1-layer slice of this backend settles it)")
        elif mixed:
            confounded = True
            how += " - confounded: the two slices ran different backends, so their difference holds backend kernels too"
        if cat == "moe experts":
            if q is not None and cat in cq and cat in cqb:
                fixed, moe, confounded = cs[cat], cq[cat] - cqb[cat], False
                how = f"fixed = {s['label']}; experts of one MoE layer = {q['label']} (INT4, mode {q.get('mode')}) - {qb['label']}"
            elif expert_bytes_ratio:
                moe = moe * expert_bytes_ratio
                how += f"; no INT4 slice: bf16 experts x {expert_bytes_ratio:.4f} (INT4 group-32 bytes / bf16 bytes per weight)"
            else:
                out[cat] = {"fixed": fixed, "moe": None, "how": "unknown: no INT4 slice and no bytes ratio for the card"}
                continue
        if moe is not None and moe < 0:
            how += f"; one MoE layer came out {moe:+.4f} ms: within the noise of the subtraction, taken as 0"
            moe = 0.0
        out[cat] = {"fixed": fixed, "moe": moe, "how": how, **({"confounded": True} if confounded else {})}
    return out


def kernel_floors(excerpts: dict, slices: dict, floor_us: float | None = None) -> dict:
    """Per memory-bound category ``{"fixed_ms", "moe_ms", "floor_us", "how"}``: kernels per step of the category in
    the 1-layer excerpt (fixed) and the 2-layer minus the 1-layer (one MoE layer), x the floor per kernel (default:
    the smallest duration of a kernel of that category in these H200 excerpts). ``None`` where no excerpt."""
    s, d = slices["shallow"], slices["deep"]
    es, ed = excerpts.get(s["label"]) if s else None, excerpts.get(d["label"]) if d else None
    out = {}
    for cat in MEMORY_BOUND:
        if es is None or ed is None:
            out[cat] = {"fixed_ms": None, "moe_ms": None, "floor_us": None,
                        "how": "no floor: no trace excerpt of " + (" / ".join(
                            r["label"] for r, e in ((s, es), (d, ed)) if r is not None and e is None) or "the slices")}
            continue
        ks = [k for k in es["kernels"] if classify(k["name"], k.get("cat", "")) == cat]
        kd = [k for k in ed["kernels"] if classify(k["name"], k.get("cat", "")) == cat]
        n_s, n_d = len(ks) / max(1, es.get("steps", 1)), len(kd) / max(1, ed.get("steps", 1))
        durs = [float(k["dur"]) for e in (es, ed) for k in e["kernels"] if classify(k["name"], k.get("cat", "")) in MEMORY_BOUND]
        f = floor_us if floor_us is not None else (min(durs) if durs and (ks or kd) else None)
        if f is None:
            out[cat] = {"fixed_ms": 0.0, "moe_ms": 0.0, "floor_us": None, "how": f"no {cat} kernel in the excerpts"}
            continue
        src = "given" if floor_us is not None else "smallest memory-bound H200 kernel in the excerpts: a kernel that reads fewer bytes still costs its launch and latency"
        out[cat] = {"fixed_ms": n_s * f / 1e3, "moe_ms": max(0.0, n_d - n_s) * f / 1e3, "floor_us": f,
                    "how": f"floor {f:.2f} us per kernel ({src}) x {n_s:g} kernels (fixed), {max(0.0, n_d - n_s):g} per MoE layer"}
    return out


# -- the projection ------------------------------------------------------------------------------
def _bandwidths(profile_name: str, measured_on: str, bandwidth_rows: list[dict], bandwidth: str) -> tuple[float, float, str]:
    """(source GPU TB/s, target GPU TB/s, label)."""
    from ..profiles import load_profile

    src, dst = load_profile(measured_on), load_profile(profile_name)
    src_bw, label = float(src["memory_bandwidth_tbs"]), f"{measured_on} datasheet {src['memory_bandwidth_tbs']} TB/s"
    if bandwidth == "measured":
        got = [float(b["read_tbs"]) for b in bandwidth_rows if b.get("read_tbs")]
        if not got:
            raise ValueError("bandwidth='measured' but the run holds no memory_bandwidth row")
        src_bw, label = got[-1], f"{measured_on} measured read {got[-1]:.2f} TB/s (table memory_bandwidth)"
    return src_bw, float(dst["memory_bandwidth_tbs"]), label + f" / {profile_name} datasheet {dst['memory_bandwidth_tbs']} TB/s"


def _memory_row(cat: str, part: dict, floor: dict, shares: dict, ratio: float, n_moe: int, bw_label: str, tp: int) -> dict:
    """One memory-bound category on the target: each part x bandwidth ratio x TP share, floored."""
    if part["fixed"] is None or part["moe"] is None:
        return {"ms_per_token": None, "source": part["how"], "rule": "memory-bound; unknown input"}
    fx = part["fixed"] * ratio * shares["fixed"][cat]
    mo = part["moe"] * ratio * shares["moe"][cat]
    floored = []
    if floor["fixed_ms"] is not None:
        if floor["fixed_ms"] > fx:
            floored.append("fixed")
        if floor["moe_ms"] > mo:
            floored.append("per MoE layer")
        fx, mo = max(fx, floor["fixed_ms"]), max(mo, floor["moe_ms"])
    return {"ms_per_token": fx + n_moe * mo, "h200_full_ms": part["fixed"] + n_moe * part["moe"],
            "source": f"{part['how']}; {bw_label}; {floor['how']}",
            "rule": (f"memory-bound: x {ratio:.3f} (bandwidth ratio) x TP share {shares['fixed'][cat]:.3f} fixed / "
                     f"{shares['moe'][cat]:.3f} per MoE layer at tp {tp}, floored" +
                     (f" (floor applies: {', '.join(floored)})" if floored else " (floor below the scaled time)")
                     if floor["fixed_ms"] is not None else
                     f"memory-bound: x {ratio:.3f} (bandwidth ratio) x TP share {shares['fixed'][cat]:.3f} / "
                     f"{shares['moe'][cat]:.3f} at tp {tp}; no floor (no excerpt)")}


def _latency_row(cat: str, part: dict, n_moe: int, clock_ratio: float) -> dict:
    if part["fixed"] is None or part["moe"] is None:
        return {"ms_per_token": None, "source": part["how"], "rule": "latency-bound; unknown input"}
    full = part["fixed"] + n_moe * part["moe"]
    return {"ms_per_token": full / clock_ratio, "h200_full_ms": full, "source": part["how"],
            "rule": "latency-bound: kept as measured on the H200" + (f", / SM clock ratio {clock_ratio:g}" if clock_ratio != 1
                                                                    else " (no clock scaling)")}


def seed_figures() -> dict:
    """The seed's single-stream tok/s per engine (``data/reference/seed-case.json``): compared against, never an input."""
    return json.loads((_data_dir() / "reference" / "seed-case.json").read_text())["single_stream_tok_s"]


def project(source, engine: str, *, backend: str = "auto", mode: str = "graph", card: str = "kimi-k2.5",
            profile: str = "rtx-pro-6000", measured_on: str = "h200", tp: int = 8, allreduce_us: float | None = None,
            allreduce_source: str | None = None, bandwidth: str = "datasheet", floor_us: float | None = None,
            clock_ratio: float = 1.0, seed_tok_s: float | None = None, attention_rule: str = "latency",
            host_rule: str | None = None, attention_ms: float | None = None, attention_source: str | None = None) -> list[dict]:
    """Rows of the table ``seed_projection`` for ``engine``: one per category (engine, backend, category,
    ms_per_token, source, rule) and a total (predicted_ms, predicted_tok_s, seed_tok_s, error_pct = 100 x
    (predicted - seed) / seed tok/s, positive where the projection is faster than the seed's figure).
    ``allreduce_us`` None: the published 8-rank RTX PRO 6000 NCCL series at the decode message (labelled)."""
    from ..cards import load_card

    c = load_card(card)
    facts = _card_facts(c)
    profiles, breakdown, bw_rows, excerpts = _tables(source)
    slices = select_slices(profiles, engine, backend=backend, mode=mode, card=card)
    bd = latest_breakdown(breakdown, profiles)
    parts = h200_parts(bd, slices, facts["expert_bytes_ratio"])
    floors = kernel_floors(excerpts, slices, floor_us)
    base = {"engine": engine, "backend": backend, "card": card, "profile": profile, "tp": tp, "measured_on": measured_on}
    out = []
    if slices["shallow"] is not None and slices["deep"] is not None:
        src_bw, dst_bw, bw_label = _bandwidths(profile, measured_on, bw_rows, bandwidth)
        ratio, shares = src_bw / dst_bw, tp_shares(c, tp)
    for cat in CATEGORIES:
        if cat == "communication":
            row = _comm_row(c, tp, facts, allreduce_us, allreduce_source)
        elif cat == "gpu idle":
            row = _idle_row(slices["deep"], profiles)
        elif slices["shallow"] is None or slices["deep"] is None:
            row = {"ms_per_token": None, "source": parts[cat]["how"], "rule": "unknown: the slice profiles are missing"}
        elif cat == "attention" and attention_rule == "latency":
            row = _latency_row(cat, parts[cat], facts["moe_layers"], clock_ratio)
            row["rule"] = ("latency-bound at this context (the slices decode a few hundred tokens: each layer's MLA kernel "
                           "reads ~0.2 MB of latent cache), kept as measured on the H200 - an assumption; "
                           "attention_rule='bandwidth' scales it like the weights instead. " + row.get("rule", ""))
        elif cat in MEMORY_BOUND:
            row = _memory_row(cat, parts[cat], floors[cat], shares, ratio, facts["moe_layers"], bw_label, tp)
        else:
            row = _latency_row(cat, parts[cat], facts["moe_layers"], clock_ratio)
        if cat == "attention" and attention_ms is not None and row.get("ms_per_token") is not None:
            row = {**row, "ms_per_token": attention_ms, "as_profiled_ms": row["ms_per_token"],
                   "source": (attention_source or "given by the caller") + "; as profiled: " + row["source"]}
        if parts.get(cat, {}).get("confounded"):
            row["confounded"] = True
        out.append({**base, "category": cat, "h200_full_ms": None, **row})
    _apply_host_rule(out, slices["deep"], host_rule)
    out.append(_total_row(base, out, slices, engine, seed_tok_s))
    return out


def _apply_host_rule(rows: list[dict], deep: dict | None, rule: str | None) -> None:
    """Rule 5: the "gpu idle" row becomes what the host adds beyond the target's GPU time under ``rule`` (default
    ``predict.HOST_RULE``); the H200 idle it started from stays as ``serial_ms`` (the serial rule's addition)."""
    from .predict import HOST_RULE, HOST_RULES, host_combine

    rule = rule or HOST_RULE
    idle = next(r for r in rows if r["category"] == "gpu idle")
    gpu = [r["ms_per_token"] for r in rows if r["category"] != "gpu idle"]
    if idle["ms_per_token"] is None or None in gpu or deep is None:
        return
    h = host_combine(sum(gpu), float(deep["tpot_ms"]), idle["ms_per_token"], rule)
    idle.update({"serial_ms": idle["ms_per_token"], "host_step_ms": float(deep["tpot_ms"]), "ms_per_token": h["idle_ms"],
                 "host_rule": rule,
                 "rule": (f"host rule {rule!r}: {HOST_RULES[rule]}; the host's time per step is {deep['label']}'s unprofiled "
                          f"{float(deep['tpot_ms']):.3f} ms per token on the H200 host, against {sum(gpu):.3f} ms of GPU time "
                          f"here, so the host adds {h['idle_ms']:.3f} ms; the serial rule would add the slice's idle "
                          f"{h['serial_ms'] - sum(gpu):.3f} ms (serial_ms)")})


def project_per_start(source, engine: str, **kw) -> list[dict]:
    """The projection again with each other server start of the 2-layer slice (role "repeat") in place of the first,
    by the same rules: ``[{"start", "deep_label", "predicted_ms", "predicted_tok_s", "ms_by_category"}]``, the first
    start first (that is ``project``'s own answer). How far one start of the H200 slices moves the projection; never
    an input to it. One entry where the slice has no other start."""
    from .tables import starts_of

    profiles, breakdown, bw, excerpts = _tables(source)
    tables = {"profile_runs": profiles, "decode_breakdown": breakdown, "memory_bandwidth": bw, "excerpts": excerpts}
    sl = select_slices(profiles, engine, backend=kw.get("backend", "auto"), mode=kw.get("mode", "graph"),
                       card=kw.get("card", "kimi-k2.5"))
    deep = sl["deep"]
    starts = [p for p in starts_of(profiles, deep["label"]) if p.get("role") == "repeat"] if deep else []
    out = []
    for i, rep in enumerate([None] + starts):
        t = tables
        if rep is not None:   # the repeat's rows under the first start's label; the first start's rows left out
            t = {**tables,
                 "profile_runs": [{**rep, "label": deep["label"], "role": deep.get("role", "slice")} if p is rep else p
                                  for p in profiles if p["label"] != deep["label"]],
                 "decode_breakdown": [{**b, "label": deep["label"]} if b["label"] == rep["label"] else b
                                      for b in breakdown if b["label"] != deep["label"]]}
        rows = project(t, engine, **kw)
        tot = rows[-1]
        out.append({"start": i + 1, "deep_label": rep["label"] if rep is not None else (deep or {}).get("label"),
                    "predicted_ms": tot["predicted_ms"], "predicted_tok_s": tot["predicted_tok_s"],
                    "ms_by_category": {r["category"]: r["ms_per_token"] for r in rows[:-1]}})
    return out


def _comm_row(card: dict, tp: int, facts: dict, allreduce_us: float | None, allreduce_source: str | None) -> dict:
    coll = collectives_per_token(card, tp)
    if coll["count"] == 0:
        return {"ms_per_token": 0.0, "source": coll["rule"], "rule": "communication: none at tp 1", "collectives": 0}
    figure = None
    if allreduce_us is None:
        allreduce_us, label = _default_allreduce(facts["message_bytes"])
        allreduce_source, figure = "default: " + label, load_allreduce_reference()["default"]["nccl"]
    return {"ms_per_token": coll["count"] * allreduce_us / 1e3, "collectives": coll["count"], "allreduce_us": allreduce_us,
            "allreduce_figure": figure, "message_bytes": facts["message_bytes"],
            "source": allreduce_source or "given by the caller (no source stated)",
            "rule": f"communication floor: {coll['rule']} = {coll['count']} x {allreduce_us:.2f} us "
                    "(the H200 slices ran at TP=1: their communication is not used)" +
                    ("" if figure is None else "; one latency for every engine - an assumption where the engines ran with "
                     "different NCCL settings or on another machine")}


def _idle_row(deep: dict | None, profiles: list[dict]) -> dict:
    """Host / gpu idle from the deep slice's (first) start; the other starts of that server (role "repeat") only stated
    beside it (``starts_host_ms``, ``host_spread_ms``), never used."""
    from .tables import start_spread

    if deep is None or deep.get("tpot_ms") is None or deep.get("busy_ms") is None:
        return {"ms_per_token": None, "source": "unknown: no 2-layer slice profile", "rule": "host / gpu idle; unknown input"}
    host = max(0.0, float(deep["tpot_ms"]) - float(deep["busy_ms"]))
    row = {"ms_per_token": host, "source": f"{deep['label']}: unprofiled {float(deep['tpot_ms']):.3f} ms per token - "
                                           f"GPU busy {float(deep['busy_ms']):.3f} ms per step",
           "rule": "host / gpu idle: kept as measured on the H200 host (the target's host CPU is unknown)"}
    sp = start_spread(profiles, deep["label"])
    if sp is not None:
        starts = [max(0.0, t - b) for t, b in zip(sp["tpot_ms"], sp["busy_ms"])]
        row.update({"starts_host_ms": starts, "starts_labels": sp["labels"], "host_spread_ms": max(starts) - min(starts)})
        row["source"] += (f"; the server's {sp['starts']} starts gave " + ", ".join(f"{x:.3f}" for x in starts)
                          + " ms (the first start's is used)")
    return row


def _total_row(base: dict, rows: list[dict], slices: dict, engine: str, seed_tok_s: float | None) -> dict:
    unknown = [r["category"] for r in rows if r["ms_per_token"] is None]
    seed = seed_tok_s if seed_tok_s is not None else seed_figures().get(engine)
    total = None if unknown else sum(r["ms_per_token"] for r in rows)
    tok_s = 1e3 / total if total else None
    idle = next((r for r in rows if r["category"] == "gpu idle"), {})
    serial = None if total is None or idle.get("serial_ms") is None else total - idle["ms_per_token"] + idle["serial_ms"]
    return {**base, "category": "total", "ms_per_token": total, "predicted_ms": total, "predicted_tok_s": tok_s,
            "host_rule": idle.get("host_rule"), "serial_ms": serial,
            "seed_tok_s": seed, "error_pct": 100 * (tok_s - seed) / seed if tok_s and seed else None,
            "unknown": unknown, "notes": slices["notes"],
            "measured_version": ", ".join(sorted({str(r.get("version")) for r in (slices["shallow"], slices["deep"],
                                                                                  slices.get("deep_same"), slices["int4"])
                                                  if r and r.get("version")})) or None,
            "from_labels": [r["label"] for r in (slices["shallow"], slices["deep"], slices.get("deep_same"), slices["int4"]) if r]
            + [r["label"] for r in (slices.get("int4_base"),) if r and r is not slices["shallow"]],
            "recorded_days": slices.get("days"), "cross_day": slices.get("cross_day") or [],
            "source": "sum of the categories" + (f"; unknown: {', '.join(unknown)}" if unknown else ""),
            "rule": "predicted; error_pct = 100 x (predicted - seed) / seed tok/s (positive: faster than the seed's figure); "
                    "the seed's figures are compared against, never an input"}


# -- candidate changes ---------------------------------------------------------------------------
_MODEL = "moonshotai/Kimi-K2.5"
_VERSIONS = {"sglang": "0.5.16", "vllm": "0.26.0"}
# A row's ``label``: only "predicted" rows carry a gain and are ranked; the others say why the change is not one here.
NOT_IN_VERSION, ALREADY_DEFAULT, NO_EFFECT, NOT_COMPUTABLE, ALREADY_IN_SEED, UNCHECKED = (
    "not in this version", "already the default", "no effect in this version", "not computable", "already in the seed's launch",
    "not read in this version's code")


def _cat(rows: list[dict], engine: str, cat: str) -> float | None:
    return next((r["ms_per_token"] for r in rows if r["engine"] == engine and r["category"] == cat), None)


def _launch(engine: str, tp: int, versions: dict, **kw) -> str:
    from ..engines import user_command

    return user_command(engine, _MODEL, tp=tp, version=versions.get(engine), **kw)


def _fix(engine: str, total: float, change: str, gain_ms: float | None, basis: str, command: str,
         label: str = "predicted", **extra) -> dict:
    if label != "predicted":
        gain_ms = None
    after = None if gain_ms is None else total - gain_ms
    return {"engine": engine, "change": change, "gain_ms_per_token": gain_ms,
            "gain_tok_s": None if gain_ms is None or not after else 1e3 / after - 1e3 / total,
            "label": label, "basis": basis, "check_command": command, **extra}


def _path_row(decode_path: list[dict], engine: str, version: str | None, setting: str) -> dict | None:
    """Chapter 02's reading of ``setting`` in ``engine`` ``version``'s code (table ``decode_path``), or None."""
    return next((r for r in decode_path if r.get("engine") == engine and r.get("version") == version
                 and r.get("setting") == setting), None)


def _machine(fig_id: str) -> str:
    """The machine a published figure was measured on: the figure it names as "same system as ID", else its own id."""
    fig = next(f for f in load_allreduce_reference()["figures"] if f["id"] == fig_id)
    return fig["hardware"].split("same system as ", 1)[1].split()[0].rstrip(";,.") \
        if fig["hardware"].startswith("same system as ") else fig_id


def ranked_fixes(projection_rows: list[dict], *, tp: int = 8, attention_alternatives: dict | None = None,
                 custom_allreduce_us: float | None = None, nccl_tuned_us: float | None = None,
                 message_bytes: int = 14336, expert_floor_ms: dict | None = None, decode_path: list[dict] = (),
                 versions: dict | None = None, seed_env_engines: tuple[str, ...] = ()) -> list[dict]:
    """Candidate changes per engine with their predicted gain (ms and tok/s per token) from the projection, largest
    first, each labelled "predicted" with the command that checks it on the real host. Never a cause. A change the
    engine's code does not have, that is already its default, or whose gain needs figures of two machines is listed
    with that label instead (``NOT_IN_VERSION`` ...), with no gain, after the predicted ones.

    ``attention_alternatives``: ``{engine: (backend, ms per token or None[, info])}``; None ms = as fast as the other
    engine's projected attention (an assumption, labelled); ``info`` = ``measured_alternative``'s answer where the
    backend was profiled (its basis and the caller's ``assumption`` go into the row). ``custom_allreduce_us`` / ``nccl_tuned_us``: default the published custom PCIe
    kernel and the tuned-NCCL (LL) series at ``message_bytes``. ``expert_floor_ms``: ``{engine: ms}`` the MoE experts
    would take at the bandwidth roofline (default: the card's INT4 expert bytes / tp / the target's datasheet bandwidth).
    ``decode_path``: chapter 02's table for ``versions`` (``{engine: version}``, default 0.5.16 / 0.26.0): which options
    exist and what is already the default. ``seed_env_engines``: engines the seed launched with its NCCL block.
    """
    alts = attention_alternatives if attention_alternatives is not None else {"sglang": ("flashinfer", None)}
    vers = {**_VERSIONS, **(versions or {})}
    out = []
    totals = {r["engine"]: r for r in projection_rows if r["category"] == "total" and r["ms_per_token"]}
    for eng, tot in totals.items():
        total = tot["ms_per_token"]
        comm = next(r for r in projection_rows if r["engine"] == eng and r["category"] == "communication")
        ctx = {"eng": eng, "total": total, "tp": tp, "vers": vers, "path": list(decode_path)}
        out += _attention_fix(projection_rows, ctx, alts)
        out += _comm_fixes(ctx, comm, custom_allreduce_us, nccl_tuned_us, message_bytes, eng in seed_env_engines)
        out.append(_graph_fix(projection_rows, ctx))
        out.append(_moe_fix(projection_rows, ctx, (expert_floor_ms or {}).get(eng)))
    return sorted(out, key=lambda f: -(f["gain_ms_per_token"] if f["gain_ms_per_token"] is not None else -1e9))


def measured_alternative(source, engine: str, backend: str, *, against: str | None = None, **kw) -> dict | None:
    """``backend``'s attention for ``engine`` carried to the target by the attention category's own rule (``project``
    with that backend), from its measured H200 profile; ``None`` where the run holds no 2-layer profile of that
    backend. Where ``backend`` has no 1-layer slice (its attention per layer = its 2-layer slice's / 2) and ``against``
    (the engine's current backend) has one, ``like_for_like_ms`` is ``against``'s attention by that same rule (its own
    1-layer slice left out), so the gain can be read both ways. For
    ``ranked_fixes(attention_alternatives={engine: (backend, m["ms"], m)})``."""
    profiles, breakdown, bw, excerpts = _tables(source)
    mode, card = kw.get("mode", "graph"), kw.get("card", "kimi-k2.5")
    sl = select_slices(profiles, engine, backend=backend, mode=mode, card=card)
    if sl["deep"] is None:
        return None
    tables = {"profile_runs": profiles, "decode_breakdown": breakdown, "memory_bandwidth": bw, "excerpts": excerpts}
    rows = project(tables, engine, backend=backend, **kw)
    att, tot = next(r for r in rows if r["category"] == "attention"), next(r for r in rows if r["category"] == "total")
    if att["ms_per_token"] is None:
        return None
    out = {"engine": engine, "backend": backend, "ms": att["ms_per_token"], "h200_full_ms": att.get("h200_full_ms"),
           "from_labels": tot["from_labels"], "measured_version": tot.get("measured_version"), "like_for_like_ms": None,
           "basis": f"{backend}'s attention measured on the H200 ({sl['deep']['label']}): {att['source']}"}
    own = select_slices(profiles, engine, backend=against, mode=mode, card=card) if against else None
    halved = sl["shallow"] is not None and sl["shallow"].get("backend", "auto") != backend
    if halved and own is not None and own["shallow"] is not None and own["shallow"].get("backend", "auto") == against:
        drop = own["shallow"]["label"]
        other = {**tables, "profile_runs": [p for p in profiles if p["label"] != drop]}
        like = next(r for r in project(other, engine, backend=against, **kw) if r["category"] == "attention")["ms_per_token"]
        out["like_for_like_ms"] = like
    if out["like_for_like_ms"] is not None:
        out["basis"] += (f"; {backend} has no 1-layer slice, so its attention per layer is its 2-layer slice's / 2: the same "
                         f"rule on {own['deep']['label']} (its 1-layer slice left out) gives {against} {like:.3f} ms per token")
    return out


def _attention_fix(rows: list[dict], ctx: dict, alts: dict) -> list[dict]:
    """``alts[eng]``: (backend, ms or None) or (backend, ms, info) where ``info`` (``measured_alternative``'s answer, plus
    an ``assumption`` the caller states) says where the ms came from."""
    eng, total, tp, vers = ctx["eng"], ctx["total"], ctx["tp"], ctx["vers"]
    if eng not in alts or alts[eng] is None:
        return []
    backend, target_ms, info = (tuple(alts[eng]) + (None,))[:3]
    mine = _cat(rows, eng, "attention")
    basis, assumption = f"attention backend {backend}", None
    if info is not None and target_ms is not None:
        assumption = info.get("assumption")
        gain = None if mine is None else max(0.0, mine - target_ms)
        return [_fix(eng, total, f"attention backend {backend}", gain,
                     f"{basis}: projected {target_ms:.3f} ms per token from its measured profile, now {mine} ms per token; "
                     + info.get("basis", ""), _launch(eng, tp, vers, attention=backend),
                     alternative_backend=backend, alternative_ms=target_ms, alternative_from=info.get("from_labels"),
                     like_for_like_gain_ms=(None if info.get("like_for_like_ms") is None
                                            else max(0.0, info["like_for_like_ms"] - target_ms)),
                     **({"assumption": assumption} if assumption else {}))]
    if target_ms is None:
        others = [(_cat(rows, e, "attention"), e) for e in {r["engine"] for r in rows} if e != eng]
        others = [(ms, e) for ms, e in others if ms is not None]
        if not others or mine is None:
            return [_fix(eng, total, f"--attention-backend {backend}", None, basis + ": no figure to compare with",
                         _launch(eng, tp, vers, attention=backend))]
        target_ms, other = min(others)
        assumption = (f"{backend}'s MLA decode runs as fast as {other}'s projected attention; nothing measured {backend} "
                      "on this path")
        basis += f" as fast as {other}'s projected attention ({target_ms:.3f} ms per token, an assumption)"
    gain = None if mine is None else max(0.0, mine - target_ms)
    return [_fix(eng, total, f"attention backend {backend}", gain, basis + f"; now {mine} ms per token",
                 _launch(eng, tp, vers, attention=backend), **({"assumption": assumption} if assumption else {}))]


def _comm_fixes(ctx: dict, comm: dict, cust_given: float | None, ll_given: float | None, message_bytes: int,
                seed_env: bool) -> list[dict]:
    from ..nccl.e2e import SEED_ENV

    eng, total, tp, vers = ctx["eng"], ctx["total"], ctx["tp"], ctx["vers"]
    n, cur = comm.get("collectives"), comm.get("allreduce_us")
    if not n or cur is None:
        return []
    ref = load_allreduce_reference()["default"]
    cur_id = comm.get("allreduce_figure")     # None: a latency the caller gave (its machine unknown)
    # custom PCIe all-reduce: the published kernel against NCCL on its own machine (the same machine as the default)
    cust_us, cust_label = (cust_given, "given") if cust_given is not None else _default_allreduce(message_bytes, "custom")
    pcie_env = {"sglang": ({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, "SGLang PR #34528 (open)"),
                "vllm": ({"VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": "1"}, "vLLM PR #53576")}
    env, pr = pcie_env.get(eng, ({}, "no PCIe custom all-reduce known for this engine"))
    read = _path_row(ctx["path"], eng, vers.get(eng), "PCIe all-reduce options")
    there = read is not None and not str(read.get("choice", "")).startswith("none")
    same = cust_given is not None or (cur_id is not None and _machine(cur_id) == _machine(ref["custom"]))
    label = UNCHECKED if read is None else NOT_IN_VERSION if not there else ("predicted" if same else NOT_COMPUTABLE)
    avail = (f"chapter 02 read {read['choice']!r} in {eng} {vers.get(eng)}'s code (table decode_path)" if read is not None
             else f"chapter 02's decode_path holds no reading of {eng} {vers.get(eng)}'s PCIe all-reduce options")
    rows = [_fix(eng, total, "custom PCIe all-reduce instead of NCCL", n * max(0.0, cur - cust_us) / 1e3,
                 f"{n} collectives x ({cur:.2f} - {cust_us:.2f}) us; {cust_label}; availability: {avail}; the switch is "
                 f"{pr}'s", _launch(eng, tp, vers, env=env), label=label)]
    # the seed's NCCL block: a gain only from two figures of one machine
    nccl_basis = ("; confirm the protocol NCCL picks with NCCL_DEBUG=INFO; nccl-tests on the host: NCCL_PROTO=LL "
                  f"all_reduce_perf -b 8K -e 32K -f 2 -g {tp} -G 20 -d bfloat16")
    cmd = _launch(eng, tp, vers, env=SEED_ENV)
    change = "the seed's NCCL block (" + ", ".join(f"{k}={v}" for k, v in SEED_ENV.items()) + ")"
    if seed_env:
        return rows + [_fix(eng, total, change, None, f"the seed launched {eng} with this block already" + nccl_basis, cmd,
                            label=ALREADY_IN_SEED)]
    if ll_given is not None:
        return rows + [_fix(eng, total, change, n * max(0.0, cur - ll_given) / 1e3,
                            f"{n} collectives x max(0, {cur:.2f} - {ll_given:.2f}) us; given" + nccl_basis, cmd)]
    ll_us, ll_label = _default_allreduce(message_bytes, "nccl_tuned")
    d_us, d_label = _default_allreduce(message_bytes, "nccl_untuned")
    pair = n * max(0.0, d_us - ll_us) / 1e3
    pair_basis = (f"same-machine pair ({_machine(ref['nccl_tuned'])}): default {d_us:.2f} us -> LL {ll_us:.2f} us, "
                  f"{n} collectives x {d_us - ll_us:.2f} us = {pair:.2f} ms per token where the host's NCCL picks the "
                  f"slower protocol as that machine's did; default: {d_label}; tuned: {ll_label}")
    extra = {"pair_default_us": d_us, "pair_tuned_us": ll_us, "pair_ms_per_token": pair, "collectives": n}
    if cur_id is not None and _machine(cur_id) == _machine(ref["nccl_tuned"]):
        return rows + [_fix(eng, total, change, n * max(0.0, cur - ll_us) / 1e3, pair_basis + nccl_basis, cmd, **extra)]
    return rows + [_fix(eng, total, change, None,
                        f"not computable against this projection: figures from different machines (its "
                        f"{cur:.2f} us is {cur_id or 'a given figure'}'s); {pair_basis}" + nccl_basis, cmd,
                        label=NOT_COMPUTABLE, **extra)]


def _graph_fix(rows: list[dict], ctx: dict) -> dict:
    eng, total, tp, vers = ctx["eng"], ctx["total"], ctx["tp"], ctx["vers"]
    idle = _cat(rows, eng, "gpu idle")
    read = _path_row(ctx["path"], eng, vers.get(eng), "CUDA-graph capture sizes")
    if read is not None and "batch 1 captured" in str(read.get("choice", "")):
        return _fix(eng, total, "CUDA-graph capture sizes covering batch 1", None,
                    f"chapter 02 read {eng} {vers.get(eng)} capturing batch 1 by default ({read.get('where')}): the "
                    f"projection's host / gpu idle ({idle} ms per token) is not launch gaps a capture size removes",
                    _launch(eng, tp, vers), label=ALREADY_DEFAULT)
    extra = ["--cuda-graph-bs", "1", "2", "4", "8"] if eng == "sglang" else ["--cudagraph-capture-sizes", "1", "2", "4", "8"]
    return _fix(eng, total, "CUDA-graph capture sizes covering batch 1", idle,
                f"upper bound: the projection's host / gpu idle ({idle} ms per token, kept from the H200 host); "
                "graphs change launch gaps, not kernel time", _launch(eng, tp, vers, extra_args=extra), bound="upper")


def _moe_fix(rows: list[dict], ctx: dict, floor_ms: float | None) -> dict:
    eng, total, tp, vers = ctx["eng"], ctx["total"], ctx["tp"], ctx["vers"]
    mine = _cat(rows, eng, "moe experts")
    if floor_ms is None:
        floor_ms, basis = _expert_roofline_ms(rows, eng, tp)
    else:
        basis = f"given floor {floor_ms:.3f} ms per token"
    extra = ["--moe-runner-backend", "triton"] if eng == "sglang" else ["--moe-backend", "marlin"]
    gain = None if mine is None or floor_ms is None else max(0.0, mine - floor_ms)
    basis = f"projected experts {mine} ms per token against {basis}"
    read = _path_row(ctx["path"], eng, vers.get(eng), "MoE runner")
    label = "predicted"
    if read is not None and "marlin" in (str(read.get("choice")) + str(read.get("logs"))).lower():
        where = f"chapter 02 read {eng} {vers.get(eng)}'s INT4 experts going to Marlin at {read.get('where')}"
        if eng == "vllm":
            label, basis = ALREADY_DEFAULT, f"{where}: {' '.join(extra)} names the kernel it runs already; {basis}"
        elif "mxint4a16" in str(read.get("condition", "")).lower():
            label, basis = NO_EFFECT, (f"{where}; the runner option enters that rule only for MXINT4 checkpoints, so "
                                       f"{' '.join(extra)} leaves these experts on Marlin; {basis}")
    return _fix(eng, total, "MoE expert kernel at the bandwidth roofline", gain,
                basis + "; the alternative kernel named in the command is one to try, read the default's kernel names "
                "in the trace first", _launch(eng, tp, vers, extra_args=extra), label=label,
                **({"headroom_ms": gain} if label != "predicted" else {}))


def _expert_roofline_ms(rows: list[dict], eng: str, tp: int) -> tuple[float | None, str]:
    """The routed experts' INT4 bytes per token / tp / the target's datasheet bandwidth."""
    from ..profiles import load_profile
    from ..cards import load_card

    r = next((x for x in rows if x["engine"] == eng), None)
    if r is None:
        return None, "no projection"
    c = _text(load_card(r["card"]))
    facts = _card_facts(load_card(r["card"]))
    if not facts["expert_bytes_card"]:
        return None, "no quantized expert bytes in the card"
    bytes_ = facts["moe_layers"] * c["num_experts_per_tok"] * 3 * c["hidden_size"] * c["moe_intermediate_size"] * \
        facts["expert_bytes_card"]
    bw = float(load_profile(r["profile"])["memory_bandwidth_tbs"])
    ms = bytes_ / tp / (bw * 1e12) * 1e3
    return ms, f"roofline {ms:.3f} ms ({bytes_ / 1e9:.2f} GB of active INT4 experts / {tp} ranks / {bw} TB/s datasheet)"
