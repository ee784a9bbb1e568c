"""A sandbox's teardown never touches a descriptor that is not its own, under the default loop and under uvloop.

Issue 24, item 2: on a tool timeout the sandbox closed its pipe, waited for the killed process in a worker thread,
and only then removed the pipe's reader from the loop *by descriptor number*. Meanwhile the kernel hands that number
to the next socket opened (another attempt's sandbox, an HTTP connection to a white agent), and the late
``remove_reader`` unregistered that socket: its owner never woke up again. These tests open sockets exactly in that
window (the process "join" below runs while the loop is free) and check that their readers survive the teardown.

A child process is not needed for this: the "sandbox" here is a pipe whose other end the test holds, and a process
stand-in whose ``join`` is where the test acts.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import httpx
import pytest

from green_agent.engine.tau.sandbox import ToolFault, ToolSandbox


def _loop_factories() -> list[Any]:
    factories: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:  # CI installs it (test extras); a plain dev install runs the default loop only
        factories.append(pytest.param(None, id="uvloop", marks=pytest.mark.skip(reason="uvloop is not installed")))
    else:
        factories.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    return factories


LOOPS = _loop_factories()


def run_on(factory: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


class _Process:
    """Stands in for the sandbox's process: ``join`` runs ``on_join`` (in the worker thread the sandbox uses)."""

    pid = 4242
    exitcode: int | None = None

    def __init__(self, on_join: Callable[[], None] | None = None) -> None:
        self.on_join = on_join
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        self.exitcode = -9

    def join(self, timeout: float | None = None) -> None:
        if self.on_join is not None:
            on_join, self.on_join = self.on_join, None
            on_join()


def sandbox_with(process: _Process) -> tuple[ToolSandbox, Any]:
    parent, child = multiprocessing.Pipe(duplex=True)
    return ToolSandbox(cast(Any, process), parent), child


@pytest.mark.parametrize("factory", LOOPS)
def test_a_timeout_teardown_leaves_the_reader_of_a_socket_that_reused_the_descriptor(factory: Any) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reused: list[tuple[socket.socket, socket.socket]] = []
        registered = threading.Event()
        woke: set[int] = set()  # level-triggered: a reader fires until its data is read

        def take_the_freed_numbers() -> None:
            # Runs in the worker thread while the loop is free, after the sandbox's descriptor was closed: the next
            # sockets get the lowest free numbers, the one just freed among them. Their readers are registered on
            # the loop (as an HTTP client or another sandbox would) before the teardown goes on.
            for _ in range(8):
                pair = socket.socketpair()
                reused.append(pair)
                if pair[0].fileno() in before or pair[1].fileno() in before:
                    break

            def register() -> None:
                for a, _b in reused:
                    loop.add_reader(a.fileno(), woke.add, a.fileno())
                registered.set()

            loop.call_soon_threadsafe(register)
            assert registered.wait(10), "the loop did not run the registration"

        process = _Process(on_join=take_the_freed_numbers)
        sandbox, child = sandbox_with(process)
        before = open_fds()
        try:
            with pytest.raises(ToolFault) as caught:
                await sandbox.request({"op": "call"}, timeout_s=0.05)  # nobody answers: the time limit kills it
            assert caught.value.kind == "timeout" and process.killed
            numbers = {fd for pair in reused for fd in (pair[0].fileno(), pair[1].fileno())}
            assert numbers & before, "no socket reused a number of the sandbox's (the test did not test anything)"
            # Every socket opened during the teardown still has its reader, and it still wakes up.
            for _a, b in reused:
                b.send(b"x")
            for _ in range(200):
                if len(woke) == len(reused):
                    break
                await asyncio.sleep(0.01)
            lost = sorted({a.fileno() for a, _b in reused} - woke)
            assert not lost, f"the sandbox's teardown unregistered other sockets' readers: descriptors {lost}"
            for a, _b in reused:
                loop.remove_reader(a.fileno())
        finally:
            for a, b in reused:
                a.close()
                b.close()
            child.close()
            await sandbox.aclose()

    run_on(factory, main())


@pytest.mark.parametrize("factory", LOOPS)
def test_an_http_connection_opened_during_a_timeout_teardown_connects(factory: Any) -> None:
    """The cross-battle "connection refused" of issue 24, item 8: the connection to a white agent that stayed up got
    the sandbox's freed number while the sandbox's reader was still registered under it. On the default loop the
    connect's add_writer then modified the stale selector entry (epoll: ENOENT), so the connect failed at once
    (httpx ConnectError "All connection attempts failed", which the white-agent client reports as "cannot connect
    ... (connection refused or host unreachable)", blamed on the agent); on uvloop it never completed."""

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        outcome: list[str] = []

        def connect_in_the_window() -> None:
            async def get() -> None:
                try:
                    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
                        response = await client.get(f"http://127.0.0.1:{port}/")
                    outcome.append(f"{response.status_code} {response.text}")
                except httpx.HTTPError as error:
                    outcome.append(f"{type(error).__name__}: {error!r} (cause {error.__cause__!r})")

            asyncio.run_coroutine_threadsafe(get(), loop).result(30)

        sandbox, child = sandbox_with(_Process(on_join=connect_in_the_window))
        try:
            with pytest.raises(ToolFault):
                await sandbox.request({"op": "call"}, timeout_s=0.05)
            assert outcome == ["200 ok"], outcome
        finally:
            child.close()
            await sandbox.aclose()
            server.close()
            await server.wait_closed()

    run_on(factory, main())


@pytest.mark.parametrize("factory", LOOPS)
def test_an_answer_arriving_in_pieces_is_read_whole(factory: Any) -> None:
    """uvloop switches a descriptor it watches to non-blocking: a read of a message that is only partly there must
    wait for the rest (the old blocking ``recv`` failed with BlockingIOError: the attempt became a harness error)."""

    async def main() -> None:
        sandbox, child = sandbox_with(_Process())
        answer = {"ok": {"content": "y" * 300_000}}
        body = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        framed = struct.pack("!i", len(body)) + body

        def child_side() -> None:
            request = child.recv()  # the request arrives framed as multiprocessing frames it
            assert request == {"op": "call", "call": {"name": "x"}}
            fd = child.fileno()
            os.write(fd, framed[:1000])  # the header and the start of the body ...
            time.sleep(0.3)  # ... the parent is woken and reads what is there ...
            view = memoryview(framed)[1000:]
            while view:
                view = view[os.write(fd, view) :]

        writer = threading.Thread(target=child_side)
        writer.start()
        try:
            got = await sandbox.request({"op": "call", "call": {"name": "x"}}, timeout_s=30)
            assert got == answer
            assert sandbox.alive
        finally:
            await asyncio.to_thread(writer.join)
            child.close()
            await sandbox.aclose()

    run_on(factory, main())


@pytest.mark.parametrize("factory", LOOPS)
def test_a_close_from_another_task_during_a_call_ends_the_call_and_unregisters_first(factory: Any) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sandbox, child = sandbox_with(_Process())
        call = asyncio.create_task(sandbox.request({"op": "call"}, timeout_s=30))
        while not child.poll():  # the request reached the child: the call is in flight
            await asyncio.sleep(0.01)
        await sandbox.aclose()
        with pytest.raises(ToolFault) as caught:
            await call
        assert caught.value.kind == "crashed"
        assert child.poll() and child.recv() == {"op": "call"}
        with pytest.raises(EOFError):
            child.recv()  # the parent's end is closed
        # The loop holds nothing for a descriptor the sandbox no longer owns.
        a, b = socket.socketpair()
        woke = asyncio.Event()
        try:
            loop.add_reader(a.fileno(), woke.set)
            b.send(b"x")
            await asyncio.wait_for(woke.wait(), 10)
            loop.remove_reader(a.fileno())
        finally:
            a.close()
            b.close()
            child.close()

    run_on(factory, main())


async def test_in_process_async_tests_run_on_the_loop_arena_loop_names() -> None:
    """CI's second run (ARENA_LOOP=uvloop, .ci/run) must really run the sandbox and battle tests on uvloop."""
    wanted = os.environ.get("ARENA_LOOP", "").strip().lower()
    running = type(asyncio.get_running_loop()).__module__.split(".")[0]
    assert running == ("uvloop" if wanted == "uvloop" else "asyncio"), running
