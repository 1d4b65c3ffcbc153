"""Evidence that a missed backend supports a GPU: the engine's or kernel library's own capability check.

    support_evidence(row, "FLASHINFER_MLA")   # {'source': 'engine', 'at': 'vllm/.../flashinfer_mla.py:92',
                                              #  'check': 'def supports_compute_capability(...): return capability.major == 10',
                                              #  'answer': False} or None when no such code could be read
    settle_by(row, "flashinfer")              # the measurement on the real host that decides a hypothesis

A fallback is a *root cause* only where such a check answers True for the GPU's capability and the
engine's selection still did not take that backend; without one it is a *hypothesis*, and the book
says what chapter 03 must measure. The checks are the ones the what-if asked in the engine's own
process (vLLM: each backend class's ``supports_compute_capability`` and ``validate_configuration``).
A kernel library that the what-if environment only stubs (flashinfer, sgl-kernel: GPU-only wheels)
has no code to read there, and the record says so instead of guessing.
"""

from __future__ import annotations

__all__ = ["backend_checks", "support_evidence", "settle_by", "missed_outside_priorities"]


def backend_checks(row: dict) -> dict[str, dict]:
    """Backend name -> the engine's own check of it on this GPU, as the what-if recorded it."""
    resolved = row.get("resolved") or {}
    out = {}
    for c in (resolved.get("candidates") or []) + (resolved.get("outside_priorities") or []):
        out[c["backend"]] = c
    return out


def _rel(path_line) -> str | None:
    if not path_line:
        return None
    path, line = path_line
    for top in ("vllm", "sglang", "flashinfer", "transformers"):
        marker = f"/site-packages/{top}/"
        if marker in path:
            return f"{top}/{path.split(marker, 1)[1]}:{line}"
    return f"{path}:{line}"


def support_evidence(row: dict, backend: str) -> dict | None:
    """The engine's own answer to "does ``backend`` support this GPU?", or None where no code answered."""
    c = backend_checks(row).get(str(backend))
    if c is None or c.get("supports_capability") is None or c.get("capability_check_is_default"):
        return None  # no check, or only the base class's "any capability": no claim about this GPU
    return {"source": f"{row.get('engine')} {row.get('version')} backend class {c.get('class')}",
            "at": _rel(c.get("capability_check_at")), "check": c.get("capability_check"),
            "answer": bool(c["supports_capability"]), "valid_for_this_model": bool(c.get("valid")),
            "reasons": c.get("reasons") or []}


def missed_outside_priorities(row: dict) -> list[dict]:
    """vLLM: backends whose own validation accepts this GPU and model, left out of the priority list it used."""
    return [c for c in ((row.get("resolved") or {}).get("outside_priorities") or []) if c.get("valid")]


def settle_by(row: dict, backend: str) -> str:
    """What measurement on the real host decides whether ``backend`` would be faster there (forced as the engine's
    own command takes it, :func:`servebook.engines.forcing`)."""
    from ..engines import forcing

    engine = str(row.get("engine") or "")
    how = forcing(engine, str(backend), version=row.get("version")) if engine else f"--attention-backend {backend}"
    return (f"on the real host (chapter 03): force `{how}`; it must start, report `{backend}` as the backend "
            "used, agree with the default on the decode path (`decode_agreement`: each decode step's token at the default's "
            "prefix; greedy text alone drifts after one near-tie), and its decode rate must beat "
            f"`{row.get('attention_backend')}`'s")
