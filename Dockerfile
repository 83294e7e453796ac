# syntax=docker/dockerfile:1
# The infertune operator image. `make image` builds it with buildah from a Debian bookworm base made
# locally (mmdebstrap: python3, python3-venv); elsewhere: docker build -t ghcr.io/infertune/infertune:0.1.0 .
# Every Python package is pinned by version and sha256 (requirements/*.lock, see requirements/lock.sh),
# locked for Python 3.11, bookworm's python3 and this default base's.
# Only `python3` is assumed: Debian's python3 has no `python` command and no pip outside a venv.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the wheel, from locked build tools, without network access to unpinned packages ---
FROM ${PYTHON_IMAGE} AS build
# pip trusts the system's CA bundle, not its own copy: behind a TLS-inspecting proxy the build mounts
# the host's bundle there (make image does). Build arguments do not reach the final image.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/build.lock requirements/build.lock
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# --- deps: the runtime virtualenv, only hashed packages from the lock, then the wheel itself ---
FROM ${PYTHON_IMAGE} AS deps
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/infertune
COPY requirements/operator.lock /tmp/operator.lock
RUN /opt/infertune/bin/pip install --require-hashes --no-deps --only-binary=:all: -r /tmp/operator.lock
COPY --from=build /wheels /wheels
# --no-deps: everything it needs is already installed from the lock, hash-checked.
RUN /opt/infertune/bin/pip install --no-deps /wheels/*.whl \
 && /opt/infertune/bin/pip uninstall -y -q setuptools pip \
 && /opt/infertune/bin/python -m compileall -q /opt/infertune

# --- runtime: no compiler, no pip, non-root, nothing written outside /tmp ---
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="infertune" \
      org.opencontainers.image.description="Keeps LLM inference on the throughput plateau and off the KV-cache cliff" \
      org.opencontainers.image.source="https://github.com/infertune/infertune" \
      org.opencontainers.image.licenses="Apache-2.0"
# The Helm chart mounts an emptyDir at /tmp and sets readOnlyRootFilesystem: everything that wants a
# writable path (HOME, TMPDIR) points there, and no .pyc is written at run time.
ENV PATH=/opt/infertune/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
# No pip anywhere: not the base's (python:*-slim ships one; Debian's venv keeps pip's wheel for ensurepip).
RUN rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/site-packages/pip* /usr/lib/python3/dist-packages/pip* \
           /usr/share/python-wheels /usr/lib/python3*/ensurepip \
 && groupadd --system --gid 65532 infertune \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin infertune
COPY --from=deps /opt/infertune /opt/infertune
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
# kopf's liveness endpoint; Kubernetes uses the chart's probes, this is for plain `docker run`.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
# Other commands: docker run --entrypoint infertune IMAGE crds
ENTRYPOINT ["infertune", "run"]
CMD ["--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=9090", "--log-format=json"]
