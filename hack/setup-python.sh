#!/usr/bin/env bash
# Create .venv with the project (editable) and its test tools, at the versions constraints.txt pins
# (the image installs the same ones); quick when nothing changed.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
py=${PYTHON:-python3}
"$py" -P -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || die "Python >= 3.11 is required ($py is $("$py" --version 2>&1))"
if ! "$py" -P -m venv --help >/dev/null 2>&1 || ! "$py" -P -c 'import ensurepip' 2>/dev/null; then
  ensure_apt python3-venv
fi
[ -x .venv/bin/python ] || "$py" -P -m venv .venv || die "cannot create .venv (install python3-venv)"
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt hack/setup-python.sh | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  log "installing slurm-bridge and its test dependencies into .venv (versions from constraints.txt)"
  .venv/bin/python -P -m pip install -q --upgrade pip >&2 || die "pip upgrade failed (is the package index reachable?)"
  # setuptools and wheel too: the venv's own copies would be older than the lock's.
  # setuptools warns that a folder named like a package may shadow it: operator/, webhook/ and
  # extender/ are mapped into slurm_bridge on purpose (pyproject.toml), so that notice is silenced.
  PYTHONWARNINGS="ignore:Editable installation" PIP_CONSTRAINT="$REPO_DIR/constraints.txt" \
    .venv/bin/python -P -m pip install -q -e '.[test]' setuptools wheel >&2 \
    || die "pip install -e .[test] -c constraints.txt failed; see the output above"
  rm -f .venv/.installed-*; touch "$stamp"
fi
