#!/usr/bin/env python3
"""Verify what pack.sh staged: for each engine (and the book tools), walk the Requires-Dist closure (non-extra
requirements plus requested extras, Python 3.12, linux x86_64) from the root and check every requirement is met by
the host (host-freeze.txt) or by a wheel staged in that engine's site (its own + site-common); list what skip.txt
leaves out on purpose and where the host's version is kept against a pin. No downloads.
  python3 tools/gpu-stage/check.py [W]        (W: pack.sh's scratch dir, default /work/scratch-stage)
"""
import os, sys, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resolve import Walk  # noqa: E402

ROOTS = {
    "sglang": ["sglang==0.5.16", "tokenizers==0.22.2"],
    "vllm": ["vllm==0.26.0", "nvidia-cudnn-frontend>=1.19.1,<1.26"],
    "book": ["transformers[serving]==5.17.0", "papermill>=2.6", "jupytext>=1.16", "nbconvert>=7.16", "nbformat>=5.10",
             "ipykernel>=6.29", "asyncssh>=2.14", "httpx>=0.27", "pandas>=2.1", "seaborn>=0.13", "matplotlib>=3.8",
             "psutil>=5.9", "nvidia-ml-py>=12.535"],
}


def main():
    w = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("W", "/work/scratch-stage"))
    bad = 0
    for eng, roots in ROOTS.items():
        files = [Path(l) for f in (f"list-{eng}.txt", "list-common.txt") for l in (w / f).read_text().split()]
        with tempfile.TemporaryDirectory() as td:
            for f in files:
                os.symlink(f, Path(td) / f.name)
            walk = Walk(eng, td).run(roots)
        kinds = {}
        for name, (kind, ver, note) in sorted(walk.rows.items()):
            kinds.setdefault(kind, []).append((name, ver, note))
        print(f"== {eng}: roots {' '.join(roots)}")
        staged_common = {f.name for f in files[len((w / f'list-{eng}.txt').read_text().split()):]}
        for kind in ("staged", "host", "host*", "skipped", "MISSING", "CONFLICT"):
            items = kinds.get(kind, [])
            if not items:
                continue
            if kind == "staged":
                own = [f"{n}=={v}" for n, v, note in items if note not in staged_common]
                com = [f"{n}=={v}" for n, v, note in items if note in staged_common]
                print(f"  staged in site-{eng} ({len(own)}): {' '.join(own)}")
                print(f"  staged in site-common ({len(com)}): {' '.join(com)}")
            elif kind == "host":
                print(f"  from host ({len(items)}): {' '.join(f'{n}=={v}' for n, v, _ in items)}")
            else:
                for n, v, note in items:
                    print(f"  {kind:8} {n} {v} {note}")
        unused = sorted({f.name for f in files} - {note for _, (k, _, note) in walk.rows.items() if k == "staged"})
        if unused and eng != "book":
            print(f"  (on path but not in this closure: {len(unused)} wheels of site-common)")
        problems = sorted(set(walk.problems))
        print(f"  result: {'OK' if not problems else 'PROBLEMS: ' + ' '.join(problems)}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
