"""Hardware profiles: datasheet facts about GPUs you may not have, each number with its source.

    list_profiles()                  # ['a100', 'b200', 'b300', 'gb200', 'h100', 'h200', 'l40s', 'rtx-5090', 'rtx-pro-6000']
    load_profile("rtx-pro-6000")     # {'capability': '12.0', 'family': 'sm_120 Blackwell ...', 'sources': {...}, ...}
    sm_family(12, 0)                 # {'sm': 'sm_120', 'arch': 'Blackwell', 'names': [...], 'datacenter': False, ...}

Profiles live in ``data/hardware/<name>.json`` (one file per GPU model). Fields: name, gpu_name
(as nvidia-smi prints it), capability "X.Y", family, sm_count, shared_memory_per_block_optin_bytes (the
largest shared memory a kernel may ask per block), memory_gib, memory_bandwidth_tbs,
interconnect, pcie, tdp_w, cuda_version (the first CUDA toolkit that targets that SM), sources
{field: url}, notes. A value that no cited source gave is ``null``, never a guess.
"""

from __future__ import annotations

import json
from functools import lru_cache

from .errors import ParameterError
from .paths import data_dir

__all__ = ["load_profile", "list_profiles", "sm_family", "profiles_dir"]

# (major, minor) -> (sm name, architecture, common names, datacenter part?)
_FAMILIES: dict[tuple[int, int], tuple[str, str, list[str], bool]] = {
    (7, 0): ("sm_70", "Volta", ["V100"], True),
    (7, 5): ("sm_75", "Turing", ["T4", "RTX 20xx"], False),
    (8, 0): ("sm_80", "Ampere", ["A100", "A30"], True),
    (8, 6): ("sm_86", "Ampere (consumer/workstation)", ["RTX 30xx", "RTX A6000", "A10", "A40"], False),
    (8, 7): ("sm_87", "Ampere (Jetson Orin)", ["Jetson AGX Orin"], False),
    (8, 9): ("sm_89", "Ada Lovelace", ["L40S", "L4", "RTX 40xx", "RTX 6000 Ada"], False),
    (9, 0): ("sm_90", "Hopper", ["H100", "H200", "GH200"], True),
    (10, 0): ("sm_100", "Blackwell (datacenter)", ["B200", "GB200"], True),
    (10, 3): ("sm_103", "Blackwell Ultra (datacenter)", ["B300", "GB300"], True),
    (11, 0): ("sm_110", "Blackwell (Jetson Thor)", ["Jetson Thor"], False),
    (12, 0): ("sm_120", "Blackwell (workstation/consumer)", ["RTX PRO 6000 Blackwell", "RTX 50xx"], False),
    (12, 1): ("sm_121", "Blackwell (DGX Spark)", ["DGX Spark (GB10)"], False),
}
_ARCH_BY_MAJOR = {7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell (datacenter)", 11: "Blackwell (Jetson)", 12: "Blackwell (workstation/consumer)"}


def sm_family(major: int, minor: int) -> dict:
    """What an SM version is called: ``{'sm', 'arch', 'names', 'datacenter', 'label', 'known'}``.

    ``label`` is the one-line form used in reports, e.g. ``"sm_120 Blackwell (workstation/consumer): RTX PRO 6000 Blackwell, RTX 50xx"``.
    """
    major, minor = int(major), int(minor)
    sm = f"sm_{major}{minor}"
    if (major, minor) in _FAMILIES:
        sm, arch, names, dc = _FAMILIES[(major, minor)]
        known = True
    else:
        arch, names, dc, known = _ARCH_BY_MAJOR.get(major, "unknown architecture"), [], None, False
    label = f"{sm} {arch}" + (f": {', '.join(names)}" if names else "")
    return {"sm": sm, "arch": arch, "names": list(names), "datacenter": dc, "label": label, "known": known,
            "capability": f"{major}.{minor}"}


def profiles_dir():
    return data_dir() / "hardware"


def list_profiles() -> list[str]:
    """Names of the hardware profiles in data/hardware (file names without .json), sorted."""
    return sorted(p.stem for p in profiles_dir().glob("*.json"))


@lru_cache(maxsize=None)
def _read(name: str) -> str:
    return (profiles_dir() / f"{name}.json").read_text()


def load_profile(name: str) -> dict:
    """The profile ``name`` as a dict (a fresh copy); an unknown name raises ParameterError listing the known ones."""
    key = str(name or "").strip().lower()
    known = list_profiles()
    if key not in known:
        aliases = {k.replace("-", ""): k for k in known}
        key = aliases.get(key.replace("-", "").replace("_", "").replace(" ", ""), key)
    if key not in known:
        raise ParameterError("profile", name, f"known profiles: {', '.join(known) or '(none found in ' + str(profiles_dir()) + ')'}; "
                             "or add data/hardware/<name>.json")
    try:
        data = json.loads(_read(key))
    except json.JSONDecodeError as exc:
        raise ParameterError("profile", name, f"data/hardware/{key}.json is not valid JSON ({exc}); fix the file") from exc
    data.setdefault("profile", key)
    major, minor = (int(x) for x in str(data["capability"]).split("."))
    data["sm"] = sm_family(major, minor)["sm"]
    return data
