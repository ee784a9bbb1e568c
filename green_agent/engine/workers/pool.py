"""The battle's side of its attempt workers: start them, hand each attempt to the least loaded, collect results.

:class:`WorkerPool` is an async context manager owned by one battle (``Battle._run_attempts``): the workers start
when it is entered (each reports ``ready`` once its pools are up) and are always stopped when it exits, on success,
on cancel and on interrupt alike (end of input, then SIGKILL after :data:`STOP_GRACE_S`); a worker also dies with
the serving process (``PR_SET_PDEATHSIG``). Everything here runs on the event loop without blocking: the workers
are asyncio subprocesses, their answers are read by one task per worker (parsed in a thread when large).

Failures: a worker that dies, closes its stream or breaks the protocol is killed, and every attempt it held ends as
a harness error (``harness_error``, blamed on the harness, excluded from n, re-run by ``--resume --retry-infra``:
the existing retry policy); later attempts go to the remaining workers, and a replacement is started while the
pool's restart budget lasts (one per worker), so a crash never hangs the battle.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from green_agent.engine.attempt import AttemptSpec, harness_failure
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.engine.workers.protocol import (
    FROM_WORKER,
    MAX_MESSAGE_BYTES,
    AttemptDone,
    CancelAttempt,
    ProviderShare,
    RunAttempt,
    StartWorker,
    WorkerFailed,
    WorkerReady,
    encode,
)
from green_agent.provider_limits import DEFAULT_PROVIDER_MAX_CONCURRENCY, ProviderLimits, WorkerShares

log = logging.getLogger(__name__)

CHILD_MODULE = "green_agent.engine.workers.child"
START_TIMEOUT_S = 180.0
"""A worker imports tau2 and starts its scoring workers (~2-4 s on a quiet machine); this only catches a wedge."""
STOP_GRACE_S = 5.0
"""After end of input, how long a worker gets to cancel its attempts and close its pools before SIGKILL."""
PARSE_OFF_LOOP_BYTES = 64 * 1024


@dataclass(frozen=True)
class _Unreadable:
    """A ``done`` line whose result does not validate (a harness bug, never the agent's: the worker built it)."""

    attempt_id: int
    error: str


def _parse(line: bytes) -> WorkerReady | AttemptDone | WorkerFailed | _Unreadable:
    """One answer; ValueError when the line is not the protocol (the worker is then killed)."""
    try:
        return FROM_WORKER.validate_json(line)
    except ValueError as error:
        data = json.loads(line)  # ValueError again when it is not JSON at all
        attempt_id = data.get("attempt_id") if isinstance(data, dict) and data.get("kind") == "done" else None
        if isinstance(attempt_id, int) and not isinstance(attempt_id, bool):
            return _Unreadable(attempt_id, str(error)[:500])
        raise


class WorkerPoolError(RuntimeError):
    """The workers could not be started: the battle fails in the harness (nothing was blamed on the agent)."""


@dataclass
class _Worker:
    process: asyncio.subprocess.Process
    pending: dict[int, tuple[AttemptSpec, asyncio.Future[AttemptResult]]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    dead: str | None = None
    ready: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


class WorkerPool:
    """``processes`` attempt workers for one battle (see the module docstring)."""

    def __init__(
        self,
        *,
        processes: int,
        battle_id: str,
        white_agent_url: str,
        config: BattleConfig,
        run_dir: Path | None,
        scoring_workers: int = 1,
        provider_max_concurrency: int = DEFAULT_PROVIDER_MAX_CONCURRENCY,
        python: str = sys.executable,
        providers: ProviderLimits | None = None,
    ) -> None:
        self._processes = processes
        self._python = python
        per_worker = -(-config.concurrency // processes)
        self._start = StartWorker(
            battle_id=battle_id,
            white_agent_url=white_agent_url,
            config=config,
            run_dir=str(run_dir) if run_dir is not None else None,
            concurrency=per_worker,
            scoring_workers=scoring_workers,
            processes=processes,
            provider_max_concurrency=provider_max_concurrency,
        )
        self._start_line = encode(self._start)
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._restarts_left = processes
        self._spawning: asyncio.Lock = asyncio.Lock()
        self._closed = False
        self._providers = providers  # the service's ledger of the provider caps (None: cap // processes each)
        self._shares: WorkerShares | None = None

    @property
    def pids(self) -> list[int]:
        """The live workers' process ids (for tests and diagnostics)."""
        return [w.pid for w in self._workers if w.dead is None]

    async def __aenter__(self) -> Self:
        try:
            if self._providers is not None:  # before the spawns: the other battles' workers shrink first
                self._shares = self._providers.hold_workers(self._processes, self._tell_share)
            await asyncio.gather(*(self._spawn() for _ in range(self._processes)))
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _spawn(self) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            CHILD_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=MAX_MESSAGE_BYTES,
        )
        worker = _Worker(process, ready=asyncio.get_running_loop().create_future())
        self._workers.append(worker)
        worker.reader = asyncio.create_task(self._read(worker), name=f"attempt-worker-{process.pid}")
        assert process.stdin is not None and worker.ready is not None
        try:
            process.stdin.write(self._start_line)
            if self._shares is not None:
                process.stdin.write(encode(ProviderShare(slots=self._shares.slots)))
            await process.stdin.drain()
            async with asyncio.timeout(START_TIMEOUT_S):
                await asyncio.shield(worker.ready)
        except (OSError, TimeoutError) as error:
            self._kill(worker, f"did not start: {type(error).__name__} {error}".strip())
            raise WorkerPoolError(f"attempt worker {process.pid} did not start ({worker.dead})") from None
        return worker

    async def _read(self, worker: _Worker) -> None:
        """Answers of one worker until its stream ends; then whatever it held is a harness failure."""
        stdout = worker.process.stdout
        assert stdout is not None
        why = "closed its stream"
        try:
            while line := await stdout.readline():
                if len(line) > PARSE_OFF_LOOP_BYTES:
                    message = await asyncio.to_thread(_parse, line)
                else:
                    message = _parse(line)
                if isinstance(message, _Unreadable):  # one attempt's result did not validate: that attempt only
                    spec_future = worker.pending.pop(message.attempt_id, None)
                    if spec_future is not None and not spec_future[1].done():
                        detail = f"its result from the worker did not validate (harness): {message.error}"
                        spec_future[1].set_result(harness_failure(spec_future[0], detail))
                elif isinstance(message, AttemptDone):
                    spec_future = worker.pending.pop(message.attempt_id, None)
                    if spec_future is not None and not spec_future[1].done():
                        spec_future[1].set_result(message.result)
                elif isinstance(message, WorkerReady):
                    if worker.ready is not None and not worker.ready.done():
                        worker.ready.set_result(None)
                elif isinstance(message, WorkerFailed):
                    why = f"failed: {message.detail}"
                    break
        except asyncio.CancelledError:
            why = "was stopped"
            raise
        except (ValueError, OSError) as error:  # an overlong line, invalid JSON, a message out of protocol
            why = f"broke the protocol ({type(error).__name__}: {str(error)[:300]})"
        finally:
            self._kill(worker, why)

    def _kill(self, worker: _Worker, why: str) -> None:
        """Stop ``worker`` at once and end every attempt it held as a harness failure."""
        if worker.dead is None:
            worker.dead = why
        with contextlib.suppress(ProcessLookupError):
            if worker.process.returncode is None:
                worker.process.kill()
        if worker.ready is not None and not worker.ready.done():
            worker.ready.set_exception(WorkerPoolError(f"attempt worker {worker.pid} {worker.dead}"))
            worker.ready.exception()  # retrieved: a worker dying before anyone waits is not an unhandled error
        held, worker.pending = worker.pending, {}
        for spec, future in held.values():
            if not future.done():
                detail = f"the attempt worker process {worker.pid} running it {worker.dead} (harness)"
                future.set_result(harness_failure(spec, detail))

    async def _pick(self) -> _Worker | None:
        """The live worker holding the fewest attempts; a replacement when none lives (within the budget)."""
        live = [w for w in self._workers if w.dead is None]
        if live:
            return min(live, key=lambda w: len(w.pending))
        async with self._spawning:
            live = [w for w in self._workers if w.dead is None]
            if live:
                return live[0]
            if self._closed or self._restarts_left <= 0:
                return None
            self._restarts_left -= 1
            log.warning("battle %s: starting a replacement attempt worker", self._start.battle_id)
            try:
                return await self._spawn()
            except WorkerPoolError as error:
                log.error("battle %s: %s", self._start.battle_id, error)
                return None

    def _tell_share(self, slots: int) -> None:
        """The service changed this battle's workers' provider share: tell every live worker (no answer)."""
        line = encode(ProviderShare(slots=slots))
        for worker in self._workers:
            stdin = worker.process.stdin
            if worker.dead is None and stdin is not None and not stdin.is_closing():
                stdin.write(line)

    async def run(self, spec: AttemptSpec) -> AttemptResult:
        """Play ``spec`` in a worker; its result (a harness failure when the worker dies). Cancelling this cancels
        the attempt in its worker."""
        worker = await self._pick()
        if worker is None:
            return harness_failure(spec, "no attempt worker process is left to run it (harness)")
        if worker.dead is not None:  # died while _pick awaited its start: _kill already settled its pending attempts
            return harness_failure(spec, f"the attempt worker process {worker.pid} {worker.dead} before it (harness)")
        attempt_id = next(self._ids)
        future: asyncio.Future[AttemptResult] = asyncio.get_running_loop().create_future()
        worker.pending[attempt_id] = (spec, future)
        ref = spec.ref
        message = RunAttempt(
            attempt_id=attempt_id,
            domain=ref.domain,
            split=ref.split,
            index=ref.index,
            task_id=ref.task_id,
            attempt=spec.attempt,
        )
        stdin = worker.process.stdin
        assert stdin is not None
        try:
            stdin.write(encode(message))
            await stdin.drain()
            return await future
        except (OSError, RuntimeError) as error:  # its pipe broke: the reader notices the death too
            self._kill(worker, f"stopped reading ({type(error).__name__})")
            return await future
        except asyncio.CancelledError:
            if worker.pending.pop(attempt_id, None) is not None and worker.dead is None:
                with contextlib.suppress(OSError, RuntimeError):
                    stdin.write(encode(CancelAttempt(attempt_id=attempt_id)))
            raise

    async def aclose(self) -> None:
        """Stop every worker: end of input, a grace period to close sandboxes and pools, then SIGKILL. Never leaves
        a process behind, also when cancelled while it waits."""
        self._closed = True
        try:
            for worker in self._workers:
                if worker.process.stdin is not None and not worker.process.stdin.is_closing():
                    worker.process.stdin.close()
            waits = [w.process.wait() for w in self._workers if w.process.returncode is None]
            if waits:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STOP_GRACE_S):
                        await asyncio.gather(*waits)
        finally:
            try:
                for worker in self._workers:
                    self._kill(worker, "was stopped")
                await asyncio.gather(*(w.process.wait() for w in self._workers), return_exceptions=True)
                readers = [w.reader for w in self._workers if w.reader is not None]
                for reader in readers:
                    reader.cancel()
                await asyncio.gather(*readers, return_exceptions=True)
            finally:  # only once they stopped (they may have had model calls in flight), and also when cancelled
                if self._shares is not None:
                    self._shares.release()


MIN_IN_FLIGHT_PER_WORKER = 16
"""A battle is split over worker processes only when each gets at least this many attempts in flight: below, one
event loop keeps up (measured: within 1.16x of ideal up to 64 in flight) and a worker's start-up (~3 s) is not
worth it."""


def worker_processes(workers: int, config: BattleConfig, attempts: int) -> int:
    """How many worker processes a battle uses: at most ``workers`` (the operator's ``--workers``), one per
    :data:`MIN_IN_FLIGHT_PER_WORKER` attempts of its concurrency, no more than its attempts; 1 (the serving
    process itself, as before workers existed) for ``tool_mode = "mcp"``, whose tools the serving process's MCP
    endpoint serves."""
    if config.tool_mode != "text":
        return 1
    return max(1, min(workers, -(-config.concurrency // MIN_IN_FLIGHT_PER_WORKER), attempts))


@contextlib.asynccontextmanager
async def attempt_workers(
    *,
    workers: int,
    battle_id: str,
    white_agent_url: str,
    config: BattleConfig,
    run_dir: Path | None,
    scoring_workers: int,
    attempts: int,
    provider_max_concurrency: int = DEFAULT_PROVIDER_MAX_CONCURRENCY,
    providers: ProviderLimits | None = None,
) -> AsyncIterator[WorkerPool | None]:
    """The battle's worker pool, or None when its attempts run in the serving process (see
    :func:`worker_processes`); scoring workers are split between the processes (at least one each)."""
    processes = worker_processes(workers, config, attempts)
    if processes <= 1:
        yield None
        return
    pool = WorkerPool(
        processes=processes,
        battle_id=battle_id,
        white_agent_url=white_agent_url,
        config=config,
        run_dir=run_dir,
        scoring_workers=max(1, -(-scoring_workers // processes)),
        provider_max_concurrency=provider_max_concurrency,
        providers=providers,
    )
    async with pool:
        yield pool
