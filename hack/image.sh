#!/usr/bin/env bash
# Container images for the local cluster's real node, built without a Docker engine or registry:
#   bridge     slurm-bridge from the project's Dockerfile (buildah), on a base image made here from
#              a debootstrapped Debian root with the Python that CI tests (BASE_IMAGE build arg)
#   scheduler  kube-scheduler of the cluster's own Kubernetes build (the chart's scheduler image)
#   pause      the pod sandbox image, compiled from Kubernetes' own pause.c
#   workload   the tests' container for the real node: runs until SIGTERM, then lingers (hack/workload/)
#   dra-plugin the kind workers' test DRA kubelet plugin for gpu.nvidia.com (hack/kind/dra-plugin/), a
#              static Go binary on an empty image
#   slurm      Slurm for the kind cluster (hack/kind.sh), target slurm of hack/kind/slurm-image/Dockerfile,
#              on a debootstrapped Debian $SLURM_SUITE (SLURM_BASE_IMAGE build arg)
#   mariadb    slurmdbd's MariaDB there, target mariadb of the same Dockerfile, on the bookworm base
#
#   hack/image.sh archive NAME   build NAME if needed; print its OCI archive (cached in $IMAGES_DIR)
#   hack/image.sh ref NAME       print the image reference NAME is built as
#   hack/image.sh load           build bridge and scheduler if needed and import both into the real node
#   hack/image.sh runtime        print the OCI runtime buildah is told to use (SB_OCI_RUNTIME, else runc)
#   hack/image.sh selftest       run one RUN step with that runtime
#
# Every archive is keyed by what it is built from, so an unchanged tree reuses the cached one.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"

BASE_SUITE=bookworm   # the Debian release of the Dockerfile's public base (python:X.Y-slim-bookworm)
BUILDAH_ROOT="$CACHE_DIR/buildah"
BRIDGE_REPO=localhost/slurm-bridge
SCHEDULER_REPO=localhost/kube-scheduler
PAUSE_REF=localhost/pause:3.10   # containerd's pinned sandbox image (hack/node.sh)
WORKLOAD_REPO=localhost/slurm-bridge-workload
DRA_PLUGIN_DIR=hack/kind/dra-plugin
DRA_PLUGIN_REPO=localhost/slurm-bridge-dra-plugin
SLURM_IMAGE_DIR=hack/kind/slurm-image
SLURM_REPO=localhost/slurm-bridge-slurm
MARIADB_REPO=localhost/slurm-bridge-mariadb
OCI_RUNTIME=$(oci_runtime)

# The runtime is named (lib.sh oci_runtime): with podman installed buildah would pick crun, which
# fails every RUN step on hosts with hybrid cgroups.
buildah_() {
  BUILDAH_RUNTIME=$OCI_RUNTIME buildah --root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run" --storage-driver overlay "$@"
}

python_minor() { "${1:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

# The Python CI tests: the interpreter of the project's .venv (hack/setup-python.sh), else python3.
ci_python() { [ -x "$REPO_DIR/.venv/bin/python" ] && echo "$REPO_DIR/.venv/bin/python" || echo python3; }

base_ref() { echo "localhost/python-base:$(python_minor "$(ci_python)")-$BASE_SUITE"; }

# ---- base image ---------------------------------------------------------------------------------
ensure_base() {
  local ref root tmp minor want c mnt
  ref=$(base_ref)
  buildah_ inspect --type image "$ref" >/dev/null 2>&1 && return 0
  ensure_apt debootstrap buildah
  root="$IMAGES_DIR/python-base-$BASE_SUITE"
  if [ ! -f "$root/.done" ]; then
    tmp="$root.tmp"; rm -rf "$tmp"; mkdir -p "$IMAGES_DIR"
    log "debootstrap $BASE_SUITE with python3 for the image's base (about a minute)"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv "$BASE_SUITE" "$tmp" "$(apt_mirror)" \
      > "$IMAGES_DIR/debootstrap-base.log" 2>&1 \
      || { tail -n 20 "$IMAGES_DIR/debootstrap-base.log" >&2; die "debootstrap of the image base failed (log: $IMAGES_DIR/debootstrap-base.log)"; }
    # As the python:X.Y-slim images: `python` is Python 3, and pip may install system-wide.
    ln -sf python3 "$tmp/usr/bin/python"
    rm -f "$tmp"/usr/lib/python3*/EXTERNALLY-MANAGED
    chroot "$tmp" apt-get clean; rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*
    rm -rf "$root"; mv "$tmp" "$root"; touch "$root/.done"
  fi
  minor=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  want=$(python_minor "$(ci_python)")
  [ "$minor" = "$want" ] || die "Debian $BASE_SUITE has Python $minor but CI tests $want; the image must run the Python CI tests"
  c=$(buildah_ from scratch)
  mnt=$(buildah_ mount "$c")
  cp -a "$root/." "$mnt/"; rm -f "$mnt/.done"
  buildah_ umount "$c" >/dev/null
  buildah_ config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 "$c"
  buildah_ commit --quiet --rm "$c" "$ref" >/dev/null || die "committing the base image $ref failed"
  log "base image $ref (Debian $BASE_SUITE, Python $minor)"
}

# A plain Debian root (minbase) as an image, for the Slurm image's base: debootstrap, as the Slurm
# root of the local cluster is made (hack/build-slurm-root.sh), with the machine's own mirror.
debian_base_ref() { echo "localhost/debian-base:$1"; }

ensure_debian_base() { # suite
  local suite=$1 ref root tmp c mnt
  ref=$(debian_base_ref "$suite")
  buildah_ inspect --type image "$ref" >/dev/null 2>&1 && return 0
  ensure_apt debootstrap buildah
  root="$IMAGES_DIR/debian-base-$suite"
  if [ ! -f "$root/.done" ]; then
    tmp="$root.tmp"; rm -rf "$tmp"; mkdir -p "$IMAGES_DIR"
    log "debootstrap $suite for the Slurm image's base (about a minute)"
    debootstrap --variant=minbase "$suite" "$tmp" "$(apt_mirror)" > "$IMAGES_DIR/debootstrap-$suite.log" 2>&1 \
      || { tail -n 20 "$IMAGES_DIR/debootstrap-$suite.log" >&2; die "debootstrap of $suite failed (log: $IMAGES_DIR/debootstrap-$suite.log)"; }
    chroot "$tmp" apt-get clean; rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*
    rm -rf "$root"; mv "$tmp" "$root"; touch "$root/.done"
  fi
  c=$(buildah_ from scratch)
  mnt=$(buildah_ mount "$c")
  cp -a "$root/." "$mnt/"; rm -f "$mnt/.done"
  buildah_ umount "$c" >/dev/null
  buildah_ config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 --cmd bash "$c"
  buildah_ commit --quiet --rm "$c" "$ref" >/dev/null || die "committing the base image $ref failed"
  log "base image $ref (Debian $suite)"
}

# ---- apt inside the build -----------------------------------------------------------------------
# RUN steps reach the Debian archive as this machine's apt does: the base's sources name the mirror
# debootstrap used, and the host's own Acquire settings (a proxy; Check-Valid-Until, which sid's
# Release file on some mirrors needs) are mounted in. Nothing of them is written into the repository.
apt_mounts() {
  local conf="$IMAGES_DIR/apt-host.conf"
  mkdir -p "$IMAGES_DIR"
  apt-config dump 2>/dev/null | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy|Retries) ' > "$conf" || true
  echo "-v $conf:/etc/apt/apt.conf.d/99-host.conf:ro"
}

# ---- pip inside the build -----------------------------------------------------------------------
# RUN steps reach the package index only the way this machine's pip does: its index, trusted
# hosts and CA file, read from pip's own configuration and environment at build time.
pip_mounts() {
  local conf="$IMAGES_DIR/pip.conf" key value cert=""
  mkdir -p "$IMAGES_DIR"
  echo "[global]" > "$conf"
  for key in index-url extra-index-url trusted-host cert; do
    local env="PIP_$(echo "$key" | tr 'a-z-' 'A-Z_')"
    value=${!env:-$(python3 -m pip config get "global.$key" 2>/dev/null || true)}
    [ -n "$value" ] || continue
    echo "$key = $value" >> "$conf"
    [ "$key" = cert ] && cert=$value
  done
  echo "-v $conf:/etc/pip.conf:ro"
  [ -n "$cert" ] && [ -f "$cert" ] && echo "-v $cert:$cert:ro"
  return 0
}

# ---- images -------------------------------------------------------------------------------------
# What the bridge image is built from: the Dockerfile's context (.dockerignore) and the base.
bridge_inputs() {
  printf '%s\n' Dockerfile .dockerignore constraints.txt pyproject.toml README.md
  find slurm_bridge operator webhook extender -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | sort
}

bridge_tag() {
  local version sum
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
  sum=$( { bridge_inputs | xargs sha256sum; base_ref; } | sha256sum | cut -c1-12)
  echo "$version-$sum"
}

slurm_tag() { # base-ref : the Slurm image context's files and the base, hashed
  { find "$SLURM_IMAGE_DIR" -type f | sort | xargs sha256sum; echo "$1"; } | sha256sum | cut -c1-12
}

ref() {
  case $1 in
    bridge) echo "$BRIDGE_REPO:$(bridge_tag)" ;;
    scheduler) echo "$SCHEDULER_REPO:$KUBERNETES_VERSION" ;;
    pause) echo "$PAUSE_REF" ;;
    workload) echo "$WORKLOAD_REPO:$(sha256sum hack/workload/workload.c | cut -c1-12)" ;;
    dra-plugin) echo "$DRA_PLUGIN_REPO:$(find "$DRA_PLUGIN_DIR" -type f | sort | xargs sha256sum | sha256sum | cut -c1-12)" ;;
    slurm) echo "$SLURM_REPO:$(slurm_tag "$(debian_base_ref "$SLURM_SUITE")")" ;;
    mariadb) echo "$MARIADB_REPO:$(slurm_tag "$(base_ref)")" ;;
    *) die "unknown image '$1' (expected bridge, scheduler, pause, workload, dra-plugin, slurm or mariadb)" ;;
  esac
}

archive_path() { local r; r=$(ref "$1"); echo "$IMAGES_DIR/$(echo "${r#localhost/}" | tr ':/' '--').tar"; }

save() { # ref archive : the image as an OCI archive named ref (what ctr import reads)
  rm -f "$2.tmp"
  buildah_ push --quiet "$1" "oci-archive:$2.tmp:$1" >/dev/null || die "exporting $1 to $2 failed"
  mv "$2.tmp" "$2"
}

build_bridge() {
  local r out=$1
  r=$(ref bridge)
  ensure_base
  log "building $r from the Dockerfile (buildah; base $(base_ref))"
  # shellcheck disable=SC2046  # pip_mounts prints whole "-v SRC:DST:ro" words
  buildah_ bud --quiet --runtime "$OCI_RUNTIME" --pull-never --network host $(pip_mounts) --build-arg "BASE_IMAGE=$(base_ref)" \
    --build-arg "PYTHON_VERSION=$(python_minor "$(ci_python)")" -f Dockerfile -t "$r" . > "$IMAGES_DIR/build.log" 2>&1 \
    || { tail -n 30 "$IMAGES_DIR/build.log" >&2; die "buildah bud of the Dockerfile failed (log: $IMAGES_DIR/build.log)"; }
  save "$r" "$out"
  # Older builds of the bridge image are of no further use.
  find "$IMAGES_DIR" -maxdepth 1 -name 'slurm-bridge-[0-9]*.tar' ! -path "$out" -delete   # not slurm-bridge-slurm-*
  buildah_ images --format '{{.Name}}:{{.Tag}}' | grep "^$BRIDGE_REPO:" | grep -vxF "$r" | xargs -r buildah_ rmi -f >/dev/null 2>&1 || true
}

build_scheduler() {
  local out=$1 c
  [ -x "$K8S_BIN_DIR/kube-scheduler" ] || die "kube-scheduler is not built; run hack/build-binaries.sh"
  c=$(buildah_ from scratch)
  buildah_ copy --quiet "$c" "$K8S_BIN_DIR/kube-scheduler" /usr/local/bin/kube-scheduler >/dev/null
  buildah_ config --env PATH=/usr/local/bin --entrypoint '["/usr/local/bin/kube-scheduler"]' --user 65532:65532 "$c"
  buildah_ commit --quiet --rm "$c" "$(ref scheduler)" >/dev/null || die "committing $(ref scheduler) failed"
  save "$(ref scheduler)" "$out"
}

build_pause() {
  local out=$1 src dir="$IMAGES_DIR/pause" c
  command -v gcc >/dev/null || ensure_apt gcc libc6-dev
  src=$(cd "$CACHE_DIR" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
    | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/build/pause/linux/pause.c \
    || die "cannot locate Kubernetes' pause.c (go mod download k8s.io/kubernetes@$KUBERNETES_VERSION)"
  mkdir -p "$dir"
  gcc -Os -static -DVERSION="${PAUSE_REF##*:}" -o "$dir/pause" "$src" || die "compiling $src failed"
  c=$(buildah_ from scratch)
  buildah_ copy --quiet "$c" "$dir/pause" /pause >/dev/null
  buildah_ config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  buildah_ commit --quiet --rm "$c" "$PAUSE_REF" >/dev/null || die "committing $PAUSE_REF failed"
  save "$PAUSE_REF" "$out"
}

build_workload() { # the tests' lingering container, static like the pause image
  local out=$1 dir="$IMAGES_DIR/workload" c r
  r=$(ref workload)
  command -v gcc >/dev/null || ensure_apt gcc libc6-dev
  mkdir -p "$dir"
  gcc -Os -static -o "$dir/workload" hack/workload/workload.c || die "compiling hack/workload/workload.c failed"
  c=$(buildah_ from scratch)
  buildah_ copy --quiet "$c" "$dir/workload" /workload >/dev/null
  buildah_ config --entrypoint '["/workload"]' --user 65534:65534 "$c"
  buildah_ commit --quiet --rm "$c" "$r" >/dev/null || die "committing $r failed"
  save "$r" "$out"
  find "$IMAGES_DIR" -maxdepth 1 -name 'slurm-bridge-workload-*.tar' ! -path "$out" -delete
}

build_dra_plugin() { # the kind workers' DRA plugin: Go modules through the machine's proxy, built here
  local out=$1 dir="$IMAGES_DIR/dra-plugin" c r
  r=$(ref dra-plugin)
  require_go
  mkdir -p "$dir"
  log "building $r (hack/kind/dra-plugin, Go)"
  (cd "$DRA_PLUGIN_DIR" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false" \
    go build -ldflags "-s -w" -o "$dir/dra-plugin" .) >&2 || die "go build of $DRA_PLUGIN_DIR failed; see the output above"
  c=$(buildah_ from scratch)
  buildah_ copy --quiet "$c" "$dir/dra-plugin" /dra-plugin >/dev/null
  buildah_ config --entrypoint '["/dra-plugin"]' "$c"
  buildah_ commit --quiet --rm "$c" "$r" >/dev/null || die "committing $r failed"
  save "$r" "$out"
  find "$IMAGES_DIR" -maxdepth 1 -name 'slurm-bridge-dra-plugin-*.tar' ! -path "$out" -delete
}

build_slurm_target() { # target base-ref out
  local target=$1 base=$2 out=$3 r
  r=$(ref "$target")
  log "building $r (target $target of $SLURM_IMAGE_DIR/Dockerfile; base $base)"
  # shellcheck disable=SC2046  # apt_mounts prints whole "-v SRC:DST:ro" words
  buildah_ bud --quiet --runtime "$OCI_RUNTIME" --pull-never --network host $(apt_mounts) \
    --build-arg "SLURM_BASE_IMAGE=$(debian_base_ref "$SLURM_SUITE")" --build-arg "DB_BASE_IMAGE=$(base_ref)" \
    --target "$target" -f "$SLURM_IMAGE_DIR/Dockerfile" -t "$r" "$SLURM_IMAGE_DIR" > "$IMAGES_DIR/build-$target.log" 2>&1 \
    || { tail -n 30 "$IMAGES_DIR/build-$target.log" >&2; die "buildah bud of $SLURM_IMAGE_DIR (target $target) failed (log: $IMAGES_DIR/build-$target.log)"; }
  save "$r" "$out"
  find "$IMAGES_DIR" -maxdepth 1 -name "$(basename "${r%%:*}")-*.tar" ! -path "$out" -delete
}

build_slurm() { ensure_debian_base "$SLURM_SUITE"; ensure_base; build_slurm_target slurm "$(debian_base_ref "$SLURM_SUITE")" "$1"; }
build_mariadb() { ensure_debian_base "$SLURM_SUITE"; ensure_base; build_slurm_target mariadb "$(base_ref)" "$1"; }

archive() { # name : build if the archive for the current inputs is missing; print its path
  local out
  ensure_apt buildah
  mkdir -p "$IMAGES_DIR" "$BUILDAH_ROOT"
  out=$(archive_path "$1")
  if [ ! -f "$out" ]; then
    case $1 in
      bridge) build_bridge "$out" ;;
      scheduler) build_scheduler "$out" ;;
      pause) build_pause "$out" ;;
      workload) build_workload "$out" ;;
      dra-plugin) build_dra_plugin "$out" ;;
      slurm) build_slurm "$out" ;;
      mariadb) build_mariadb "$out" ;;
    esac
  fi
  echo "$out"
}

# A RUN step through the same wrapper as the real builds, on the cached base image: shows that the
# runtime buildah uses here works (tests/integration/test_image_runtime.py).
selftest() {
  local dir
  ensure_apt buildah; mkdir -p "$IMAGES_DIR" "$BUILDAH_ROOT"
  ensure_base
  dir=$(mktemp -d)
  printf 'FROM %s\nRUN python3 -c "print(42)" > /answer\n' "$(base_ref)" > "$dir/Containerfile"
  buildah_ bud --quiet --runtime "$OCI_RUNTIME" --pull-never -f "$dir/Containerfile" -t localhost/sb-runtime-selftest "$dir" >"$dir/log" 2>&1 \
    || { cat "$dir/log" >&2; rm -rf "$dir"; die "a RUN step failed with the OCI runtime $OCI_RUNTIME (SB_OCI_RUNTIME picks another)"; }
  buildah_ rmi -f localhost/sb-runtime-selftest >/dev/null 2>&1 || true
  rm -rf "$dir"
  echo "a RUN step works with $OCI_RUNTIME"
}

case "${1:-}" in
  runtime) echo "$OCI_RUNTIME" ;;
  selftest) selftest ;;
  archive) [ -n "${2:-}" ] || die "usage: hack/image.sh archive bridge|scheduler|pause|workload|dra-plugin|slurm|mariadb"; ref "$2" >/dev/null; archive "$2" ;;
  ref) [ -n "${2:-}" ] || die "usage: hack/image.sh ref bridge|scheduler|pause|workload|dra-plugin|slurm|mariadb"; ref "$2" ;;
  load)
    a=$(archive bridge); b=$(archive scheduler)
    bash "$HACK_DIR/node.sh" import "$a" "$b"
    log "imported $(ref bridge) and $(ref scheduler) into the node's containerd" ;;
  *) die "usage: hack/image.sh archive NAME|ref NAME|load|runtime|selftest" ;;
esac
