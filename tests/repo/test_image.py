"""The container image's recipe: the Dockerfile's shape, and the lock it and CI install from. The
image itself is built with buildah and run on the local cluster's real node by the deployed tier
(tests/deployed/)."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


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


def _global_args() -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults (usable in FROM lines)."""
    args: dict[str, str] = {}
    for ins, rest in _instructions():
        if ins == "FROM":
            break
        if ins == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def test_dockerfile_builds_the_python_ci_tests_on_the_public_base_by_default() -> None:
    args = _global_args()
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert args.get("PYTHON_VERSION") == running, (
        f"the image's Python ({args.get('PYTHON_VERSION')}) must be the one CI tests ({running})"
    )
    # A plain `docker build .` uses the public image; hack/image.sh passes a local one instead.
    assert args.get("BASE_IMAGE") == "python:${PYTHON_VERSION}-slim-bookworm"
    for stage in _stages():
        assert stage[0][1].split()[0] == "${BASE_IMAGE}", "both stages start from BASE_IMAGE"


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    stages = _stages()
    assert len(stages) == 2, "a builder stage and a final stage"
    builder, final = stages
    assert " AS builder" in builder[0][1]
    builder_runs = " ".join(a for i, a in builder if i == "RUN")
    assert "pip wheel" in builder_runs, "the builder builds the wheel"
    assert builder_runs.count("PIP_CONSTRAINT=/src/constraints.txt") == builder_runs.count("pip wheel"), (
        "every pip run of the build uses constraints.txt, so two builds install the same versions"
    )
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


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            pins[_canonical(name)] = version.strip()
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_ci_runs_exactly_the_locked_versions() -> None:
    """The test environment (hack/setup-python.sh) installs what constraints.txt pins, as the image
    does: every installed distribution is pinned, at the installed version."""
    pins = _pins()
    wrong = {}
    for dist in importlib.metadata.distributions():
        name = _canonical(dist.metadata["Name"])
        if name in ("slurm-bridge", "pip"):
            continue
        if pins.get(name) != dist.version:
            wrong[name] = (dist.version, pins.get(name, "not pinned"))
    assert not wrong, (
        f"installed (version, pin) differ from constraints.txt: {wrong}; run hack/lock.sh after changing "
        "pyproject.toml's dependencies, and hack/setup-python.sh to install the pinned versions"
    )


def test_every_declared_dependency_is_pinned() -> None:
    pins = _pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + [d for ds in project["optional-dependencies"].values() for d in ds]
    unpinned = [d for d in declared if _canonical(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) not in pins]
    assert not unpinned, f"pyproject.toml declares {unpinned}, which constraints.txt does not pin (run hack/lock.sh)"


def _closure(requirements: list[str], extras: tuple[str, ...] = ()) -> set[str]:
    """Every distribution that installing ``requirements`` pulls in (markers evaluated here)."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [(Requirement(r), extras) for r in requirements]
    while todo:
        req, parent_extras = todo.pop()
        env_extras = parent_extras or ("",)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in env_extras):
            continue
        name = _canonical(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for sub in importlib.metadata.requires(req.name) or []:
            todo.append((Requirement(sub), tuple(req.extras)))
    return {k.partition("[")[0] for k in seen}


def _declared() -> tuple[list[str], list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]), [d for ds in project["optional-dependencies"].values() for d in ds]


def test_the_lock_covers_exactly_what_is_declared() -> None:
    """constraints.txt pins the declared dependencies (run time and test), what they need, and the
    build backend: nothing more, so a dropped dependency does not linger in the lock."""
    runtime, test = _declared()
    needed = _closure(runtime + test + ["setuptools", "wheel"])
    pins = set(_pins())
    assert not pins - needed, f"constraints.txt pins {sorted(pins - needed)}, which nothing declared needs"
    assert not needed - pins, f"constraints.txt misses {sorted(needed - pins)} (run hack/lock.sh)"


def test_the_image_installs_no_test_only_package() -> None:
    """The image installs the wheel's run-time dependencies only: the official Kubernetes client
    (~126 MB; credentials come from slurm_bridge/kube/kubeconfig.py) and the test tools stay out."""
    runtime, _ = _declared()
    installed = _closure(runtime)
    for heavy in ("kubernetes", "pykube-ng", "jsonschema", "trustme", "pytest", "mypy", "ruff"):
        assert heavy not in installed, f"{heavy} would be installed in the image by {runtime}"
    assert {"kopf", "aiohttp", "pydantic"} <= installed
    # The Dockerfile installs the project's wheel without extras, so the test extra never comes in.
    runtime_stage = " ".join(args for ins, args in _stages()[-1] if ins == "RUN")
    assert re.search(r"pip install [^&]*slurm-bridge(?![\[\w-])", runtime_stage), runtime_stage
