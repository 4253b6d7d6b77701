"""Providers of the sandboxes API (`contract.sandboxes.protocol`): where code_interpreter's code runs."""
