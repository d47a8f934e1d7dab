#!/usr/bin/env bash
# Install the Debian packages the test suite runs against (the Python ones come with the dev extras):
#   - chromium, fonts-dejavu-core, fonts-liberation2   headless browser for tests/e2e (driven by Playwright through
#                                                      /usr/bin/chromium; no browser is ever downloaded) and fonts
#                                                      for readable screenshots
#   - prometheus                                       a real server scrapes idmint in tests/ops; promtool checks
#                                                      the configs, rules and our /metrics output
#   - docker-compose                                   validates docker-compose.yml with `config`
#   - podman, runc                                     build the Dockerfile and run the image and the compose
#                                                      stack for real in tests/ops (no Docker engine is needed;
#                                                      runc because crun refuses hybrid cgroup hosts). The
#                                                      podman-compose that drives it comes from the dev extras:
#                                                      Debian's 1.0.3 cannot run network_mode: host services
#   - debootstrap                                      builds the tests' Debian base image (no registry pull)
#   - postgresql                                       tests/test_bounds.py runs the bounds' SQL in a real
#                                                      PostgreSQL (its own cluster on a free loopback port, made
#                                                      by initdb in a temporary directory)
#   - mariadb-server                                   tests/test_sql_functions.py runs the SQL functions in a
#                                                      real MariaDB (its own mariadbd on a free loopback port,
#                                                      data made by mariadb-install-db in a temporary directory)
#   - faketime                                         libfaketime and its `faketime` wrapper: a real idmint
#                                                      serve whose wall clock reads a chosen time (a resetting
#                                                      sequence's rollover at midnight across a daylight-saving
#                                                      change; docs/sequences-business.md says how)
#   - golang-go                                        the Go client (clients/go, Go 1.19 as Debian ships it):
#                                                      go vet, go test and its conformance runner
#   - nodejs, npm (only when `node` / `npm` are not on   the TypeScript client (clients/typescript): tsc, Node's
#     PATH: a Node.js from elsewhere is kept)          test runner, its dev dependencies from the npm registry
# Idempotent: installs only what is missing, with one `apt-get update`, via sudo when not root. Services are not
# started by the install (the tests start their own Prometheus on a loopback port).
set -euo pipefail

packages=(chromium fonts-dejavu-core fonts-liberation2 prometheus docker-compose
          podman runc debootstrap postgresql mariadb-server faketime golang-go)
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"

missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-debian-packages: already installed: ${packages[*]}"
else
    echo "install-debian-packages: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

status=0
for tool in chromium prometheus promtool docker-compose podman runc debootstrap mariadb faketime go node npm; do
    if path=$(command -v "$tool"); then
        echo "install-debian-packages: $tool: $path: $({ "$tool" --version || "$tool" version; } 2>/dev/null | head -n 1)"
    else
        echo "install-debian-packages: $tool is missing after the install" >&2
        status=1
    fi
done
exit "$status"
