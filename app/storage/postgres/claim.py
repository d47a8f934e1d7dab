"""One identity held as a PostgreSQL ``claims`` row (:class:`~app.storage.tables.claim.TableClaim`)."""

from app.storage.tables.claim import TableClaim as PostgresClaim

__all__ = ["PostgresClaim"]
