# servebook: `make book` runs the whole book on this machine, `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OUT ?= build/book
RUNS ?= runs
HOST ?= local
ENGINE ?= transformers
MODEL ?= embedded
ARGS ?=
JOBS ?= 2
RUN ?=
RECORD ?=
TORCH_WHEELS ?= /opt/wheels

.PHONY: book html test env book-env model clean help

help:
	@echo "make book   - create the environment if missing, build the embedded model, run every chapter, render $(OUT)"
	@echo "make test   - the full test suite, in $(JOBS) processes (JOBS=1: one)"
	@echo "make html   - re-render the newest run as the book (RUN=DIR for another, e.g. RUN=data/runs/h200x2-book)"
	@echo "make env    - create/refresh the environment ($(VENV))"

# Two levels of the same environment: what the book needs (servebook and its dependencies), and on top of it what
# the tests and JupyterLab need. `make book` on a fresh clone installs only the first.
comma := ,
define install
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing servebook$(1) and its dependencies into $(VENV) (first time: a few minutes) ..."
	@# torch first: where the machine carries a CPU wheel of torch (CI), take it instead of a multi-GB CUDA build
	@tag=$$($(PY) -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'); \
	 wheel=$$(ls $(TORCH_WHEELS)/torch-*-$$tag-$$tag-*.whl 2>/dev/null | sort | tail -1); \
	 if $(PY) -c 'import torch' 2>/dev/null; then echo "torch already installed"; \
	 elif [ -n "$$wheel" ]; then echo "torch from $$wheel"; $(PY) -m pip install -q "$$wheel"; \
	 else $(PY) -m pip install -q torch; fi
	$(PY) -m pip install -q -e ".$(1)"
endef

$(VENV)/.installed-book: pyproject.toml
	$(call install,)
	@touch $@

$(VENV)/.installed: pyproject.toml
	$(call install,[test$(comma)lab])
	@touch $@ $(VENV)/.installed-book


env: $(VENV)/.installed

book-env: $(VENV)/.installed-book

model: book-env
	$(PY) -c "from servebook.embedded import build_embedded_model; build_embedded_model()"

book: book-env
	$(VENV)/bin/servebook book --host $(HOST) --engine $(ENGINE) --model $(MODEL) --out $(OUT) --runs $(RUNS) $(if $(RECORD),--record) $(ARGS)

html: book-env
	@run="$(RUN)"; test -n "$$run" || run=$$(ls -td $(RUNS)/*/*/ 2>/dev/null | head -1); \
	test -n "$$run" || { echo "no run under $(RUNS)/: run make book first (or make html RUN=data/runs/h200x2-book)"; exit 1; }; \
	$(VENV)/bin/servebook html $$run --out $(OUT)

test: env
	$(PY) -m pytest -q -ra $(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile) $(ARGS)

clean:
	rm -rf build
