"""Random identifiers (`resp_...`, `msg_...`, request ids) from the OS's CSPRNG, read in blocks.

`secrets.token_hex` makes one `os.urandom` system call per id; at a few ids per request that
showed up as 6 % of a stored response's CPU. Slicing a 4 KiB block read once is as unpredictable
and costs a slice."""

from __future__ import annotations

import os
import threading

__all__ = ["random_hex"]

_BLOCK = 4096
_lock = threading.Lock()
_pool = b""
_offset = 0


def random_hex(nbytes: int) -> str:
    """`nbytes` random bytes as hex, like `secrets.token_hex(nbytes)`."""
    global _pool, _offset
    with _lock:
        if _offset + nbytes > len(_pool):
            _pool, _offset = os.urandom(max(_BLOCK, nbytes)), 0
        chunk = _pool[_offset:_offset + nbytes]
        _offset += nbytes
    return chunk.hex()


def _forget_after_fork() -> None:
    # A forked child must not hand out the ids its parent is about to.
    global _pool, _offset
    _pool, _offset = b"", 0


os.register_at_fork(after_in_child=_forget_after_fork)
