#!/usr/bin/env bash
# Make sure a PostgreSQL server runs on this machine and print the URL of a
# database the tests may use (role and database `wh_test`, password auth over
# 127.0.0.1). Everything else goes to stderr, so `url=$(scripts/postgres.sh)`
# works. Idempotent: run it as often as you like.
#
# As root it installs Debian's `postgresql` package when it is missing, starts
# the cluster and creates the role and database. As the `postgres` user it does
# the same except installing. Anyone else: set WH_TEST_PG_URL instead.
set -euo pipefail

ROLE=wh_test
DB=wh_test
# A fixed password for a test-only role on a server that listens on localhost.
PASSWORD=wh_test

say() { echo "postgres.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

# psql as the database superuser, through the Unix socket (peer auth).
as_superuser() {
    if [[ $(id -u) == 0 ]]; then
        runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@"
    elif [[ $(id -un) == postgres ]]; then
        psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@"
    else
        die "run as root (or as postgres), or set WH_TEST_PG_URL to a database you may use"
    fi
}

# 1. The server software (Debian's packaging with pg_ctlcluster).
if ! command -v pg_ctlcluster >/dev/null || ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    [[ $(id -u) == 0 ]] || die "PostgreSQL is not installed and only root may install it"
    say "installing Debian's postgresql package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2 || die "apt-get update failed"
    apt-get install -y --no-install-recommends postgresql >&2 || die "apt-get install postgresql failed"
fi

# 2. A cluster: the newest version's `main`, created if the package made none.
VERSION=$(pg_lsclusters -h | awk '$2 == "main" {print $1}' | sort -V | tail -n 1)
if [[ -z $VERSION ]]; then
    VERSION=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
    [[ -n $VERSION ]] || die "no PostgreSQL version found under /usr/lib/postgresql"
    [[ $(id -u) == 0 ]] || die "no PostgreSQL cluster exists and only root may create one"
    say "creating cluster $VERSION/main"
    pg_createcluster "$VERSION" main >&2 || die "pg_createcluster $VERSION main failed"
fi
PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" {print $3}')
STATUS=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" {print $4}')

# 3. Running.
if [[ $STATUS != online* ]]; then
    say "starting cluster $VERSION/main on port $PORT"
    pg_ctlcluster "$VERSION" main start >&2 || service postgresql start >&2 ||
        die "could not start PostgreSQL $VERSION/main (see /var/log/postgresql/)"
fi
for _ in $(seq 1 60); do
    as_superuser -Atc "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.5
done
as_superuser -Atc "SELECT 1" >/dev/null || die "PostgreSQL $VERSION/main does not answer on port $PORT"

# 4. The test role and database (the role owns the database, so it may create
# the per-test schemas).
as_superuser -d postgres >&2 <<SQL
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN;
    END IF;
END
\$\$;
ALTER ROLE $ROLE LOGIN PASSWORD '$PASSWORD';
SQL
if [[ -z $(as_superuser -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$DB'") ]]; then
    as_superuser -d postgres -c "CREATE DATABASE $DB OWNER $ROLE ENCODING 'UTF8' TEMPLATE template0" >&2 ||
        die "could not create database $DB"
fi

echo "postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB"
