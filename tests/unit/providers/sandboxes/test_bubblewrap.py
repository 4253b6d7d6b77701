"""The bubblewrap sandboxes: a notebook's behaviour over real bwrap processes and the real runtime venv.

One backend and one sandbox serve the module (a kernel starts in about 70 ms, pandas in 500):
each test uses names of its own."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from contract.errors import InvalidRequestError, NotFoundError
from providers.sandboxes.bubblewrap import BubblewrapConfig, BubblewrapSandboxes, open_backend
from support.sandbox import BWRAP_MISSING, runtime_python

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING), pytest.mark.asyncio(loop_scope="module")]

BOX = "functional"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BubblewrapSandboxes]:
    config = BubblewrapConfig(python=runtime_python(), max_output_bytes=4096, cell_timeout_s=10)
    async with open_backend(config, tmp_path_factory.mktemp("state")) as opened:
        await opened.create(BOX, 1 << 30)
        yield opened


async def test_names_persist_between_cells_and_the_first_cell_says_its_kernel_is_fresh(backend: BubblewrapSandboxes) -> None:
    await backend.create("persist", 1 << 30)
    first = await backend.run("persist", "counter = 41")
    second = await backend.run("persist", "counter += 1\nprint('now', counter)")
    assert (first.status, first.fresh_kernel, first.logs) == ("completed", True, "")
    assert (second.status, second.fresh_kernel, second.logs) == ("completed", False, "now 42\n")


async def test_the_last_expression_is_shown_after_what_was_printed(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, "import sys\nprint('out')\nprint('err', file=sys.stderr)\n{'a': 1}")
    assert output.logs == "out\nerr\n{'a': 1}\n"
    assert (await backend.run(BOX, "x = 5\nx if False else None")).logs == ""  # None is not shown, as in a notebook


async def test_an_error_gives_the_traceback_of_the_cell_only_and_the_kernel_goes_on(backend: BubblewrapSandboxes) -> None:
    await backend.run(BOX, "def divide(a):\n    return a / 0")
    output = await backend.run(BOX, "print('before')\ndivide(1)")
    assert output.status == "failed"
    assert output.logs.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "<cell>", line 2' in output.logs and "ZeroDivisionError: division by zero" in output.logs
    assert "kernel.py" not in output.logs
    assert (await backend.run(BOX, "divide")).status == "completed"


async def test_a_syntax_error_is_reported_without_running_any_of_the_cell(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, "ran = True\ndef broken(:")
    assert output.status == "failed" and "SyntaxError" in output.logs
    assert "NameError" in (await backend.run(BOX, "ran")).logs


async def test_a_matplotlib_figure_comes_back_as_a_png_and_is_closed(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nNone")
    assert output.status == "completed" and len(output.images) == 1
    assert output.images[0].startswith(b"\x89PNG\r\n\x1a\n")
    assert (await backend.run(BOX, "plt.get_fignums()")).logs == "[]\n"


async def test_pandas_and_numpy_work(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, "import numpy as np, pandas as pd\npd.DataFrame({'a': np.arange(4)})['a'].sum()")
    assert (output.status, output.logs) == ("completed", "np.int64(6)\n")


async def test_files_the_code_writes_are_listed_and_read_and_files_written_are_seen_by_the_code(backend: BubblewrapSandboxes) -> None:
    await backend.run(BOX, "import os\nos.makedirs('out', exist_ok=True)\nopen('out/table.csv', 'w').write('a,b\\n1,2\\n')")
    written = await backend.write_file(BOX, "input/data.txt", b"from the host")
    assert (written.path, written.bytes) == ("input/data.txt", 13)
    listed = {file.path: file.bytes for file in await backend.list_files(BOX)}
    assert listed["out/table.csv"] == 8 and listed["input/data.txt"] == 13
    assert b"".join([chunk async for chunk in backend.read_file(BOX, "/mnt/data/out/table.csv")]) == b"a,b\n1,2\n"
    assert (await backend.run(BOX, "open('/mnt/data/input/data.txt').read()")).logs == "'from the host'\n"
    await backend.delete_file(BOX, "input/data.txt")
    assert "input/data.txt" not in {file.path for file in await backend.list_files(BOX)}


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", "", "x\0y"])
async def test_a_path_that_leaves_mnt_data_is_refused(backend: BubblewrapSandboxes, path: str) -> None:
    with pytest.raises(InvalidRequestError):
        await backend.write_file(BOX, path, b"no")
    with pytest.raises(InvalidRequestError):
        await backend.delete_file(BOX, path)


async def test_a_link_the_code_made_is_never_followed_by_the_host(backend: BubblewrapSandboxes, tmp_path: Path) -> None:
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host only")
    await backend.run(BOX, f"import os\nos.symlink({str(outside)!r}, 'link.txt')\nos.symlink({str(tmp_path)!r}, 'linkdir')")
    for path in ("link.txt", "linkdir/host-secret.txt"):
        with pytest.raises(InvalidRequestError):
            [chunk async for chunk in backend.read_file(BOX, path)]
        with pytest.raises(InvalidRequestError):
            await backend.write_file(BOX, path, b"overwritten")
    assert outside.read_text() == "host only"
    assert not {"link.txt", "linkdir/host-secret.txt"} & {file.path for file in await backend.list_files(BOX)}


async def test_a_missing_file_is_not_found(backend: BubblewrapSandboxes) -> None:
    with pytest.raises(NotFoundError):
        [chunk async for chunk in backend.read_file(BOX, "nothing/here.txt")]
    with pytest.raises(NotFoundError):
        await backend.delete_file(BOX, "nothing.txt")


async def test_output_is_cut_at_the_limit_and_says_so(backend: BubblewrapSandboxes) -> None:
    output = await backend.run(BOX, "for _ in range(1000):\n    print('x' * 99)")
    assert output.truncated and len(output.logs.encode()) == 4096 and output.status == "completed"
    assert not (await backend.run(BOX, "print('short')")).truncated


async def test_stop_keeps_the_files_and_the_next_cell_has_a_fresh_kernel(backend: BubblewrapSandboxes) -> None:
    await backend.create("stopped", 1 << 30)
    await backend.run("stopped", "kept = 1\nopen('kept.txt', 'w').write('k')")
    await backend.stop("stopped")
    output = await backend.run("stopped", "open('kept.txt').read()")
    assert (output.fresh_kernel, output.logs) == (True, "'k'\n")
    assert "NameError" in (await backend.run("stopped", "kept")).logs


async def test_held_lists_each_sandbox_made_and_not_destroyed_with_when_it_was_made(backend: BubblewrapSandboxes) -> None:
    before = time.time()
    await backend.create("listed", 1 << 30)
    held = {entry.sandbox_id: entry.created_at for entry in await backend.held()}
    assert "listed" in held and before - 1 <= held["listed"] <= time.time() + 1
    await backend.destroy("listed")
    assert "listed" not in {entry.sandbox_id for entry in await backend.held()}


async def test_destroy_removes_the_files_and_the_sandbox(backend: BubblewrapSandboxes) -> None:
    await backend.create("doomed", 1 << 30)
    await backend.run("doomed", "open('a.txt', 'w').write('a')")
    place = backend.settings.directory / "doomed"
    assert place.is_dir()
    await backend.destroy("doomed")
    assert not place.exists()
    with pytest.raises(NotFoundError):
        await backend.run("doomed", "1")
    with pytest.raises(NotFoundError):
        await backend.list_files("doomed")
    await backend.destroy("doomed")  # no error when it is gone


async def test_a_memory_limit_above_the_backends_is_refused_and_ids_are_checked(backend: BubblewrapSandboxes) -> None:
    with pytest.raises(InvalidRequestError):
        await backend.create("too-big", backend.max_memory_bytes + 1)
    with pytest.raises(InvalidRequestError):
        await backend.create("../escape", 1 << 30)


async def test_an_idle_kernel_is_stopped_and_its_files_stay(tmp_path: Path) -> None:
    config = BubblewrapConfig(python=runtime_python(), idle_stop_s=0.2)
    async with open_backend(config, tmp_path, verify=False) as idle:
        await idle.create("idle", 1 << 30)
        await idle.run("idle", "kept = 1\nopen('note.txt', 'w').write('x')")
        deadline = time.monotonic() + 10
        while idle.kernels.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        after = await idle.run("idle", "print('kept' in globals(), open('note.txt').read())")
        assert (after.fresh_kernel, after.logs) == (True, "False x\n")
