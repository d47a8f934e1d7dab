#!/usr/bin/env bash
# Run idmint on the embedded lease backend (no etcd) at http://127.0.0.1:8000, creating ./.venv on first use.
# Extra arguments go to `idmint serve` (e.g. --port 9000 --workers 2). Settings: IDMINT_* (docs/settings.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/idmint ]; then
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        echo "serve.sh: python3 cannot make a virtual environment here: install Debian's python3-venv" \
             "(sudo apt-get install python3-venv), then run this again" >&2
        exit 1
    fi
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e .
fi
exec .venv/bin/idmint serve "$@"
