"""The tool_runtime API: server-side tools of the Responses API, one provider per tool type."""
