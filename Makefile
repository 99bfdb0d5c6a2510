# GPU Portal: `make run` starts everything on this machine, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
export PORT

.PHONY: install install-dev lock chromium sandbox run lint test test-gpu test-k8s migrate clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Dependencies: requirements.txt and requirements-dev.txt are the hand-edited pins; `make lock` compiles them
# (with uv, for CPython 3.11 on Linux x86_64) into requirements.lock and requirements-dev.lock, every
# package pinned with its hashes. Installs read only the locks: --require-hashes, --no-deps. After editing a
# requirements file run `make lock` and commit the locks with it; an install stops while a pin is missing
# from its lock.
UV_COMPILE := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock"
PIP_LOCKED := $(PY) -m pip install --quiet --require-hashes --no-deps -r

# $(call check_lock,LOCK,REQUIREMENTS...): every line of the requirements files is a name==version pin found in LOCK.
check_lock = $(PY) -c 'import re, sys; \
	norm = lambda n: re.sub(r"[-_.]+", "-", n).lower(); \
	lock = set(re.findall(r"^([a-z0-9][a-z0-9._-]*==[^\s;\\]+)", open(sys.argv[1]).read(), re.M)); \
	lines = [l.split("\#")[0].strip() for f in sys.argv[2:] for l in open(f)]; \
	pins = [(l, re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^]]*\])?==(\S+)", l)) for l in lines if l and not l.startswith("-")]; \
	bad = [l for l, m in pins if not (m and norm(m[1]) + "==" + m[3] in lock)]; \
	bad and sys.exit(sys.argv[1] + " does not match " + " ".join(sys.argv[2:]) + " (unpinned, or run make lock): " + ", ".join(bad))' $(1) $(2)

# Reinstall only when a lock (or a requirements file, to catch a forgotten `make lock`) changed.
$(VENV)/.installed: requirements.lock requirements.txt | $(VENV)/bin/python
	@$(call check_lock,requirements.lock,requirements.txt)
	$(PIP_LOCKED) requirements.lock
	touch $@

$(VENV)/.installed-dev: requirements-dev.lock requirements.lock requirements.txt requirements-dev.txt | $(VENV)/bin/python
	@$(call check_lock,requirements-dev.lock,requirements.txt requirements-dev.txt)
	$(PIP_LOCKED) requirements-dev.lock
	touch $@ $(VENV)/.installed

# uv itself, for `make lock` in a fresh checkout: its entry of requirements.lock alone (it has no dependencies).
$(VENV)/bin/uv: | $(VENV)/bin/python
	$(PIP_LOCKED) <(awk '/^uv==/ { f = 1; print; next } f && /^ / { print; next } { f = 0 }' requirements.lock)

# The dev lock is compiled under the runtime lock, so both hold the same versions of the runtime packages.
lock: | $(VENV)/bin/uv
	$(UV_COMPILE) -o requirements.lock requirements.txt
	$(UV_COMPILE) -c requirements.lock -o requirements-dev.lock requirements-dev.txt

# portalctl, the command-line client: a launcher that runs `python -m portalctl` from this checkout.
$(VENV)/bin/portalctl: | $(VENV)/bin/python
	printf '#!/bin/sh\nPYTHONPATH="%s$${PYTHONPATH:+:$$PYTHONPATH}" exec "%s" -m portalctl "$$@"\n' "$(CURDIR)" "$(abspath $(PY))" > $@
	chmod +x $@

# The scheduler's pure core compiled to C with mypyc (quotas/scheduler/compiled.py: what, where, and when it is
# used instead of the sources), again whenever one of its sources changes. Without a C compiler it runs as Python.
SCHEDULER_CORE := $(wildcard quotas/scheduler/*.py quotas/scheduler/placement/*.py)
.build/scheduler/manifest.json: $(SCHEDULER_CORE) | $(VENV)/.installed
	$(PY) -m quotas.scheduler.build

install: $(VENV)/.installed $(VENV)/bin/portalctl .build/scheduler/manifest.json

install-dev: $(VENV)/.installed-dev $(VENV)/bin/portalctl .build/scheduler/manifest.json

migrate: install
	$(PY) manage.py migrate --noinput -v0
	@if [ -z "$$REDIS_URL" ]; then $(PY) manage.py migrate --database channels --noinput -v0; fi

# Jobs on the local executor run in a bubblewrap sandbox with a slirp4netns network (clusters/sandbox.py).
sandbox:
	@if ! command -v bwrap >/dev/null || ! command -v slirp4netns >/dev/null; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap slirp4netns; \
	fi

run: migrate sandbox
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py demo --url "http://127.0.0.1:$(PORT)/"
	@echo "Starting web, worker, beat (scheduler) and watcher under supervisord: a crashed one is restarted,"
	@echo "logs in $${PORTAL_DATA_ROOT:-var}/logs, health at http://127.0.0.1:$(PORT)/healthz; Ctrl-C stops them all,"
	@echo "and the TensorBoards and model servers they started (running jobs keep running and are adopted again)."
	sh platform/supervise.sh

# The browser tests (tests/browser) drive Debian's Chromium, never a browser Playwright downloads.
# A CJK font too, so that screenshots of the Chinese pages show characters, not boxes.
chromium:
	@if [ ! -x /usr/bin/chromium ] || [ ! -d /usr/share/fonts/truetype/wqy ]; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-wqy-microhei; \
	fi

# The linter, the formatter's check and the type checker (configured in pyproject.toml), before the tests.
# `ruff check --fix .` and `ruff format .` repair most of what the first two report. mypy's Django plugin
# imports the settings, which make their data root: a folder of its own. The import layers (lint-imports)
# are checked by the suite (tests/test_architecture.py).
lint: install-dev
	@echo "lint: ruff check, ruff format --check, mypy"
	@$(VENV)/bin/ruff check --quiet .
	@$(VENV)/bin/ruff format --check .
	@PORTAL_DATA_ROOT="$(CURDIR)/var/lint" $(VENV)/bin/mypy

# Tests keep their files (test databases, broker folder, screenshots) apart from `make run`'s.
# Then the tests that switch a protection of the scheduler core off by patching it (marker pure_core), with the
# core as Python: the compiled core cannot be patched, so the first pass skips them where it runs.
test: lint install-dev chromium sandbox
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test}" $(PY) -m pytest
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test}" PORTAL_COMPILED_SCHEDULER=0 $(PY) -m pytest -q -m pure_core

# On a machine with NVIDIA GPUs: what a sandboxed job sees of them (tests/gpu; skipped everywhere else).
test-gpu: install-dev sandbox
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test-gpu}" $(PY) -m pytest -v tests/gpu

# The executor contract suite against a real cluster with the Training Operator (never run by `make test`):
# KUBECONFIG plus the PORTAL_K8S_* variables that tests/k8s/test_contract_on_cluster.py documents.
test-k8s: install-dev
	@if [ -z "$$KUBECONFIG" ]; then echo "make test-k8s needs KUBECONFIG (see tests/k8s/test_contract_on_cluster.py)"; exit 2; fi
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test-k8s}" $(PY) -m pytest tests/k8s/test_contract_on_cluster.py

clean:
	rm -rf var/test .build
