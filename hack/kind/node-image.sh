#!/usr/bin/env bash
# kind's node image, built where no registry is reachable (this machine, CI): from the project's
# own Kubernetes build (hack/build-binaries.sh), Debian packages and Go modules. Nothing is pulled.
#
#   hack/kind/node-image.sh ref      the image reference for the current inputs
#   hack/kind/node-image.sh build    build it unless the container engine has it; print the reference
#
# The contract is kind's own (images/base and pkg/build/nodeimage of the kind module, whose files
# are used as they are): systemd as PID 1 with kind's entrypoint, containerd, runc and the CNI
# plugins, kubeadm, kubelet and kubectl in /usr/bin, /kind/version, and every image kubeadm needs
# already in containerd's k8s.io namespace under the names `kubeadm config images list` prints
# (the sandbox image under the name containerd's configuration gives). Those images are built here:
#   kube-apiserver, kube-controller-manager, kube-scheduler, etcd, coredns   one static binary each
#   kube-proxy      on the node's Debian root (it needs nft and iptables)
#   pause           hack/image.sh's, compiled from Kubernetes' pause.c
# The Debian root, the images and the archives are cached in $KIND_CACHE; the image is named after
# a hash of its inputs, so an unchanged tree reuses it. Needs root (debootstrap, chroot).
. "$(dirname "$0")/../lib.sh"
. "$HACK_DIR/kind/common.sh"
shopt -s inherit_errexit

NODE_SUITE=bookworm
# kind's base image's packages (images/base/Dockerfile), from Debian; runc and the CNI plugins
# (ptp, host-local, portmap, loopback) too.
NODE_PACKAGES=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins
NODE_ROOT="$KIND_CACHE/node-root-$NODE_SUITE"
KIND_FILES_STAMP=".sb-kind-root-$(echo "$NODE_PACKAGES" | sha1sum | cut -c1-8)"
BUILDAH_ROOT="$CACHE_DIR/buildah"

buildah_() {
  BUILDAH_RUNTIME=$(oci_runtime) buildah --root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run" --storage-driver overlay "$@"
}

kind_module_dir() {
  (cd "$CACHE_DIR" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
    | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') \
    || die "cannot download the kind module $KIND_VERSION (is GOPROXY reachable?)"
}

# What the image is built from: versions, package list, this script and kind's files.
inputs_hash() {
  {
    echo "$KUBERNETES_VERSION $ETCD_VERSION $CONTAINERD_VERSION $COREDNS_VERSION $KIND_VERSION $NODE_SUITE $NODE_PACKAGES"
    sha256sum "$0" "$HACK_DIR/kind/common.sh"
  } | sha256sum | cut -c1-12
}

node_ref() { echo "localhost/slurm-bridge-kind-node:$KUBERNETES_VERSION-$(inputs_hash)"; }

ensure_node_root() {
  [ -f "$NODE_ROOT/$KIND_FILES_STAMP" ] && return 0
  ensure_apt debootstrap
  local tmp="$NODE_ROOT.tmp"
  rm -rf "$tmp"; mkdir -p "$KIND_CACHE"
  log "debootstrap $NODE_SUITE with systemd, containerd's helpers and the CNI plugins for kind's node image (about two minutes)"
  debootstrap --variant=minbase --include="$NODE_PACKAGES" "$NODE_SUITE" "$tmp" "$(apt_mirror)" \
    > "$KIND_CACHE/debootstrap-node.log" 2>&1 \
    || { tail -n 20 "$KIND_CACHE/debootstrap-node.log" >&2; die "debootstrap of the node root failed (log: $KIND_CACHE/debootstrap-node.log)"; }
  chroot "$tmp" apt-get clean; rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*
  touch "$tmp/$KIND_FILES_STAMP"
  rm -rf "$NODE_ROOT"; mv "$tmp" "$NODE_ROOT"
}

# The node's file system: the Debian root, kind's files and the steps of kind's base Dockerfile,
# containerd of the project's build, the Kubernetes node binaries.
assemble_rootfs() { # dir
  local d=$1 kind_dir files bin
  kind_dir=$(kind_module_dir); files="$kind_dir/images/base/files"
  [ -f "$files/usr/local/bin/entrypoint" ] || die "kind $KIND_VERSION has no images/base/files/usr/local/bin/entrypoint"
  rm -rf "$d"; mkdir -p "$d"
  cp -a "$NODE_ROOT/." "$d/"; rm -f "$d/$KIND_FILES_STAMP"
  install -m 0755 "$files"/usr/local/bin/* "$d/usr/local/bin/"
  mkdir -p "$d/kind" "$d/etc/containerd" "$d/etc/kubernetes/manifests" "$d/opt/cni/bin"
  cp -r "$files/kind/." "$d/kind/"; chmod 755 "$d/kind" "$d/kind/bin" "$d"/kind/bin/*
  cp -r "$files/etc/." "$d/etc/"
  find "$d/etc/systemd/system" "$d/etc/sysctl.d" "$d/etc/default" "$d/etc/containerd" -type f -exec chmod 0644 {} +
  for bin in containerd containerd-shim-runc-v2 ctr; do install -m 0755 "$BIN_DIR/$bin" "$d/usr/local/bin/"; done
  for bin in kubeadm kubelet kubectl; do install -m 0755 "$K8S_BIN_DIR/$bin" "$d/usr/bin/"; done
  for bin in ptp host-local portmap loopback; do
    [ -x "$d/usr/lib/cni/$bin" ] || die "the node root has no CNI plugin $bin (containernetworking-plugins)"
    ln -sf "/usr/lib/cni/$bin" "$d/opt/cni/bin/$bin"
  done
  echo "$KUBERNETES_VERSION" > "$d/kind/version"
  # kind's base Dockerfile: only kubelet, containerd and undo-mount-hacks start; no getty, udev, ...
  find "$d/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
  rm -f "$d"/lib/systemd/system/multi-user.target.wants/* "$d"/etc/systemd/system/*.wants/* \
    "$d"/lib/systemd/system/local-fs.target.wants/* "$d"/lib/systemd/system/sockets.target.wants/*udev* \
    "$d"/lib/systemd/system/sockets.target.wants/*initctl* "$d"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >> "$d/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$d/sbin/init"
  chroot "$d" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 \
    || die "systemctl enable in the node root failed"
  chroot "$d" systemctl mask systemd-binfmt.service >/dev/null 2>&1 || true
  # containerd's base OCI spec, as kind makes it: its product-files hook, no rlimits.
  chroot "$d" /usr/local/bin/ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > "$d/etc/containerd/cri-base.json" \
    || die "writing containerd's base runtime spec failed"
}

# ---- the images kubeadm needs -------------------------------------------------------------------
archive_of() { echo "$KIND_CACHE/images/$(echo "$1" | tr ':/' '--').tar"; }

scratch_image() { # ref binary path-in-image [entrypoint-json] : a one-binary image as an OCI archive
  local ref=$1 out c
  out=$(archive_of "$ref")
  [ -f "$out" ] && { echo "$out"; return 0; }
  c=$(buildah_ from scratch)
  buildah_ copy --quiet "$c" "$2" "$3" >/dev/null
  buildah_ config --env PATH=/usr/local/bin:/ ${4:+--entrypoint "$4"} "$c"
  buildah_ commit --quiet --rm "$c" "$ref" >/dev/null || die "committing $ref failed"
  push_archive "$ref" "$out"
}

push_archive() { # ref out
  mkdir -p "$(dirname "$2")"; rm -f "$2.tmp"
  buildah_ push --quiet "$1" "oci-archive:$2.tmp:$1" >/dev/null || die "exporting $1 failed"
  buildah_ rmi -f "$1" >/dev/null 2>&1 || true
  mv "$2.tmp" "$2"; echo "$2"
}

kube_proxy_image() { # ref : kube-proxy on the node's Debian root (nftables mode runs nft)
  local ref=$1 out c mnt
  out=$(archive_of "$ref")
  [ -f "$out" ] && { echo "$out"; return 0; }
  c=$(buildah_ from scratch); mnt=$(buildah_ mount "$c")
  cp -a "$NODE_ROOT/." "$mnt/"; rm -f "$mnt/$KIND_FILES_STAMP"
  install -m 0755 "$K8S_BIN_DIR/kube-proxy" "$mnt/usr/local/bin/kube-proxy"
  buildah_ umount "$c" >/dev/null
  buildah_ config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  buildah_ commit --quiet --rm "$c" "$ref" >/dev/null || die "committing $ref failed"
  push_archive "$ref" "$out"
}

# Prints "archive ref" lines: what goes into containerd under which name.
component_archives() { # sandbox-ref
  local ref name a pause refs
  refs=$("$K8S_BIN_DIR/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null) \
    || die "kubeadm config images list failed"
  for ref in $refs; do
    name=${ref##*/}; name=${name%%:*}
    case $name in
      kube-apiserver|kube-controller-manager|kube-scheduler)
        a=$(scratch_image "$ref" "$K8S_BIN_DIR/$name" "/usr/local/bin/$name") || exit 1 ;;
      kube-proxy) a=$(kube_proxy_image "$ref") || exit 1 ;;
      etcd)
        [ "${ref##*:}" = "${ETCD_VERSION#v}-0" ] || log "kubeadm asks for $ref; it gets the project's etcd $ETCD_VERSION under that name (kind.md: kubeadm's flags work with it)"
        a=$(scratch_image "$ref" "$BIN_DIR/etcd" /usr/local/bin/etcd) || exit 1 ;;
      coredns)
        [ "${ref##*:}" = "$COREDNS_VERSION" ] || log "kubeadm asks for $ref; it gets CoreDNS $COREDNS_VERSION under that name"
        # As root: the image has no file capability to bind :53 as another user (kind.md).
        a=$(scratch_image "$ref" "$BIN_DIR/coredns" /coredns '["/coredns"]') || exit 1 ;;
      pause) continue ;;   # below, under the sandbox image's name too
      *) die "kubeadm $KUBERNETES_VERSION needs an image this script does not build: $ref" ;;
    esac
    echo "$a $ref"
  done
  pause=$(bash "$HACK_DIR/image.sh" archive pause) || exit 1
  echo "$pause $1"
  for ref in $refs; do
    case $ref in */pause:*) [ "$ref" = "$1" ] || echo "$pause $ref" ;; esac
  done
}

preload_and_commit() { # base-ref final-ref : import $KIND_CACHE/images.list into containerd, commit
  local base=$1 final=$2 c archive ref src
  c=slurm-bridge-kind-node-build
  kind_engine rm -f "$c" >/dev/null 2>&1 || true
  kind_engine run -d --privileged --name "$c" --entrypoint sleep "$base" infinity >/dev/null \
    || die "starting the node image build container failed"
  # shellcheck disable=SC2064
  trap "kind_engine rm -f '$c' >/dev/null 2>&1 || true" EXIT
  kind_engine exec "$c" bash -c 'nohup containerd > /tmp/containerd.log 2>&1 &'
  kind_engine exec "$c" bash -c 'for i in $(seq 100); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /tmp/containerd.log; exit 1' \
    || die "containerd did not start in the build container"
  while read -r archive ref; do
    src=$(tar -xOf "$archive" index.json | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])')
    kind_engine exec -i "$c" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
      --all-platforms --no-unpack --digests - < "$archive" >/dev/null || die "importing $archive into the node image failed"
    if [ "$src" != "$ref" ]; then
      kind_engine exec "$c" ctr --namespace=k8s.io images tag --force "$src" "$ref" >/dev/null || die "tagging $ref failed"
      kind_engine exec "$c" ctr --namespace=k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
    fi
  done < "$KIND_CACHE/images.list"
  # A graceful stop, so its metadata is on disk; it stays a zombie under sleep, so the check is
  # that it no longer answers.
  kind_engine exec "$c" pkill -x containerd || true
  kind_engine exec "$c" bash -c 'for i in $(seq 100); do ctr version >/dev/null 2>&1 || exit 0; sleep 0.2; done; exit 1' \
    || die "containerd did not stop in the build container"
  kind_engine commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$c" "$final" >/dev/null \
    || die "committing the node image $final failed"
  kind_engine rm -f "$c" >/dev/null; trap - EXIT
}

build() {
  local ref base dir sandbox
  ref=$(node_ref)
  if kind_engine image inspect "$ref" >/dev/null 2>&1; then echo "$ref"; return 0; fi
  require_root "building kind's node image (debootstrap, chroot)"
  command -v jq >/dev/null || ensure_apt jq
  bash "$HACK_DIR/build-binaries.sh" kubernetes kubeadm containerd etcd coredns >&2
  ensure_node_root
  dir="$KIND_CACHE/node-rootfs"
  log "assembling kind's node image $ref"
  assemble_rootfs "$dir"
  sandbox=$(sed -n 's/^[[:space:]]*sandbox_image[[:space:]]*=[[:space:]]*"\(.*\)"/\1/p' "$dir/etc/containerd/config.toml")
  [ -n "$sandbox" ] || die "no sandbox_image in kind's containerd config.toml"
  base="localhost/slurm-bridge-kind-node-base:$(inputs_hash)"
  tar -C "$dir" -c . | kind_engine import \
    --change 'ENV container=docker' --change 'STOPSIGNAL SIGRTMIN+3' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$base" >/dev/null \
    || die "importing the node root into $KIND_ENGINE failed"
  rm -rf "$dir"
  component_archives "$sandbox" > "$KIND_CACHE/images.list"
  preload_and_commit "$base" "$ref"
  # The base, and older node images of this project, are of no further use.
  kind_engine images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/slurm-bridge-kind-node(-base)?:' | grep -vxF "$ref" \
    | xargs -r "$KIND_ENGINE" rmi >/dev/null 2>&1 || true
  log "node image $ref built"
  echo "$ref"
}

case "${1:-}" in
  ref) node_ref ;;
  build) kind_provider_setup; build ;;
  *) die "usage: hack/kind/node-image.sh ref|build" ;;
esac
