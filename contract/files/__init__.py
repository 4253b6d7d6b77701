"""The Files API's contract: what a files provider implements."""
