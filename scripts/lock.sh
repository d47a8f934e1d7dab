#!/usr/bin/env bash
# Regenerate the lock files from pyproject.toml (and clients/python/pyproject.toml), with every file's SHA-256:
#   requirements.lock      what the image installs (the runtime dependencies; Dockerfile)
#   requirements-dev.lock  what the test command installs (runtime + the dev extra + the Python client's
#                          dependencies; scripts/test.sh), the runtime pins unchanged (resolved under requirements.lock)
# Both resolve for every platform at once (uv's universal resolution, Python 3.11 and up), from PyPI (uv's default
# index). Run it after
# changing a dependency in either pyproject.toml (tests/test_lock.py fails until the locks agree with them), or with
# --upgrade to move every pin to the newest release the specifiers allow. uv itself (a pinned release) is installed
# into a cache venv here: nothing else is needed but python3 and the network to PyPI.
#   bash scripts/lock.sh [--upgrade]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.9
TOOLS="${XDG_CACHE_HOME:-$HOME/.cache}/idmint-lock/uv-$UV_VERSION"
if [ ! -x "$TOOLS/bin/uv" ]; then
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q "uv==$UV_VERSION"
fi
UV="$TOOLS/bin/uv"
COMMON=(--universal --python-version 3.11 --generate-hashes --custom-compile-command "bash scripts/lock.sh" "$@")
# Each lock starts from its previous pins (uv keeps a pin the specifiers still allow), so a re-run changes only
# what a changed dependency needs.
"$UV" pip compile pyproject.toml "${COMMON[@]}" -o requirements.lock
"$UV" pip compile pyproject.toml clients/python/pyproject.toml --extra dev -c requirements.lock "${COMMON[@]}" \
    -o requirements-dev.lock
