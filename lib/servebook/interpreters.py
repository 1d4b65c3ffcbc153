"""Which Python runs an engine, and which of its imports stand in for a GPU: the pieces that the engine
adapters (``servebook.engines``) and the engine environments (``servebook.selection.envs``) both need.

    python_from_env("sglang")                      # '/opt/sglang/bin/python' when SERVEBOOK_PYTHON_SGLANG names it
    [m for m in GPU_ONLY if m not in SELECTION_LIBS]   # the import stubs an engine is imported with here
"""

from __future__ import annotations

import os

from .errors import EngineError

__all__ = ["python_from_env", "GPU_ONLY", "SELECTION_LIBS"]

# Import names of GPU-only kernel libraries: never installed here; stubbed for import when the engine needs them.
GPU_ONLY = (
    "flashinfer", "sgl_kernel", "torchvision", "torchaudio", "torchao", "flash_attn", "deep_gemm",
    "cutlass", "quack", "tvm_ffi", "torch_memory_saver", "decord", "decord2", "xformers",
    "vllm_flash_attn", "cupy", "mooncake", "nixl", "deep_ep", "sgl_fa4", "flash_mla", "tilelang", "pplx_kernels",
    "nvidia", "kernels", "flashinfer_cubin",
)
# Not stubbed although GPU-only: cuda-python (``cuda``, ``cuda.bindings``): apache-tvm-ffi, which some engines'
# pure-Python dependencies bring, type-checks against its classes; left out, the importers take their
# no-cuda-python path. torchcodec: transformers 5.x reads torchcodec's package metadata once it imports, and a
# stub has none; left out, transformers takes its no-torchcodec path (audio decoding only, not selection).

# Kernel libraries whose presence the engines test when they choose (stubbed only when assumed present).
SELECTION_LIBS = frozenset({"flashinfer", "flash_attn", "sgl_kernel", "kernels", "deep_gemm"})


def python_from_env(name: str) -> str | None:
    """The interpreter ``SERVEBOOK_PYTHON_<ENGINE>`` names, for hosts where each engine has its own environment
    (``SERVEBOOK_PYTHON_SGLANG=/opt/sglang/bin/python SERVEBOOK_PYTHON_VLLM=/opt/vllm/bin/python servebook book ...``);
    every chapter, and the servers it starts, use it. None when unset."""
    path = os.environ.get(f"SERVEBOOK_PYTHON_{name.upper()}", "").strip()
    if not path:
        return None
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise EngineError(f"SERVEBOOK_PYTHON_{name.upper()}={path} is not an executable interpreter; point it at the python of "
                          f"the environment where {name} is installed, or unset it")
    return path
