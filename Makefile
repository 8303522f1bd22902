# Two set-up commands: `make run` (embedded demo) and `make test` (whole suite).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

# Tests connect as the PostgreSQL superuser, so the start-up role check is off
# for the suite (OWLAI_DB_ROLE_CHECK=0); tests/test_audit_db_guards.py and
# tests/test_startup_refusals.py exercise the check itself.
# Test services: used when reachable (CI sets OWLAI_REQUIRE_SERVICES=1 and
# then a skipped service test is a failure).
TEST_PG_URL ?= postgres://postgres@127.0.0.1:5432/owlai
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: install install-dev run test lint format bench messages browser-deps

# Requirements are installed with uv (pinned here; pip installs it): with
# the downloads cached it sets up the runtime in about 2 s where pip took
# about 20 s, most of it resolving against the index, before a newcomer's
# first page.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv

# Two virtualenv markers: `make run` needs only the runtime requirements;
# tests, lint and benches add the dev ones (pytest, spaCy, Presidio, ...).
$(VENV)/.runtime: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -r requirements-dev.txt
	touch $@

install: $(VENV)/.runtime

install-dev: $(VENV)/.dev

# The browser tests drive Debian's Chromium (Playwright cannot download its
# own browser here) and need CJK fonts to render Korean; installed when missing.
BROWSER_PACKAGES := chromium fonts-noto-cjk
browser-deps:
	@if ! dpkg -s $(BROWSER_PACKAGES) >/dev/null 2>&1; then \
		echo "make browser-deps: installing $(BROWSER_PACKAGES)"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES); \
	fi

run: install
	$(PY) manage.py compilemessages --ignore=.venv -v 0 2>/dev/null || true
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py seed_demo
	$(PY) manage.py runserver --insecure $(HOST):$(PORT)

# The suite runs in the production profile, which refuses the example
# config's offline demo model; tests/owlai.test.toml is the example plus the
# flag that allows it.
test: export OWLAI_CONFIG := $(or $(OWLAI_CONFIG),$(CURDIR)/tests/owlai.test.toml)
test: install-dev browser-deps
	@$(PY) manage.py compilemessages --ignore=.venv -v 0 2>/dev/null || true
	@if $(PY) -c "import socket; socket.create_connection(('127.0.0.1', 5432), 1).close(); socket.create_connection(('127.0.0.1', 6379), 1).close()" 2>/dev/null; then \
		echo "make test: PostgreSQL and Redis reachable; running against them"; \
		DATABASE_URL=$${DATABASE_URL:-$(TEST_PG_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
		OWLAI_DB_ROLE_CHECK=$${OWLAI_DB_ROLE_CHECK:-0} \
		SECRET_KEY=$${SECRET_KEY:-owlai-test-secret-key} $(PY) -m pytest $(PYTEST_ARGS) && \
		echo "make test: second pass, the embedded (SQLite) profile's own guards" && \
		env -u DATABASE_URL -u REDIS_URL $(PY) -m pytest -m embedded $(PYTEST_ARGS); \
	else \
		echo "make test: PostgreSQL/Redis not reachable; service tests will skip"; \
		env -u DATABASE_URL -u REDIS_URL $(PY) -m pytest $(PYTEST_ARGS); \
	fi

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: export OWLAI_CONFIG := $(or $(OWLAI_CONFIG),$(CURDIR)/tests/owlai.test.toml)
bench: install-dev
	$(PY) bench/executor.py
	$(PY) bench/mask.py
	$(PY) bench/audit_admin.py
	$(PY) bench/load.py

messages: install
	$(PY) manage.py makemessages -l ko -l en --ignore=.venv --ignore=tests
	$(PY) manage.py compilemessages --ignore=.venv
