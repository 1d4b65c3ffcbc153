"""Which machine a profile was measured on, and the rule that keeps subtractions and comparisons on one machine.

    ident = machine_identity()              # {"machine": "gpu-1f0c...", "machine_gpus": 1, "machine_gpu_name": "NVIDIA H200"}
    require_one_machine(rows, "the per-layer difference")     # MachineMismatch where the rows come from two machines
    relative_to_reference(rows, value="busy_ms")               # each row / its own machine's anchor configuration

Per-step kernels differ between machines of one kind (the LM head's GEMV: a median of 516.8 us on one H200, 531.6 us
on another), so a difference between two slices measured on two machines books the machines' difference as a layer.
Every recorded row therefore carries ``machine``: a hash of the sorted set of its GPUs' UUIDs (NVML). Rows of different
machines are never subtracted; they are compared only through their ratio to an anchor configuration (rows marked ``reference``) measured on
each machine (:func:`relative_to_reference`). Rows recorded before identities were kept carry none: they are
subtracted only within their own run (``run_id``), never across runs.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

from ..errors import ServebookError

__all__ = ["unit_of", "MachineMismatch", "machine_identity", "identity_of_uuids", "require_one_machine", "require_one_unit",
           "relative_to_reference", "recorded_day", "recording_unit"]


class MachineMismatch(ServebookError):
    """Rows of different machines (or of different runs without a machine identity) were to be subtracted."""


def identity_of_uuids(uuids: Iterable[str], names: Sequence[str] = ()) -> dict:
    """The identity of a machine from its GPUs' UUIDs: ``machine`` is ``gpu-`` + the first 16 hex digits of the
    sha256 of the sorted UUIDs joined by commas (the same set in any order gives the same identity)."""
    ids = sorted({str(u).strip() for u in uuids if u and str(u).strip()})
    if not ids:
        raise MachineMismatch("no GPU UUID to identify the machine by: NVML and nvidia-smi gave none (is a GPU visible?)")
    digest = hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]
    out = {"machine": f"gpu-{digest}", "machine_gpus": len(ids)}
    if names:
        out["machine_gpu_name"] = sorted(set(names))[0] if len(set(names)) == 1 else ", ".join(sorted(set(names)))
    return out


def machine_identity() -> dict:
    """This host's machine identity (all its GPUs, not only the visible ones: NVML lists every GPU of the host)."""
    from ..probe.gpus import _nvml_gpus, _smi_gpus

    try:
        gpus, _ = _nvml_gpus()
    except Exception:  # noqa: BLE001 - NVML missing: nvidia-smi lists the same UUIDs
        gpus, _ = _smi_gpus([])
    return identity_of_uuids([g.get("uuid") for g in gpus], [g.get("name") or "" for g in gpus])


def _describe(r: dict) -> str:
    return str(r.get("label") or r.get("category") or {k: r.get(k) for k in ("engine", "layers")})


def require_one_machine(rows: Iterable[dict], what: str) -> str | None:
    """Refuse (:class:`MachineMismatch`) to let ``what`` subtract or compare ``rows`` of different machines.

    Rows with a ``machine`` must all have the same one; rows without (recorded before identities were kept) are
    accepted only together with rows that also lack one and, where they name their run (``run_id``), of one run.
    Returns the machine (``None`` for rows without identity)."""
    rows = [r for r in rows if r is not None]
    machines = {r.get("machine") for r in rows}
    known = machines - {None}
    if len(known) > 1:
        by = {m: [_describe(r) for r in rows if r.get("machine") == m][:2] for m in sorted(known)}
        raise MachineMismatch(f"{what}: the rows come from {len(known)} machines ({by}); a difference between machines "
                              "books their per-step kernels as the quantity: compare them through each machine's anchor "
                              "configuration (relative_to_reference), or measure both on one machine")
    if known and None in machines:
        raise MachineMismatch(f"{what}: rows of machine {next(iter(known))} mixed with rows that carry no machine identity "
                              f"({[_describe(r) for r in rows if r.get('machine') is None][:2]}): they may come from another "
                              "machine; measure them again in the same unit")
    if not known:
        runs = {r.get("run_id") for r in rows} - {None}
        if len(runs) > 1:
            raise MachineMismatch(f"{what}: rows without machine identity from {len(runs)} runs ({sorted(runs)}): rows "
                                  "recorded before identities were kept are subtracted only within their own run")
        return None
    return next(iter(known))


def require_one_unit(rows: Iterable[dict], what: str) -> str | None:
    """:func:`require_one_machine`, and for rows without machine identity one recording unit too (:func:`recording_unit`:
    the UTC day they were taken; the older runs had one lent machine per day): what two slices must share to be
    subtracted. Rows without ``taken_at`` name no day and are not refused for it. Returns the machine (None without)."""
    rows = [r for r in rows if r is not None]
    machine = require_one_machine(rows, what)
    days = {recording_unit(r) for r in rows} - {None}
    if machine is None and len(days) > 1:
        by = {d: [_describe(r) for r in rows if recording_unit(r) == d][:2] for d in sorted(days)}
        raise MachineMismatch(f"{what}: rows without machine identity taken on {len(days)} days ({by}), possibly on as "
                              "many lent machines, whose per-step kernels differ: profile both in one unit (one machine)")
    return machine


def relative_to_reference(rows: Iterable[dict], *, value: str, is_reference=lambda r: bool(r.get("reference"))) -> list[dict]:
    """Each row's ``value`` as a ratio to the mean ``value`` of its own machine's reference rows (``is_reference``):
    the one way rows of different machines are compared. A row whose machine has no reference row is refused."""
    rows = list(rows)
    refs: dict = {}
    for r in rows:
        if is_reference(r) and r.get(value) is not None:
            if r.get("machine") is None:
                raise MachineMismatch(f"anchor row {_describe(r)} carries no machine identity")
            refs.setdefault(r["machine"], []).append(float(r[value]))
    out = []
    for r in rows:
        m = r.get("machine")
        if m not in refs:
            raise MachineMismatch(f"{_describe(r)}: no anchor configuration measured on its machine ({m}); a unit "
                                  "without its anchor row cannot be compared with other units")
        ref = sum(refs[m]) / len(refs[m])
        out.append({**r, f"{value}_ratio": float(r[value]) / ref if r.get(value) is not None else None,
                    "reference_value": ref})
    return out


def recorded_day(row: dict | None) -> str | None:
    """The UTC day a profile was taken (``taken_at``, epoch seconds): the recording session it belongs to. The lent
    machines of one profile run change between days, so two slices are subtracted only where their days agree."""
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


def unit_of(row: dict | None) -> tuple | None:
    """A row's unit: (its recording unit: machine, else UTC day; its ``run_id``). Two runs on one machine (a second loan
    of the same GPUs) are two units: every reader that subtracts, pairs or ranks profiles keys on this."""
    return None if row is None else (recording_unit(row), row.get("run_id"))
