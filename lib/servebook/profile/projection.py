"""The seed case projected from H200 slice profiles: Kimi-K2.5 on 8x RTX PRO 6000 (PCIe, TP=8), per category.

    rows = project(RunStore.at("runs/local-vm/prof"), "sglang")           # table seed_projection
    fixes = ranked_fixes(rows + project(store, "vllm"))                  # table seed_fixes (predicted; servebook.profile.fixes)

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

from .comm import _data_dir, _default_allreduce, _text, allreduce_latency, load_allreduce_reference
from .kernels import CATEGORIES, classify, trace_slug
from .slices import select_slices
from .tables import latest_breakdown

__all__ = ["MEMORY_BOUND", "MEASURED_ON", "TARGET", "load_allreduce_reference", "allreduce_latency", "collectives_per_token",
           "tp_shares", "kernel_floors", "h200_parts", "project", "seed_figures", "project_per_start"]

MEMORY_BOUND = ("attention", "moe experts", "dense gemm")
# the GPUs of the projection (hardware profiles in data/hardware): where the slices were profiled, and the seed's GPU
MEASURED_ON, TARGET = "h200", "rtx-pro-6000"


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
        path = Path(source.path) / "traces" / (trace_slug(p["label"]) + ".excerpt.json")
        if path.is_file():
            excerpts[p["label"]] = json.loads(path.read_text())
    return profiles, source.rows("decode_breakdown"), source.rows("memory_bandwidth"), excerpts


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
    ladder = slices.get("ladder")
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
        if ladder:
            fixed, moe, how = _ladder_part(cs[cat], cd[cat], s, d, ladder)
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
            elif ladder:
                how += " (INT4 experts in both slices)"
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


def _ladder_part(shallow_ms: float, deep_ms: float, s: dict, d: dict, ladder: tuple) -> tuple[float, float, str]:
    """(fixed, one MoE layer, how) from two INT4 slices of a depth ladder: the difference over the MoE layers between
    them, the shallower slice less its own MoE layers."""
    k0, k1 = ladder
    moe = (deep_ms - shallow_ms) / (k1 - k0)
    return (shallow_ms - k0 * moe, moe,
            f"one MoE layer = ({d['label']} - {s['label']}) / {k1 - k0}; fixed = {s['label']} - {k0} x that")


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
        if slices.get("ladder"):   # the kernels of one MoE layer: the difference over the layers between the slices
            k0, k1 = slices["ladder"]
            per = max(0.0, n_d - n_s) / (k1 - k0)
            n_s, n_d = max(0.0, n_s - k0 * per), max(0.0, n_s - k0 * per) + per
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


def _memory_row(cat: str, part: dict, floor: dict, shares: dict, ratio: float, n_moe: int, bw_label: str, tp: int,
                scaled: dict | None = None) -> dict:
    """One memory-bound category on the target: each part x bandwidth ratio x TP share, floored. ``scaled``
    ({"fixed", "moe"}: the share of each part that follows bandwidth, ``cross_gpu.bandwidth_shares``): that share x the
    ratio, the rest kept, instead of the whole part x the ratio."""
    if part["fixed"] is None or part["moe"] is None:
        return {"ms_per_token": None, "source": part["how"], "rule": "memory-bound; unknown input"}
    rf, rm = ((1 + scaled["fixed"] * (ratio - 1), 1 + scaled["moe"] * (ratio - 1)) if scaled else (ratio, ratio))
    fx = part["fixed"] * rf * shares["fixed"][cat]
    mo = part["moe"] * rm * shares["moe"][cat]
    how = (f"x {ratio:.3f} (bandwidth ratio)" if not scaled else
           f"x {rf:.3f} fixed / {rm:.3f} per MoE layer (the shares {scaled['fixed']:.2f} / {scaled['moe']:.2f} of the "
           f"bandwidth ratio {ratio:.3f} measured on another GPU, the rest kept)")
    floored = []
    if floor["fixed_ms"] is not None:
        if floor["fixed_ms"] > fx:
            floored.append("fixed")
        if floor["moe_ms"] > mo:
            floored.append("per MoE layer")
        fx, mo = max(fx, floor["fixed_ms"]), max(mo, floor["moe_ms"])
    return {"ms_per_token": fx + n_moe * mo, "h200_full_ms": part["fixed"] + n_moe * part["moe"],
            "source": f"{part['how']}; {bw_label}; {floor['how']}",
            "rule": (f"memory-bound: {how} x TP share {shares['fixed'][cat]:.3f} fixed / "
                     f"{shares['moe'][cat]:.3f} per MoE layer at tp {tp}, floored" +
                     (f" (floor applies: {', '.join(floored)})" if floored else " (floor below the scaled time)")
                     if floor["fixed_ms"] is not None else
                     f"memory-bound: {how} x TP share {shares['fixed'][cat]:.3f} / "
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
            profile: str = TARGET, measured_on: str = MEASURED_ON, tp: int = 8, allreduce_us: float | None = None,
            allreduce_source: str | None = None, bandwidth: str = "datasheet", floor_us: float | None = None,
            clock_ratio: float = 1.0, seed_tok_s: float | None = None, attention_rule: str = "latency",
            host_rule: str | None = None, attention_ms: float | None = None, attention_source: str | None = None,
            moe_layers: int | None = None, scaled_share: dict | None = None) -> list[dict]:
    """Rows of the table ``seed_projection`` for ``engine``: one per category (engine, backend, category,
    ms_per_token, source, rule) and a total (predicted_ms, predicted_tok_s, seed_tok_s, error_pct = 100 x
    (predicted - seed) / seed tok/s, positive where the projection is faster than the seed's figure).
    ``allreduce_us`` None: the published 8-rank RTX PRO 6000 NCCL series at the decode message (labelled).
    ``moe_layers``: a model of that many MoE layers instead of the card's (a slice carried to another GPU:
    ``servebook.profile.cross_gpu``). ``scaled_share``: ``{category: {"fixed", "moe"}}``, the share of each memory-bound
    part that follows the bandwidth ratio (``cross_gpu.bandwidth_shares``; default: all of it)."""
    from ..cards import load_card

    c = load_card(card)
    facts = _card_facts(c)
    n_moe = facts["moe_layers"] if moe_layers is None else int(moe_layers)
    profiles, breakdown, bw_rows, excerpts = _tables(source)
    slices = select_slices(profiles, engine, backend=backend, mode=mode, card=card)
    bd = latest_breakdown(breakdown, profiles)
    parts = h200_parts(bd, slices, facts["expert_bytes_ratio"])
    floors = kernel_floors(excerpts, slices, floor_us)
    base = {"engine": engine, "backend": backend, "card": card, "profile": profile, "tp": tp, "measured_on": measured_on}
    out = []
    if slices["shallow"] is not None and slices["deep"] is not None:
        # the bandwidth measured on the machine the slices' times are on, where rows name it: their own, or the anchor
        # machine a carried engine's times were scaled to (anchor.on_anchor_machine)
        machine = slices["deep"].get("carried_to_machine") or slices["deep"].get("machine")
        mine = [b for b in bw_rows if b.get("machine") == machine] if machine else bw_rows
        src_bw, dst_bw, bw_label = _bandwidths(profile, measured_on, mine, bandwidth)
        ratio, shares = src_bw / dst_bw, tp_shares(c, tp)
    for cat in CATEGORIES:
        if cat == "communication":
            row = _comm_row(c, tp, facts, allreduce_us, allreduce_source)
        elif cat == "gpu idle":
            row = _idle_row(slices["deep"], profiles)
        elif slices["shallow"] is None or slices["deep"] is None:
            row = {"ms_per_token": None, "source": parts[cat]["how"], "rule": "unknown: the slice profiles are missing"}
        elif cat == "attention" and attention_rule == "latency":
            row = _latency_row(cat, parts[cat], n_moe, clock_ratio)
            row["rule"] = ("latency-bound at this context (the slices decode a few hundred tokens: each layer's MLA kernel "
                           "reads ~0.2 MB of latent cache), kept as measured on the H200 - an assumption; "
                           "attention_rule='bandwidth' scales it like the weights instead. " + row.get("rule", ""))
        elif cat in MEMORY_BOUND:
            row = _memory_row(cat, parts[cat], floors[cat], shares, ratio, n_moe, bw_label, tp,
                              (scaled_share or {}).get(cat))
        else:
            row = _latency_row(cat, parts[cat], n_moe, clock_ratio)
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
            **({"machine": slices["deep"]["machine"]} if (slices.get("deep") or {}).get("machine") else {}),
            **({"ladder": list(slices["ladder"])} if slices.get("ladder") else {}),
            "source": "sum of the categories" + (f"; unknown: {', '.join(unknown)}" if unknown else ""),
            "rule": "predicted; error_pct = 100 x (predicted - seed) / seed tok/s (positive: faster than the seed's figure); "
                    "the seed's figures are compared against, never an input"}
