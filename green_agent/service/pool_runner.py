"""The member side of a pooled battle (issue 29): run one leased attempt and return what the member records.

:class:`PoolRunner` is the ``run_attempt(lease) -> result`` of a :class:`~green_agent.service.pool_member.PoolMember`.
It plays the attempt in this process exactly as a battle's own attempt (or a local attempt worker,
green_agent/engine/workers/serve.py) plays it, and returns a :class:`~green_agent.wire.pool_attempts.PooledResult`
as JSON: the ``AttemptResult`` and, when it fits in :data:`~green_agent.wire.pool_attempts.MAX_RESULT_BYTES`, the
attempt's trajectory records (``AttemptResult.take_trajectory()``: the messages after the file's header line; the
owner writes the file and the header from the result). Nothing is written to a shared directory: trajectory files go
to a member-local temporary directory and are deleted once their records are taken.

Whose fault is what:

- A payload that is not a valid ``arena.pool-attempt/1`` (or whose battle, task key or attempt number disagree with
  the lease), a config this member may not run (an LLM user other than its operator's, a cap above its operator's,
  ``tool_mode = "mcp"``), or attempt dependencies that cannot be built: :meth:`PoolRunner.run_attempt` raises, so
  the member reports an *infrastructure* error (requeued, then failed): the harness's, never the agent's.
- Everything that happens inside the attempt is its result, exactly as in one process: the agent's failures, and
  the harness failures of the attempt itself (a task whose tau2 id differs here, a task that cannot be loaded, an
  exception in the attempt loop) as ``harness_error`` results, excluded from n by the owner's statistics.

Per battle (battle id and a digest of its :class:`~green_agent.wire.pool_attempts.PooledBattle`), the runner keeps
what the attempts share: a byte-capped HTTP pool to the white agent with its card cache, the user factory with this
member's share of the provider caps (the service's ``ProviderLimits``) and a trajectory directory; built on the
battle's first attempt, closed when it has had no attempt for ``idle_close_s`` (or when too many idle battles pile
up) and when the runner closes. The scoring processes and the tool-sandbox factory are the process's (the app's, as
for the battles it runs itself). The caller bounds concurrency (``PoolMember(capacity=...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import mkdtemp
from typing import Any, Final, cast

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, harness_failure, run_attempt
from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.channels import Scorer, a2a_channels
from green_agent.engine.config import (
    OPERATOR_CAPPED_FIELDS,
    OPERATOR_CAPPED_USER_FIELDS,
    OPERATOR_ONLY_USER_FIELDS,
    BattleConfig,
)
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.tasks import TaskRef, resolve_task
from green_agent.engine.tau.users import make_user, user_api_key
from green_agent.provider_limits import ProviderLimits
from green_agent.service.pool_settings import DEFAULT_CAPACITY
from green_agent.text_safety import clean_json
from green_agent.wire.attempt_leases import LeaseOut
from green_agent.wire.pool_attempts import (
    MAX_RESULT_BYTES,
    MAX_TRAJECTORY_RECORDS,
    PooledAttempt,
    PooledBattle,
    PooledResult,
)

log = logging.getLogger(__name__)

BattleSeen = Callable[[PooledBattle, str], None]
"""Told once per battle id, on the event loop, the first time this member leases one of its attempts: the battle and
the pool backend's URL (the takeover watch of green_agent/service/pool_takeover.py). Must not block; what it raises
is logged and ignored."""

DEFAULT_IDLE_CLOSE_S: Final = 120.0
MAX_IDLE_BATTLES: Final = 64
"""Idle battles whose dependencies stay open at most; beyond, the least recently used is closed at once."""
MAX_SEEN_BATTLES: Final = 10_000
"""Battle ids remembered for :data:`BattleSeen` (older ones are forgotten, and told again if they come back)."""


@dataclass
class _Battle:
    """One battle's shared attempt dependencies on this member."""

    battle: PooledBattle
    deps: AttemptDeps
    stack: contextlib.AsyncExitStack
    directory: Path | None
    """Where its attempts' trajectory files go until their records are taken (None: no temporary folder could be
    made; its results then carry no trajectory)."""
    active: int = 0
    last_used: float = field(default_factory=time.monotonic)


class PoolRunner:
    """Runs leased attempts in this process (``async with``: the idle sweeper runs, and everything closes on exit)."""

    def __init__(
        self,
        worker_id: str,
        *,
        scoring: Scorer,
        providers: ProviderLimits,
        operator_config: BattleConfig | None = None,
        sandboxes: SandboxFactory | None = None,
        capacity: int = DEFAULT_CAPACITY,
        backend_url: str = "",
        on_battle_seen: BattleSeen | None = None,
        idle_close_s: float = DEFAULT_IDLE_CLOSE_S,
        max_idle_battles: int = MAX_IDLE_BATTLES,
    ) -> None:
        if not idle_close_s > 0:
            raise ValueError(f"idle_close_s must be above 0, not {idle_close_s}")
        self.worker_id = worker_id
        self._scoring = scoring
        self._providers = providers
        self._operator = operator_config or BattleConfig()
        """This member's operator's defaults (``--scenario``): what an attempt's config may not exceed."""
        self._sandboxes = sandboxes
        self._capacity = capacity
        self._backend_url = backend_url
        self._on_battle_seen = on_battle_seen
        self._idle_close_s = idle_close_s
        self._max_idle = max_idle_battles
        self._battles: dict[tuple[str, str], _Battle] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = asyncio.Lock()
        self._root: Path | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def __aenter__(self) -> PoolRunner:
        self._sweeper = asyncio.create_task(self._sweep(), name=f"pool-runner-sweep-{self.worker_id}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def open_battles(self) -> int:
        """Battles whose attempt dependencies are open now."""
        return len(self._battles)

    async def aclose(self) -> None:
        """Close every battle's dependencies and the trajectory directory (attempts still running are the caller's
        to cancel first: the member is stopped before its runner)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        battles, self._battles = list(self._battles.values()), {}
        for battle in battles:
            await _close(battle)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._root is not None:
            await asyncio.to_thread(shutil.rmtree, self._root, True)
            self._root = None

    # ------------------------------------------------------------------------------------------------ one attempt

    async def run_attempt(self, lease: LeaseOut) -> dict[str, Any]:
        """Run the leased attempt; its :class:`PooledResult` as JSON. Raises (ValueError naming the payload's field,
        or the error that kept its dependencies from being built) when the harness cannot run it here."""
        if self._closed:
            raise RuntimeError("the pool runner is closed")
        attempt, digest = await asyncio.to_thread(_validated, lease, self._operator)
        self._tell_seen(attempt.battle)
        battle = await self._acquire(attempt.battle, digest)
        try:
            result = await self._play(attempt, battle.deps)
        finally:
            battle.active -= 1
            battle.last_used = time.monotonic()
        records = result.take_trajectory()
        if result.trajectory_file is not None and battle.directory is not None:  # records travel in the result
            file = battle.directory / Path(result.trajectory_file).name
            await asyncio.to_thread(file.unlink, True)
            result.trajectory_file = None
        return await asyncio.to_thread(_encoded, self.worker_id, result, records)

    async def _play(self, attempt: PooledAttempt, deps: AttemptDeps) -> AttemptResult:
        """As a local worker plays a ``run`` (green_agent/engine/workers/serve.py): never raises but on cancel."""
        battle = attempt.battle
        try:
            ref = await asyncio.to_thread(
                resolve_task, attempt.domain, attempt.split, attempt.index, battle.config.retrieval
            )
        except Exception as error:  # the owner resolved this task: not loading it here is the harness's failure
            log.exception("pooled attempt %s/%s: task not loaded", battle.battle_id, attempt.index)
            spec = AttemptSpec(battle.battle_id, _ref_of(attempt), attempt.attempt, battle.white_agent_url)
            return harness_failure(spec, f"the pool member could not load the task: {type(error).__name__}: {error}")
        spec = AttemptSpec(battle.battle_id, ref, attempt.attempt, battle.white_agent_url)
        if ref.task_id != attempt.task_id:
            return harness_failure(spec, f"task {ref.key} is {ref.task_id!r} on this member, not {attempt.task_id!r}")
        try:
            return await run_attempt(spec, deps)
        except Exception as error:  # run_attempt never raises but on cancel: a bug, blamed on the harness
            log.exception("pooled attempt %s/%s raised", ref.key, attempt.attempt)
            return harness_failure(spec, f"{type(error).__name__} in the attempt loop: {error}")

    def _tell_seen(self, battle: PooledBattle) -> None:
        if battle.battle_id in self._seen:
            self._seen.move_to_end(battle.battle_id)
            return
        self._seen[battle.battle_id] = None
        if len(self._seen) > MAX_SEEN_BATTLES:
            self._seen.popitem(last=False)
        if self._on_battle_seen is not None:
            try:
                self._on_battle_seen(battle, self._backend_url)
            except Exception:
                log.exception("pool member %s: on_battle_seen of %s failed", self.worker_id, battle.battle_id)

    # ------------------------------------------------------------------------------------------------ per battle

    async def _acquire(self, battle: PooledBattle, digest: str) -> _Battle:
        key = (battle.battle_id, digest)
        async with self._lock:
            found = self._battles.get(key)
            if found is None:
                found = await self._open(battle, digest)
                self._battles[key] = found
                self._close_surplus()
            found.active += 1
            found.last_used = time.monotonic()
            return found

    async def _open(self, battle: PooledBattle, digest: str) -> _Battle:
        cfg = battle.config
        limiter = self._providers.for_user(cfg)  # ConfigError naming the field: the battle's cap above this member's
        directory = await self._trajectories(digest)
        stack = contextlib.AsyncExitStack()
        http = await asyncio.to_thread(  # builds an SSL context (reads the CA bundle): not on the loop
            capped_http_client, max_bytes=cfg.max_reply_bytes, max_connections=max(8, self._capacity + 4)
        )
        stack.push_async_callback(http.aclose)
        if directory is not None:
            stack.push_async_callback(asyncio.to_thread, shutil.rmtree, directory, True)
        deps = AttemptDeps(
            config=cfg,
            scoring=self._scoring,
            white_channels=a2a_channels(http, concurrency=cfg.concurrency),  # warns near the agent's bound
            user_factory=functools.partial(make_user, limiter=limiter),
            user_api_key=user_api_key(cfg.user_simulator),
            trajectories_dir=directory,
            tool_gateway=None,  # refused in _validated: a pooled attempt's tools are played here, in text mode
            sandboxes=self._sandboxes,
        )
        log.info("pool member %s: attempts of battle %s open here", self.worker_id, battle.battle_id)
        return _Battle(battle, deps, stack, directory)

    async def _trajectories(self, digest: str) -> Path | None:
        """The battle's member-local trajectory folder (under one temporary folder of the runner's)."""
        if self._root is None:
            try:
                self._root = Path(await asyncio.to_thread(mkdtemp, prefix="arena-pool-"))
            except OSError as error:  # the attempts still run: their results go without trajectories
                log.error("pool member %s: no temporary folder for trajectories: %s", self.worker_id, error)
                return None
        return self._root / digest[:32]

    def _close_surplus(self) -> None:
        idle = sorted((b for b in self._battles.items() if b[1].active == 0), key=lambda item: item[1].last_used)
        for key, _battle in idle[: max(0, len(idle) - self._max_idle)]:
            self._close_later(key)

    def _close_later(self, key: tuple[str, str]) -> None:
        battle = self._battles.pop(key)
        task = asyncio.create_task(_close(battle), name=f"pool-runner-close-{key[0]}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _sweep(self) -> None:
        every = min(self._idle_close_s / 2, 30.0)
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for key, battle in list(self._battles.items()):
                if battle.active == 0 and now - battle.last_used >= self._idle_close_s:
                    log.info("pool member %s: battle %s idle, its attempt pools closed", self.worker_id, key[0])
                    self._close_later(key)


async def _close(battle: _Battle) -> None:
    try:
        await battle.stack.aclose()
    except Exception:
        log.exception("closing the attempt pools of battle %s failed", battle.battle.battle_id)


# ---------------------------------------------------------------------------------------------- in a worker thread


def _validated(lease: LeaseOut, operator: BattleConfig) -> tuple[PooledAttempt, str]:
    """The lease's payload as a :class:`PooledAttempt` this member may run, and its battle's digest."""
    try:
        attempt = PooledAttempt.model_validate(lease.payload)
    except ValueError as error:
        raise ValueError(f"payload: not a valid arena.pool-attempt/1: {error}") from None
    battle = attempt.battle
    key = f"{attempt.domain}/{attempt.split or '-'}/{attempt.index}"
    if battle.battle_id != lease.battle_id:
        raise ValueError(f"payload.battle.battle_id: {battle.battle_id!r} in a lease of {lease.battle_id!r}")
    if (lease.task_key, lease.attempt) != (key, attempt.attempt):
        raise ValueError(
            f"payload: task {key} attempt {attempt.attempt} in a lease of {lease.task_key} attempt {lease.attempt}"
        )
    check_admissible(battle.config, operator)
    text = json.dumps(battle.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return attempt, hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_admissible(cfg: BattleConfig, operator: BattleConfig) -> None:
    """ValueError naming the field when a member whose operator's config is ``operator`` (its ``--scenario``) would
    refuse to run ``cfg``'s attempts: it runs them with its operator's keys and resources, so an LLM user must name
    the operator's endpoint, key variable and model, and the operator's caps hold (the rules of a remote battle
    config, green_agent/engine/config.py, except the user's kind: the pool's members are the owner's peers, and the
    operator gave them the key variable). An owner may call it to pool only what members accept."""
    if cfg.tool_mode == "mcp":
        raise ValueError('payload.battle.config.tool_mode: "mcp" battles are not run by pool members')
    user, mine = cfg.user_simulator, operator.user_simulator
    if user.kind == "llm":  # its key variable goes only to this member's operator's endpoint and model
        for name in OPERATOR_ONLY_USER_FIELDS:
            if getattr(user, name) != getattr(mine, name):
                raise ValueError(
                    f"payload.battle.config.user_simulator.{name}: differs from this member's operator's setting"
                )
    for where, asked, limits, names in (
        ("user_simulator.", user, mine, OPERATOR_CAPPED_USER_FIELDS),
        ("", cfg, operator, OPERATOR_CAPPED_FIELDS),
    ):
        for name in names:
            value, limit = getattr(asked, name), getattr(limits, name)
            if value > limit:
                raise ValueError(f"payload.battle.config.{where}{name}: at most {limit} on this member (got {value})")


def _encoded(worker_id: str, result: AttemptResult, records: tuple[dict[str, Any], ...] | None) -> dict[str, Any]:
    """The :class:`PooledResult` as JSON (valid UTF-8, no NaN); its trajectory left out (``trajectory_dropped``) when
    the result would not fit in :data:`MAX_RESULT_BYTES` or it has too many records."""
    kept: list[dict[str, Any]] | None = list(records) if records is not None else None
    dropped = kept is not None and len(kept) > MAX_TRAJECTORY_RECORDS
    if dropped:
        kept = None
    body: dict[str, Any] = clean_json(
        PooledResult(worker_id=worker_id, result=result, trajectory=kept, trajectory_dropped=dropped).model_dump(
            mode="json"
        ),
        null_non_finite=True,
    )
    if kept is not None and _size(body) > MAX_RESULT_BYTES:
        body["trajectory"], body["trajectory_dropped"] = None, True
        log.warning(
            "pooled attempt %s/%s: trajectory left out of the result (over %d bytes)",
            *(result.task_key, result.attempt, MAX_RESULT_BYTES),
        )
    return body


def _size(body: dict[str, Any]) -> int:
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8"))


def _ref_of(attempt: PooledAttempt) -> TaskRef:
    """The attempt's task named without its tau2 object (enough for a harness failure's identity fields)."""
    return TaskRef(attempt.domain, attempt.split, attempt.index, attempt.task_id, task=cast(Any, None))
