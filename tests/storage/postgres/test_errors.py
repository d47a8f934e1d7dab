"""PostgreSQL's refusals named as what they are, against a real PostgreSQL: a server with no connection slot free
is not "unreachable"."""

from __future__ import annotations

import psycopg
import pytest

from app.errors import BackendUnavailableError
from app.storage.postgres.client import map_error
from tests.support.postgres import start_postgres

pytestmark = pytest.mark.integration  # a real PostgreSQL


def test_a_server_out_of_connection_slots_is_named_as_such() -> None:
    server = start_postgres(None, "max_connections=3", "superuser_reserved_connections=0")
    held: list[psycopg.Connection[object]] = []
    try:
        with pytest.raises(psycopg.OperationalError) as caught:
            for _ in range(4):
                held.append(psycopg.connect(server.dsn))
        error = map_error(caught.value, "connecting", "127.0.0.1")
        assert isinstance(error, BackendUnavailableError)
        assert "has no connection slot free (max_connections reached)" in str(error), error
        assert "unreachable" not in str(error) and "too many clients" in str(error)
    finally:
        for conn in held:
            conn.close()
        server.stop()
