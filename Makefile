# IOP Edge — the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/iop_edge

.PHONY: setup run test test-postgres lint bench

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

## setup: virtualenv, dependencies, database migrations (idempotent)
setup: $(VENV)/.installed
	$(PY) manage.py migrate --verbosity 0

## run: set up, generate the bootstrap tokens and config, serve the Edge with a local Node
run: setup
	$(PY) manage.py run_local

## test: lint, format and type checks, migration check, the suite on SQLite, then on PostgreSQL
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run
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

## bench: every benchmark, quick mode
bench: setup
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done
