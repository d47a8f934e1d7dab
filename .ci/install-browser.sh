#!/usr/bin/env bash
# Install what the end-to-end browser tests (tests/e2e) need:
#   - chromium            Debian package: the headless browser the tests drive (/usr/bin/chromium)
#   - fonts-dejavu-core,  Debian packages: fonts for readable screenshots (the page names DejaVu / Liberation
#     fonts-liberation2   in its font stacks; no web fonts are loaded)
#   - playwright          PyPI package, into the project's virtualenv if it is not there yet (normally it comes
#                         with the dev extras); its wheel ships the driver. No browser is ever downloaded:
#                         the tests launch Debian's Chromium through executable_path.
#
# Idempotent: installs only what is missing and runs `apt-get update` (once) only when an apt package must be
# installed. Usage: .ci/install-browser.sh   (VENV=/path/to/venv to use another virtualenv than ./.venv)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$repo/.venv}"
apt_packages=(chromium fonts-dejavu-core fonts-liberation2)

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
    echo "install-browser: apt: already installed: ${apt_packages[*]}"
else
    echo "install-browser: apt-get update"
    $sudo apt-get update -qq
    echo "install-browser: apt: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1
    echo "install-browser: apt: installed ${missing[*]}"
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "install-browser: no virtualenv at $venv: skipping the playwright check (set VENV to check one)"
elif "$venv/bin/python" -c "import playwright.sync_api" 2>/dev/null; then
    echo "install-browser: pip: playwright already installed in $venv"
else
    echo "install-browser: pip: installing playwright into $venv"
    "$venv/bin/python" -m pip install --quiet "playwright>=1.45"
    echo "install-browser: pip: installed playwright"
fi

if ! command -v chromium >/dev/null 2>&1; then
    echo "install-browser: chromium is missing after the install (expected /usr/bin/chromium)" >&2
    exit 1
fi
echo "install-browser: chromium: $(command -v chromium): $(chromium --version 2>/dev/null | head -n 1)"
if [ -x "$venv/bin/python" ]; then
    echo "install-browser: playwright: $("$venv/bin/python" -m pip show playwright 2>/dev/null | sed -n 's/^Version: //p')"
fi
