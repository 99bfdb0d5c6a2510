# GPU Portal: `make run` starts everything on this machine, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
export PORT

.PHONY: install install-dev chromium sandbox run test test-gpu test-k8s migrate clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when a requirements file changed.
$(VENV)/.installed: requirements.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@ $(VENV)/.installed

# portalctl, the command-line client: a launcher that runs `python -m portalctl` from this checkout.
$(VENV)/bin/portalctl: | $(VENV)/bin/python
	printf '#!/bin/sh\nPYTHONPATH="%s$${PYTHONPATH:+:$$PYTHONPATH}" exec "%s" -m portalctl "$$@"\n' "$(CURDIR)" "$(abspath $(PY))" > $@
	chmod +x $@

install: $(VENV)/.installed $(VENV)/bin/portalctl

install-dev: $(VENV)/.installed-dev $(VENV)/bin/portalctl

migrate: install
	$(PY) manage.py migrate --noinput -v0
	@if [ -z "$$REDIS_URL" ]; then $(PY) manage.py migrate --database channels --noinput -v0; fi

# Jobs on the local executor run in a bubblewrap sandbox with a slirp4netns network (jobs/executors/sandbox.py).
sandbox:
	@if ! command -v bwrap >/dev/null || ! command -v slirp4netns >/dev/null; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap slirp4netns; \
	fi

run: migrate sandbox
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py demo --url "http://127.0.0.1:$(PORT)/"
	@echo "Starting web, worker, beat (scheduler) and watcher; Ctrl-C stops them all."
	$(VENV)/bin/honcho --procfile platform/Procfile --app-root . start --port $(PORT)

# The browser tests (tests/browser) drive Debian's Chromium, never a browser Playwright downloads.
# A CJK font too, so that screenshots of the Chinese pages show characters, not boxes.
chromium:
	@if [ ! -x /usr/bin/chromium ] || [ ! -d /usr/share/fonts/truetype/wqy ]; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-wqy-microhei; \
	fi

# Tests keep their files (test databases, broker folder, screenshots) apart from `make run`'s.
test: install-dev chromium sandbox
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test}" $(PY) -m pytest

# On a machine with NVIDIA GPUs: what a sandboxed job sees of them (tests/gpu; skipped everywhere else).
test-gpu: install-dev sandbox
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test-gpu}" $(PY) -m pytest -v tests/gpu

# The executor contract suite against a real cluster with the Training Operator (never run by `make test`):
# KUBECONFIG plus the PORTAL_K8S_* variables that tests/k8s/test_contract_on_cluster.py documents.
test-k8s: install-dev
	@if [ -z "$$KUBECONFIG" ]; then echo "make test-k8s needs KUBECONFIG (see tests/k8s/test_contract_on_cluster.py)"; exit 2; fi
	PORTAL_DATA_ROOT="$${PORTAL_TEST_DATA_ROOT:-$(CURDIR)/var/test-k8s}" $(PY) -m pytest tests/k8s/test_contract_on_cluster.py

clean:
	rm -rf var/test
