"""The MCP tool runtime's run.yaml config."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["McpConfig", "McpServerConfig"]


class McpServerConfig(BaseModel):
    """An MCP server the operator names, which requests use by `server_label` (or `connector_id`)
    without giving its URL or credentials."""

    model_config = ConfigDict(extra="forbid")

    server_label: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    server_url: str = Field(pattern=r"^https?://")
    server_description: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    authorization: str | None = None
    """Sent as `Authorization: Bearer <token>`."""
    connector_id: str | None = None
    """A `connector_id` requests may name this server by (e.g. `connector_googledrive`)."""
    require_approval: Literal["always", "never"] | dict[str, Any] | None = None
    """The approval policy of requests that do not give one (OpenAI's default: always)."""
    allowed_tools: list[str] | None = None
    """The only tools requests may use on this server (each request may narrow it further)."""


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: list[McpServerConfig] = Field(default_factory=list)
    allow_request_urls: bool = True
    """Whether a request may name a `server_url` of its own (else only the servers above)."""
    default_require_approval: Literal["always", "never"] = "always"
    """The approval policy of a request's own `server_url` when the request gives none: `always`
    (OpenAI's default) or `never` (OGX's, for clients migrating from it). A request's own
    `require_approval` wins; the servers above keep theirs."""
    allow_private: list[str] = Field(default_factory=list)
    """Hosts, addresses and networks (`10.0.0.0/8`) a request's `server_url` may reach although they
    are not public. Empty: request URLs reach the public internet only (the servers above are
    trusted and may be anywhere)."""
    list_cache_s: float = Field(default=30.0, ge=0)
    """How long a server's tool list is reused within this process (0: list every time)."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    list_timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait for a server's session to open and its tools to be listed."""
    call_timeout_s: float = Field(default=120.0, gt=0)
    """Longest wait for a tool call's result; a call that takes longer fails (its item, not the response)."""
    session_idle_s: float = Field(default=300.0, ge=0)
    """How long a session with an MCP server is kept for later responses once idle (0: one
    session per response)."""
    max_connections: int = Field(default=64, ge=1)
    """Connections open at once to each MCP server's host."""

    @field_validator("servers")
    @classmethod
    def _unique(cls, servers: list[McpServerConfig]) -> list[McpServerConfig]:
        labels = [server.server_label for server in servers]
        connectors = [server.connector_id for server in servers if server.connector_id]
        for name, values in (("server_label", labels), ("connector_id", connectors)):
            twice = sorted({value for value in values if values.count(value) > 1})
            if twice:
                raise ValueError(f"{name} {twice[0]!r} is used by two servers")
        return servers
