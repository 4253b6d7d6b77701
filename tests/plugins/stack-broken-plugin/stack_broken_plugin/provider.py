"""Fails at import, as a plugin does whose dependency is not installed."""

import a_dependency_that_is_not_installed  # noqa: F401
