#!/usr/bin/env bash
# Test the idmint clients and hold them to one conformance suite (clients/conformance): for each client named
# (default: python typescript go), its own checks, then every conformance case against it through real idmint
# servers, a real etcd and the fault proxy. Prints one line per client, e.g. `go: 42 passed, 0 failed` (the
# conformance cases it passed); exits non-zero when anything failed.
#   - python:      the client's unit and integration tests are tests/client (run by scripts/test.sh)
#   - typescript:  npm ci (dev dependencies pinned by clients/typescript/package-lock.json; once), tsc, biome lint,
#                  Node's test runner
#   - go:          go vet, go test (Debian's golang-go, Go 1.19; standard library only: nothing is downloaded)
# Needs ./.venv as scripts/test.sh makes it, node and npm, and go (.ci/install-debian-packages.sh installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
clients=("$@")
[ "${#clients[@]}" -eq 0 ] && clients=(python typescript go)
driver_args=()
for client in "${clients[@]}"; do
    case "$client" in
    python) ;;
    typescript)
        (
            cd clients/typescript
            if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
                npm ci --no-audit --no-fund --loglevel=error
            fi
            npm run --silent build
            npm run --silent lint
            npm test
        )
        ;;
    go)
        (cd clients/go && go vet ./... && go test -count=1 ./...)
        ;;
    *)
        echo "test-clients: unknown client '$client' (python, typescript, go)" >&2
        exit 2
        ;;
    esac
    driver_args+=(--client "$client")
done
exec .venv/bin/python clients/conformance/driver.py "${driver_args[@]}"
