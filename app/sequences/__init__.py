"""Sequences: dense 64-bit integers per name, issued from ranges each node reserves in advance (Leaf segment mode).

:mod:`app.sequences.buffer` holds a node's ranges of one sequence (double buffer, adaptive reservation size);
:mod:`app.sequences.service` serves ``next``, ``range`` and the catalogue; :mod:`app.sequences.text` writes runs of
integers as decimal text. Storage (etcd or the state directory) is behind :mod:`app.storage.sequences`.
"""

from __future__ import annotations

from app.sequences.service import SequenceService

__all__ = ["SequenceService"]
