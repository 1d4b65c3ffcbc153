#!/usr/bin/env bash
# How the live-engine H200 recordings are made: one call of the device tool per staged part, back to back,
# from the repository root on the lent machine (kept warm between calls; /tmp lives as long as it does).
#   bash tools/gpu-stage/device.sh STEP [SECONDS]
# Every call first unpacks whatever part folders (.stage/pNN) travelled with it (tools/gpu-stage/unpack.sh),
# then does STEP, then copies what the runs hold so far to $OUT (runs.tgz, logs): a machine lost mid-way
# keeps what the last call fetched.
#   prep        once the notebook tools are unpacked: build the models (servebook model build) and start,
#               in the background, chapter 04's NCCL grid (no engine needed)
#   main        once both engines are unpacked: start, in the background, chapters 01, 03 (both engines, one per
#               GPU), 05 (side by side) and 04's end-to-end check at TP=2 (after the grid)
#   auto [S]    prep and main as soon as what they need is unpacked, then wait up to S seconds (default 0)
#   wait S      wait up to S seconds (or until the background jobs end), printing their progress
#   status      print the state of the jobs
#   one [S]     a one-GPU machine (nvidia-h200): build the models as soon as the notebook tools are unpacked, and
#               once both engines are: chapter 01, 05 (SGLang and vLLM side by side) and 03 (vLLM's MLA backends
#               beside SGLang's default), RUN_ID h200x1-live unless set; then wait up to S seconds
#               (a run carried in .devout/runs/local-vm/RUN_ID is resumed: what it holds is not measured again)
#   check [S]   SGLang only (the parts up to SGLang's archive): chapter 05 resumed for SGLang (what it lacks, e.g. the
#               client check measured again after a fault), RUN_ID h200x1-live unless set; then wait up to S seconds
#   profile [S] a one-GPU machine: chapter 05's decode-step profiles (servebook profile run) of the servers in
#               tools/gpu-stage/profile-plan.json - Kimi-K2.5 slices of 1 and 2 layers (bf16, and INT4 experts), Moonlight
#               and Llama-3.1-8B slices and whole models - RUN_ID h200x1-prof unless set; traces to traces.tgz
#               (a run carried in .devout/runs/local-vm/RUN_ID is resumed: labels it holds are not profiled again)
#   more [S]    a one-GPU machine resuming the carried run (RUN_ID h200x1-live unless set): chapter 03 for what it lacks,
#               then chapter 05 again with WARMUP (default 10) warm-up requests and every sweep level warmed first (both
#               are measured again: another method) and SGLang's own client beside servebook's; then wait up to S
#               seconds (chapter 02 of the embedded books is executed again on the CPU: tools/rerender.sh, TF_HOST_PYTHON)
#   trust [S]   a one-GPU machine, a fresh or carried run (RUN_ID h200x1-trust unless set) for the checks of issue #28: chapter 01,
#               03 (graphs; SGLang's default, triton, flashmla; vLLM's default and its MLA list) and 05 (both engines on the
#               same random-weight slice, prompt length and token count as chapter 03; no profiles: those are recorded
#               in h200x1-prof) with STARTS (default 2) server starts per configuration and the decode-path agreement
#               (chapter 02 reads the engines' code: it runs on the CPU, as for the earlier recordings); chapter 05 before
#               chapter 03's forced backends, so a session that runs out of device time still compares the two engines;
#               TRUST_CHAPTERS (default "01 05 03") and TRUST_BACKENDS (chapter 03's `backends`) narrow a resumed run
#               (an engine the list leaves out gets every candidate: name it with nothing after the colon to skip it,
#               e.g. TRUST_BACKENDS='sglang: ; vllm: FLASHMLA,TRITON_MLA')
#   ref [S]     a one-GPU machine, one unit of issue #39's reference recording (RUN_ID h200x1-ref unless set): the servers
#               of REF_PLAN (default tools/gpu-stage/ref-plan.json: Kimi-K2.5 slices with the card's INT4 experts, SGLang
#               triton at 1, 2, 4 and 12 MoE layers with the starts the starts rule gives, a lead start that fills SGLang's
#               JIT cache first), then the extra starts the rule asks for (servebook profile more-starts), then the plan's
#               vLLM servers once vLLM is unpacked; slices built (REF_LAYERS) as soon as the notebook tools are in. Every
#               row carries the machine's identity. The JIT caches (~/.cache/tvm-ffi, ~/.cache/flashinfer) are packed to
#               tvmffi.tgz once the plan's first batch is through (back in $OUT as 15 MB pieces, tvmffi.tgz.partNN; join
#               them with cat) and unpacked from STAGE_DIR/cache/tvmffi.tgz (TVMFFI_CACHE) where the call carries one;
#               REF_REQUIRED_ONLY=1 leaves the plan's optional entries out (a loan too short for its warm-up batch)
# The part folders are read from STAGE_DIR (default .stage beside this repository; a copy of the tree run from another
# checkout names the checkout's own).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd); cd "$REPO"
step=${1:-status}; secs=${2:-0}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/jobs /tmp/runs /tmp/models
T0=$(date +%s)
DRY=${DRY:-}  # DRY=1: print each job's script instead of starting it, as if everything were unpacked (tests/test_gpu_stage.py)
[ -n "$DRY" ] || for d in "${STAGE_DIR:-.stage}"/p*; do [ -d "$d" ] && bash tools/gpu-stage/unpack.sh "$d" 2>&1 | tail -4; done

# the notebook kernelspec shipped with ipykernel runs `python`: make sure one is on PATH
command -v python >/dev/null 2>&1 || { mkdir -p /tmp/bin; ln -sf "$(command -v python3)" /tmp/bin/python; export PATH=/tmp/bin:$PATH; }
export PYTHONPATH=$REPO/lib:/tmp/site-book:/tmp/site-common PYTHONUNBUFFERED=1 JUPYTER_PATH=/tmp/site-book/share/jupyter
# rules of the lent host (multicast stays off), not advice for users: recorded as the host's policy
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SERVEBOOK_HOST_POLICY_ENV="NCCL_NVLS_ENABLE=0,TORCH_SYMM_MEM_DISABLE_MULTICAST=1,NVSHMEM_DISABLE_NVLS=1"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SERVEBOOK_CACHE=/tmp/sbcache
[ -x /tmp/py-sglang ] && export SERVEBOOK_PYTHON_SGLANG=/tmp/py-sglang
[ -x /tmp/py-vllm ] && export SERVEBOOK_PYTHON_VLLM=/tmp/py-vllm
RUN_ID=${RUN_ID:-$(case "$step" in one|more|check) echo h200x1-live;; trust) echo h200x1-trust;; profile) echo h200x1-prof;; ref) echo h200x1-ref;; *) echo h200x2-live;; esac)}
SLICE=/tmp/models/kimi-slice            # full-width Kimi-K2.5 text slice, seeded bf16 weights (chapter 03: agreement)
DUMMY=/tmp/models/kimi-slice-dummy      # the same config, no weights: --load-format dummy (chapters 04, 05: speed)
FLAGS='sglang: --cuda-graph-max-bs 16 --sampling-backend pytorch; vllm: --max-num-seqs 16'
BOOK="python3 -m servebook.cli book --runs /tmp/runs --run-id $RUN_ID --out /tmp/book"
# one GPU (one, more, check): chapter 05 on the dummy-weight slice, chapter 03 on the seeded one (add the engines' backends)
# The chapter commands, one source for every step: `chapter NN MODEL [-p ...]` prints the book command for chapter(s) NN
# on MODEL with the parameters all recordings share, then the step's own (a later -p of the same name wins).
chapter() {
  local only=$1 model=$2; shift 2; local p=""
  case $only in *03*) p+=" -p compare_engines=vllm -p 'engine_args=$FLAGS' -p ready_timeout=420 -p runs=3" ;; esac
  case $only in *05*) p+=" -p 'engine_args=$FLAGS' -p max_concurrency=16 -p requests_per_level=3 -p saturation_patience=1 -p runs=5" ;; esac
  case $only in *04*) p+=" -p timeout_s=120" ;; esac
  echo "$BOOK --engine sglang --model $model --only $only$p${*:+ $*}"
}
EAGER="-p modes=graph,eager -p eager_backends=auto"                     # chapter 03 of the first recordings: both modes
ONE05="-p level_time_budget_s=15 -p ceiling_sglang_version=0.5.16"      # chapter 05 on one GPU (one, more, check)
TWO05="-p compare_engines=vllm -p level_time_budget_s=20"               # chapter 05 of the two-GPU steps
TP04="-p tp_check=sglang,vllm -p 'tp_engine_args=$FLAGS' -p tp_runs=5"  # chapter 04's end-to-end check at TP=2
AGAIN="-p warmup=${WARMUP:-10} -p max_tokens=128 -p input_len=128"   # chapter 05 measured again with more warm-up

snap() { OUT=$OUT T0=$T0 bash "$REPO/tools/gpu-stage/snap.sh"; }   # what every call sends back (snap.sh)
job() {  # job NAME SCRIPT: run SCRIPT in its own session so it outlives this call
  [ -n "$DRY" ] && { printf '[job %s]\n%s\n' "$1" "$2"; return; }
  [ -f "/tmp/jobs/$1.pid" ] && kill -0 "$(cat /tmp/jobs/$1.pid)" 2>/dev/null && { echo "[device.sh] $1 already running"; return; }
  [ -f "/tmp/jobs/$1.done" ] && { echo "[device.sh] $1 already done"; return; }
  printf '%s\n' "set -x" "$2" "touch /tmp/jobs/$1.done" > "/tmp/jobs/$1.sh"
  (cd /tmp && setsid bash "/tmp/jobs/$1.sh" > "/tmp/jobs/$1.log" 2>&1 < /dev/null &
   echo $! > "/tmp/jobs/$1.pid")  # cwd /tmp: the next call replaces the repository folder the call ran in
  echo "[device.sh] started $1 (pid $(cat "/tmp/jobs/$1.pid"))"
}
progress() { for f in /tmp/jobs/*.log; do [ -f "$f" ] || continue; echo "--- $(basename "$f") ($([ -f "${f%.log}.done" ] && echo done || echo running))"
  grep -E '^\[|ok in|failed|error|Error|tok/s|ready after|rejected|crashed|servebook:' "$f" | grep -v '^+' | tail -n 12; done; }

have() { [ -n "$DRY" ] || [ -f "/tmp/gpu-stage/.done-$1" ]; }
engines_in() {  # engines_in [sglang]: both engines unpacked (or SGLang's alone)
  [ -n "$DRY" ] && return 0
  [ -x /tmp/py-sglang ] && [ -f /tmp/site-sglang/sgl_kernel/flash_ops.abi3.so ] && { [ "${1:-}" = sglang ] || [ -x /tmp/py-vllm ]; }
}
imports_check() {  # what the servers and SGLang's own client import, not just the package (a staging gap shows here, not minutes later)
  [ -n "$DRY" ] && return 0
  for m in sglang:sglang.srt.entrypoints.http_server sglang:sglang.bench_serving vllm:vllm.entrypoints.openai.api_server; do
    (e=${m%%:*}; /tmp/py-$e -c "import time, importlib, importlib.metadata as md; t = time.time(); importlib.import_module('${m#*:}'); print('${m#*:}', md.version('$e'), 'imports in %.0f s' % (time.time() - t))" 2>&1 | tail -2) & done; wait
}
do_prep() {
    have book.tar.xz && have common.tar.xz || { echo "[device.sh] notebook tools not unpacked yet"; return 1; }
    [ -n "$DRY" ] || python3 -c "import torch; print('GPUs:', torch.cuda.device_count(), torch.cuda.get_device_name(0))"
    job prep "cd $REPO
python3 -m servebook.cli model build kimi-k2.5 --weights dummy --out $DUMMY
python3 -m servebook.cli model build kimi-k2.5 --weights random --out $SLICE
$(chapter 04 $DUMMY)"
}
do_main() {
    engines_in || { echo "[device.sh] engines not unpacked yet"; return 1; }
    imports_check
    job main "cd $REPO
while [ ! -f /tmp/jobs/prep.done ]; do sleep 5; done
$(chapter 01,03 $SLICE $EAGER)
$(chapter 05 $DUMMY $TWO05)
$(chapter 04 $DUMMY $TP04)"
}
do_wait() {
    end=$((T0 + secs))
    while [ "$(date +%s)" -lt "$end" ]; do
      # a job runs from its script's start until its .done: on 2026-12-05 `kill -0` of the recorded pid failed in a later
      # call while the job ran (cause not established; hypothesis: another call sees other pids), so the wait ended at once
      running=0; for p in /tmp/jobs/*.sh; do [ -f "$p" ] && [ ! -f "${p%.sh}.done" ] && running=1; done
      [ $running = 0 ] && break
      sleep 20
    done
}
do_restart() {  # stop main (its whole session: kernel, servers, workers) and go on with $BACKENDS as chapter 03's candidates
    [ -n "$DRY" ] || [ ! -f /tmp/jobs/main.pid ] || { kill -TERM -- -"$(cat /tmp/jobs/main.pid)" 2>/dev/null; sleep 8; kill -KILL -- -"$(cat /tmp/jobs/main.pid)" 2>/dev/null; }
    [ -n "$DRY" ] || { pkill -KILL -f sglang.launch_server; pkill -KILL -f vllm.entrypoints; pkill -KILL -f 'sglang::'; pkill -KILL -f VLLM; sleep 3
      nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; }
    job main2 "cd $REPO
$(chapter 03 $SLICE $EAGER "-p 'backends=$BACKENDS'")
$(chapter 05 $DUMMY $TWO05)
$(chapter 04 $DUMMY $TP04)"
}
do_all() {  # a fresh machine after the first went back: resume the carried run, build the models, then 03, 05, 04
    have book.tar.xz && have common.tar.xz && engines_in || { echo "[device.sh] not unpacked yet"; return 1; }
    [ -n "$DRY" ] || [ -d /tmp/runs/local-vm ] || { [ -d .devout/runs ] && cp -r .devout/runs/. /tmp/runs/ && echo "[device.sh] resumed the carried run"; }
    job all "cd $REPO
python3 -m servebook.cli model build kimi-k2.5 --weights dummy --out $DUMMY
python3 -m servebook.cli model build kimi-k2.5 --weights random --out $SLICE
$(chapter 03 $SLICE $EAGER "-p 'backends=$BACKENDS'")
$(chapter 05 $DUMMY $TWO05)
$(chapter 04 $DUMMY $TP04)"
}
VLLM_MLA=${VLLM_MLA:-FLASH_ATTN_MLA,FLASHMLA,FLASHINFER_MLA,TRITON_MLA,CUTLASS_MLA}  # vLLM 0.26.0's MLA list for SM90 (platforms/cuda.py:135-143) and one SM100-only
do_one_models() {  # models once the notebook tools are in; 0 once both engines are in too (the carried run resumed, imports checked)
    if [ ! -f /tmp/jobs/prep.pid ]; then
      have book.tar.xz && have common.tar.xz || { echo "[device.sh] notebook tools not unpacked yet"; return 1; }
      job prep "cd $REPO
python3 -m servebook.cli model build kimi-k2.5 --weights dummy --out $DUMMY
python3 -m servebook.cli model build kimi-k2.5 --weights random --out $SLICE"
    fi
    [ -f /tmp/jobs/main.pid ] && return 1
    engines_in || { echo "[device.sh] engines not unpacked yet"; return 1; }
    # a recorded run carried in .devout/runs (as the `all` step does) is resumed: what it holds is not measured again
    [ -n "$DRY" ] || [ -d /tmp/runs/local-vm ] || { [ -d .devout/runs ] && cp -r .devout/runs/. /tmp/runs/ && echo "[device.sh] resumed the carried run"; }
    imports_check
}
do_one() {
    do_one_models || return 0
    job main "cd $REPO
while [ ! -f /tmp/jobs/prep.done ]; do sleep 5; done
$(chapter 01 $DUMMY)
$(chapter 05 $DUMMY $ONE05 -p compare_engines=vllm)
$(chapter 03 $SLICE $EAGER "-p 'backends=sglang: ; vllm: $VLLM_MLA'")"
}
do_more() {
    do_one_models || return 0
    job main "cd $REPO
while [ ! -f /tmp/jobs/prep.done ]; do sleep 5; done
$(chapter 03 $SLICE $EAGER "-p 'backends=sglang: ; vllm: $VLLM_MLA'")
$(chapter 05 $DUMMY $ONE05 -p compare_engines=vllm $AGAIN)"
}
do_check() {  # SGLang only (parts with book, common, sglang): chapter 05 resumed for SGLang, which measures what it lacks
    have book.tar.xz && have common.tar.xz && engines_in sglang \
      || { echo "[device.sh] notebook tools or SGLang not unpacked yet"; return 0; }
    [ -n "$DRY" ] || [ -d /tmp/runs/local-vm ] || { [ -d .devout/runs ] && cp -r .devout/runs/. /tmp/runs/ && echo "[device.sh] resumed the carried run"; }
    job check "cd $REPO
python3 -m servebook.cli model build kimi-k2.5 --weights dummy --out $DUMMY
$(chapter 05 $DUMMY $ONE05 -p compare_engines= $AGAIN)"
}
do_profile() {  # models (dummy weights: config and tokenizer only, seconds) as soon as the notebook tools are in, then the plan
    if [ ! -f /tmp/jobs/pmodels.pid ]; then
      have book.tar.xz && have common.tar.xz || { echo "[device.sh] notebook tools not unpacked yet"; return 0; }
      job pmodels "cd $REPO
B='python3 -m servebook.cli model build'
\$B kimi-k2.5 --layers 1 --weights dummy --out /tmp/models/kimi-1L
\$B kimi-k2.5 --layers 2 --weights dummy --out /tmp/models/kimi-2L
\$B kimi-k2.5 --layers 2 --weights dummy --quant card --out /tmp/models/kimi-2L-int4
for n in 2 5 27; do \$B moonlight-16b-a3b --layers \$n --weights dummy --out /tmp/models/moonlight-\${n}L; done
for n in 2 4 32; do \$B llama-3.1-8b --layers \$n --weights dummy --out /tmp/models/llama-\${n}L; done"
    fi
    [ -f /tmp/jobs/prof.pid ] && return 0
    engines_in || { echo "[device.sh] engines not unpacked yet"; return 0; }
    # a recorded run carried in .devout/runs is resumed: servers whose label it already holds are not profiled again
    [ -n "$DRY" ] || [ -d /tmp/runs/local-vm ] || { [ -d .devout/runs ] && cp -r .devout/runs/. /tmp/runs/ && echo "[device.sh] resumed the carried run"; }
    job prof "cd $REPO
while [ ! -f /tmp/jobs/pmodels.done ]; do sleep 2; done
rm -rf /tmp/sbtree; mkdir -p /tmp/sbtree; cp -r $REPO/lib $REPO/data /tmp/sbtree/; cp tools/gpu-stage/profile-plan.json /tmp/profile-plan.json
# a copy (lib and data: the cards live in data/models): the device tool re-copies the tree under a running job
export PYTHONPATH=/tmp/sbtree/lib:\$PYTHONPATH SERVEBOOK_HOME=/tmp/sbtree
python3 -m servebook.cli profile run --plan /tmp/profile-plan.json --runs /tmp/runs --run-id $RUN_ID --budget-gb \${BUDGET_GB:-138} \${ONLY:+--only \"\$ONLY\"}"
}
do_trust() {  # models as soon as the notebook tools are in; chapters once both engines are (a copy of the tree: see do_profile)
    do_one_models || return 0
    local ch03="'backends=${TRUST_BACKENDS:-sglang: triton,flashmla; vllm: FLASHMLA,TRITON_MLA,FLASHINFER_MLA,CUTLASS_MLA}'" steps=""
    for c in ${TRUST_CHAPTERS:-01 05 03}; do case $c in
      01) steps+="$(chapter 01 $SLICE)"$'\n' ;;
      05) steps+="$(chapter 05 $SLICE $ONE05 -p compare_engines=vllm -p starts=${STARTS:-2} -p max_tokens=64 -p input_len=32 -p profile_steps=0)"$'\n' ;;
      03) steps+="$(chapter 03 $SLICE -p modes=graph -p starts=${STARTS:-2} -p max_tokens=64 -p "$ch03")"$'\n' ;;
    esac; done
    job main "cd $REPO
rm -rf /tmp/sbtree; mkdir -p /tmp/sbtree; cp -r $REPO/lib $REPO/data $REPO/notebooks /tmp/sbtree/
export PYTHONPATH=/tmp/sbtree/lib:\$PYTHONPATH SERVEBOOK_HOME=/tmp/sbtree
while [ ! -f /tmp/jobs/prep.done ]; do sleep 5; done
$steps"
}
REF_PLAN=${REF_PLAN:-tools/gpu-stage/ref-plan.json}
do_ref() {  # slices as soon as the notebook tools are in; the plan's SGLang servers once SGLang is; its vLLM ones after
    local P="python3 -m servebook.cli profile" runs="--runs /tmp/runs --run-id $RUN_ID"
    # REF_REQUIRED_ONLY=1: the plan's entries marked optional left out (a loan too short for the warm-up batch)
    local plan="/tmp/ref-plan.json${REF_REQUIRED_ONLY:+ --required-only}"
    # the carried JIT cache kept in /tmp at once: a later call's carry replaces .stage/ (the part that starts the job
    # carries no cache), and TVMFFI_CACHE names a path on this machine, not the one the command was typed on
    # (TVMFFI_KEPT: another place for that copy, tests/test_gpu_stage.py; DRY makes the copy too, and unpacks nothing)
    local kept=${TVMFFI_KEPT:-/tmp/tvmffi-in.tgz} stage_cache="${STAGE_DIR:-.stage}/cache/tvmffi.tgz"
    [ ! -f "$stage_cache" ] || [ -f "$kept" ] || { cp "$stage_cache" "$kept" && echo "[device.sh] JIT cache kept: $kept"; }
    if [ ! -f /tmp/jobs/rmodels.pid ]; then
      have book.tar.xz && have common.tar.xz || { echo "[device.sh] notebook tools not unpacked yet"; return 0; }
      # a copy (lib and data: the cards live in data/models): the device tool re-copies the tree under a running job
      job rmodels "cd $REPO
rm -rf /tmp/sbtree; mkdir -p /tmp/sbtree; cp -r $REPO/lib $REPO/data /tmp/sbtree/; cp $REF_PLAN /tmp/ref-plan.json
export PYTHONPATH=/tmp/sbtree/lib:\$PYTHONPATH SERVEBOOK_HOME=/tmp/sbtree
for n in ${REF_LAYERS:-2 3 5 13}; do python3 -m servebook.cli model build kimi-k2.5 --layers \$n --weights dummy --quant card --out /tmp/models/kimi-\${n}L-int4 & done; wait"
    fi
    [ -f /tmp/jobs/ref.pid ] && return 0
    engines_in ${REF_TOGETHER:+both} sglang || { echo "[device.sh] engines not unpacked yet"; return 0; }
    [ -n "$DRY" ] || [ -d /tmp/runs/local-vm ] || { [ -d .devout/runs ] && cp -r .devout/runs/. /tmp/runs/ && echo "[device.sh] resumed the carried run"; }
    local cache="${TVMFFI_CACHE:-$kept}"   # carry .stage/cache in any call before the one that starts the job
    [ -f "$cache" ] || cache=$kept; [ -f "$cache" ] || cache=$stage_cache   # a TVMFFI_CACHE not found: the carried one
    if [ ! -f "$cache" ]; then echo "[device.sh] no JIT cache on this machine (${TVMFFI_CACHE:+TVMFFI_CACHE=$TVMFFI_CACHE not found; }none at $kept or $stage_cache): SGLang's first start compiles its kernels (400-540 s seen); carry .stage/cache in an earlier call to skip that"
    elif [ -n "$DRY" ]; then echo "[device.sh] SGLang's JIT cache would be carried in ($cache)"
    else mkdir -p ~/.cache && tar xzf "$cache" -C ~/.cache && echo "[device.sh] SGLang's JIT cache carried in ($cache)"
    fi
    # REF_TOGETHER=1: the whole plan in one pass once both engines are in, batches in the plan's order with the engines
    # mixed (ref-plan-vllm2.json: SGLang's JIT warm-up on a small slice beside vLLM's first starts, which compile too)
    if [ -n "${REF_TOGETHER:-}" ]; then
      job ref "cd /tmp/sbtree   # not the tree: the device tool replaces it under a running job (a process whose directory vanished failed to load torch)
while [ ! -f /tmp/jobs/rmodels.done ]; do sleep 2; done
export PYTHONPATH=/tmp/sbtree/lib:\$PYTHONPATH SERVEBOOK_HOME=/tmp/sbtree
export SERVEBOOK_PYTHON_VLLM=/tmp/py-vllm
$P run --plan $plan $runs --budget-gb 150 --ready-timeout 900
RD=\$(ls -d /tmp/runs/*/$RUN_ID | head -1)
$P more-starts --plan $plan --run-dir \$RD --decided-pct 5 --out /tmp/ref-more.json
$P run --plan /tmp/ref-more.json $runs --ready-timeout 600
du -sh ~/.cache/* 2>/dev/null; (cd ~/.cache && tar czf /tmp/tvmffi.tgz tvm-ffi); ls -l /tmp/tvmffi.tgz"
      return 0
    fi
    job ref "cd /tmp/sbtree   # not the tree: the device tool replaces it under a running job (a process whose directory vanished failed to load torch)
while [ ! -f /tmp/jobs/rmodels.done ]; do sleep 2; done
export PYTHONPATH=/tmp/sbtree/lib:\$PYTHONPATH SERVEBOOK_HOME=/tmp/sbtree
$P run --plan $plan --engines sglang $runs --budget-gb 150 --ready-timeout 900
RD=\$(ls -d /tmp/runs/*/$RUN_ID | head -1)
$P more-starts --plan $plan --engines sglang --run-dir \$RD --decided-pct 5 --out /tmp/ref-more-sglang.json
$P run --plan /tmp/ref-more-sglang.json --engines sglang $runs --ready-timeout 600
du -sh ~/.cache/* ~/.triton 2>/dev/null; (cd ~/.cache && tar czf /tmp/tvmffi.tgz tvm-ffi); ls -l /tmp/tvmffi.tgz
if grep -q '\"engine\": \"vllm\"' /tmp/ref-plan.json; then   # the plan's vLLM servers once vLLM is unpacked
  while [ ! -x /tmp/py-vllm ]; do sleep 5; done
  export SERVEBOOK_PYTHON_VLLM=/tmp/py-vllm
  $P run --plan $plan --engines vllm $runs --budget-gb 150 --ready-timeout 600
  RD=\$(ls -d /tmp/runs/*/$RUN_ID | head -1)   # again: a plan of vLLM servers only creates the run here
  $P more-starts --plan $plan --engines vllm --run-dir \$RD --decided-pct 5 --out /tmp/ref-more-vllm.json
  $P run --plan /tmp/ref-more-vllm.json --engines vllm $runs --ready-timeout 600
fi"
}
case "$step" in
  ref) do_ref; do_wait ;;
  profile) do_profile; do_wait ;;
  check) do_check; do_wait ;;
  more) do_more; do_wait ;;
  one) do_one; do_wait ;;
  trust) do_trust; do_wait ;;
  all) [ -f /tmp/jobs/all.pid ] || do_all; do_wait ;;
  restart) do_restart; do_wait ;;
  prep) do_prep ;;
  main) do_main ;;
  auto) [ -f /tmp/jobs/prep.pid ] || do_prep; [ -f /tmp/jobs/main.pid ] || do_main; do_wait ;;
  wait) do_wait ;;
esac
[ -n "$DRY" ] && exit 0
progress
snap
