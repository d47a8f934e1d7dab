"""The claim ledger in PostgreSQL (:class:`~app.storage.tables.ledger.TableLedgerStore` on its ``ledger`` table)."""

from app.storage.tables.ledger import TableLedgerStore


class PostgresLedgerStore(TableLedgerStore):
    """Claim records as rows of ``<schema>.ledger``."""
