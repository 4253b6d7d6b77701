"""The Batch API's contract."""
