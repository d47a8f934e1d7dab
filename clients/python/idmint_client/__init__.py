"""idmint-client: IDs from an idmint fleet at in-process speed, with failover, streams and decode.

::

    from idmint_client import Client

    with Client(["http://idmint-1:8000", "http://idmint-2:8000"]) as ids:
        order_id = ids.new_id("hlc-ulid")             # from a local buffer, refilled in the background
        batch = ids.ids("eight-byte", 250_000)         # split above the server's max count
        for line in ids.stream("wiji", 10_000_000):    # flat memory, carries on from another replica
            ...
        print(ids.decode(order_id).best.timestamp)
        invoice_numbers = ids.next("invoices", 3)      # a sequence: [1041, 1042, 1043], Python ints
        block = ids.range("invoices", 10_000)          # SequenceRange(first, last): reserved for this caller
        held = ids.reserve("receipts")                  # a gapless sequence: one integer, then commit or void
        ids.commit("receipts", held.reservation)
        shown = ids.new_id("uuidv7", format="public")   # a public ID: keyed, in no order (docs/public-ids.md)
        print(ids.reveal(shown).id)                     # the internal UUIDv7 behind it

:class:`AsyncClient` has the same surface with coroutines. Errors: :mod:`idmint_client._exceptions` (one tree,
rooted at :class:`IdmintClientError`).
"""

from __future__ import annotations

import warnings

from idmint_client._async_client import AsyncClient
from idmint_client._client import Client
from idmint_client._exceptions import (
    DEPRECATED_NAMES,
    ClientClosedError,
    FleetOverlapError,
    ForbiddenError,
    IdmintClientError,
    NoReplicaAvailableError,
    RequestRejectedError,
    SequenceStoresDifferError,
    UnauthorizedError,
    UnknownPublicIdError,
    UnknownSchemeError,
    UnknownSequenceError,
    ValidationError,
)
from idmint_client._models import BufferStats, Candidates, Decoded, SchemeInfo
from idmint_client._public import Revealed, Unrevealed
from idmint_client._sequences import ParsedNumber, Reservation, SequenceNumbers, SequenceRange, Settled

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "BufferStats",
    "Candidates",
    "Client",
    "ClientClosedError",
    "Decoded",
    "FleetOverlapError",
    "ForbiddenError",
    "IdmintClientError",
    "NoReplicaAvailableError",
    "ParsedNumber",
    "RequestRejectedError",
    "Reservation",
    "Revealed",
    "SchemeInfo",
    "SequenceNumbers",
    "SequenceRange",
    "SequenceStoresDifferError",
    "Settled",
    "UnauthorizedError",
    "UnknownPublicIdError",
    "UnknownSchemeError",
    "UnknownSequenceError",
    "Unrevealed",
    "ValidationError",
    "__version__",
]


def __getattr__(name: str) -> type[IdmintClientError]:
    """The earlier error names (``BadRequest``, ``NoReplicaAvailable``...), with a DeprecationWarning."""
    new = DEPRECATED_NAMES.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"idmint_client.{name} is deprecated: use {new.__name__}", DeprecationWarning, stacklevel=2)
    return new
