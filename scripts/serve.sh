#!/usr/bin/env bash
# Run idmint on the embedded lease backend (no etcd) at http://127.0.0.1:8000, creating ./.venv on first use.
# Extra arguments go to `idmint serve` (e.g. --port 9000 --workers 2). Settings: IDMINT_* (README.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/idmint ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e .
fi
exec .venv/bin/idmint serve "$@"
