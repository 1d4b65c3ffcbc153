#!/usr/bin/env bash
# Move the recorded runs and the renders out of the tree before device calls, and back after the last one.
#   bash tools/gpu-stage/park.sh park      data/runs -> $PARK/runs (data/runs left empty), rendered -> $PARK/rendered
#   bash tools/gpu-stage/park.sh unpark    both back
#   bash tools/gpu-stage/park.sh status    where they are
# Why: a device call carries the working tree with the part (64 MiB in all); the tracked tree is 75 MiB with data/runs
# and rendered (2026-12-06), 4.3 MiB without, so no call travels unless they are parked. The jobs read lib/, tools/ and
# data/{models,hardware,reference}, never data/runs. Commit nothing while parked (git would see the runs as deleted).
# PARK: a folder outside the repository (default /work/parked, or ../parked-<repo name> beside it where /work is absent).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PARK=${PARK:-$( [ -d /work ] && echo /work/parked || echo "$(dirname "$ROOT")/parked-$(basename "$ROOT")" )}
die() { echo "park.sh: $*" >&2; exit 1; }
case "$PARK/" in "$ROOT"/*) die "PARK=$PARK is inside the repository: the device call would carry it; choose a folder outside $ROOT";; esac
cd "$ROOT"
empty() { [ -d "$1" ] && [ -z "$(ls -A "$1")" ]; }
case "${1:-status}" in
  park)
    [ -e "$PARK/runs" ] || [ -e "$PARK/rendered" ] && die "$PARK already holds parked runs or renders: run 'park.sh unpark' first (or move $PARK away if it is stale)"
    [ -d data/runs ] && ! empty data/runs || die "data/runs is missing or empty here: nothing to park (already parked?)"
    mkdir -p "$PARK"
    mv data/runs "$PARK/runs" && mkdir data/runs
    [ ! -d rendered ] || mv rendered "$PARK/rendered"
    echo "parked: data/runs and rendered in $PARK ($(du -sh --exclude=.git --exclude=.venv --exclude=.stage . | cut -f1) left in the tree)";;
  unpark)
    [ -d "$PARK/runs" ] || die "nothing parked in $PARK"
    [ ! -d data/runs ] || empty data/runs || die "data/runs is not empty here: move what is in it aside before unparking (nothing was moved)"
    [ ! -e rendered ] || [ ! -d "$PARK/rendered" ] || die "rendered/ exists here and in $PARK: move one aside (nothing was moved)"
    rmdir data/runs 2>/dev/null || true
    mv "$PARK/runs" data/runs
    [ ! -d "$PARK/rendered" ] || mv "$PARK/rendered" rendered
    echo "unparked: data/runs and rendered back from $PARK";;
  status)
    if [ -d "$PARK/runs" ]; then echo "parked in $PARK"; else echo "not parked"; fi;;
  *) die "unknown action '$1': park, unpark or status";;
esac
