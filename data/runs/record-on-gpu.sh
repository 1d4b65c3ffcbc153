#!/usr/bin/env bash
# How the data/runs/h200* recordings were made: run from the repository root on a lent GPU machine,
#   bash data/runs/record-on-gpu.sh RUN_ID SECONDS [servebook book arguments ...]
# The GPU machine has torch, CUDA, NCCL and transformers but not the notebook tools: those travel as
# py3.12 wheels in .gpuwhl/ (pip download ... --python-version 3.12 --only-binary=:all:). The run directory is
# written under /tmp/runs (kept between calls while the machine stays warm, so a run cut by the time limit
# resumes with the same RUN_ID) and packed into $OUT/RUN_ID.tgz at the end, whatever happened.
set -u
run_id=$1; seconds=$2; shift 2
if ls .gpuwhl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/papermill ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpuwhl/*.whl >/dev/null 2>&1
fi
export PYTHONPATH=$PWD/lib:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 JUPYTER_PATH=/tmp/site/share/jupyter
mkdir -p /tmp/runs "${OUT:-/tmp/out}"
timeout "$seconds" python3 -m servebook.cli book --run-id "$run_id" --runs /tmp/runs --out /tmp/book-"$run_id" "$@" 2>&1 \
  | tee -a "${OUT:-/tmp/out}/$run_id.log" | grep -E '^\[|ok in|failed|book:|Error' ; echo "book exit: ${PIPESTATUS[0]}"
tar czf "${OUT:-/tmp/out}/$run_id.tgz" -C /tmp/runs .
