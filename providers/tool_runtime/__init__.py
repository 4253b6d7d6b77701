"""Providers of the tool_runtime API: the Responses API's server-side tools, one per tool type."""
