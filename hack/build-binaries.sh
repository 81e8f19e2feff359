#!/usr/bin/env bash
# Build the Kubernetes control plane and node binaries, etcd, kwok, helm, containerd and the JobSet
# and LeaderWorkerSet controllers from Go modules into $BIN_DIR, once.
# kind, kubeadm (with kubectl) and coredns for hack/kind.sh on request.
# A binary is rebuilt only when hack/versions.env changes its version (stamp files).
. "$(dirname "$0")/lib.sh"
require_go
mkdir -p "$BIN_DIR" "$CACHE_DIR/src"
export GOFLAGS="${GOFLAGS:-} -trimpath" CGO_ENABLED=0 GOTOOLCHAIN=local

stamp() { echo "${DEST:-$BIN_DIR}/.built-$1-$2"; }
have() { [ -f "$(stamp "$1" "$2")" ] && for b in "${@:3}"; do [ -x "${DEST:-$BIN_DIR}/$b" ] || return 1; done; }
done_stamp() { rm -f "${DEST:-$BIN_DIR}/.built-$1-"*; touch "$(stamp "$1" "$2")"; }

kubernetes_gomod() { # version : a throwaway module's go.mod that builds k8s.io/kubernetes commands
  local v=$1 gomod
  gomod=$(cd "$CACHE_DIR" && go mod download -json "k8s.io/kubernetes@$v" | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])') \
    || die "go mod download k8s.io/kubernetes@$v failed (is GOPROXY reachable?)"
  echo "module local/kubernetes-build"
  echo "go $(awk '/^go /{print $2; exit}' "$gomod")"
  echo "require k8s.io/kubernetes $v"
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; use the published v0.X.Y.
  grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$gomod" | awk -v sv="v0.${v#v1.}" '{print "replace " $1 " => " $1 " " sv}'
}

kubernetes_ldflags() { # version : stamp the version, or tools that read --version get v0.0.0-master
  local v=$1 minor pkg="k8s.io/component-base/version"
  minor=${v#v1.}; minor=${minor%%.*}
  echo "-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
}

build_kubernetes() {
  local v=$KUBERNETES_VERSION dir DEST=$K8S_BIN_DIR b
  mkdir -p "$DEST"
  # A cache from before versions had directories of their own: move that version's binaries in.
  if [ -f "$BIN_DIR/.built-kubernetes-$v" ]; then
    for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
      [ -x "$BIN_DIR/$b" ] && mv "$BIN_DIR/$b" "$DEST/$b"
    done
    mv "$BIN_DIR/.built-kubernetes-$v" "$DEST/"
  fi
  have kubernetes "$v" kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy && return 0
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy $v (cold: tens of minutes)"
  dir="$CACHE_DIR/src/kubernetes-$v"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  kubernetes_gomod "$v" > go.mod
  # kubelet and kube-proxy run the local cluster's one real node (hack/node.sh).
  local cmds=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
              k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  go get "${cmds[@]/%/@$v}" >&2 || die "go get k8s.io/kubernetes@$v failed; see the output above"
  go build -ldflags "$(kubernetes_ldflags "$v")" -o "$DEST/" "${cmds[@]}" >&2 \
    || die "go build of Kubernetes $v failed; see the output above"
  done_stamp kubernetes "$v"
}

build_kubeadm() {
  # kubeadm and kubectl go into kind's node image (hack/kind.sh), beside the kubelet of the same
  # build. A module of their own: the control plane's stays as it was built.
  local v=$KUBERNETES_VERSION dir DEST=$K8S_BIN_DIR
  mkdir -p "$DEST"
  have kubeadm "$v" kubeadm kubectl && return 0
  log "building kubeadm and kubectl $v"
  dir="$CACHE_DIR/src/kubeadm-$v"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  kubernetes_gomod "$v" > go.mod
  [ "$(grep -c '^replace' go.mod)" -ge 20 ] || die "could not read the staging modules of k8s.io/kubernetes@$v"
  local cmds=(k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl)
  go get "${cmds[@]/%/@$v}" >&2 || die "go get k8s.io/kubernetes@$v (kubeadm, kubectl) failed; see the output above"
  go build -mod=mod -ldflags "$(kubernetes_ldflags "$v")" -o "$DEST/" "${cmds[@]}" >&2 \
    || die "go build of kubeadm and kubectl $v failed; see the output above"
  done_stamp kubeadm "$v"
}

build_etcd() {
  local v=$ETCD_VERSION dir
  have etcd "$v" etcd && return 0
  log "building etcd $v"
  dir="$CACHE_DIR/src/etcd-$v"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  # go.etcd.io/etcd/server/v3 replaces its sibling modules with ../ paths; pin the published ones.
  cat > go.mod <<MOD
module local/etcd-build
go 1.24
require go.etcd.io/etcd/server/v3 $v
replace (
  go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $v
  go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $v
  go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $v
  go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $v
)
MOD
  go get "go.etcd.io/etcd/server/v3@$v" >&2 || die "go get etcd $v failed"
  go build -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3 >&2 || die "go build of etcd $v failed"
  done_stamp etcd "$v"
}

build_containerd() {
  # containerd runs the local cluster's real node (hack/node.sh). Its go.mod has exclude
  # directives, so `go install module@version` is refused: build it from a throwaway module.
  local v=$CONTAINERD_VERSION dir mod=github.com/containerd/containerd/v2
  have containerd "$v" containerd containerd-shim-runc-v2 ctr && return 0
  log "building containerd $v"
  dir="$CACHE_DIR/src/containerd-$v"; rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  printf 'module local/containerd-build\ngo 1.24\nrequire %s %s\n' "$mod" "$v" > go.mod
  local cmds=("$mod/cmd/containerd" "$mod/cmd/containerd-shim-runc-v2" "$mod/cmd/ctr")
  go get "${cmds[@]/%/@$v}" >&2 || die "go get $mod@$v failed; see the output above"
  go build -mod=mod -tags no_btrfs -ldflags "-s -w -X $mod/version.Version=$v" -o "$BIN_DIR/" "${cmds[@]}" >&2 \
    || die "go build of containerd $v failed; see the output above"
  done_stamp containerd "$v"
}

build_plain() { # name version module/cmd binary: modules without replace directives
  have "$1" "$2" "$4" && return 0
  log "building $1 $2"
  GOBIN="$BIN_DIR" go install -ldflags "-s -w" "$3@$2" >&2 || die "go install $3@$2 failed; see the output above"
  done_stamp "$1" "$2"
}

build_module() { # name version module package binary: build a module's command from its own
  # go.mod and go.sum. `go install module@version` would ask the proxy for the module's version
  # list (deprecation check), which the proxy refuses for some sigs.k8s.io modules.
  local name=$1 v=$2 mod=$3 pkg=$4 bin=$5 dir src
  have "$name" "$v" "$bin" && return 0
  log "building $bin $v"
  src=$(cd "$CACHE_DIR" && go mod download -json "$mod@$v" | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') \
    || die "go mod download $mod@$v failed (is GOPROXY reachable?)"
  dir="$CACHE_DIR/src/$name-$v"; rm -rf "$dir"; cp -r "$src" "$dir"; chmod -R u+w "$dir"
  (cd "$dir" && go build -ldflags "-s -w -X $mod/pkg/version.GitVersion=$v" -o "$BIN_DIR/$bin" "$pkg") >&2 \
    || die "go build of $mod $v failed; see the output above"
  done_stamp "$name" "$v"
}

build_helm4() { # Helm 4 beside Helm 3: the same command name, so it is installed as helm4
  have helm4 "$HELM4_VERSION" helm4 && return 0
  log "building helm $HELM4_VERSION (as helm4)"
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" go install -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$HELM4_VERSION" >&2 \
    || { rm -rf "$tmp"; die "go install helm.sh/helm/v4/cmd/helm@$HELM4_VERSION failed; see the output above"; }
  mv "$tmp/helm" "$BIN_DIR/helm4"; rm -rf "$tmp"
  done_stamp helm4 "$HELM4_VERSION"
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(etcd kwok helm helm4 kubernetes containerd jobset lws)
# kind, kubeadm and coredns are built by hack/kind.sh when it needs them (not by the local cluster).
for t in "${targets[@]}"; do
  case $t in
    kubernetes) build_kubernetes ;;
    etcd) build_etcd ;;
    kwok) build_plain kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok kwok ;;
    helm) build_plain helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm helm ;;
    helm4) build_helm4 ;;
    containerd) build_containerd ;;
    # The workload controllers of the e2e cluster (started by hack/cluster.sh).
    jobset) build_module jobset "$JOBSET_VERSION" sigs.k8s.io/jobset . jobset-controller ;;
    lws) build_module lws "$LWS_VERSION" sigs.k8s.io/lws ./cmd lws-controller ;;
    # The kind cluster (hack/kind.sh): kind itself; kubeadm and kubectl for its node image; CoreDNS
    # for the image kubeadm deploys, when no registry is reachable.
    kind) build_module kind "$KIND_VERSION" sigs.k8s.io/kind . kind ;;
    kubeadm) build_kubeadm ;;
    coredns) build_plain coredns "$COREDNS_VERSION" github.com/coredns/coredns coredns ;;
    *) die "unknown build target '$t' (expected kubernetes, etcd, kwok, helm, helm4, containerd, jobset, lws, kind, kubeadm, coredns)" ;;
  esac
done
log "binaries ready in $BIN_DIR"
