# Targets that people and CI both use. `make demo` and `make test` set everything up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck unit bench chaos clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(BIN)/python -m examples.demo

lint: setup
	$(BIN)/ruff check rsjobs tests examples
	$(BIN)/ruff format --check rsjobs tests examples

typecheck: setup
	$(BIN)/mypy

test: setup lint typecheck
	$(BIN)/python -m pytest -q

unit: setup
	$(BIN)/python -m pytest -q tests/unit tests/lua

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
