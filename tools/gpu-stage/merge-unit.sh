#!/usr/bin/env bash
# Merge a recording unit that `device.sh ref` sent back into the reference run, then derive its tables again.
#   FILES=<files_at of the last device call> RUN=<the unit's RUN_ID> bash tools/gpu-stage/merge-unit.sh
# TARGET (default data/runs/h200x1-ref): the run the unit joins. What it does (README: "After the vLLM unit lands"):
# unpacks runs.tgz and traces.tgz to a scratch folder, `servebook profile merge-unit` (appends the unit's tables, copies
# its traces, puts its profile logs under logs/RUN/, renames labels the run already holds, derives linearity and
# predictions again), copies the device logs to logs/RUN/device-*, and joins the JIT-cache pieces (tvmffi.tgz.partNN)
# into $CACHE_OUT (default /work/cache/tvmffi.tgz: outside .stage/, which a re-split of the parts empties).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
FILES=${FILES:?"FILES=<files_at of the device call that brought runs.tgz back>"}; RUN=${RUN:?"RUN=<the unit's RUN_ID>"}
TARGET=${TARGET:-data/runs/h200x1-ref}; CACHE_OUT=${CACHE_OUT:-/work/cache/tvmffi.tgz}
if [ -z "${SB:-}" ]; then SB=$ROOT/.venv/bin/servebook; [ -x "$SB" ] || SB="python3 -m servebook.cli"; fi   # SB: a command, words allowed
die() { echo "merge-unit.sh: $*" >&2; exit 1; }
[ -f "$FILES/runs.tgz" ] || die "no runs.tgz in $FILES: give the files_at folder of the call whose snapshot you merge"
[ -f "$TARGET/profile_runs.jsonl" ] || die "$TARGET holds no profile_runs.jsonl (parked? run tools/gpu-stage/park.sh unpark)"
U=$(mktemp -d /tmp/unit.XXXX)
tar xzf "$FILES/runs.tgz" -C "$U"
[ ! -f "$FILES/traces.tgz" ] || tar xzf "$FILES/traces.tgz" -C "$U"
D=$(ls -d "$U"/*/"$RUN" 2>/dev/null | head -1 || true); [ -n "$D" ] || die "runs.tgz holds no run '$RUN': $(cd "$U" && ls -d */* 2>/dev/null | tr '\n' ' ')"
echo "unit: $D ($(wc -l < "$D/profile_runs.jsonl") profile rows)"
export PYTHONPATH=$ROOT/lib${PYTHONPATH:+:$PYTHONPATH}
$SB profile merge-unit "$TARGET" "$D"    # derives linearity and predictions again itself
mkdir -p "$TARGET/logs/$RUN"
for f in "$FILES"/*.log; do [ ! -f "$f" ] || cp "$f" "$TARGET/logs/$RUN/device-$(basename "$f")"; done
[ ! -f "$FILES/gpus.txt" ] || cp "$FILES/gpus.txt" "$TARGET/logs/$RUN/device-gpus.txt"
if ls "$FILES"/tvmffi.tgz.part* >/dev/null 2>&1; then
  mkdir -p "$(dirname "$CACHE_OUT")"; cat "$FILES"/tvmffi.tgz.part* > "$CACHE_OUT"; echo "JIT caches: $CACHE_OUT ($(du -h "$CACHE_OUT" | cut -f1))"
fi
rm -rf "$U"
git status --short -- "$TARGET" 2>/dev/null | head -20 || true
