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
# pyenv's shim first; then pyenv itself (a PATH that starts with one version's bin, as a command
# started through the shim has, bypasses the shim); then python3.13 / python3.12 on PATH.
PYTHON_NEW ?= $(shell for cmd in "env PYENV_VERSION=3.13.0 python3" "env PYENV_VERSION=3.13.0 pyenv exec python3" python3.13 python3.12; do \
  $$cmd -c 'import sys; assert sys.version_info >= (3, 12); print(sys.executable)' 2>/dev/null && break; done || true)
VENV_NEW ?= .venv-new
# The real SGLang router (sglang-router, pinned in requirements-router.txt: a 92 MB wheel with a
# Rust library that runs on CPU), in a venv of its own: the unit and integration tests run it as
# an existing installation, and inventories/local points the router role at it.
ROUTER_VENV ?= .venv-router
ROUTER_STAMP := $(ROUTER_VENV)/.installed-requirements-router.txt
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Host-side Python (runs on managed hosts: Python >= 3.10), listed once in tests/host_side_files.txt
# (globs; `#` comment lines), which tests/unit/repo/test_py310.py reads too.
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

.PHONY: help setup setup-newcore unit-newcore integration-newcore router generated lint unit integration e2e molecule build sanity sanity-newcore units-ansible-test coverage test test-newcore fleet-test browser-test demo clean stop

help:
	@echo "make setup        create $(VENV) with the pinned toolchain ($(REQS))"
	@echo "make demo         deploy mtp_hicache locally (embedded engine), status, throughput sweep + report"
	@echo "make router       create $(ROUTER_VENV) with the pinned sglang-router (requirements-router.txt)"
	@echo "make test         setup + lint + unit + integration + molecule + collection build + sanity"
	@echo "make generated    rewrite what is derived from the declarations (role defaults, the sweep's spec, role READMEs)"
	@echo "make lint         ansible-lint (production profile) + ruff + vermin (host-side code on Python 3.10)"
	@echo "make sanity       ansible-test sanity on a copy of the working tree (every test but shellcheck; pylint on plugins/modules, plugins/filter and plugins/lookup)"
	@echo "make sanity-newcore  the same with the newest ansible-core (.venv-new)"
	@echo "make units-ansible-test  the unit tests through ansible-test units (module_utils tests without the controller; not in make test)"
	@echo "make e2e          end-to-end runs of several minutes (tune on seed + deploy and its faults, bench via router, heartbeat, interrupted and concurrent deploys)"
	@echo "make fleet-test   fleet scenarios over real SSH: network-namespace hosts on this machine (root; installs openssh-server)"
	@echo "make coverage     line coverage of plugins/ over the unit and integration stages (.cache/coverage/report.txt)"
	@echo "make stop         stop everything the demo started"

$(STAMP): $(REQS)
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r $(REQS)
	rm -f $(VENV)/.installed-*
	touch $@

# The test venvs' bytecode cache for what Python imports out of AnsiballZ zips (every module run
# compiled ansible-core's module_utils again: tools/zipimport_cache.py, docs/DEVELOPING.md).
ZIPIMPORT_CACHE := $(VENV)/.installed-zipimport-cache
$(ZIPIMPORT_CACHE): tools/zipimport_cache.py $(STAMP)
	site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  install -m 644 tools/zipimport_cache.py "$$site/_llmops_zipimport_cache.py"; \
	  $(PY) -m py_compile "$$site/_llmops_zipimport_cache.py"; \
	  echo 'import _llmops_zipimport_cache; _llmops_zipimport_cache.install()' > "$$site/llmops_zipimport_cache.pth"
	touch $@

setup: $(STAMP) $(ZIPIMPORT_CACHE)
	@$(PY) -c "import ansible, sys; print('ansible-core', ansible.__version__, 'on Python', sys.version.split()[0])"

$(ROUTER_STAMP): requirements-router.txt
	test -x $(ROUTER_VENV)/bin/python || $(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-router.txt
	touch $@

router: $(ROUTER_STAMP)
	@$(ROUTER_VENV)/bin/python -c "import importlib.metadata as m; print('sglang-router', m.version('sglang-router'))"

# Each option is declared once (a role's meta/argument_specs.yml, a module's DOCUMENTATION); the
# files derived from them are rewritten here and checked by make unit (tests/unit/repo/test_declared.py).
generated: setup
	$(PY) tools/gen_declared.py

lint: setup
	$(BIN)/ruff check plugins tests tools
	$(BIN)/$(VERMIN) $(HOST_SIDE_PY)
	$(BIN)/ansible-lint --profile production --offline playbooks roles molecule inventories

# The ports unit tests hand to the processes they start (tests/ports.py, free_port): 2000-9999, below
# the integration harness's and the kernel's ephemeral range; unit takes the first half, unit-newcore
# (beside it in make test and .ci/run) the second.
unit: setup router
	LLMOPS_UNIT_PORT_SHARE=0/2 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 4 --dist worksteal --durations=0 tests/unit

# The ports of the integration tests (tests/integration/conftest.py, free_port_block): integration
# takes the first third of them, e2e the second, integration-newcore the last, so that the three can
# run side by side (make test, .ci/run). Three workers: beside other work (.ci/run's stages, another
# job) three runnable processes get a larger share of the cores than two (docs/DEVELOPING.md).
integration: setup router
	LLMOPS_TEST_PORT_SHARE=0/3 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 3 -m "not e2e" --durations=0 tests/integration

# End-to-end runs of several minutes each (tune.yml on inventories/seed then deploy.yml; a bench
# through the router, also with a worker down; a remote sweep outliving a killed controller; tune's
# faults; deploys interrupted by SIGINT/SIGKILL and concurrent deploys): not in
# `make test` (about 19 minutes on 2 cores from a fresh clone); .ci/run runs them after it, beside
# the fleet scenarios.
e2e: setup router
	LLMOPS_TEST_PORT_SHARE=1/3 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 2 -m e2e --durations=0 tests/integration

molecule: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test -s default

build: setup
	mkdir -p build
	$(BIN)/ansible-galaxy collection build --force --output-path build .
	@ls -l build/llmops-sglang-*.tar.gz

# ansible-test sanity. ansible-test wants the collection at .../ansible_collections/llmops/sglang/
# (the checkout's collections/ link resolves back to the root), so it runs on a copy in
# $(SANITY_ROOT): the working tree's tracked and untracked-but-not-ignored files (what
# `ansible-galaxy collection build` ships, uncommitted edits included) less collections/ (the
# link back to the root; the build leaves it out too). A fresh `git init` there is what makes
# ansible-test list exactly those files: it takes its file list from the nearest .git up the
# tree, and the checkout's own would show it nothing under the git-ignored build/.
# ansible-test creates a venv per sanity test under ~/.ansible/test/venv (kept between runs) and
# bootstraps pip in each with a get-pip script it downloads from a host outside the package
# registries; tools/ansible_test_get_pip.py stands in for it (ensurepip, then pip from PyPI) when
# no such script is cached.
# Tests: all that ansible-test runs for a collection, on the venv's Python (3.11 here, 3.13 for
# sanity-newcore: compile and import on 3.10 need a 3.10 interpreter, which this machine has not;
# vermin and tests/unit/repo/test_py310.py cover 3.10), except
#   shellcheck  skipped by ansible-test itself where the shellcheck program is missing;
#   pylint      on plugins/modules, plugins/filter and plugins/lookup only, the Ansible-facing
#               shells: ansible-test's fixed pylint config bans `_` as a throwaway name, which
#               module_utils, tests and tools use by convention (ruff lints all of them, `make lint`).
# Ignores: tests/sanity/ignore-<core>.txt, each line with its reason. About 40 s with warm venvs
# on 2 cores; the first run also installs each test's requirements from PyPI (about 1.5 min).
SANITY_ROOT := build/sanity-$(subst .,,$(notdir $(VENV)))
SANITY_DIR := $(SANITY_ROOT)/ansible_collections/llmops/sglang

sanity: setup
	rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_DIR)
	git ls-files -z --cached --others --exclude-standard | grep -z -v '^collections/' \
	  | tar --null --no-recursion --ignore-failed-read -T - -cf - | tar -xf - -C $(SANITY_DIR)
	cd $(SANITY_DIR) && git init -q
	pip=$$($(PY) -c 'import sys, types; from ansible_test._internal.python_requirements import get_venv_packages as g; print(g(types.SimpleNamespace(version="%d.%d" % sys.version_info[:2]))["pip"])'); \
	  cache="$$HOME/.ansible/test/cache/get_pip_$${pip//./_}.py"; \
	  test -s "$$cache" || install -D -m 644 tools/ansible_test_get_pip.py "$$cache"
	py=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); cd $(SANITY_DIR) && \
	  env -u ANSIBLE_CONFIG $(CURDIR)/$(BIN)/ansible-test sanity --local --python $$py --color no --skip-test pylint && \
	  env -u ANSIBLE_CONFIG $(CURDIR)/$(BIN)/ansible-test sanity --local --python $$py --color no --test pylint plugins/modules/ plugins/filter/ plugins/lookup/

# ansible-test units (docs/DEVELOPING.md, "Unit tests"): the unit tests as ansible-test runs them,
# tests/unit/plugins/module_utils (and modules) on their own, without the controller's code,
# then the rest. On a copy in $(UNITS_ROOT) made as for sanity, with collections/ (the link back
# to the root, which engines started by the tests put on their PYTHONPATH) and a link to
# $(ROUTER_VENV) (the real router's tests), in ansible-test's own venv
# (--venv: tests/unit/requirements.txt and ansible-test's test requirements, from PyPI on the first
# run, about 1 min; kept in the copy's tests/output between runs). Not part of `make test`:
# `make unit` runs the same tests. Left out (UNITS_EXCLUDE, 277 of the 1008 tests; the other 731
# pass): the files of the 25 tests that run a module or plugin through the `ansible`,
# `ansible-playbook` or `ansible-doc` program found beside sys.executable (or in .venv/bin), which
# ansible-test's venv has not (ansible-core reaches its tests through PYTHONPATH, and module_utils
# tests see only ansible.module_utils); and the files whose module-scoped fixtures start a server
# (engine or known-rate server): ansible-test runs each test in a fork of its own, which sets the
# fixture up again and exits without its teardown, so each test would leave a server running.
# UNITS_ARGS go to ansible-test, e.g. a test file's path.
UNITS_ROOT := build/units-$(subst .,,$(notdir $(VENV)))
UNITS_DIR := $(UNITS_ROOT)/ansible_collections/llmops/sglang
UNITS_EXCLUDE ?= plugins/module_utils/_detached/test_detached.py plugins/module_utils/_report/test_report.py \
  plugins/module_utils/_sweep/test_module.py plugins/module_utils/_sweep/test_run.py \
  plugins/module_utils/_sweep/test_workers.py plugins/module_utils/test_hostfacts.py \
  plugins/module_utils/test_router.py plugins/lookup/test_engine_files.py repo/test_repo.py \
  plugins/module_utils/_engine/test_api.py plugins/module_utils/_sweep/test_drift.py \
  plugins/module_utils/_sweep/test_level.py plugins/module_utils/_sweep/test_rate.py \
  plugins/module_utils/_sweep/test_scaled_engine.py
UNITS_ARGS ?=

units-ansible-test: setup router
	mkdir -p $(UNITS_DIR)/tests
	find $(UNITS_DIR) -mindepth 1 -maxdepth 1 ! -name tests -exec rm -rf {} +
	find $(UNITS_DIR)/tests -mindepth 1 -maxdepth 1 ! -name output -exec rm -rf {} +
	git ls-files -z --cached --others --exclude-standard \
	  | tar --null --no-recursion --ignore-failed-read -T - -cf - | tar -xf - -C $(UNITS_DIR)
	ln -sfn $(CURDIR)/$(ROUTER_VENV) $(UNITS_DIR)/$(ROUTER_VENV)
	cd $(UNITS_DIR) && git init -q
	pip=$$($(PY) -c 'import sys, types; from ansible_test._internal.python_requirements import get_venv_packages as g; print(g(types.SimpleNamespace(version="%d.%d" % sys.version_info[:2]))["pip"])'); \
	  cache="$$HOME/.ansible/test/cache/get_pip_$${pip//./_}.py"; \
	  test -s "$$cache" || install -D -m 644 tools/ansible_test_get_pip.py "$$cache"
	py=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); cd $(UNITS_DIR) && \
	  env -u ANSIBLE_CONFIG $(CURDIR)/$(BIN)/ansible-test units --venv --python $$py --color no --num-workers 2 \
	    $(foreach f,$(UNITS_EXCLUDE),--exclude tests/unit/$(f)) $(UNITS_ARGS)

# The newest ansible-core on a newer Python (skipped, and said so, where none is installed), on
# what depends on ansible-core (issue 27): the unit tests `--ansible-facing` selects (the plugins
# Ansible loads, and every test file that imports ansible or runs an Ansible program; the rule is
# tests/conftest.py's ansible_facing), the integration subset, sanity. The pure-Python rest
# imports nothing of ansible-core and runs once, in `make unit`.
setup-newcore:
	@if [ -z "$(PYTHON_NEW)" ]; then echo "SKIP setup-newcore: no Python >= 3.12 found"; exit 0; fi; \
	$(MAKE) --no-print-directory PYTHON=$(PYTHON_NEW) VENV=$(VENV_NEW) setup

# Its three parts: unit-newcore, integration-newcore (the third share of the test ports: it runs
# beside integration and e2e in make test and .ci/run) and sanity-newcore.
test-newcore: unit-newcore integration-newcore sanity-newcore

unit-newcore: router setup-newcore
	@if [ -z "$(PYTHON_NEW)" ]; then echo "SKIP unit-newcore: no Python >= 3.12 found"; exit 0; fi; \
	LLMOPS_UNIT_PORT_SHARE=1/2 PATH="$(CURDIR)/$(VENV_NEW)/bin:$$PATH" $(VENV_NEW)/bin/pytest -q -n 4 --dist worksteal --durations=0 --ansible-facing tests/unit

integration-newcore: router setup-newcore
	@if [ -z "$(PYTHON_NEW)" ]; then echo "SKIP integration-newcore: no Python >= 3.12 found"; exit 0; fi; \
	LLMOPS_TEST_PORT_SHARE=2/3 PATH="$(CURDIR)/$(VENV_NEW)/bin:$$PATH" $(VENV_NEW)/bin/pytest -q -n 2 --durations=0 tests/integration \
	  -k "(check_mode or systemd or fqcn or tarball or bad_profile) and not api_key"

# Sanity with the newest ansible-core (test-newcore's last part).
sanity-newcore: setup-newcore
	@if [ -z "$(PYTHON_NEW)" ]; then echo "SKIP sanity-newcore: no Python >= 3.12 found"; exit 0; fi; \
	$(MAKE) --no-print-directory PYTHON=$(PYTHON_NEW) VENV=$(VENV_NEW) sanity

# Fleet scenarios (tests/fleet, see its README): several hosts on this machine, each a network
# namespace with its own address and sshd, driven by the playbooks over real SSH. Needs root,
# iproute2 and openssh-server; the server is installed here from apt when missing (quiet, each
# apt step bounded by FLEET_APT_TIMEOUT, its output shown only on failure; an image's
# policy-rc.d, as here, keeps the package from starting a system sshd). Not part of `make test`
# (it is .ci/run's own step, FLEET_TESTS="tests/fleet/test_fleet_rollout.py tests/fleet/test_fleet_staging.py": the six rollout scenarios and the two of model staging;
# the smoke scenario repeats the first). FLEET_TESTS: what pytest runs; FLEET_ARGS go to pytest, e.g. FLEET_ARGS="-k smoke --fleet-servers 4".
FLEET_APT_TIMEOUT ?= 600
# apt-get under one lock of ours: the fleet's and the browser test's installs run side by side in
# .ci/run, and two apt-get at once fail on apt's own locks instead of waiting
APT_GET := flock /tmp/llmops-sglang-apt.lock apt-get
FLEET_ARGS ?=
FLEET_TESTS ?= tests/fleet
fleet-test: setup router
	@test "$$(id -u)" = 0 || { echo "make fleet-test: needs root (network namespaces, a bridge, sshd)"; exit 1; }
	@command -v ip >/dev/null || { echo "make fleet-test: needs iproute2 (the ip command)"; exit 1; }
	@test -x /usr/sbin/sshd || { echo "make fleet-test: installing openssh-server (apt-get)"; \
	  log=$$(mktemp); export DEBIAN_FRONTEND=noninteractive; \
	  { timeout $(FLEET_APT_TIMEOUT) $(APT_GET) update -qq && \
	    timeout $(FLEET_APT_TIMEOUT) $(APT_GET) install -y -qq --no-install-recommends openssh-server; } >"$$log" 2>&1 \
	  || { cat "$$log"; rm -f "$$log"; exit 1; }; rm -f "$$log"; }
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q --durations=0 $(FLEET_TESTS) $(FLEET_ARGS)

# report.html in a real headless browser (tests/browser): Debian's Chromium, installed here from
# apt when missing (root; each apt step bounded by FLEET_APT_TIMEOUT, its output shown only on
# failure), driven over the DevTools protocol on loopback. .ci/run runs it beside e2e and fleet.
browser-test: setup
	@test -n "$${CHROMIUM:-}" || command -v chromium >/dev/null || { echo "make browser-test: installing chromium (apt-get)"; \
	  test "$$(id -u)" = 0 || { echo "make browser-test: needs root to install chromium, or CHROMIUM=/path/to/it"; exit 1; }; \
	  log=$$(mktemp); export DEBIAN_FRONTEND=noninteractive; \
	  { timeout $(FLEET_APT_TIMEOUT) $(APT_GET) update -qq && \
	    timeout $(FLEET_APT_TIMEOUT) $(APT_GET) install -y -qq --no-install-recommends chromium; } >"$$log" 2>&1 \
	  || { cat "$$log"; rm -f "$$log"; exit 1; }; rm -f "$$log"; }
	$(BIN)/pytest -q --durations=0 tests/browser

# The stages that leave the two cores idle part of the time (unit waits on its servers and sweeps,
# molecule on its instances, sanity and lint are mostly one process, the newest core's venv on pip,
# then its ansible-facing tests and sanity) run side by side, each line prefixed with its stage
# (tools/side_by_side.py); then integration, which keeps both cores busy (docs/DEVELOPING.md,
# issue 27), beside the newest core's integration subset and sanity (the group's longest stage
# otherwise: its venv, unit tests and sanity one after another) and TEST_BESIDE_INTEGRATION: more
# `NAME 'COMMAND'` pairs of side_by_side.py, empty here; .ci/run gives its e2e, browser and fleet
# stages, so that on a machine shared with other work CI's playbook stages run as one group of
# processes (each runnable process gets its share of the cores: docs/DEVELOPING.md, "Beside other
# work").
TEST_BESIDE_INTEGRATION ?=
test: setup router
	$(PY) tools/side_by_side.py \
	  lint '$(MAKE) --no-print-directory lint' \
	  unit '$(MAKE) --no-print-directory unit' \
	  molecule '$(MAKE) --no-print-directory molecule' \
	  sanity '$(MAKE) --no-print-directory build sanity' \
	  newcore '$(MAKE) --no-print-directory unit-newcore'
	$(PY) tools/side_by_side.py integration '$(MAKE) --no-print-directory integration' \
	  newcore-integration-sanity '$(MAKE) --no-print-directory integration-newcore sanity-newcore' $(TEST_BESIDE_INTEGRATION)
	@echo "make test: all stages passed"

# Line coverage of plugins/ over the unit and integration stages together (issue 27: it must not fall
# when a test moves), also in the processes the tests start (pyproject.toml [tool.coverage.*]): the
# two runs append to one data set; a second combine maps the modules' AnsiballZ paths to plugins/.
# Not in make test (the measuring slows every process); the figures are in docs/DEVELOPING.md.
COVERAGE_DIR := .cache/coverage
coverage: setup router
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-coverage.txt
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 4 --dist worksteal --cov --cov-report= tests/unit
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -n 2 -m "not e2e" --cov --cov-append --cov-report= tests/integration
	mv $(COVERAGE_DIR)/data $(COVERAGE_DIR)/data.tests
	$(BIN)/coverage combine --quiet
	$(BIN)/coverage report > $(COVERAGE_DIR)/report.txt
	tail -n 1 $(COVERAGE_DIR)/report.txt

demo: setup router
	$(BIN)/ansible-playbook playbooks/deploy.yml -e profile=mtp_hicache
	$(BIN)/ansible-playbook playbooks/status.yml
	$(BIN)/ansible-playbook playbooks/bench.yml
	$(BIN)/ansible-playbook playbooks/generate.yml -e sglang_generate_input=examples/prompts.jsonl \
	  -e '{"sglang_generate_defaults": {"max_tokens": 128}}'

stop: setup
	$(BIN)/ansible-playbook playbooks/stop.yml

clean:
	rm -rf build .cache .pytest_cache .ruff_cache
