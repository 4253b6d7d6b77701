"""The run.yaml schema.

Every model forbids unknown keys, so a typo is an error that names its YAML path rather than a
setting silently ignored. A provider's own `config` is kept as a plain mapping here and validated
against that provider's config model by the resolver (`builder.resolve`), which knows the spec.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from builder.models import ModelConfig

__all__ = [
    "BackendConfig",
    "CorsConfig",
    "ModelConfig",
    "PostgresBackend",
    "RecordingConfig",
    "ProviderEntry",
    "ServerConfig",
    "SqliteBackend",
    "StackConfig",
    "StorageConfig",
]

DEFAULT_PORT = 8321


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProviderEntry(_Strict):
    """One provider of one API, as listed under `providers.<api>`."""

    provider_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    provider_type: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)
    enabled_if_env: list[str] = Field(default_factory=list)
    """Environment variables that must all be set (non-empty) for this provider to be active.

    A provider whose variables are missing is reported as inactive at start-up, with the
    variables to set; its `config` is then not substituted, so it may use `${env.NAME}`."""


class SqliteBackend(_Strict):
    """An SQLite database file, the embedded default. Opened in WAL mode."""

    type: Literal["sqlite"]
    path: Path


class PostgresBackend(_Strict):
    """A PostgreSQL server, by DSN (`postgresql://user:pass@host:5432/db`)."""

    type: Literal["postgres"]
    dsn: str = Field(min_length=1)
    pool_size: int = Field(default=10, ge=1)
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300, description=(
        "How long opening a connection may take before the request that needed it is answered 503 (the server "
        "unreachable). asyncpg's own default, 60 s, would hold every request that long while the database is away"))
    command_timeout_s: float | None = Field(default=30.0, gt=0, description=(
        "How long one statement may take before the request is answered 503 and its connection dropped: what ends "
        "the wait when the network to the database drops packets (a partition, a failover that moves its address), "
        "where nothing would otherwise, ever. null: no limit. Creating and extending the tables at start-up is not "
        "limited (an index build, or another replica's)"))


BackendConfig = Annotated[SqliteBackend | PostgresBackend, Field(discriminator="type")]

STORE_NAMES = ("responses", "conversations", "chat_completions", "files", "vector_stores", "prompts", "batches", "containers", "metadata")


class StoresConfig(_Strict):
    """Which named backend each service keeps its records in."""

    responses: str = "default"
    conversations: str = "default"
    chat_completions: str = "default"
    files: str = "default"
    vector_stores: str = "default"
    prompts: str = "default"
    batches: str = "default"
    containers: str = "default"
    metadata: str = "default"


class StorageConfig(_Strict):
    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    stores: StoresConfig = Field(default_factory=StoresConfig)


class CorsConfig(_Strict):
    allow_origins: list[str] = Field(default_factory=lambda: ["*"])
    allow_methods: list[str] = Field(default_factory=lambda: ["*"])
    allow_headers: list[str] = Field(default_factory=lambda: ["*"])
    allow_credentials: bool = False


class ApiKeyConfig(_Strict):
    """One API key and the principal it stands for. Give the key's SHA-256 (`key_sha256`, so the
    file holds no secret) or the key itself (`key`, e.g. `${env.TEAM_A_KEY}`), hashed at start."""

    principal: str = Field(min_length=1)
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    key: str | None = Field(default=None, min_length=8)
    attributes: dict[str, Any] = Field(default_factory=dict)
    """What policies may read: e.g. `team`, `roles`."""

    @model_validator(mode="after")
    def _one_key(self) -> ApiKeyConfig:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key_sha256 (the key's SHA-256 in hex) or key")
        return self


class JwtConfig(_Strict):
    """Bearer tokens that are JWTs, checked against a JWKS URL or a static key."""

    jwks_url: str | None = None
    public_key: str | None = None
    """A PEM public key (RS/ES/EdDSA), or for HS256 the shared secret."""
    algorithms: list[str] = Field(default_factory=lambda: ["RS256"], min_length=1)
    issuer: str | None = None
    audience: str | None = None
    leeway_s: float = Field(default=30.0, ge=0)
    """Clock skew allowed on `exp`, `nbf` and `iat`."""
    principal_claim: str = "sub"
    attribute_claims: dict[str, str] = Field(default_factory=dict)
    """Principal attribute -> claim, e.g. `{team: org_id, roles: groups}`."""
    keys_cache_s: float = Field(default=300.0, gt=0)
    """How long keys fetched from `jwks_url` are kept (a token naming an unknown key fetches them again)."""
    cache_s: float = Field(default=60.0, ge=0, le=3600)
    """How long a token, once verified, is admitted again without its signature and claims checked anew
    (never past its `exp`); 0 checks them on every request."""
    timeout_s: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> JwtConfig:
        if (self.jwks_url is None) == (self.public_key is None):
            raise ValueError("give exactly one of jwks_url or public_key")
        return self


class HeaderAuthConfig(_Strict):
    """A principal named by a trusted gateway in front of the server (which must be the only way in)."""

    name: str = Field(default="x-forwarded-user", min_length=1)
    attribute_headers: dict[str, str] = Field(default_factory=dict)
    """Principal attribute -> header, e.g. `{team: x-forwarded-groups}`."""


class DelegateAuthConfig(_Strict):
    """The check delegated to an HTTP endpoint: `POST url` with `{"token": ...}`; a 200 answer
    `{"principal": ..., "attributes": {...}}` admits, a 401 or 403 refuses."""

    url: str = Field(min_length=1)
    timeout_s: float = Field(default=5.0, gt=0)
    cache_s: float = Field(default=30.0, ge=0)
    """How long an answer is reused for the same token."""


class QuotaLimits(_Strict):
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Tokens in and out, as upstreams report them (chat, responses, embeddings)."""


class QuotaConfig(QuotaLimits):
    """Per-principal limits, counted in fixed one-minute windows: in this process, or in Redis
    (`redis_url`) when replicas share them."""

    redis_url: str | None = None
    principals: dict[str, QuotaLimits] = Field(default_factory=dict)
    """Limits of their own for some principals (by id), over the defaults above."""


class DatabaseKeysConfig(_Strict):
    """API keys kept (as SHA-256 hashes) in the `metadata` store, made and revoked with `stack keys`."""

    cache_s: float = Field(default=5.0, ge=0, le=300)
    """How long a lookup is reused: a revoked key stops working within this time on every replica."""


ACTIONS = ("read", "update", "delete")
ACCESS_CONDITIONS = ("user in owners ATTRIBUTE", "user with VALUE in ATTRIBUTE")
_OWNERS_CONDITION = re.compile(r"^user in owners ([A-Za-z0-9_.-]+)$")
_WITH_CONDITION = re.compile(r"^user with (\S+) in ([A-Za-z0-9_.-]+)$")


def access_condition(text: str) -> tuple[str, str, str | None]:
    """`("owners", attribute, None)` or `("with", attribute, value)` for a policy's `when` condition."""
    text = " ".join(text.split())
    if (owners := _OWNERS_CONDITION.match(text)) is not None:
        return "owners", owners.group(1), None
    if (holds := _WITH_CONDITION.match(text)) is not None:
        return "with", holds.group(2), holds.group(1)
    raise ValueError(f"unknown condition {text!r}; expected one of: {'; '.join(ACCESS_CONDITIONS)}")


class PermitConfig(_Strict):
    actions: list[Literal["read", "update", "delete"]] = Field(min_length=1)
    principal: str | None = None
    """Only this principal is granted (any caller the conditions admit, when unset)."""


class AccessRule(_Strict):
    """One grant of `access_policy`, on objects of other owners (an owner may always do anything
    with its own). `when` conditions must all hold: `user in owners team` (the caller and the
    object's owner share a value of the attribute `team`), `user with admin in roles` (the
    caller's attribute `roles` holds `admin`)."""

    permit: PermitConfig
    when: list[str] = Field(default_factory=list)
    description: str | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _conditions(cls, when: Any) -> Any:
        conditions = [when] if isinstance(when, str) else when
        if isinstance(conditions, list):
            for condition in conditions:
                if isinstance(condition, str):
                    access_condition(condition)
        return conditions


class AuthConfig(_Strict):
    """Who may use the server. With any method configured, every route but health and version
    needs a principal; methods are tried in this order: api_keys, database_keys, jwt, delegate,
    header."""

    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    database_keys: DatabaseKeysConfig | None = None
    jwt: JwtConfig | None = None
    delegate: DelegateAuthConfig | None = None
    header: HeaderAuthConfig | None = None
    quotas: QuotaConfig | None = None
    access_policy: list[AccessRule] = Field(default_factory=list)
    """Grants that widen per-owner isolation (a team's objects readable by the team, an admin role)."""

    @model_validator(mode="after")
    def _some_method(self) -> AuthConfig:
        if not (self.api_keys or self.database_keys or self.jwt or self.delegate or self.header):
            raise ValueError("configure at least one of api_keys, database_keys, jwt, delegate or header (or leave auth out)")
        return self


class MetricsConfig(_Strict):
    """Prometheus metrics at `path` (off unless configured)."""

    path: str = Field(default="/metrics", pattern=r"^/[A-Za-z0-9_./-]*$")
    open: bool = False
    """Served without credentials when auth is on (for a scraper inside the network)."""


class TracingConfig(_Strict):
    """OpenTelemetry traces (off unless configured): a span per request, with child spans for model
    calls, tool calls and store transactions, after the GenAI semantic conventions."""

    exporter: Literal["otlp", "console", "memory"] = "otlp"
    """otlp: OTLP over HTTP to `otlp_endpoint` (else the SDK's OTEL_EXPORTER_OTLP_* variables);
    memory: kept in the process (tests, the library client)."""
    otlp_endpoint: str | None = None
    service_name: str = Field(default="stack", min_length=1)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    capture_content: bool = False
    """Record prompts and completions on model call spans (they may hold personal data)."""


class UsageConfig(_Strict):
    """Usage over time (off unless configured): each principal's requests, tokens and errors per
    model, minute by minute, in the `metadata` store, for the console's usage charts."""

    retention_days: int = Field(default=90, ge=1, le=3660)
    """Counts older than this are deleted (by the minute they are kept two days at most, by the
    hour eight, by the day this long)."""
    flush_s: float = Field(default=10.0, gt=0, le=3600)
    """How often a process writes the counts it added up; what it counted last shows this much later."""


class LoggingConfig(_Strict):
    """Structured logs (off unless configured: plain text, no per-request context)."""

    format: Literal["json", "text", "console"] = "json"
    """json: one object per line; text: the plain layout with the context as key=value pairs;
    console: for a person at a terminal, the time and the message, an access line as
    `12:04:31 POST /v1/chat/completions 200 1.42 s local/smollm2-135m-instruct`."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True
    """One line per request: method, path, status, duration, principal, model."""


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    cors: CorsConfig | None = None
    max_request_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Requests whose body is larger are refused with a 413."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Requests whose head (request line and headers) is larger are refused with a 431."""
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """A request's head must arrive within this time of its first byte (else a 408), and a new
    connection must begin one within it (else it is closed)."""
    body_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """While a request's body arrives, the most time between two of its reads (else a 408)."""
    keep_alive_timeout_s: float = Field(default=5.0, gt=0, le=3600)
    """An idle keep-alive connection (its last answer sent, no new request begun) is closed after
    this long. Behind a load balancer, set it above the balancer's own idle timeout, so the
    balancer never sends a request on a connection the server is closing."""
    workers: int = Field(default=1, ge=1, le=64)
    """Server processes sharing the port (`stack run --workers N` overrides): each runs the whole
    stack; they share state through the storage (runtime/server/workers.py)."""
    shutdown_grace_s: int = Field(default=30, ge=0, le=3600)
    """On SIGTERM/SIGINT: how long requests and streams under way may take to finish (new ones
    are refused meanwhile) before the rest are ended."""
    auth: AuthConfig | None = None
    """Off (anyone who reaches the port is served) unless configured."""
    metrics: MetricsConfig | None = None
    tracing: TracingConfig | None = None
    logging: LoggingConfig | None = None
    usage: UsageConfig | None = None
    console: bool = False
    """The web console at /console (a playground, the stored objects, the server's state); off by
    default, on in the starter. Nothing of it is loaded until its first request."""


RECORDING_MODES = ("live", "record", "replay", "record-if-missing")


class RecordingConfig(_Strict):
    """Record-replay of every upstream HTTP exchange (see runtime/recording/).

    Unset fields come from STACK_RECORDING_MODE (default `live`) and STACK_RECORDINGS_DIR
    (default `recordings`, relative to the working directory)."""

    mode: Literal["live", "record", "replay", "record-if-missing"] | None = None
    directory: Path | None = None
    providers: dict[str, Literal["live", "record", "replay", "record-if-missing"]] = Field(default_factory=dict)
    """Modes for some providers, by provider_id, over `mode` (e.g. a test stack whose model
    answers are replayed while its tools reach MCP servers the tests run)."""


class StackConfig(_Strict):
    """A whole run.yaml."""

    version: Literal[1] = 1
    name: str = Field(default="stack", min_length=1)
    apis: list[str] | None = None
    """The APIs whose routes are served; defaults to every API that has a provider. A provider
    of an API not listed here still runs, as a dependency of the served ones."""
    providers: dict[str, list[ProviderEntry]] = Field(default_factory=dict)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    models: list[ModelConfig] = Field(default_factory=list)
    server: ServerConfig = Field(default_factory=ServerConfig)
    recording: RecordingConfig = Field(default_factory=RecordingConfig)
    state_dir: Path | None = None
    """Where providers keep local state; defaults to ~/.stack/<name> (or $STACK_STATE_DIR/<name>)."""

    @field_validator("providers")
    @classmethod
    def _unique_provider_ids(
        cls, providers: dict[str, list[ProviderEntry]]
    ) -> dict[str, list[ProviderEntry]]:
        for api, entries in providers.items():
            seen: set[str] = set()
            for entry in entries:
                if entry.provider_id in seen:
                    raise ValueError(f"provider_id {entry.provider_id!r} is used twice under {api}")
                seen.add(entry.provider_id)
        return providers
