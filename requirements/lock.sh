#!/usr/bin/env bash
# Regenerates the image's locked dependencies (exact versions, every wheel's sha256) from
# pyproject.toml. Needs uv (`pip install uv`) and PyPI. The Python version must match the
# Dockerfile's base image; --universal keeps hashes for every platform (amd64 and arm64 images).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
PY=${PYTHON_VERSION:-3.11}
common=(--universal --python-version "$PY" --generate-hashes --index-url https://pypi.org/simple
        --custom-compile-command "requirements/lock.sh" --quiet "$@")
"$UV" pip compile pyproject.toml "${common[@]}" -o requirements/operator.lock
"$UV" pip compile requirements/build.in "${common[@]}" -o requirements/build.lock
