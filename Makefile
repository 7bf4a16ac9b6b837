# llmops.sglang — every install step lives here. Needs only Python >= 3.11 and make.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# ansible-core 2.19.x on Python 3.11; the newest core (2.21) where the Python allows it.
REQS := $(shell $(PYTHON) -c 'import sys; print("requirements.txt" if sys.version_info < (3, 12) else "requirements-py313.txt")')
STAMP := $(VENV)/.installed-$(REQS)
# A second, newer interpreter for the newest ansible-core (pyenv's 3.13 when present).
PYTHON_NEW ?= $(shell PYENV_VERSION=3.13.0 python3 -c 'import sys; print(sys.executable if sys.version_info >= (3, 12) else "")' 2>/dev/null || true)
VENV_NEW ?= .venv-new
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Host-side Python (runs on managed hosts: Python >= 3.10), listed once in tests/host_side_files.txt
# (globs; `#` comment lines), which tests/unit/test_py310.py reads too.
HASH := \#
HOST_SIDE_PY := $(sort $(wildcard $(shell grep -v -e '^[[:space:]]*$(HASH)' -e '^[[:space:]]*$$' tests/host_side_files.txt)))
# vermin: fail on anything that needs a Python newer than 3.10 (-t=3.10- --violations).
# Annotations are not evaluated (every host file has `from __future__ import annotations`), hence
# --no-eval-annotations; no --backport: hosts have the stdlib only (plus aiohttp in the engine
# venv), so a backport package would not be there; default features (its PEP 701 f-string check
# works on Python >= 3.12 only; on 3.11 such files do not parse, which test_py310 catches).
# --no-config-file: these flags alone decide. `# novm` comments still exempt a version-guarded line.
VERMIN := vermin --no-config-file -t=3.10- --violations --no-tips --no-eval-annotations
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup lint unit integration molecule build test test-newcore demo clean stop

help:
	@echo "make setup        create $(VENV) with the pinned toolchain ($(REQS))"
	@echo "make demo         deploy mtp_hicache locally (embedded engine), status, throughput sweep + report"
	@echo "make test         setup + lint + unit + integration + molecule + collection build"
	@echo "make lint         ansible-lint (production profile) + ruff + vermin (host-side code on Python 3.10)"
	@echo "make stop         stop everything the demo started"

$(STAMP): $(REQS)
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r $(REQS)
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)
	@$(PY) -c "import ansible, sys; print('ansible-core', ansible.__version__, 'on Python', sys.version.split()[0])"

lint: setup
	$(BIN)/ruff check plugins tests tools
	$(BIN)/$(VERMIN) $(HOST_SIDE_PY)
	$(BIN)/ansible-lint --profile production --offline playbooks roles molecule inventories

unit: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q tests/unit

integration: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 2 tests/integration

molecule: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test -s default

build: setup
	mkdir -p build
	$(BIN)/ansible-galaxy collection build --force --output-path build .
	@ls -l build/llmops-sglang-*.tar.gz

# The newest ansible-core on a newer Python (skipped, and said so, where none is installed).
test-newcore:
	@if [ -z "$(PYTHON_NEW)" ]; then echo "SKIP test-newcore: no Python >= 3.12 found"; exit 0; fi; \
	$(MAKE) --no-print-directory PYTHON=$(PYTHON_NEW) VENV=$(VENV_NEW) setup && \
	PATH="$(CURDIR)/$(VENV_NEW)/bin:$$PATH" $(VENV_NEW)/bin/pytest -q tests/unit && \
	PATH="$(CURDIR)/$(VENV_NEW)/bin:$$PATH" $(VENV_NEW)/bin/pytest -q tests/integration -k "check_mode or systemd or fqcn or bad_profile"

test: setup lint unit integration molecule build test-newcore
	@echo "make test: all stages passed"

demo: setup
	$(BIN)/ansible-playbook playbooks/deploy.yml -e profile=mtp_hicache
	$(BIN)/ansible-playbook playbooks/status.yml
	$(BIN)/ansible-playbook playbooks/bench.yml

stop: setup
	$(BIN)/ansible-playbook playbooks/stop.yml

clean:
	rm -rf build .cache .pytest_cache .ruff_cache
