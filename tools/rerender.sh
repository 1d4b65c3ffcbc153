#!/usr/bin/env bash
# Execute the committed books' chapters again on their recorded tables (measure=False: nothing is started or measured)
# and render them into rendered/, then the front page. CPU only; chapter 02 asks the prepared engine environments
# (servebook engines add sglang==0.5.9 sglang==0.5.16 sglang==0.5.23 vllm==0.26.0 ...), the rest reads tables.
#   bash tools/rerender.sh [PHASE]     PHASE: 02 (chapter 02 of every book), rest (01, 03-06 and the front page), all;
#                                      trust (the h200x1-trust book alone; then `front`);
#                                      rest-live and rest-book split rest in two halves to run side by side (then `front`);
#                                      06 (chapter 06 of every book, then the front page: after a change to the findings' words)
#                                      05 (chapter 05 of every book, then the front page: after a change to chapter 05 alone)
# Each book's parameters are the ones it was recorded with (its RECORDED.md); commit the code first, so the runs record
# a clean revision.
set -uo pipefail
cd "$(dirname "$0")/.."
SB=${SB:-.venv/bin/servebook}; phase=${1:-all}
EA='sglang: --cuda-graph-max-bs 16 --sampling-backend pytorch; vllm: --max-num-seqs 16'
H200_02=(-p engine=sglang==0.5.16 -p model=kimi-k2.5 -p profile=h200 -p compare_versions=0.5.9,0.5.16 -p vllm_versions=0.26.0
         -p matrix_profiles=h200,b200,rtx-pro-6000 -p matrix_models=kimi-k2.5,llama-3.1-8b)
WHATIF=data/runs/whatif-rtx-pro-6000-sglang-0.5.9
WHATIF_P=(-p engine=sglang==0.5.9 -p model=kimi-k2.5 -p profile=rtx-pro-6000)
step() { echo "[rerender $(date +%T)] $*"; "$SB" html --cell-timeout 1800 "$@" 2>&1 | grep -vE 'WARNING \| Kernel is running|KeyboardInterrupt caught' | tail -3; }
if [ "$phase" = 02 ] || [ "$phase" = all ]; then
  # the embedded books' matrix sized as the embedded book now asks it (servebook.params.MODEL_DEFAULTS)
  # "this host" of the embedded H200 books is the H200 host's transformers 5.17.0: read it from an interpreter that has that
  # version (TF_HOST_PYTHON), never this machine's own transformers
  if [ -x "${TF_HOST_PYTHON:-}" ] && "$TF_HOST_PYTHON" -c "import transformers as t; assert t.__version__ == '5.17.0'"; then
    for b in h200x1 h200x2; do
      step data/runs/$b-book --refresh 02 -p engine_python="$TF_HOST_PYTHON" -p vllm_versions=0.26.0 -p matrix_profiles=b200,rtx-pro-6000 --out rendered/$b
    done
  else
    echo "[rerender] h200x1-book, h200x2-book chapter 02 skipped: set TF_HOST_PYTHON to a python with transformers==5.17.0 and torch"
    echo "           (python3 -m venv V && V/bin/pip install transformers==5.17.0 torch), the H200 host's version"
  fi
  step data/runs/h200x1-live --refresh 02 "${H200_02[@]}" --out rendered/h200x1-live
  step data/runs/h200x2-live --refresh 02 "${H200_02[@]}" --out rendered/h200x2-live
  step $WHATIF --refresh 02 "${WHATIF_P[@]}" -p matrix_models=kimi-k2.5,deepseek-v3,llama-3.1-8b,gpt-oss-120b --out rendered/whatif-rtx-pro-6000-sglang-0.5.9
fi
case $phase in rest|all|rest-live) live=1;; *) live=;; esac
case $phase in rest|all|rest-book) books=1;; *) books=;; esac
if [ -n "$live" ]; then
  R=data/runs/h200x1-live
  step $R --refresh 01 --out rendered/h200x1-live
  step $R --refresh 03 -p compare_engines=vllm -p model=$R/models/kimi-slice -p "engine_args=$EA" \
    -p "backends=sglang: ; vllm: FLASHMLA,TRITON_MLA,FLASH_ATTN_MLA,FLASHINFER_MLA,CUTLASS_MLA" --out rendered/h200x1-live
  step $R --refresh 05 -p compare_engines=vllm -p "engine_args=$EA" -p max_tokens=128 -p input_len=128 -p ceiling_sglang_version=0.5.16 --out rendered/h200x1-live
  step $R --refresh 06 --compare-with data/runs/h200x2-live --out rendered/h200x1-live
  R=data/runs/h200x2-live
  step $R --refresh 01,04 --out rendered/h200x2-live
  step $R --refresh 03 -p compare_engines=vllm -p model=$R/models/kimi-slice -p "engine_args=$EA" \
    -p "backends=sglang: triton,flashinfer,flashmla,cutlass_mla; vllm: FLASH_ATTN_MLA,FLASHMLA,TRITON_MLA,FLASHINFER_MLA,CUTLASS_MLA" --out rendered/h200x2-live
  step $R --refresh 05 -p compare_engines=vllm -p "engine_args=$EA" --out rendered/h200x2-live
  step $R --refresh 06 --compare-with data/runs/h200x1-book --out rendered/h200x2-live
fi
if [ -n "$live" ] || [ "$phase" = trust ]; then
  R=data/runs/h200x1-trust
  step $R --refresh 01 --out rendered/h200x1-trust
  step $R --refresh 03 -p engine=sglang -p compare_engines=vllm -p model=$R/models/kimi-slice -p "engine_args=$EA" -p modes=graph -p runs=3 \
    -p starts=2 -p max_tokens=64 -p "backends=sglang: triton,flashmla,flashinfer; vllm: FLASHMLA,TRITON_MLA,FLASHINFER_MLA,CUTLASS_MLA" --out rendered/h200x1-trust
  step $R --refresh 05 -p engine=sglang -p compare_engines=vllm -p model=$R/models/kimi-slice -p "engine_args=$EA" -p starts=2 -p max_tokens=64 \
    -p input_len=32 -p profile_steps=0 -p max_concurrency=16 -p ceiling_sglang_version=0.5.16 --out rendered/h200x1-trust
  step $R --refresh 06 --compare-with data/runs/h200x1-live --out rendered/h200x1-trust
fi
if [ -n "$books" ]; then
  step data/runs/h200x1-book --refresh 01,03,04,05 --out rendered/h200x1
  step data/runs/h200x1-book --refresh-findings --compare-with data/runs/h200x2-book,data/runs/h200x1-compile --out rendered/h200x1
  step data/runs/h200x2-book --refresh 01,03,04,05 --out rendered/h200x2
  step data/runs/h200x2-book --refresh-findings --compare-with data/runs/h200x2-probe/1gpu,data/runs/h200x2-probe/2gpu --out rendered/h200x2
  step $WHATIF --refresh 01,03,04,05,06 "${WHATIF_P[@]}" --out rendered/whatif-rtx-pro-6000-sglang-0.5.9
fi
if [ "$phase" = 05 ]; then
  step data/runs/h200x1-live --refresh 05 -p compare_engines=vllm -p "engine_args=$EA" -p max_tokens=128 -p input_len=128 -p ceiling_sglang_version=0.5.16 --out rendered/h200x1-live
  step data/runs/h200x2-live --refresh 05 -p compare_engines=vllm -p "engine_args=$EA" --out rendered/h200x2-live
  step data/runs/h200x1-trust --refresh 05 -p engine=sglang -p compare_engines=vllm -p model=data/runs/h200x1-trust/models/kimi-slice -p "engine_args=$EA" \
    -p starts=2 -p max_tokens=64 -p input_len=32 -p profile_steps=0 -p max_concurrency=16 -p ceiling_sglang_version=0.5.16 --out rendered/h200x1-trust
  step data/runs/h200x1-book --refresh 05 --out rendered/h200x1
  step data/runs/h200x2-book --refresh 05 --out rendered/h200x2
  step $WHATIF --refresh 05 "${WHATIF_P[@]}" --out rendered/whatif-rtx-pro-6000-sglang-0.5.9
fi
if [ "$phase" = 06 ]; then
  step data/runs/h200x1-live --refresh 06 --compare-with data/runs/h200x2-live --out rendered/h200x1-live
  step data/runs/h200x2-live --refresh 06 --compare-with data/runs/h200x1-book --out rendered/h200x2-live
  step data/runs/h200x1-trust --refresh 06 --compare-with data/runs/h200x1-live --out rendered/h200x1-trust
  step data/runs/h200x1-book --refresh-findings --compare-with data/runs/h200x2-book,data/runs/h200x1-compile --out rendered/h200x1
  step data/runs/h200x2-book --refresh-findings --compare-with data/runs/h200x2-probe/1gpu,data/runs/h200x2-probe/2gpu --out rendered/h200x2
  step $WHATIF --refresh 06 "${WHATIF_P[@]}" --out rendered/whatif-rtx-pro-6000-sglang-0.5.9
fi
case $phase in rest|all|front|05|06) "$SB" front rendered/;; esac
