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
# uv installs no bytecode (compiling all 17,000 modules of the environment took almost 3 min on 2 busy cores); the first
# process that imports a module writes its bytecode, and every later one reads it. A shell that sets
# PYTHONDONTWRITEBYTECODE would have every kernel and server of the book compile torch and transformers again, so the
# recipes here run without it (__pycache__ is ignored by git).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: book html test env book-env test-env model clean help

help:
	@echo "make book   - create the environment if missing, build the embedded model, run every chapter, render $(OUT)"
	@echo "make test   - the full test suite, in $(JOBS) processes (JOBS=1: one)"
	@echo "make html   - re-render the newest run as the book (RUN=DIR for another, e.g. RUN=data/runs/h200x2-book)"
	@echo "make env    - create/refresh the environment ($(VENV)), JupyterLab included"
	@echo "             (installs with uv, put into $(VENV) by pip; INSTALLER=pip installs with pip alone)"

# Three levels of the same environment: what the book needs (servebook and its dependencies), on top of it what the
# tests need, and on top of that JupyterLab. `make book` on a fresh clone installs only the first, `make test` the second.
#
# The installer is uv (INSTALLER=uv, the default), put into the environment by pip: it resolves, downloads and unpacks
# in parallel and installs the same versions pip would; on a 2-core machine the book's environment took 4 min with pip
# and under 1 min with uv. INSTALLER=pip installs with pip alone, and so does a machine where uv cannot be had or fails
# (uv reads the system's certificate store, --system-certs, as pip does here).
# torch first: where the machine carries a CPU wheel of torch (CI), it is taken instead of a multi-GB CUDA build.
INSTALLER ?= uv
comma := ,
define install
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing servebook$(1) and its dependencies into $(VENV) (first time: a minute or two) ..."
	@pip="$(PY) -m pip install -q"; inst="$$pip"; \
	 if [ "$(INSTALLER)" = uv ]; then \
	   if test -x $(VENV)/bin/uv || $(PY) -m pip install -q --disable-pip-version-check uv; then \
	     inst="$(VENV)/bin/uv pip install -q --system-certs --python $(PY)"; \
	   else echo "uv could not be installed: installing with pip (slower)"; fi; \
	 fi; \
	 tag=$$($(PY) -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'); \
	 wheel=$$(ls $(TORCH_WHEELS)/torch-*-$$tag-$$tag-*.whl 2>/dev/null | sort | tail -1); \
	 if $(PY) -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then torch=""; echo "torch already installed"; \
	 elif [ -n "$$wheel" ]; then torch="$$wheel"; echo "torch from $$wheel"; \
	 else torch=torch; fi; \
	 { [ -z "$$torch" ] || $$inst "$$torch"; } && $$inst -e ".$(1)" || { \
	   [ "$$inst" != "$$pip" ] && echo "uv failed (above): installing with pip (slower)" && \
	   { [ -z "$$torch" ] || $$pip "$$torch"; } && $$pip -e ".$(1)"; }
endef

$(VENV)/.installed-book: pyproject.toml
	$(call install,)
	@touch $@

$(VENV)/.installed-test: pyproject.toml
	$(call install,[test])
	@touch $@ $(VENV)/.installed-book

$(VENV)/.installed: pyproject.toml
	$(call install,[test$(comma)lab])
	@touch $@ $(VENV)/.installed-test $(VENV)/.installed-book


env: $(VENV)/.installed

book-env: $(VENV)/.installed-book

test-env: $(VENV)/.installed-test

model: book-env
	$(PY) -c "from servebook.embedded import build_embedded_model; build_embedded_model()"

book: book-env
	$(VENV)/bin/servebook book --host $(HOST) --engine $(ENGINE) --model $(MODEL) --out $(OUT) --runs $(RUNS) $(if $(RECORD),--record) $(ARGS)

html: book-env
	@run="$(RUN)"; test -n "$$run" || run=$$(ls -td $(RUNS)/*/*/ 2>/dev/null | head -1); \
	test -n "$$run" || { echo "no run under $(RUNS)/: run make book first (or make html RUN=data/runs/h200x2-book)"; exit 1; }; \
	$(VENV)/bin/servebook html $$run --out $(OUT)

test: test-env
	$(PY) -m pytest -q -ra $(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile --no-loadscope-reorder) $(ARGS)

clean:
	rm -rf build
