"""The sandboxes API's contract (see protocol)."""
