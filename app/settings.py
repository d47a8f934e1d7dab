"""All idmint settings: one pydantic-settings class, environment prefix ``IDMINT_``, validated once at start-up.

:class:`Settings` is composed once, at import: the serving, embedded-backend, clock and etcd fields of
:class:`CoreSettings`, plus every registered scheme's :attr:`~app.schemes.base.Scheme.settings_model` (multiple
inheritance, so each scheme's fields and validators live in its own module; env names stay ``IDMINT_<FIELD>``).

Every rule is stated in the error message (``cluster_id must be in 0..15, got 17``). Build with
:func:`load_settings`, which turns pydantic's ValidationError into :class:`~app.errors.ConfigError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import platformdirs
from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.errors import ConfigError

SCOPES = ("issue", "stream", "decode", "sequences", "admin", "metrics", "backfill")
"""Every scope an API key (or ``public_scopes``) may hold; :mod:`app.api.auth` maps routes to them."""

HISTORY_CHECK_INTERVAL_S = 5.0
"""Seconds between a node's checks of the store's history, by default (``IDMINT_HISTORY_CHECK_INTERVAL``;
:class:`app.storage.history.HistoryGuard`)."""


def _default_state_dir() -> Path:
    return Path(platformdirs.user_data_dir("idmint", appauthor=False))


class CoreSettings(BaseSettings):
    """idmint's own settings (serving, state, clock, etcd). Each field reads ``IDMINT_<FIELD>`` (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="IDMINT_", extra="ignore", validate_default=True)

    # -- serving --------------------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address `idmint serve` binds.")
    port: int = Field(8000, ge=0, le=65535, description="Port `idmint serve` binds (0..65535).")
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes for `idmint serve` (1..64).")
    max_count: int = Field(100_000, ge=1, le=10_000_000, description="Largest `count` for /v1/ids/{scheme}.")
    max_stream_count: int = Field(
        100_000_000, ge=1, le=10_000_000_000, description="Largest `count` for /v1/ids/{scheme}/stream."
    )
    max_sequences: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="How many sequences may exist (creating more is a 409); bounds the per-sequence metrics.",
    )
    access_log: bool = Field(False, description="uvicorn access log (off by default: it costs throughput).")
    log_format: Literal["text", "json"] = Field("text", description="Log line format: text or json.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")

    # -- limits and API keys (app/api/auth.py, app/api/front.py) --------------------------------------------
    max_body_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description="Largest request body in bytes; larger bodies are refused with 413 before they are read.",
    )
    max_concurrent_streams: int = Field(
        16,
        ge=1,
        le=10_000,
        description="Streams this node serves at once; more are answered 429 + Retry-After (with --workers N, "
        "each worker serves N-th of them, at least one).",
    )
    max_stream_seconds: float = Field(
        300.0,
        gt=0,
        description="Longest a stream may take at its scheme's cap (count / IDs per second); longer "
        "ones are refused up front with 422 naming the figure.",
    )
    stream_send_timeout: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds a response (a batch, a single ID, a stream) may wait for its client to take any of "
        "its bytes, until its last byte is taken; then the connection is reset and a stream's slot freed.",
    )
    max_header_bytes: int = Field(
        64 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest request headers (request line and fields) in bytes; larger ones are answered 431.",
    )
    header_timeout: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds a request's headers may take to arrive after its first byte; then 408 and the "
        "connection is closed.",
    )
    body_timeout: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds a request's body may take to arrive after its headers; then 408 and the connection is "
        "closed.",
    )
    max_connections_per_client: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Connections one client address may hold open at once (per worker process); more are answered "
        "429 and closed as they are accepted.",
    )
    fd_reserve: int = Field(
        64,
        ge=16,
        le=1_000_000,
        description="File descriptors kept from client connections for the node's own files (high-water marks, "
        "state and lock files, backend connections): connections beyond the open-file limit (RLIMIT_NOFILE) less "
        "this reserve and those open at start are answered 503 and closed as they are accepted.",
    )
    keep_alive_timeout: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Seconds an idle connection (fresh, or kept alive after a response) stays open.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="TOML file of API keys, scopes and quotas (docs/api-keys.md); unset = no keys, "
        "every route open. Re-read on SIGHUP.",
    )
    public_id_keys_file: Path | None = Field(
        None,
        description="TOML file of the keys that mask public IDs (format=public; docs/public-ids.md); unset = "
        "format=public and /v1/public are refused (422). Re-read on SIGHUP.",
    )
    public_scopes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="With API keys on: comma-separated scopes that need no key (e.g. decode, for the decode page).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated origins (scheme://host[:port]) whose browser pages may call the API: their "
        "preflights (OPTIONS) are answered and every answer to them carries the CORS headers (the API key's "
        "Authorization header allowed); unset = none.",
    )

    # -- node identity: embedded backend --------------------------------------------------------------------
    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description="Embedded lease backend: directory for identity locks and high-water marks.",
    )

    # -- fleets and regions (app/schemes/pool.py, app/issuing/fleet.py) -------------------------------------
    regions: int = Field(
        1,
        ge=1,
        le=256,
        description="How many regions (fleets that share no lease backend) slice every leased identity space "
        "(1..256); each fleet sets its own IDMINT_REGION.",
    )
    region: int = Field(
        0, ge=0, le=255, description="This fleet's region, 0..IDMINT_REGIONS-1: it claims only inside that slice."
    )
    # -- backfill: IDs at past times (app/issuing/backfill.py) --------------------------------------------
    backfill_identities: int = Field(
        0,
        ge=0,
        le=4096,
        description="How many identities at the top of each region's slice live issue leaves to backfill (snowflake "
        "worker IDs, eight-byte generator IDs); 0 = backfill of those schemes is off. Every replica must agree.",
    )
    backfill_min_age: int = Field(
        60,
        ge=0,
        le=86_400,
        description="Seconds: a backfill time must be at least this old (newer times are live issue's window).",
    )
    peer_fleets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated base URLs of idmint servers in other fleets (http://host:8000,...): schemes "
        "whose identities overlap a peer fleet's are not ready.",
    )
    peer_check_interval: float = Field(
        5.0, gt=0, le=3600, description="Seconds between checks of each IDMINT_PEER_FLEETS server."
    )

    # -- clock --------------------------------------------------------------------------------------------
    max_clock_wait: float = Field(
        5.0,
        ge=0,
        le=300,
        description="Seconds a node waits for its clock to pass a claimed identity's high-water mark before "
        "refusing that identity and claiming another; also the longest a request waits on the clock (past it: 503).",
    )

    clock_offset_ms: int = Field(
        0,
        description="Test hook: shifts this node's clock by this many ms (fault-injection tests). Leave 0.",
    )

    # -- claim ledger -------------------------------------------------------------------------------------
    ledger_days: float = Field(
        30.0,
        gt=0,
        le=3650,
        description="Days the claim ledger keeps a claim after it ended (who issued an ID, answered on decode).",
    )
    drain_timeout: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds POST /v1/admin/drain waits for in-flight ID requests before releasing the claims.",
    )

    # -- networked storage: leases (etcd or PostgreSQL) -----------------------------------------------------
    lease_ttl: int = Field(
        10,
        ge=2,
        le=3600,
        validation_alias=AliasChoices("lease_ttl", "etcd_lease_ttl", "idmint_lease_ttl", "idmint_etcd_lease_ttl"),
        description="Lease TTL in seconds (2..3600) on etcd or PostgreSQL; alias IDMINT_ETCD_LEASE_TTL.",
    )
    lease_safety_margin: float = Field(
        2.0,
        ge=0,
        validation_alias=AliasChoices(
            "lease_safety_margin", "etcd_safety_margin", "idmint_lease_safety_margin", "idmint_etcd_safety_margin"
        ),
        description="Seconds before the lease could expire at which the node stops issuing (fail closed); "
        "alias IDMINT_ETCD_SAFETY_MARGIN.",
    )

    # -- etcd backend --------------------------------------------------------------------------------------
    etcd_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated etcd URLs (http://host:2379,...); empty = embedded backend.",
    )
    etcd_namespace: str = Field("unique-id-generator/", description="etcd key prefix.")
    etcd_connect_timeout: float = Field(3.0, gt=0, description="Seconds to wait for an etcd connection.")
    etcd_request_timeout: float = Field(2.0, gt=0, description="Seconds to wait for one etcd request.")
    etcd_ca_cert: Path | None = Field(None, description="CA bundle for TLS to etcd.")
    etcd_cert_cert: Path | None = Field(None, description="Client certificate for TLS to etcd.")
    etcd_cert_key: Path | None = Field(None, description="Client key for TLS to etcd.")
    etcd_user: str | None = Field(None, description="etcd auth user.")
    etcd_password: str | None = Field(None, description="etcd auth password.")

    # -- PostgreSQL backend ----------------------------------------------------------------------------------
    postgres_url: SecretStr | None = Field(
        None,
        description="PostgreSQL connection string (a libpq URI or key=value string; TLS, password and sslmode as "
        "libpq reads them); set = the PostgreSQL backend. Never shown unredacted.",
    )
    postgres_schema: str = Field(
        "idmint",
        description="Schema idmint's tables live in (created at start when absent; `idmint storage sql` prints "
        "the DDL).",
    )
    postgres_pool_size: int = Field(
        1,
        ge=1,
        le=100,
        description="Connections each process keeps to PostgreSQL for sequences and the ledger (1..100), beside the "
        "lease's own one: 2 in all by default, so 48 replicas fit a default max_connections of 100.",
    )
    postgres_connect_timeout: float = Field(3.0, gt=0, le=60, description="Seconds to open a PostgreSQL connection.")
    postgres_statement_timeout: float = Field(
        2.0, gt=0, le=60, description="Seconds one PostgreSQL statement may take (server and client side)."
    )

    # -- MySQL/MariaDB backend ------------------------------------------------------------------------------
    mysql_url: SecretStr | None = Field(
        None,
        description="MySQL or MariaDB URL, mysql://user:password@host:port/database; set = the MySQL backend (its "
        "tables are created in that database at start when absent). Never shown unredacted.",
    )
    mysql_connect_timeout: float = Field(3.0, gt=0, le=60, description="Seconds to open a MySQL connection.")
    mysql_statement_timeout: float = Field(
        2.0, gt=0, le=60, description="Seconds one MySQL statement may take (server and client side)."
    )
    mysql_pool_size: int = Field(
        1,
        ge=1,
        le=100,
        description="Connections each process keeps to MySQL for sequences and the ledger (1..100), beside the "
        "lease's own one.",
    )

    history_check_interval: float = Field(
        HISTORY_CHECK_INTERVAL_S,
        gt=0,
        le=3600,
        description="Seconds between a node's checks of the store's history against the fleet's record (a restored "
        "backup under a running node is refused within about this; a fence is taken up within it).",
    )
    storage_accept_timeline_change: bool = Field(
        False,
        description="Accept a new PostgreSQL timeline without a fence (`idmint storage fence`): set it only for a "
        "planned promotion of a synchronous standby (a point-in-time recovery also starts a new timeline). The WAL "
        "position must still be at or above what the fleet saw.",
    )

    @field_validator("etcd_endpoints", "peer_fleets", "public_scopes", "cors_origins", mode="before")
    @classmethod
    def _split_lists(cls, value: object) -> object:
        """A comma-separated environment value -> its non-empty, stripped items."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("etcd_endpoints")
    @classmethod
    def _check_endpoints(cls, value: list[str]) -> list[str]:
        for url in value:
            rest = _http_url("etcd_endpoints", url)
            if "@" in rest.partition("/")[0]:
                raise ValueError(
                    f"etcd_endpoints must not carry a user or password ({_redacted(url)!r}): "
                    "set IDMINT_ETCD_USER and IDMINT_ETCD_PASSWORD instead"
                )
        return value

    @field_validator("peer_fleets")
    @classmethod
    def _check_peers(cls, value: list[str]) -> list[str]:
        for url in value:
            if "@" in _http_url("peer_fleets", url).partition("/")[0]:
                raise ValueError(f"peer_fleets must not carry a user or password ({_redacted(url)!r})")
        return [url.rstrip("/") for url in value]

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(f"cors_origins must be origins like https://app.example:8443, got {origin!r}")
        return [origin.lower() for origin in value]

    @field_validator("public_scopes")
    @classmethod
    def _check_scopes(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in SCOPES]
        if unknown:
            raise ValueError(f"public_scopes must be among {', '.join(SCOPES)}, got {', '.join(unknown)}")
        return value

    @field_validator("postgres_schema")
    @classmethod
    def _check_schema(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
            raise ValueError(
                f"postgres_schema must be a lowercase SQL identifier (a-z, 0-9 and _, not starting with a digit, at "
                f"most 63 characters), got {value[:80]!r}"
            )
        return value

    @field_validator("etcd_namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if value and not value.endswith("/"):
            value += "/"
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> CoreSettings:
        chosen = [
            name
            for name, given in (
                ("IDMINT_ETCD_ENDPOINTS", bool(self.etcd_endpoints)),
                ("IDMINT_POSTGRES_URL", self.postgres_url is not None),
                ("IDMINT_MYSQL_URL", self.mysql_url is not None),
            )
            if given
        ]
        if len(chosen) > 1:
            raise ValueError(
                f"{', '.join(chosen[:-1])} and {chosen[-1]} are {'both' if len(chosen) == 2 else 'all'} set: idmint "
                "keeps its state in one backend; unset all but one"
            )
        if chosen and self.lease_safety_margin >= self.lease_ttl / 2:
            raise ValueError(
                f"lease_safety_margin must be less than half of lease_ttl ({self.lease_ttl / 2:g} s), "
                f"got {self.lease_safety_margin:g}"
            )
        if self.region >= self.regions:
            raise ValueError(
                f"IDMINT_REGION must be in 0..{self.regions - 1} (IDMINT_REGIONS={self.regions}), got {self.region}"
            )
        if (self.etcd_cert_cert is None) != (self.etcd_cert_key is None):
            raise ValueError("etcd_cert_cert and etcd_cert_key must be set together")
        if (self.etcd_user is None) != (self.etcd_password is None):
            raise ValueError("etcd_user and etcd_password must be set together")
        return self


def _http_url(name: str, url: str) -> str:
    """``url`` after its ``http://`` or ``https://``; ValueError naming setting ``name`` for anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https") or not rest:
        raise ValueError(f"{name} must be http:// or https:// URLs, got {_redacted(url)!r}")
    return rest


def _redacted(url: str) -> str:
    """``url`` with any user info replaced by ``***`` (never show a password, not even in an error)."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{sep}{authority}{slash}{path}"


def _compose() -> type[CoreSettings]:
    from app.schemes import schemes

    models = tuple(dict.fromkeys(s.settings_model for s in schemes().values() if s.settings_model is not None))
    # Bases in reverse so the fields come in the order: CoreSettings, then the schemes in registry order.
    return type(
        "Settings",
        (*reversed(models), CoreSettings),
        {
            "__module__": __name__,
            "__doc__": "idmint configuration: :class:`CoreSettings` plus every scheme's settings model. Each field "
            "reads ``IDMINT_<FIELD>`` (case-insensitive).",
        },
    )


if TYPE_CHECKING:
    Settings = CoreSettings
else:
    Settings = _compose()
"""The composed settings class (a :class:`CoreSettings` with every scheme's fields)."""


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment (plus ``overrides``); raise ConfigError stating every broken rule."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            bounds = _bounds(loc)
            if err["type"] in _RANGE_ERRORS and bounds is not None:
                msg = f"{loc} must be {bounds}, got {err.get('input')!r}"
            if loc in ("etcd_password", "postgres_url", "mysql_url"):
                msg = msg.replace(str(err.get("input")), "***")
            problems.append(f"IDMINT_{loc.upper()}: {msg}" if loc else msg)
        raise ConfigError("invalid settings: " + "; ".join(problems)) from exc


_RANGE_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}


def _bounds(name: str) -> str | None:
    """The field's range in words (``in 0..15``; ``more than 0 and at most 3600`` for an open lower bound)."""
    field = Settings.model_fields.get(name)
    if field is None:
        return None
    low = high = above = None
    for meta in field.metadata:
        low = getattr(meta, "ge", None) if getattr(meta, "ge", None) is not None else low
        above = getattr(meta, "gt", None) if getattr(meta, "gt", None) is not None else above
        high = getattr(meta, "le", None) if getattr(meta, "le", None) is not None else high
    if above is not None:
        return f"more than {above}" + ("" if high is None else f" and at most {high}")
    if low is None and high is None:
        return None
    return f"in {'' if low is None else low}..{'' if high is None else high}"
