"""The `mcp` tool of the Responses API: remote MCP servers, as OpenAI defines the tool.

`runtime` (the provider: checks, sessions, the tool-list cache), `session` (one response's
servers: listing, approvals, calls), `client` (connections through the `mcp` SDK), `items`
(the item shapes and how they read to the model), `config` (run.yaml).
"""

from providers.tool_runtime.mcp.runtime import MCP

__all__ = ["MCP"]
