#!/usr/bin/env bash
# What a device call sends back, at the end of every `device.sh` call (and what merge-unit.sh reads): under $OUT
#   runs.tgz      the runs so far, traces left out, with each built model's config.json and servebook_model.json
#   traces.tgz    the traces (raw ones left out)
#   NAME.log      the last 2 MB of each job's log
#   gpus.txt      nvidia-smi's memory and utilization per GPU
#   tvmffi.tgz.partNN  the JIT caches (SGLang's tvm-ffi, flashinfer's), once the ref job's batch 2 has started, sent once
#                 in 15 MB pieces (a file back is at most 16 MiB); join them with cat
# Paths from the environment, the device's defaults otherwise: RUNS=/tmp/runs JOBS=/tmp/jobs MODELS=/tmp/models
# CACHE_HOME=~/.cache STATE=/tmp (where tvmffi.tgz and its markers live); T0 (the call's start, for the timing line).
set -u
OUT=${OUT:?"OUT=<the folder the device tool sends back>"}
RUNS=${RUNS:-/tmp/runs}; JOBS=${JOBS:-/tmp/jobs}; MODELS=${MODELS:-/tmp/models}; CACHE_HOME=${CACHE_HOME:-$HOME/.cache}
STATE=${STATE:-/tmp}; T0=${T0:-$(date +%s)}
mkdir -p "$OUT" "$RUNS"
for m in "$MODELS"/*/; do [ -f "$m/config.json" ] && mkdir -p "$RUNS/models/$(basename "$m")" && \
  cp "$m/config.json" "$m/servebook_model.json" "$RUNS/models/$(basename "$m")/" 2>/dev/null; done
tar czf "$OUT/runs.tgz" --exclude=traces -C "$RUNS" . 2>/dev/null
(cd "$RUNS" && find . -path '*/traces/*' -not -path '*/traces/raw/*' -type f | tar czf "$OUT/traces.tgz" -T - 2>/dev/null)
for f in "$JOBS"/*.log; do [ -f "$f" ] && tail -c 2000000 "$f" > "$OUT/$(basename "$f")"; done
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader > "$OUT/gpus.txt" 2>&1
# the JIT caches once a plan's first batch is through: a later unit carries them in (TVMFFI_CACHE) instead of compiling
# ~400 s again (keyed by architecture, arch_9.0a: an H100's should serve an H200, untested: README)
[ -f "$STATE/tvmffi.tgz" ] || ! grep -q '^profile: batch 2' "$JOBS/ref.log" 2>/dev/null || \
  (cd "$CACHE_HOME" && tar czf "$STATE/tvmffi.tgz" $(ls -d tvm-ffi flashinfer 2>/dev/null))
[ -f "$STATE/tvmffi.tgz" ] && [ ! -f "$STATE/tvmffi.sent" ] && echo "[device.sh] JIT caches: $(du -h "$STATE/tvmffi.tgz" | cut -f1)" \
  && [ "$(stat -c %s "$STATE/tvmffi.tgz")" -lt 45000000 ] && split -b 15000000 -d "$STATE/tvmffi.tgz" "$OUT/tvmffi.tgz.part" \
  && touch "$STATE/tvmffi.sent"
# vLLM's compile caches, sized once the first batch is through (its first start compiles ~285 s): what a later unit
# could carry beside the JIT caches
[ ! -f "$STATE/tvmffi.tgz" ] || [ -f "$STATE/vcache.said" ] || { du -sh "$CACHE_HOME/vllm" "$HOME/.triton" "$STATE"/torchinductor_* 2>/dev/null \
  | sed 's/^/[device.sh] compile cache: /'; touch "$STATE/vcache.said"; }
echo "[device.sh] $(date -u +%T) snapshot: $(du -sh "$OUT/runs.tgz" | cut -f1) in runs.tgz ($(( $(date +%s) - T0 ))s this call)"
exit 0
