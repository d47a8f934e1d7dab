#!/usr/bin/env bash
# The soak lane whole: the tests marked `soak` (tests/support/order.py) at their full size (IDMINT_SOAK=full), e.g.
# 20,000 gapless operations through SIGKILLs on each backend. The test command (scripts/test.sh) runs the same tests
# at a small size. Needs ./.venv as scripts/test.sh makes it (run that once first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
IDMINT_SOAK=full exec .venv/bin/python -m pytest -m soak -n "${IDMINT_TEST_WORKERS:-auto}" --dist loadgroup -p no:cacheprovider "$@"
