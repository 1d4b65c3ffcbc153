"""The quantities of no chapter: the seed case's own figures (``data/reference/seed-case.json``), a model card's
bandwidth roofline and a hardware profile's compute capability (``data/models``, ``data/hardware``). Reference figures:
no run's table gives them, so the mutation of a run's tables leaves them alone."""

from __future__ import annotations

import re

from ..profiles import load_profile
from .figures import card_roofline, seed_case
from .registry import Quantity, register
from .text import MISSING


def _roofline_lookup(of: str):
    m = re.fullmatch(r"(.+) on (\d+)x (.+)", of or "")
    if not m:
        return MISSING
    try:
        return card_roofline(m.group(1), int(m.group(2)), m.group(3))["tok_s"]
    except Exception:  # noqa: BLE001 - an unknown card or profile: the page states something no data file gives
        return MISSING


def _profile_capability(of: str):
    try:
        return load_profile(of).get("capability") or MISSING
    except Exception:  # noqa: BLE001 - an unknown profile: the page states something no data file gives
        return MISSING


register(
    Quantity("seed_loss", "share of vLLM's single-stream rate SGLang did not reach in the seed case",
             lambda store: {None: seed_case()["loss"]}, ("01", "02")),
    Quantity("seed_vllm_faster", "how much faster vLLM's single-stream rate was than SGLang's in the seed case",
             lambda store: {None: seed_case()["vllm_faster"]}),
    Quantity("seed_tok_s", "single-stream tok/s the seed case measured, by engine", lambda store: dict(seed_case()["single_stream_tok_s"])),
    Quantity("seed_allreduce_share", "all-reduce's share of SGLang's decode time in the seed case's profile",
             lambda store: {None: seed_case()["allreduce_share_of_sglang_decode"]}),
    Quantity("seed_tp", "seed case: tensor-parallel size, one GPU per rank (data/reference/seed-case.json)",
             lambda store: {None: seed_case()["tp"]}),
    Quantity("card_roofline_tok_s", "bandwidth-only roofline of a model card on N GPUs of a profile (the seed case's, or "
             "the what-if's), from data/models and data/hardware", lambda store: {}, lookup=_roofline_lookup),
    Quantity("profile_capability", "compute capability a hardware profile records (data/hardware/<profile>.json)",
             lambda store: {}, lookup=_profile_capability),
)
