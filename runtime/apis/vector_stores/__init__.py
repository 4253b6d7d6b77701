"""The Vector stores API: stores of chunked, indexed files, searched directly or by `file_search`."""
