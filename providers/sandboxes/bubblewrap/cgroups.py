"""A pids cgroup per sandbox: what stops a fork bomb when the server runs as root.

RLIMIT_NPROC does not: it counts the processes of the *real* uid, and inside bwrap's user
namespace that is still the server's uid. Measured on the project's machine (kernel 6.18, bwrap
0.8, server as root): with RLIMIT_NPROC at 64 set inside the sandbox, a loop forked 500 children
unhindered; with `pids.max` at 64 on a cgroup of its own it stopped at 61 (EAGAIN). For a server
that is not root, RLIMIT_NPROC holds but counts every process of that user, the server's too, so
a bomb could starve the server of forks: the cgroup is the limit, RLIMIT_NPROC only a fallback.

The cgroup is made under the server's own cgroup of the pids controller (v1:
`/sys/fs/cgroup/pids/<own path>`; v2: `/sys/fs/cgroup/<own path>` with `pids` in its
`cgroup.subtree_control`). The sandbox's first process joins it before it execs bwrap (a shell
writes its pid to `cgroup.procs`), so every process of the sandbox is in it from the start.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

__all__ = ["PidsCgroups"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_pids_cgroup() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return _CGROUP_ROOT / "pids" / path.lstrip("/")
    for line in lines:
        if line.startswith("0::"):
            return _CGROUP_ROOT / line[3:].lstrip("/")
    return None


class PidsCgroups:
    """Makes and removes `stack-sandbox-<id>` cgroups; `base` is None where none can be made."""

    def __init__(self, base: Path | None) -> None:
        self.base = base

    @classmethod
    def find(cls) -> PidsCgroups:
        """The server's own pids cgroup, if a child of it can be made and limited here."""
        base = _own_pids_cgroup()
        if base is None:
            return cls(None)
        probe = base / f"stack-sandbox-probe-{os.getpid()}"
        try:
            probe.mkdir()
            try:
                (probe / "pids.max").write_text("8")
            finally:
                probe.rmdir()
        except OSError:
            return cls(None)
        return cls(base)

    def make(self, name: str, max_processes: int) -> Path | None:
        """A cgroup whose processes number at most `max_processes`; None if there are no cgroups here."""
        if self.base is None:
            return None
        path = self.base / f"stack-sandbox-{name}"
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        (path / "pids.max").write_text(str(max_processes))
        return path

    def remove(self, path: Path | None) -> None:
        """Kill what is left in it (a child the kernel's death did not take), then remove it."""
        if path is None:
            return
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
        for _ in range(50):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # its last processes are still being reaped
