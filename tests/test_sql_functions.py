"""The SQL functions of ``idmint sql functions`` (app/sql_functions.py) read IDs in a real PostgreSQL and a real
MariaDB exactly as ``GET /v1/decode/{scheme}/{id}`` does: the same time (to the millisecond) and the same fields
for IDs issued by the server, for the edges of each layout (the epoch, the end of the ID space, the largest counter,
the signed and JS-safe forms) and NULL, never an error, for text that does not read."""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from app.bounds import format_time
from app.cli import main
from app.decoding import decode_one
from app.errors import IdmintError
from app.schemes import get_scheme
from app.schemes.snowflake import NAMED_LAYOUTS
from app.schemes.time_order import BIGINT, BYTEA, TEXT, UUID
from app.sql_functions import MYSQL, POSTGRESQL, functions_ddl, readings
from tests.helpers import running_app
from tests.support.mariadb import MariadbServer
from tests.support.postgres import PostgresServer
from tests.test_bounds import SQL_TABLES
from tests.test_bounds import _intervals as bounds_intervals
from tests.test_bounds import _rows as bounds_rows

ISSUED_PER_SCHEME = 1000
"""IDs issued per scheme in its canonical form (and a quarter as many in each other form)."""
SCHEMES = [r.name for r in readings()]
"""The readings made: each scheme, the node's snowflake layout (``snowflake``) and each named layout."""
ISSUE_OPTIONS: dict[str, tuple[dict[str, str], ...]] = {
    "eight-byte": ({}, {"mode": "time_sequential"}),
    "typeid": ({}, {"type": "user_account"}),
}
"""Issue options tried besides the defaults: both eight-byte modes, a TypeID prefix (with an underscore)."""
MALFORMED = (
    "",
    "x",
    "0",
    "-1",
    "not an id",
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "00000000-0000-0000-0000-00000000000g",
    "{00000000-0000-7000-8000-000000000000",
    "0x",
    "0x10000000000000000",
    "9223372036854775808",
    "99999999999999999999999",
    "é" * 26,
    "0" * 200,
    "'; DROP TABLE t; --",
    "_01h455vb4pex5vsknk084sn02q",
    "user__01h455vb4pex5vsknk084sn02q",
    "User_01h455vb4pex5vsknk084sn02q",
    "-9223372036854775808",
    "-9223372036854775809",
    "-0",
    "18446744073709551616",
)
"""Texts that read as no ID of most schemes (whatever /v1/decode says is the expected answer)."""


def _decode_options(name: str) -> tuple[str, dict[str, str]]:
    """The scheme and /v1/decode query of a reading: ``snowflake:discord`` is snowflake read with layout=discord."""
    scheme, _, layout = name.partition(":")
    return scheme, ({"layout": layout} if layout else {})


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("sql")) as test_client:
        yield test_client


def _issued(client: TestClient, scheme: str) -> list[str]:
    """IDs the server issues, canonical then a share in each other text form."""
    texts: list[str] = []
    formats = get_scheme(scheme).formats
    for options in ISSUE_OPTIONS.get(scheme, ({},)):
        for index, fmt in enumerate(formats):
            count = ISSUED_PER_SCHEME if index == 0 else ISSUED_PER_SCHEME // 4
            response = client.get(f"/v1/ids/{scheme}", params={"count": count, "format": fmt, **options})
            assert response.status_code == 200, response.text
            texts.extend(response.json()["ids"])
    return texts


def _edges(name: str) -> list[str]:
    """Edge IDs of a reading's layout, in every text form: every field 0 (the epoch), every field at its largest
    (the end of the ID space, the largest counter), each field alone at its largest, and one past the end."""
    scheme_name, options = _decode_options(name)
    scheme = get_scheme(scheme_name).with_decode_options(**options) if options else get_scheme(scheme_name)
    reading = next(r for r in readings() if r.name == name)
    packed = reading.packed
    top = packed.max if reading.value_max is None else reading.value_max
    fixed = sum((f.fixed or 0) << f.shift for f in packed.fields)
    values = {fixed, top}
    everything = fixed
    for f in packed.variable:
        values.add(fixed | f.max << f.shift)
        everything |= f.max << f.shift
    values.add(everything)
    texts = [str(top + 1), hex(top + 1), f"{top + 1:x}"]
    for value in sorted(v for v in values if v <= top):
        for fmt in scheme.formats:
            try:
                texts.append(scheme.format(value, fmt))
            except ValueError:
                continue
    return texts


def _mutations(texts: list[str], rng: random.Random) -> list[str]:
    """Each text with one character changed, one dropped, one doubled, upper/lower-cased, and in the spellings of
    other forms (``{...}``, ``urn:uuid:``, ``0x``)."""
    out = []
    alphabet = "0123456789abcdefABCDEFxyzXYZ-_:{}IiLlOoUu~"
    for text in texts:
        if not text:
            continue
        at = rng.randrange(len(text))
        out.append(text[:at] + rng.choice(alphabet) + text[at + 1 :])
        out.append(text[:at] + text[at + 1 :])
        out.append(text[:at] + text[at] + text[at:])
        out.extend((text.lower(), text.upper(), f"{{{text}}}", f"urn:uuid:{text}", f"0x{text}"))
    return out


HTTP_CHECKED_PER_READING = 25
"""Texts per reading whose expectation is checked against the HTTP answer of /v1/decode too (the rest use the
route's own function, :func:`app.decoding.decode_one`: the same answer without 5 ms of HTTP per text)."""


def _expected(scheme: str, text: str, options: dict[str, str]) -> tuple[str | None, dict[str, Any] | None]:
    """/v1/decode's time (``YYYY-MM-DD HH:MM:SS.mmm``, truncated) and fields for ``text``; (None, None) when it
    does not read."""
    try:
        body = decode_one(scheme, text, None, options)
    except IdmintError:
        return None, None
    stamp = body["timestamp"]
    return (None if stamp is None else stamp.replace("T", " ")[:23]), body["fields"]


@functools.cache
def _cases(client: TestClient) -> list[tuple[str, str, str | None, dict[str, Any] | None]]:
    """``(reading, text, expected time or None, expected fields or None)`` for every text tested: issued, edges,
    mutations and malformed; the expectation is /v1/decode's answer."""
    rng = random.Random(42)
    cases = []
    issued_by_scheme: dict[str, list[str]] = {}
    for name in SCHEMES:
        scheme, options = _decode_options(name)
        if scheme not in issued_by_scheme:
            issued_by_scheme[scheme] = _issued(client, scheme)
        issued = issued_by_scheme[scheme]
        texts = list(dict.fromkeys(issued + _edges(name) + _mutations(rng.sample(issued, 40), rng) + list(MALFORMED)))
        for index, text in enumerate(texts):
            moment, fields = _expected(scheme, text, options)
            if index % (len(texts) // HTTP_CHECKED_PER_READING) == 0 and text.strip() == text and text:
                response = client.get(f"/v1/decode/{scheme}/{text}", params=options)
                if fields is None:
                    assert response.status_code in (404, 422), (name, text, response.text)
                else:
                    assert response.status_code == 200, (name, text, response.text)
                    assert response.json()["fields"] == fields
            cases.append((name, text, moment, fields))
    return cases


def _check(rows: list[tuple[str | None, Any]], cases: list[tuple[str, str, str | None, Any]]) -> dict[str, int]:
    """Compare the database's (time, fields) per case; the count of agreeing IDs that read, per reading."""
    agreed: dict[str, int] = {}
    wrong = []
    for (time_text, fields), (name, text, moment, expected) in zip(rows, cases, strict=True):
        if (time_text, fields) != (moment, expected):
            wrong.append((name, text, (time_text, fields), (moment, expected)))
        elif expected is not None:
            agreed[name] = agreed.get(name, 0) + 1
    assert not wrong, f"{len(wrong)} disagree, first: {wrong[:5]}"
    return agreed


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def test_postgresql_functions_agree_with_decode(client: TestClient, postgres_server: PostgresServer) -> None:
    import psycopg

    cases = _cases(client)
    with psycopg.connect(postgres_server.dsn, autocommit=True) as database:
        database.execute("DROP SCHEMA IF EXISTS idm CASCADE")
        database.execute(functions_ddl(POSTGRESQL, "idm").encode())
        database.execute("CREATE TEMPORARY TABLE ids (n integer, scheme text, id text)")
        with database.cursor() as cursor:
            cursor.executemany("INSERT INTO ids VALUES (%s, %s, %s)", [(n, c[0], c[1]) for n, c in enumerate(cases)])
            cursor.execute(
                "SELECT to_char(idm.idmint_time(scheme, id) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), "
                "idm.idmint_fields(scheme, id)::text FROM ids ORDER BY n"
            )
            rows = [(t, None if f is None else json.loads(f)) for t, f in cursor.fetchall()]
    agreed = _check(rows, cases)
    assert set(agreed) == set(SCHEMES)
    assert all(count >= ISSUED_PER_SCHEME for name, count in agreed.items() if ":" not in name), agreed


def test_mariadb_functions_agree_with_decode(
    client: TestClient, mariadb_server: MariadbServer, mariadb_db: str
) -> None:
    cases = [c for c in _cases(client) if c[1].isascii()]
    mariadb_server.run_script(functions_ddl(MYSQL), mariadb_db)
    values = ",\n".join(f"({n}, {_literal(c[0])}, {_literal(c[1])})" for n, c in enumerate(cases))
    script = (
        "CREATE TABLE ids (n INT PRIMARY KEY, scheme VARCHAR(64), id VARCHAR(255)) CHARACTER SET utf8mb4;\n"
        f"INSERT INTO ids VALUES {values};\n"
        "SELECT n, idmint_time(scheme, id), idmint_fields(scheme, id) FROM ids ORDER BY n;\n"
    )
    out = mariadb_server.execute(script, mariadb_db)
    rows = [(t, None if f is None else json.loads(f)) for _, t, f in out]
    agreed = _check(rows, cases)
    assert set(agreed) == set(SCHEMES)


def test_mariadb_reads_bigint_columns_and_refuses_non_ascii_text(
    mariadb_server: MariadbServer, mariadb_db: str
) -> None:
    mariadb_server.run_script(functions_ddl(MYSQL), mariadb_db)
    rows = mariadb_server.execute(
        "SELECT idmint_time('ulid', '01ARZ3NDEKTSV4RRFFQ69G5FAé'), idmint_fields('ksuid', CONCAT('ü', 'x')), "
        "idmint_snowflake_time_bigint(175928847299117063), idmint_snowflake_time_bigint(-1), "
        "idmint_eight_byte_fields_bigint(-3795148059624996843) = idmint_eight_byte_fields('cb54ecf2840a0015')",
        mariadb_db,
    )
    assert rows == [[None, None, "2012-03-03 13:01:20.453", None, "1"]]


def test_typed_forms_read_bigint_and_uuid_columns(postgres_server: PostgresServer) -> None:
    import psycopg

    ulid_like = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as database:
        database.execute("DROP SCHEMA IF EXISTS idm_typed CASCADE")
        database.execute(functions_ddl(POSTGRESQL, "idm_typed").encode())
        row = database.execute(
            "SELECT idm_typed.idmint_time(%s::uuid) = idm_typed.idmint_uuidv7_time(%s), "
            "idm_typed.idmint_fields(%s::uuid) = idm_typed.idmint_uuidv7_fields(%s), "
            "idm_typed.idmint_snowflake_time(175928847299117063::bigint), "
            "idm_typed.idmint_snowflake_time(-1::bigint), "
            "idm_typed.idmint_uuidv7_time('017f22e2-79b0-4cc3-98c4-dc0c0c07398f'), "
            "idm_typed.idmint_eight_byte_fields(-3795148059624996843::bigint) "
            "= idm_typed.idmint_eight_byte_fields('cb54ecf2840a0015')",
            (ulid_like, ulid_like, ulid_like, ulid_like),
        ).fetchone()
    assert row is not None
    assert row[:2] == (True, True)
    assert row[2] == datetime(2012, 3, 3, 13, 1, 20, 453000, tzinfo=UTC)
    assert row[3:5] == (None, None)  # a negative bigint is no snowflake; a UUIDv4 carries no time
    assert row[5] is True  # eight-byte's signed bigint is its two's complement


def test_the_command_prints_the_ddl_of_each_dialect() -> None:
    runner = CliRunner()
    for dialect in ("postgresql", "mysql"):
        done = runner.invoke(main, ["sql", "functions", "--dialect", dialect, "--schema", "ids"])
        assert done.exit_code == 0, done.output
        assert done.output == functions_ddl(dialect, "ids"), dialect
    refused = runner.invoke(main, ["sql", "functions", "--schema", "a;b"])
    assert refused.exit_code == 2 and "--schema" in refused.output


def test_every_named_snowflake_layout_has_a_reading() -> None:
    assert {f"snowflake:{name}" for name in NAMED_LAYOUTS} <= set(SCHEMES)


BOUNDS_ROWS_STEP = 5
MYSQL_COLUMN_TYPES = {BIGINT: "BIGINT", UUID: "BINARY(16)", BYTEA: "VARBINARY(32)", TEXT: "VARCHAR(128)"}
"""The column types of the bounds test in MariaDB (text in the server's default, case-insensitive collation: the
predicate compares bytes anyway)."""


def _mysql_value(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return _literal(value)


@pytest.mark.parametrize("kind", list(SQL_TABLES))
def test_the_mysql_bounds_select_exactly_the_ids_of_the_interval(
    client: TestClient, mariadb_server: MariadbServer, mariadb_db: str, kind: str
) -> None:
    """``/v1/bounds?dialect=mysql`` in MariaDB: each interval's predicate selects exactly the rows whose decoded
    time lies in it (the rows of tests/test_bounds.py, every fifth: 20,000 per column type, and its intervals)."""
    script = []
    expected = []
    for index, (name, options) in enumerate(SQL_TABLES[kind]):
        rows = bounds_rows(kind, index)[1][::BOUNDS_ROWS_STEP]
        table = f"{kind}_t{index}"
        script.append(f"CREATE TABLE {table} (id {MYSQL_COLUMN_TYPES[kind]} PRIMARY KEY, stamp BIGINT);")
        for start in range(0, len(rows), 10_000):
            chunk = rows[start : start + 10_000]
            script.append(f"INSERT INTO {table} VALUES {', '.join(f'({_mysql_value(v)}, {s})' for v, s in chunk)};")
        for t1, t2 in bounds_intervals(sorted(stamp for _, stamp in rows), random.Random(f"{kind}-{index}")):
            query = {"from": format_time(t1), "to": format_time(t2), "storage": kind, "dialect": "mysql"}
            response = client.get(f"/v1/bounds/{name}", params={**query, **options, "column": f"{table}.id"})
            assert response.status_code == 200, response.text
            script.append(
                f"SELECT COUNT(*), COALESCE(SUM(stamp >= {t1} AND stamp < {t2}), 0) FROM {table} "
                f"WHERE {response.json()['sql']};"
            )
            expected.append((name, query, sum(1 for _, stamp in rows if t1 <= stamp < t2)))
    out = mariadb_server.execute("\n".join(script), mariadb_db)
    assert len(out) == len(expected)
    for (selected, inside), (name, query, count) in zip(out, expected, strict=True):
        assert (selected, inside) == (str(count), str(count)), (name, query)


def test_postgresql_indexes_and_generated_columns_use_the_functions(postgres_server: PostgresServer) -> None:
    """IMMUTABLE as promised: an expression index on idmint_<s>_time(id) answers a time range, and a generated
    column stores the time (as docs/sql.md shows)."""
    import psycopg

    with psycopg.connect(postgres_server.dsn, autocommit=True) as database:
        database.execute("DROP SCHEMA IF EXISTS idm_index CASCADE")
        database.execute(functions_ddl(POSTGRESQL, "idm_index").encode())
        database.execute(
            "CREATE TABLE idm_index.orders (id text PRIMARY KEY, created_at timestamptz "
            "GENERATED ALWAYS AS (idm_index.idmint_ulid_time(id)) STORED)"
        )
        database.execute("CREATE INDEX orders_created ON idm_index.orders (idm_index.idmint_ulid_time(id))")
        database.execute(
            "INSERT INTO idm_index.orders (id) VALUES ('01ARZ3NDEKTSV4RRFFQ69G5FAV'), ('01ARZ3NDEKTSV4RRFFQ69G5FAW'), "
            "('not an id')"
        )
        database.execute("SET enable_seqscan = off")
        where = (
            "idm_index.idmint_ulid_time(id) >= timestamptz '2016-07-30 23:54:10+00' "
            "AND idm_index.idmint_ulid_time(id) < timestamptz '2016-07-30 23:54:11+00'"
        )
        plan = "\n".join(row[0] for row in database.execute(f"EXPLAIN SELECT id FROM idm_index.orders WHERE {where}"))
        assert "orders_created" in plan, plan
        rows = database.execute(f"SELECT id, created_at FROM idm_index.orders WHERE {where} ORDER BY id").fetchall()
        stored = database.execute("SELECT count(created_at) FROM idm_index.orders").fetchone()
    moment = datetime(2016, 7, 30, 23, 54, 10, 259000, tzinfo=UTC)
    assert rows == [("01ARZ3NDEKTSV4RRFFQ69G5FAV", moment), ("01ARZ3NDEKTSV4RRFFQ69G5FAW", moment)]
    assert stored == (2,)
