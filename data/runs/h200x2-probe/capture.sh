#!/usr/bin/env bash
# How data/runs/h200x2-probe/ and tests/data/nvidia-smi/ were captured: run from the repository root on the
# nvidia-h200-x2 device machine (2x H200). Read-only: no clock, power or MIG setting is touched.
# SGLang 0.5.23 (and the three small packages its helpers import that the machine lacks) travels as wheels in .whl/.
set -u
export PYTHONPATH=$PWD/lib PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/capture}/cap
mkdir -p "$O"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > "$O/pip.txt" 2>&1
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
Q=index,name,uuid,pci.bus_id,compute_cap,memory.total,memory.used,utilization.gpu,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,mig.mode.current,ecc.mode.current,driver_version
nvidia-smi > "$O/nvidia-smi.txt" 2>&1
nvidia-smi -q -x > "$O/nvidia-smi-q.xml" 2>&1
nvidia-smi topo -m > "$O/topo-m.txt" 2>&1
nvidia-smi topo -p2p r > "$O/topo-p2p-r.txt" 2>&1
nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits > "$O/query-gpu.csv" 2>&1
nvidia-smi --query-gpu=$Q --format=csv > "$O/query-gpu-header.csv" 2>&1
{ date -u; uname -a; python3 -c 'import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'; } > "$O/env.txt" 2>&1
{ time python3 -m servebook.probe_cli --json > "$O/probe-2gpu.json" 2> "$O/probe-2gpu.err"; } 2> "$O/probe-2gpu.time"
CUDA_VISIBLE_DEVICES=0 python3 -m servebook.probe_cli --json > "$O/probe-1gpu.json" 2> "$O/probe-1gpu.err"
python3 -m servebook.probe_cli --profile rtx-pro-6000 --json > "$O/whatif-rtx-pro-6000.json" 2> "$O/whatif.err"
tar czf "${OUT:-/tmp/capture}/capture.tar.gz" -C "$(dirname "$O")" cap && rm -rf "$O"
