#!/usr/bin/env bash
# Build the offline GPU-host payload: SGLang 0.5.16 (+ sgl-kernel FA3), vLLM 0.26.0 and servebook's notebook tools,
# as one byte stream of xz archives split into PART_MB (default 59) MiB parts, one folder per transfer: .stage/p01, .stage/p02, ...
#   bash tools/gpu-stage/pack.sh            (from the repository root; W=scratch dir, default /work/scratch-stage)
# Needs: python3 with pip + packaging, xz, tar, zip/unzip, PyPI through pip. Runs here (any Python: wheels are chosen
# for cp312 / manylinux x86_64 with pip --python-version 3.12). See README.md beside it for what lands where.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
W=${W:-/work/scratch-stage}; STAGE=${STAGE:-$ROOT/.stage}; PY=${PY:-python3}
XZ=${XZ:-xz -9 -T0}
PART_BYTES=$(( ${PART_MB:-59} * 1024 * 1024 ))  # a call carries 64 MiB with the tree: the tracked tree is 75 MiB (2026-12-06), 4.3 MiB with data/runs and rendered parked (park.sh), so every call parks them
VLLM_WHL=${VLLM_WHL:-}                           # optional: an already downloaded vllm-0.26.0 wheel
PLAT="--platform linux_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64"
for n in $(seq 5 39); do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
mkdir -p "$W"/{whl-s,whl-v,whl-b,ar} "$STAGE"
t0=$(date +%s)
log() { echo "[pack $(( $(date +%s) - t0 ))s] $*"; }

# 1. wheels: the pinned ones, then each engine's Requires-Dist closure minus the host (host-freeze.txt) and skip.txt
dl() { $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT "$@"; }
ls "$W"/whl-s/sglang-0.5.16-*.whl >/dev/null 2>&1 || \
  dl -d "$W/whl-s" sglang==0.5.16 sglang-kernel==0.4.5 flashinfer-python==0.6.14 sgl-deep-gemm==0.1.4.post1 transformers==5.12.1 tokenizers==0.22.2
if ! ls "$W"/whl-v/vllm-0.26.0-*.whl >/dev/null 2>&1; then
  if [ -n "$VLLM_WHL" ]; then ln -f "$VLLM_WHL" "$W/whl-v/" 2>/dev/null || cp "$VLLM_WHL" "$W/whl-v/"; else dl -d "$W/whl-v" vllm==0.26.0; fi
fi
R="$PY $HERE/resolve.py --download"
log "resolve sglang";  $R --engine sglang --whl "$W/whl-s" --out "$W/ship-sglang.txt" sglang==0.5.16 tokenizers==0.22.2 \
  dill datasets > "$W/resolve-sglang.txt"   # server_args imports dill; sglang.bench_serving imports datasets
log "resolve vllm";    $R --engine vllm --whl "$W/whl-v" --prefer "$W/whl-s" --out "$W/ship-vllm.txt" vllm==0.26.0 "nvidia-cudnn-frontend>=1.19.1,<1.26" \
  "openai>=2.25.0,<3" > "$W/resolve-vllm.txt"   # vLLM's tool parsers import openai.types.responses.NamespaceTool (2.25.0 on); 3.x is a new major that vLLM 0.26.0 was not released against
# the book's own requirements, read from pyproject.toml (a hand-kept list here once missed httptools); torch is the host's
BOOK_REQS=$($PY -c "import tomllib; print('\n'.join(d for d in tomllib.load(open('$ROOT/pyproject.toml', 'rb'))['project']['dependencies'] if not d.startswith('torch')))")
log "resolve book";    mapfile -t book_reqs <<< "$BOOK_REQS"; $R --engine book --whl "$W/whl-b" --prefer "$W/whl-s" --prefer "$W/whl-v" --out "$W/ship-book.txt" \
  "${book_reqs[@]}" > "$W/resolve-book.txt"
tail -n1 "$W"/resolve-*.txt

# 2. split the wheel lists: common = the same wheel file wanted by two or more of sglang/vllm/book AND absent from the
#    host (so putting it on everybody's path shadows nothing); the rest stays in its own site.
$PY - "$W" "$HERE/host-freeze.txt" <<'PY'
import sys, collections
from packaging.utils import canonicalize_name as canon, parse_wheel_filename
w, freeze = sys.argv[1], sys.argv[2]
host = {canon(l.split("==")[0]) for l in open(freeze) if "==" in l}
ship = {e: set(open(f"{w}/ship-{e}.txt").read().split()) for e in ("sglang", "vllm", "book")}
cnt = collections.Counter(f for s in ship.values() for f in s)
common = {f for f, c in cnt.items() if c >= 2 and canon(parse_wheel_filename(f)[0]) not in host}
open(f"{w}/list-common.txt", "w").write("".join(f + "\n" for f in sorted(common)))
for e, d in (("sglang", "whl-s"), ("vllm", "whl-v"), ("book", "whl-b")):
    open(f"{w}/list-{e}.txt", "w").write("".join(f"{w}/{d}/{f}\n" for f in sorted(ship[e] - common)))
open(f"{w}/list-common.txt", "w").write("".join(f"{w}/whl-s/{f}\n" if f in ship["sglang"] else f"{w}/whl-v/{f}\n" for f in sorted(common)))
print({k: len(open(f"{w}/list-{k}.txt").read().split()) for k in ("common", "sglang", "vllm", "book")})
PY

# 3. sgl-kernel's FA3 library (flash_ops.abi3.so, 1.1 GB raw; SGLang's default attention on Hopper needs it) stays in
#    the sglang archive: xz packs it better together with the rest of sgl-kernel (194 MB for both, against 103 + 133 MB
#    when packed apart, measured 2026-11-30).

# 4. install each site (no deps, no bytecode), then trim: __pycache__, vLLM's FA2 library (see README: on SM90 vLLM
#    uses FA3 and imports FA2 in try/except), deep_gemm builds for CPython 3.13/3.14
inst() { rm -rf "$W/site-$1"; $PY -m pip install -q --no-deps --no-compile --no-index --target "$W/site-$1" \
  --python-version 3.12 --implementation cp --only-binary=:all: $PLAT $(cat "$W/list-$1.txt"); }
for s in book common sglang vllm; do log "install $s"; inst $s; done
rm -f "$W"/site-vllm/vllm/vllm_flash_attn/_vllm_fa2_C*.so "$W"/site-vllm/vllm/third_party/deep_gemm/_C.cpython-31[34]-*.so
find "$W"/site-* -name __pycache__ -type d -prune -exec rm -rf {} +
du -sh "$W"/site-*

# 5. archives, in transfer order: book tools, shared deps, SGLang (with its FA3 library), vLLM (one xz at a time: 2 cores here)
for s in book common sglang; do log "xz $s"; tar -C "$W/site-$s" --sort=name --owner=0 --group=0 -cf - . | $XZ > "$W/ar/$s.tar.xz"; done
log "xz vllm"; tar -C "$W/site-vllm" --sort=name --owner=0 --group=0 -cf - . | $XZ > "$W/ar/vllm.tar.xz"

# 6. one stream, a manifest (name offset length sha256 kind dest), parts of PART_BYTES, one folder per part
cd "$W/ar"; off=0; : > MANIFEST; : > stream
for a in book.tar.xz:tar:/tmp/site-book common.tar.xz:tar:/tmp/site-common sglang.tar.xz:tar:/tmp/site-sglang \
         vllm.tar.xz:tar:/tmp/site-vllm; do
  f=${a%%:*}; rest=${a#*:}; n=$(stat -c %s "$f")
  echo "$f $off $n $(sha256sum "$f" | cut -c1-64) ${rest%%:*} ${rest#*:}" >> MANIFEST; cat "$f" >> stream; off=$((off+n))
done
rm -f stream.part*; split -a 2 -d -b $PART_BYTES stream stream.part; rm stream
rm -rf "$STAGE"/p[0-9][0-9]
i=1; for p in stream.part*; do d=$(printf "%s/p%02d" "$STAGE" $i); mkdir -p "$d"; mv "$p" "$d/"; cp MANIFEST "$d/"; i=$((i+1)); done
cat MANIFEST; ls -l "$STAGE"/p*/; du -sb "$STAGE"/p*
log "done"
