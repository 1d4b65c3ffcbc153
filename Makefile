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
# LOCKED=1 (the default) installs the versions in requirements.lock (the ones the suite passes with); LOCKED=0 the newest ones
# pyproject.toml allows. `make lock` refreshes the lock (UPGRADE=1: to the newest allowed versions).
LOCKED ?= 1
LOCK := requirements.lock
LOCK_PINS := locks/pins.txt
VENV_LATEST ?= .venv-latest
# uv installs no bytecode (compiling all 17,000 modules of the environment took almost 3 min on 2 busy cores); the first
# process that imports a module writes its bytecode, and every later one reads it. A shell that sets
# PYTHONDONTWRITEBYTECODE would have every kernel and server of the book compile torch and transformers again, so the
# recipes here run without it (__pycache__ is ignored by git).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: book html test env book-env test-env model clean help lock test-latest

help:
	@echo "make book   - create the environment if missing, build the embedded model, run every chapter, render $(OUT)"
	@echo "make test   - the full test suite, in $(JOBS) processes (JOBS=1: one)"
	@echo "make html   - re-render the newest run as the book (RUN=DIR for another, e.g. RUN=data/runs/h200x2-book)"
	@echo "make env    - create/refresh the environment ($(VENV)), JupyterLab included"
	@echo "             (installs with uv, put into $(VENV) by pip; INSTALLER=pip installs with pip alone)"
	@echo "             every level installs the locked versions ($(LOCK)); LOCKED=0: the newest pyproject.toml allows"
	@echo "make lock   - refresh $(LOCK) and $(LOCK_PINS) from pyproject.toml (UPGRADE=1: newest allowed versions;"
	@echo "             UPGRADE_PACKAGES=\"a b\": those packages only, e.g. what make test-latest passed with)"
	@echo "make test-latest - in $(VENV_LATEST): the newest versions pyproject.toml allows, the packages that differ from"
	@echo "             the lock, the fast tests and a smoke book (catches upstream releases; not part of .ci/run)"

# Three levels of the same environment: what the book needs (servebook and its dependencies), on top of it what the
# tests need, and on top of that JupyterLab. `make book` on a fresh clone installs only the first, `make test` the second.
#
# The installer is uv (INSTALLER=uv, the default), put into the environment by pip: it resolves, downloads and unpacks
# in parallel and installs the same versions pip would; on a 2-core machine the book's environment took 4 min with pip
# and under 1 min with uv. INSTALLER=pip installs with pip alone, and so does a machine where uv cannot be had or fails
# (uv reads the system's certificate store, --system-certs, as pip does here).
# torch first: where the machine carries a CPU wheel of torch (CI), it is taken instead of a multi-GB CUDA build.
# The lock is used as constraints (-c): a level installs only what it needs, at the locked versions. uv checks the
# lock's hashes; pip reads the same pins without them (locks/pins.txt: pip's hash mode refuses `-e .`).
# install(EXTRAS, VENV, FLAGS): FLAGS is "locked" (constraints) or "latest" (no constraints, --upgrade). Either way the
# torch installed first is held (a constraint on its version): --upgrade would otherwise replace the CPU wheel with the
# newest CUDA build from the index.
INSTALLER ?= uv
comma := ,
define install
	@test -x $(2)/bin/python || $(PYTHON) -m venv $(2)
	@echo "installing servebook$(1) and its dependencies into $(2) ($(3) versions; first time: a minute or two) ..."
	@py=$(2)/bin/python; pip="$$py -m pip install -q"; inst="$$pip"; cons=""; pcons=""; up=""; \
	 if [ "$(3)" = locked ]; then cons="-c $(LOCK)"; pcons="-c $(LOCK_PINS)"; else up="--upgrade"; fi; \
	 if [ "$(INSTALLER)" = uv ]; then \
	   if test -x $(2)/bin/uv || $$py -m pip install -q --disable-pip-version-check uv; then \
	     inst="$(2)/bin/uv pip install -q --system-certs --python $$py"; \
	   else echo "uv could not be installed: installing with pip (slower)"; fi; \
	 fi; \
	 tag=$$($$py -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'); \
	 wheel=$$(ls $(TORCH_WHEELS)/torch-*-$$tag-$$tag-*.whl 2>/dev/null | sort | tail -1); \
	 if $$py -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then torch=""; echo "torch already installed"; \
	 elif [ -n "$$wheel" ]; then torch="$$wheel"; echo "torch from $$wheel"; \
	 else torch=torch; fi; \
	 hold="$(2)/.torch-held.txt"; \
	 held() { $$py -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' >"$$hold"; }; \
	 { [ -z "$$torch" ] || $$inst $$cons "$$torch"; } && held && $$inst $$cons -c "$$hold" $$up -e ".$(1)" || { \
	   [ "$$inst" != "$$pip" ] && echo "uv failed (above): installing with pip (slower)" && \
	   { [ -z "$$torch" ] || $$pip $$pcons "$$torch"; } && held && $$pip $$pcons -c "$$hold" $$up -e ".$(1)"; }
endef
installed_as = $(if $(filter 0,$(LOCKED)),latest,locked)

$(VENV)/.installed-book: pyproject.toml $(LOCK)
	$(call install,,$(VENV),$(installed_as))
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(LOCK)
	$(call install,[test],$(VENV),$(installed_as))
	@touch $@ $(VENV)/.installed-book

$(VENV)/.installed: pyproject.toml $(LOCK)
	$(call install,[test$(comma)lab],$(VENV),$(installed_as))
	@touch $@ $(VENV)/.installed-test $(VENV)/.installed-book

lock:
	VENV=$(VENV) TORCH_WHEELS=$(TORCH_WHEELS) bash tools/lock.sh

# Upstream drift: the newest versions pyproject.toml allows, in an environment of their own (the lock's stays as it is).
# Prints the packages that differ from the lock, runs the fast tests and a smoke book, and says what failed.
test-latest:
	@rm -f $(VENV_LATEST)/.installed-latest
	$(call install,[test],$(VENV_LATEST),latest)
	@$(VENV_LATEST)/bin/python tools/lockdiff.py $(LOCK)
	@rc=0; skip=""; \
	 if [ ! -x /usr/bin/chromium ]; then skip="--ignore tests/test_rendered_book.py"; \
	   echo "no /usr/bin/chromium: tests/test_rendered_book.py left out (a tool of this machine, not a version; apt-get install -y chromium)"; fi; \
	 echo "== fast tests (-m 'not slow and not envs and not drills') with the newest versions =="; \
	 $(VENV_LATEST)/bin/python -m pytest -q -ra -m "not slow and not envs and not drills" -p no:cacheprovider $$skip \
	   $(if $(filter-out 1,$(JOBS)),-n $(JOBS)) $(ARGS) || rc=1; \
	 echo "== smoke book with the newest versions =="; \
	 $(VENV_LATEST)/bin/servebook book --smoke --out build/book-latest --runs build/runs-latest || rc=$$((rc+2)); \
	 case $$rc in 0) echo "test-latest: the newest allowed versions pass the fast tests and the smoke book";; \
	   1) echo "test-latest: FAILED: the fast tests (listed above); the smoke book passed";; \
	   2) echo "test-latest: FAILED: the smoke book (its chapters above); the fast tests passed";; \
	   *) echo "test-latest: FAILED: the fast tests and the smoke book (above)";; esac; \
	 exit $$rc


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
