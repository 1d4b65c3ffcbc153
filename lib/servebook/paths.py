"""Where things are: the book's data, notebooks and caches.

    data_dir() / "hardware"   # hardware profiles
    data_dir() / "models"     # model cards

servebook runs from a checkout of the book (``pip install -e .``): data and notebooks are
found beside ``lib/``. ``SERVEBOOK_HOME`` points elsewhere when needed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["book_root", "data_dir", "notebooks_dir", "cache_dir", "build_lock", "writable_dir"]


def book_root() -> Path:
    env = os.environ.get("SERVEBOOK_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    return book_root() / "data"


def notebooks_dir() -> Path:
    return book_root() / "notebooks"


def cache_dir() -> Path:
    root = os.environ.get("SERVEBOOK_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "servebook")
    return Path(root)


@contextlib.contextmanager
def build_lock(target: str | os.PathLike):
    """One builder at a time for the cached directory ``target`` (the embedded model, an engine environment):
    a second process, such as a parallel test worker or a second book, waits here and then finds it built.

        with build_lock(target):
            if not built(target):
                build(target)
    """
    import fcntl

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def writable_dir(path: str | os.PathLike, name: str = "out") -> Path:
    """``path`` made (with its parents) and checked writable, before any work that will write there; else a one-line
    ``ParameterError`` naming the path, why, and the fix.

        writable_dir(args.out)      # servebook book / html --out, checked before a chapter runs
    """
    from .errors import ParameterError

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParameterError(name, str(path), f"cannot create it ({exc.strerror or exc}); pass a directory you can write "
                                              f"to, e.g. --{name.replace('_', '-')} build/book") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ParameterError(name, str(path), f"the directory is not writable; pass a directory you can write to, e.g. "
                                              f"--{name.replace('_', '-')} build/book")
    return path
