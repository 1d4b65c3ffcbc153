"""What a run ran with: the exact code (git), the software versions and the host, for its manifest.

    info, diff = git_provenance()          # {"commit": "3d89...", "dirty": False}, b""
    record_code(store)                     # the same, a dirty tree's diff saved in the run (code-<sha>.diff)
    describe_revision(manifest["git_revision"])   # "commit 3d89... (clean tree)", also for older manifests
    software_versions(); host_fingerprint()
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from . import __version__
from .paths import book_root
from .results import RunStore

__all__ = ["git_provenance", "record_code", "describe_revision", "software_versions", "host_fingerprint"]

# Untracked files under these folders of the book are code the run ran (a new module, a new chapter): they count as
# changes, and go into the saved diff as new files.
_CODE_DIRS = ("lib", "notebooks")
# What runs produce, never what they run: the book's recorded runs and their renders. Left out of the diff, so that
# re-rendering one recorded run does not make the next one look like it ran changed code.
_OUTPUT_DIRS = ("data/runs", "rendered")


# A diff git apply takes, whatever the user's git config says (external diff tools, colour, prefixes, textconv).
_PLAIN_DIFF = ("--binary", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60)


def git_provenance(root: str | os.PathLike | None = None, exclude: str | os.PathLike | None = None) -> tuple[dict | None, bytes]:
    """The exact code of the book at ``root`` (default: this checkout), and the diff that makes it from the commit.

        info, diff = git_provenance(exclude=store.path)
        info   # {"commit": "3d89...", "dirty": False}   (diff == b"")
        info   # {"commit": "3d89...", "dirty": True, "diff_sha256": "9f1c...", "untracked": ["lib/servebook/new.py"]}

    The diff is ``git diff HEAD --binary`` (staged and unstaged changes of tracked files) followed by every untracked
    file under lib/ and notebooks/ as a new file: ``git apply`` on a checkout of the commit rebuilds the tree that
    ran, and ``diff_sha256`` is the SHA-256 of exactly those bytes. Recorded runs and renders (data/runs/, rendered/)
    are outputs, never in it; ``exclude``: another folder left out (the run's own directory, when runs are kept inside
    the checkout). ``(None, b"")`` where ``root`` is not a git checkout.
    """
    root = Path(root) if root is not None else book_root()
    try:
        head = _git(root, "rev-parse", "--verify", "HEAD")
        if head.returncode != 0:
            return None, b""
        top = Path(_git(root, "rev-parse", "--show-toplevel").stdout.decode().strip())
        skip = []
        for folder in [*(Path(root) / d for d in _OUTPUT_DIRS), *([Path(exclude)] if exclude is not None else [])]:
            try:
                skip.append(f":(exclude){folder.resolve().relative_to(top.resolve()).as_posix()}")
            except ValueError:  # outside the checkout: nothing of it is in the diff anyway
                pass
        tracked = _git(top, "diff", *_PLAIN_DIFF, "HEAD", "--", ".", *skip)
        listed = _git(root, "ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--", *_CODE_DIRS)
        if tracked.returncode != 0 or listed.returncode != 0:
            return None, b""
        untracked = sorted(p for p in listed.stdout.decode().split("\0") if p)
        # git diff --no-index exits 1 when the files differ, which a new file always does
        diff = tracked.stdout + b"".join(_git(top, "diff", *_PLAIN_DIFF, "--no-index", "--", os.devnull, p).stdout for p in untracked)
    except (OSError, subprocess.SubprocessError):
        return None, b""
    info: dict[str, Any] = {"commit": head.stdout.decode().strip(), "dirty": bool(diff)}
    if diff:
        info["diff_sha256"] = hashlib.sha256(diff).hexdigest()
        if untracked:
            info["untracked"] = untracked
    return info, diff


def record_code(store: RunStore) -> dict | None:
    """``git_provenance()`` for the run's manifest; a dirty tree's diff is saved in the run as ``code-<sha>.diff``
    (named by its hash, so a resumption with other changes keeps both)."""
    info, diff = git_provenance(exclude=store.path)
    if info and diff:
        text = diff.decode("utf-8", errors="replace")
        name = f"code-{info['diff_sha256'][:12]}.diff"
        store.write_text(name, text)
        info["diff"] = name
        if (store.path / name).read_bytes() != diff:  # secrets masked, or bytes that are not UTF-8
            info["diff_saved_as_is"] = False
    return info


def describe_revision(value: Any) -> str:
    """The code a run ran, in words, from its manifest's ``git_revision`` (this form, or older runs' string or null).

        describe_revision({"commit": "3d89...", "dirty": False})    # "commit 3d89... (clean tree)"
        describe_revision("3d89...-dirty")                          # "3d89...-dirty (recorded without its diff)"
    """
    if isinstance(value, dict) and value.get("commit"):
        if not value.get("dirty"):
            return f"commit {value['commit']} (clean tree)"
        saved = f", saved as {value['diff']}" if value.get("diff") else ""
        return f"commit {value['commit']} + uncommitted changes (diff sha256 {str(value.get('diff_sha256'))[:16]}{saved})"
    if isinstance(value, str) and value:
        return f"{value} (recorded without its diff)" if value.endswith("-dirty") else f"commit {value}"
    return "git revision not recorded"


def _nvidia_smi_facts() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"driver": None, "gpus": []}
    try:
        res = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"driver": None, "gpus": [], "error": str(exc)}
    rows = [[c.strip() for c in line.split(",")] for line in res.stdout.strip().splitlines() if line.strip()]
    return {"driver": rows[0][1] if rows else None, "gpus": [r[0] for r in rows]}


def software_versions() -> dict:
    """Versions of servebook, the engines, torch, CUDA, NCCL and the driver, as this interpreter sees them."""
    import importlib.metadata as md

    out: dict[str, Any] = {"servebook": __version__, "python": platform.python_version()}
    for dist in ("torch", "transformers", "sglang", "vllm", "flashinfer-python", "sgl-kernel", "flash-attn", "triton", "papermill"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
        nccl = None
        if torch.cuda.is_available():
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:  # noqa: BLE001
                nccl = None
        out["nccl"] = nccl
    except ImportError:
        out["torch_cuda"] = out["nccl"] = None
    out["driver"] = _nvidia_smi_facts().get("driver")
    return out


def host_fingerprint() -> dict:
    """What identifies this host's hardware for comparing runs."""
    import psutil

    smi = _nvidia_smi_facts()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": smi.get("gpus", []),
    }
