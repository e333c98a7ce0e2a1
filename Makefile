# Two entry points (see README): `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privpix-installed

.PHONY: setup demo test test-fast lint docs clean browser

# Python may keep the bytecode it compiles, for every command run from here, even where PYTHONDONTWRITEBYTECODE is
# set (this machine's image sets it): otherwise each process would compile privpix, torch and numpy again (0.25 s
# for privpix alone, seconds with torch).
unexport PYTHONDONTWRITEBYTECODE

# uv installs privpix and its 118 dependencies, fetched from the index, in 6 s where pip 26 took 23 (uv downloads and
# unpacks in parallel); the venv is made without pip (0.1 s, not 4 s for ensurepip), and uv puts pip 26.3 in it for
# users. Nothing is compiled to bytecode up front (35 s for thousands of torch modules no command imports): each
# module is compiled, and kept, the first time a command or a test imports it. uv reads neither pip's configuration
# nor PIP_* variables, so the wheel folder pip is told of (PIP_FIND_LINKS, or pip's find-links setting: where a
# machine keeps the CPU build of torch) is passed on. Where uv cannot be had or fails, pip does the same install.
# Then two imports side by side compile what the commands and the tests' collection import (2,700 modules), once, in
# 7 s: otherwise both test workers compile all of it at the same time at start-up (a collection of 17 s, not 6).
# The compiled kernels (numba, cached beside their module): one draw of each exact sampler compiles and caches all
# four (3 s, beside torch's import), and a shrink of a float64 and a float32 image the resize's two (2 s, beside the
# other imports: the two sides then take about 7 s each), once; otherwise every process of the suite that draws exact
# noise or shrinks a face first compiles them itself until one has written the cache.
COMPILE_SAMPLERS := from privpix.privacy import noise as n; r = n.make_rng(secure=True); n.discrete_laplace(r, 3.0, 2); \
  n.discrete_gaussian(r, 3.0, 2); n.randomized_response(r, [0, 1], 2, 1.0); n.exponential_mechanism(r, [0.0, 1.0], 1.0, 1.0)
COMPILE_RESIZE := import numpy as np; from privpix.data.resize import resize; resize(np.zeros((9, 9)), (3, 3)); \
  resize(np.zeros((9, 9), np.float32), (3, 3))
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
EXTRAS := .[neural,compare,cluster,dev]
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv --without-pip $(VENV)
	@if $(PYTHON) -m pip install --quiet --disable-pip-version-check --upgrade --target $(VENV)/uv \
	    -c constraints.txt uv >/dev/null 2>&1 \
	  && $(VENV)/uv/bin/uv pip install --quiet --python $(BIN)/python -c constraints.txt \
	    $(addprefix --find-links ,$(FIND_LINKS)) -e '$(EXTRAS)' pip; then :; else \
	  echo "uv was not available or failed: installing with pip"; \
	  $(BIN)/python -m ensurepip --upgrade >/dev/null && \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt --upgrade pip && \
	  $(BIN)/pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '$(EXTRAS)'; fi
	$(BIN)/python -c "import torch; $(COMPILE_SAMPLERS)" & $(BIN)/python -c "import privpix.cli, privpix.evaluation.bench, \
	  scipy.stats, scipy.ndimage, pandas, sklearn.linear_model, matplotlib.pyplot, skimage.transform, _pytest.python, \
	  xdist, hypothesis; $(COMPILE_RESIZE)"; wait
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/privpix demo --output demo-output

# Headless Chromium renders the benchmark report in a test. Installed from Debian when we may (root + apt);
# otherwise that one test skips with its reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian chromium for the report rendering test"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } || \
	      echo "note: could not install chromium; the report rendering test will skip"; \
	  else echo "note: chromium not found and not installable here (needs root and apt-get); that test will skip"; fi; }

# The full suite, one xdist worker per core (each with one BLAS/OpenMP thread: tests/conftest.py), with the 25
# slowest tests listed at the end. mypy ([tool.mypy]: the hints privpix ships must hold) is one of its tests
# (tests/test_typing.py), so that it runs beside the others instead of before them.
# Setup and the browser's install (apt, where it is missing) run side by side: pip keeps one core busy.
# worksteal: a worker that runs out takes half of the other's queue (same tree, same machine, 2026-11-27: 214 s,
# against 226 s for one test at a time (loadgroup) and 250 s for load, which hands out a quarter of the suite up front).
test:
	@$(MAKE) --no-print-directory -j2 setup browser
	$(BIN)/ruff check src tests benchmarks docs
	@$(call in_memory_tmp,$(BIN)/python -m pytest -q -n auto --dist worksteal --durations=25)

# The inner loop: everything but the tests marked slow or integration (pyproject.toml lists the markers).
test-fast: $(STAMP)
	@$(call in_memory_tmp,$(BIN)/python -m pytest -q -n auto --dist loadscope -m "not slow and not integration")

# Runs $(1) with its temporary files (pytest's tmp_path, TMPDIR) in memory where /dev/shm is a writable tmpfs, and
# removes them after. The release writer syncs every file it publishes: on this machine's disk, shared by both
# workers, 2,500 fsyncs took 8.7 of a test's 12.9 s, with the cores idle. The code paths are the same on tmpfs.
define in_memory_tmp
tmp=$$(mktemp -d /dev/shm/privpix-tests.XXXXXX 2>/dev/null || mktemp -d); echo "$(1)  (temporary files in $$tmp)"; \
TMPDIR=$$tmp $(1) --basetemp=$$tmp/pytest; rc=$$?; rm -rf "$$tmp"; exit $$rc
endef

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (docs/ and the API reference from the docstrings) into site/; any warning fails it.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) demo-output .pytest_cache site
