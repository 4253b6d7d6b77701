"""At start, proof that the isolation holds on this host: a real sandbox, and code that tries.

Reading the kernel's config is not proof (a kernel can disable user namespaces, an LSM can refuse
bwrap's mounts, a container runtime can hide /proc); running a probe is. It checks that the code
runs as uid 65534, reaches no listener of the host's loopback nor any outside address, and sees no
file of the server's state directory; any other result refuses the provider's start.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

from providers.sandboxes.bubblewrap.backend import BubblewrapSandboxes

__all__ = ["ALTERNATIVES", "IsolationError", "verify_isolation"]

ALTERNATIVES = ("Where bubblewrap cannot isolate, use the `docker` sandboxes provider instead "
                "(providers: sandboxes: provider_type: docker).")

_PROBE = """
import json, os, socket
found = {"uid": os.getuid()}
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False
found["loopback"] = reach("127.0.0.1", %(port)d)
found["outside"] = reach("1.1.1.1", 53)
found["host_file"] = os.path.exists(%(marker)r)
print(json.dumps(found))
"""


class IsolationError(RuntimeError):
    """The sandbox does not isolate here: the provider must not start."""


def find_bwrap() -> str:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationError("the `bwrap` command (bubblewrap) is not installed: install it (Debian, Ubuntu: "
                             "`apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`). " + ALTERNATIVES)
    return bwrap


async def verify_isolation(backend: BubblewrapSandboxes, state_dir: Path) -> None:
    """Run code in a probe sandbox; raise `IsolationError` naming each check that failed."""
    state_dir.mkdir(parents=True, exist_ok=True)
    listener = socket.create_server(("127.0.0.1", 0))
    marker = tempfile.NamedTemporaryFile(dir=state_dir, prefix="sandbox-probe-", delete=False)
    marker.close()
    sandbox_id = f"probe-{os.getpid()}"
    try:
        await backend.create(sandbox_id, min(backend.max_memory_bytes, 1 << 30))
        try:
            output = await backend.run(sandbox_id, _PROBE % {"port": listener.getsockname()[1], "marker": marker.name})
        except RuntimeError as error:
            raise IsolationError(f"a sandbox could not be started here: {error}. Are user namespaces enabled "
                                 "(sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces)? " + ALTERNATIVES) from None
    finally:
        await backend.destroy(sandbox_id)
        listener.close()
        os.unlink(marker.name)
    _judge(output.logs, output.status)


def _judge(logs: str, status: str) -> None:
    try:
        found = json.loads(logs.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise IsolationError(f"the isolation probe did not run ({status}): {logs[-500:]} " + ALTERNATIVES) from None
    failed = []
    if found.get("uid") != 65534:
        failed.append(f"its code runs as uid {found.get('uid')}, not 65534")
    if found.get("loopback"):
        failed.append("its code reached a listener on the host's 127.0.0.1")
    if found.get("outside"):
        failed.append("its code reached an outside address (1.1.1.1:53)")
    if found.get("host_file"):
        failed.append("its code saw a file of the server's state directory")
    if failed:
        raise IsolationError("the bubblewrap sandbox does not isolate on this host: " + "; ".join(failed) + ". " + ALTERNATIVES)
