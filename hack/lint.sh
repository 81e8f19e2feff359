#!/usr/bin/env bash
# ruff + mypy over the whole project. mypy cannot follow setuptools' package-dir mapping, so it
# checks a tree of symlinks that puts operator/, webhook/ and extender/ inside slurm_bridge/.
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
PY="${PYTHON:-$REPO_DIR/.venv/bin/python}"
tree="$REPO_DIR/build/typecheck"
rm -rf "$tree"; mkdir -p "$tree/slurm_bridge"
for f in slurm_bridge/*; do ln -s "$REPO_DIR/$f" "$tree/slurm_bridge/"; done
for d in operator webhook extender; do ln -s "$REPO_DIR/$d" "$tree/slurm_bridge/$d"; done
"$PY" -P -m ruff check slurm_bridge operator webhook extender tests bench
"$PY" -P -m ruff format --check slurm_bridge operator webhook extender tests bench
MYPYPATH="$tree" "$PY" -P -m mypy -p slurm_bridge
MYPYPATH="$tree" "$PY" -P -m mypy tests bench
