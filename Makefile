# evsys — the two commands a user needs are `make run` and `make test`; both bootstrap from nothing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
EVSYS  := $(VENV)/bin/evsys
JOBS   ?= jobs

.PHONY: setup setup-run run test test-fast test-bases bench lint format clean

# Everything the test suite needs (image tools, chromium, dockerd, every extra, the frameworks' venvs).
setup:
	@bash scripts/bootstrap.sh

# Only what the main job needs: the sandbox's Debian packages and evsys with its local model engine.
setup-run:
	@bash scripts/bootstrap.sh run

# The embedded default: the bundled example tasks in the local sandbox, first with the reference solutions
# (every task at 1.0), then with the built-in loop agent driving the offline SmolLM2-135M-Instruct.
# One loop trial per CPU: the trials share one in-process engine, and generation counts against each trial's
# agent timeout (loading the model and queueing for it do not; docs/jobs.md "Trial lifecycle").
LOOP_ARGS ?= --max-turns 3 --max-tokens 96 --agent-kwarg seed=0
LOOP_N    ?= $(shell nproc 2>/dev/null || echo 2)

run: setup-run
	$(EVSYS) run examples/tasks -a oracle -n 4 --jobs-dir $(JOBS)
	$(EVSYS) run examples/tasks -a loop -m local -n $(LOOP_N) $(LOOP_ARGS) --jobs-dir $(JOBS)

# The whole suite but the tests that compile CPython for a synthesised base (`builds_cpython`: 3-6 minutes
# each on 2 cores the first time on a machine, then cached), which `make test-bases` runs.
test: setup
	$(PY) -m pytest -q -m "not builds_cpython"

test-bases: setup
	$(PY) -m pytest -q -m builds_cpython

# The fast tier (a few minutes on 2 cores): every test that needs no real sandbox, model engine, daemon,
# cluster, server process or other virtualenv, on all CPUs (pytest-xdist); tests/tiers.py marks the rest by
# the fixtures they use and fails a fast test that starts one of those. `make test` runs everything.
test-fast: setup
	$(PY) -m pytest -q --fast -n auto

bench: setup
	$(PY) bench/run_all.py $(BENCH)

# What CI checks besides the tests: ruff (lint and format), the import layers in .importlinter, and types
# (mypy over src/evsys, configured in pyproject.toml's [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench

clean:
	rm -rf $(VENV) $(JOBS) .pytest_cache
