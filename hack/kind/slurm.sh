# Slurm inside the kind cluster (hack/kind.sh sources this): its configuration and its objects.
# slurm.conf and slurmdbd.conf come from the one writer (hack/cluster/slurm-conf.sh) with the
# in-cluster Service names and slurmd on every worker; the scheduling, sharing, priority and
# preemption policy (hack/slurm-policy.conf) is the local cluster's.
#
# Layout (namespace $KIND_SLURM_NS):
#   mariadb     Deployment + Service mariadb:3306        slurmdbd's database (Secret slurm-db)
#   slurmdbd    Deployment + Service slurmdbd:6819       munged as a sidecar
#   slurmctld   Deployment + Service slurmctld:6817      munged as a sidecar; the accounting of
#                                                        hack/accounting.env made by an init container
#   slurmrestd  Deployment + Service slurmrestd:6820     JWT authentication; NodePort for the host
#   slurmd      DaemonSet on every worker, host network, Slurm node name = Kubernetes node name; the
#               workers' GPUs (SB_KIND_GPUS) in gres.conf, on stand-in device files in its container
# slurmctld runs the handoff script (slurm-hooks/slurm-bridge-handoff.sh, from the ConfigMap), its one
# PrologSlurmctld and EpilogSlurmctld.
# Secrets: slurm-munge-key, slurm-jwt-key (the JWT key), slurm-db. ConfigMap: slurm-config (slurm.conf,
# gres.conf, topology.yaml, gpu-device-files, ...).
# The controller side runs on the control-plane node, as the bridge does: workers are Slurm nodes,
# which the bridge taints NoExecute (docs/nodes.md).

KIND_SLURM_NS=slurm
KIND_SLURM_CLUSTER=slurm-bridge-kind
# How pods and the host's tools name the controller side.
KIND_SLURMCTLD_ADDR="slurmctld.$KIND_SLURM_NS.svc.cluster.local"
KIND_SLURMDBD_ADDR="slurmdbd.$KIND_SLURM_NS.svc.cluster.local"
KIND_MARIADB_ADDR="mariadb.$KIND_SLURM_NS.svc.cluster.local"
KIND_SLURMRESTD_URL_FOR_PODS="http://slurmrestd.$KIND_SLURM_NS:6820"

# slurmctld's hook to the bridge (docs/configuration.md#slurm-hooks: the handoff script, slurmctld's one
# PrologSlurmctld and EpilogSlurmctld, runs it as its NOTIFY) is not installed here: the image and the
# slurm-config ConfigMap lack the script, and handoff_conf names none. docs/development.md ("The Slurm
# hook on kind") says what it takes.
kind_slurm_conf() { # "name=address ..." of the workers: the one writer's slurm.conf, kind's hosts
  slurm_conf cluster="$KIND_SLURM_CLUSTER" ctld_host="slurmctld($KIND_SLURMCTLD_ADDR)" ctld_port=6817 \
    dbd_host="$KIND_SLURMDBD_ADDR" dbd_port=6819 state_dir=/var/spool/slurmctld \
    spool_dir=/var/spool/slurmd slurmd_pid=/var/spool/slurmd/slurmd.pid \
    workers="$1" worker_cpus="$SB_KIND_NODE_CPUS" worker_memory_mib="$SB_KIND_NODE_MEMORY_MIB" \
    worker_gpus="$SB_KIND_GPUS"
}

kind_slurmdbd_conf() { # sb-slurm appends StoragePass from the slurm-db Secret
  slurmdbd_conf dbd_addr= dbd_host=slurmdbd dbd_port=6819 state_dir=/var/spool/slurmctld \
    storage_host="$KIND_MARIADB_ADDR" storage_port=3306 storage_pass=-
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
  # The local cluster's two network topologies, each worker a block and a leaf switch of its own
  # (docs/nodes.md#network-topology): the bridge labels the workers from them.
  topology_yaml workers="$1" > "$dir/topology.yaml"
  cgroup_conf > "$dir/cgroup.conf"
  # The workers' GPUs (SB_KIND_GPUS): gres.conf's records and the stand-in device files sb-slurm makes
  # in each slurmd container, from the one layout (hack/cluster/gpus.py).
  if [ -n "$SB_KIND_GPUS" ]; then
    gres_conf worker_gpus="$SB_KIND_GPUS" > "$dir/gres.conf"
    python3 -P "$HACK_DIR/kind/gpu_layout.py" device-files > "$dir/gpu-device-files" || die "SB_KIND_GPUS: see above"
  fi
  # The handoff script, slurmctld's EpilogSlurmctld and PrologSlurmctld (hack/slurm-policy.conf
  # names it; sb-slurm installs it executable) and its configuration file (sb-slurm installs it
  # root's, 0644), naming the chart's bridgeId. Every worker is a hybrid node: the handoff guards all.
  # Its state directory is the one sb-slurm makes SlurmUser's for its log (/var/log/slurm-bridge,
  # 0755), so that the image stays as it is.
  cp "$REPO_DIR/slurm-hooks/slurm-bridge-handoff.sh" "$dir/slurm-bridge-handoff.sh"
  handoff_conf state_dir=/var/log/slurm-bridge > "$dir/slurm-bridge-handoff.conf"
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

_worker_placement() { # a node agent's: every worker (whatever its taints), never the control plane
  cat <<'EOF'
      priorityClassName: system-node-critical
      enableServiceLinks: false
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}]}]
      tolerations: [{operator: Exists}]
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
$(_worker_placement)
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
