"""Communication per engine for the seed case: collectives per token read from each engine's code, each engine's
all-reduce latency from the NCCL environment it ran with, and the latency the seed's own all-reduce share implies.

    table = collective_table(card, tp=8)                 # one row per collective site and engine (chapters 04, 05, 06)
    n = collectives_per_token(card, tp=8)                # the one count every chapter states (124 for Kimi-K2.5)
    lat = engine_latencies()                             # {engine: {"low_us", "central_us", "high_us", ...}}
    implied_latency(n)                                   # what the seed's 51.5% share would mean per collective

The count is read, not assumed: the sites below were read in each engine's code at the studied and profiled versions
(file:line in the row). The latency is never measured here: it is a range over published figures of 8-rank PCIe hosts
(``data/reference/allreduce-pcie-published.json``), chosen per engine by the NCCL environment the seed launched it with
(``SEED_NCCL_ENGINES``): vLLM with the seed's block (``NCCL_PROTO=LL`` ...), SGLang without it. The two ends are two
kinds of host (one CPU with PCIe switches, where NCCL's default already takes the low-latency protocol; two CPU sockets
without switches, where the published host's NCCL picked SIMPLE by default); the seed's host is not known to be either,
so the central value is the middle of the range, and the range is the assumption.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["SEED_NCCL_ENGINES", "COLLECTIVE_SITES", "collective_table", "collectives_per_token", "engine_latencies",
           "custom_latency", "implied_latency", "matching_latency", "latency_sweep", "pcie_floor"]

_REFERENCE = "allreduce-pcie-published.json"


# -- published figures (servebook.profile.projection uses them too) -----------------------------------------
def _data_dir() -> Path:
    from ..paths import data_dir

    return data_dir()


def load_allreduce_reference(path: str | Path | None = None) -> dict:
    """The published PCIe all-reduce figures (``data/reference/allreduce-pcie-published.json``)."""
    return json.loads(Path(path or _data_dir() / "reference" / _REFERENCE).read_text())


def allreduce_latency(us_by_bytes: dict, message_bytes: float) -> float:
    """One all-reduce's latency at ``message_bytes`` from a recorded series ``{bytes: us}``: linear in log2(bytes)
    between the two nearest recorded sizes; outside the recorded range, the nearest end's value."""
    pts = sorted((float(b), float(u)) for b, u in us_by_bytes.items())
    if not pts:
        raise ValueError("an empty all-reduce series")
    if message_bytes <= pts[0][0]:
        return pts[0][1]
    if message_bytes >= pts[-1][0]:
        return pts[-1][1]
    for (b0, u0), (b1, u1) in zip(pts, pts[1:]):
        if b0 <= message_bytes <= b1:
            f = (math.log2(message_bytes) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
            return u0 + f * (u1 - u0)
    raise AssertionError("unreachable")


def _figure(ref: dict, key: str, field: str = "us_by_bytes") -> dict:
    """The figure ``ref['default'][key]`` (or the figure of that id) with the series ``field``."""
    fid = ref.get("default", {}).get(key, key)
    fig = next(f for f in ref["figures"] if f["id"] == fid)
    return {"id": fid, "series": fig[field], "source": fig["source"], "hardware": fig["hardware"], "ranks": fig["ranks"],
            "path": fig["path"]}


def _default_allreduce(message_bytes: float, key: str = "nccl", field: str = "us_by_bytes") -> tuple[float, str]:
    """The default latency (us) and its label: the reference's ``key`` series interpolated at ``message_bytes``."""
    fig = _figure(load_allreduce_reference(), key, field)
    us = allreduce_latency(fig["series"], message_bytes)
    sizes = ", ".join(f"{int(float(b))} B {u} us" for b, u in sorted(fig["series"].items(), key=lambda kv: float(kv[0])))
    return us, (f"published, {fig['ranks']} ranks, {fig['hardware']}; {fig['path']}; series {sizes}; "
                f"{us:.2f} us interpolated at {int(message_bytes)} B; {fig['source']}")


def _text(card: dict) -> dict:
    cfg = card.get("config", card)
    return cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg



# engines the seed launched with its NCCL block (servebook.nccl.e2e.SEED_ENV, copied from a vLLM systemd unit; SGLang ran
# without it until the investigation copied it over: shared/seeds)
SEED_NCCL_ENGINES = ("vllm",)

# Each decode token's collectives at TP > 1, as read in the engines' code (no DP attention, no sequence parallelism, custom
# all-reduce off at 8 PCIe ranks - chapter 02's decode_path). ``per``: "layer" (every decoder layer) or "token" (once).
COLLECTIVE_SITES = {
    "sglang": {"versions": "0.5.9 (studied; 0.5.16 profiled has the same sites)", "sites": [
        ("attention output", "all-reduce", "layer",
         "sglang/srt/models/deepseek_v2.py:2275 (o_proj reduce_results=False) -> layers/communicator.py:817 "
         "(prepare_mlp: tensor_model_parallel_all_reduce; the flashinfer fusion at :810 needs SM90/SM100, :95)"),
        ("MLP / MoE output", "all-reduce", "layer",
         "sglang/srt/models/deepseek_v2.py:621 and :699 (MoE: tensor_model_parallel_all_reduce); :244 (dense MLP down_proj "
         "reduce_results)"),
        ("vocab-parallel embedding", "all-reduce", "token", "sglang/srt/layers/vocab_parallel_embedding.py:499"),
        ("logits (vocab-parallel LM head)", "all-gather", "token", "sglang/srt/layers/logits_processor.py:835"),
    ]},
    "vllm": {"versions": "0.26.0 (profiled; the seed's vLLM version is not stated)", "sites": [
        ("attention output", "all-reduce", "layer", "vllm/model_executor/models/deepseek_v2.py:1043 (o_proj "
         "RowParallelLinear, reduce_results at :1047)"),
        ("MLP / MoE output", "all-reduce", "layer", "vllm/model_executor/models/deepseek_v2.py:382 (FusedMoE "
         "reduce_results); :255 (dense MLP down_proj reduce_results)"),
        ("vocab-parallel embedding", "all-reduce", "token", "vllm/model_executor/layers/vocab_parallel_embedding.py:491"),
        ("logits (vocab-parallel LM head)", "all-gather", "token",
         "vllm/model_executor/layers/logits_processor.py:93 (use_all_gather: platforms/interface.py:1096 returns True)"),
    ]},
}
_NOT_COUNTED = ("not a GPU collective per token: SGLang's sampler syncs token ids across ranks only with "
                "SYNC_TOKEN_IDS_ACROSS_TP or a grammar (sglang/srt/layers/sampler.py:345); both engines hand the scheduler's "
                "step to the other ranks on the host (SGLang broadcast_pyobj over its CPU group, vLLM's shared-memory "
                "message queue) - host time, not counted here")


def collective_table(card: dict, tp: int = 8) -> list[dict]:
    """Rows ``engine, versions, site, kind, per, count, message_bytes, where`` for ``card`` at ``tp`` ranks, plus one
    ``total`` row per engine; empty at tp 1."""
    if tp <= 1:
        return []
    c = _text(card)
    layers, hidden, vocab = int(c["num_hidden_layers"]), int(c["hidden_size"]), int(c["vocab_size"])
    out = []
    for eng, spec in COLLECTIVE_SITES.items():
        rows = [{"engine": eng, "versions": spec["versions"], "site": site, "kind": kind, "per": per,
                 "count": layers if per == "layer" else 1,
                 "message_bytes": (vocab // tp) * 2 if kind == "all-gather" else hidden * 2, "where": where,
                 "key": f"{eng} | {site}"} for site, kind, per, where in spec["sites"]]
        total = sum(r["count"] for r in rows)
        out += rows + [{"engine": eng, "versions": spec["versions"], "site": "total", "kind": "collectives", "per": "token",
                        "count": total, "allreduces": sum(r["count"] for r in rows if r["kind"] == "all-reduce"),
                        "message_bytes": hidden * 2, "where": _NOT_COUNTED, "key": f"{eng} | total"}]
    return out


def collectives_per_token(card: dict, tp: int = 8) -> int:
    """The one count of collectives per decode token every chapter states: the engines' totals (equal; a ValueError
    names them where they are not, since then no single count holds)."""
    totals = {r["engine"]: r["count"] for r in collective_table(card, tp) if r["site"] == "total"}
    if not totals:
        return 0
    if len(set(totals.values())) != 1:
        raise ValueError(f"the engines' collectives per token differ ({totals}): state them per engine")
    return next(iter(totals.values()))


def _at(fig_id: str, message_bytes: int, field: str = "us_by_bytes") -> tuple[float, dict]:
    fig = _figure(load_allreduce_reference(), fig_id, field)
    return allreduce_latency(fig["series"], message_bytes), fig


# The figures each NCCL environment's range is taken over (ids in data/reference/allreduce-pcie-published.json), with
# the host kind each stands for: the ends of the range are the two kinds of host. The two-socket end is one published
# host, whose NCCL version and platform decide its protocol: its label says so from the figure's own fields (_one_host).
_RANGES = {
    "default": (("rtx6kpro-8gpu-switch-nccl", "one CPU, PCIe switches"),
                ("rtx6kpro-8gpu-dual-turin-default", "two CPU sockets, no switches, NCCL's default")),
    "seed block": (("rtx6kpro-8gpu-switch-nccl", "one CPU, PCIe switches"),
                   ("rtx6kpro-8gpu-dual-turin-tuned", "two CPU sockets, no switches, LL")),
}
_ONE_HOST = ("two CPU sockets",)   # the host kinds that stand on one published host's figure


def _one_host(kind: str, fig_id: str) -> str:
    """``kind`` with the one published host it stands on, from the figure's fields (its system's ``hardware``, where the
    figure says "same system as ID", and its ``path``): e.g. that host's NCCL version and what it picks by default."""
    figs = {f["id"]: f for f in load_allreduce_reference()["figures"]}
    fig, hw = figs[fig_id], figs[fig_id]["hardware"]
    if hw.startswith("same system as "):
        base = hw.split("same system as ", 1)[1].split()[0].rstrip(";,.")
        hw = figs[base]["hardware"]
    return f"{kind}: one published host ({fig_id}: {hw}; {fig['path']})"


def engine_latencies(message_bytes: int = 14336, seed_env_engines: tuple[str, ...] = SEED_NCCL_ENGINES,
                     engines: tuple[str, ...] = ("sglang", "vllm")) -> dict:
    """``{engine: {"env", "low_us", "central_us", "high_us", "low_host", "high_host", "basis"}}``: one all-reduce's latency
    at ``message_bytes`` on 8 PCIe ranks, by the NCCL environment the seed launched the engine with."""
    out = {}
    for eng in engines:
        env = "seed block" if eng in seed_env_engines else "default"
        (lo_id, lo_host), (hi_id, hi_host) = _RANGES[env]
        lo_host, hi_host = (_one_host(k, i) if k.startswith(_ONE_HOST) else k for k, i in ((lo_host, lo_id), (hi_host, hi_id)))
        lo, lo_fig = _at(lo_id, message_bytes)
        hi, hi_fig = _at(hi_id, message_bytes)
        lo, hi = min(lo, hi), max(lo, hi)
        out[eng] = {"engine": eng, "env": env, "low_us": lo, "central_us": (lo + hi) / 2, "high_us": hi,
                    "low_host": lo_host, "high_host": hi_host, "low_figure": lo_id, "high_figure": hi_id,
                    "basis": (f"{'the seed launched it with its NCCL block' if env == 'seed block' else 'NCCL as the engine launches it (no NCCL block in the seed)'}: "
                              f"{lo:.2f} us ({lo_id}: {lo_fig['hardware']}) to {hi:.2f} us ({hi_id}: {hi_fig['hardware']}), "
                              f"at {message_bytes:,} B (nearest recorded size where the series starts above it); central = "
                              "the middle (the seed's host CPU layout is not known)")}
    return out


def custom_latency(message_bytes: int = 14336) -> tuple[float, str]:
    """The published custom PCIe all-reduce kernel at ``message_bytes`` on 8 ranks (the switch host), and its label."""
    us, label = _default_allreduce(message_bytes, "custom")
    return us, label


def pcie_floor(message_bytes: int = 14336) -> dict:
    """What the book holds about small all-reduces on 8 PCIe ranks: the fastest and slowest published NCCL figure at
    ``message_bytes`` (8 ranks), and the 8x RTX 4090 nccl-tests figure (no CUDA graph, 8 B)."""
    ref = load_allreduce_reference()
    figs = [f for f in ref["figures"] if f.get("ranks") == 8 and "nccl" in f["path"].lower() and "custom" not in f["id"]]
    vals = {f["id"]: allreduce_latency(f["us_by_bytes"], message_bytes) for f in figs}
    hi_id = max(vals, key=vals.get)
    lo_id = min(vals, key=vals.get)
    return {"low_us": vals[lo_id], "low_figure": lo_id, "high_us": vals[hi_id], "high_figure": hi_id, "figures": vals}


def implied_latency(collectives: int, share: float, tok_s: float) -> dict:
    """The latency per collective that an all-reduce ``share`` of a decode step at ``tok_s`` would mean, and whether it
    fits the published 8-rank PCIe figures (``pcie_floor``)."""
    ms = share * 1e3 / tok_s
    us = ms * 1e3 / collectives if collectives else None
    floor = pcie_floor()
    return {"share": share, "tok_s": tok_s, "ms_per_token": ms, "collectives": collectives, "implied_us": us,
            "published_high_us": floor["high_us"], "published_high_figure": floor["high_figure"],
            "published_low_us": floor["low_us"], "above_published": us is not None and us > floor["high_us"]}


def matching_latency(other_ms: float, collectives: int, tok_s: float) -> float | None:
    """The all-reduce latency (us) at which a projection of ``other_ms`` ms per token besides communication reaches
    ``tok_s`` (None where the rest alone is already slower)."""
    need = 1e3 / tok_s - other_ms
    return need * 1e3 / collectives if need > 0 and collectives else None


def latency_sweep(other_ms: dict, collectives: int, lats_us=tuple(range(5, 71, 5))) -> list[dict]:
    """``[{"engine", "allreduce_us", "tok_s"}]``: each engine's projected rate with every collective at each latency
    (``other_ms``: ``{engine: ms per token of everything but communication}``)."""
    return [{"engine": e, "allreduce_us": float(us), "tok_s": 1e3 / (rest + collectives * us / 1e3),
             "key": f"{e} | {us}"} for e, rest in other_ms.items() for us in lats_us]


def pcie_rule(card: dict, tp: int, profile: dict) -> dict | None:
    """The one communication rule of the seed case on a PCIe profile, for every chapter that states it (chapter 05's
    seed on paper as chapter 06's verdict): ``{"n": collectives per token, "latencies": engine_latencies()}``; None on
    an NVLink profile (or where the card's collectives cannot be counted), where a measured NVLink grid stands instead."""
    if ((profile.get("interconnect") or {}).get("kind")) != "PCIe":
        return None
    try:
        n = collectives_per_token(card, tp)
    except (KeyError, TypeError, ValueError):
        return None
    return {"n": n, "latencies": engine_latencies()} if n else None

