"""The Containers API: sandboxes with files, for code_interpreter, created and read by id."""
