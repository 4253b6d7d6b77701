"""A lease holder's id names its process; a process of this host that is gone is known at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from runtime.storage.owners import owner_is_gone, process_owner


def test_this_process_and_other_hosts_are_never_taken_for_gone() -> None:
    assert process_owner().startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert not owner_is_gone(process_owner())
    assert not owner_is_gone("another-host:1:1") and not owner_is_gone(None) and not owner_is_gone("garbage")


def test_a_process_that_exited_is_gone_and_a_reused_pid_is_not_its_process() -> None:
    child = subprocess.run([sys.executable, "-c", "from runtime.storage.owners import process_owner; print(process_owner())"],
                           capture_output=True, text=True, check=True, cwd=os.getcwd())
    assert owner_is_gone(child.stdout.strip())
    host, pid, start = process_owner().rsplit(":", 2)
    assert owner_is_gone(f"{host}:{pid}:{int(start) + 1}")  # this pid, started at another time: another process
