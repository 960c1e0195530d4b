#!/usr/bin/env bash
# Make sure a one-node Slurm cluster runs on this machine (slurmctld and
# slurmd, authenticated by a munged of its own) and print the path of its
# slurm.conf, so `export SLURM_CONF=$(scripts/slurm.sh)` points every Slurm
# command at it. Everything else goes to stderr. Idempotent: run it as often
# as you like; a running cluster is left alone.
#
# As root it installs Debian's `slurm-wlm` and `munge` packages when they are
# missing. The daemons run as root; their key, state, spool and logs live in
# WH_SLURM_DIR (default: a directory under the system's temporary directory).
# Finished jobs are recorded by jobcomp/filetxt in that directory (no
# accounting database).
set -euo pipefail

DIR=${WH_SLURM_DIR:-${TMPDIR:-/tmp}/wh-slurm}
CONF=$DIR/slurm.conf
PORT=${WH_SLURM_PORT:-6817}

say() { echo "slurm.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

[[ $(id -u) == 0 ]] || die "run as root: slurmd runs steps as their submitter and needs root"

install -d -m 0700 "$DIR" "$DIR/state" "$DIR/spool" "$DIR/munge"
# One run at a time: two at once (two test processes) would install the
# packages, write the same files and start the daemons twice. The daemons
# are started with the lock's descriptor closed (`9>&-`): one that kept it
# would hold the lock as long as it lives, and every later run would wait.
exec 9>"$DIR/.lock"
flock -w 900 9 || die "another scripts/slurm.sh has held $DIR/.lock for 15 minutes"

# 1. The software.
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    say "installing Debian's slurm-wlm and munge packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2 || die "apt-get update failed"
    apt-get install -y --no-install-recommends slurm-wlm munge >&2 ||
        die "apt-get install slurm-wlm munge failed"
fi

export SLURM_CONF=$CONF

# 2. munged with a key of its own and its socket in DIR.
SOCKET=$DIR/munge/munge.socket
if [[ ! -s $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$DIR/munge/munge.key"
fi
if ! munge -n --socket="$SOCKET" </dev/null >/dev/null 2>&1; then
    say "starting munged"
    munged --key-file="$DIR/munge/munge.key" --socket="$SOCKET" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed" --force >&2 9>&- ||
        die "munged did not start (see $DIR/munge/munged.log)"
fi

# 3. slurm.conf: this host, all its CPUs, most of its memory.
HOST=$(hostname -s)
CPUS=$(nproc --all)
MEM_MB=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 9 / 10))
cat >"$CONF.tmp" <<EOF
# Written by scripts/slurm.sh: a one-node cluster for the warehouse's tests.
ClusterName=wh
SlurmctldHost=$HOST
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# Short jobs: look at the queue often rather than once a minute.
SchedulerParameters=sched_interval=1,sched_min_interval=100000,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=64
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
ReturnToService=2
MinJobAge=60
KillWait=5
InactiveLimit=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=wh Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
if cmp -s "$CONF.tmp" "$CONF"; then
    rm "$CONF.tmp"
    CHANGED=0
else
    mv "$CONF.tmp" "$CONF"
    CHANGED=1
fi

# 4. The daemons (a stale one from an older configuration is restarted).
pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
if ! pid_alive "$DIR/slurmctld.pid"; then
    say "starting slurmctld"
    slurmctld -f "$CONF" >&2 9>&- || die "slurmctld did not start (see $DIR/slurmctld.log)"
elif [[ $CHANGED == 1 ]]; then
    say "slurm.conf changed: reconfiguring"
    scontrol reconfigure >&2 9>&- || true
fi
if ! pid_alive "$DIR/slurmd.pid"; then
    say "starting slurmd"
    slurmd -f "$CONF" >&2 9>&- || die "slurmd did not start (see $DIR/slurmd.log)"
fi

for _ in $(seq 1 120); do
    state=$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null || true)
    case $state in
    idle* | mix* | alloc*) break ;;
    down* | drain*) scontrol update nodename="$HOST" state=resume >&2 2>/dev/null || true ;;
    esac
    sleep 0.5
done
state=$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null || true)
[[ $state == idle* || $state == mix* || $state == alloc* ]] ||
    die "node $HOST is not ready (state '${state:-none}'; see $DIR/slurmctld.log and $DIR/slurmd.log)"
echo "$CONF"
