"""The Batch API's routes."""
