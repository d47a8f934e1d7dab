"""pytest plugin: one TLS context for every httpx client the tests make with httpx's default ``verify=True``.

httpx builds a new ``ssl.SSLContext`` for every client, reading certifi's CA bundle each time, so every one-shot
``httpx.get(...)`` costs about 57 ms of CPU on this machine, against under 1 ms without it. The tests poll loopback
servers over plain HTTP thousands of times a run (every 50 ms while a server starts, while a node fails closed...),
and on two cores that CPU was taken from the servers being polled. :func:`share_default_context` makes the default
context once per process and hands the same one to every client; a client given its own ``verify`` (a context, a
CA file, ``False``) or a client certificate still gets its own. Applied when the plugin loads (tests/conftest.py)
and by :mod:`tests.support.server` (the conformance driver and the benches start servers through it)."""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx._transports.default as transports
from httpx._config import create_ssl_context


@functools.cache
def _default_context(trust_env: bool) -> ssl.SSLContext:
    return create_ssl_context(verify=True, cert=None, trust_env=trust_env)


def _shared_or_own(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
    if verify is True and cert is None:
        return _default_context(trust_env)
    return create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


def share_default_context() -> None:
    """Make every httpx client of this process with the default ``verify`` share one TLS context."""
    setattr(transports, "create_ssl_context", _shared_or_own)  # noqa: B010 - httpx does not export the name


share_default_context()
