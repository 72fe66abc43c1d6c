# One command per verb. `make run` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
WORKFLOW ?= dag
export SHOAL_DATA_DIR ?= $(CURDIR)/.shoal

.PHONY: setup clis browser pdf deploy-tools run up test test-fast lint fmt docs docs-serve bench clean

# The AI CLIs the tests drive for real, pinned (installed by npm into .tools/, not in git).
CLI_PACKAGES := @anthropic-ai/claude-code@2.1.197 @google/gemini-cli@0.61.0 @openai/codex@0.169.0

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.lock
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	@# Byte-compile once: with PYTHONDONTWRITEBYTECODE set, every process would recompile.
	$(PY) -m compileall -q -j 0 $(VENV)/lib src >/dev/null
	touch $@

## Install the pinned AI CLIs into .tools/ (skipped, with a notice, when npm is missing).
clis: .tools/.installed-clis

.tools/.installed-clis: Makefile
	@if command -v npm >/dev/null 2>&1; then \
		echo "Installing AI CLIs for the tests: $(CLI_PACKAGES)"; \
		mkdir -p .tools && npm install --prefix .tools --no-audit --no-fund --loglevel=error \
			$(CLI_PACKAGES) && touch $@; \
	else \
		echo "NOTICE: npm not found: the Claude Code, Gemini and Codex CLI tests will be skipped."; \
	fi

## Debian's chromium for the dashboard's browser tests (Playwright's own browser download cannot
## work here); as root with apt-get, else a notice (the browser tests then skip, or fail under CI).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "Installing Debian's chromium for the dashboard's browser tests"; \
			apt-get install -y -q chromium >/dev/null 2>&1 || \
				(apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null); \
		else \
			echo "NOTICE: /usr/bin/chromium is missing: the dashboard's browser tests will skip."; \
		fi; \
	fi

## Pango and HarfBuzz's subsetter, which WeasyPrint needs to render reports as PDF (Debian packages;
## chromium brings them too); as root with apt-get, else a notice (the PDF tests then skip, or fail
## under CI; WeasyPrint warns without the subsetter, and the tests take warnings as errors).
PDF_PACKAGES = libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0

pdf:
	@if ! ldconfig -p 2>/dev/null | grep -q libpangoft2-1.0.so.0 || \
	    ! ldconfig -p 2>/dev/null | grep -q libharfbuzz-subset.so.0; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "Installing Pango and HarfBuzz's subsetter for PDF reports"; \
			apt-get install -y -q $(PDF_PACKAGES) >/dev/null 2>&1 || \
				(apt-get update -q >/dev/null && \
				 apt-get install -y -q $(PDF_PACKAGES) >/dev/null); \
		else \
			echo "NOTICE: Pango or HarfBuzz's subsetter is missing: reports cannot be rendered as PDF."; \
		fi; \
	fi

## docker-compose (1.29) and HAProxy, Debian packages with which tests/deploy checks compose.yaml
## and deploy/haproxy.cfg (no Docker daemon needed); as root with apt-get, else a notice (those
## checks then skip, or fail under CI). Run by `make test`.
deploy-tools:
	@missing=""; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing="$$missing haproxy"; \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "Installing$$missing for the deployment checks"; \
			apt-get install -y -q $$missing >/dev/null 2>&1 || \
				(apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null); \
		else \
			echo "NOTICE:$$missing missing: the compose and HAProxy checks of tests/deploy will skip."; \
		fi; \
	fi

## Run the main job on the embedded default: SQLite, in-process bus, demo model, one local
## worker; submits a sample task, follows it live, and exits when it ends. WORKFLOW=pipeline,
## WORKFLOW=supervisor, research or proposal runs that workflow's sample instead of `dag`.
run: setup
	$(VENV)/bin/shoal up --demo --port $(PORT) --workflow $(WORKFLOW)

## Keep Shoal running (until Ctrl-C) with the login link printed.
up: setup
	$(VENV)/bin/shoal up --port $(PORT)

## Test processes (pytest-xdist): every test has its own database, folders and ports, so they
## run side by side; two is what CI runs on its two cores (34 -> 21 min). A larger machine may
## take more, e.g. `make test TEST_WORKERS=4` (each e2e test starts servers and workers).
TEST_WORKERS ?= 2

## The whole test suite, after installing what its tests drive (the AI CLIs, chromium, Pango,
## docker-compose and HAProxy). PostgreSQL and Redis tests skip with a notice if those are
## missing, and fail under CI=true.
test: setup clis browser pdf deploy-tools
	@$(PY) -m compileall -q -j 0 src >/dev/null
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20

test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not e2e"

## ruff's rules (line length included), mypy and the import contracts (pyproject.toml). No auto-formatter: the house style's compact
## continuation lines keep modules within STYLE's sizes, where `ruff format` would add ~4,300
## lines (core.py alone 602 -> 742).
lint: setup
	$(VENV)/bin/ruff check src tests benchmarks docs/reference
	$(VENV)/bin/mypy src docs/reference
	$(VENV)/bin/lint-imports

fmt: setup
	$(VENV)/bin/ruff check --fix src tests benchmarks docs/reference

## The documentation site (mkdocs.yml, docs/) into site/, failing on any warning, after
## writing the reference pages from the code (docs/reference/generate.py); docs-serve serves it
## on http://127.0.0.1:8001 and rebuilds on every change.
docs: setup
	$(PY) docs/reference/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve -a 127.0.0.1:8001

## Shoal through its API and in-process, the durable floor and the peers (LangGraph, DBOS,
## Celery: installed into benchmarks/.peers-venv, never into Shoal's), on SQLite and PostgreSQL;
## `make bench BENCH_ARGS=--quick` for the small size.
bench: setup
	$(PY) benchmarks/bench_peers.py --db both $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .shoal .tools site .pytest_cache .mypy_cache .ruff_cache
