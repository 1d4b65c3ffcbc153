"""The figures and definitions the statements and the registry share: reference files, the seed case, a selection's
subject, the lines that write a backend, the all-reduce setting a grid picks, a model card's roofline.

    reference("seed-case")                          # data/reference/seed-case.json
    seed_case()["loss"]                             # 1 - sglang / vllm, the seed's single-stream gap
    site_count(store, "sglang", "0.5.9")            # lines of that version's code that write the backend
    card_roofline("kimi-k2.5", 8, "rtx-pro-6000")["tok_s"]   # bandwidth-only single-stream roofline
"""

from __future__ import annotations

import json

from ..paths import data_dir

__all__ = ["REFERENCE_NCCL_RUN", "reference", "seed_case", "site_count", "selection_of", "card_roofline", "chosen_setting",
           "chosen_us"]

REFERENCE_NCCL_RUN = "h200x2-nccl"  # chapter 04's reference grid, data/runs/h200x2-nccl


_READ: dict[str, tuple[tuple[int, int], str]] = {}  # path -> ((mtime_ns, size), text) of each reference file read


def reference(name: str) -> dict:
    """A reference figure file, ``data/reference/<name>.json`` (figures the book quotes and never measured): read once
    while the file stays as it is (its modification time and size), parsed afresh for each caller (who may change it)."""
    path = data_dir() / "reference" / f"{name}.json"
    st = path.stat()
    held = _READ.get(str(path))
    if held is None or held[0] != (st.st_mtime_ns, st.st_size):
        _READ[str(path)] = held = ((st.st_mtime_ns, st.st_size), path.read_text())
    return json.loads(held[1])


def seed_case() -> dict:
    """The seed case's own figures (``data/reference/seed-case.json``) and the loss the book quotes from them:
    ``loss`` is the share of vLLM's single-stream rate SGLang did not reach (1 - sglang / vllm)."""
    ref = reference("seed-case")
    tok = ref["single_stream_tok_s"]
    return {**ref, "loss": 1 - tok["sglang"] / tok["vllm"], "vllm_faster": tok["vllm"] / tok["sglang"] - 1,
            "file": "data/reference/seed-case.json"}


def site_count(store, engine: str, version: str) -> int:
    """Lines of an engine version's code that write its attention backend (chapter 02's static reading): distinct
    ``where`` (file:line) in the table ``selection_sites``. A line that writes two targets counts once; the definition
    chapter 06 uses too."""
    return len({r.get("where") for r in store.rows("selection_sites") if r.get("engine") == engine and r.get("version") == version})


def selection_of(row: dict) -> str:
    """The subject of one what-if answer (a row of ``selection``, or chapter 02's answer): engine, version, model, GPU."""
    return f"{row.get('engine')} {row.get('version')}, {row.get('model')} on {row.get('gpu')}"


def card_roofline(model: str, tp: int, profile: str) -> dict:
    """The bandwidth-only single-stream roofline of a model card on ``tp`` GPUs of a hardware profile, predicted from
    the data files (``data/models``, ``data/hardware``), the bytes counted layer by layer: what chapter 05 states for
    the seed case and the what-if book for its profile."""
    from .. import roofline
    from ..profiles import load_profile

    card = roofline.load_model_card(model)
    arch = roofline.config_bytes_per_token(card)
    bw = load_profile(profile)["memory_bandwidth_tbs"]
    r = roofline.decode_roofline(arch["bytes_per_token"], bw, tp=tp, allreduce_us=0.0,
                                 allreduces_per_token=roofline.allreduces_per_token(card)) if tp > 1 else \
        roofline.decode_roofline(arch["bytes_per_token"], bw)
    return {"tok_s": r["tok_s_bandwidth"], "bytes_per_token": arch["bytes_per_token"], "bandwidth_tbs": bw, "tp": tp,
            "subject": f"{model} on {tp}x {profile}"}


def chosen_setting(n: dict):
    """The NCCL setting a run's all-reduce grid picks (a ``servebook.findings.nccl`` result); None off NCCL."""
    if n.get("backend") != "nccl":
        return None
    return n.get("setting") or "default"


def chosen_us(n: dict):
    """The all-reduce latency (us) at the batch-1 message under the setting the grid picks."""
    if not n:
        return None
    s = chosen_setting(n)
    return n.get("best_us") if s not in (None, "default") else n.get("default_us")
