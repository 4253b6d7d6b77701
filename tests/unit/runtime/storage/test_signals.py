"""runtime.storage.signals: the processes sharing an SQLite file hear each other's notifications (what
LISTEN/NOTIFY does on PostgreSQL), a process does not hear its own through the socket, and a
registration left by a process that is gone is removed by the next send."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from builder.config import SqliteBackend
from runtime.storage.signals import MachineSignals
from runtime.storage import open_database


async def test_another_endpoint_hears_a_signal_and_the_sender_does_not(tmp_path: Path) -> None:
    heard: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}
    arrived = asyncio.Event()

    def hearing(name: str):  # type: ignore[no-untyped-def]
        def deliver(channel: str, payload: str) -> None:
            heard[name].append((channel, payload))
            arrived.set()
        return deliver

    first, second = MachineSignals(tmp_path / "db.signals", hearing("a")), MachineSignals(tmp_path / "db.signals", hearing("b"))
    try:
        assert first.start() and second.start()
        second.send("cancels", "resp_1\nwith a newline")
        await asyncio.wait_for(arrived.wait(), 5)
        await asyncio.sleep(0.05)  # time for a wrong delivery to the sender, if there were one
        assert heard == {"a": [("cancels", "resp_1\nwith a newline")], "b": []}
    finally:
        first.close()
        second.close()
    assert list((tmp_path / "db.signals").iterdir()) == []  # both unregistered


async def test_a_registration_whose_process_is_gone_is_removed_by_the_next_send(tmp_path: Path) -> None:
    directory = tmp_path / "db.signals"
    directory.mkdir()
    (directory / "4194999-0123456789ab").touch()  # a process killed before it could unregister
    live = MachineSignals(directory, lambda channel, payload: None)
    try:
        live.send("events", "resp_2")
        assert sorted(path.name for path in directory.iterdir()) == [live.name]
    finally:
        live.close()


async def test_a_notify_from_another_process_on_the_same_sqlite_file_reaches_a_subscriber(tmp_path: Path) -> None:
    path = tmp_path / "stack.db"
    db = open_database(SqliteBackend(type="sqlite", path=path))
    heard: asyncio.Queue[str] = asyncio.Queue()
    try:
        await db.subscribe("cancels", heard.put_nowait)
        script = textwrap.dedent(f"""
            import asyncio
            from builder.config import SqliteBackend
            from runtime.storage import open_database

            async def main():
                db = open_database(SqliteBackend(type="sqlite", path={str(path)!r}))
                await db.notify("cancels", "resp_from_elsewhere")
                await db.close()

            asyncio.run(main())
        """)
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=Path(__file__).parents[3])
        assert await asyncio.wait_for(process.wait(), 60) == 0
        assert await asyncio.wait_for(heard.get(), 5) == "resp_from_elsewhere"
    finally:
        await db.close()


async def test_a_directory_that_cannot_be_made_leaves_signals_off_without_failing(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file where the directory would be")
    signals = MachineSignals(tmp_path / "taken" / "db.signals", lambda channel, payload: None)
    assert signals.start() is False
    signals.send("cancels", "resp_3")  # nothing to send through, and no error
    signals.close()
