"""Sequences: dense 64-bit integers per name, issued from ranges each node reserves in advance (Leaf segment mode).

:mod:`app.sequences.buffer` holds a node's ranges of one sequence (double buffer, adaptive reservation size);
:mod:`app.sequences.service` serves ``next``, ``range`` and the catalogue; :mod:`app.sequences.text` writes runs of
integers as decimal text. Storage (etcd, PostgreSQL or the state directory) is behind :mod:`app.storage.sequences`.

Business numbers (pure, no I/O): :mod:`app.sequences.spec` holds the settings beyond start and cache
(increment, reset, time_zone, template, check_digit, mode) and how a run with an increment is represented;
:mod:`app.sequences.period` places an instant in its day, month or year in a time zone;
:mod:`app.sequences.template` parses, renders and reads back templates such as ``INV-{yyyy}{mm}{dd}-{seq:06}{check}``;
:mod:`app.sequences.checkdigit` computes and checks Luhn, Damm and ISO 7064 MOD 97-10 check digits;
:mod:`app.sequences.points` holds the changes to a sequence's stored documents beyond reserving runs (delete, PATCH,
setval, and gapless reserve, commit, void and expiry with their audit events).
"""

from __future__ import annotations

from app.sequences.service import SequenceService

__all__ = ["SequenceService"]
