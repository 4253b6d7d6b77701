"""The built-in containers provider (`builtin`): records in the `containers` store, each container a
sandbox of the configured sandboxes backend (contract.sandboxes.protocol)."""
