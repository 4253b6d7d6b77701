"""The containers API's contract (see protocol)."""
