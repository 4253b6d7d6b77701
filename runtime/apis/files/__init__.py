"""The Files API: upload, list, read and delete files that other APIs use by id."""
