#!/usr/bin/env bash
# ruff + mypy over the whole project. mypy cannot follow setuptools' package-dir mapping (the
# editable install is an import hook, and a folder named operator/ would be the stdlib's), so it
# checks a tree of symlinks that puts each mapped folder where the runtime has it: the mapping is
# pyproject.toml's, read by tests/packages.py. ruff knows slurm_bridge as first-party (pyproject.toml).
. "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
PY="${PYTHON:-$REPO_DIR/.venv/bin/python}"
tree="$REPO_DIR/build/typecheck"
rm -rf "$tree"; mkdir -p "$tree/slurm_bridge"
for f in slurm_bridge/*; do ln -s "$REPO_DIR/$f" "$tree/slurm_bridge/"; done
"$PY" -P tests/packages.py | while read -r name folder; do ln -s "$REPO_DIR/$folder" "$tree/$name"; done
"$PY" -P -m ruff check slurm_bridge operator webhook extender tests bench
"$PY" -P -m ruff format --check slurm_bridge operator webhook extender tests bench
MYPYPATH="$tree" "$PY" -P -m mypy -p slurm_bridge
MYPYPATH="$tree" "$PY" -P -m mypy tests bench
