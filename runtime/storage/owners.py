"""Who holds a lease: an id naming this process, and whether the process an id names is gone.

Leases (a response being produced, a file being ingested) lapse when their holder stops renewing
them, which is the only sign of death another machine has. On the holder's own machine there is a
quicker one: the id names the host, the pid and the process's start time (from /proc), so a
restarted server sees at once that the process holding a lease is gone (a pid reused since, as
in a container restarted as pid 1, has another start time) and takes its work over at start-up
instead of one lease later. Where /proc is missing, only the lease tells.
"""

from __future__ import annotations

import os
import socket

__all__ = ["owner_is_gone", "process_owner"]

_owner: tuple[int, str] | None = None


def process_owner() -> str:
    """`host:pid:start` of this process (recomputed in a forked child)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}")
    return _owner[1]


def owner_is_gone(owner: str | None) -> bool:
    """True only when `owner` names a process of this host that is not running any more."""
    if not owner:
        return False
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or parts[2] == "?" or owner == process_owner():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    running = _start_time(pid)
    if running is None and not os.path.exists("/proc/self/stat"):
        return False  # no /proc here: nothing to tell by
    return running != parts[2]


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count from its end.
    fields = data[data.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else None
