#!/usr/bin/env bash
# A real one-node Slurm cluster on 127.0.0.1 for the tests (Debian's slurm-wlm 22.05 and munge).
#   scripts/slurm.sh start DIR   -> installs the packages if missing, writes DIR/slurm.conf (cons_tres, no accounting),
#                                   starts munged, slurmctld and slurmd; prints the SLURM_CONF path to export
#   scripts/slurm.sh stop DIR    -> cancels the cluster's jobs, then stops the three daemons by their PIDs
set -euo pipefail
cmd=${1:?start|stop}; dir=$(mkdir -p "${2:?directory}" && cd "$2" && pwd)
ctl_port=${ABLATE_SLURMCTLD_PORT:-16817}; d_port=${ABLATE_SLURMD_PORT:-16818}

stop_pid() {  # stop_pid PIDFILE: TERM, wait, then KILL
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

if [ "$cmd" = stop ]; then
  # first end this cluster's jobs: job steps outlive a stopped slurmd, and would wait for it forever
  if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    export SLURM_CONF="$dir/slurm.conf"
    scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 300); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  stop_pid "$dir/slurmd.pid"; stop_pid "$dir/slurmctld.pid"; stop_pid "$dir/munged.pid"
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge) >&2
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chown munge:munge "$dir/munge" 2>/dev/null || true
[ -f /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || \
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; chown munge:munge /etc/munge/munge.key; \
  chmod 400 /etc/munge/munge.key; }
cat > "$dir/slurm.conf" <<CONF
ClusterName=ablate-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
munged --force --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" >&2
export SLURM_CONF="$dir/slurm.conf"
slurmctld -c -f "$SLURM_CONF" >&2
slurmd -f "$SLURM_CONF" -N "$host" >&2
for _ in $(seq 1 100); do
  state=$(sinfo -h -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break; sleep 0.2
done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || { echo "slurm did not come up: $(sinfo 2>&1 | tail -2)" >&2; exit 1; }
echo "$SLURM_CONF"
