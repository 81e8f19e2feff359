# syntax=docker/dockerfile:1
# One image for all three slurm-bridge components; the Helm chart picks the entry point:
#   slurm-bridge-operator | slurm-bridge-webhook | slurm-bridge-extender
#
#   docker build -t slurm-bridge:0.1.0 .
#
# Stage 1 builds the wheel (and its dependencies' wheels, at the versions constraints.txt pins);
# stage 2 installs them into a slim Python without compilers or build tools and runs as an
# unprivileged user.
#
# PYTHON_VERSION is the Python CI tests (tests/repo/test_image.py checks it). BASE_IMAGE is the
# public python image by default; hack/image.sh, which builds with buildah where no registry is
# reachable, passes a Debian root with the same Python made locally.
ARG PYTHON_VERSION=3.11
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is built from (the .dockerignore keeps the context small as well).
COPY pyproject.toml constraints.txt README.md* ./
COPY slurm_bridge ./slurm_bridge
COPY operator ./operator
COPY webhook ./webhook
COPY extender ./extender
# The project's wheel, then wheels of all its dependencies, into /wheels. Not run from /src:
# `python -m` puts the working directory first on sys.path, and /src/operator would shadow the
# standard library's operator module.
WORKDIR /
# PIP_CONSTRAINT also pins the build backend in pip's isolated build environment.
RUN PIP_CONSTRAINT=/src/constraints.txt python -m pip wheel --no-deps --wheel-dir /wheels /src \
 && PIP_CONSTRAINT=/src/constraints.txt python -m pip wheel --wheel-dir /wheels /wheels/slurm_bridge-*.whl

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="slurm-bridge" \
      org.opencontainers.image.description="Schedule Kubernetes pods through Slurm (operator, webhook, extender)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Install from the builder's wheels only (no index, no compiler); the wheels themselves are
# mounted, not copied, so they never land in a layer. pip compiles the byte code here, at build
# time, because the root filesystem is read-only at run time. Only the run-time dependencies come
# in (no extras): the build stops if the official Kubernetes client (test-only) slipped back in.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links /wheels slurm-bridge \
 && ! python -m pip show --quiet kubernetes 2>/dev/null \
 && groupadd --system --gid 65532 slurm-bridge \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin slurm-bridge
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /tmp
# Webhook 9443, extender 8090, operator health 8080 (the chart sets the config file).
EXPOSE 8080 8090 9443
ENTRYPOINT []
CMD ["slurm-bridge-operator", "--help"]
