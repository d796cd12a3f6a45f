# Handoff: `make run` serves the app on http://127.0.0.1:8000, `make test` runs everything.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PROCESSES ?= 1
PYTEST_ARGS ?=

# A Python 3.12+ interpreter: $PYTHON, python3.13/3.12 on PATH, pyenv's, or python3 if new enough.
define find_python
for candidate in "$$PYTHON" python3.13 python3.12 \
    $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python 2>/dev/null | sort -rV) python3; do \
  [ -n "$$candidate" ] || continue; \
  command -v "$$candidate" >/dev/null 2>&1 || [ -x "$$candidate" ] || continue; \
  if "$$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then echo "$$candidate"; exit 0; fi; \
done; exit 1
endef

.PHONY: help
help:
	@echo "make run    - install, migrate, load the skill catalog, serve on http://$(HOST):$(PORT)"
	@echo "make test   - install and run the whole suite (lint, types, unit, API, browser)"
	@echo "make lint   - ruff, mypy and the protocol import contract"
	@echo "make bench  - benchmarks (protocol throughput, runner vs peers)"
	@echo "make eval   - the reference delegations on every shipped local model, as a table"

$(PY):
	@python_bin=$$($(find_python)) || { \
	  echo "Handoff needs Python 3.12 or newer (Django 6.1). Install one, e.g. 'pyenv install 3.12'" \
	       "or 'apt-get install python3.12 python3.12-venv', or set PYTHON=/path/to/python3.12." >&2; exit 1; }; \
	echo "Creating $(VENV) with $$python_bin ($$($$python_bin --version))"; \
	"$$python_bin" -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	@if ! $(PY) -c 'import llama_cpp' 2>/dev/null; then \
	  echo "Installing llama-cpp-python for the local model: it compiles from source the first time" \
	       "(about 10 minutes on 2 cores; pip caches the wheel afterwards)."; \
	  echo "llama.cpp build options for this CPU: $$(deploy/llama_cmake_args.sh)"; fi
	CMAKE_ARGS="$$(deploy/llama_cmake_args.sh)" $(PY) -m pip install --quiet -e '.[dev,local]'
	@touch $@

.PHONY: install
install: $(VENV)/.installed

.PHONY: run
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py load_builtin_skills
	$(PY) manage.py ensure_admin
	$(PY) manage.py serve --host $(HOST) --port $(PORT) --processes $(PROCESSES)

.PHONY: lint
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

.PHONY: test
test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

.PHONY: bench
bench: install
	$(PY) tests/benchmarks/run_all.py

.PHONY: clean
clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

.PHONY: eval
eval: install
	$(PY) -m tests.evals --verbose
