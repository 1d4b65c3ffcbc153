#!/usr/bin/env bash
# Execute the committed books' chapters again on their recorded tables (measure=False: nothing is started or measured)
# and render them into rendered/, then the front page. CPU only; chapter 02 asks the prepared engine environments
# (servebook engines add sglang==0.5.9 sglang==0.5.16 sglang==0.5.23 vllm==0.26.0 ...), the rest reads tables; a book's
# chapter 02 is refused where a version it answered from the engine's code has only a static-only environment here.
#   bash tools/rerender.sh [--dry] [PHASE]
#                                      PHASE: 02 (chapter 02 of every book), rest (01, 03-06 and the front page), all;
#                                      trust (the h200x1-trust book alone; then `front`);
#                                      rest-live and rest-book split rest in two halves to run side by side (then `front`);
#                                      06 (chapter 06 of every book, then the front page: after a change to the findings' words)
#                                      05 (chapter 05 of every book, then the front page: after a change to chapter 05 alone)
#                                      front (the front page alone)
#                                      --dry: print each command, one a line, and run nothing
# Each book's parameters are the ones it was recorded with, read from the run (see chapter_args below); every phase
# renders through `render BOOK CHAPTERS`. Commit the code first, so the runs record a
# clean revision.
set -uo pipefail
cd "$(dirname "$0")/.."
SB=${SB:-.venv/bin/servebook}; dry=
if [ "${1:-}" = --dry ]; then dry=1; shift; fi
phase=${1:-all}
case $phase in 02|rest|all|trust|rest-live|rest-book|06|05|front) ;;
  *) echo "tools/rerender.sh: unknown phase '$phase'; phases: 02 rest all trust rest-live rest-book 06 05 front (optionally after --dry)" >&2
     exit 2;;
esac
WHATIF=whatif-rtx-pro-6000-sglang-0.5.9
# every book, in the order the one-chapter phases (05, 06) render them
BOOKS=(h200x1-live h200x2-live h200x1-trust h200x1-book h200x2-book $WHATIF h200x1-ref)

# The rendered folder of a book (data/runs/BOOK).
out_of() { case $1 in h200x1-book|h200x2-book) echo "rendered/${1%-book}";; *) echo "rendered/$1";; esac; }

# The parameters of each chapter are the ones its recorded execution used: `servebook html --refresh` reads them from
# the run (servebook.recorded.recorded_parameters: the execution that measured the chapter, else its executed notebook) and
# says which it reused. chapter_args BOOK CHAPTER holds, into A, only what the run does not record in one place:
chapter_args() {
  case $1:$2 in
    # "this host" of the embedded H200 books is the H200 host's transformers 5.17.0: an interpreter of this machine
    # (a path relative to the repository, so the page names no folder of the machine that rendered it)
    h200x1-book:02|h200x2-book:02) A=(-p engine_python="${TF_HOST_PYTHON:-}");;
    # chapter 03 measured over several resumptions, each with its own list: the union of the backends they measured
    h200x1-live:03) A=(-p "backends=sglang: ; vllm: FLASHMLA,TRITON_MLA,FLASH_ATTN_MLA,FLASHINFER_MLA,CUTLASS_MLA");;
    h200x1-trust:03) A=(-p "backends=sglang: triton,flashmla,flashinfer; vllm: FLASHMLA,TRITON_MLA,FLASHINFER_MLA,CUTLASS_MLA");;
    # the last resumption that measured chapter 05 measured SGLang alone (compare_engines empty); vLLM's rows are earlier
    h200x1-live:05) A=(-p compare_engines=vllm);;
    *) A=();;
  esac
}

step() {
  if [ -n "$dry" ]; then printf '%q ' "$SB" html --cell-timeout 1800 "$@"; echo; return; fi
  echo "[rerender $(date +%T)] $*"; "$SB" html --cell-timeout 1800 "$@" 2>&1 | grep -vE 'WARNING \| Kernel is running|KeyboardInterrupt caught' | tail -3
}

# render BOOK CHAPTERS: chapters CHAPTERS (a comma list) of data/runs/BOOK executed again with BOOK's parameters, into its
# rendered folder. Chapter 06 of the embedded H200 books refreshes their findings (--refresh-findings).
render() {
  local book=$1 chapters=$2 c args
  case $book:$chapters in h200x1-book:06|h200x2-book:06) args=(--refresh-findings);; *) args=(--refresh "$chapters");; esac
  for c in ${chapters//,/ }; do chapter_args "$book" "$c"; args+=("${A[@]}"); done
  step "data/runs/$book" "${args[@]}" --out "$(out_of "$book")"
}

if [ "$phase" = 02 ] || [ "$phase" = all ]; then
  # the embedded books' matrix sized as the embedded book now asks it (servebook.params.MODEL_DEFAULTS)
  # "this host" of the embedded H200 books is the H200 host's transformers 5.17.0: read it from an interpreter that has that
  # version (TF_HOST_PYTHON), never this machine's own transformers
  TF_HOST_PYTHON=${TF_HOST_PYTHON:-.venv-host-tf/bin/python}
  if [ -x "$TF_HOST_PYTHON" ] && "$TF_HOST_PYTHON" -c "import transformers as t; assert t.__version__ == '5.17.0'"; then
    for b in h200x1 h200x2; do render $b-book 02; done
  else
    echo "[rerender] h200x1-book, h200x2-book chapter 02 skipped: no python with transformers==5.17.0 and torch at $TF_HOST_PYTHON"
    echo "           (python3 -m venv .venv-host-tf && .venv-host-tf/bin/pip install transformers==5.17.0 torch: the H200 host's"
    echo "           version, at a path relative to the repository, which the page shows; TF_HOST_PYTHON names another)"
  fi
  for b in h200x1-live h200x2-live $WHATIF; do render $b 02; done
fi
case $phase in rest|all|rest-live) live=1;; *) live=;; esac
case $phase in rest|all|rest-book) books=1;; *) books=;; esac
if [ -n "$live" ]; then
  for c in 01 03 05 06; do render h200x1-live $c; done
  for c in 01,04 03 05 06; do render h200x2-live $c; done
fi
if [ -n "$live" ] || [ "$phase" = trust ]; then
  for c in 01 03 05 06; do render h200x1-trust $c; done
fi
if [ -n "$books" ]; then
  for b in h200x1-book h200x2-book; do render $b 01,03,04,05; render $b 06; done
  render $WHATIF 01,03,04,05,06
  render h200x1-ref 05,06      # the profile run: a run of profiles only has chapters 05 and 06 (servebook.profile.book)
fi
if [ "$phase" = 05 ] || [ "$phase" = 06 ]; then
  for b in "${BOOKS[@]}"; do render "$b" "$phase"; done
fi
case $phase in rest|all|front|05|06)
  if [ -n "$dry" ]; then printf '%q ' "$SB" front rendered/; echo; else "$SB" front rendered/; fi;;
esac
