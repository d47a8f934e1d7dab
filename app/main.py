"""The application factory: ``create_app(settings)`` builds the FastAPI app, the node and its lease backend.

Run with ``uvicorn --factory app.main:create_app`` or ``idmint serve``. Nothing heavy happens at import time; the
lifespan owns the node's background tasks and cancels them.

**Start-up never waits on network storage.** The lifespan starts the node (its lease backend, the fleet ID, the
claim ledger, first claims) and the sequence service in one background task and yields at once when storage is
reached over the network (etcd, PostgreSQL): the port opens, ``/healthz`` answers 200, ``/readyz`` 503 naming why
each scheme cannot issue yet (storage's own words: refused, password authentication failed, no answer in time),
issuing answers 503 + Retry-After and decoding works, while storage is unreachable, refusing or silent; the
holders' background tasks keep trying with their backoff, and the node becomes ready once storage answers.
Storage on this machine's own files (``Capabilities.one_host``, the embedded backend) answers or fails at once: its
start-up is awaited, so the first request finds the first claims made. A stop (SIGTERM) cancels a start-up still
under way and closes storage within :data:`STORAGE_CLOSE_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from app import __version__
from app.api import admin, bounds, decode, ids, meta
from app.api import backfill as backfill_routes
from app.api import public as public_routes
from app.api import sequences as sequence_routes
from app.api.auth import ApiKeys
from app.api.contract import install_openapi
from app.api.errors import install_error_handlers
from app.api.front import Front, HotRoute
from app.api.streams import StreamSlots
from app.issuing.node import Node, node_clock
from app.ledger import Ledger
from app.metrics import Metrics
from app.public.forms import Public
from app.public.keys import PublicKeys
from app.schemes import schemes
from app.schemes.base import Clock
from app.sequences import SequenceService
from app.settings import Settings, load_settings
from app.storage import open_storage
from app.tasks import cancel_and_wait

log = logging.getLogger("idmint.node")

NS_IN_S = 1_000_000_000
STORAGE_CLOSE_TIMEOUT_S = 5.0
"""The longest a stop waits for storage to close what the stores share (connections to an unreachable server)."""


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> Front:
    """Build the ASGI app for ``settings`` (default: from the environment). Returns the one ASGI layer in front of
    FastAPI (:class:`~app.api.front.Front`: body limit, hot routes, API keys when a key file is set, drain, request
    metrics); the FastAPI app itself is its ``.app`` attribute.
    ``clock`` (ns, like :func:`time.time_ns`; None: the real clocks) is the node's and the
    API keys' quota clock, for tests. Raises ConfigError for a key file that does not load."""
    settings = settings or load_settings()
    metrics = Metrics(list(schemes()), __version__)
    node_time = clock or node_clock(settings)
    storage = open_storage(settings, node_time, metrics)
    ledger = Ledger(
        storage.ledger, retention_days=settings.ledger_days, clock=node_time, failures=metrics.ledger_write_failed
    )
    node = Node(settings, storage, metrics, clock=node_time, ledger=ledger)
    owner = node.owner
    sequences = SequenceService(
        storage.sequences,
        metrics,
        settings.max_count,
        clock=node_time,
        node=f"pod {owner.pod}" if owner.pod else f"{owner.host} pid {owner.pid}",
        ledger_days=settings.ledger_days,
    )
    keys: ApiKeys | None = None
    public = Public(PublicKeys(settings.public_id_keys_file) if settings.public_id_keys_file else None, node.schemes)

    async def start_up() -> None:
        await asyncio.gather(node.start(), sequences.start())

    async def start_up_in_background() -> None:
        try:
            await start_up()
        except Exception:
            # Not storage (never raised, only reported): a fault a restart may cure. It ends the process, as a
            # failed start-up in the lifespan itself does.
            log.exception("start-up failed; stopping")
            os.kill(os.getpid(), signal.SIGTERM)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.node = node
        if storage.capabilities.one_host:  # this machine's own files: answered at once, so awaited
            starting = asyncio.create_task(start_up(), name="idmint-start-up")
            await starting
        else:
            starting = asyncio.create_task(start_up_in_background(), name="idmint-start-up")
        if keys is not None:
            keys.start()
        if public.keys is not None:
            reload_on_sighup([k.reload for k in (keys, public.keys) if k is not None])
        try:
            yield
        finally:
            if keys is not None:
                keys.stop()
            if public.keys is not None:
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            decode.shutdown_text_pool()
            await cancel_and_wait(starting)
            await sequences.stop()
            await node.stop()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STORAGE_CLOSE_TIMEOUT_S):
                    await storage.close()

    # FastAPIOffline: /docs and /redoc from the package's own Swagger UI and ReDoc files, not a CDN (the machine
    # running idmint may have no internet).
    api = FastAPIOffline(
        title="idmint",
        version=__version__,
        summary=f"Issue and decode {', '.join(s.title for s in schemes().values())} IDs; node identities leased "
        "via etcd or PostgreSQL.",
        lifespan=lifespan,
        favicon_url="/static/favicon.svg",
        max_body_size=settings.max_body_bytes,  # bodies without a declared length: counted as they are read
    )
    api.state.settings = settings
    # Each of `idmint serve --workers N` processes serves its 1/N share of the node's streams (at least one).
    streams_here = max(1, settings.max_concurrent_streams // settings.workers)
    api.state.streams = StreamSlots(streams_here, settings.max_stream_seconds, settings.stream_send_timeout)
    api.state.node = node
    api.state.sequences = sequences
    api.state.public = public
    drain = api.state.drain = admin.Drain()
    install_error_handlers(api)
    install_openapi(api, settings.api_keys_file is not None, settings.public_scopes)
    api.include_router(ids.router)
    api.include_router(backfill_routes.router)
    api.include_router(decode.router)
    api.include_router(bounds.router)
    api.include_router(meta.router)
    api.include_router(sequence_routes.router)
    api.include_router(admin.router)
    api.include_router(public_routes.router)
    _include_page(api)

    hot = [
        HotRoute("GET", "/v1/ids/{scheme}", ids.hot_issue(node, settings, public)),
        HotRoute("GET", sequence_routes.NEXT_ROUTE, sequence_routes.hot_next(sequences, public)),
        HotRoute("POST", sequence_routes.RANGE_ROUTE, sequence_routes.hot_range(sequences)),
    ]
    if settings.api_keys_file is not None:  # no key file: no key work at all (the hot path pays nothing)
        seconds = time.monotonic if clock is None else (lambda: clock() / NS_IN_S)
        keys = ApiKeys(settings.api_keys_file, settings.public_scopes, metrics, settings.workers, seconds)
    return Front(
        api,
        hot,
        max_body_bytes=settings.max_body_bytes,
        drain=drain,
        metrics=metrics,
        keys=keys,
        cors_origins=settings.cors_origins,
    )


def reload_on_sighup(reloads: list[Callable[[], bool]]) -> None:
    """Re-read every key file (API keys, public-ID keys) on SIGHUP: one handler for all (a loop keeps one handler a
    signal), main thread only."""
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: [reload() for reload in reloads])


def _include_page(api: FastAPI) -> None:
    try:
        from app.api import page
    except ImportError:
        return
    api.include_router(page.router)
    mount = getattr(page, "mount_static", None)
    if mount is not None:
        mount(api)
