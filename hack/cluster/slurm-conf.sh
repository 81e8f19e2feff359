#!/usr/bin/env bash
# The Slurm configuration files of the local cluster, each written by one function, from here only:
#   slurm_conf        slurm.conf: slurm_conf_common (the lines every Slurm of the project shares,
#                     hack/old-slurm.sh's too), accounting, the scheduling/priority/preemption
#                     policy (hack/slurm-policy.conf, verbatim), the nodes and partitions;
#   gres_conf, topology_yaml, cgroup_conf, slurmdbd_conf, handoff_conf (slurm-bridge-handoff.conf, the handoff
#   script's: handoff_conf [bridge_ids=slurm-bridge] [max_hold=86400] [state_dir=/var/spool/slurm-bridge]
#   [nodes=HOSTLIST] [prolog_wait=900] [notify=PATH]).
# They print to stdout and read only their settings and hack/lib.sh's SB_* layout, so a Slurm
# elsewhere (in a kind cluster) gets the same body with its own hosts and ports:
#
#   bash hack/cluster/slurm-conf.sh slurm.conf ctld_host=slurmctld-0 dbd_host=slurmdbd node_host= > slurm.conf
#   bash hack/cluster/slurm-conf.sh slurmdbd.conf storage_host=mariadb storage_pass=SECRET > slurmdbd.conf
#   (or, in a script: . hack/lib.sh; . hack/cluster/slurm-conf.sh; slurm_conf ctld_host=... > FILE)
#
# Settings are KEY=VALUE arguments; an unknown key is refused. Defaults are the local cluster's.
#   cluster     ClusterName                                     $SB_SLURM_CLUSTER (slurm-bridge-local)
#   ctld_host   SlurmctldHost                                   localhost
#   ctld_port   SlurmctldPort (SlurmdPort is the next port)     $SB_SLURMCTLD_PORT
#   dbd_host    AccountingStorageHost; slurmdbd's DbdHost       localhost
#   dbd_port    AccountingStoragePort; slurmdbd's DbdPort       $SB_SLURMDBD_PORT
#   state_dir   StateSaveLocation, spool, pid files, jwt.key    $SLURM_STATE_IN_ROOT (/var/lib/slurm-bridge)
#   node_host   NodeHostname of the slurmd nodes (empty: none,  localhost
#               so each node's name is its host name)
#   spool_dir   SlurmdSpoolDir                                  $state_dir/spool/%n
#   slurmd_pid  SlurmdPidFile                                   $state_dir/slurmd-%n.pid
#   workers     "name=address ..." : instead of the local        (empty: the local cluster's
#               cluster's nodes, these slurmd nodes (a kind     kwok, hybrid and real nodes)
#               cluster's workers, hack/kind/slurm.sh), sized
#               worker_cpus/worker_memory_mib, in $SB_PARTITION
#   worker_gpus the workers' GPUs, hack/cluster/gpus.py's       (empty: none)
#               format (a kind cluster's SB_KIND_GPUS):
#               their Gres= (gres_conf takes it too)
# slurmdbd_conf also takes dbd_addr (DbdAddr, 127.0.0.1; empty: none), storage_host (127.0.0.1),
# storage_port ($SB_MARIADB_PORT) and storage_pass (required; "-" leaves StoragePass out, for a
# container that appends it from a Secret).

conf_settings() { # "name..." KEY=VALUE... : set the caller's locals of those names (bash's dynamic scope)
  local known=" $1 " kv
  shift
  for kv; do
    [[ $kv == *=* ]] || die "expected a KEY=VALUE setting, got '$kv'"
    [[ $known == *" ${kv%%=*} "* ]] || die "unknown setting '${kv%%=*}' (known:$known)"
    printf -v "${kv%%=*}" '%s' "${kv#*=}"
  done
}

# The lines every Slurm of the project has (this cluster's, and hack/old-slurm.sh's 24.11).
slurm_conf_common() { # cluster ctld_host ctld_port state_dir [spool_dir slurmd_pid]
  cat <<EOF
ClusterName=$1
SlurmctldHost=$2
SlurmctldPort=$3
SlurmdPort=$(($3 + 1))
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$4/jwt.key
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
StateSaveLocation=$4/state
SlurmctldPidFile=$4/slurmctld.pid
# Several slurmd on one host: each has its own spool and pid file (%n: its node name).
SlurmdSpoolDir=${5:-$4/spool/%n}
SlurmdPidFile=${6:-$4/slurmd-%n.pid}
EOF
}

slurm_conf() { # [KEY=VALUE...] : the local cluster's slurm.conf
  local cluster=$SB_SLURM_CLUSTER ctld_host=localhost ctld_port=$SB_SLURMCTLD_PORT dbd_host=localhost
  local dbd_port=$SB_SLURMDBD_PORT state_dir=$SLURM_STATE_IN_ROOT node_host=localhost spool_dir= slurmd_pid=
  local workers= worker_cpus=4 worker_memory_mib=8192 worker_gpus=
  conf_settings "cluster ctld_host ctld_port dbd_host dbd_port state_dir node_host spool_dir slurmd_pid workers worker_cpus worker_memory_mib worker_gpus" "$@"
  if [ -n "$workers" ]; then
    echo "# Written by hack/cluster/slurm-conf.sh: slurmd on every worker of a kind cluster."
  else
    echo "# Written by hack/cluster/slurm-conf.sh: external nodes (no slurmd) mirroring kwok nodes, and"
    echo "# hybrid nodes served by real slurmd processes."
  fi
  slurm_conf_common "$cluster" "$ctld_host" "$ctld_port" "$state_dir" "$spool_dir" "$slurmd_pid"
  cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$dbd_host
AccountingStoragePort=$dbd_port
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
ReturnToService=2
MaxJobCount=$SB_MAX_JOB_COUNT
MinJobAge=$SB_MIN_JOB_AGE
DefMemPerCPU=256
GresTypes=gpu,shard
EOF
  # slurmctld's hooks are the handoff script's lines there, its one PrologSlurmctld and
  # EpilogSlurmctld: the bridge's notify hook has no line of its own, the handoff runs it at every
  # job's start and end (handoff_conf's notify: its NOTIFY), one script each instead of two.
  echo "# ---- scheduling, priority and preemption: hack/slurm-policy.conf ----"
  grep -v '^[[:space:]]*$' "$HACK_DIR/slurm-policy.conf"
  echo "# ---- nodes and partitions ----"
  if [ -n "$workers" ]; then
    slurm_conf_workers "$workers" "$worker_cpus" "$worker_memory_mib" "$worker_gpus"
  else
    slurm_conf_nodes "$node_host"
  fi
}

slurm_conf_workers() { # "name=address ..." cpus memory_mib [gpus] : every worker a slurmd node, one partition
  local w names=() gres
  for w in $1; do
    names+=("${w%%=*}")
    gres=$(SB_HYBRID_GPUS=${4:-} python3 -P "$HACK_DIR/cluster/gpus.py" gres "${w%%=*}") || die "the workers' GPUs ($4): see above"
    # Each worker its own block and leaf switch (topology_yaml workers=...), in the workers' order.
    echo "NodeName=${w%%=*} NodeAddr=${w#*=} CPUs=$2 RealMemory=$3${gres:+ Gres=$gres}$(node_topology "${#names[@]}") State=UNKNOWN"
  done
  echo "PartitionName=$SB_PARTITION Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
}

slurm_conf_nodes() { # node_host : nodes and partitions of hack/lib.sh's layout
  local n_cpu=$((SB_NODES - SB_GPU_NODES)) host="${1:+ NodeHostname=$1}" name hybrid gres
  hybrid=$(hybrid_node_names | paste -sd, -)
  # Dynamic nodes: the bridge registers labelled Kubernetes nodes (docs/nodes.md); a NodeSet per
  # partition selects them by the feature that names it. MaxNodeCount counts the static nodes too.
  echo "MaxNodeCount=$((SB_NODES + SB_HYBRID_NODES + 1 + $(missized_node_names | wc -l) + SB_DYN_NODE_MAX))"
  echo "NodeSet=dyn-$SB_PARTITION Feature=$SB_PARTITION"
  echo "NodeSet=dyn-$SB_EXTRA_PARTITION Feature=$SB_EXTRA_PARTITION"
  [ "$n_cpu" -gt 0 ] && echo "NodeName=${SB_NODE_PREFIX}[1-$n_cpu] NodeHostname=localhost CPUs=$SB_NODE_CPUS RealMemory=$SB_NODE_MEMORY_MIB Features=kwok State=EXTERNAL$(node_topology 1)"
  [ "$SB_GPU_NODES" -gt 0 ] && echo "NodeName=${SB_NODE_PREFIX}[$((n_cpu + 1))-$SB_NODES] NodeHostname=localhost CPUs=$SB_NODE_CPUS RealMemory=$SB_NODE_MEMORY_MIB Gres=gpu:$SB_NODE_GPUS Features=kwok,gpu State=EXTERNAL$(node_topology 2)"
  # Hybrid nodes: a slurmd each (hack/cluster/slurmd.sh), sized as their Kubernetes nodes are.
  for name in $(hybrid_node_names); do
    gres=$(python3 -P "$HACK_DIR/cluster/gpus.py" gres "$name") || die "SB_HYBRID_GPUS: see above"
    echo "NodeName=$name$host Port=$(slurmd_port "$name") CPUs=$SB_HYBRID_NODE_CPUS RealMemory=$SB_HYBRID_NODE_MEMORY_MIB${gres:+ Gres=$gres} Features=kwok,hybrid$(node_topology 3)"
  done
  echo "NodeName=$SB_REAL_NODE$host Port=$(slurmd_port "$SB_REAL_NODE") CPUs=$(real_node_slurm_cpus) RealMemory=$(real_node_slurm_memory_mib) Features=real"
  # The mis-sized hybrid node: the hybrid nodes' size here, half of it on its kwok node (hack/cluster/kwok.sh).
  for name in $(missized_node_names); do
    echo "NodeName=$name$host Port=$(slurmd_port "$name") CPUs=$SB_HYBRID_NODE_CPUS RealMemory=$SB_HYBRID_NODE_MEMORY_MIB Features=kwok,missized"
  done
  echo "PartitionName=$SB_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES],dyn-$SB_PARTITION Default=YES MaxTime=INFINITE State=UP"
  echo "PartitionName=$SB_EXTRA_PARTITION Nodes=dyn-$SB_EXTRA_PARTITION MaxTime=INFINITE State=UP"
  [ -z "$SB_PENDING_PARTITION" ] || echo "PartitionName=$SB_PENDING_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES] MaxTime=INFINITE State=DOWN"
  echo "PartitionName=$SB_BLOCK_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES] Topology=block MaxTime=INFINITE State=UP"
  echo "PartitionName=$SB_SWITCH_PARTITION Nodes=${SB_NODE_PREFIX}[1-$SB_NODES] Topology=switch MaxTime=INFINITE State=UP"
  [ -z "$hybrid" ] || echo "PartitionName=$SB_HYBRID_PARTITION Nodes=$hybrid MaxTime=INFINITE State=UP"
  echo "PartitionName=$SB_REAL_NODE_PARTITION Nodes=$SB_REAL_NODE MaxTime=INFINITE State=UP"
  [ -z "$SB_MISSIZED_NODE" ] || echo "PartitionName=$SB_MISSIZED_PARTITION Nodes=$SB_MISSIZED_NODE MaxTime=INFINITE State=UP"
}

# The local cluster's network topology (docs/nodes.md#network-topology): a block topology "block" and
# a tree "switch", neither the cluster's default (flat), so only a partition or job that names one
# places by it. A group of nodes is a block and a leaf switch: 1 the CPU kwok nodes, 2 the GPU kwok
# nodes, 3 the hybrid nodes; switch s0 joins the leaves. Each node's place is also on its NodeName
# line (Topology=), which is what slurmrestd reports of a node (its "topology"), and so what the bridge
# labels Kubernetes nodes from; topology.yaml's lists alone are not in the REST API (Slurm 26.05).
topology_groups() { # the groups that have nodes
  [ $((SB_NODES - SB_GPU_NODES)) -le 0 ] || echo 1
  [ "$SB_GPU_NODES" -le 0 ] || echo 2
  [ "$SB_HYBRID_NODES" -le 0 ] || echo 3
}
topology_nodes() { # group : its nodes, as a Slurm hostlist
  local n_cpu=$((SB_NODES - SB_GPU_NODES))
  case $1 in
    1) echo "${SB_NODE_PREFIX}[1-$n_cpu]" ;;
    2) echo "${SB_NODE_PREFIX}[$((n_cpu + 1))-$SB_NODES]" ;;
    3) hybrid_node_names | paste -sd, - ;;
  esac
}
node_topology() { echo " Topology=block:b$1,switch:s$1"; }  # group : the NodeName line's place
topology_yaml() { # [workers="name=address ..."] : the local cluster's, or a kind cluster's (a group per worker)
  local workers= g i=0
  conf_settings "workers" "$@"
  echo "# Written by hack/cluster/slurm-conf.sh (docs/nodes.md#network-topology)."
  if [ -n "$workers" ]; then
    for g in $workers; do i=$((i + 1)); echo "$i ${g%%=*}"; done | topology_yaml_of
  else
    for g in $(topology_groups); do echo "$g $(topology_nodes "$g")"; done | topology_yaml_of
  fi
}
topology_yaml_of() { # stdin "group hostlist" lines : the flat default, and block b<group> / leaf switch s<group> each
  local groups=() lists=() g nodes i
  while read -r g nodes; do groups+=("$g"); lists+=("$nodes"); done
  echo "- topology: flat"
  echo "  cluster_default: true"
  echo "  flat: true"
  echo "- topology: block"
  echo "  block:"
  echo "    blocks:"
  for i in "${!groups[@]}"; do echo "      - block: b${groups[$i]}"; echo "        nodes: ${lists[$i]}"; done
  echo "- topology: switch"
  echo "  tree:"
  echo "    switches:"
  echo "      - switch: s0"
  echo "        children: $(printf 's%s\n' "${groups[@]}" | paste -sd, -)"
  for i in "${!groups[@]}"; do echo "      - switch: s${groups[$i]}"; echo "        nodes: ${lists[$i]}"; done
}

gres_conf() { # [worker_gpus=LAYOUT] : the local cluster's, or only a kind cluster's workers' GPUs
  local n_cpu=$((SB_NODES - SB_GPU_NODES)) worker_gpus=
  conf_settings "worker_gpus" "$@"
  echo "# Written by hack/cluster/slurm-conf.sh."
  if [ -n "$worker_gpus" ]; then
    # The workers' GPUs (slurm_conf's worker_gpus): a record per GPU and per MIG instance on stand-in
    # device files, in the order Slurm numbers them (docs/gpus.md).
    SB_HYBRID_GPUS=$worker_gpus python3 -P "$HACK_DIR/cluster/gpus.py" gres-conf || die "the workers' GPUs ($worker_gpus): see above"
    return 0
  fi
  [ "$SB_GPU_NODES" -gt 0 ] && echo "NodeName=${SB_NODE_PREFIX}[$((n_cpu + 1))-$SB_NODES] Name=gpu Count=$SB_NODE_GPUS"
  # slurmctld refuses a dynamic node's GPUs unless gres.conf gives them device files; with them it
  # also keeps which GPU indices each job holds (IDX in the job's GRES detail), which exact DRA
  # devices need (slurm_bridge/rules/dra/claims.py). A slurm.conf node without slurmd gets no indices from
  # File= lines (checked: Slurm 26.05 reports "gpu(CNT:2)"), so the static GPU nodes count only.
  [ "$SB_DYN_NODE_GPUS" -gt 0 ] && echo "NodeName=${SB_DYN_NODE_PREFIX}[1-$SB_DYN_NODE_MAX] Name=gpu File=/dev/nvidia[0-$((SB_DYN_NODE_GPUS - 1))]"
  # The hybrid nodes' GPUs (SB_HYBRID_GPUS, hack/cluster/gpus.py): a record per GPU and per MIG
  # instance on stand-in device files, in the order Slurm numbers them (docs/gpus.md).
  python3 -P "$HACK_DIR/cluster/gpus.py" gres-conf || die "SB_HYBRID_GPUS: see above"
  return 0
}

cgroup_conf() {
  cat <<'EOF'
# Written by hack/cluster/slurm-conf.sh. The Slurm root has no cgroup file system, and slurmd 26.05
# does not start without one unless the cgroup plugin is off, even with proctrack/linuxproc and
# task/none. A production hybrid node uses cgroups instead (docs/development.md#hybrid-nodes):
# ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup,task/affinity, ConstrainCores=yes,
# ConstrainRAMSpace=yes.
CgroupPlugin=disabled
EOF
}

# The handoff script's configuration (slurm-hooks/slurm-bridge-handoff.conf, the example): the
# bridges whose jobs it holds for (the local bridge's bridgeId, hack/bridge.sh: the default), the
# longest hold, where its epilog notes a handoff decided, the nodes it guards, its epilog and prolog alike (empty: all)
# the longest a job waits in it, and the notify hook it runs at every job's start and end (the
# bridge's notices: slurm.conf names no other hook). Installed root's, mode 0644, next to the script.
handoff_conf() { # [bridge_ids=ID[,ID...]] [max_hold=SECONDS] [state_dir=DIR] [nodes=HOSTLIST] [prolog_wait=SECONDS] [notify=PATH]
  local bridge_ids=slurm-bridge max_hold=86400 state_dir=/var/spool/slurm-bridge nodes='' prolog_wait=900 notify=''
  conf_settings "bridge_ids max_hold state_dir nodes prolog_wait notify" "$@"
  echo "# Written by hack/cluster/slurm-conf.sh: slurm-bridge's handoff (slurm-hooks/slurm-bridge-handoff.conf)."
  echo "BRIDGE_IDS=$bridge_ids"
  echo "MAX_HOLD_SECONDS=$max_hold"
  echo "STATE_DIR=$state_dir"
  [ -z "$nodes" ] || echo "NODES=$nodes"
  echo "PROLOG_WAIT_SECONDS=$prolog_wait"
  [ -z "$notify" ] || echo "NOTIFY=$notify"
}

slurmdbd_conf() { # storage_pass=... [KEY=VALUE...]
  local dbd_addr=127.0.0.1 dbd_host=localhost dbd_port=$SB_SLURMDBD_PORT state_dir=$SLURM_STATE_IN_ROOT
  local storage_host=127.0.0.1 storage_port=$SB_MARIADB_PORT storage_pass=
  conf_settings "dbd_addr dbd_host dbd_port state_dir storage_host storage_port storage_pass" "$@"
  [ -n "$storage_pass" ] || die "slurmdbd_conf: storage_pass=... (the database user's password) is required"
  echo "# Written by hack/cluster/slurm-conf.sh: slurmdbd, its database in MariaDB (over TCP)."
  [ -z "$dbd_addr" ] || echo "DbdAddr=$dbd_addr"
  cat <<EOF
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$state_dir/jwt.key
DbdHost=$dbd_host
DbdPort=$dbd_port
SlurmUser=slurm
PidFile=$state_dir/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$storage_host
StoragePort=$storage_port
StorageUser=slurm
StorageLoc=slurm_acct_db
EOF
  [ "$storage_pass" = - ] || echo "StoragePass=$storage_pass"
}

# Run as a script: print one file.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  . "$(dirname "$0")/../lib.sh"
  what=${1:-}
  shift || true
  case $what in
    slurm.conf) slurm_conf "$@" ;;
    gres.conf) gres_conf "$@" ;;
    topology.yaml) topology_yaml "$@" ;;
    cgroup.conf) cgroup_conf ;;
    slurmdbd.conf) slurmdbd_conf "$@" ;;
    slurm-bridge-handoff.conf) handoff_conf "$@" ;;
    *) die "usage: hack/cluster/slurm-conf.sh slurm.conf|gres.conf|topology.yaml|cgroup.conf|slurmdbd.conf|slurm-bridge-handoff.conf [KEY=VALUE...]" ;;
  esac
fi
