"""Print the installed packages whose versions differ from the lock (make test-latest): python tools/lockdiff.py LOCK

Reads the lock's pins that apply to this interpreter (their markers evaluated here) and every installed distribution;
torch (the machine's choice) and servebook itself are left out.
"""
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SKIP = {"torch", "servebook", "pip", "uv"}


def locked(path: str) -> dict[str, str]:
    pins = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip().rstrip("\\").strip()
        if not line or line.startswith(("#", "--")):
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate():
            pins[canonicalize_name(req.name)] = str(req.specifier).lstrip("=")
    return pins


def main() -> None:
    pins = locked(sys.argv[1])
    here = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    rows, names = [], []
    for name in sorted((set(pins) | set(here)) - SKIP):
        a, b = pins.get(name), here.get(name)
        if a != b and b is not None:
            rows.append(f"  {name:32} {a or '(not in the lock)':>20} -> {b}")
            names.append(name)
    print(f"== {len(rows)} installed packages differ from the lock ({sys.argv[1]}): locked -> installed ==")
    print("\n".join(rows) if rows else "  none: the newest allowed versions are the locked ones")
    if names:  # how to take exactly these into the lock once the tests below pass with them
        print(f"  to lock these versions once the checks below pass: UPGRADE_PACKAGES=\"{' '.join(names)}\" make lock")


if __name__ == "__main__":
    main()
