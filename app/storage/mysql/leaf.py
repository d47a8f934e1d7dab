"""The importer for teams leaving Meituan Leaf's segment mode: ``idmint storage import-leaf --from mysql://...``.

Leaf keeps one row per business tag in ``leaf_alloc`` (``biz_tag``, ``max_id``, ``step``, ...): a Leaf server takes
a segment by ``UPDATE leaf_alloc SET max_id = max_id + step`` and hands out ``max_id - step + 1 .. max_id``, so
every number Leaf handed out, or may still hand out from a segment it holds, is at most ``max_id``. Each tag becomes
an idmint sequence of the same name starting at ``max_id + 1`` (its cache Leaf's ``step``, within idmint's bounds),
so no number Leaf handed out is handed out again. Stop every Leaf server first (a running one still takes
segments): the plan reads ``max_id`` once.

A tag whose name is not an idmint sequence name (``[a-z0-9_-]{1,64}``) is left out, named in the summary; a tag
whose sequence exists already is left alone (its numbers are idmint's). Nothing is written without ``apply``.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiomysql
import pymysql

from app.errors import InvalidOptionError, SequenceConflictError, UnknownSequenceError
from app.storage.mysql.client import describe, map_error
from app.storage.sequences import CACHE_MAX, CACHE_MIN, MAX_VALUE, SequenceStore, check_name

LEAF_TABLE = "leaf_alloc"
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LeafTag:
    """One ``leaf_alloc`` row: ``biz_tag``, ``max_id``, ``step``."""

    biz_tag: str
    max_id: int
    step: int

    @property
    def start(self) -> int:
        """The first number idmint may hand out: above every one Leaf did."""
        return self.max_id + 1

    @property
    def cache(self) -> int:
        """Leaf's step as the sequence's cache, within idmint's bounds."""
        return max(CACHE_MIN, min(CACHE_MAX, self.step))


@dataclass
class Step:
    """What the import does with one tag: ``action`` is ``create``, ``exists`` or ``skip`` (``why`` says)."""

    tag: LeafTag
    action: str
    why: str = ""

    def line(self) -> str:
        t = self.tag
        if self.action == "create":
            return f"  {t.biz_tag}: create, start {t.start} (Leaf max_id {t.max_id}), cache {t.cache}"
        return f"  {t.biz_tag}: {self.action}: {self.why}"


async def read_leaf(url: str, table: str = LEAF_TABLE) -> list[LeafTag]:
    """Every row of Leaf's ``table`` in the database of ``url`` (``mysql://user:password@host:port/db``), by tag.
    Raises ConfigError for a URL that is not one, BackendUnavailableError naming why MySQL cannot be read (the
    password never shown), InvalidOptionError for a table name that is not an identifier."""
    if not table.replace("_", "").isalnum():
        raise InvalidOptionError(f"--table must be a table name (letters, digits, _), got {table[:80]!r}")
    args, where = describe(url)
    try:
        conn = await aiomysql.connect(**args, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True, charset="utf8mb4")
    except (pymysql.err.MySQLError, OSError) as exc:
        raise map_error(exc, "connecting to Leaf's database", where, args["password"] or None) from None
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"SELECT biz_tag, max_id, step FROM `{table}` ORDER BY biz_tag")
            rows = await cur.fetchall()
    except pymysql.err.MySQLError as exc:
        raise map_error(exc, f"reading Leaf's {table}", where, args["password"] or None) from None
    finally:
        conn.close()
    return [LeafTag(str(tag), int(max_id), int(step)) for tag, max_id, step in rows]


async def plan(store: SequenceStore, tags: list[LeafTag]) -> list[Step]:
    """What importing ``tags`` into ``store`` does, tag by tag (nothing written). Raises NotReadyError when the
    store cannot be read."""
    steps = []
    for tag in tags:
        try:
            check_name(tag.biz_tag)
        except InvalidOptionError:
            steps.append(Step(tag, "skip", "not an idmint sequence name ([a-z0-9_-]{1,64}); create it by hand"))
            continue
        if not 0 <= tag.max_id < MAX_VALUE:
            steps.append(Step(tag, "skip", f"max_id {tag.max_id} is outside 0..{MAX_VALUE - 1}"))
            continue
        try:
            await store.get(tag.biz_tag)
        except UnknownSequenceError:
            steps.append(Step(tag, "create"))
            continue
        steps.append(Step(tag, "exists", "an idmint sequence of that name exists; left alone"))
    return steps


async def apply(store: SequenceStore, steps: list[Step]) -> int:
    """Create every ``create`` step's sequence (start ``max_id + 1``); the number created. A sequence made
    meanwhile with other settings is left alone (its step becomes ``exists``). Raises NotReadyError, and
    InvalidOptionError or SequenceConflictError as the store's create does for what it refuses otherwise."""
    created = 0
    for step in steps:
        if step.action != "create":
            continue
        tag = step.tag
        try:
            _, made = await store.create(tag.biz_tag, tag.start, tag.cache)
        except SequenceConflictError as exc:  # another writer made it first with other settings: its numbers count
            step.action, step.why = "exists", f"created meanwhile ({exc}); left alone"
            continue
        if made:
            created += 1
        else:
            step.action, step.why = "exists", "created meanwhile with the same settings"
    return created


def summary(steps: list[Step], applied: bool, created: int = 0) -> list[str]:
    """The lines the command prints: a head count, a line per tag, and what was (or would be) done."""
    counts = {action: sum(1 for s in steps if s.action == action) for action in ("create", "exists", "skip")}
    out = [
        f"leaf_alloc: {len(steps)} tag(s): {counts['create']} to create, {counts['exists']} existing, "
        f"{counts['skip']} left out"
    ]
    out += [s.line() for s in steps]
    if applied:
        out.append(f"imported: {created} sequence(s) created")
    else:
        out.append("nothing changed: run again with --apply to create them (stop every Leaf server first)")
    return out


__all__ = ["LeafTag", "Step", "apply", "plan", "read_leaf", "summary"]
