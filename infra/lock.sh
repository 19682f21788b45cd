#!/usr/bin/env bash
# Regenerate the hash-locked Python dependencies setup installs (`make lock`), for Python 3.11 on linux x86_64:
#   requirements.lock        pyproject.toml's dependencies and its [dev] extra, every transitive one, with hashes
#   requirements-build.lock  pip, setuptools and wheel (infra/python/build.in), installed first, so nothing is
#                            built with unhashed build tools (setup builds with --no-build-isolation)
# Pins already in the lock files are kept (uv prefers an existing output file's versions): after changing a pin in
# pyproject.toml, `make lock` moves only that package and what it needs. To move a transitive dependency:
#   make lock ARGS="--upgrade-package NAME"       (everything: ARGS=--upgrade)
# uv itself is installed, pinned, into a throwaway venv under $TMPDIR from PyPI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.9
tool="${TMPDIR:-/tmp}/lakestream-uv-$UV_VERSION"
if [ ! -x "$tool/bin/uv" ]; then
  "${PYTHON:-python3.11}" -m venv "$tool"
  "$tool/bin/pip" install -q "uv==$UV_VERSION"
fi
common=(--quiet --generate-hashes --python-version 3.11 --python-platform x86_64-unknown-linux-gnu
        --custom-compile-command "make lock")
"$tool/bin/uv" pip compile pyproject.toml --extra dev "${common[@]}" "$@" -o requirements.lock
"$tool/bin/uv" pip compile infra/python/build.in -c requirements.lock "${common[@]}" "$@" -o requirements-build.lock
echo "lock: requirements.lock ($(grep -c '^[A-Za-z0-9]' requirements.lock) packages), requirements-build.lock" \
     "($(grep -c '^[A-Za-z0-9]' requirements-build.lock)); commit both"
