"""The `bwrap` command line of one sandbox: what its kernel sees of the host, and nothing more.

The new root is empty (a tmpfs of bwrap's) and gets, read-only: /usr (and /bin, /lib, /lib64,
/sbin as the host has them: links into /usr on a merged-/usr system), the runtime venv, the
installation its interpreter comes from (`sys.base_prefix`, when outside /usr), and the kernel
driver. Read-write: the sandbox's own data directory at /mnt/data, and a private, size-limited
tmpfs at /tmp. No /etc, no home, no state directory, no /work: a path the sandbox is not given
does not exist in it. `--unshare-all` gives it its own user, PID, network (loopback only, and
not the host's), IPC, UTS and mount namespaces; `--uid 65534` and `--cap-drop ALL` leave it no
capability even inside them; `--clearenv` drops the server's environment (its keys) before
the few variables below are set; `--new-session` keeps it off the server's terminal (TIOCSTI);
`--die-with-parent` ends it if the server dies.

A sandbox whose container allows domains gets no more network than that: its proxy's Unix socket
is bound in at PROXY_SOCKET (the kernel driver forwards 127.0.0.1:PROXY_PORT to it), the proxy
variables name that port, and the host's CA certificates (public, read-only) are bound so that
HTTPS can be verified. No resolv.conf: the proxy resolves names, the sandbox never does.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from providers.sandboxes.kernel_client import DRIVER

__all__ = ["DRIVER_PATH", "PROXY_PORT", "PROXY_SOCKET", "Runtime", "bwrap_command", "inspect_runtime"]

DRIVER_PATH = "/opt/stack/kernel.py"
"""Where the driver is, inside."""
PROXY_SOCKET = "/run/stack/egress.sock"
"""Where the sandbox's proxy socket is, inside."""
PROXY_PORT = 3128
"""The port on the sandbox's own loopback that the driver forwards to it."""
_CERTIFICATES = ("/etc/ssl/certs", "/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted", "/etc/ssl/cert.pem")

_ROOT_LINKS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")


@dataclass(frozen=True)
class Runtime:
    """The runtime venv's interpreter, and the directories it needs to run."""

    python: str
    """The interpreter's path, as given (the venv's bin/python: inside, it is at the same path)."""
    prefixes: tuple[str, ...]
    """The venv, and its base installation when that is not under /usr."""


def inspect_runtime(python: Path) -> Runtime:
    """Ask the interpreter where it lives; raises `RuntimeError` saying what is wrong."""
    if not python.exists():
        raise RuntimeError(f"the sandboxes' runtime venv is missing: no interpreter at {python}. "
                           "Run `stack sandbox setup` to make it (numpy, pandas, matplotlib).")
    script = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix]))"
    result = subprocess.run([str(python), "-I", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"the runtime venv's interpreter {python} does not run: {result.stderr.strip()[-300:]}")
    prefix, base = json.loads(result.stdout)
    prefixes = [prefix] + ([base] if base != prefix and not base.startswith("/usr/") and base != "/usr" else [])
    return Runtime(str(python), tuple(prefixes))


def _root(args: list[str]) -> None:
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]


def _network(args: list[str], environment: dict[str, str], proxy_socket: Path) -> None:
    args += ["--ro-bind", str(proxy_socket), PROXY_SOCKET]
    for path in _CERTIFICATES:
        if Path(path).exists():
            args += ["--ro-bind", path, path]
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    environment.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy)


def bwrap_command(bwrap: str, runtime: Runtime, data: Path, kernel_argument: str, tmp_bytes: int | None,
                  proxy_socket: Path | None = None) -> list[str]:
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534",
            "--cap-drop", "ALL", "--clearenv", "--hostname", "sandbox"]
    _root(args)
    for prefix in runtime.prefixes:
        args += ["--ro-bind", prefix, prefix]
    args += ["--ro-bind", str(DRIVER), DRIVER_PATH, "--proc", "/proc", "--dev", "/dev"]
    if tmp_bytes is not None:
        args += ["--size", str(tmp_bytes)]
    args += ["--tmpfs", "/tmp", "--bind", str(data), "/mnt/data", "--chdir", "/mnt/data"]
    environment = {
        "PATH": f"{runtime.prefixes[0]}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/mnt/data", "LANG": "C.UTF-8",
        "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        # Caches in /tmp, not in /mnt/data where they would show as the user's files.
        "MPLCONFIGDIR": "/tmp/matplotlib", "XDG_CACHE_HOME": "/tmp/cache",
    }
    if proxy_socket is not None:
        _network(args, environment, proxy_socket)
    for name, value in environment.items():
        args += ["--setenv", name, value]
    return [*args, "--", runtime.python, "-B", DRIVER_PATH, kernel_argument]
