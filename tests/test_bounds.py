"""Time bounds: ``GET /v1/bounds/{scheme}``, ``idmint bounds``, :mod:`app.bounds`.

The property: IDs minted by each scheme's own generator on the fake clock, at random times in
``[T1 - 5 ms, T2 + 5 ms]`` and at a layout's first and last instants, satisfy ``lower <= id < upper`` in each
storage's order exactly when their timestamp lies in ``[T1, T2)``. Then the SQL itself runs: 100,000 IDs per
storage type loaded into SQLite and into a real PostgreSQL (column types bigint, uuid, bytea and text, text under
ICU's en-US collation), the returned predicate selects exactly the rows a Python filter selects.
"""

from __future__ import annotations

import functools
import json
import random
import sqlite3
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.bounds import TIME_END_NS, format_time, parse_time, time_bounds
from app.errors import InvalidOptionError, TimeRangeError
from app.schemes import get_scheme, schemes
from app.schemes.base import Scheme
from app.schemes.snowflake import NAMED_LAYOUTS
from app.schemes.time_order import BIGINT, BYTEA, TEXT, UUID, Storage, TimeOrder
from app.settings import Settings
from tests.helpers import FakeClock, running_app
from tests.support.postgres import PostgresServer
from tests.support.server import run_idmint

NS_IN_MS = 1_000_000
DAY_NS = 86_400 * 10**9
CUSTOM_LAYOUT = "custom:1288834974657:7:41/10/12"
"""A custom layout whose epoch is not a whole number of its 7 ms units."""
READINGS: list[tuple[str, dict[str, str]]] = [
    *[(name, {}) for name in schemes() if name not in ("eight-byte", "snowflake", "typeid")],
    ("eight-byte", {"mode": "time_sequential"}),
    ("typeid", {"type": "user"}),
    ("typeid", {}),
    *[("snowflake", {"layout": layout}) for layout in (*NAMED_LAYOUTS, CUSTOM_LAYOUT)],
]
"""Every scheme, and every snowflake layout, as the bounds read them."""
ISSUE_OPTIONS = {"eight-byte": {"mode": "time_sequential"}}


def _reading_id(reading: tuple[str, dict[str, str]]) -> str:
    name, options = reading
    return name + "".join(f"-{v}" for v in options.values())


def _scheme(name: str, options: dict[str, str]) -> tuple[Scheme, Settings]:
    """The scheme as a node in the reading's layout serves it, and that node's settings."""
    layout = options.get("layout")
    node_settings = Settings(snowflake_layout=layout) if layout else Settings()
    return get_scheme(name).configured(node_settings), node_settings


class Minter:
    """Mints one ID at a given instant with the scheme's own generator (a fresh one, so earlier IDs set no floor)."""

    def __init__(self, name: str, options: dict[str, str]) -> None:
        self.scheme, self.settings = _scheme(name, options)
        pool = self.scheme.identity_pool(self.settings)
        self.identities = [] if pool is None else list(range(pool.minimum, pool.minimum + pool.claims))
        self.issue = dict(ISSUE_OPTIONS.get(name, {}))
        if "type" in options:
            self.issue["prefix"] = options["type"]

    def at(self, ns: int) -> int | None:
        """The ID minted at ``ns``, or None where the scheme cannot mint (before its epoch, past its end)."""
        generator = self.scheme.new_generator(self.settings, self.identities, -1, FakeClock.from_ns(ns))
        try:
            generator.check_time()
            values = generator.generate(1, **self.issue).values()
        except (TimeRangeError, OverflowError):
            return None
        if not values:
            return None
        return values[0]


def _key(storage: Storage, rendered: str) -> Any:
    """A rendered value as its column compares it: numbers, bytes, or text byte by byte."""
    if storage.kind == BIGINT:
        return int(rendered)
    if storage.kind == UUID:
        return bytes.fromhex(rendered.replace("-", ""))
    if storage.kind == BYTEA:
        return bytes.fromhex(rendered.removeprefix("\\x"))
    return rendered.encode("ascii")


def _inside(storage: Storage, answer: dict[str, Any], value: int) -> bool:
    key = _key(storage, storage.render(value))
    upper = answer["upper"]
    return _key(storage, answer["lower"]) <= key and (upper is None or key < _key(storage, upper))


def _span(order: TimeOrder) -> tuple[int, int]:
    """The first and last instants (ns) the scheme's IDs hold, the last kept four days inside RFC 3339's years (the
    intervals drawn reach up to three days past it)."""
    return max(order.instant_ns(0), 0), min(order.instant_ns(order.field_max), TIME_END_NS - 4 * DAY_NS)


@pytest.mark.parametrize("reading", READINGS, ids=_reading_id)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_minted_ids_fall_inside_exactly_when_their_time_does(reading: tuple[str, dict[str, str]], data: Any) -> None:
    name, options = reading
    minter = Minter(name, options)
    order = minter.scheme.time_order(options)
    first, last = _span(order)
    edge = data.draw(st.sampled_from(["random", "epoch", "end"]))
    length = data.draw(st.integers(1, 3 * 86_400 * 10**9))
    if edge == "epoch":
        t1 = first + data.draw(st.integers(-10 * NS_IN_MS, 10 * NS_IN_MS))
    elif edge == "end":
        t1 = last - length + data.draw(st.integers(-10 * NS_IN_MS, 10 * NS_IN_MS))
    else:
        t1 = data.draw(st.integers(first, last))
    t2 = t1 + length
    try:
        answer = time_bounds(minter.scheme, {"from": format_time(t1), "to": format_time(t2), **options})
    except InvalidOptionError as exc:
        assert t2 <= first or t1 > last or "wraps" in str(exc), exc
        return
    instants = [
        t1 - 1,
        t1,
        t2 - 1,
        t2,
        first,
        last,
        *data.draw(st.lists(st.integers(t1 - 5 * NS_IN_MS, t2 + 5 * NS_IN_MS), min_size=8, max_size=8)),
    ]
    for kind in order.storages:
        storage = order.storages[kind]
        try:
            bounds = time_bounds(
                minter.scheme, {"from": format_time(t1), "to": format_time(t2), "storage": kind, **options}
            )
        except InvalidOptionError as exc:
            assert storage.signed and "wraps" in str(exc)
            continue
        for ns in instants:
            value = minter.at(ns)
            if value is None:
                continue
            stamp = minter.scheme.timestamp_ns(value)
            assert stamp is not None
            assert _inside(storage, bounds, value) == (t1 <= stamp < t2), (kind, format_time(ns), bounds)
    assert answer["storages"] == list(order.storages)


# -- the SQL runs: SQLite and PostgreSQL ----------------------------------------------------------------------------

ROWS_PER_STORAGE = 100_000
SQL_TABLES: dict[str, list[tuple[str, dict[str, str]]]] = {
    BIGINT: [("snowflake", {}), ("snowflake", {"layout": "sonyflake"}), ("eight-byte", {"mode": "time_sequential"})],
    UUID: [("uuidv7", {}), ("ulid", {}), ("hlc-ulid", {}), ("muid", {})],
    BYTEA: [("siq", {}), ("ksuid", {}), ("wiji", {}), ("typeid", {})],
    TEXT: [
        ("ksuid", {}),
        ("typeid", {"type": "order"}),
        ("ulid", {}),
        ("siq", {}),
        ("eight-byte", {"mode": "time_sequential"}),
    ],
}
"""Per storage type, the readings whose IDs fill its 100,000 rows (shared between them)."""
COLUMN_TYPES = {
    "sqlite": {BIGINT: "INTEGER", UUID: "BLOB", BYTEA: "BLOB", TEXT: "TEXT"},
    "postgresql": {BIGINT: "bigint", UUID: "uuid", BYTEA: "bytea", TEXT: "text"},
}


def _column_value(storage: Storage, rendered: str) -> Any:
    """A rendered value as the database driver takes it: int, bytes (uuid and bytea), or str."""
    key = _key(storage, rendered)
    return key.decode("ascii") if storage.kind == TEXT else key


def _mint_run(minter: Minter, count: int, start_ns: int, rng: random.Random) -> Iterator[tuple[int, int]]:
    """``count`` IDs from one generator whose clock steps forward 0 to 40 ms (sometimes across a second) between
    IDs: ``(value, timestamp_ns)``."""
    clock = FakeClock.from_ns(start_ns)
    generator = minter.scheme.new_generator(minter.settings, minter.identities, -1, clock)
    made = 0
    while made < count:
        for value in generator.generate(1, **minter.issue).values():
            stamp = minter.scheme.timestamp_ns(value)
            assert stamp is not None
            yield value, stamp
            made += 1
        clock.ns += rng.choice((0, rng.randrange(40 * NS_IN_MS), rng.randrange(2 * 10**9)))


@functools.cache
def _rows(kind: str, index: int) -> tuple[Storage, list[tuple[Any, int]]]:
    """The rows of table ``index`` of storage ``kind`` (the same in every database): ``(column value, ns)``."""
    name, options = SQL_TABLES[kind][index]
    minter = Minter(name, options)
    storage = minter.scheme.time_order(options).storages[kind]
    rng = random.Random(f"{kind}-{index}")
    start = parse_time("start", "2025-03-01T00:00:00Z")
    count = ROWS_PER_STORAGE // len(SQL_TABLES[kind])
    return storage, [(_column_value(storage, storage.render(v)), s) for v, s in _mint_run(minter, count, start, rng)]


def _intervals(stamps: list[int], rng: random.Random) -> Iterator[tuple[int, int]]:
    """Twelve intervals over the rows' times: four from one ID's timestamp to another's (the edges), the rest
    anywhere, reaching a second past both ends."""
    for trial in range(12):
        if trial < 4:
            t1, t2 = sorted(rng.sample(stamps, 2))
            t2 += trial % 2
        else:
            t1 = rng.randrange(stamps[0] - 10**9, stamps[-1])
            t2 = t1 + rng.randrange(1, stamps[-1] - t1 + 10**9)
        if t1 < t2:
            yield t1, t2


def _check_sql(client: TestClient, kind: str, dialect: str, execute: Callable[..., list[Any]], mark: str) -> None:
    """Load each table of ``kind`` with ``execute(sql, rows)`` and check that every interval's predicate selects
    exactly the IDs whose timestamp lies in it (``mark``: the driver's parameter placeholder)."""
    for index, (name, options) in enumerate(SQL_TABLES[kind]):
        storage, rows = _rows(kind, index)
        table = f"{kind}_t{index}"
        execute(f"CREATE TABLE {table} (id {COLUMN_TYPES[dialect][kind]} PRIMARY KEY, stamp bigint)")
        execute(f"INSERT INTO {table} VALUES ({mark}, {mark})", rows)
        for t1, t2 in _intervals(sorted(stamp for _, stamp in rows), random.Random(f"{kind}-{index}")):
            query = {"from": format_time(t1), "to": format_time(t2), "storage": kind, "dialect": dialect}
            response = client.get(f"/v1/bounds/{name}", params={**query, **options, "column": f"{table}.id"})
            assert response.status_code == 200, response.text
            selected = {row[0] for row in execute(f"SELECT id FROM {table} WHERE {response.json()['sql']}")}
            expected = {value for value, stamp in rows if t1 <= stamp < t2}
            assert selected == expected, (name, options, query, response.json())


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("bounds")) as test_client:
        yield test_client


@pytest.mark.parametrize("kind", list(SQL_TABLES))
def test_the_sqlite_sql_selects_exactly_the_ids_of_the_interval(client: TestClient, kind: str) -> None:
    database = sqlite3.connect(":memory:")

    def execute(sql: str, rows: list[Any] | None = None) -> list[Any]:
        if rows is not None:
            database.executemany(sql, rows)
            return []
        return database.execute(sql).fetchall()

    _check_sql(client, kind, "sqlite", execute, "?")
    database.close()


@pytest.mark.parametrize("kind", list(SQL_TABLES))
def test_the_postgresql_sql_selects_exactly_the_ids_of_the_interval(
    client: TestClient, postgres_server: PostgresServer, kind: str
) -> None:
    import psycopg

    with psycopg.connect(postgres_server.dsn, autocommit=True) as database:

        def execute(sql: str, rows: list[Any] | None = None) -> list[Any]:
            with database.cursor() as cursor:
                if rows is not None:
                    as_uuid = kind == UUID  # psycopg sends bytes as bytea; a uuid column takes uuid.UUID
                    cursor.executemany(sql, [(uuid.UUID(bytes=v) if as_uuid else v, s) for v, s in rows])
                    return []
                cursor.execute(sql)
                return [] if cursor.description is None else [(_from_postgres(row[0]),) for row in cursor.fetchall()]

        execute(f"DROP TABLE IF EXISTS {', '.join(f'{kind}_t{i}' for i in range(len(SQL_TABLES[kind])))}")
        _check_sql(client, kind, "postgresql", execute, "%s")


def _from_postgres(value: Any) -> Any:
    """A column value as the tests keep it: a uuid.UUID as its 16 bytes, a memoryview as bytes."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    return bytes(value) if isinstance(value, memoryview) else value


def test_postgresql_text_order_is_not_time_order_without_collate_c(postgres_server: PostgresServer) -> None:
    """What the ``COLLATE "C"`` in a text predicate is for: under the server's en-US collation, KSUID text does not
    sort as its bytes (nor by time); byte by byte it does."""
    import psycopg

    storage, rows = _rows(TEXT, 0)
    texts = [value for value, _ in rows[:5000]]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as database, database.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE collation_shown (id text)")
        cursor.executemany("INSERT INTO collation_shown VALUES (%s)", [(text,) for text in texts])
        cursor.execute("SELECT id FROM collation_shown ORDER BY id")
        default_order = [row[0] for row in cursor.fetchall()]
        cursor.execute('SELECT id FROM collation_shown ORDER BY id COLLATE "C"')
        byte_order = [row[0] for row in cursor.fetchall()]
    assert storage.form == "base62"
    assert byte_order == sorted(texts, key=lambda text: text.encode("ascii"))
    assert default_order != byte_order


# -- the API's answers and refusals ---------------------------------------------------------------------------------


def test_the_answer_names_its_interval_storage_and_reading(client: TestClient) -> None:
    response = client.get(
        "/v1/bounds/snowflake", params={"from": "2025-01-01T00:00:00+01:00", "to": "1735693200000", "layout": "discord"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["from"] == "2024-12-31T23:00:00Z" and body["to"] == "2025-01-01T01:00:00Z"
    assert body["storage"] == "bigint" and body["read_as"] == "layout discord" and body["dialect"] == "postgresql"
    discord_epoch_ms = 1_420_070_400_000
    assert int(body["lower"]) == (1_735_686_000_000 - discord_epoch_ms) << 22
    assert body["sql"] == f"id >= {body['lower']} AND id < {body['upper']}"
    coarse = client.get("/v1/bounds/ksuid", params={"from": "2025-01-01T00:00:00.5Z", "to": "2025-01-01T00:00:02Z"})
    assert coarse.status_code == 200 and coarse.json()["resolution_ns"] == 10**9
    assert "whole seconds" in coarse.json()["note"]


def test_text_bounds_compare_byte_by_byte_in_postgresql(client: TestClient) -> None:
    body = client.get("/v1/bounds/ksuid", params={"from": "1735689600000", "to": "1735693200000", "storage": "text"})
    assert body.status_code == 200
    assert body.json()["sql"].count('COLLATE "C"') == 2


def test_an_interval_past_the_end_has_no_upper_bound(client: TestClient) -> None:
    body = client.get(
        "/v1/bounds/snowflake",
        params={"from": "2046-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z", "layout": "instagram"},
    ).json()
    assert body["upper"] is None and body["sql"] == f"id >= {body['lower']}"


@pytest.mark.parametrize(
    ("path", "params", "rule"),
    [
        ("/v1/bounds/eight-byte", {"from": "1", "to": "2"}, "bit-reversed"),
        (
            "/v1/bounds/eight-byte",
            {"from": "2039-01-01T00:00:00Z", "to": "2040-01-01T00:00:00Z", "mode": "time_sequential"},
            "wraps",
        ),
        ("/v1/bounds/ulid", {"from": "\u0661\u0662", "to": "2"}, "RFC 3339"),
        ("/v1/bounds/ulid", {"from": "2025-02-30T00:00:00Z", "to": "2"}, "day is out of range"),
        ("/v1/bounds/ulid", {"from": "2025-01-01T00:00:00", "to": "2"}, "time zone"),
        ("/v1/bounds/ulid", {"from": "2", "to": "2"}, "from must be before to"),
        ("/v1/bounds/ulid", {"to": "2"}, "from required"),
        ("/v1/bounds/ulid", {"from": "1", "to": "2", "storage": "bigint"}, "storage must be one of uuid, bytea, text"),
        ("/v1/bounds/ulid", {"from": "1", "to": "2", "column": "id; DROP TABLE x"}, "column must be"),
        ("/v1/bounds/ulid", {"from": "1", "to": "2", "dialect": "oracle"}, "dialect must be one of"),
        ("/v1/bounds/ulid", {"from": "1", "to": "2", "layout": "twitter"}, "unknown parameter layout"),
        ("/v1/bounds/ksuid", {"from": "1", "to": "2"}, "no ID is that old"),
        ("/v1/bounds/snowflake", {"from": "1", "to": "2", "layout": "nope"}, "snowflake layout must be"),
        ("/v1/bounds/typeid", {"from": "1", "to": "2", "type": "Bad"}, "type:"),
    ],
)
def test_bad_parameters_are_a_422_naming_the_rule(
    client: TestClient, path: str, params: dict[str, str], rule: str
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 422, response.text
    assert rule in response.json()["detail"]


def test_a_parameter_given_twice_is_a_422_and_an_unknown_scheme_a_404(client: TestClient) -> None:
    assert client.get("/v1/bounds/ulid?from=1&from=2&to=3").status_code == 422
    assert client.get("/v1/bounds/nope?from=1&to=3").status_code == 404


# -- the command line -----------------------------------------------------------------------------------------------


def _idmint(*args: str) -> subprocess.CompletedProcess[str]:
    return run_idmint(args, timeout=60)


def test_the_command_line_answers_as_the_api(client: TestClient, tmp_path: Path) -> None:
    args = {"from": "2025-01-01T00:00:00Z", "to": "2025-01-02T00:00:00Z", "storage": "text", "type": "user"}
    done = _idmint("bounds", "typeid", *[f"--{k}={v}" for k, v in args.items()])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == client.get("/v1/bounds/typeid", params=args).json()
    sql_only = _idmint("bounds", "uuidv7", "--from=1", "--to=2", "--sql", "--column=created_id")
    assert sql_only.stdout.startswith("created_id >= '00000000-0001-")
    refused = _idmint("bounds", "eight-byte", "--from=1", "--to=2")
    assert refused.returncode == 1 and "bit-reversed" in refused.stderr
