# Slurm inside the kind cluster (hack/kind.sh sources this): its configuration and its objects.
# Kept apart from the local cluster's Slurm (hack/cluster.sh) on purpose: the two generate their
# slurm.conf differently today (in-cluster Service names and slurmd on every worker here; loopback
# ports and external kwok nodes there), and can share one generator later.
#
# Layout (namespace $KIND_SLURM_NS):
#   mariadb     Deployment + Service mariadb:3306        slurmdbd's database (Secret slurm-db)
#   slurmdbd    Deployment + Service slurmdbd:6819       munged as a sidecar
#   slurmctld   Deployment + Service slurmctld:6817      munged as a sidecar; the accounting of
#                                                        hack/accounting.env made by an init container
#   slurmrestd  Deployment + Service slurmrestd:6820     JWT authentication; NodePort for the host
#   slurmd      DaemonSet on every worker, host network, Slurm node name = Kubernetes node name
# Secrets: slurm-munge-key, slurm-jwt-key (the JWT key), slurm-db. ConfigMap: slurm-config.
# The controller side runs on the control-plane node, as the bridge does: workers are Slurm nodes,
# which the bridge taints NoExecute (docs/nodes.md).

KIND_SLURM_NS=slurm
KIND_SLURM_CLUSTER=slurm-bridge-kind
# How pods and the host's tools name the controller side.
KIND_SLURMCTLD_ADDR="slurmctld.$KIND_SLURM_NS.svc.cluster.local"
KIND_SLURMDBD_ADDR="slurmdbd.$KIND_SLURM_NS.svc.cluster.local"
KIND_MARIADB_ADDR="mariadb.$KIND_SLURM_NS.svc.cluster.local"
KIND_SLURMRESTD_URL_FOR_PODS="http://slurmrestd.$KIND_SLURM_NS:6820"

kind_slurm_conf() { # "name=address ..." of the workers
  local w name addr names=()
  for w in $1; do names+=("${w%%=*}"); done
  cat <<EOF
# Written by hack/kind/slurm.sh: Slurm in the kind cluster $SB_KIND_CLUSTER; slurmd on every worker.
ClusterName=$KIND_SLURM_CLUSTER
SlurmctldHost=slurmctld($KIND_SLURMCTLD_ADDR)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/var/spool/slurmctld/jwt.key
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# slurmd runs in a container: no cgroup plugin (cgroup.conf), so no cgroup-based tracking either.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$KIND_SLURMDBD_ADDR
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits,qos
JobCompType=jobcomp/none
# The workers share this machine's cores: Slurm counts what the configuration says.
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/var/spool/slurmctld/slurmctld.pid
SlurmdPidFile=/var/spool/slurmd/slurmd.pid
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2
ReturnToService=2
MinJobAge=$SB_MIN_JOB_AGE
DefMemPerCPU=256
EOF
  for w in $1; do
    name=${w%%=*}; addr=${w#*=}
    echo "NodeName=$name NodeAddr=$addr CPUs=$SB_KIND_NODE_CPUS RealMemory=$SB_KIND_NODE_MEMORY_MIB State=UNKNOWN"
  done
  echo "PartitionName=$SB_PARTITION Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
}

kind_slurmdbd_conf() {
  cat <<EOF
# Written by hack/kind/slurm.sh; sb-slurm appends StoragePass from the slurm-db Secret.
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/var/spool/slurmctld/jwt.key
DbdHost=slurmdbd
DbdPort=6819
SlurmUser=slurm
PidFile=/var/spool/slurmctld/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$KIND_MARIADB_ADDR
StoragePort=3306
StorageUser=slurm
StorageLoc=slurm_acct_db
EOF
}

# The tenants' Unix users, "user:uid:group:gid ...", from hack/accounting.env.
kind_slurm_users() {
  (
    # shellcheck source=../accounting.env
    . "$HACK_DIR/accounting.env"
    for t in $TENANTS; do
      IFS=: read -r user uid group gid _ <<< "$t"
      printf '%s:%s:%s:%s ' "$user" "$uid" "$group" "$gid"
    done
  )
}

kind_slurm_config_map() { # workers
  local dir="$KIND_STATE/slurm-config"
  rm -rf "$dir"; mkdir -p "$dir"
  kind_slurm_conf "$1" > "$dir/slurm.conf"
  kind_slurmdbd_conf > "$dir/slurmdbd.conf"
  echo "CgroupPlugin=disabled" > "$dir/cgroup.conf"
  { cat "$HACK_DIR/accounting.env"
    echo "SB_CLUSTER_NAME=$KIND_SLURM_CLUSTER"
    echo "SB_BRIDGE_SLURM_USER=$SB_BRIDGE_SLURM_USER"; } > "$dir/accounting.env"
  kubectl_kind -n "$KIND_SLURM_NS" create configmap slurm-config --from-file="$dir" --dry-run=client -o yaml
}

kind_slurm_secrets() { # made once per cluster; kept in $KIND_STATE (mode 600) for re-applies
  local d="$KIND_STATE/slurm-secrets"
  mkdir -p "$d"; chmod 700 "$d"
  [ -s "$d/munge.key" ] || head -c 1024 /dev/urandom > "$d/munge.key"
  [ -s "$d/jwt.key" ] || head -c 32 /dev/urandom > "$d/jwt.key"
  [ -s "$d/password" ] || head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$d/password"
  chmod 600 "$d"/*
  kubectl_kind -n "$KIND_SLURM_NS" create secret generic slurm-munge-key --from-file=munge.key="$d/munge.key" --dry-run=client -o yaml
  echo "---"
  kubectl_kind -n "$KIND_SLURM_NS" create secret generic slurm-jwt-key --from-file=jwt.key="$d/jwt.key" --dry-run=client -o yaml
  echo "---"
  kubectl_kind -n "$KIND_SLURM_NS" create secret generic slurm-db --from-file=password="$d/password" --dry-run=client -o yaml
}

# ---- the objects ------------------------------------------------------------------------------
_controller_placement() {
  cat <<'EOF'
      nodeSelector: {node-role.kubernetes.io/control-plane: ""}
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
EOF
}

_munged_sidecar() { # a native sidecar: runs before the init containers after it and for the pod's life
  cat <<EOF
      - name: munged
        image: $KIND_SLURM_IMAGE
        imagePullPolicy: IfNotPresent
        args: [munged]
        restartPolicy: Always
        startupProbe: {exec: {command: [test, -S, /run/munge/munge.socket.2]}, periodSeconds: 1, failureThreshold: 60}
        volumeMounts:
        - {name: munge-key, mountPath: /etc/slurm-munge, readOnly: true}
        - {name: munge-run, mountPath: /run/munge}
EOF
}

_deployment() { # name role port [extra init containers (YAML)] [extra volumes (YAML)] [extra mounts]
  local name=$1 role=$2 port=$3
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $name
  namespace: $KIND_SLURM_NS
  labels: {app.kubernetes.io/name: $name, app.kubernetes.io/part-of: slurm}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app.kubernetes.io/name: $name}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: $name, app.kubernetes.io/part-of: slurm}
      annotations: {slurm-bridge.local/config: "$KIND_SLURM_CONFIG_HASH"}
    spec:
      hostname: $name
$(_controller_placement)
      enableServiceLinks: false
EOF
  [ -z "${4:-}" ] || { echo "      initContainers:"; echo "$4"; }
  cat <<EOF
      containers:
      - name: $name
        image: $( [ "$role" = mariadb ] && echo "$KIND_MARIADB_IMAGE" || echo "$KIND_SLURM_IMAGE")
        imagePullPolicy: IfNotPresent
        args: [$role]
        env: [{name: SB_SLURM_USERS, value: "$KIND_SLURM_USERS"}]
        ports: [{name: $role, containerPort: $port}]
        readinessProbe: {tcpSocket: {port: $port}, periodSeconds: 2}
        volumeMounts:
        - {name: config, mountPath: /etc/slurm-config, readOnly: true}
${6:-}
      volumes:
      - {name: config, configMap: {name: slurm-config}}
${5:-}
---
apiVersion: v1
kind: Service
metadata:
  name: $name
  namespace: $KIND_SLURM_NS
  labels: {app.kubernetes.io/name: $name, app.kubernetes.io/part-of: slurm}
spec:
  selector: {app.kubernetes.io/name: $name}
  ports: [{name: $role, port: $port, targetPort: $port}]
---
EOF
}

kind_slurm_manifests() {
  local munge_vols='      - {name: munge-key, secret: {secretName: slurm-munge-key, defaultMode: 0400}}
      - {name: munge-run, emptyDir: {}}'
  local munge_mount='        - {name: munge-run, mountPath: /run/munge}'
  local jwt_vol='      - {name: jwt-key, secret: {secretName: slurm-jwt-key, defaultMode: 0400}}'
  local jwt_mount='        - {name: jwt-key, mountPath: /etc/slurm-jwt, readOnly: true}'
  local db_vol='      - {name: db, secret: {secretName: slurm-db, defaultMode: 0400}}'
  local db_mount='        - {name: db, mountPath: /etc/slurm-db, readOnly: true}'
  local accounting
  accounting="$(_munged_sidecar)
      - name: accounting
        image: $KIND_SLURM_IMAGE
        imagePullPolicy: IfNotPresent
        args: [accounting]
        volumeMounts:
        - {name: config, mountPath: /etc/slurm-config, readOnly: true}
        - {name: munge-run, mountPath: /run/munge}"
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $KIND_SLURM_NS
  labels: {app.kubernetes.io/part-of: slurm}
---
EOF
  _deployment mariadb mariadb 3306 "" "$db_vol
      - {name: data, emptyDir: {}}" "$db_mount
        - {name: data, mountPath: /var/lib/mysql}"
  _deployment slurmdbd slurmdbd 6819 "$(_munged_sidecar)" "$munge_vols
$jwt_vol
$db_vol" "$munge_mount
$jwt_mount
$db_mount"
  _deployment slurmctld slurmctld 6817 "$accounting" "$munge_vols
$jwt_vol
      - {name: state, emptyDir: {}}" "$munge_mount
$jwt_mount
        - {name: state, mountPath: /var/spool/slurmctld}"
  _deployment slurmrestd slurmrestd 6820 "" "" ""
  # The host's tools and the tests reach slurmrestd through a NodePort that kind publishes on
  # 127.0.0.1 (hack/kind.sh's cluster config); pods use the Service's name.
  cat <<EOF
apiVersion: v1
kind: Service
metadata:
  name: slurmrestd-nodeport
  namespace: $KIND_SLURM_NS
  labels: {app.kubernetes.io/name: slurmrestd, app.kubernetes.io/part-of: slurm}
spec:
  type: NodePort
  selector: {app.kubernetes.io/name: slurmrestd}
  ports: [{name: slurmrestd, port: 6820, targetPort: 6820, nodePort: $SB_KIND_SLURMRESTD_NODEPORT}]
---
# slurmd on every worker, on the host network: the worker is a hybrid node, its Slurm node name
# its Kubernetes node name. It tolerates every taint (the bridge's managed-node taint included).
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: slurmd
  namespace: $KIND_SLURM_NS
  labels: {app.kubernetes.io/name: slurmd, app.kubernetes.io/part-of: slurm}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: slurmd}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: slurmd, app.kubernetes.io/part-of: slurm}
      annotations: {slurm-bridge.local/config: "$KIND_SLURM_CONFIG_HASH"}
    spec:
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      priorityClassName: system-node-critical
      enableServiceLinks: false
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}]}]
      tolerations: [{operator: Exists}]
      initContainers:
$(_munged_sidecar)
      containers:
      - name: slurmd
        image: $KIND_SLURM_IMAGE
        imagePullPolicy: IfNotPresent
        args: [slurmd]
        env:
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
        - {name: SB_SLURM_USERS, value: "$KIND_SLURM_USERS"}
        securityContext: {privileged: true}
        resources: {requests: {cpu: 10m, memory: 32Mi}}
        readinessProbe: {tcpSocket: {port: 6818}, periodSeconds: 2}
        volumeMounts:
        - {name: config, mountPath: /etc/slurm-config, readOnly: true}
        - {name: munge-run, mountPath: /run/munge}
        - {name: spool, mountPath: /var/spool/slurmd}
      volumes:
      - {name: config, configMap: {name: slurm-config}}
$munge_vols
      - {name: spool, emptyDir: {}}
EOF
}
