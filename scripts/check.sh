#!/usr/bin/env bash
# The fast loop, for a developer between edits (about a minute on a 2-core machine): ruff (lint and
# format), mypy (strict on app/ and the client, relaxed on tests/), then the fast lane of the tests: every test but the `integration`
# (real processes and etcd), `ops` and `e2e` ones (markers: pyproject.toml, tests/conftest.py). Needs ./.venv as
# scripts/test.sh makes it (run that once); extra arguments go to pytest. The whole suite stays `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LINTED=(app clients/python clients/conformance tests bench)
.venv/bin/ruff check "${LINTED[@]}"
.venv/bin/ruff format --check --quiet "${LINTED[@]}"
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m "not integration and not ops and not e2e" \
    --deselect tests/test_tooling.py "$@"
