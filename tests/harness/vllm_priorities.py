"""Independent of servebook: ask vLLM's CUDA platform for its priority list and each backend's own capability check.

    <vllm env>/bin/python tests/harness/vllm_priorities.py 12.0 mla    # prints one JSON line
    <vllm env>/bin/python tests/harness/vllm_priorities.py 12.0 mla 9.0 gqa    # one line per pair, one import of vLLM

Only vLLM's compiled extensions are replaced by empty modules (they need libcuda); nothing is traced.
"""
import json
import sys
import types

for name in ("vllm._C_stable_libtorch", "vllm._qutlass_C", "vllm._C", "vllm._moe_C_stable_libtorch"):
    sys.modules[name] = types.ModuleType(name)

from vllm.platforms.cuda import _get_backend_priorities  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

for capability, kind in zip(sys.argv[1::2], sys.argv[2::2]):
    major, minor = (int(x) for x in capability.split("."))
    cap = DeviceCapability(major, minor)
    prio = _get_backend_priorities(kind == "mla", cap)
    checks = {}
    for b in prio:
        try:
            checks[b.name] = bool(b.get_class().supports_compute_capability(cap))
        except Exception as exc:  # noqa: BLE001
            checks[b.name] = f"{type(exc).__name__}"
    print(json.dumps({"capability": capability, "kind": kind, "priorities": [b.name for b in prio], "supports_capability": checks}))
