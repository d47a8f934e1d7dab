"""The embedded backend: one machine, state in files under ``IDMINT_STATE_DIR``.

* :mod:`~app.storage.embedded.lease` -- identity claims as flock-ed lock files, high-water marks, fleet ID, members;
* :mod:`~app.storage.embedded.ledger` -- the claim ledger as append-only daily files;
* :mod:`~app.storage.embedded.sequences` -- a file per sequence, advanced under an flock;
* :mod:`~app.storage.embedded.files` -- the file-system primitives they share.
"""
