"""Break-out attempts against the bubblewrap sandbox, each of which must fail: real bwrap, real kernel.

The backend of this module has a 2 s cell limit, 1 GiB of memory, 16 processes and 10 MiB files,
so that the bombs end quickly."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from providers.sandboxes.bubblewrap import BubblewrapConfig, BubblewrapSandboxes, open_backend
from support.sandbox import BWRAP_MISSING, runtime_python

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING), pytest.mark.asyncio(loop_scope="module")]

BOX = "attacker"
SECRET = "sk-this-must-not-leak-0123456789"


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("state")
    (state / "stack.db").write_text("the server's database")
    return state


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(state_dir: Path) -> AsyncIterator[BubblewrapSandboxes]:
    os.environ["STACK_TEST_SANDBOX_SECRET"] = SECRET  # in the server's environment while its kernels start
    # 4 s a cell: room for a loaded machine, where the memory bomb must still fail by MemoryError, not by time.
    config = BubblewrapConfig(python=runtime_python(), max_memory="1g", cell_timeout_s=4, max_processes=16, max_file_bytes=10 << 20)
    try:
        async with open_backend(config, state_dir) as opened:
            await opened.create(BOX, 1 << 30)
            yield opened
    finally:
        del os.environ["STACK_TEST_SANDBOX_SECRET"]


async def _value(backend: BubblewrapSandboxes, code: str) -> object:
    """What the cell's last line printed, as JSON."""
    output = await backend.run(BOX, code)
    assert output.status == "completed", output.logs
    return json.loads(output.logs.strip().splitlines()[-1])


async def test_it_runs_as_nobody_without_capabilities(backend: BubblewrapSandboxes) -> None:
    found = await _value(backend, "import os, json\nstatus = open('/proc/self/status').read()\n"
                                  "print(json.dumps([os.getuid(), os.getgid(), [l for l in status.splitlines() if l.startswith('CapEff')]]))")
    assert found == [65534, 65534, ["CapEff:\t0000000000000000"]]


async def test_tcp_to_the_hosts_loopback_and_to_outside_fails(backend: BubblewrapSandboxes) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        found = await _value(backend, f"""
import json, socket
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return 'connected'
    except OSError as error:
        return type(error).__name__
print(json.dumps([reach('127.0.0.1', {port}), reach('1.1.1.1', 53), reach('8.8.8.8', 443)]))""")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came
    assert found == ["ConnectionRefusedError", "OSError", "OSError"]  # its own empty loopback; no route out
    found = await _value(backend, "import json, socket\ntry:\n    socket.getaddrinfo('example.com', 80)\n    print('\"resolved\"')\n"
                                  "except OSError as error:\n    print(json.dumps(type(error).__name__))")
    assert found == "gaierror"


async def test_the_hosts_files_and_the_servers_state_are_not_there(backend: BubblewrapSandboxes, state_dir: Path) -> None:
    host_passwd = Path("/etc/passwd").read_text()
    output = await backend.run(BOX, f"""
import os
for path in ('/etc/passwd', '/etc/shadow', {str(state_dir / 'stack.db')!r}, '/work', '/root/.ssh', {os.getcwd()!r}):
    try:
        print(path, open(path).read()[:200])
    except OSError as error:
        print(path, type(error).__name__)
print(sorted(os.listdir('/')))""")
    assert host_passwd.splitlines()[0] not in output.logs and "the server's database" not in output.logs
    assert output.logs.count("FileNotFoundError") == 6
    assert "'etc'" not in output.logs and "'work'" not in output.logs


async def test_the_servers_process_is_invisible_and_cannot_be_signalled(backend: BubblewrapSandboxes) -> None:
    server = os.getpid()
    found = await _value(backend, f"""
import json, os, signal
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
commands = [open(f'/proc/{{p}}/cmdline', 'rb').read().split(b'\\0')[0].decode() for p in pids]
try:
    os.kill({server}, signal.SIGKILL)
    killed = 'sent'
except OSError as error:
    killed = type(error).__name__
print(json.dumps([len(pids), {server} in pids, commands, killed]))""")
    count, visible, commands, killed = found  # type: ignore[misc]
    assert not visible and killed == "ProcessLookupError" and count <= 3
    assert not any("pytest" in command for command in commands)
    os.kill(server, 0)  # still here


async def test_kill_minus_one_reaches_only_the_sandbox(backend: BubblewrapSandboxes) -> None:
    await backend.create("kill-all", 1 << 30)
    await backend.run("kill-all", "import os, signal\nos.kill(-1, signal.SIGKILL)")
    assert subprocess.run(["true"], check=False).returncode == 0
    assert (await backend.run(BOX, "1 + 1")).logs == "2\n"


async def test_the_servers_environment_is_not_visible(backend: BubblewrapSandboxes) -> None:
    await backend.create("environment", 1 << 30)
    output = await backend.run("environment", "import os\nprint(dict(os.environ))\n"
                                              "for p in os.listdir('/proc'):\n    if p.isdigit():\n"
                                              "        try: print(open(f'/proc/{p}/environ').read())\n        except OSError as e: print(e)")
    assert output.status == "completed" and "'HOME': '/mnt/data'" in output.logs
    assert SECRET not in output.logs and "STACK_TEST_SANDBOX_SECRET" not in output.logs


async def test_a_fork_bomb_ends_and_the_host_can_still_fork(backend: BubblewrapSandboxes) -> None:
    await backend.create("fork-bomb", 1 << 30)
    output = await backend.run("fork-bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert output.status == "timeout"  # it never ends by itself: interrupted, then its sandbox killed with every process in it
    assert subprocess.run(["true"], check=False).returncode == 0
    after = await backend.run("fork-bomb", "print('alive')")
    assert after.logs == "alive\n"
    bounded = await backend.run("fork-bomb", "import os\nwhile True: os.fork()")
    assert bounded.status == "failed" and "BlockingIOError" in bounded.logs  # the processes limit, not the host's


async def test_a_memory_bomb_fails_with_memory_error_and_the_kernel_goes_on(backend: BubblewrapSandboxes) -> None:
    await backend.create("memory-bomb", 512 << 20)  # a small limit: the bomb reaches it in a fraction of the cell's time
    output = await backend.run("memory-bomb", "hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))")
    assert output.status == "failed" and "MemoryError" in output.logs
    assert (await backend.run("memory-bomb", "del hog\n'ok'")).logs == "'ok'\n"
    huge = await backend.run("memory-bomb", "bytearray(4 << 30)")
    assert huge.status == "failed" and "MemoryError" in huge.logs


async def test_an_infinite_loop_times_out_and_the_kernel_survives_the_interrupt(backend: BubblewrapSandboxes) -> None:
    await backend.run(BOX, "survivor = 'yes'")
    output = await backend.run(BOX, "while True:\n    pass")
    assert output.status == "timeout" and "KeyboardInterrupt" in output.logs
    after = await backend.run(BOX, "survivor")
    assert (after.logs, after.fresh_kernel) == ("'yes'\n", False)


async def test_a_loop_that_ignores_the_interrupt_is_killed_and_the_next_cell_gets_a_fresh_kernel(backend: BubblewrapSandboxes) -> None:
    await backend.create("stubborn", 1 << 30)
    await backend.run("stubborn", "lost = 1")
    output = await backend.run("stubborn", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")
    assert output.status == "timeout" and "killed" in output.logs
    after = await backend.run("stubborn", "print('fresh')\nlost")
    assert after.fresh_kernel and after.logs.startswith("fresh\n") and "NameError" in after.logs


async def test_a_10_gb_file_is_refused(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, """
results = []
with open('big.bin', 'wb') as out:
    try:
        out.truncate(10 << 30)
    except OSError as error:
        results.append(type(error).__name__)
    try:
        for _ in range(10 << 10):
            out.write(bytes(1 << 20))
            out.flush()
    except OSError as error:
        results.append(error.strerror)
results""")
    assert output.logs == "['OSError', 'File too large']\n"
    sizes = {file.path: file.bytes for file in await backend.list_files(BOX)}
    assert sizes["big.bin"] <= 10 << 20


async def test_another_sandboxs_files_are_not_visible(backend: BubblewrapSandboxes) -> None:
    await backend.create("neighbour", 1 << 30)
    await backend.write_file("neighbour", "private.txt", b"neighbour's secret")
    neighbour = backend.settings.directory / "neighbour"
    output = await backend.run(BOX, f"import os\nprint(os.listdir('/mnt/data'))\nprint(os.path.exists({str(neighbour)!r}))\n"
                                    f"print(os.path.exists({str(backend.settings.directory)!r}))")
    assert "private.txt" not in output.logs and output.logs.endswith("False\nFalse\n")
