"""The built-in batches provider."""
