"""Public IDs: keyed, reversible masks that hide an ID's time, order and volume (``format=public``,
``/v1/public``; docs/public-ids.md).

Files, importing one way:

* :mod:`app.public.cipher`: the keyed constructions over plain integers, with no scheme knowledge: the 128-bit
  time mask (:class:`TimeMask`) and the Feistel permutation (:class:`Feistel`), AES-256 from ``cryptography``
  as the keyed function, subkeys from HKDF-SHA-256.
* :mod:`app.public.keys`: the key file (``IDMINT_PUBLIC_ID_KEYS_FILE``), loaded at start-up, re-read on SIGHUP.
* :mod:`app.public.forms`: the public texts of a scheme's IDs (from its
  :class:`~app.schemes.base.PublicSplit`), and reading them back.

Nothing here logs, raises or publishes a secret: keys appear by their ``id`` only.
"""
