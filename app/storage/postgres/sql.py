"""Every SQL statement of the PostgreSQL backend, in one place: the tables (:func:`ddl`, printed by ``idmint storage
sql``) and the statements the stores run (:class:`Statements`).

Tables, all in the schema ``IDMINT_POSTGRES_SCHEMA`` (default ``idmint``)::

    schema_version  one row per applied version of these tables (SCHEMA_VERSION)
    meta            key -> text: the fleet ID, when the claim ledger began
    leases          one row per process: lease_id (a random 63-bit number the process draws), owner, ttl_s,
                    expires_at (the database's clock_timestamp() + ttl at the last renewal)
    claims          one row per (pool_key, identity), created once and never deleted: lease_id (NULL: free),
                    owner, generation (+1 at every claim), high_water_mark (native units, -1: none), created_at,
                    claimed_at, revoked_by / revoked_until (a revoke pending until then)
    registrations   key -> value on a lease (Wiji's random part): no exclusivity
    records         fleet records (read_record / swap_record): name -> compact JSON, replaced by compare-and-set
    ledger          claim ledger records: record ID -> JSON, updated_at from the database's clock
    sequence_documents  (name, doc) -> one JSON document of a sequence (record, tombstone, period/<key>: the
                    documents of :mod:`app.storage.sequences`), as compact JSON text
    sequence_events (name, id) -> one audit event of a gapless sequence (JSON text), and its period ("never" for
                    a sequence that never resets)
    backfill_marks  (space, identity, tick) -> the highest sequence a back-dated ID used (app.storage.backfill);
                    added at version 2 (a version-1 schema gains it at the next start: the DDL is idempotent)

Every time that decides who owns an identity is the database's ``clock_timestamp()``; no node's clock is written
or compared here. The schema name is interpolated into the statements once, after :mod:`app.settings` checked it
is a lowercase SQL identifier (``[a-z_][a-z0-9_]{0,62}``), and quoted; every value is a bound parameter.
"""

from __future__ import annotations

from app.storage.tables.db import TABLE_PRIVILEGES as COMMON_PRIVILEGES
from app.storage.tables.db import PortableStatements

SCHEMA_VERSION = 2
"""The version of the tables below; a database at a higher version was set up by a newer idmint (refused)."""

DDL = """\
CREATE SCHEMA IF NOT EXISTS {s};

CREATE TABLE IF NOT EXISTS {s}.schema_version (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS {s}.meta (
    key    text PRIMARY KEY,
    value  text NOT NULL
);

CREATE TABLE IF NOT EXISTS {s}.leases (
    lease_id    bigint PRIMARY KEY CHECK (lease_id > 0),
    owner       jsonb NOT NULL,
    ttl_s       integer NOT NULL CHECK (ttl_s > 0),
    granted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS {s}.claims (
    pool_key         text NOT NULL,
    identity         bigint NOT NULL CHECK (identity >= 0),
    lease_id         bigint,
    owner            jsonb,
    generation       bigint NOT NULL DEFAULT 0,
    high_water_mark  bigint NOT NULL DEFAULT -1,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_at       timestamptz,
    revoked_by       jsonb,
    revoked_until    timestamptz,
    PRIMARY KEY (pool_key, identity)
);
CREATE INDEX IF NOT EXISTS claims_lease ON {s}.claims (lease_id) WHERE lease_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS {s}.registrations (
    key       text PRIMARY KEY,
    value     jsonb NOT NULL,
    lease_id  bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS {s}.records (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS {s}.ledger (
    record       text PRIMARY KEY,
    scheme       text NOT NULL,
    identity     bigint NOT NULL,
    lease        text,
    ended_at_ns  bigint,
    body         text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ledger_updated ON {s}.ledger (updated_at);
CREATE INDEX IF NOT EXISTS ledger_identity ON {s}.ledger (scheme, identity);

CREATE TABLE IF NOT EXISTS {s}.sequence_documents (
    name        text NOT NULL,
    doc         text NOT NULL,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (name, doc)
);

CREATE TABLE IF NOT EXISTS {s}.sequence_events (
    name    text NOT NULL,
    id      text NOT NULL,
    period  text NOT NULL,
    body    text NOT NULL,
    PRIMARY KEY (name, id)
);
CREATE INDEX IF NOT EXISTS sequence_events_period ON {s}.sequence_events (name, period, id);
CREATE INDEX IF NOT EXISTS sequence_events_id ON {s}.sequence_events (id);

CREATE TABLE IF NOT EXISTS {s}.backfill_marks (
    space     text NOT NULL,
    identity  bigint NOT NULL,
    tick      bigint NOT NULL,
    high      integer NOT NULL,
    PRIMARY KEY (space, identity, tick)
);

INSERT INTO {s}.schema_version (version) VALUES ({version}) ON CONFLICT (version) DO NOTHING;
"""


TABLE_PRIVILEGES = COMMON_PRIVILEGES
"""Table -> the privileges :class:`Statements` need on it (the table backends' own,
:data:`~app.storage.tables.db.TABLE_PRIVILEGES`). No sequence object exists (no ``serial`` or identity column):
nothing to grant on one."""
GRANTEE = "idmint_app"
"""The role named in the grants ``idmint storage sql`` prints (the user of ``IDMINT_POSTGRES_URL``: put yours)."""

GRANTS_NOTE = """\
-- Grants. Tables made by this script (as another role): idmint's role (the user of IDMINT_POSTGRES_URL, here
-- {grantee}: put yours) needs only the grants below; a node whose tables exist at this version writes no DDL.
-- CONNECT is PUBLIC's by default; the tables have no sequence objects, so there is nothing to grant on one.
{grants}
-- Tables made by idmint's first start instead: its role needs CONNECT and CREATE on the database (it creates the
-- schema, and owns it and the tables); CREATE may be revoked once they exist.
"""


def grants(schema: str, role: str = GRANTEE, database: str = "<database>") -> list[str]:
    """The least privilege ``role`` needs to run a replica on tables of ``schema`` it does not own: ``GRANT``
    statements (CONNECT on ``database``, USAGE on the schema, :data:`TABLE_PRIVILEGES`)."""
    s = quoted(schema)
    return [
        f"GRANT CONNECT ON DATABASE {database} TO {role};",
        f"GRANT USAGE ON SCHEMA {s} TO {role};",
        *(f"GRANT {privileges} ON {s}.{table} TO {role};" for table, privileges in TABLE_PRIVILEGES.items()),
    ]


def quoted(schema: str) -> str:
    """``schema`` as a quoted SQL identifier (already checked by the settings: lowercase letters, digits, _)."""
    return '"' + schema.replace('"', '""') + '"'


def ddl(schema: str) -> str:
    """The DDL creating every table in ``schema`` (idempotent: ``IF NOT EXISTS``), its schema-version row, and, as
    SQL comments, the grants idmint's role needs (:func:`grants`)."""
    note = GRANTS_NOTE.format(grantee=GRANTEE, grants="\n".join(f"--   {g}" for g in grants(schema)))
    return DDL.format(s=quoted(schema), version=SCHEMA_VERSION) + "\n" + note


class Statements(PortableStatements):
    """The statements of one schema, formatted once. Parameters are named (``%(lease)s``); every time compared is
    the database's."""

    def __init__(self, schema: str) -> None:
        s = quoted(schema)
        super().__init__(s)
        self.schema = schema
        self.version = f"SELECT max(version) FROM {s}.schema_version"
        self.ddl = ddl(schema)
        self.ddl_lock = "SELECT pg_advisory_xact_lock(hashtext(%(schema)s))"

        # -- leases --------------------------------------------------------------------------------------------
        self.grant = f"""
            INSERT INTO {s}.leases (lease_id, owner, ttl_s, expires_at)
            VALUES (%(lease)s, %(owner)s, %(ttl)s, clock_timestamp() + make_interval(secs => %(ttl)s))
            ON CONFLICT (lease_id) DO NOTHING
            RETURNING lease_id"""
        self.forget_leases = f"""
            DELETE FROM {s}.leases WHERE expires_at < clock_timestamp() - make_interval(secs => %(keep)s)"""
        # One snapshot: the lease renewed (no row: expired or deleted, final) and every claim row still on it.
        self.renew = f"""
            WITH lease AS (
                UPDATE {s}.leases SET expires_at = clock_timestamp() + make_interval(secs => ttl_s)
                WHERE lease_id = %(lease)s AND expires_at > clock_timestamp()
                RETURNING lease_id
            )
            SELECT c.pool_key, c.identity, c.generation, c.revoked_until IS NOT NULL
            FROM lease LEFT JOIN {s}.claims c ON c.lease_id = lease.lease_id"""
        self.lease_left = f"""
            SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM {s}.leases
            WHERE lease_id = %(lease)s"""

        # -- claims --------------------------------------------------------------------------------------------
        # Per row of the pool: is it claimable now, and if not, why (seconds to wait under the lost-row rule).
        self.pool_rows = f"""
            SELECT c.identity, c.generation, c.lease_id, c.owner,
                   c.lease_id IS NOT NULL AND l.lease_id IS NOT NULL AND l.expires_at > clock_timestamp()
                       AND (c.revoked_until IS NULL OR c.revoked_until > clock_timestamp()) AS held,
                   c.revoked_until IS NOT NULL AND c.revoked_until > clock_timestamp() AS revoking,
                   greatest(0, extract(epoch FROM c.created_at + make_interval(secs => %(ttl)s)
                                                 - clock_timestamp()))::float8 AS wait_s
            FROM {s}.claims c LEFT JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity BETWEEN %(low)s AND %(high)s"""
        self.create_rows = f"""
            INSERT INTO {s}.claims (pool_key, identity)
            SELECT %(pool)s, unnest(%(identities)s::bigint[])
            ON CONFLICT (pool_key, identity) DO NOTHING"""
        # The claim: the row as read (generation), free (no lease, or its holder's lease found expired, or a
        # revoke that ran out), no revoke pending, older than one TTL (the lost-row rule), and our own lease alive.
        # The expired lease row is kept (forget_leases drops it a day later): the claim ledger reads from it when the
        # holder's claims ended, which must not fall after this claim. See the safety section of docs/safety.md.
        self.claim = f"""
            WITH expired AS (
                SELECT lease_id FROM {s}.leases WHERE lease_id = %(holder)s AND expires_at <= clock_timestamp()
            ), mine AS (
                SELECT lease_id FROM {s}.leases WHERE lease_id = %(lease)s AND expires_at > clock_timestamp()
            )
            UPDATE {s}.claims c
            SET lease_id = mine.lease_id, owner = %(owner)s, generation = c.generation + 1,
                claimed_at = clock_timestamp(), revoked_by = NULL, revoked_until = NULL
            FROM mine
            WHERE c.pool_key = %(pool)s AND c.identity = %(identity)s AND c.generation = %(generation)s
              AND c.created_at <= clock_timestamp() - make_interval(secs => %(ttl)s)
              AND (c.revoked_until IS NULL OR c.revoked_until <= clock_timestamp())
              AND (c.lease_id IS NULL
                   OR c.revoked_until IS NOT NULL
                   OR c.lease_id IN (SELECT lease_id FROM expired)
                   OR NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.lease_id = c.lease_id))
            RETURNING c.generation, c.high_water_mark"""
        # Marks: only the holder (lease and generation), never during a revoke, only ever up.
        self.raise_mark = f"""
            UPDATE {s}.claims SET high_water_mark = greatest(high_water_mark, %(mark)s)
            WHERE pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s
              AND generation = %(generation)s AND revoked_until IS NULL
            RETURNING high_water_mark"""
        # Release: the exact final mark (never below the inherited one: the caller's floor), and the row freed.
        self.release = f"""
            UPDATE {s}.claims SET high_water_mark = greatest(%(mark)s, %(floor)s), lease_id = NULL
            WHERE pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s
              AND generation = %(generation)s AND revoked_until IS NULL
            RETURNING high_water_mark"""
        self.free = f"""
            UPDATE {s}.claims SET lease_id = NULL
            WHERE pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s
              AND generation = %(generation)s AND revoked_until IS NULL"""
        self.count_held = f"""
            SELECT count(*) FROM {s}.claims c JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity BETWEEN %(low)s AND %(high)s
              AND l.expires_at > clock_timestamp()
              AND (c.revoked_until IS NULL OR c.revoked_until > clock_timestamp())"""

        # -- revoke ----------------------------------------------------------------------------------------------
        self.revoke_read = f"""
            SELECT c.lease_id, c.generation, c.owner,
                   c.lease_id IS NOT NULL AND l.lease_id IS NOT NULL AND l.expires_at > clock_timestamp(),
                   greatest(0, extract(epoch FROM c.revoked_until - clock_timestamp()))::float8
            FROM {s}.claims c LEFT JOIN {s}.leases l ON l.lease_id = c.lease_id
            WHERE c.pool_key = %(pool)s AND c.identity = %(identity)s"""
        self.revoke_mark = f"""
            UPDATE {s}.claims
            SET revoked_by = %(by)s, revoked_until = clock_timestamp() + make_interval(secs => %(ttl)s)
            WHERE pool_key = %(pool)s AND identity = %(identity)s AND lease_id = %(lease)s
              AND generation = %(generation)s AND revoked_until IS NULL
            RETURNING 1"""
        self.ended_records = f"""
            SELECT count(*) FROM {s}.ledger WHERE record = ANY(%(records)s) AND ended_at_ns IS NOT NULL"""

        # -- the fleet -------------------------------------------------------------------------------------------
        self.meta_put = f"INSERT INTO {s}.meta (key, value) VALUES (%(key)s, %(value)s) ON CONFLICT (key) DO NOTHING"
        self.meta_get = f"SELECT value FROM {s}.meta WHERE key = %(key)s"
        self.record_create = f"""
            INSERT INTO {s}.records (name, value) VALUES (%(name)s, %(value)s)
            ON CONFLICT (name) DO NOTHING RETURNING 1"""
        self.record_swap = f"""
            UPDATE {s}.records SET value = %(value)s, updated_at = clock_timestamp()
            WHERE name = %(name)s AND value = %(expected)s RETURNING 1"""
        self.register = f"""
            INSERT INTO {s}.registrations (key, value, lease_id) VALUES (%(key)s, %(value)s, %(lease)s)
            ON CONFLICT (key) DO UPDATE SET value = excluded.value, lease_id = excluded.lease_id"""
        self.lease_alive = f"""
            SELECT expires_at > clock_timestamp() FROM {s}.leases WHERE lease_id = %(lease)s"""

        # -- the claim ledger ------------------------------------------------------------------------------------
        self.ledger_write = f"""
            INSERT INTO {s}.ledger (record, scheme, identity, lease, ended_at_ns, body)
            VALUES (%(record)s, %(scheme)s, %(identity)s, %(lease)s, %(ended_at_ns)s, %(body)s)
            ON CONFLICT (record) DO UPDATE SET lease = excluded.lease, ended_at_ns = excluded.ended_at_ns,
                body = excluded.body, updated_at = clock_timestamp()"""
        self.ledger_compact = f"""
            WITH gone AS (
                DELETE FROM {s}.ledger WHERE record = ANY(%(records)s) AND ended_at_ns < %(before)s RETURNING 1
            ) SELECT count(*) FROM gone"""

        # -- sequences -------------------------------------------------------------------------------------------
        # One update (app.storage.postgres.sequences): the name's lock for the transaction, then a snapshot of its
        # documents read after the lock is held (READ COMMITTED: each statement sees what committed before it).
        self.seq_lock = "SELECT pg_advisory_xact_lock(hashtext(%(space)s), hashtext(%(name)s))"
        self.seq_lock_space = f"{schema}/sequences"
        self.seq_read = f"SELECT doc, value FROM {s}.sequence_documents WHERE name = %(name)s AND doc = ANY(%(docs)s)"
        self.seq_put = f"""
            INSERT INTO {s}.sequence_documents (name, doc, value)
            SELECT %(name)s, d, v FROM unnest(%(docs)s::text[], %(values)s::text[]) AS w(d, v)
            ON CONFLICT (name, doc) DO UPDATE SET value = EXCLUDED.value, updated_at = clock_timestamp()"""
        self.seq_delete = f"DELETE FROM {s}.sequence_documents WHERE name = %(name)s AND doc = ANY(%(docs)s)"
        self.seq_append = f"""
            INSERT INTO {s}.sequence_events (name, id, period, body)
            SELECT %(name)s, i, p, b
            FROM unnest(%(ids)s::text[], %(periods)s::text[], %(bodies)s::text[]) AS e(i, p, b)"""
        self.seq_list = f"""
            SELECT name, value FROM {s}.sequence_documents WHERE doc = 'record'
            ORDER BY name COLLATE "C" LIMIT %(limit)s"""
        self.seq_audit = f"""
            SELECT id, body FROM {s}.sequence_events
            WHERE name = %(name)s AND id > %(after)s AND (%(period)s::text IS NULL OR period = %(period)s)
            ORDER BY id LIMIT %(limit)s"""
        # Pruning: at most %(batch)s rows a statement (a backlog is many statements, each within the timeout), oldest
        # events first from the id index (which skips the rows earlier batches deleted), deleted by ctid.
        self.seq_prune_events = f"""
            WITH gone AS (
                DELETE FROM {s}.sequence_events WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM {s}.sequence_events WHERE id < %(cut)s ORDER BY id LIMIT %(batch)s
                )) RETURNING 1
            ) SELECT count(*) FROM gone"""
        self.seq_prune_periods = f"""
            WITH gone AS (
                DELETE FROM {s}.sequence_documents WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM {s}.sequence_documents
                    WHERE doc LIKE 'period/%%' AND doc < %(cut)s LIMIT %(batch)s
                )) RETURNING 1
            ) SELECT count(*) FROM gone"""

        # -- backfill marks (app.storage.tables.backfill): the (space, identity)'s lock, then its ticks' marks ------
        self.backfill_lock = self.seq_lock
        self.backfill_lock_space = f"{schema}/backfill"
        self.backfill_read = f"""
            SELECT tick, high FROM {s}.backfill_marks
            WHERE space = %(space)s AND identity = %(identity)s AND tick = ANY(%(ticks)s::bigint[])"""
        self.backfill_put = f"""
            INSERT INTO {s}.backfill_marks (space, identity, tick, high)
            SELECT %(space)s, %(identity)s, t, h FROM unnest(%(ticks)s::bigint[], %(highs)s::integer[]) AS w(t, h)
            ON CONFLICT (space, identity, tick) DO UPDATE SET high = GREATEST({s}.backfill_marks.high, EXCLUDED.high)"""
