"""Helpers shared by the test suite (importable because pyproject puts tests/ on sys.path)."""
