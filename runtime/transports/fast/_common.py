"""What several modules of the fast transport share."""

from __future__ import annotations


class StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any response byte: safe to retry."""
