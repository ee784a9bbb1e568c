"""Tool sandboxes: every attempt's tau2 environment lives in a process of its own, killed when a tool call hangs.

Why a process per attempt: tool calls run tau2 code on arguments the agent under test chose, and some tau2 tools
do real work with them (``calculate("9**9**9")`` evaluates the expression: one C-level big-integer power that holds
the GIL for minutes). In the serving process that froze every battle, every timeout and /health; in a thread it
would too (the GIL). A process can be killed at the time limit, and only its own attempt is affected.

How it stays cheap: processes are forked from a ``multiprocessing`` fork server that imported tau2's environment
code and validated the domain databases once (``set_forkserver_preload``, green_agent/engine/tau/sandbox_preload.py).
A sandbox builds its environment on those inherited databases themselves, without copying them: it serves one
attempt and is thrown away, and whatever the attempt changes lands in its own copy-on-write pages, so nothing of
one attempt is visible to another (~20 ms of CPU per retail sandbox, most of it the kernel's fork and exit). The
task travels pickled with the process (an exact copy), so a sandbox never loads a task file (telecom's takes ~0.7 s).
The fork server is the standard library's (one per serving process, stateless, shared like the scoring pool). It is
started in the background (:meth:`SandboxFactory.warm`); its warm-up takes ~1 s of CPU, and a sandbox requested
before it is done waits for it.

What crosses the boundary: plain dicts over a ``multiprocessing`` pipe. The parent sends ``{"op": "call", "call":
ToolCall JSON}``; the child answers ``{"ok": ToolMessage JSON}`` (tau2's ``get_response`` semantics, output
verbatim) or ``{"resource": "MemoryError"}`` when the call exhausted the child's memory or recursion limit, each with
``"cpu"``: its CPU seconds so far (a late call's blame depends on them: sandbox_cpu.py). The parent reads and writes
its end through the event loop on a non-blocking descriptor of its own (:class:`_Channel`): teardown unregisters the
descriptor before closing it, so it never touches a number the kernel has since given to another socket, and the
loop's choice of blocking mode (uvloop switches descriptors it watches) does not matter.

Lifetime: a sandbox dies with its attempt (:meth:`ToolSandbox.aclose`), at a tool timeout (SIGKILL), when its
parent connection closes (EOF), and when the fork server dies (``PR_SET_PDEATHSIG`` on Linux; the fork server
itself exits when the serving process dies), so ``kill -9`` of the green agent leaves no sandbox behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import struct
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from types import TracebackType
from typing import Any, Literal, Self

from green_agent.engine.tau.sandbox_cpu import GraceWatch, LateCall, answer_within_limit, reported_cpu_s, settle
from green_agent.engine.tau.tasks import TaskRef
from green_agent.process_hygiene import die_with_parent

log = logging.getLogger(__name__)

PRELOAD_MODULE = "green_agent.engine.tau.sandbox_preload"
"""Imported once by the fork server: tau2's environments, the template databases and the tool schemas, inherited by
every sandbox (see green_agent/engine/tau/sandbox_child.py)."""

DEFAULT_BUILD_TIMEOUT_S = 120.0
"""Building an environment takes < 1 s; this bound only catches a wedged fork server or child."""

FaultKind = Literal["timeout", "crashed", "resource", "starved"]
"""``starved``: the time limit hit while the sandbox got (almost) no CPU: the harness's fault (sandbox_cpu.py)."""


class ToolFault(Exception):
    """A tool call that the sandbox could not complete: too slow (killed), crashed, or out of memory/recursion.

    ``requestor`` says whose call it was: the agent's (``assistant``) or the simulated user's (``user``); the attempt
    loop blames that party.
    """

    def __init__(self, kind: FaultKind, detail: str, *, requestor: str, tool: str) -> None:
        super().__init__(detail)
        self.kind: FaultKind = kind
        self.detail = detail
        self.requestor = requestor
        self.tool = tool


class SandboxError(RuntimeError):
    """The sandbox could not be started or the environment not built: a harness failure, never the agent's."""


@dataclass(frozen=True)
class SandboxInit:
    """What a new sandbox reports after building its environment."""

    tools: list[dict[str, Any]]
    user_tools: list[dict[str, Any]]
    policy: str
    opening: list[dict[str, Any]]
    """The conversation's opening messages as tau2 message JSON (greeting or the task's message history)."""


class SandboxFactory:
    """Starts tool sandboxes for attempts. One per application; safe to share between battles (holds no state of
    theirs). ``async with SandboxFactory()`` starts warming the fork server in the background and returns at once.
    """

    def __init__(self, *, build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> None:
        self._context = multiprocessing.get_context("forkserver")
        self._build_timeout_s = build_timeout_s
        self._warming: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self.warm()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            with contextlib.suppress(BaseException):
                await self._warming

    def warm(self) -> None:
        """Start the fork server (and its preload) in a worker thread, without waiting for it."""
        if self._warming is None:
            self._warming = asyncio.get_running_loop().create_task(
                asyncio.to_thread(_ensure_fork_server, self._context)
            )

    async def open(self, ref: TaskRef) -> tuple[ToolSandbox, SandboxInit]:
        """Start a sandbox for ``ref`` and build its environment there. Raises :class:`SandboxError`."""
        parent_end, child_end = self._context.Pipe(duplex=True)
        task_blob = pickle.dumps(ref.task, protocol=pickle.HIGHEST_PROTOCOL)  # an exact copy, ~0.1 ms
        process = self._context.Process(
            target=_child_entry,
            args=(child_end, ref.domain, ref.split, ref.index, ref.task_id, task_blob, ref.retrieval),
            name=f"arena-sandbox-{ref.key}",
            daemon=True,
        )
        try:
            await asyncio.to_thread(_start, self._context, process)
        except Exception as error:
            parent_end.close()
            child_end.close()
            raise SandboxError(f"could not start a tool sandbox: {type(error).__name__}: {error}") from error
        child_end.close()
        sandbox = ToolSandbox(process, parent_end)
        try:
            answer = await sandbox.request({"op": "init"}, timeout_s=self._build_timeout_s)
        except ToolFault as fault:
            await sandbox.aclose()
            raise SandboxError(f"the tool sandbox failed while building the environment: {fault.detail}") from None
        except BaseException:
            await sandbox.aclose()
            raise
        if "error" in answer:
            await sandbox.aclose()
            raise SandboxError(f"building the tau2 environment failed: {answer['error']}")
        init = answer["init"]
        return sandbox, SandboxInit(
            tools=init["tools"], user_tools=init["user_tools"], policy=init["policy"], opening=init["opening"]
        )


class ToolSandbox:
    """The parent's handle on one sandbox process: request/answer over a pipe, each bounded in time."""

    def __init__(self, process: multiprocessing.process.BaseProcess, connection: multiprocessing.connection.Connection):
        self._process = process
        self._channel = _Channel(connection)
        self._lock = asyncio.Lock()  # one request at a time: the pipe carries one conversation
        self._dead: str | None = None
        self._abandoned = False
        self._cpu_at_answer: float | None = None  # the CPU seconds the sandbox reported with its last answer
        self.grace = GraceWatch()  # a late call in its grace that has not computed (sandbox_cpu.py)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._dead is None

    async def call(self, call: dict[str, Any], *, timeout_s: float, large: bool = False) -> dict[str, Any]:
        """Run one tool call (tau2 ``ToolCall`` JSON); the ``ToolMessage`` JSON, or :class:`ToolFault`.

        ``large``: the arguments are big enough (the caller knows their encoded size) that pickling and writing
        them to the pipe should happen in a worker thread."""
        requestor, tool = str(call.get("requestor", "assistant")), str(call.get("name", "?"))
        try:
            answer = await self.request({"op": "call", "call": call}, timeout_s=timeout_s, off_loop=large)
        except ToolFault as fault:
            raise ToolFault(fault.kind, fault.detail, requestor=requestor, tool=tool) from None
        if "resource" in answer:
            await self.aclose()
            raise ToolFault(
                "resource",
                f"tool call {tool} exhausted the sandbox's resources ({answer['resource']})",
                requestor=requestor,
                tool=tool,
            )
        if "error" in answer:
            raise SandboxError(f"tool sandbox: {answer['error']}")
        return answer["ok"]  # type: ignore[no-any-return]

    async def request(self, message: dict[str, Any], *, timeout_s: float, off_loop: bool = False) -> dict[str, Any]:
        """Send ``message`` and wait at most ``timeout_s`` for the answer; kill the process when it is late."""
        async with self._lock:
            if self._dead is not None:
                raise ToolFault("crashed", f"the tool sandbox is gone ({self._dead})", requestor="?", tool="?")
            try:
                if off_loop:
                    payload = await asyncio.to_thread(_dumps, message)
                else:
                    payload = _dumps(message)
            except (pickle.PicklingError, TypeError, ValueError, RecursionError) as error:
                raise SandboxError(f"tool sandbox: the request could not be encoded: {error}") from None
            exchange = asyncio.ensure_future(self._channel.exchange(payload, max_answer_bytes=MAX_ANSWER_BYTES))
            try:  # the limit is wall-clock, but a call the machine starved of CPU is judged apart (sandbox_cpu.py)
                frame = await answer_within_limit(
                    exchange, pid=self._process.pid, baseline_s=self._cpu_at_answer, limit_s=timeout_s, watch=self.grace
                )
            except asyncio.CancelledError:
                self._abandoned = True  # the child may still be computing: aclose() kills it without waiting
                raise
            except LateCall as late:
                await settle(exchange)
                await self._kill(f"killed after exceeding the time limit of {timeout_s:g} s")
                raise ToolFault(late.kind, late.detail, requestor="?", tool="?") from None
            except AnswerTooLarge as error:
                await self._kill(str(error))
                raise ToolFault("resource", str(error), requestor="?", tool="?") from None
            except EOFError:
                await self._mark_dead("it exited")
                if self._dead == "it exited":
                    self._dead = f"it exited (exit code {self._process.exitcode})"
                raise ToolFault(
                    "crashed", f"the tool sandbox died during the call ({self._dead})", requestor="?", tool="?"
                ) from None
            except OSError as error:
                await self._mark_dead(f"its pipe broke: {error}")
                raise ToolFault(
                    "crashed", f"the tool sandbox died during the call ({self._dead})", requestor="?", tool="?"
                ) from None
            finally:
                await settle(exchange)
            try:
                answer = await asyncio.to_thread(_loads, frame) if len(frame) > OFF_LOOP_DECODE_BYTES else _loads(frame)
            except Exception as error:  # a frame the child did not encode (it always sends a dict)
                await self._kill(f"it sent an answer that could not be decoded: {type(error).__name__}")
                raise SandboxError(f"tool sandbox: {self._dead}") from None
            self._cpu_at_answer = reported_cpu_s(answer)
            return answer

    async def _kill(self, why: str) -> None:
        with contextlib.suppress(Exception):
            self._process.kill()
        await self._mark_dead(why)

    async def _mark_dead(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
        self._channel.close()  # nothing of the loop refers to its descriptor any more (see _Channel)
        await asyncio.to_thread(self._process.join, 5.0)

    async def aclose(self) -> None:
        """Stop the sandbox (EOF makes it exit; SIGKILL if it does not within a second). Idempotent."""
        if self._dead is not None:
            return
        self._dead = "closed"
        self._channel.close()
        process = self._process

        grace = 0.0 if self._abandoned else 1.0

        def stop() -> None:
            process.join(grace)
            if process.exitcode is None:
                process.kill()
                process.join(5.0)

        await asyncio.to_thread(stop)


class AnswerTooLarge(Exception):
    """The sandbox announced an answer larger than :data:`MAX_ANSWER_BYTES`."""


class _Channel:
    """The parent's end of a sandbox's pipe: ``multiprocessing.connection``'s framing (a 4-byte big-endian length,
    or -1 and an 8-byte length, then the pickle), spoken over a non-blocking descriptor that only this object reads
    and writes, through the running loop's reader/writer callbacks.

    Two rules keep teardown from touching any other descriptor, under the default loop and under uvloop alike:
    every reader and writer registered for the descriptor is removed when :meth:`exchange` ends, however it ends
    (answer, timeout, cancellation, EOF), before any code that could close it runs; and :meth:`close` called during
    an exchange (from another task) only ends it: the exchange closes the descriptor after unregistering it. After
    close the number is never used again (not even to unregister it), so whatever the kernel hands that number to
    next is not ours to touch. The descriptor's blocking mode is ours too (non-blocking from the start): a loop that
    switches it (uvloop does) changes nothing, and no read ever blocks the loop waiting for the rest of a message.
    """

    def __init__(self, connection: multiprocessing.connection.Connection) -> None:
        # A duplicate of the pipe's descriptor, ours alone; the Connection (and its number) is closed at once, so
        # exactly one object owns exactly one descriptor from here on.
        self._fd = os.dup(connection.fileno())
        connection.close()
        os.set_blocking(self._fd, False)
        self._inbox = bytearray()
        self._registered = False
        self._pending: asyncio.Future[bytes] | None = None
        self._close_requested = False
        self._closed = False

    @property
    def fileno(self) -> int:
        return self._fd

    async def exchange(self, payload: bytes, *, max_answer_bytes: int) -> bytes:
        """Write one framed request, read one framed answer (its pickle bytes). Raises EOFError when the child closed
        its end, OSError when the pipe broke, :class:`AnswerTooLarge`; cancellation leaves nothing registered."""
        if self._closed:
            raise EOFError("the pipe is closed")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        outgoing = memoryview(_frame_header(len(payload)) + payload)
        sent = 0
        writing = False

        def fail(error: BaseException) -> None:
            if not done.done():
                done.set_exception(error)

        def flush() -> None:
            nonlocal sent, writing
            while sent < len(outgoing):
                try:
                    sent += os.write(self._fd, outgoing[sent : sent + _CHUNK])
                except (BlockingIOError, InterruptedError):
                    if not writing:
                        loop.add_writer(self._fd, flush)
                        writing = True
                    return
                except OSError as error:
                    fail(error)
                    return
            if writing:
                loop.remove_writer(self._fd)
                writing = False

        def receive() -> None:
            while not done.done():
                try:
                    chunk = os.read(self._fd, _CHUNK)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:
                    fail(error)
                    return
                if not chunk:
                    fail(EOFError("the sandbox closed its end of the pipe"))
                    return
                self._inbox += chunk
                try:
                    answer = _take_frame(self._inbox, max_answer_bytes)
                except AnswerTooLarge as error:
                    fail(error)
                    return
                if answer is not None:
                    done.set_result(answer)

        self._registered = True
        self._pending = done
        try:
            loop.add_reader(self._fd, receive)
            flush()
            return await done
        finally:
            # Unregister while the descriptor is certainly still ours: nothing may close it before this.
            if writing:
                loop.remove_writer(self._fd)
            loop.remove_reader(self._fd)
            self._registered = False
            self._pending = None
            if self._close_requested:
                self._close_now()

    def close(self) -> None:
        """Close the descriptor (idempotent). During an exchange (a close from another task), the exchange ends with
        EOFError and the descriptor is closed by the exchange itself, right after it unregistered it."""
        if self._closed:
            return
        if self._registered:
            self._close_requested = True
            if self._pending is not None and not self._pending.done():
                self._pending.set_exception(EOFError("the sandbox was closed"))
            return
        self._close_now()

    def _close_now(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __del__(self) -> None:
        # Dropped without close (as a multiprocessing Connection closes itself): never registered at this point,
        # since a registered reader or writer holds a reference to this object.
        if not self._closed and not self._registered:
            self._close_now()


_CHUNK = 256 * 1024
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest answer a sandbox may send (a tool's output the agent's arguments could inflate without bound):
beyond it the sandbox is killed and the call is a ``resource`` fault of whoever made it. tau2's tools answer with a
few kB; an environment's opening (schemas, policy) is well under 1 MB."""
OFF_LOOP_DECODE_BYTES = 1024 * 1024
"""Answers larger than this are unpickled in a worker thread, not on the event loop."""


def _frame_header(size: int) -> bytes:
    if size > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", size)
    return struct.pack("!i", size)


def _take_frame(inbox: bytearray, max_bytes: int) -> bytes | None:
    """Remove and return the first complete frame's body from ``inbox``, or None while it is incomplete."""
    if len(inbox) < 4:
        return None
    (size,) = struct.unpack_from("!i", inbox)
    start = 4
    if size == -1:
        if len(inbox) < 12:
            return None
        (size,) = struct.unpack_from("!Q", inbox, 4)
        start = 12
    if size < 0 or size > max_bytes:
        raise AnswerTooLarge(f"the tool sandbox's answer is larger than the limit of {max_bytes // 2**20} MiB")
    if len(inbox) < start + size:
        return None
    body = bytes(inbox[start : start + size])
    del inbox[: start + size]
    return body


def _dumps(message: dict[str, Any]) -> bytes:
    return bytes(ForkingPickler.dumps(message, pickle.HIGHEST_PROTOCOL))


def _loads(frame: bytes) -> dict[str, Any]:
    answer = pickle.loads(frame)
    if not isinstance(answer, dict):
        raise TypeError(f"expected a dict, got {type(answer).__name__}")
    return answer


def _ensure_fork_server(context: Any) -> None:
    context.set_forkserver_preload([PRELOAD_MODULE])
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _start(context: Any, process: multiprocessing.process.BaseProcess) -> None:
    _ensure_fork_server(context)
    process.start()


def _release_fork_server() -> None:
    """Close this child's copy of the fork server's liveness pipe.

    The fork server exits when every holder of that pipe's write end is gone, and the standard library hands a copy
    to each forked child. A sandbox busy in C code would then keep the fork server, and through it itself (its
    parent-death signal watches the fork server), alive after the green agent was killed. Sandboxes start no
    processes, so they do not need it.
    """
    from multiprocessing import forkserver

    fd = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)


def _child_entry(
    connection: multiprocessing.connection.Connection,
    domain: str,
    split: str | None,
    index: int,
    task_id: str,
    task_blob: bytes | None = None,
    retrieval: str | None = None,
) -> None:
    """Sandbox process main: tie our life to the parent's, then serve the environment until EOF."""
    _release_fork_server()
    die_with_parent()
    from green_agent.engine.tau.sandbox_child import serve

    serve(connection, domain, split, index, task_id, task_blob, retrieval)
    os._exit(0)  # skip interpreter teardown: nothing to flush, and it is the slowest part of exiting
