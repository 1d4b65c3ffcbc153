#!/usr/bin/env python3
"""Requires-Dist closure of an engine for the offline GPU host (Python 3.12, linux x86_64).

  resolve.py --engine NAME --whl DIR [--download] [--prefer DIR ...] [--out FILE] ROOT_REQ ...

Walks the non-extra requirements (plus requested extras) from the root requirements. A requirement is
  host     when the host's freeze (host-freeze.txt) has a version that satisfies it,
  skip     when skip.txt lists it for this engine (kind skip), or keeps the host's version (kind host),
  staged   otherwise: a wheel in --whl (or in a --prefer dir, then copied into --whl) that satisfies all
           specifiers seen so far; with --download a missing one is fetched with `pip download --no-deps`.
Writes the staged wheel file names to --out and prints a table. Exit 1 when something is unsatisfied.
check.py runs the same walk without --download (a verification of what pack.sh staged).
"""
import argparse, re, shutil, subprocess, sys, zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name as canon, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "platform_release": "", "platform_version": "", "implementation_version": "3.12.3"}
PLAT = ["linux_x86_64", "manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"] + \
       [f"manylinux_2_{n}_x86_64" for n in range(5, 40)]


def read_freeze(path):
    host = {}
    for line in open(path):
        if "==" in line:
            n, v = line.strip().split("==", 1)
            host[canon(n)] = Version(v)
    return host


def read_skip(path, engine):
    skip, hostkeep = {}, {}
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        eng, name, kind, reason = line.split(None, 3)
        if eng in (engine, "*"):
            (skip if kind == "skip" else hostkeep)[canon(name)] = reason.strip()
    return skip, hostkeep


def wheel_meta(path):
    with zipfile.ZipFile(path) as z:
        meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        return Parser().parsestr(z.read(meta[0]).decode("utf-8", "replace"))


class Walk:
    def __init__(self, engine, whl, prefer=(), download=False):
        self.host = read_freeze(HERE / "host-freeze.txt")
        self.skip, self.hostkeep = read_skip(HERE / "skip.txt", engine)
        self.whl, self.prefer, self.download = Path(whl), [Path(p) for p in prefer], download
        self.specs, self.chosen, self.extras_done = {}, {}, {}
        self.rows, self.problems = {}, []

    def wheels(self, d, name):
        out = []
        for f in sorted(d.glob("*.whl")):
            n, v, _, _ = parse_wheel_filename(f.name)
            if canon(n) == name:
                out.append((v, f))
        return sorted(out, reverse=True)

    def find(self, name, spec):
        for d in [self.whl] + self.prefer:
            for v, f in self.wheels(d, name):
                if spec.contains(v, prereleases=True):
                    if d != self.whl:
                        shutil.copy2(f, self.whl / f.name)
                        f = self.whl / f.name
                    return v, f
        if not self.download:
            return None
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", "--disable-pip-version-check",
                            *sum((["--platform", p] for p in PLAT), []), "-d", str(self.whl), f"{name}{spec}"],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"  pip download {name}{spec} failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
        for v, f in self.wheels(self.whl, name):
            if spec.contains(v, prereleases=True):
                return v, f
        return None

    def add(self, req, parent):
        name = canon(req.name)
        if req.marker is not None and not req.marker.evaluate(dict(ENV, extra="")):
            return []
        if name in self.skip:
            self.rows.setdefault(name, ("skipped", "", self.skip[name]))
            return []
        self.specs[name] = self.specs.get(name, SpecifierSet()) & req.specifier
        spec = self.specs[name]
        hv = self.host.get(name)
        if name not in self.chosen and hv is not None and spec.contains(hv, prereleases=True):
            self.rows[name] = ("host", str(hv), "")
            return []
        if name not in self.chosen and hv is not None and name in self.hostkeep:
            self.rows[name] = ("host*", str(hv), f"wants {spec}; {self.hostkeep[name]}")
            return []
        new_extras = set(req.extras) - self.extras_done.get(name, set())
        cur = self.chosen.get(name)
        if cur is not None and spec.contains(cur[0], prereleases=True) and not new_extras:
            return []
        if cur is None or not spec.contains(cur[0], prereleases=True):
            got = self.find(name, spec)
            if got is None:
                self.rows[name] = ("MISSING", "", f"{spec} (from {parent})")
                self.problems.append(name)
                return []
            self.chosen[name] = got
            self.extras_done[name] = set()
            new_extras = set(req.extras)
        self.extras_done[name] |= set(req.extras)
        v, f = self.chosen[name]
        self.rows[name] = ("staged", str(v), f.name)
        meta = wheel_meta(f)
        out = []
        for line in meta.get_all("Requires-Dist") or []:
            r = Requirement(line)
            if r.marker is None:
                out.append((r, name))
                continue
            for ex in [""] + sorted(self.extras_done[name]):
                if r.marker.evaluate(dict(ENV, extra=ex)):
                    r2 = Requirement(line)
                    r2.marker = None
                    out.append((r2, name))
                    break
        return out

    def run(self, roots):
        todo = [(Requirement(r), "root") for r in roots]
        while todo:
            nxt = []
            for req, parent in todo:
                nxt += self.add(req, parent)
            todo = nxt
        # a later, tighter specifier may have replaced an earlier choice: re-check everything staged
        for name, (v, f) in self.chosen.items():
            if not self.specs[name].contains(v, prereleases=True):
                self.problems.append(name)
                self.rows[name] = ("CONFLICT", str(v), f"wants {self.specs[name]}")
        return self


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--whl", required=True)
    ap.add_argument("--prefer", action="append", default=[])
    ap.add_argument("--download", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    Path(a.whl).mkdir(parents=True, exist_ok=True)
    w = Walk(a.engine, a.whl, a.prefer, a.download).run(a.roots)
    for name in sorted(w.rows):
        kind, ver, note = w.rows[name]
        print(f"  {a.engine:7} {kind:8} {name:36} {ver:14} {note}")
    if a.out:
        Path(a.out).write_text("".join(f.name + "\n" for v, f in sorted(w.chosen.values(), key=lambda x: x[1].name)))
    print(f"{a.engine}: {sum(1 for k in w.rows.values() if k[0]=='staged')} staged, "
          f"{sum(1 for k in w.rows.values() if k[0].startswith('host'))} from host, "
          f"{sum(1 for k in w.rows.values() if k[0]=='skipped')} skipped, problems: {sorted(set(w.problems)) or 'none'}")
    return 1 if w.problems else 0


if __name__ == "__main__":
    sys.exit(main())
