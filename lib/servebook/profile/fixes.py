"""The changes the seed case's projection ranks (table ``seed_fixes``): each one the engine's own flag or setting, its
predicted gain from the projection (``servebook.profile.projection``) where it is one, or why it is not one here; and
the alternative backend's projection from its measured H200 profile.

    fixes = ranked_fixes(project(store, "sglang") + project(store, "vllm"))     # predicted gains first, then the rest
    measured_alternative(store, "sglang", "flashinfer")                         # its attention, projected, ms per token
"""

from __future__ import annotations

from .comm import _default_allreduce, _text, load_allreduce_reference
from .projection import _card_facts, _tables, project
from .slices import select_slices

__all__ = ["ranked_fixes", "measured_alternative", "NOT_IN_VERSION", "ALREADY_DEFAULT", "NO_EFFECT", "NOT_COMPUTABLE",
           "ALREADY_IN_SEED", "UNCHECKED"]

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
    out["same_unit"] = _same_unit(tables, sl, engine, backend, against, kw) if against else None
    return out


def _same_unit(tables: dict, sl: dict, engine: str, backend: str, against: str, kw: dict) -> dict | None:
    """Both backends projected whole from the slices of the alternative's own recording unit (one machine), where that
    unit holds a ladder of each (INT4 depth ladders): ``{"machine", "run_id", "against_ms", "backend_ms", "by_category"
    ({category: against's ms - backend's ms}), "from_labels" ({backend: labels})}``; else None. A backend can move
    categories besides attention (its own rope, concatenation and metadata kernels), so the whole step's difference is
    its gain, and no figure of another machine enters it."""
    from .ladders import in_unit, unit_of

    if sl.get("ladder") is None:
        return None
    unit = unit_of(sl["deep"])
    one = {**tables, "profile_runs": in_unit(tables["profile_runs"], unit)}
    own = select_slices(one["profile_runs"], engine, backend=against, mode=kw.get("mode", "graph"),
                        card=kw.get("card", "kimi-k2.5"))
    if own["deep"] is None or own["ladder"] is None:
        return None
    rows = {be: project(one, engine, backend=be, **kw) for be in (against, backend)}
    cat = {be: {r["category"]: (r["predicted_ms"] if r["category"] == "total" else r["ms_per_token"]) for r in rs}
           for be, rs in rows.items()}
    return {"machine": unit[0], "run_id": unit[1], "against_ms": cat[against]["total"], "backend_ms": cat[backend]["total"],
            "by_category": {c: cat[against][c] - cat[backend][c] for c in cat[against]
                            if c != "total" and cat[against][c] is not None and cat[backend].get(c) is not None},
            "from_labels": {be: next(r for r in rs if r["category"] == "total")["from_labels"] for be, rs in rows.items()}}


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
        assumption, same = info.get("assumption"), info.get("same_unit")
        gain = None if mine is None else max(0.0, mine - target_ms)
        words = f"projected {target_ms:.3f} ms per token from its measured profile, now {mine} ms per token; "
        if same:   # the whole step of both backends, from one machine's slices: no figure of another machine in the gain
            gain = max(0.0, same["against_ms"] - same["backend_ms"])
            big = sorted(same["by_category"].items(), key=lambda kv: -abs(kv[1]))[:2]
            words = (f"both backends projected whole from the slices of one recording unit (`{same['run_id']}`, machine "
                     f"`{same['machine']}`): {same['backend_ms']:.3f} against {same['against_ms']:.3f} ms per token, most of "
                     "the difference in " + " and ".join(f"{c} ({d:+.3f} ms)" for c, d in big) + "; its attention alone "
                     f"{words}")
        return [_fix(eng, total, f"attention backend {backend}", gain,
                     f"{basis}: {words}" + info.get("basis", ""), _launch(eng, tp, vers, attention=backend),
                     alternative_backend=backend, alternative_ms=target_ms, alternative_from=info.get("from_labels"),
                     like_for_like_gain_ms=(None if info.get("like_for_like_ms") is None
                                            else max(0.0, info["like_for_like_ms"] - target_ms)),
                     **({"same_unit_ms": {be: same[f"{be}_ms"] for be in ("against", "backend")},
                         "same_unit": f"{same['machine']} | {same['run_id']}"} if same else {}),
                     **({"assumption": assumption} if assumption else {}))]
    if target_ms is None:
        others = [(_cat(rows, e, "attention"), e) for e in {r["engine"] for r in rows} if e != eng]
        others = [(ms, e) for ms, e in others if ms is not None]
        if not others or mine is None:
            return [_fix(eng, total, f"--attention-backend {backend}", None, basis + ": no figure to compare with",
                         _launch(eng, tp, vers, attention=backend))]
        target_ms, other = min(others)
        assumption = (f"{backend}'s MLA decode runs as fast as {other}'s projected attention; "
                      + (info.get("assumption") if info and info.get("assumption") else f"nothing measured {backend} on this path"))
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
    from ..cards import load_card
    from ..nccl import nccl_tests_command
    from ..stated.figures import seed_case

    nccl_basis = ("; confirm the protocol NCCL picks with NCCL_DEBUG=INFO; nccl-tests on the host, with and without "
                  f"NCCL_PROTO=LL: {nccl_tests_command(load_card(seed_case()['model']), tp)}")
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
