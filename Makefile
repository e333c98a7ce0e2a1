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

# The venv's own pip (23.2 with Python 3.11) spends most of its time judging every file on every package's index
# page: pip 26 (constraints.txt) installs the same versions in 20 s instead of 35. It installs without compiling
# every module of every package (35 of the old 70 s, for thousands of torch modules no command imports); importing
# what privpix's commands use compiles and keeps those (about 8 s), anything else the first time it is imported.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt \
	  -e '.[neural,compare,cluster,dev]'
	$(BIN)/python -c "import privpix.cli, privpix.evaluation.bench, torch, sklearn.linear_model, skimage.transform, \
	  scipy.stats, matplotlib.pyplot, pandas, pyarrow.parquet, dp_accounting, distributed, pytest, xdist, hypothesis"
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
