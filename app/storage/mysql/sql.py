"""Every SQL statement of the MySQL/MariaDB backend, in one place: the tables (:func:`ddl`, printed by ``idmint
storage sql --dialect mysql``) and the statements the stores run (:class:`Statements`).

The tables are PostgreSQL's (:mod:`app.storage.postgres.sql`, ``backfill_marks`` from version 2), in the database
of ``IDMINT_MYSQL_URL``, plus ``sequence_locks`` (one row per sequence name, or per backfill (space, identity) as
``<space>/<identity>``: a ``/`` no sequence name holds; locked by ``SELECT ... FOR UPDATE`` for an update's
transaction).
Text keys are ``utf8mb4_bin`` (byte order, as PostgreSQL's ``COLLATE "C"``); times are ``DATETIME(6)`` in UTC,
every one written and compared from the database's ``UTC_TIMESTAMP(6)``, never a node's clock.

The same SQL runs on MariaDB 10.6+ and MySQL 8.0+: no ``RETURNING`` (MySQL has none), no ``WITH`` in writes, no
JSON functions, ``INSERT IGNORE`` and ``ON DUPLICATE KEY UPDATE ... VALUES()`` for upserts. A write whose rows a
caller needs is a :class:`Script`: the guarded write, then a ``SELECT`` of the row in the same transaction (the
connection counts *matched* rows, ``CLIENT_FOUND_ROWS``, so a guard that holds is told from one that does not
even when the write changes no value). Many rows in one go are an :class:`Each`: one statement per row, in one
transaction, or a :class:`Rows`: one multi-row ``INSERT``. The database name is interpolated once, after
:mod:`app.settings` checked it is an identifier, and quoted; every value is a bound parameter (``%(name)s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.storage.tables.db import TABLE_PRIVILEGES as COMMON_PRIVILEGES
from app.storage.tables.db import PortableStatements

SCHEMA_VERSION = 2
"""The version of the tables below; a database at a higher version was set up by a newer idmint (refused)."""

NOW = "UTC_TIMESTAMP(6)"
KEY = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

TABLES = f"""\
CREATE TABLE IF NOT EXISTS {{s}}.schema_version (
    version     INT NOT NULL PRIMARY KEY,
    applied_at  DATETIME(6) NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.meta (
    `key`  {KEY} NOT NULL PRIMARY KEY,
    value  TEXT NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.leases (
    lease_id    BIGINT NOT NULL PRIMARY KEY,
    owner       TEXT NOT NULL,
    ttl_s       INT NOT NULL,
    granted_at  DATETIME(6) NOT NULL,
    expires_at  DATETIME(6) NOT NULL,
    CHECK (lease_id > 0),
    CHECK (ttl_s > 0)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.claims (
    pool_key         {KEY} NOT NULL,
    identity         BIGINT NOT NULL,
    lease_id         BIGINT NULL,
    owner            TEXT NULL,
    generation       BIGINT NOT NULL DEFAULT 0,
    high_water_mark  BIGINT NOT NULL DEFAULT -1,
    created_at       DATETIME(6) NOT NULL,
    claimed_at       DATETIME(6) NULL,
    revoked_by       TEXT NULL,
    revoked_until    DATETIME(6) NULL,
    PRIMARY KEY (pool_key, identity),
    KEY claims_lease (lease_id),
    CHECK (identity >= 0)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.registrations (
    `key`     {KEY} NOT NULL PRIMARY KEY,
    value     TEXT NOT NULL,
    lease_id  BIGINT NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.records (
    name        {KEY} NOT NULL PRIMARY KEY,
    value       MEDIUMTEXT NOT NULL,
    updated_at  DATETIME(6) NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.ledger (
    record       {KEY} NOT NULL PRIMARY KEY,
    scheme       {KEY} NOT NULL,
    identity     BIGINT NOT NULL,
    lease        {KEY} NULL,
    ended_at_ns  BIGINT NULL,
    body         TEXT NOT NULL,
    updated_at   DATETIME(6) NOT NULL,
    KEY ledger_updated (updated_at),
    KEY ledger_identity (scheme, identity)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.sequence_locks (
    name  {KEY} NOT NULL PRIMARY KEY
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.sequence_documents (
    name        {KEY} NOT NULL,
    doc         {KEY} NOT NULL,
    value       MEDIUMTEXT NOT NULL,
    updated_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (name, doc)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.sequence_events (
    name    {KEY} NOT NULL,
    id      {KEY} NOT NULL,
    period  {KEY} NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (name, id),
    KEY sequence_events_period (name, period, id),
    KEY sequence_events_id (id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {{s}}.backfill_marks (
    space     {KEY} NOT NULL,
    identity  BIGINT NOT NULL,
    tick      BIGINT NOT NULL,
    high      INT NOT NULL,
    PRIMARY KEY (space, identity, tick)
) ENGINE=InnoDB;

INSERT IGNORE INTO {{s}}.schema_version (version, applied_at) VALUES ({{version}}, {NOW});
"""

TABLE_PRIVILEGES = {**COMMON_PRIVILEGES, "sequence_locks": "SELECT, INSERT, UPDATE"}
"""Table -> the privileges :class:`Statements` need on it: the table backends' own
(:data:`~app.storage.tables.db.TABLE_PRIVILEGES`) and ``sequence_locks``'."""
GRANTEE = "'idmint'@'%'"
"""The account named in the grants ``idmint storage sql --dialect mysql`` prints (the user of ``IDMINT_MYSQL_URL``:
put yours)."""


def quoted(database: str) -> str:
    """``database`` as a quoted identifier (already checked: letters, digits, ``_`` and ``$``)."""
    return "`" + database.replace("`", "``") + "`"


def grants(database: str, account: str = GRANTEE) -> list[str]:
    """The least privilege ``account`` needs to run a replica on tables it did not create: ``GRANT`` statements."""
    d = quoted(database)
    return [f"GRANT {privileges} ON {d}.{table} TO {account};" for table, privileges in TABLE_PRIVILEGES.items()]


GRANTS_NOTE = """\
-- Grants. Tables made by this script (as another account): idmint's account (the user of IDMINT_MYSQL_URL, here
-- {grantee}: put yours) needs only the grants below; a node whose tables exist at this version writes no DDL.
{grants}
-- Tables made by idmint's first start instead: its account needs CREATE (and the privileges above) on the
-- database; CREATE may be revoked once they exist.
"""


def ddl(database: str) -> str:
    """The DDL creating every table in ``database`` (idempotent: ``IF NOT EXISTS``), its schema-version row, and,
    as SQL comments, the grants idmint's account needs (:func:`grants`)."""
    d = quoted(database)
    note = GRANTS_NOTE.format(grantee=GRANTEE, grants="\n".join(f"--   {g}" for g in grants(database)))
    return f"CREATE DATABASE IF NOT EXISTS {d};\n\n" + TABLES.format(s=d, version=SCHEMA_VERSION) + "\n" + note


def ddl_statements(database: str) -> list[str]:
    """:func:`ddl`'s tables as separate statements (the driver runs one at a time), without the database."""
    text = TABLES.format(s=quoted(database), version=SCHEMA_VERSION)
    return [part.strip() for part in text.split(";") if part.strip()]


@dataclass(frozen=True)
class Script:
    """Statements run in order in one transaction: each but the last is a guarded write (no matched row: the
    script stops and returns ``[]``); the last one's rows are the result."""

    steps: tuple[str, ...]


@dataclass(frozen=True)
class Each:
    """One statement run once per element of the list parameters ``over`` (zipped), in one transaction."""

    sql: str
    over: tuple[str, ...]


@dataclass(frozen=True)
class Rows:
    """One multi-row ``INSERT``: ``sql`` with ``{rows}`` where the ``VALUES`` rows go, each row ``row`` with the
    list parameters ``over`` (zipped) in place of their names; no element: nothing run."""

    sql: str
    row: str
    over: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    """The row ``select`` (``... FOR UPDATE``) locked for the transaction; when absent, ``create`` makes it
    (an upsert: it holds the row's exclusive lock from then on)."""

    select: str
    create: str


Statement = str | Script | Each | Rows | Lock


class Statements(PortableStatements):
    """The statements of one database, formatted once. Every time compared is the database's."""

    def __init__(self, database: str) -> None:
        s = quoted(database)
        super().__init__(s)
        self.schema = database
        self.version = f"SELECT max(version) FROM {s}.schema_version"
        self.ddl = ddl(database)
        self.ddl_statements = ddl_statements(database)
        self.ddl_lock = "SELECT GET_LOCK(%(name)s, %(wait)s)"
        self.ddl_unlock = "SELECT RELEASE_LOCK(%(name)s)"

        # -- leases --------------------------------------------------------------------------------------------
        self.grant = f"""
            INSERT IGNORE INTO {s}.leases (lease_id, owner, ttl_s, granted_at, expires_at)
            VALUES (%(lease)s, %(owner)s, %(ttl)s, {NOW}, {NOW} + INTERVAL %(ttl)s SECOND)"""
        self.forget_leases = f"DELETE FROM {s}.leases WHERE expires_at < {NOW} - INTERVAL %(keep)s SECOND"
        # The lease renewed (no row: expired or deleted, final), then every claim row still on it.
        self.renew = Script(
            (
                f"""UPDATE {s}.leases SET expires_at = {NOW} + INTERVAL ttl_s SECOND
                    WHERE lease_id = %(lease)s AND expires_at > {NOW}""",
                f"""SELECT c.pool_key, c.identity, c.generation, c.revoked_until IS NOT NULL
                    FROM {s}.leases l LEFT JOIN {s}.claims c ON c.lease_id = l.lease_id
                    WHERE l.lease_id = %(lease)s""",
            )
        )
        self.lease_left = f"""
            SELECT TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000000.0 FROM {s}.leases
            WHERE lease_id = %(lease)s"""

        # -- claims --------------------------------------------------------------------------------------------
        self.pool_rows = f"""
            SELECT c.identity, c.generation, c.lease_id, c.owner,
                   c.lease_id IS NOT NULL AND l.lease_id IS NOT NULL AND l.expires_at > {NOW}
                       AND (c.revoked_until IS NULL OR c.revoked_until > {NOW}) AS held,
                   c.revoked_until IS NOT NULL AND c.revoked_until > {NOW} AS revoking,
                   GREATEST(0, TIMESTAMPDIFF(MICROSECOND, {NOW}, c.created_at + INTERVAL %(ttl)s SECOND))
                       / 1000000.0 AS wait_s
            FROM {s}.claims c LEFT JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity BETWEEN %(low)s AND %(high)s"""
        self.create_rows = Each(
            f"INSERT IGNORE INTO {s}.claims (pool_key, identity, created_at) VALUES (%(pool)s, %(identities)s, {NOW})",
            ("identities",),
        )
        # The claim: the row as read (generation), free (no lease, or its holder's lease not alive by the
        # database's clock: an expired lease is never renewed again, so the read is final; or a revoke that ran
        # out), no revoke pending, older than one TTL (the lost-row rule), and our own lease alive (the join).
        self.claim = Script(
            (
                f"""UPDATE {s}.claims c
                    JOIN {s}.leases mine ON mine.lease_id = %(lease)s AND mine.expires_at > {NOW}
                    SET c.lease_id = mine.lease_id, c.owner = %(owner)s, c.generation = c.generation + 1,
                        c.claimed_at = {NOW}, c.revoked_by = NULL, c.revoked_until = NULL
                    WHERE c.pool_key = %(pool)s AND c.identity = %(identity)s AND c.generation = %(generation)s
                      AND c.created_at <= {NOW} - INTERVAL %(ttl)s SECOND
                      AND (c.revoked_until IS NULL OR c.revoked_until <= {NOW})
                      AND (c.lease_id IS NULL
                           OR c.revoked_until IS NOT NULL
                           OR NOT EXISTS (SELECT 1 FROM {s}.leases h
                                          WHERE h.lease_id = c.lease_id AND h.expires_at > {NOW}))""",
                f"""SELECT generation, high_water_mark FROM {s}.claims
                    WHERE pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s
                      AND generation = %(generation)s + 1""",
            )
        )
        held_by_us = (
            "pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s "
            "AND generation = %(generation)s AND revoked_until IS NULL"
        )
        self.raise_mark = Script(
            (
                f"UPDATE {s}.claims SET high_water_mark = GREATEST(high_water_mark, %(mark)s) WHERE {held_by_us}",
                f"SELECT high_water_mark FROM {s}.claims WHERE {held_by_us}",
            )
        )
        self.release = f"""
            UPDATE {s}.claims SET high_water_mark = GREATEST(%(mark)s, %(floor)s), lease_id = NULL
            WHERE {held_by_us}"""
        self.free = f"UPDATE {s}.claims SET lease_id = NULL WHERE {held_by_us}"
        self.count_held = f"""
            SELECT count(*) FROM {s}.claims c JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity BETWEEN %(low)s AND %(high)s AND l.expires_at > {NOW}
              AND (c.revoked_until IS NULL OR c.revoked_until > {NOW})"""

        # -- revoke ----------------------------------------------------------------------------------------------
        self.revoke_read = f"""
            SELECT c.lease_id, c.generation, c.owner,
                   c.lease_id IS NOT NULL AND l.lease_id IS NOT NULL AND l.expires_at > {NOW},
                   GREATEST(0, COALESCE(TIMESTAMPDIFF(MICROSECOND, {NOW}, c.revoked_until), 0)) / 1000000.0
            FROM {s}.claims c LEFT JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity = %(identity)s"""
        self.revoke_mark = f"""
            UPDATE {s}.claims SET revoked_by = %(by)s, revoked_until = {NOW} + INTERVAL %(ttl)s SECOND
            WHERE {held_by_us}"""
        self.ended_records = f"""
            SELECT count(*) FROM {s}.ledger WHERE record IN %(records)s AND ended_at_ns IS NOT NULL"""

        # -- the fleet -------------------------------------------------------------------------------------------
        self.meta_put = f"INSERT IGNORE INTO {s}.meta (`key`, value) VALUES (%(key)s, %(value)s)"
        self.meta_get = f"SELECT value FROM {s}.meta WHERE `key` = %(key)s"
        self.record_create = f"""
            INSERT IGNORE INTO {s}.records (name, value, updated_at) VALUES (%(name)s, %(value)s, {NOW})"""
        self.record_swap = f"""
            UPDATE {s}.records SET value = %(value)s, updated_at = {NOW}
            WHERE name = %(name)s AND value = %(expected)s"""
        self.register = f"""
            INSERT INTO {s}.registrations (`key`, value, lease_id) VALUES (%(key)s, %(value)s, %(lease)s)
            ON DUPLICATE KEY UPDATE value = VALUES(value), lease_id = VALUES(lease_id)"""
        self.lease_alive = f"SELECT expires_at > {NOW} FROM {s}.leases WHERE lease_id = %(lease)s"

        # -- the claim ledger ------------------------------------------------------------------------------------
        self.ledger_write = f"""
            INSERT INTO {s}.ledger (record, scheme, identity, lease, ended_at_ns, body, updated_at)
            VALUES (%(record)s, %(scheme)s, %(identity)s, %(lease)s, %(ended_at_ns)s, %(body)s, {NOW})
            ON DUPLICATE KEY UPDATE lease = VALUES(lease), ended_at_ns = VALUES(ended_at_ns), body = VALUES(body),
                updated_at = VALUES(updated_at)"""
        self.ledger_compact = f"DELETE FROM {s}.ledger WHERE record IN %(records)s AND ended_at_ns < %(before)s"

        # -- sequences -------------------------------------------------------------------------------------------
        # One update (app.storage.tables.sequences): the name's row locked for the transaction, then its documents
        # read after the lock is held (READ COMMITTED: each statement sees what committed before it).
        self.seq_lock = Lock(
            f"SELECT name FROM {s}.sequence_locks WHERE name = %(name)s FOR UPDATE",
            f"INSERT INTO {s}.sequence_locks (name) VALUES (%(name)s) ON DUPLICATE KEY UPDATE name = VALUES(name)",
        )
        self.seq_lock_space = f"{database}/sequences"
        self.seq_read = f"SELECT doc, value FROM {s}.sequence_documents WHERE name = %(name)s AND doc IN %(docs)s"
        self.seq_put = Each(
            f"""INSERT INTO {s}.sequence_documents (name, doc, value, updated_at)
                VALUES (%(name)s, %(docs)s, %(values)s, {NOW})
                ON DUPLICATE KEY UPDATE value = VALUES(value), updated_at = VALUES(updated_at)""",
            ("docs", "values"),
        )
        self.seq_delete = f"DELETE FROM {s}.sequence_documents WHERE name = %(name)s AND doc IN %(docs)s"
        self.seq_append = Each(
            f"""INSERT INTO {s}.sequence_events (name, id, period, body)
                VALUES (%(name)s, %(ids)s, %(periods)s, %(bodies)s)""",
            ("ids", "periods", "bodies"),
        )
        self.seq_list = f"""
            SELECT name, value FROM {s}.sequence_documents WHERE doc = 'record' ORDER BY name LIMIT %(limit)s"""
        self.seq_audit = f"""
            SELECT id, body FROM {s}.sequence_events
            WHERE name = %(name)s AND id > %(after)s AND (%(period)s IS NULL OR period = %(period)s)
            ORDER BY id LIMIT %(limit)s"""
        self.seq_prune_events = f"DELETE FROM {s}.sequence_events WHERE id < %(cut)s ORDER BY id LIMIT %(batch)s"
        self.seq_prune_periods = f"""
            DELETE FROM {s}.sequence_documents WHERE doc LIKE 'period/%%' AND doc < %(cut)s LIMIT %(batch)s"""

        # -- the storage's history -------------------------------------------------------------------------------
        self.facts = """
            SELECT @@version, TABLE_NAME, CREATE_TIME FROM information_schema.TABLES
            WHERE TABLE_SCHEMA = %(schema)s ORDER BY TABLE_NAME"""

        # -- backfill marks (app.storage.tables.backfill): the (space, identity)'s lock, then its ticks' marks ------
        self.backfill_lock = self.seq_lock
        self.backfill_lock_space = f"{database}/backfill"
        self.backfill_read = f"""
            SELECT tick, high FROM {s}.backfill_marks
            WHERE space = %(space)s AND identity = %(identity)s AND tick IN %(ticks)s"""
        self.backfill_put = Rows(
            f"""INSERT INTO {s}.backfill_marks (space, identity, tick, high) VALUES {{rows}}
                ON DUPLICATE KEY UPDATE high = GREATEST(high, VALUES(high))""",
            "(%(space)s, %(identity)s, %(ticks)s, %(highs)s)",
            ("ticks", "highs"),
        )
