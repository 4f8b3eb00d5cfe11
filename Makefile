# decklog — two commands for a newcomer: `make run` and `make test`.
# Both create .venv on first use and install what they need; nothing else is required.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: run test check lint format typecheck bench experiment lab browser monitoring clean api-schema

$(VENV)/.runtime: pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip >/dev/null 2>&1 || true
	$(PIP) install --quiet -e .
	@touch $@

$(VENV)/.dev: $(VENV)/.runtime pyproject.toml setup.py
	$(PIP) install --quiet -e '.[dev,bench]'
	@touch $@

## run: start decklog on embedded defaults (SQLite in the CLI's default data directory, $XDG_DATA_HOME/decklog,
## which ./data links to; local sandbox workspace without Slack credentials), so that `decklog scopes` run from any
## directory sees what the sandbox did. DECKLOG_DATA_DIR=DIR make run serves DIR instead (then give the CLI the same).
run: $(VENV)/.runtime
	@if [ -z "$${DECKLOG_DATA_DIR:-}" ]; then \
	  dir=$$($(PY) -c 'from decklog.bot.settings import default_data_dir; print(default_data_dir())') && \
	  mkdir -p "$$dir" && \
	  if [ -L data ] || [ ! -e data ]; then ln -sfn "$$dir" data; \
	  else echo "make run: ./data is a directory left by an older make run and is no longer used; decklog keeps its \
	data in $$dir, where the CLI looks (move ./data there, or set DECKLOG_DATA_DIR for both)" >&2; fi; \
	fi
	DECKLOG_HOST=$${DECKLOG_HOST:-$(HOST)} DECKLOG_PORT=$${DECKLOG_PORT:-$(PORT)} $(VENV)/bin/decklog serve

## browser: install Debian's chromium (+ an emoji font, for readable screenshots) for the sandbox browser tests
## (best effort; the tests skip with a reason without it)
BROWSER_PACKAGES ?= chromium fonts-noto-color-emoji
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  export DEBIAN_FRONTEND=noninteractive; \
	  (apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null 2>&1)) || \
	  echo "note: could not install chromium; browser tests will be skipped"; }

## monitoring: install Debian's prometheus and prometheus-alertmanager for the tests that run a real monitoring stack
## (best effort; without them those tests skip with a reason, and fail under CI=true)
MONITORING_PACKAGES ?= prometheus prometheus-alertmanager
monitoring:
	@{ command -v prometheus >/dev/null 2>&1 && command -v prometheus-alertmanager >/dev/null 2>&1; } || { \
	  export DEBIAN_FRONTEND=noninteractive; \
	  (apt-get install -y -qq --no-install-recommends $(MONITORING_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && \
	    apt-get install -y -qq --no-install-recommends $(MONITORING_PACKAGES) >/dev/null 2>&1)) || \
	  echo "note: could not install $(MONITORING_PACKAGES); the tests that run them will be skipped"; }

## test: the whole suite (unit, end-to-end over loopback fakes, reliability, browser, real Alertmanager), on TEST_WORKERS processes,
## each test file whole on one of them (TEST_WORKERS=0 runs it in this process)
TEST_WORKERS ?= 2
test: $(VENV)/.dev browser monitoring
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## typecheck: mypy sees the product as the installed namespace (decklog.core, …) through a link in build/
typecheck: $(VENV)/.dev
	@mkdir -p build/mypy && ln -sfn ../.. build/mypy/decklog
	MYPYPATH=build/mypy $(VENV)/bin/mypy -p decklog.core -p decklog.bot -p decklog.adapters -p research

## check: lint, format, types, tests — run before every commit
check: lint typecheck test

## api-schema: the OpenAPI description validated and schemathesis against a live server (also part of `make test`);
## -s prints schemathesis's summary (operations, test cases generated and passed)
api-schema: $(VENV)/.dev
	$(PY) -m pytest -q -s tests/e2e/test_api_schema.py

## bench: every benchmark, each printing ratios against a baseline measured in the same run
bench: $(VENV)/.dev
	$(PY) bench/append.py
	$(PY) bench/dispatch.py
	$(PY) bench/slack_ack.py
	$(PY) bench/claims.py
	$(PY) bench/statements.py
	$(PY) bench/power_loss.py

## experiment: the coordination experiment (research/, outside the product), its CI-sized slice by default;
## EXPERIMENT_ARGS="--seeds 3 --jobs 2" runs other options; the results go to a new directory under /tmp (printed)
EXPERIMENT_ARGS ?= --quick
experiment: $(VENV)/.dev
	$(PY) -m research.experiment $(EXPERIMENT_ARGS) --out $$(mktemp -d /tmp/decklog-experiment.XXXXXX)

## lab: decklog in the lab (research/lab/, outside the product): the built-in scenarios and the ITBench subset beside the
## checkout (ITBENCH=DIR; skipped when absent), run in a monitored shop with injected faults; results in a new
## directory under /tmp (printed). LAB_ARGS="--seeds 3 --jobs 2" runs other options.
ITBENCH  ?= ../shared/scenarios/itbench
LAB_ARGS ?= --jobs 4
lab: $(VENV)/.dev monitoring
	$(PY) -m research.lab run --scenarios research/lab/scenarios $$(test -d $(ITBENCH) && echo --import-itbench $(ITBENCH)) \
	  $(LAB_ARGS) --out $$(mktemp -d /tmp/decklog-lab.XXXXXX)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
