# Quickstart targets: each creates .venv when missing, installs, then runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Telemetry off, everywhere; offline-safe defaults.
export MLFLOW_DISABLE_TELEMETRY := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DVC_NO_ANALYTICS := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export DO_NOT_TRACK := 1
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
# dvc runs stage commands through the shell: make them find this venv's python.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: pipeline test install clean-venv

pipeline: $(STAMP)
	$(BIN)/minibert pipeline $(if $(PROFILE),--profile $(PROFILE))

# Two pytest-xdist workers, one module each at a time (module fixtures such as the end-to-end project
# are built once), the longest modules first (tests/conftest.py); PYTEST_WORKERS=0 runs in one process.
# The 15 slowest tests are listed at the end (CI keeps to ~15 min).
PYTEST_WORKERS ?= 2
test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		--durations=15 $(PYTEST_ARGS)

install: $(STAMP)

# requirements.lock pins every package (pip freeze of a resolved install); pyproject.toml holds the ranges.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[test]'
	touch $@

clean-venv:
	rm -rf $(VENV)
