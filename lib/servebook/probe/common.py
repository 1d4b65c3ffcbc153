"""What every part of the probe shares: the report's schema, names of engines and packages, running a command."""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import subprocess


SCHEMA = "servebook.probe/1"
ENGINE_NAMES = ("transformers", "sglang", "vllm")
PACKAGES = ("torch", "sglang", "vllm", "transformers", "flashinfer-python", "flashinfer", "sgl-kernel", "flash-attn",
            "flash-attn-3", "triton", "xformers", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-ml-py", "deep-gemm")
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "SGLANG_", "VLLM_", "HF_", "NVSHMEM_")
_MARK = "@@SERVEBOOK@@"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
    """Run a command; (rc, stdout, stderr); rc 127 when it does not exist, 124 on timeout."""
    if not shutil.which(cmd[0]) and not os.path.exists(cmd[0]):
        return 127, "", f"{cmd[0]}: not found"
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(cmd)} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return 126, "", f"{cmd[0]}: {exc}"
    return res.returncode, res.stdout, res.stderr
