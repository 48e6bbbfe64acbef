#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, to try the sbatch recipes (and to test them:
# tests/test_slurm.py). Needs root and Debian's slurm-wlm and munge packages.
#
#   docker/slurm/one_node_cluster.sh install      # apt-get install slurm-wlm munge (once)
#   docker/slurm/one_node_cluster.sh start DIR    # config, state and logs under DIR
#   export SLURM_CONF=DIR/slurm.conf              # then sbatch, squeue, scontrol ... as usual
#   docker/slurm/one_node_cluster.sh stop DIR     # stops the daemons it started
#
# The node is this host with all its CPUs and no GPUs; daemons listen on free ports, so it does
# not clash with a site's SLURM. KillWait (seconds between SIGTERM and SIGKILL when a job is
# requeued, preempted or cancelled) is $KILL_WAIT, default 30 as in SLURM. munged is started
# when none runs, and stopped again by `stop`.
set -euo pipefail

die() { echo "error: $*" >&2; exit 2; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1 node cpus
    [[ $(id -u) == 0 ]] || die "the SLURM daemons need root; run as root"
    command -v slurmctld >/dev/null && command -v munged >/dev/null \
        || die "slurm-wlm and munge are not installed; run: $0 install"
    mkdir -p "$dir"/{state,spool}
    dir=$(cd "$dir" && pwd)
    node=$(hostname -s)
    cpus=$(nproc)
    cat > "$dir/slurm.conf" <<EOF
ClusterName=resnet-nobn-test
SlurmctldHost=$node
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=${KILL_WAIT:-30}
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    if ! pgrep -x munged >/dev/null; then
        mkdir -p /run/munge && chown munge:munge /run/munge
        runuser -u munge -- /usr/sbin/munged
        touch "$dir/started_munged"
    fi
    SLURM_CONF=$dir/slurm.conf slurmctld
    SLURM_CONF=$dir/slurm.conf slurmd
    for _ in $(seq 100); do
        if SLURM_CONF=$dir/slurm.conf sinfo -h -o %T 2>/dev/null | grep -qx idle; then
            echo "SLURM_CONF=$dir/slurm.conf"
            return 0
        fi
        sleep 0.2
    done
    stop "$dir"
    die "the node did not become idle in 20 s; see $dir/slurmctld.log and $dir/slurmd.log"
}

stop() {
    local dir=$1 pid
    for daemon in slurmd slurmctld; do
        if [[ -f "$dir/$daemon.pid" ]] && pid=$(cat "$dir/$daemon.pid") \
                && kill "$pid" 2>/dev/null; then
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    if [[ -f "$dir/started_munged" ]]; then
        pkill -x munged || true
        rm -f "$dir/started_munged"
    fi
}

case "${1:-}" in
    install) DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge ;;
    start) [[ $# == 2 ]] || die "usage: $0 start DIR"; start "$2" ;;
    stop) [[ $# == 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
