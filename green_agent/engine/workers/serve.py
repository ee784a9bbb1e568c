"""A worker's loop (started by :mod:`.child`): the battle's ``start``, then attempts until end of input."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, harness_failure, run_attempt
from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.channels import a2a_channels
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import TaskRef, resolve_task
from green_agent.engine.tau.users import make_user, user_api_key
from green_agent.engine.workers.protocol import (
    MAX_DETAIL_CHARS,
    MAX_MESSAGE_BYTES,
    TO_WORKER,
    AttemptDone,
    CancelAttempt,
    ProviderShare,
    RunAttempt,
    StartWorker,
    WorkerFailed,
    WorkerReady,
    _Message,
    encode,
)
from green_agent.provider_limits import ProviderLimits

log = logging.getLogger(__name__)


class _Out:
    """The answer stream: whole lines, one writer at a time."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._lock = asyncio.Lock()

    async def send(self, message: _Message) -> None:
        line = encode(message)
        async with self._lock:
            self._writer.write(line)
            await self._writer.drain()


async def _pipes(protocol_fd: int) -> tuple[asyncio.StreamReader, _Out]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(protocol_fd, "wb", buffering=0)
    )
    return reader, _Out(asyncio.StreamWriter(transport, protocol, None, loop))


async def serve(protocol_fd: int) -> None:
    reader, out = await _pipes(protocol_fd)
    first = await reader.readline()
    try:
        start = TO_WORKER.validate_json(first)
    except ValidationError as error:
        await out.send(WorkerFailed(detail=f"the first message is not a valid start: {error}"[:MAX_DETAIL_CHARS]))
        return
    if not isinstance(start, StartWorker):
        await out.send(WorkerFailed(detail=f"the first message must be start, not {start.kind}"))
        return
    try:
        async with contextlib.AsyncExitStack() as stack:
            limits = _provider_limits(start)
            deps = await _deps(start, stack, limits)
            await out.send(WorkerReady(pid=os.getpid()))
            await _attempts(start, deps, reader, out, limits)
    except Exception as error:  # the pools could not start: tell the battle, which blames the harness
        log.exception("worker of battle %s failed", start.battle_id)
        with contextlib.suppress(Exception):
            await out.send(WorkerFailed(detail=f"{type(error).__name__}: {error}"[:MAX_DETAIL_CHARS]))


async def _deps(start: StartWorker, stack: contextlib.AsyncExitStack, limits: ProviderLimits) -> AttemptDeps:
    cfg = start.config
    # Not waited for: the worker takes attempts at once; the first scores wait for the scoring workers to start.
    scoring = await stack.enter_async_context(ScoringPool(max_workers=start.scoring_workers, warm=False))
    warming = asyncio.create_task(scoring.start())
    stack.push_async_callback(_cancel_and_wait, warming)
    sandboxes = await stack.enter_async_context(SandboxFactory())
    http = await stack.enter_async_context(
        capped_http_client(max_bytes=cfg.max_reply_bytes, max_connections=max(8, start.concurrency + 4))
    )
    run_dir = Path(start.run_dir) if start.run_dir is not None else None
    return AttemptDeps(
        config=cfg,
        scoring=scoring,
        white_channels=a2a_channels(http, concurrency=cfg.concurrency),  # warns near the agent's bound
        # The worker's share of the operator's provider caps (docs/design/providers.md, "Worker processes").
        user_factory=functools.partial(make_user, limiter=limits.for_user(cfg)),
        user_api_key=user_api_key(cfg.user_simulator),
        trajectories_dir=run_dir / "trajectories" if run_dir is not None else None,
        tool_gateway=None,  # tool_mode "mcp" battles run in the serving process (its MCP endpoint serves the tools)
        sandboxes=sandboxes,
    )


def _provider_limits(start: StartWorker) -> ProviderLimits:
    return ProviderLimits(max_concurrency=start.provider_max_concurrency, workers=start.processes)


async def _attempts(
    start: StartWorker, deps: AttemptDeps, reader: asyncio.StreamReader, out: _Out, limits: ProviderLimits
) -> None:
    running: dict[int, asyncio.Task[None]] = {}
    try:
        while line := await reader.readline():
            message = TO_WORKER.validate_json(line)
            if isinstance(message, RunAttempt):
                task = asyncio.create_task(_one(start, deps, message, out), name=f"attempt-{message.attempt_id}")
                running[message.attempt_id] = task
                task.add_done_callback(_forget(running, message.attempt_id))
            elif isinstance(message, CancelAttempt):
                if (task_ := running.get(message.attempt_id)) is not None:
                    task_.cancel()
            elif isinstance(message, ProviderShare):
                limits.set_share(message.slots)
            else:
                raise ValueError("start sent twice")
    finally:  # end of input (the battle closes us) or a broken stream: stop everything, close the pools
        for task_ in list(running.values()):
            task_.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


def _forget(running: dict[int, asyncio.Task[None]], attempt_id: int) -> Callable[[asyncio.Task[None]], None]:
    def forget(_task: asyncio.Task[None]) -> None:
        running.pop(attempt_id, None)

    return forget


async def _one(start: StartWorker, deps: AttemptDeps, message: RunAttempt, out: _Out) -> None:
    result: AttemptResult
    try:
        ref: TaskRef = await asyncio.to_thread(
            resolve_task, message.domain, message.split, message.index, start.config.retrieval
        )
        spec = AttemptSpec(start.battle_id, ref, message.attempt, start.white_agent_url)
        if ref.task_id != message.task_id:
            result = harness_failure(spec, f"task {ref.key} is {ref.task_id!r} here, not {message.task_id!r}")
        else:
            try:
                result = await run_attempt(spec, deps)
            except Exception as error:
                log.exception("attempt %s/%s raised", ref.key, message.attempt)
                result = harness_failure(spec, f"{type(error).__name__} in the attempt loop: {error}")
    except asyncio.CancelledError:
        return  # the battle no longer waits for it
    except Exception as error:  # the task could not be resolved here (the battle resolved it): the harness's
        log.exception("attempt %s could not start", message.attempt_id)
        spec = AttemptSpec(start.battle_id, _ref_of(message), message.attempt, start.white_agent_url)
        result = harness_failure(spec, f"the worker could not load the task: {type(error).__name__}: {error}")
    result.take_trajectory()  # the battle's sinks read it from the trajectory file
    try:
        await out.send(AttemptDone(attempt_id=message.attempt_id, result=result))
    except ValueError as error:  # too large to cross (results are bounded: not seen in practice)
        detail = f"its result cannot cross the worker boundary: {error}"[:MAX_DETAIL_CHARS]
        failed = harness_failure(AttemptSpec(start.battle_id, _ref_of(message), message.attempt, ""), detail)
        await out.send(AttemptDone(attempt_id=message.attempt_id, result=failed))


def _ref_of(message: RunAttempt) -> TaskRef:
    """The attempt's task named without its tau2 object (enough for a harness failure's identity fields)."""
    return TaskRef(message.domain, message.split, message.index, message.task_id, task=cast(Any, None))
