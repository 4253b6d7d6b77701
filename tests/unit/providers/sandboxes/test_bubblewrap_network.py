"""Network for a bubblewrap sandbox: only to the hosts both its operator and its container allow, through
its proxy, over real bwrap and the real kernel driver. The origin is a local HTTP server on the host's
127.0.0.1, reached as `localhost`: the operator of this module's backend opens it with `allow_private`,
as production's default (no allow_private) would not (the last test)."""

from __future__ import annotations

import http.server
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from contract.errors import InvalidRequestError
from providers.sandboxes.bubblewrap import BubblewrapConfig, BubblewrapSandboxes, open_backend
from support.sandbox import BWRAP_MISSING, runtime_python

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING), pytest.mark.asyncio(loop_scope="module")]

FETCH = """
import urllib.request
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as error:
        return f"refused: {error}"
"""


class _Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        body = f"origin saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(origin: int, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BubblewrapSandboxes]:
    config = BubblewrapConfig(python=runtime_python(), cell_timeout_s=20, allowed_hosts=[f"localhost:{origin}", "*.example.com"],
                              allow_private=["localhost"])
    async with open_backend(config, tmp_path_factory.mktemp("state")) as opened:
        yield opened


async def test_a_sandbox_with_an_allowlist_fetches_from_an_allowed_host_through_its_proxy(backend: BubblewrapSandboxes,
                                                                                         origin: int) -> None:
    await backend.create("allowed", 1 << 30, ["localhost"])
    output = await backend.run("allowed", FETCH + f"print(fetch('http://localhost:{origin}/data.csv'))")
    assert (output.status, output.logs) == ("completed", "origin saw /data.csv\n")


async def test_a_tunnel_by_connect_reaches_the_allowed_host_too(backend: BubblewrapSandboxes, origin: int) -> None:
    await backend.create("tunnel", 1 << 30, ["localhost"])
    code = ("import http.client\nc = http.client.HTTPConnection('127.0.0.1', 3128, timeout=10)\n"
            f"c.set_tunnel('localhost', {origin})\nc.request('GET', '/through')\nprint(c.getresponse().read().decode())")
    assert (await backend.run("tunnel", code)).logs == "origin saw /through\n"


async def test_any_other_host_is_refused_and_nothing_is_reached_but_the_proxy(backend: BubblewrapSandboxes, origin: int) -> None:
    await backend.create("others", 1 << 30, ["localhost"])
    code = FETCH + f"""
import socket
print(fetch('http://www.example.com/'))  # the operator allows it; this container does not
print(fetch('https://localhost:{origin + 1}/'))
try:
    socket.create_connection(('127.0.0.1', {origin}), timeout=2)  # the host's loopback, around the proxy
    print('reached')
except OSError:
    print('unreachable')
"""
    logs = (await backend.run("others", code)).logs.splitlines()
    assert logs[0] == "refused: HTTP Error 403: Forbidden"
    assert logs[1].startswith("refused:") and "403" in logs[1]
    assert logs[2] == "unreachable"


async def test_without_an_allowlist_a_sandbox_has_no_network_and_no_proxy(backend: BubblewrapSandboxes, origin: int) -> None:
    await backend.create("closed", 1 << 30)
    code = FETCH + f"import os\nprint(os.environ.get('HTTP_PROXY'))\nprint(fetch('http://localhost:{origin}/'))\n" \
                   "print(fetch('http://127.0.0.1:3128/'))"
    logs = (await backend.run("closed", code)).logs.splitlines()
    assert logs[0] == "None"
    assert logs[1].startswith("refused:") and logs[2].startswith("refused:")


async def test_the_allowlist_outlives_the_kernel_and_the_proxy_goes_with_it(backend: BubblewrapSandboxes, origin: int) -> None:
    await backend.create("restarted", 1 << 30, ["localhost"])
    before = set(Path(tempfile.gettempdir()).glob("stack-egress-*"))
    await backend.run("restarted", "pass")
    proxies = set(Path(tempfile.gettempdir()).glob("stack-egress-*")) - before
    assert len(proxies) == 1 and (proxies.pop() / "egress.sock").is_socket()
    await backend.stop("restarted")
    assert set(Path(tempfile.gettempdir()).glob("stack-egress-*")) <= before
    output = await backend.run("restarted", FETCH + f"print(fetch('http://localhost:{origin}/again'))")
    assert (output.fresh_kernel, output.logs) == (True, "origin saw /again\n")
    await backend.destroy("restarted")


@pytest.mark.parametrize(("domains", "words"), [(["evil.com"], "not among the hosts"), (["localhost:80"], "not a host name")])
async def test_a_domain_the_operator_does_not_allow_is_refused_at_creation(backend: BubblewrapSandboxes, domains: list[str],
                                                                         words: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        await backend.create("refused", 1 << 30, domains)
    assert refused.value.param == "network_policy.allowed_domains" and words in refused.value.message
    assert not (backend.settings.directory / "refused").exists()


async def test_by_default_no_host_is_allowed_and_a_private_address_is_never_dialled(origin: int, tmp_path: Path) -> None:
    async with open_backend(BubblewrapConfig(python=runtime_python()), tmp_path, verify=False) as closed:
        assert closed.allowed_hosts == ()
        with pytest.raises(InvalidRequestError, match="allows no hosts"):
            await closed.create("none", 1 << 30, ["localhost"])
    config = BubblewrapConfig(python=runtime_python(), cell_timeout_s=20, allowed_hosts=[f"localhost:{origin}"])
    async with open_backend(config, tmp_path, verify=False) as public_only:
        await public_only.create("loopback", 1 << 30, ["localhost"])
        logs = (await public_only.run("loopback", FETCH + f"print(fetch('http://localhost:{origin}/'))")).logs
    assert logs == "refused: HTTP Error 403: Forbidden\n"
