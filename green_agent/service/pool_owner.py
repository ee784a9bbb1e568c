"""The owner's side of a battle worked by a pool of green agents (issue 29; docs/design/attempt-leases.md).

When a battle runs on a green agent that is a member of a pool (``arena-green --pool``) and reports, with its battle
token, to the backend that holds the pool's queue, :func:`pool_runners` gives the battle a :class:`PoolOwner` as its
attempt runner (green_agent/engine/attempt_runner.py) instead of running attempts in its process or local workers.
Without a pool, or for a battle that reports nowhere (``arena run`` without a backend) or without a token, it gives
nothing and the battle runs as today.

The owner *publishes* an attempt when the battle asks to run it (``run(spec)``, called under the battle's
concurrency gate): at most ``concurrency`` attempts are published and not yet finished, so the battle's concurrency
bounds the load the pool puts on the white agent, and a battle that stops (a budget, certification, a cancel)
publishes nothing more. The ``run`` calls of one moment (``batch_s``, 20 ms) go in one request of at most
MAX_ATTEMPTS_PER_PUBLISH attempts and about PUBLISH_BYTES (one ``PooledAttempt`` payload each). Publishing is
idempotent per (task, attempt): what a previous owner published (a resume, a takeover) is answered ``already``, and
an attempt the store already holds finished is handed back at once. From the first publish on, the owner keeps two
tasks: an *owner heartbeat* every third of ``owner_ttl_s`` (members take the battle over when it stops), and a
*collector* reading ``GET /battles/{id}/attempts``: the store's tail once after publishes (to find where the
attempts just published stand; the first read of a resumed or taken-over battle reads the queue from its start),
then only the pages holding attempts still open (at once after a read that brought news, else after ``idle_s``).
Each ``done`` attempt's recorded ``PooledResult`` is validated and checked to be this battle's, task's and
attempt's (otherwise, or for a ``failed`` attempt, or one the store does not hold after its publish was answered,
the attempt is a harness failure: excluded from n, never the agent's); its trajectory, when the member sent one, is
written into the run directory's ``trajectories/`` exactly as a local attempt's, and handed to the battle's event.
The battle (still the one writer of attempts.jsonl, events and statistics) gets each result from ``run``.

The owner runs no attempt itself: its process leases like any member (``pool_runner`` beside the A2A server).

Cancel and interrupt: leaving the context (the battle ends, is cancelled or interrupted) stops the collector and the
heartbeats; nothing is un-published. Members keep working the queue while the backend battle is running: a
cancelled battle posts its result, the backend marks it over and its remaining attempts are no longer leased; an
interrupted owner stops heartbeating, so after ``owner_ttl_s`` a member takes the battle over and finishes it from
the store (green_agent/service/pool_takeover.py), unless the owner is resumed first. A battle stopped early by its
budget or by certification has published only the attempts it started: those finish, nothing else is leased.

Everything read from the store is hostile (any holder of the pool key records results): pages are bounded by the
client, results validated off the event loop, texts cleaned and cut before they reach a log line or a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pydantic import ValidationError

from green_agent.engine.attempt import AttemptSpec, harness_failure, write_trajectory_file
from green_agent.engine.attempt_runner import AttemptPlan, AttemptRunners
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.tasks import TaskRef
from green_agent.service.attempt_lease_client import AttemptLeaseClient, AttemptLeaseError
from green_agent.service.backend_target import BackendTarget
from green_agent.service.outbox import clean_text
from green_agent.service.pool_runner import check_admissible
from green_agent.service.pool_settings import PoolSettings as PoolSettings  # re-exported for the registry
from green_agent.wire.attempt_leases import MAX_ATTEMPTS_PER_PUBLISH, AttemptIn, AttemptOut, PublishResponse
from green_agent.wire.pool_attempts import MAX_WHITE_NAME_CHARS, PooledAttempt, PooledBattle, PooledResult

log = logging.getLogger(__name__)

Key = tuple[str, int]
DEFAULT_OWNER_TTL_S = 60.0
PUBLISH_BYTES = 512 * 1024
"""Payload bytes per publish request (the backend's ``max_request_bytes`` is 1 MiB by default)."""
PAGE_SIZE = 25
"""Attempts per read: each may carry a result of up to ~1 MiB (the client reads at most 64 MiB per answer)."""
IDLE_S = 0.5
BATCH_S = 0.02
"""How long the first ``run`` call waits for others to share its publish request."""
MAX_DETAIL_CHARS = 1000
DEFAULT_WHITE_NAME = "white_agent"


def pool_runners(
    settings: PoolSettings | None, target: BackendTarget | None, config: BattleConfig, operator: BattleConfig
) -> AttemptRunners | None:
    """The battle's pooled attempt runner when this green agent is in a pool and the battle reports with its token to
    the pool's backend; None otherwise (the battle runs its attempts as today). A battle this green agent's own member
    would refuse (``check_admissible`` against the ``operator``'s config: tools served natively, an LLM user other
    than the operator's, caps above its) is not pooled either: it runs here as today."""
    if settings is None or target is None or not target.token:
        return None
    if not settings.serves(target.url):  # e.g. another replica's address, or localhost against 127.0.0.1
        log.warning(
            "battle reports to %s, not to pool %s's backend %s: its attempts run here, unpooled (give every green "
            "agent of the pool the address its battles report to as --pool-backend)",
            target.url,
            settings.name,
            settings.backend_url,
        )
        return None
    try:
        check_admissible(config, operator)
    except ValueError as error:
        log.info("battle not published to pool %s (its members would refuse it: %s); run here", settings.name, error)
        return None
    token = target.token
    white_name = target.white_name if target.white_name != DEFAULT_WHITE_NAME else None

    def runners(plan: AttemptPlan) -> PoolOwner:
        return PoolOwner(plan, settings, token, white_name=white_name)

    return runners


class PoolOwner:
    """Publishes a battle's attempts to its pool as the battle starts them, and hands back each one's result as
    members record it."""

    def __init__(
        self,
        plan: AttemptPlan,
        settings: PoolSettings,
        token: str,
        *,
        client: AttemptLeaseClient | None = None,
        owner_ttl_s: float = DEFAULT_OWNER_TTL_S,
        max_requeues: int = 2,
        page_size: int = PAGE_SIZE,
        idle_s: float = IDLE_S,
        batch_s: float = BATCH_S,
        white_name: str | None = None,
    ) -> None:
        self.plan = plan
        self._settings = settings
        self._token = token
        self._given_client = client
        self._client = client
        self.owner_ttl_s = owner_ttl_s
        self._max_requeues = max_requeues
        self._page_size = page_size
        self._idle_s = idle_s
        self._batch_s = batch_s
        if white_name is not None and not 0 < len(white_name) <= MAX_WHITE_NAME_CHARS:
            log.warning("battle %s: the white agent's name is not carried to the pool (too long)", plan.battle_id)
            white_name = None
        self._white_name = white_name
        self._wanted: dict[Key, tuple[TaskRef, int]] = {(ref.key, a): (ref, a) for ref, a in plan.attempts}
        self._resolved: set[Key] = set()
        self._ready: dict[Key, AttemptResult] = {}
        self._waiting: dict[Key, asyncio.Future[AttemptResult]] = {}
        self._failure: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Publishing: run() queues, the publisher sends; an attempt is published at most once by this owner.
        self._to_publish: list[Key] = []
        self._asked: set[Key] = set()
        self._publish_wake = asyncio.Event()
        self._publishes = 0
        # Collecting: where the store holds our attempts (publish order), what it was not seen to hold yet.
        self._unlocated: dict[Key, int] = {}
        """Published (the answer came) and not seen in the store yet: the number of the publish that answered."""
        self._located: set[Key] = set()
        self._open_at: list[int] = []
        self._end = 0
        """The store's attempts before this position have been read once."""
        self._collect_wake = asyncio.Event()
        self.published: PublishResponse | None = None
        """What the publishes so far added and found already there (None before the first)."""

    def __repr__(self) -> str:
        return f"PoolOwner(battle={self.plan.battle_id!r}, pool={self._settings.name!r}, token='set')"

    # ------------------------------------------------------------------------------------------ the context

    async def __aenter__(self) -> Self:
        if self._client is None:
            self._client = AttemptLeaseClient(self._settings.backend_url, self._settings.name, self._settings.key)
        if self._wanted:
            name = f"pool-publish-{self.plan.battle_id}"
            self._tasks.append(asyncio.create_task(self._publishing(self._client), name=name))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        self._to_publish.clear()  # a battle that ends (stopped early included) publishes nothing more
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail_waiting("the battle's pool runner was closed")
        if self.published is not None:
            log.info(
                "battle %s: %d attempts published to pool %s (%d already there)",
                *(self.plan.battle_id, self.published.added, self._settings.name, self.published.already),
            )
        if self._given_client is None and self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------------------------------------ the runner

    async def run(self, spec: AttemptSpec) -> AttemptResult:
        """The attempt's result once a member recorded it (or the pool failed it): published now unless the store
        holds it already; never run here."""
        key = (spec.ref.key, spec.attempt)
        if key not in self._wanted:
            return harness_failure(spec, "pool: this attempt was not published (harness)")
        if (ready := self._ready.pop(key, None)) is not None:
            return ready
        if self._failure is not None:
            return harness_failure(spec, self._failure)
        future: asyncio.Future[AttemptResult] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        if key not in self._asked and key not in self._located:
            self._asked.add(key)
            self._to_publish.append(key)
            self._publish_wake.set()
        try:
            return await future
        finally:
            self._waiting.pop(key, None)
            if key in self._to_publish:  # not sent: an attempt nobody awaits is not published
                self._to_publish.remove(key)
                self._asked.discard(key)

    # ------------------------------------------------------------------------------------------ publish

    async def _publishing(self, client: AttemptLeaseClient) -> None:
        """Publish what ``run`` asked for, the calls of one moment in one request, until closed; a publish that
        fails for good fails the attempts awaited and those asked later as harness errors."""
        try:
            while True:
                await self._publish_wake.wait()
                await asyncio.sleep(self._batch_s)
                self._publish_wake.clear()
                while self._to_publish:
                    batch = self._to_publish[:MAX_ATTEMPTS_PER_PUBLISH]
                    del self._to_publish[: len(batch)]
                    for chunk in await asyncio.to_thread(self._chunks, batch):
                        answer = await client.publish(
                            self.plan.battle_id,
                            self._token,
                            owner_worker=self._settings.worker_id,
                            attempts=chunk,
                            max_requeues=self._max_requeues,
                            owner_ttl_s=self.owner_ttl_s,
                        )
                        self._answered([(a.task_key, a.attempt) for a in chunk], answer, client)
        except AttemptLeaseError as error:
            self._give_up(f"pool: the attempts could not be published to the backend: {error}")
        except Exception as error:  # a bug here must end the attempts, never hang the battle
            log.exception("battle %s: publishing to the pool failed", self.plan.battle_id)
            self._give_up(f"pool: publishing failed ({type(error).__name__}: {error})")

    def _answered(self, keys: list[Key], answer: PublishResponse, client: AttemptLeaseClient) -> None:
        self._publishes += 1
        for key in keys:
            if key not in self._located and key not in self._resolved:
                self._unlocated[key] = self._publishes
        before = self.published or PublishResponse(added=0, already=0)
        self.published = PublishResponse(added=before.added + answer.added, already=before.already + answer.already)
        if len(self._tasks) == 1:  # the first publish: the queue exists now
            battle_id = self.plan.battle_id
            self._tasks += [
                asyncio.create_task(self._heartbeats(client), name=f"pool-owner-{battle_id}"),
                asyncio.create_task(self._collect(client), name=f"pool-collect-{battle_id}"),
            ]
        self._collect_wake.set()

    def _chunks(self, keys: list[Key]) -> list[list[AttemptIn]]:
        """The attempts' payloads in requests of at most MAX_ATTEMPTS_PER_PUBLISH and about PUBLISH_BYTES (a thread:
        one config dump per attempt)."""
        battle = PooledBattle(
            battle_id=self.plan.battle_id,
            white_agent_url=self.plan.white_agent_url,
            config=self.plan.config,
            white_name=self._white_name,
        )
        chunks: list[list[AttemptIn]] = [[]]
        size = 0
        for key in keys:
            ref, attempt = self._wanted[key]
            payload = PooledAttempt(
                battle=battle, domain=ref.domain, split=ref.split, index=ref.index, task_id=ref.task_id, attempt=attempt
            ).payload()
            length = len(json.dumps(payload, separators=(",", ":")))
            if chunks[-1] and (len(chunks[-1]) >= MAX_ATTEMPTS_PER_PUBLISH or size + length > PUBLISH_BYTES):
                chunks.append([])
                size = 0
            chunks[-1].append(AttemptIn(task_key=ref.key, attempt=attempt, payload=payload))
            size += length
        return [chunk for chunk in chunks if chunk]

    # ------------------------------------------------------------------------------------------ heartbeats

    async def _heartbeats(self, client: AttemptLeaseClient) -> None:
        while True:
            await asyncio.sleep(self.owner_ttl_s / 3)
            try:
                await client.owner_heartbeat(self.plan.battle_id, self._token, self._settings.worker_id)
            except AttemptLeaseError as error:  # members may take the battle over if this lasts
                log.warning("battle %s: owner heartbeat failed: %s", self.plan.battle_id, error)

    # ------------------------------------------------------------------------------------------ collector

    async def _collect(self, client: AttemptLeaseClient) -> None:
        """Read the stored attempts while the battle runs (idle while nothing is published and open); a collector
        that cannot go on fails the attempts awaited as harness errors (journaled as such; the store keeps what
        members record)."""
        try:
            while True:
                self._collect_wake.clear()
                if await self._sweep(client):
                    continue
                if self._open_at or self._unlocated:
                    await asyncio.sleep(self._idle_s)
                else:
                    await self._collect_wake.wait()
        except AttemptLeaseError as error:
            self._give_up(f"pool: the attempts' results could not be read from the backend: {error}")
        except Exception as error:  # a bug here must end the attempts, never hang the battle
            log.exception("battle %s: the pool collector failed", self.plan.battle_id)
            self._give_up(f"pool: the collector failed ({type(error).__name__}: {error})")

    async def _sweep(self, client: AttemptLeaseClient) -> bool:
        """One pass: the pages holding the attempts open at the last pass, then (when publishes were answered since)
        the store's tail; settle what finished and return whether anything did. An attempt published before this pass
        began that the store does not hold at all is a harness failure (nothing would record it)."""
        published = self._publishes
        still, news = await self._read_open(client)
        if self._unlocated:
            news = await self._read_tail(client, still) or news
            for key, number in list(self._unlocated.items()):
                if number <= published:
                    del self._unlocated[key]
                    if key not in self._resolved:
                        self._resolved.add(key)
                        missing = self._failed(key, "pool: the backend's queue does not hold this attempt")
                        self._deliver(key, missing, None)
                        news = True
        self._open_at = sorted(still)
        return news

    async def _read_open(self, client: AttemptLeaseClient) -> tuple[list[int], bool]:
        """Read only the pages holding the attempts open at the last pass (a finished attempt never changes, so the
        rest is not read again): (those still open, whether any settled)."""
        open_at, still, news, i = self._open_at, [], False, 0
        while i < len(open_at):
            at, j = open_at[i], i
            while j + 1 < len(open_at) and open_at[j + 1] < at + self._page_size:
                j += 1
            page = await client.read(self.plan.battle_id, token=self._token, offset=at, limit=open_at[j] - at + 1)
            states = dict(enumerate(page.attempts, start=at))
            for index in open_at[i : j + 1]:
                stored = states.get(index)
                if stored is None:  # the store no longer lists it: read from there again next time
                    still.append(index)
                elif stored.state in ("done", "failed"):
                    news = await self._settle(stored) or news
                elif (stored.task_key, stored.attempt) in self._wanted:
                    still.append(index)
            i = j + 1
        return still, news

    async def _read_tail(self, client: AttemptLeaseClient, still: list[int]) -> bool:
        """Read the store from the first position not read yet to its end (publish order has no gaps): locate our
        attempts there, settle the finished ones, add the open ones' positions to ``still``."""
        news, at = False, self._end
        while True:
            page = await client.read(self.plan.battle_id, token=self._token, offset=at, limit=self._page_size)
            for index, stored in enumerate(page.attempts, start=at):
                key = (stored.task_key, stored.attempt)
                self._unlocated.pop(key, None)
                if key not in self._wanted or key in self._resolved:
                    continue
                self._located.add(key)
                if stored.state in ("done", "failed"):
                    news = await self._settle(stored) or news
                else:
                    still.append(index)
            at += len(page.attempts)  # a next_offset elsewhere is not followed
            self._end = at
            if page.next_offset is None or not page.attempts:
                return news

    async def _settle(self, stored: AttemptOut) -> bool:
        """Hand a finished attempt to ``run`` (once); False when it is not one of ours or is known already."""
        key = (stored.task_key, stored.attempt)
        if key not in self._wanted or key in self._resolved:
            return False
        self._resolved.add(key)
        result, records = await self._result_of(self._spec(key), stored)
        self._deliver(key, result, records)
        return True

    def _deliver(self, key: Key, result: AttemptResult, records: list[dict[str, Any]] | None) -> None:
        future = self._waiting.get(key)
        if future is not None and not future.done():
            if records is not None:  # only lent to an event that is sent now (else the sinks read the file)
                result.keep_trajectory(records)
            future.set_result(result)
        else:
            self._ready[key] = result

    def _spec(self, key: Key) -> AttemptSpec:
        ref, attempt = self._wanted[key]
        return AttemptSpec(self.plan.battle_id, ref, attempt, self.plan.white_agent_url)

    def _failed(self, key: Key, why: str) -> AttemptResult:
        return harness_failure(self._spec(key), why)

    async def _result_of(
        self, spec: AttemptSpec, stored: AttemptOut
    ) -> tuple[AttemptResult, list[dict[str, Any]] | None]:
        by = _text(stored.recorded_by or "a member")
        if stored.state == "failed":
            last = stored.error or next((h.detail for h in reversed(stored.history) if h.detail), None)
            tries = len(stored.history) or stored.requeues + 1
            detail = f"pool: the attempt failed in the harness on {tries} tries; last error: {_text(last or 'none')}"
            return harness_failure(spec, detail), None
        if stored.result is None:
            return harness_failure(spec, f"pool: {by} recorded no result (harness)"), None
        try:
            pooled = await asyncio.to_thread(PooledResult.model_validate, stored.result)
        except ValidationError as error:
            first = error.errors(include_url=False)[0] if error.errors() else {"loc": (), "msg": "invalid"}
            where = ".".join(str(p) for p in first.get("loc", ())) or "the result"
            problem = f"{where}: {first.get('msg')}"
            return harness_failure(spec, f"pool: the result {by} recorded does not validate ({_text(problem)})"), None
        result = pooled.result.model_copy()
        if (mismatch := _mismatch(spec, result)) is not None:
            return harness_failure(spec, f"pool: the result {by} recorded is {_text(mismatch)} (harness)"), None
        result.trajectory_file = None
        records = pooled.trajectory
        if records is not None and self.plan.run_dir is not None:
            directory = Path(self.plan.run_dir) / "trajectories"
            try:
                result.trajectory_file = await asyncio.to_thread(
                    write_trajectory_file, directory, spec, result, records
                )
            except (OSError, ValueError) as error:
                log.error("attempt %s/%s: trajectory not written: %s", spec.ref.key, spec.attempt, error)
        return result, records

    def _give_up(self, why: str) -> None:
        self._failure = why
        log.error("battle %s: %s", self.plan.battle_id, why)
        self._fail_waiting(why)

    def _fail_waiting(self, why: str) -> None:
        for key, future in list(self._waiting.items()):
            if not future.done():
                future.set_result(self._failed(key, why))


def _mismatch(spec: AttemptSpec, result: AttemptResult) -> str | None:
    """What in a recorded result names another battle, task or attempt than the one leased (None: it is this one)."""
    ref = spec.ref
    expected = (spec.battle_id, ref.domain, ref.split, ref.index, ref.task_id, spec.attempt)
    got = (result.battle_id, result.domain, result.split, result.task_index, result.task_id, result.attempt)
    names = ("battle_id", "domain", "split", "task_index", "task_id", "attempt")
    for name, want, have in zip(names, expected, got, strict=True):
        if want != have:
            return f"for {name} {have!r}, not {want!r}"
    return None


def _text(value: str) -> str:
    """Text from the store, fit for a failure's detail and a log line (one line, bounded)."""
    return clean_text(value, None)[:MAX_DETAIL_CHARS]
