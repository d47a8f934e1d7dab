"""The embedded backend: one machine, state in files under ``IDMINT_STATE_DIR``.

* :mod:`~app.storage.embedded.lease` -- identity claims as flock-ed lock files, high-water marks, fleet ID, members;
* :mod:`~app.storage.embedded.ledger` -- the claim ledger as append-only daily files;
* :mod:`~app.storage.embedded.sequences` -- a file per sequence, advanced under an flock;
* :mod:`~app.storage.embedded.files` -- the file-system primitives they share.
"""

from __future__ import annotations

from app.schemes.base import Clock
from app.settings import Settings
from app.storage.base import Capabilities, Storage
from app.storage.embedded.backfill import EmbeddedBackfillStore
from app.storage.embedded.lease import EmbeddedBackend
from app.storage.embedded.ledger import EmbeddedLedgerStore
from app.storage.embedded.sequences import EmbeddedSequenceStore

CAPABILITIES = Capabilities(claims_expire=False, one_host=True, can_revoke=False)


def open_embedded(settings: Settings, clock: Clock) -> Storage:
    """The stores under ``settings.state_dir`` (``clock``: the node's, ns since the epoch; it dates the ledger's
    files). Opens nothing yet: each store creates what it needs when started."""
    return Storage(
        "embedded",
        CAPABILITIES,
        EmbeddedBackend(settings.state_dir),
        EmbeddedLedgerStore(settings.state_dir, clock),
        EmbeddedSequenceStore(settings.state_dir, settings.max_sequences),
        backfill=EmbeddedBackfillStore(settings.state_dir),
    )
