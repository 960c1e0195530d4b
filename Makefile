# One command for each habit. Everything installs into .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install install-browser install-sandbox demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,server,dask,postgres]'
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

# The catalog tests run on SQLite and on a real PostgreSQL server:
# scripts/postgres.sh starts one (installing it when run as root) unless
# WH_TEST_PG_URL already names a database to use.
# The browser tests drive Debian's chromium (no browser download): installed
# here when missing, as root (CI runs as root on a fresh Debian machine).
install-browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

# Controller steps run in a bubblewrap sandbox (docs/security.md): installed
# here when missing, as root, like chromium.
install-sandbox:
	command -v bwrap >/dev/null || (apt-get update && apt-get install -y bubblewrap)

test: install install-browser install-sandbox
	@url="$${WH_TEST_PG_URL:-}"; \
	if [ -z "$$url" ]; then \
	  url=$$(scripts/postgres.sh) || { \
	    echo "make test: no PostgreSQL for the catalog tests: scripts/postgres.sh failed" \
	      "(see above). Run as root, or set WH_TEST_PG_URL=postgresql+psycopg://USER:PASS@HOST:PORT/DB." >&2; \
	    exit 1; }; \
	fi; \
	echo "make test: PostgreSQL tests use $${url#*@}"; \
	WH_TEST_PG_URL="$$url" $(BIN)/pytest

lint: install
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/remote.py
	$(BIN)/python benchmarks/steps.py
	$(BIN)/python benchmarks/gc.py
	$(BIN)/python benchmarks/regol.py

clean:
	rm -rf $(VENV) demo-out test-artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis
