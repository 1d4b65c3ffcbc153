"""What an engine environment installs, read from the engine's own ``Requires-Dist``.

    keep, dropped = install_plan(requires)       # the engine's pins, less the GPU-only and heavy requirements

Nothing is installed here (``envs.add_engine`` builds the environment). The CUDA an engine's pins bring
(``engine_cuda``) is read on the shared ground, ``engines/envs.py``, where an environment is found.
"""

from __future__ import annotations

import re

from ..engines.envs import _norm

__all__ = ["install_plan"]

# Import name -> distribution name, where they differ.
_DIST_OF = {"yaml": "pyyaml", "zmq": "pyzmq", "PIL": "pillow", "sklearn": "scikit-learn", "google": "protobuf",
            "cv2": "opencv-python-headless", "pynvml": "nvidia-ml-py", "jwt": "pyjwt", "dateutil": "python-dateutil",
            "sentencepiece": "sentencepiece", "multipart": "python-multipart", "msgspec": "msgspec", "cpuinfo": "py-cpuinfo",
            "blake3": "blake3", "cbor2": "cbor2", "attr": "attrs", "dotenv": "python-dotenv", "pydantic_core": "pydantic-core",
            "typing_extensions": "typing-extensions", "importlib_metadata": "importlib-metadata"}

# Requirements an engine environment never installs, decided by reading the engines' own
# Requires-Dist (sglang 0.5.4/0.5.9/0.5.23, vllm 0.1x) and what each wheel carries:
_DROP_EXACT = {
    # torch family: torch is the local CPU wheel (_TORCH_PIN); the engine's pin (torch==2.9.1, 2.14.1 ...)
    # would download a CUDA build of several GB. torchvision/torchaudio/torchcodec are built against
    # one exact torch (a mismatch fails to load); torchao is quantization kernels, imported lazily.
    "torch", "torchvision", "torchaudio", "torchcodec", "torchao",
    # LD_PRELOAD allocator hooks compiled against CUDA (the sdist build needs nvcc)
    "torch-memory-saver",
    # GPU kernel libraries: CUDA binaries / cubins, import needs libcuda. Whether the engine *sees* them is
    # an assumption of the what-if (DEFAULT_KERNEL_LIBS), stood in for by import stubs, never installed.
    "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sgl-kernel", "sglang-kernel", "flash-attn",
    "flash-attn-4", "sgl-flash-mla", "sgl-deep-gemm", "sgl-deep-ep", "deep-gemm", "deep-ep", "humming-kernels",
    "quack-kernels", "tilelang", "xformers", "vllm-flash-attn", "flash-mla", "mooncake-transfer-engine", "nixl",
    "triton-kernels", "pplx-kernels", "cutlass", "tokenspeed-mla",
    # NVIDIA video decoder (needs the driver's NVDEC); multimodal input only
    "pynvvideocodec",
    # CUDA toolkit bindings and DSLs (hundreds of MB, need a driver at import)
    "cuda-python", "cuda-bindings", "nvshmem4py-cu12", "nvshmem4py-cu13", "apache-tvm-ffi",
    # video / vision decoding (native codecs; timm pulls torchvision): multimodal preprocessing only
    "decord", "decord2", "timm", "av", "opencv-python", "opencv-python-headless",
    # another engine: vLLM is not SGLang's dependency for choosing a backend
    "vllm",
}
_DROP_PREFIX = ("nvidia-", "cuda-", "cupy", "flashinfer")
_KEEP = {"nvidia-ml-py"}  # pure-Python NVML bindings; the what-if fakes NVML through them


def _dropped(name: str) -> bool:
    n = _norm(name)
    return n not in _KEEP and (n in _DROP_EXACT or n.startswith(_DROP_PREFIX))


# Older SGLang wheels (0.5.2-0.5.3 era) declare almost nothing unconditionally: the server's
# runtime lives in the ``srt`` / ``runtime_common`` extras (``pip install "sglang[srt]"``).
_RUNTIME_EXTRAS = {"srt", "runtime-common", "runtime_common"}
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def install_plan(requires: list[str]) -> tuple[list[str], list[str]]:
    """(install, dropped): an engine's Requires-Dist split into what an environment installs (with the
    engine's own pins, markers kept for the installer to evaluate) and the GPU-only / heavy requirements it drops.

    When the unconditional requirements do not include the server's web stack (no ``fastapi``), the
    runtime extras (``srt``, ``runtime_common``) are taken too, their ``extra`` marker removed."""
    base = [r for r in requires if not _EXTRA.search(r)]
    names = {_norm(re.split(r"[<>=!~; \[(]", r.strip(), maxsplit=1)[0]) for r in base}
    chosen = list(base)
    if "fastapi" not in names:
        for r in requires:
            m = _EXTRA.search(r)
            if m and _norm(m.group(1)) in {_norm(e) for e in _RUNTIME_EXTRAS}:
                req, _, marker = r.partition(";")
                rest = re.sub(r"^\s*and\s+|\s+and\s*$", "", _EXTRA.sub("", marker).strip()).strip()
                chosen.append(req.strip() + (f"; {rest}" if rest else ""))
    keep, drop = [], []
    for r in chosen:
        name = re.split(r"[<>=!~; \[(]", r.strip(), maxsplit=1)[0]
        if _norm(name) in ("sglang", "vllm"):  # the extras refer to the engine itself ("sglang[runtime_common]")
            continue
        target = drop if _dropped(name) else keep
        if r.strip() not in target:
            target.append(r.strip())
    return keep, drop
