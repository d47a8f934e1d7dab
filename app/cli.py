"""The ``idmint`` command: ``serve``, ``mint``, ``backfill``, ``decode``, ``bounds``, ``layout check``, ``sequence``
(``create``, ``show``, ``range``, ``alter``, ``setval``, ``delete``, ``reserve``, ``commit``, ``void``, ``audit``,
``parse``), ``admin`` (``claims``, ``drain``, ``revoke``: the admin routes of a running node), ``sql functions``
(SQL that reads IDs in PostgreSQL and MySQL), ``storage sql`` (the PostgreSQL backend's DDL) and ``storage fence``
(accept a store that went back in time)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from typing import Any

import click

from app import __version__
from app.errors import ConfigError, IdmintError, InvalidIdError, NotReadyError


def _settings(**overrides: Any) -> Any:
    from app.settings import load_settings

    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="idmint")
def main() -> None:
    """idmint: issue and decode IDs of every registered scheme (``idmint mint --help`` lists their options);
    reserve sequence ranges.

    Settings come from IDMINT_* environment variables (see docs/settings.md).
    """


@main.command()
@click.option("--host", help="Bind address (IDMINT_HOST, default 127.0.0.1).")
@click.option("--port", type=int, help="Port (IDMINT_PORT, default 8000).")
@click.option("--workers", type=int, help="Worker processes (IDMINT_WORKERS, default 1).")
def serve(host: str | None, port: int | None, workers: int | None) -> None:
    """Run the HTTP server (uvicorn) on the configured lease backend (embedded unless IDMINT_ETCD_ENDPOINTS)."""
    settings = _settings(host=host, port=port, workers=workers)
    if settings.api_keys_file is not None:  # here, once: a worker that fails on it would only be restarted
        from app.api.auth import load_key_file

        try:
            load_key_file(settings.api_keys_file, settings.workers)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
    # Workers build their own app from the environment: pass the command-line overrides down that way.
    os.environ["IDMINT_HOST"] = settings.host
    os.environ["IDMINT_PORT"] = str(settings.port)
    os.environ["IDMINT_WORKERS"] = str(settings.workers)
    from app.metrics import prepare_process_environment

    prepare_process_environment(settings.workers)
    import uvicorn

    from app.serving import PROTOCOL_IMPORT

    log_config = None
    try:
        from app.logs import configure_logging, uvicorn_log_config

        configure_logging(settings)
        log_config = uvicorn_log_config(settings)
    except ImportError:
        pass
    kwargs: dict[str, Any] = {}
    if log_config is not None:
        kwargs["log_config"] = log_config
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        access_log=settings.access_log,
        log_level=settings.log_level,
        server_header=False,
        http=PROTOCOL_IMPORT,
        timeout_keep_alive=settings.keep_alive_timeout,
        **kwargs,
    )


def _scheme_options(command: Any) -> Any:
    """One ``--<name>`` flag per issue option any registered scheme declares (validated per scheme by the same
    parser as the HTTP routes, :func:`app.api.params.parse_issue`)."""
    from app.schemes import schemes

    owners: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for scheme in schemes().values():
        for option in scheme.options:
            owners.setdefault(option.name, []).append(scheme.name)
            helps.setdefault(option.name, option.description)
    for name in reversed(list(owners)):
        command = click.option(
            f"--{name}", f"opt_{name}", metavar="TEXT", help=f"{', '.join(owners[name])} only: {helps[name]}"
        )(command)
    return command


@main.command()
@click.argument("scheme")
@click.option("-n", "--count", type=click.IntRange(min=1), default=1, show_default=True, help="How many IDs.")
@click.option("--format", "fmt", help="Text form (default: the scheme's canonical form).")
@_scheme_options
@click.option(
    "--server",
    metavar="URL[,URL]",
    help="Ask a running fleet (its stream route, with failover) instead of minting locally.",
)
def mint(scheme: str, count: int, fmt: str | None, server: str | None, **options: str | None) -> None:
    """Write COUNT fresh IDs of SCHEME to stdout, one per line, with the same generators and local leases
    (or, with --server, streamed from a running fleet: another replica carries on if one fails)."""
    given = {name.removeprefix("opt_"): value for name, value in options.items() if value is not None}
    if server is not None:
        _mint_remote(server, scheme, count, fmt, given)
        return
    settings = _settings()
    try:
        _run_async(_mint(settings, scheme, count, fmt, given))
    except BrokenPipeError:
        # `idmint mint ... | head`: the reader went away; not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _mint_remote(server: str, scheme: str, count: int, fmt: str | None, options: dict[str, str]) -> None:
    try:
        from idmint_client import Client, IdmintClientError
    except ImportError as exc:
        raise click.ClickException("--server needs the Python client: pip install ./clients/python") from exc
    try:
        client = Client(server)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--server") from exc
    out = sys.stdout.buffer
    try:
        with client:
            for chunk in client.stream_chunks(scheme, count, format=fmt, **options):
                out.write(("\n".join(chunk) + "\n").encode("ascii"))
        out.flush()
    except IdmintClientError as exc:
        raise click.ClickException(str(exc)) from exc
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


async def _mint(settings: Any, scheme: str, count: int, fmt: str | None, options: dict[str, str]) -> None:
    from app.api.params import parse_issue
    from app.api.streams import lines
    from app.issuing.issuer import no_charge
    from app.issuing.node import Node, node_clock
    from app.metrics import Metrics
    from app.schemes import get_scheme
    from app.storage import open_storage

    params: dict[str, Any] = {"count": count, **options}
    if fmt is not None:
        params["format"] = fmt
    request = parse_issue(get_scheme(scheme), params, maximum=count)
    needed = [scheme, *filter(None, [get_scheme(scheme).shares_generator_with])]
    metrics = Metrics(needed, __version__)
    clock = node_clock(settings)
    storage = open_storage(settings, clock, metrics)
    node = Node(settings, storage, metrics, clock=clock, only=needed)
    try:
        await node.start()
        issuer = node.issuer(scheme)
        issuer.check()
        out = sys.stdout.buffer
        async for chunk in lines(issuer, request.count, request.format, request.options, charge=no_charge):
            out.write(chunk)
        out.flush()
    finally:
        await node.stop()
        await storage.close()


@main.command()
@click.argument("scheme")
@click.option(
    "--times-file",
    "times_file",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help="Past times, one RFC 3339 date-time (with Z or an offset) a line; '-' reads stdin.",
)
@click.option("--format", "fmt", help="Text form (default: the scheme's canonical form).")
@_scheme_options
def backfill(scheme: str, times_file: Any, fmt: str | None, **options: str | None) -> None:
    """Write one ID of SCHEME per line of the times file, in order, each at its time (docs/backfill.md): the
    same rules, storage and backfill identities as POST /v1/ids/{scheme}/backfill, run locally."""
    given = {name.removeprefix("opt_"): value for name, value in options.items() if value is not None}
    times = [line.strip() for line in times_file if line.strip()]
    if not times:
        raise click.ClickException("the times file holds no times")
    _run_async(_backfill(_settings(), scheme, times, fmt, given))


async def _backfill(settings: Any, scheme: str, times: list[str], fmt: str | None, options: dict[str, str]) -> None:
    from app.api.backfill import parse_times
    from app.api.params import parse_issue
    from app.issuing.backfill import TIMES_MAX
    from app.issuing.node import Node, node_clock
    from app.metrics import Metrics
    from app.schemes import get_scheme
    from app.storage import open_storage

    params: dict[str, Any] = dict(options)
    if fmt is not None:
        params["format"] = fmt
    request = parse_issue(get_scheme(scheme), params, maximum=1)
    needed = [scheme, *filter(None, [get_scheme(scheme).shares_generator_with])]
    metrics = Metrics(needed, __version__)
    clock = node_clock(settings)
    storage = open_storage(settings, clock, metrics)
    node = Node(settings, storage, metrics, clock=clock, only=needed)
    try:
        await node.start()
        target = node.backfiller.scheme(scheme)
        out = sys.stdout.buffer
        for start in range(0, len(times), TIMES_MAX):
            try:
                chunk = parse_times(times[start : start + TIMES_MAX])
            except IdmintError as exc:  # name the line, not the index within the chunk
                raise IdmintError(f"{exc} (chunk of lines from {start + 1})") from exc
            values = await node.backfiller.backfill(scheme, chunk, request.options)
            out.write("".join(target.format(value, request.format) + "\n" for value in values).encode("ascii"))
        out.flush()
    finally:
        await node.stop()
        await storage.close()


@main.group()
def sequence() -> None:
    """Sequences (dense integers per name) in the configured storage: etcd, PostgreSQL, or the state directory."""


def _run_sequences(work: Any) -> Any:
    """``work(service)`` on a :class:`~app.sequences.SequenceService` over the configured storage (no buffers
    are used, no maintenance runs); idmint's errors become the command's."""

    async def on(storage: Any) -> Any:
        return await work(_service(storage))

    return _run_storage(on)


def _service(storage: Any) -> Any:
    """A :class:`~app.sequences.SequenceService` on ``storage`` for one command (no maintenance, no hand-back)."""
    from app.issuing.node import node_clock
    from app.metrics import Metrics
    from app.sequences import SequenceService

    settings = _settings()
    return SequenceService(
        storage.sequences,
        Metrics([], __version__),
        settings.max_count,
        clock=node_clock(settings),
        node=f"{socket.gethostname()} pid {os.getpid()} (idmint sequence)",
        ledger_days=settings.ledger_days,
        maintain=False,
    )


def _run_storage(work: Any) -> Any:
    """``work(storage)`` on the configured storage (its sequence store started, everything closed after); idmint's
    errors become the command's."""
    from app.issuing.node import node_clock
    from app.storage import open_storage

    async def run() -> Any:
        settings = _settings()
        storage = open_storage(settings, node_clock(settings))
        try:
            await storage.sequences.start()
            return await work(storage)
        finally:
            await storage.sequences.close()
            await storage.close()

    return _run_async(run(), also=(RuntimeError,))


def _cli_who() -> Any:
    from app.sequences.points import Who

    return Who(None, f"{socket.gethostname()} pid {os.getpid()} (idmint sequence)", None)


@sequence.command("range")
@click.argument("name")
@click.option(
    "-n",
    "--count",
    type=click.IntRange(min=1, max=2**40),
    default=1,
    show_default=True,
    help="How many integers (1..2**40).",
)
def sequence_range(name: str, count: int) -> None:
    """Reserve a fresh contiguous range of COUNT integers of NAME (of the current period, for a resetting
    sequence); print {"name", "first", "last", "count"} (and "increment", "period" for a business sequence)."""
    from app.api.sequences import range_body
    from app.issuing.issuer import no_charge

    reserved = _run_sequences(lambda service: service.reserve_range(name, count, charge=no_charge))
    click.echo(range_body(name, reserved).decode())


@sequence.command("create")
@click.argument("name")
@click.option("--start", type=int, default=1, show_default=True, help="The first integer (0..2**63-1).")
@click.option("--cache", type=int, default=1000, show_default=True, help="Smallest range a node reserves.")
@click.option("--increment", type=int, default=1, show_default=True, help="Integers go start, start+increment...")
@click.option("--reset", default="never", show_default=True, help="never, daily, monthly or yearly.")
@click.option("--time-zone", default="UTC", show_default=True, help="IANA time zone of the periods (with --reset).")
@click.option("--template", help="How numbers read, such as 'INV-{yyyy}{mm}{dd}-{seq:06}{check}'.")
@click.option("--check-digit", help="luhn, damm or mod97 (with a template holding {check}).")
@click.option("--mode", default="cached", show_default=True, help="cached or gapless.")
@click.option(
    "--period-grace",
    "period_grace_s",
    type=int,
    default=7 * 86_400,
    show_default=True,
    help="Gapless and resetting: seconds after a period ends during which its voided integers are refilled.",
)
def sequence_create(name: str, start: int, cache: int, **options: Any) -> None:
    """Create sequence NAME (nothing happens if it exists with the same settings); print it."""
    from app.sequences.spec import SequenceSpec

    async def work(service: Any) -> Any:
        return await service.create(name, start, cache, SequenceSpec.build(**options))

    record, created = _run_sequences(work)
    click.echo(json.dumps({**record.as_dict(), "created": created}))


@sequence.command("show")
@click.argument("name", required=False)
def sequence_show(name: str | None) -> None:
    """Print sequence NAME (or every sequence) with its allocation point (the current period's) and settings."""
    if name is None:
        entries = _run_sequences(lambda service: service.list())
        click.echo(json.dumps([{k: v for k, v in e.items() if k != "node"} for e in entries], indent=2))
        return
    entry = _run_sequences(lambda service: service.describe(name))
    click.echo(json.dumps({k: v for k, v in entry.items() if k != "node"}, indent=2))


@sequence.command("alter")
@click.argument("name")
@click.option("--cache", type=int, help="Smallest range a node reserves (1..1,000,000).")
@click.option("--increment", type=int, help="Applies from the allocation point on (1..2**31).")
@click.option("--template", help="A template whose numbers cannot read as any the former templates rendered.")
@click.option("--no-template", is_flag=True, help="Remove the template (the integers alone).")
@click.option("--check-digit", help="luhn, damm or mod97 (with a template holding {check}).")
def sequence_alter(
    name: str,
    cache: int | None,
    increment: int | None,
    template: str | None,
    no_template: bool,
    check_digit: str | None,
) -> None:
    """Change cache, increment or template of NAME (PATCH /v1/sequences/NAME); print it."""
    changes: dict[str, Any] = {}
    if increment is not None:
        changes["increment"] = increment
    if template is not None or no_template:
        if template is not None and no_template:
            raise click.UsageError("--template and --no-template contradict each other")
        changes["template"] = template
    if check_digit is not None or no_template:
        changes["check_digit"] = check_digit
    if cache is None and not changes:
        raise click.UsageError(
            "nothing to change: give --cache, --increment, --template, --no-template or --check-digit"
        )
    entry = _run_sequences(lambda service: service.patch(name, cache, changes))
    click.echo(json.dumps({k: v for k, v in entry.items() if k != "node"}, indent=2))


@sequence.command("setval")
@click.argument("name")
@click.argument("value", type=int)
@click.option("--period", help="A resetting sequence's period (its first day, 2026-11-27); default the current one.")
def sequence_setval(name: str, value: int, period: str | None) -> None:
    """Move NAME's allocation point forward to VALUE (backward is refused: it could repeat). A gapless sequence
    only after a storage fence (``idmint storage fence``) left it refused: VALUE is then the first integer your own
    records have not used, and its reservations of the old history are dropped."""
    click.echo(json.dumps(_run_storage(lambda storage: _setval(storage, name, value, period))))


async def _setval(storage: Any, name: str, value: int, period: str | None) -> Any:
    from app.sequences.fence import setval_gapless
    from app.sequences.service import spec_of
    from app.storage.fence import lift_gapless

    service = _service(storage)
    store = getattr(storage.sequences, "inner", storage.sequences)
    record = await store.get(name)
    spec = spec_of(record)
    if spec.mode != "gapless":
        return await service.setval(name, value, period)
    key = None
    if spec.reset != "never":
        key = spec.periods.period_at(service.clock()).key if period is None else period
    if (name, key) not in storage.history.gapless_pending() and not await _pending(storage, name, key):
        return await service.setval(name, value, period)  # refused there, naming why
    docs, change = setval_gapless(name, key, value, service.clock(), _cli_who())
    point = await store.update(name, docs, change)
    await lift_gapless(storage, name, key)
    return {"name": name, "next": point, "period": key}


async def _pending(storage: Any, name: str, key: str | None) -> bool:
    from app.storage.history import HISTORY_RECORD, pending_of

    return (name, key) in pending_of(await storage.leases.read_record(HISTORY_RECORD))


@sequence.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Gapless: void the reservations still open first (audited).")
def sequence_delete(name: str, force: bool) -> None:
    """Delete NAME, leaving a tombstone: created again, it continues above every integer it issued. A gapless
    sequence with reservations open is refused naming them, unless --force."""
    click.echo(json.dumps(_run_sequences(lambda service: service.remove(name, force, _cli_who()))))


@sequence.command("reserve")
@click.argument("name")
@click.option("--ttl", "ttl_s", type=int, default=60, show_default=True, help="Seconds before it expires (1..3600).")
@click.option("--period", help="An ended period (its first day) within its grace window: refill one of its holes.")
def sequence_reserve(name: str, ttl_s: int, period: str | None) -> None:
    """Reserve the next integer of gapless NAME; print it with its reservation ID (commit or void it)."""
    from app.issuing.issuer import no_charge

    reserve = _run_sequences(lambda service: service.reserve(name, ttl_s, _cli_who(), period, charge=no_charge))
    click.echo(json.dumps(reserve))


@sequence.command("holes")
@click.argument("name")
@click.option("--period", help="The period's first day (2026-11-01); default the current one.")
def sequence_holes(name: str, period: str | None) -> None:
    """Print gapless NAME's holes in one period for the auditor: integers voided and not refilled, reservations
    still open, totals, and whether the period is closed."""
    click.echo(json.dumps(_run_sequences(lambda service: service.holes(name, period)), indent=2))


@sequence.command("commit")
@click.argument("name")
@click.argument("reservation")
def sequence_commit(name: str, reservation: str) -> None:
    """Make RESERVATION's integer of gapless NAME final."""
    click.echo(json.dumps(_run_sequences(lambda s: s.settle(name, reservation, "committed", _cli_who()))))


@sequence.command("void")
@click.argument("name")
@click.argument("reservation")
@click.option("--reason", help="Why (recorded in the audit log).")
def sequence_void(name: str, reservation: str, reason: str | None) -> None:
    """Give RESERVATION's integer of gapless NAME back: it is the next one reserved."""
    click.echo(json.dumps(_run_sequences(lambda s: s.settle(name, reservation, "voided", _cli_who(), reason))))


@sequence.command("audit")
@click.argument("name")
@click.option("--period", help="Only this period's events (2026-11-27, or never).")
@click.option("--after", help="The cursor the previous page printed as next.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Events per page.")
def sequence_audit(name: str, period: str | None, after: str | None, limit: int) -> None:
    """Print a page of gapless NAME's audit log (reserve, commit, void, expire: who and when), oldest first."""
    click.echo(json.dumps(_run_sequences(lambda s: s.audit(name, after, limit, period)), indent=2))


@sequence.command("parse")
@click.argument("name")
@click.argument("text")
def sequence_parse(name: str, text: str) -> None:
    """Read TEXT as a number of NAME: its period and integer, its check digit checked, what became of it."""
    click.echo(json.dumps(_run_sequences(lambda service: service.parse(name, text)), indent=2))


@main.group()
@click.option(
    "--server",
    envvar="IDMINT_SERVER",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="The node to ask (IDMINT_SERVER).",
)
@click.option("--key", envvar="IDMINT_API_KEY", help="API key with the admin scope (IDMINT_API_KEY).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, help="Seconds to wait.")
@click.pass_context
def admin(ctx: click.Context, server: str, key: str | None, timeout: float) -> None:
    """The fleet's admin routes on a running node (scope admin): list claims, drain a node, revoke a claim."""
    ctx.obj = (server.rstrip("/"), key, timeout)


def _admin_call(ctx: click.Context, method: str, path: str) -> Any:
    import httpx

    server, key, timeout = ctx.obj
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.request(method, f"{server}{path}", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{server}: {exc}") from exc
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text}
    if response.status_code != 200:
        detail = body.get("detail", body) if isinstance(body, dict) else body
        raise click.ClickException(f"{method} {path}: HTTP {response.status_code}: {detail}")
    return body


@admin.command("claims")
@click.pass_context
def admin_claims(ctx: click.Context) -> None:
    """Print every live claim of the fleet as JSON (scheme, identity, owner, seconds left on its lease)."""
    click.echo(json.dumps(_admin_call(ctx, "GET", "/v1/admin/claims"), indent=2))


@admin.command("drain")
@click.pass_context
def admin_drain(ctx: click.Context) -> None:
    """Drain the node: it refuses new ID requests, finishes those in flight and gives its claims back."""
    click.echo(json.dumps(_admin_call(ctx, "POST", "/v1/admin/drain"), indent=2))


@admin.command("revoke")
@click.argument("scheme")
@click.argument("identity")
@click.pass_context
def admin_revoke(ctx: click.Context, scheme: str, identity: str) -> None:
    """Free the stuck claim of IDENTITY of SCHEME: its owner stops first, then another node may claim it."""
    from urllib.parse import quote

    path = f"/v1/admin/claims/{quote(scheme, safe='')}/{quote(identity, safe='')}/revoke"
    click.echo(json.dumps(_admin_call(ctx, "POST", path), indent=2))


@main.group()
def storage() -> None:
    """The storage backend's set-up."""


@storage.command("sql")
@click.option(
    "--schema",
    help="The schema the tables go in (default: IDMINT_POSTGRES_SCHEMA, else idmint); with --dialect mysql, the "
    "database (default: IDMINT_MYSQL_URL's, else idmint).",
)
@click.option(
    "--dialect",
    type=click.Choice(["postgresql", "mysql"]),
    default="postgresql",
    show_default=True,
    help="The backend: PostgreSQL, or MySQL/MariaDB.",
)
def storage_sql(schema: str | None, dialect: str) -> None:
    """Print the SQL that creates the PostgreSQL (or, with --dialect mysql, the MySQL/MariaDB) backend's tables
    (idempotent: IF NOT EXISTS), for review; idmint runs the same at start when they are absent, so a database user
    without CREATE rights needs it applied first."""
    from app.storage import mysql_ddl, postgres_ddl

    if dialect == "mysql":
        if schema is None:
            from app.storage.mysql.client import describe

            url = _settings().mysql_url
            schema = describe(url.get_secret_value())[0]["db"] if url is not None else "idmint"
        click.echo(mysql_ddl(schema), nl=False)
        return
    settings = _settings(postgres_schema=schema)
    click.echo(postgres_ddl(settings.postgres_schema), nl=False)


@storage.command("import-leaf")
@click.option(
    "--from",
    "source",
    required=True,
    envvar="IDMINT_LEAF_URL",
    help="Leaf's database, mysql://user:password@host:port/db (or IDMINT_LEAF_URL: keeps the password out of the "
    "process list).",
)
@click.option("--table", default="leaf_alloc", show_default=True, help="Leaf's allocation table.")
@click.option("--apply", "apply_", is_flag=True, help="Do it (without: print what it would create, change nothing).")
def storage_import_leaf(source: str, table: str, apply_: bool) -> None:
    """Import Meituan Leaf's segment tags: each row of leaf_alloc (biz_tag, max_id, step) becomes a sequence of the
    configured storage starting at max_id + 1 (cache: step), so no number Leaf handed out is handed out again.
    Stop every Leaf server first. Same settings as `idmint serve`."""
    from app.storage.mysql import leaf

    tags = _run_async(leaf.read_leaf(source, table))

    async def work(storage: Any) -> list[str]:
        steps = await leaf.plan(storage.sequences, tags)
        created = await leaf.apply(storage.sequences, steps) if apply_ else 0
        return leaf.summary(steps, apply_, created)

    click.echo("\n".join(_run_storage(work)))


def _run_async(work: Any, also: tuple[type[Exception], ...] = ()) -> Any:
    """Run the coroutine ``work``; idmint's errors (and those of ``also``) become the command's: a
    :class:`click.ClickException` with the error's text, ``not ready: <reason>`` for a node not ready."""
    errors: tuple[type[Exception], ...] = (IdmintError, *also)
    try:
        return asyncio.run(work)
    except NotReadyError as exc:
        raise click.ClickException(f"not ready: {exc.reason}") from exc
    except errors as exc:
        raise click.ClickException(str(exc)) from exc


@storage.command("fence")
@click.option("--apply", "apply_", is_flag=True, help="Do it (without: print what it would change, change nothing).")
@click.option(
    "--sequence-gap",
    type=click.IntRange(1, 2**40),
    default=1_000_000,
    show_default=True,
    help="Integers every cached sequence's allocation point moves forward by.",
)
@click.option(
    "--margin",
    type=click.FloatRange(0, 86_400),
    help="Seconds past the fence's clock that every high-water mark is raised to (default: the backend's mark "
    "horizon plus IDMINT_MAX_CLOCK_WAIT).",
)
def storage_fence(apply_: bool, sequence_gap: int, margin: float | None) -> None:
    """Accept a store that went back in time (a restored backup, a point-in-time recovery, a promoted standby, a
    copied state directory): every high-water mark raised to the fence's time plus a margin, every cached
    sequence's point moved forward by --sequence-gap, gapless sequences left refused until `idmint sequence setval`
    sets each, open claim-ledger records ended, and the store's new history identity recorded. Same settings as
    `idmint serve`; run it with every node stopped, or once they all report the change (see docs/safety.md)."""
    click.echo("\n".join(_run_storage(lambda storage: _fence(storage, apply_, sequence_gap, margin))))


async def _fence(storage: Any, apply_: bool, gap: int, margin: float | None) -> list[str]:
    from app.issuing.node import node_clock
    from app.sequences import fence as sequences_fence
    from app.storage import fence

    settings = _settings()
    now_ns = node_clock(settings)()
    margin_s = margin if margin is not None else storage.leases.mark_horizon + settings.max_clock_wait
    plan = await fence.plan(storage, now_ns, margin_s)
    store = getattr(storage.sequences, "inner", storage.sequences)
    steps = await sequences_fence.plan(store, plan.since_ns, plan.mark_floor_ns)
    out = plan.lines()
    cached = [s for s in steps if not s.gapless]
    gapless = [s for s in steps if s.gapless]
    out.append(
        f"sequences: {len({s.name for s in cached})} cached sequence(s), {len(cached)} point(s) moved forward by "
        f"--sequence-gap {gap:,} integers; {len({s.name for s in gapless})} gapless sequence(s), {len(gapless)} "
        "point(s) refused until `idmint sequence setval NAME N [--period P]` sets each from your own records"
    )
    for s in steps:
        where = f" period {s.period}" if s.period else ""
        now = "absent (starts at start)" if s.next is None else f"next {s.next}"
        what = "refused until setval" if s.gapless else f"moved forward by {gap:,} integers"
        out.append(f"  {s.name}{where}: {now}; {what}")
    if not apply_:
        out.append("nothing changed: run again with --apply to fence")
        return out
    who = _cli_who()
    ended = await fence.end_claims(storage, plan)
    fence_id = str(uuid.uuid4())
    for s in steps:
        docs, change = sequences_fence.fence_step(s, gap, now_ns, fence_id, who)
        await store.update(s.name, docs, change)
    record = await fence.write_history(storage, plan, gap, [(s.name, s.period) for s in gapless], fence_id)
    out.append(
        f"fenced: fence {fence_id}, history generation {record['generation']}, {ended} ledger record(s) ended, "
        f"{len(cached)} sequence point(s) moved; running nodes resume within {settings.history_check_interval:g} s"
    )
    return out


@main.group()
def layout() -> None:
    """Snowflake layouts: will one hold?"""


@layout.command("check")
@click.argument("name", metavar="LAYOUT")
@click.option("--rate", type=click.FloatRange(min=0), required=True, help="IDs per second the fleet issues, in all.")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes per region.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Worker IDs per node.")
@click.option("--regions", type=click.IntRange(min=1), default=1, show_default=True, help="IDMINT_REGIONS.")
@click.option("--years", type=click.FloatRange(min=0), default=10, show_default=True, help="Years it must last.")
def layout_check(name: str, rate: float, replicas: int, workers: int, regions: int, years: float) -> None:
    """Whether snowflake LAYOUT (twitter, discord, instagram, sonyflake, js53 or custom:E:U:T/W/S) holds this
    fleet: one line per rule, then the verdict; exit status 1 when it does not hold."""
    import time

    from app.schemes.snowflake import Layout, check_layout

    try:
        spec = Layout.parse(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="LAYOUT") from exc
    rules = check_layout(
        spec,
        rate=rate,
        replicas=replicas,
        workers=workers,
        regions=regions,
        years=years,
        now_ms=time.time_ns() // 10**6,
    )
    for holds, sentence in rules:
        click.echo(f"{'ok ' if holds else 'NO '} {sentence}")
    verdict = all(holds for holds, _ in rules)
    click.echo(f"{spec.name}: {'holds' if verdict else 'does not hold'}")
    raise SystemExit(0 if verdict else 1)


@main.command()
@click.argument("scheme")
@click.option("--from", "from_", required=True, metavar="T1", help="Start (inclusive): RFC 3339 or Unix ms.")
@click.option("--to", required=True, metavar="T2", help="End (exclusive): RFC 3339 or Unix ms.")
@click.option("--storage", help="Column type: bigint, uuid, bytea or text (default: the scheme's first).")
@click.option("--column", help="Column name in the SQL (default: id).")
@click.option("--dialect", help="SQL dialect: postgresql (default), sqlite or mysql.")
@click.option("--layout", help="snowflake: the layout (default: IDMINT_SNOWFLAKE_LAYOUT).")
@click.option("--mode", help="eight-byte: the mode (time_sequential; spread IDs do not sort by time).")
@click.option("--type", "type_", help="typeid: the prefix of a text column's IDs.")
@click.option("--sql", "sql_only", is_flag=True, help="Print only the SQL predicate.")
def bounds(scheme: str, from_: str, to: str, sql_only: bool, type_: str | None, **rest: str | None) -> None:
    """The IDs of SCHEME made in [T1, T2): lower and upper bounds in a column's order and the SQL predicate, as
    JSON (what GET /v1/bounds/SCHEME answers)."""
    from app.bounds import time_bounds
    from app.schemes import get_scheme

    params = {"from": from_, "to": to, "type": type_, **rest}
    try:
        found = get_scheme(scheme).configured(_settings())
        answer = time_bounds(found, {name: value for name, value in params.items() if value is not None})
    except IdmintError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(answer["sql"] if sql_only else json.dumps(answer, indent=2))


@main.group("sql")
def sql_group() -> None:
    """SQL that reads idmint's IDs inside a database (docs/sql.md)."""


@sql_group.command("functions")
@click.option(
    "--dialect",
    type=click.Choice(["postgresql", "mysql"]),
    default="postgresql",
    show_default=True,
    help="SQL dialect.",
)
@click.option("--schema", help="Create the functions in this schema (MySQL: database); default the current one.")
def sql_functions(dialect: str, schema: str | None) -> None:
    """Print the DDL of idmint_time(scheme, id), idmint_fields(scheme, id) and each scheme's functions, for the
    node's snowflake layout (IDMINT_SNOWFLAKE_LAYOUT) and every named one."""
    from app.bounds import parse_column
    from app.sql_functions import functions_ddl

    if schema is not None and ("." in schema or not schema):
        raise click.BadParameter("must be one SQL identifier of ASCII letters, digits, _ and $", param_hint="--schema")
    try:
        if schema is not None:
            parse_column(schema)
        click.echo(functions_ddl(dialect, schema or "", _settings().snowflake_layout), nl=False)
    except IdmintError as exc:
        raise click.BadParameter(str(exc), param_hint="--schema") from exc


@main.command()
@click.argument("id_text", metavar="ID")
@click.option("--scheme", help="Decode as this scheme only (default: every scheme that accepts it).")
def decode(id_text: str, scheme: str | None) -> None:
    """Print the decode object of ID as JSON (all candidate schemes unless --scheme)."""
    from app.decoding import decode_any, decode_one

    try:
        result = decode_one(scheme, id_text) if scheme else decode_any(id_text)
    except (InvalidIdError, IdmintError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
