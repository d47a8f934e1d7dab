#!/usr/bin/env bash
# Test the idmint clients and hold them to one conformance suite (clients/conformance): for each client named
# (default: python typescript go), its own checks, then every conformance case against it through real idmint
# servers, a real etcd and the fault proxy. Prints one line per client, e.g. `go: 59 passed, 0 failed` (the
# conformance cases it passed; `go: own checks failed` when its own checks failed); exits non-zero when anything
# failed. The clients named run their cases side by side against one set of servers, started once; a client's own
# checks run beside the cases of the others, and its cases start when they passed.
#   - python:      the client's unit and integration tests are tests/client (run by scripts/test.sh)
#   - typescript:  npm ci (dev dependencies pinned by clients/typescript/package-lock.json; once), tsc (the build
#                  type-checks tsconfig.test.json, what `npm run lint` checks again without emitting: here only its
#                  biome half runs), biome lint, Node's test runner
#   - go:          go vet, go test (Debian's golang-go, Go 1.19; standard library only: nothing is downloaded)
# Needs ./.venv as scripts/test.sh makes it, node and npm, and go (.ci/install-debian-packages.sh installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
clients=("$@")
[ "${#clients[@]}" -eq 0 ] && clients=(python typescript go)
ended=$(mktemp -d)
trap 'wait; rm -rf "$ended"' EXIT
driver_args=()
for client in "${clients[@]}"; do
    case "$client" in
    python | typescript | go) ;;
    *)
        echo "test-clients: unknown client '$client' (python, typescript, go)" >&2
        exit 2
        ;;
    esac
    driver_args+=(--client "$client")
    [ "$client" = python ] && continue # its own tests are tests/client
    # The client's own checks run in the background, beside the conformance cases of the clients ready before them;
    # the driver starts this client's cases once they passed (--after). A client whose own checks fail is named and
    # left out of the conformance run; the others still run it. (Inside `if`, bash ignores set -e: every step is
    # chained with &&.)
    (
        if (
            case "$client" in
            typescript)
                # under the lock tests/e2e/test_cors_client.py takes too: npm ci empties node_modules first
                cd clients/typescript && exec 9>>.npm.lock && flock 9 &&
                    if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
                        npm ci --no-audit --no-fund --loglevel=error
                    fi &&
                    npm run --silent build && npm run --silent lint:biome && npm test
                ;;
            go)
                cd clients/go && go vet ./... && go test -count=1 ./...
                ;;
            esac
        ); then
            echo ok >"$ended/$client"
        else
            echo "$client: own checks failed"
            echo failed >"$ended/$client"
        fi
    ) &
    driver_args+=(--after "$client=$ended/$client")
    if [ "$client" = typescript ]; then
        driver_args+=(--built typescript) # npm run build makes its runner
    fi
done
# One driver run for every client: one set of servers (and etcd) for all of them, one result line per client.
status=0
.venv/bin/python clients/conformance/driver.py "${driver_args[@]}" || status=$?
wait
if grep -qx failed "$ended"/* 2>/dev/null; then
    status=1
fi
exit "$status"
