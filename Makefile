# IOP Edge — the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/iop_edge
LOCK_TOOLS := $(VENV)/lock-tools
# The browser tests (tests/browser) drive this chromium; without it they are skipped.
CHROMIUM ?= $(or $(IOP_CHROMIUM),/usr/bin/chromium)
# The Edges started here are local development ones, on loopback over plain HTTP: each
# generates its SECRET_KEY into its var dir, and the warning about TLS settings is moot.
export IOP_GENERATE_SECRET_KEY ?= true
export IOP_SILENCED_SYSTEM_CHECKS ?= edge.W001

.PHONY: setup run test test-postgres lint bench lock

# Exactly the locked versions, each checked against its hash; then the project itself.
$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

## setup: virtualenv, dependencies, database migrations, static files (idempotent)
setup: $(VENV)/.installed
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py collectstatic --noinput --verbosity 0

## run: set up, generate the bootstrap tokens and config, serve the Edge with a local Node
run: setup
	$(PY) manage.py run_local

## test: lint, format and type checks, migration check, the suite on SQLite, then on PostgreSQL
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run
	@if [ -x "$(CHROMIUM)" ]; then echo "chromium at $(CHROMIUM): running the browser tests"; \
	else echo "No chromium at $(CHROMIUM): browser tests skipped (apt-get install -y chromium)"; fi
	$(VENV)/bin/pytest
	$(MAKE) --no-print-directory test-postgres

test-postgres: $(VENV)/.installed
	@if $(PY) scripts/port_open.py 127.0.0.1 5432; then \
		echo "PostgreSQL answers at 127.0.0.1:5432: running the database tests against it"; \
		DATABASE_URL=$(PG_URL) $(VENV)/bin/pytest -m django_db --create-db; \
	else \
		echo "No PostgreSQL at 127.0.0.1:5432: skipped the PostgreSQL leg"; \
	fi

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## lock: regenerate requirements.lock from pyproject.toml after changing a pin there
lock:
	test -x $(LOCK_TOOLS)/bin/pip-compile || \
		{ $(PYTHON) -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/pip install --quiet pip-tools==7.6.2; }
	$(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --extra dev \
		--strip-extras --no-emit-find-links --no-emit-index-url -o requirements.lock pyproject.toml

## bench: every benchmark, quick mode
bench: setup
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done
