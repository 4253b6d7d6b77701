"""Real MCP servers for tests and benchmarks (see servers.py)."""
