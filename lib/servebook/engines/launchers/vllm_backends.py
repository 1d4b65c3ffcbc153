"""Runs inside vLLM's interpreter: the members of vLLM's own attention-backend enum.

    python vllm_backends.py     # prints one line: a JSON list, e.g. ["FLASHINFER", "FLASH_ATTN", ...], or null

The enum moved between releases: ``AttentionBackendEnum`` in ``vllm.v1.attention.backends.registry`` (0.12 on) or
``vllm.attention.backends.registry`` (0.11), ``_Backend`` in that registry or in ``vllm.platforms.interface`` (older).
``null`` when none of them imports (the caller names the interpreter and the fix).
"""

import importlib
import json
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("launchers"):
    sys.path.pop(0)

_PLACES = (("vllm.v1.attention.backends.registry", "AttentionBackendEnum"),
           ("vllm.attention.backends.registry", "AttentionBackendEnum"),
           ("vllm.attention.backends.registry", "_Backend"),
           ("vllm.platforms.interface", "_Backend"))


def backend_enum():
    for module, attr in _PLACES:
        try:
            # by name: the enum's home moved between vLLM releases (_PLACES), so each is tried in turn; vLLM's modules only
            return getattr(importlib.import_module(module), attr)
        except Exception:  # an old layout, or a module whose imports this environment lacks: try the next place
            continue
    return None


if __name__ == "__main__":
    enum = backend_enum()
    print(json.dumps(sorted(m.name for m in enum) if enum is not None else None))
