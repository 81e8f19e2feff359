"""The container image, without a Docker engine: the Dockerfile's shape, and the wheel it
installs, built and installed the same way into a clean virtual environment whose three entry
points must run."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
ENTRY_POINTS = ("slurm-bridge-operator", "slurm-bridge-webhook", "slurm-bridge-extender")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions():
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    stages = _stages()
    assert len(stages) == 2, "a builder stage and a final stage"
    builder, final = stages
    for stage in stages:
        image = stage[0][1].split()[0]
        assert re.match(r"^python:\$\{PYTHON_VERSION\}-slim", image) or re.match(r"^python:3\.\d+-slim", image), image
    assert " AS builder" in builder[0][1]
    builder_runs = " ".join(a for i, a in builder if i == "RUN")
    assert "pip wheel" in builder_runs, "the builder builds the wheel"
    # `python -m pip` where operator/ was copied would import it instead of the stdlib's operator.
    workdir, source_dirs = "/", set()
    for ins, args in builder:
        if ins == "WORKDIR":
            workdir = args
        elif ins == "COPY" and "operator" in shlex.split(args)[:-1]:
            source_dirs.add(workdir)
        elif ins == "RUN" and "python -m pip" in args:
            assert workdir not in source_dirs, f"pip runs in {workdir}, where operator/ shadows the stdlib"
    final_runs = " ".join(a for i, a in final if i == "RUN")
    assert "pip install" in final_runs and "--no-index" in final_runs, "the final stage installs the built wheels"
    assert "from=builder" in final_runs
    for tool in ("gcc", "build-essential", "apt-get install", "make "):
        assert tool not in final_runs, f"{tool} in the final stage"
    assert not [a for i, a in final if i in ("COPY", "ADD")], "nothing but the installed wheel enters the final stage"
    users = [a for i, a in final if i == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root USER, so runAsNonRoot can verify it"
    chart_values = (REPO / "helm" / "slurm-bridge" / "values.yaml").read_text()
    assert f"runAsUser: {uid}" in chart_values, "the chart runs the image as its user"


def test_dockerignore_keeps_the_context_to_the_sources() -> None:
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*", "ignore everything, then allow the sources back in"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    copied: set[str] = set()
    for ins, args in _stages()[0]:
        if ins == "COPY":
            copied.update(p.rstrip("*") for p in shlex.split(args)[:-1] if not p.startswith("--"))
    assert copied <= allowed, f"the builder copies {copied - allowed}, which .dockerignore leaves out"
    for secret_or_bulky in (".git", ".venv", "tests", "build", "docs"):
        assert secret_or_bulky not in allowed


Proc = subprocess.CompletedProcess[str]


def _copy_build_context(dest: Path) -> None:
    """What the builder stage's COPY instructions put into /src."""
    for ins, args in _stages()[0]:
        if ins != "COPY":
            continue
        for pattern in shlex.split(args)[:-1]:
            for match in glob.glob(str(REPO / pattern)):
                src = Path(match)
                target = dest / src.relative_to(REPO)
                if src.is_dir():
                    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(src, target)


def _run(
    cmd: list[str], timeout: float, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # Never from the work tree: its operator/ directory would shadow the standard library's.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def test_the_wheel_installs_into_a_clean_environment_and_every_entry_point_runs(tmp_path: Path) -> None:
    src, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    src.mkdir()
    _copy_build_context(src)
    build = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(src)], 600, tmp_path
    )
    assert build.returncode == 0, f"building the wheel failed:\n{build.stdout[-2000:]}\n{build.stderr[-3000:]}"
    (wheel,) = wheels.glob("slurm_bridge-*.whl")
    made = _run([sys.executable, "-m", "venv", str(venv)], 120, tmp_path)
    assert made.returncode == 0, f"python -m venv failed (install python3-venv):\n{made.stderr}"
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    install = _run([str(py), "-m", "pip", "install", "--no-cache-dir", str(wheel)], 900, tmp_path, env)
    if install.returncode != 0:
        pytest.fail(
            "pip install of the wheel into a clean venv failed; it needs the package index for the "
            f"dependencies:\n{install.stdout[-2000:]}\n{install.stderr[-3000:]}"
        )
    for name in ENTRY_POINTS:
        exe = venv / "bin" / name
        assert exe.exists(), f"the wheel installs no {name} entry point"
        proc = _run([str(exe), "--help"], 120, tmp_path, env)
        assert proc.returncode == 0, f"{name} --help failed:\n{proc.stderr[-3000:]}"
        assert name in proc.stdout, proc.stdout
    # The installed package is the wheel's, not the work tree's.
    where = _run([str(py), "-c", "import slurm_bridge; print(slurm_bridge.__file__)"], 60, tmp_path, env)
    assert where.stdout.strip().startswith(str(venv)), where.stdout
