"""Sequences in PostgreSQL (:class:`~app.storage.tables.sequences.TableSequenceStore`): each update holds
``pg_advisory_xact_lock`` of the sequence's name for its transaction."""

from app.storage.tables.sequences import TableSequenceStore


class PostgresSequenceStore(TableSequenceStore):
    """Sequences as rows of ``<schema>.sequence_documents`` and ``<schema>.sequence_events``."""
