#!/usr/bin/env bash
# The version matrix (docs/compatibility.md): the unit and integration tiers once, then, for each
# Kubernetes version of hack/versions.env (or those named), a fresh local cluster of that version
# and the e2e tier on it, and the deployed tier (the chart on the real node) with Helm 3 on some
# versions and Helm 4 on the others, so each Helm major installs, upgrades, rolls back and
# uninstalls the chart at least once. Prints a pass/fail table (also written to
# $CACHE_DIR/matrix/last.md) and exits non-zero when any cell failed.
#
#   hack/matrix.sh                    every version (builds each one's binaries once, then reuses them)
#   hack/matrix.sh 1.36 1.37          only those
#   SB_MATRIX_DEPLOYED=0 hack/matrix.sh   without the deployed tier
#
# CI runs the default version only (hack/test.sh); this is run by hand before a release.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
require_root "hack/matrix.sh (the local Slurm runs in a chroot)"
: "${SB_MATRIX_DEPLOYED:=1}"
versions=("$@")
# Newest first: the default version (CI's, with Helm 3 as CI) is known before the older ones.
[ ${#versions[@]} -gt 0 ] || read -r -a versions <<< "$(echo "$KUBERNETES_VERSIONS" | tr ' ' '\n' | sort -rV | tr '\n' ' ')"
out="$CACHE_DIR/matrix"; mkdir -p "$out"
t0=$SECONDS

counts() { # junit xml -> "passed/total" (failures and errors count as not passed)
  python3 -P - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("no result"); raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) + int(s.get("skipped", 0)) for s in suites)
print(f"{total - bad}/{total}")
PY
}

run_tier() { # name junit-file pytest-args... : run one tier, print its cell ("PASS 12/12" or "FAIL 11/12")
  local name=$1 junit=$2; shift 2
  local start=$SECONDS rc=0
  log "matrix: $name"
  .venv/bin/pytest -q -p no:cacheprovider --junitxml="$junit" "$@" > "${junit%.xml}.log" 2>&1 || rc=$?
  local result deselected
  result=$(counts "$junit")
  # Tests of features newer than this version are deselected (@pytest.mark.kubernetes): say so.
  deselected=$(grep -oE '[0-9]+ deselected' "${junit%.xml}.log" | tail -n 1 || true)
  [ -z "$deselected" ] || result="$result, $deselected as newer than this version"
  if [ $rc -eq 0 ]; then echo "PASS $result ($((SECONDS - start))s)"; else echo "FAIL $result ($((SECONDS - start))s, log: ${junit%.xml}.log)"; fi
}

bash hack/setup-python.sh
bash hack/lint.sh
rows=()
failed=0
# Unit and integration once, on the default version's cluster.
bash hack/cluster.sh down >/dev/null 2>&1 || true
bash hack/cluster.sh up >/dev/null
unit=$(run_tier "unit" "$out/unit.xml" tests/unit tests/repo)
integration=$(run_tier "integration" "$out/integration.xml" tests/integration)
case "$unit $integration" in *FAIL*) failed=1 ;; esac

i=0
for v in "${versions[@]}"; do
  helm_major=$(( i % 2 == 0 ? 3 : 4 )); i=$((i + 1))
  bash hack/cluster.sh down >/dev/null 2>&1 || true
  log "matrix: Kubernetes $v (cold builds take tens of minutes the first time)"
  if ! SB_KUBERNETES=$v bash hack/cluster.sh up > "$out/up-$v.log" 2>&1; then
    rows+=("| $v | cluster did not start (log: $out/up-$v.log) | - |"); failed=1; continue
  fi
  actual=$(kubectl --kubeconfig "$KUBECONFIG_FILE" version -o json | python3 -P -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
  e2e=$(SB_KUBERNETES=$v run_tier "e2e on $actual" "$out/e2e-$v.xml" tests/e2e)
  deployed="-"
  if [ "$SB_MATRIX_DEPLOYED" = 1 ]; then
    deployed="Helm $helm_major: $(SB_KUBERNETES=$v SB_HELM=$helm_major run_tier "deployed on $actual, Helm $helm_major" "$out/deployed-$v.xml" tests/deployed)"
  fi
  case "$e2e $deployed" in *FAIL*) failed=1 ;; esac
  rows+=("| $actual | $e2e | $deployed |")
done
bash hack/cluster.sh down >/dev/null 2>&1 || true

{
  echo "Matrix of $(date -u +%Y-%m-%d) at commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)'), $((SECONDS - t0)) s in all."
  echo "Slurm: $(cat "$SLURM_ROOT/$(slurm_root_stamp)"), Helm: $("$BIN_DIR/helm" version --short 2>/dev/null) and $("$BIN_DIR/helm4" version --short 2>/dev/null)."
  echo "Unit (once): $unit. Integration (once, real Slurm): $integration."
  echo
  echo "| Kubernetes | e2e | deployed (chart on the real node) |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$out/last.md"
exit $failed
