# One command for each habit. Everything installs into .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

test: install
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf $(VENV) demo-out test-artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis
