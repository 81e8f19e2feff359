# Shared helpers for hack/*.sh. Source it; it defines paths, ports and error handling.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=versions.env
. "$HACK_DIR/versions.env"

# Heavy, reusable artefacts (binaries, Slurm root, Go caches) live outside the repository.
CACHE_DIR="${SLURM_BRIDGE_CACHE:-$HOME/.cache/slurm-bridge}"
BIN_DIR="$CACHE_DIR/bin"
# Per-cluster state (data dirs, logs, pids, kubeconfig) is thrown away by `down`.
STATE_DIR="${SLURM_BRIDGE_STATE:-$CACHE_DIR/cluster}"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

require_root() { [ "$(id -u)" = 0 ] || die "$1 must run as root (it builds/chroots into the Slurm root); re-run with sudo"; }
require_go() { command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH; install Go >= 1.24 and re-run"; }

# The Debian mirror this machine's apt already uses (never hard-coded in the repository).
apt_mirror() {
  # The Debian archive is the source that serves this system's own codename (not -security).
  local m
  m=$(python3 - <<'PY'
import glob, re
codename = dict(l.strip().split("=", 1) for l in open("/etc/os-release") if "=" in l).get("VERSION_CODENAME", "").strip('"')
for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(f).read().split("\n\n"):
        kv = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if codename in kv.get("Suites", "").split():
            print(kv["URIs"].split()[0]); raise SystemExit
for f in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try: lines = open(f).read().splitlines()
    except OSError: continue
    for line in lines:
        parts = re.sub(r"\[[^]]*\]", "", line).split()
        if len(parts) >= 3 and parts[0] == "deb" and parts[2] == codename:
            print(parts[1]); raise SystemExit
PY
)
  [ -n "$m" ] || die "cannot find the Debian archive in /etc/apt/sources.list*; configure apt first"
  echo "$m"
}

ensure_apt() { # ensure_apt pkg... : install missing Debian packages
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  if [ ! -f "$CACHE_DIR/.apt-updated" ] || [ -n "$(find "$CACHE_DIR/.apt-updated" -mmin +720)" ]; then
    apt-get update -qq >&2 || die "apt-get update failed; check the machine's apt sources"
    mkdir -p "$CACHE_DIR"; touch "$CACHE_DIR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed; see the output above"
}
