# Two entry points (see README): `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privpix-installed

.PHONY: setup demo test test-fast lint docs clean browser bytecode

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[neural,compare,cluster,dev]'
	touch $(STAMP)

setup: $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), every process would compile privpix's
# sources again: about 0.25 s of each command the tests and benchmarks run. Compiled here, only what changed.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q src

demo: $(STAMP) bytecode
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
# slowest tests listed at the end. mypy ([tool.mypy]) runs first: the hints privpix ships (py.typed) must hold.
test: $(STAMP) browser bytecode
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n auto --durations=25

# The inner loop: everything but the tests marked slow or integration (pyproject.toml lists the markers).
test-fast: $(STAMP) bytecode
	$(BIN)/python -m pytest -q -n auto --dist loadscope -m "not slow and not integration"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (docs/ and the API reference from the docstrings) into site/; any warning fails it.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) demo-output .pytest_cache site
