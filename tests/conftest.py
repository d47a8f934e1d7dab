"""Shared fixtures. Plugins under tests/support start the real parts tests need (etcd, Prometheus, browsers).

Async tests are anyio tests (``pytestmark = pytest.mark.anyio``) on asyncio, the loop the app runs on; never
``asyncio.run()`` inside a sync test.
"""

import pytest

pytest_plugins = ["tests.support.etcd", "tests.support.prometheus", "tests.support.podman"]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio only; module scope so that a module may keep one event loop (a module-scoped async fixture)."""
    return "asyncio"
