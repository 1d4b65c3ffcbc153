#!/usr/bin/env bash
# On the GPU host (root, offline): join the parts made by pack.sh and unpack every archive whose bytes are all here.
#   bash tools/gpu-stage/unpack.sh STAGE_DIR
# STAGE_DIR holds part folders (p01/ p02/ ...) or their files (stream.partNN + MANIFEST). Parts are collected into
# $CACHE (default /tmp/gpu-stage, lives as long as the host stays up), so call it once per transfer with whatever
# folder arrived; archives spanning two parts unpack when both have arrived. Idempotent: a done archive is skipped.
# Result: /tmp/site-book, /tmp/site-common, /tmp/site-sglang, /tmp/site-vllm, wrappers /tmp/py-sglang, /tmp/py-vllm.
set -euo pipefail
stage=${1:?usage: unpack.sh STAGE_DIR}; CACHE=${CACHE:-/tmp/gpu-stage}
T0=$(date +%s.%N); el() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'; }
mkdir -p "$CACHE"
for f in $(find "$stage" -maxdepth 2 -type f \( -name 'stream.part*' -o -name MANIFEST \) 2>/dev/null); do
  b=$(basename "$f"); [ -f "$CACHE/$b" ] && [ "$(stat -c %s "$f")" = "$(stat -c %s "$CACHE/$b")" ] || cp "$f" "$CACHE/$b"
done
[ -f "$CACHE/MANIFEST" ] || { echo "unpack: no MANIFEST under $stage" >&2; exit 2; }
# contiguous parts from part00 on
parts=(); avail=0; i=0
while f=$(printf "%s/stream.part%02d" "$CACHE" $i) && [ -f "$f" ]; do parts+=("$f"); avail=$((avail + $(stat -c %s "$f"))); i=$((i+1)); done
echo "unpack: ${#parts[@]} contiguous part(s) here ($avail bytes): $(ls "$CACHE" | grep -c '^stream.part') in $CACHE"
while read -r name off len sha kind dest; do
  mark="$CACHE/.done-$name"
  if [ -f "$mark" ]; then echo "  $name: already unpacked"; continue; fi
  if [ $((off + len)) -gt $avail ]; then echo "  $name: waiting for more parts (needs bytes to $((off+len)))"; continue; fi
  t=$(date +%s.%N)
  # head closes the pipe early on purpose: SIGPIPE upstream is expected, so pipefail is off for this one
  ( set +o pipefail; cat "${parts[@]}" | tail -c +$((off + 1)) | head -c "$len" ) > "$CACHE/cur.xz"
  got=$(sha256sum "$CACHE/cur.xz" | cut -c1-64)
  [ "$got" = "$sha" ] || { echo "  $name: sha256 mismatch ($got)" >&2; rm -f "$CACHE/cur.xz"; exit 3; }
  if [ "$kind" = tar ]; then mkdir -p "$dest"; xz -d -T0 -c "$CACHE/cur.xz" | tar -C "$dest" -xf -
  else
    [ -d "$(dirname "$dest")" ] || { echo "  $name: $(dirname "$dest") not there yet" >&2; rm -f "$CACHE/cur.xz"; continue; }
    xz -d -T0 -c "$CACHE/cur.xz" > "$dest.tmp" && mv "$dest.tmp" "$dest"
  fi
  rm -f "$CACHE/cur.xz"; touch "$mark"; echo "  $name -> $dest ($(el "$t"))"
done < "$CACHE/MANIFEST"
# wrappers: the host's python3 with the engine's site first, the shared one after; environment (NCCL_*...) inherited
HOSTPY=${HOSTPY:-$(command -v python3)}
wrap() {  # wrap NAME PYTHONPATH
  printf '#!/bin/sh\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\nexec %s "$@"\n' "$2" "$HOSTPY" > "/tmp/py-$1"
  chmod 755 "/tmp/py-$1"; echo "  /tmp/py-$1: PYTHONPATH=$2 -> $HOSTPY"
}
have() { [ -f "$CACHE/.done-$1" ]; }
if have common.tar.xz && have sglang.tar.xz; then wrap sglang /tmp/site-sglang:/tmp/site-common; fi
if have common.tar.xz && have vllm.tar.xz; then wrap vllm /tmp/site-vllm:/tmp/site-common; fi
if have book.tar.xz; then
  echo "book tools: export PYTHONPATH=\$PWD/lib:/tmp/site-book:/tmp/site-common JUPYTER_PATH=/tmp/site-book/share/jupyter"
  [ -f /tmp/site-book/share/jupyter/kernels/python3/kernel.json ] && echo "  kernelspec python3: /tmp/site-book/share/jupyter/kernels/python3"
fi
echo "unpack: done in $(el "$T0")"
