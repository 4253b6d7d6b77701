"""The tool_runtime API's contract: a server-side tool type of the Responses API (`protocol`),
the citations its results carry (`citations`), and what the `web_search` tool asks of a search
engine (`web_search`)."""
