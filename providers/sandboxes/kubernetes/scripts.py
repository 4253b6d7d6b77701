"""The small programs the backend execs in a sandbox's pod, each given to the image's Python by
`-c`, so the image needs nothing of ours. They run in the container's working directory,
/mnt/data, as the sandbox's user, and say what went wrong by their exit code: 2 no such file,
3 not a regular file (a directory, a link, a device). Paths come from `split_path`: relative, no
`..`. A link the code made is refused rather than followed, as the other backends do, though here
it could only lead to the pod's own files.
"""

from __future__ import annotations

import json

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.protocol import SandboxFile
from providers.sandboxes.kubernetes.exec import Completed

__all__ = ["BOOT", "DELETE", "KILL", "LIST", "READ", "WRITE", "check_exit", "listing"]

BOOT = """import os, sys
try:
    os.setsid()
except PermissionError:
    pass
os.write(1, os.getpgrp().to_bytes(4, "big"))
source = sys.argv.pop(1)
exec(compile(source, "kernel.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""
"""Starts the driver (given as the next argument) as the leader of a process group of its own, and
first says that group's id (4 bytes on stdout): Kubernetes cannot kill an exec, so `KILL` does."""

KILL = """import os, signal, sys
group = int(sys.argv[1])
if group > 1:
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""

_OPEN = """import os, stat, sys
def regular(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        sys.exit(2)
    if not stat.S_ISREG(info.st_mode):
        sys.exit(3)
"""

READ = _OPEN + """regular(sys.argv[1])
with open(sys.argv[1], "rb") as handle:
    while chunk := handle.read(1 << 20):
        sys.stdout.buffer.write(chunk)
"""

DELETE = _OPEN + """regular(sys.argv[1])
os.unlink(sys.argv[1])
"""

WRITE = """import json, os, sys
path, size = sys.argv[1], int(sys.argv[2])
data = bytearray()
while len(data) < size:
    chunk = os.read(0, min(size - len(data), 1 << 20))
    if not chunk:
        sys.exit(4)
    data += chunk
parent = os.path.dirname(path)
try:
    if parent:
        os.makedirs(parent, exist_ok=True)
    for depth in range(1, path.count("/") + 1):
        if os.path.islink("/".join(path.split("/")[:depth])):
            sys.exit(3)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
except OSError:
    sys.exit(3)
with os.fdopen(fd, "wb") as out:
    out.write(data)
    out.flush()
    info = os.fstat(out.fileno())
print(json.dumps([info.st_size, info.st_mtime_ns]))
"""

LIST = """import json, os, stat
found = []
for directory, _, names in os.walk("."):
    for name in names:
        full = os.path.join(directory, name)
        info = os.lstat(full)
        if stat.S_ISREG(info.st_mode):
            found.append([os.path.relpath(full, "."), info.st_size, info.st_mtime_ns])
print(json.dumps(found))
"""


def check_exit(done: Completed, path: str) -> Completed:
    """The command's result, or the error its exit code says."""
    if done.exit_code == 2:
        raise NotFoundError(f"No such file in the sandbox: {path!r:.200}", param="path", code="not_found")
    if done.exit_code == 3:
        raise InvalidRequestError(f"{path!r:.200} is not a regular file (or goes through a link).", param="path",
                                  code="invalid_value")
    if done.exit_code != 0:
        raise RuntimeError(f"a file command in the sandbox failed ({done.exit_code}): "
                           f"{done.stderr.decode(errors='replace')[-300:]}")
    return done


def listing(done: Completed) -> list[SandboxFile]:
    files = [SandboxFile(str(path), int(size), int(modified)) for path, size, modified in json.loads(check_exit(done, ".").stdout)]
    return sorted(files, key=lambda file: file.path)
