# NodeHeal developer entry points. Every target bootstraps what it needs (virtualenv, pip and npm
# packages) so a fresh clone needs nothing but Python 3.11+, Node.js 22+ (20 still works) and make.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# checkov (the security scan, tests/infrastructure/test_security_scan.py) pins boto3 1.35 and NodeHeal
# 1.44, so pip cannot install both in one environment: the scanner gets a virtualenv of its own.
SCAN_VENV := .venv-checkov
MIN_PYTHON := 3.11
# Each set-up step prints one line with its time; its output goes to a log under SETUP_LOGS,
# shown (its end, and its path) only when the step fails.
STEP := scripts/run-step
SETUP_LOGS := build/set-up
PIP := $(BIN)/python -m pip --disable-pip-version-check
WHEELHOUSE := $(or $(NODEHEAL_WHEELHOUSE),build/wheelhouse)
CDK_OUT ?= cdk.out
SYNTH_LOG ?= build/synth/cdk-synth.log

# The interpreter is checked before anything is installed: pip on Python 3.10 runs for a minute and
# then fails on a dependency, which says nothing about the real cause. Goals that install nothing
# (help, clean) skip the check, so a wrong interpreter can still be cleaned up after.
NO_PYTHON_GOALS := help clean
# $(call py_version,INTERPRETER): its version (3.11.7), or nothing when it cannot run.
py_version = $(shell $(1) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
# $(call py_base,INTERPRETER): the interpreter behind it (a venv's base, a pyenv shim's target).
py_base = $(shell $(1) -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>/dev/null)
# $(call py_ok,VERSION): "yes" when VERSION is at least MIN_PYTHON.
py_ok = $(shell v='$(1)'; want='$(MIN_PYTHON)'; \
	[ -n "$$v" ] && [ "$${v%%.*}" -eq "$${want%%.*}" ] 2>/dev/null \
	&& v="$${v#*.}" && [ "$${v%%.*}" -ge "$${want#*.}" ] 2>/dev/null && echo yes)

ifneq ($(filter-out $(NO_PYTHON_GOALS),$(or $(MAKECMDGOALS),help)),)
VENV_VERSION := $(if $(wildcard $(BIN)/python),$(call py_version,$(BIN)/python))
# PYTHON not chosen on the command line or in the environment: a working venv is kept as it is.
ifneq ($(origin PYTHON)$(call py_ok,$(VENV_VERSION)),fileyes)
PYTHON_VERSION := $(call py_version,$(PYTHON))
ifeq ($(PYTHON_VERSION),)
$(error cannot run $(PYTHON): install Python $(MIN_PYTHON) or newer and name it, e.g. make $(MAKECMDGOALS) PYTHON=python$(MIN_PYTHON))
endif
ifneq ($(call py_ok,$(PYTHON_VERSION)),yes)
$(error NodeHeal needs Python $(MIN_PYTHON) or newer, and $(PYTHON) is $(PYTHON_VERSION): install Python $(MIN_PYTHON)+ and run make $(MAKECMDGOALS) PYTHON=python$(MIN_PYTHON) (the virtualenv is recreated with it))
endif
# A venv made with another interpreter (an older Python, or before PYTHON was given) is rebuilt
# with PYTHON: its packages were installed for that interpreter.
ifneq ($(wildcard $(VENV)),)
ifneq ($(call py_base,$(BIN)/python),$(call py_base,$(PYTHON)))
VENV_MISMATCH := $(VENV) was made with $(or $(call py_base,$(BIN)/python),an interpreter that no longer runs) $(VENV_VERSION), not $(PYTHON) ($(call py_base,$(PYTHON)) $(PYTHON_VERSION))
# make -n promises to change nothing: the old venv stays until a real run.
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
$(info $(VENV_MISMATCH): recreating it)
$(shell rm -rf $(VENV) $(SCAN_VENV))
else
$(info $(VENV_MISMATCH): a real run recreates it)
endif
endif
endif
endif
endif

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help bootstrap check test lint typecheck unit synth lambda-deps demo bench rbac pin-image simulate mutate soak clean

help:
	@echo "make demo   - run the local end-to-end simulation (bootstraps everything)"
	@echo "make check  - the fast tier for every change: lint, types, import contracts, unit and domain tests"
	@echo "make test   - lint, type-check and run the whole test suite, as CI does (bootstraps everything)"
	@echo "make synth  - build the Lambda asset and synthesize the CloudFormation template"
	@echo "make bench  - run the benchmarks under benchmarks/"
	@echo "make rbac   - regenerate deploy/rbac/remediator.yaml and fault-injector.yaml from nodeheal/rbac.py"
	@echo "make pin-image IMAGE=<repo>@sha256:<digest> - pin the exporter image of deploy/exporter-release"
	@echo "make simulate SEED=n - replay one seeded schedule of the simulation with its trace"
	@echo "make soak   - run 20,000 seeded schedules against the safety invariants, and the mutation gate"
	@echo "make mutate - require the simulation alone to catch each safety mutant within 2,000 schedules"
	@echo "make clean  - remove build outputs, caches and the virtualenv $(VENV)"
	@echo "PYTHON=python3.12 picks the interpreter (3.11 or newer); the nodeheal CLI is $(BIN)/nodeheal"

$(BIN)/python:
	@$(STEP) "set-up: virtualenv" $(SETUP_LOGS)/virtualenv.log $(PYTHON) -m venv $(VENV)

# pip's whole output goes to the log (the progress bar would only clutter it). pip compiles what it
# installs one file at a time, and aws-cdk-lib alone is 176 MB of Python: the packages go in
# uncompiled and compileall compiles them on every core (a file that does not compile, which pip
# would skip quietly too, leaves compileall's status non-zero and is left to compile on import).
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml | $(BIN)/python
	@$(STEP) "set-up: Python packages" $(SETUP_LOGS)/python-packages.log $(SHELL) -ec '\
		$(PIP) install --progress-bar off --upgrade pip; \
		$(PIP) install --progress-bar off --no-compile -r requirements-dev.txt; \
		$(PIP) install --progress-bar off --no-deps -e .; \
		$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_path(\"purelib\"))")" || true'
	@touch $@

$(SCAN_VENV)/.installed: requirements-scan.txt | $(BIN)/python
	@$(STEP) "set-up: security scanner" $(SETUP_LOGS)/security-scanner.log $(SHELL) -ec '\
		$(BIN)/python -m venv $(SCAN_VENV); \
		$(SCAN_VENV)/bin/python -m pip --disable-pip-version-check install --progress-bar off --upgrade pip; \
		$(SCAN_VENV)/bin/python -m pip --disable-pip-version-check install --progress-bar off -r requirements-scan.txt'
	@touch $@

node_modules/.installed: package.json package-lock.json
	@$(STEP) "set-up: npm packages" $(SETUP_LOGS)/npm-packages.log npm ci --no-audit --no-fund
	@touch $@

# The three installs are independent (the scanner's virtualenv only needs the interpreter): they run
# at once, which takes the scanner's and npm's minute off a fresh clone's `make test`. Each prints
# its one line when it is done, so the order of the lines is the order they finished in.
# The top level stays serial whatever -j says, so no target reaches an install bootstrap's own make
# is still running.
ifeq ($(MAKELEVEL),0)
.NOTPARALLEL:
endif
bootstrap:
	@$(MAKE) --no-print-directory -j3 $(VENV)/.installed $(SCAN_VENV)/.installed node_modules/.installed

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check nodeheal lambdas stacks app.py setup.py benchmarks
	$(BIN)/lint-imports --no-cache

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: $(VENV)/.installed
	$(BIN)/pytest tests/unit -q

# lambda-deps: the infrastructure tests run the real `cdk synth`, which bundles the Lambda asset.
# The type check (about a minute and a half from a cold cache; pyproject.toml says which generated
# stubs it leaves out) runs beside the suite instead of before it. Test durations run from
# milliseconds to a minute (a real `cdk synth`): an idle worker takes queued tests from a busy one
# (--dist worksteal) instead of waiting for a slow batch to end. The tests wait on servers and
# subprocesses about a quarter of the time, so one worker more than the cores keeps them busy
# (measured on two cores: 535 s with two workers, 390 s with three). Either failing fails the
# target; mypy's report is printed after the suite's.
# PYTHONDONTWRITEBYTECODE (set here and in this machine's environment) keeps __pycache__ out of the
# tree at import time, so every worker and every CLI subprocess of the suite compiled NodeHeal's
# modules again; they are compiled once first (ignored by git, by the Lambda asset and the wheel).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
test: bootstrap lambda-deps lint
	@mkdir -p build; \
	$(BIN)/python -m compileall -q -j 0 nodeheal lambdas stacks tests benchmarks app.py > /dev/null; \
	$(BIN)/mypy > build/mypy.log 2>&1 & mypy_pid=$$!; \
	PATH="$(CURDIR)/node_modules/.bin:$$PATH" $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal; tests=$$?; \
	wait $$mypy_pid; typed=$$?; \
	echo "$(BIN)/mypy"; cat build/mypy.log; \
	exit $$(( tests != 0 ? tests : typed ))

# The fast tier (D20), for every change: lint, types (mypy beside the tests, as in `make test`),
# import contracts, and the unit and domain tests: tests/unit without the tests marked slow (a real
# synth of the stack, a run of the local pipeline, a wait on a real timeout; pyproject.toml's
# markers) and without tests/unit/cli, which drives each command against moto stacks and the fake
# API server (two fifths of tests/unit's time). At most 2 minutes on two cores with mypy's cache
# warm; `make test` runs everything.
# A warm mypy still takes about 35 s: mypy 1.18 parses and checks again, on every run, each
# followed module that imports a package pyproject.toml skips (follow_imports = "skip"): its
# check for "newly added packages" (build.py, exist_added_packages) reads the importing module's
# options, not the skipped one's. That is aws_cdk's 20 followed modules, the kubernetes client
# core and the modules importing moto; following those packages instead costs minutes per run.
CHECK_TESTS ?= tests/unit --ignore=tests/unit/cli
check: lint
	@mkdir -p build; \
	$(BIN)/python -m compileall -q -j 0 nodeheal lambdas stacks tests > /dev/null; \
	$(BIN)/mypy > build/mypy-check.log 2>&1 & mypy_pid=$$!; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m 'not soak and not slow' $(CHECK_TESTS); tests=$$?; \
	wait $$mypy_pid; typed=$$?; \
	echo "$(BIN)/mypy"; cat build/mypy-check.log; \
	exit $$(( tests != 0 ? tests : typed ))

# Wheels for the Lambda asset, fetched once for the Lambda platform (manylinux x86_64, Python 3.12);
# after this `cdk synth` needs no network and no Docker. The wheelhouse's copy of the requirements
# it was downloaded for (nodeheal/cdk/lambda_asset.py) says whether it is current.
lambda-deps: $(WHEELHOUSE)/requirements.txt

$(WHEELHOUSE)/requirements.txt: lambdas/requirements.txt | $(VENV)/.installed
	@$(STEP) "set-up: Lambda wheels" $(SETUP_LOGS)/lambda-wheels.log $(BIN)/python -m nodeheal.cdk.lambda_asset download
	@touch $@

# The template and the Lambda asset go to CDK_OUT only (cdk synth would otherwise print the whole
# template as YAML), cdk's own messages to SYNTH_LOG, and a summary of what was made to the
# terminal (nodeheal/cdk/synth_summary.py). CDK's notices, fetched from the network, are left to deploy.
synth: bootstrap lambda-deps
	@$(STEP) "synth: cdk synth --output $(CDK_OUT)" $(SYNTH_LOG) \
		env PATH="$(CURDIR)/node_modules/.bin:$$PATH" cdk synth --quiet --no-notices --output $(CDK_OUT)
	@$(BIN)/python -m nodeheal.cdk.synth_summary $(CDK_OUT) --log $(SYNTH_LOG)

# Benchmarks drive the local pipeline (moto + fake API server); results land in benchmarks/results/.
bench: $(VENV)/.installed lambda-deps
	PYTHONPATH="$(CURDIR)" POWERTOOLS_LOG_LEVEL=ERROR $(BIN)/python benchmarks/run_all.py 2> >(grep -v -e 'UserWarning' -e 'flush_metrics' >&2) | grep -v -e '^{"level"' -e '^{"_aws"'

# SCENARIO=name picks another scenario (`make demo SCENARIO=storm`; list: `.venv/bin/nodeheal demo --list`).
demo: $(VENV)/.installed
	$(BIN)/nodeheal demo $(if $(SCENARIO),--scenario $(SCENARIO))
	@echo
	@echo "The nodeheal CLI is $(BIN)/nodeheal (make does not put it on your PATH):"
	@echo "  $(BIN)/nodeheal --help        or: source $(BIN)/activate && nodeheal --help"

rbac: $(VENV)/.installed
	$(BIN)/python -m nodeheal.rbac --group-prefix "$${NODEHEAL_GROUP_PREFIX:-nodeheal}" > deploy/rbac/remediator.yaml
	$(BIN)/python -m nodeheal.rbac --fault-injector --group-prefix "$${NODEHEAL_GROUP_PREFIX:-nodeheal}" > deploy/rbac/fault-injector.yaml

# The release step: pin the exporter image of deploy/exporter-release by the digest the push reported.
pin-image: $(VENV)/.installed
	$(BIN)/python -m nodeheal.image_pin "$(IMAGE)"

# The seeded simulation (nodeheal/sim/seeded): SEED=n replays one schedule, PLAN=... exact faults.
simulate: $(VENV)/.installed
	@$(BIN)/nodeheal simulate $(if $(SEED),--seed $(SEED),--schedules $${SCHEDULES:-500}) $(if $(PLAN),--plan '$(PLAN)')

# The mutation gate: each safety mutant (tests/simulation/mutants.py) must be caught by the seeded
# simulation alone within 2,000 schedules; each caught mutant prints its row of the table in
# docs/simulation-finds-the-safety-defects.md.
mutate: $(VENV)/.installed
	$(BIN)/pytest -q -s -p no:cacheprovider -m soak tests/simulation/test_mutation_gate.py

# Long runs: the mutation gate, the search that finds each fixed defect again without its fix,
# 20,000 seeded schedules (SCHEDULES=n to change; FIRST_SEED=n for a range never run before) and a
# sample over the DynamoDB ledger in moto. It says how long it took.
soak: $(VENV)/.installed
	@started=$$(date +%s); \
	$(BIN)/pytest -q -s -p no:cacheprovider -m soak tests/simulation && \
	$(BIN)/nodeheal simulate --schedules $${SCHEDULES:-20000} --first-seed $${FIRST_SEED:-8000000} && \
	$(BIN)/nodeheal simulate --schedules $${MOTO_SCHEDULES:-50} --first-seed 2000000 --ledger dynamodb; \
	status=$$?; echo "make soak took $$(( $$(date +%s) - started )) s"; exit $$status

# Everything make created but npm's packages (node_modules): the virtualenvs too, so the next target
# rebuilds it with the interpreter PYTHON names.
clean:
	rm -rf $(CDK_OUT) build .mypy_cache .ruff_cache .pytest_cache $(VENV) $(SCAN_VENV)
