"""The member side of a pooled battle (issue 29): :class:`PoolRunner` behind real :class:`PoolMember` s, leasing from a
real backend process (SQLite) the attempts of a calibration battle the test publishes as its owner, played against
the reference replay agent; and ``arena-green --pool ...`` as a process.

- Two members drain a calibration battle: every recorded result is a valid ``PooledResult`` carrying its
  trajectory, every attempt scores 1.0, and the outcomes are those of an in-process ``run_attempt`` of the same
  (task, attempt).
- A payload that is not a valid pooled attempt (or names another battle) is an infrastructure error: requeued, then
  failed, never a result.
- A trajectory too large for one request is dropped from the result, flagged ``trajectory_dropped``.
- ``arena-green --pool ... --pool-key-file`` leases and records an attempt, stops cleanly on SIGTERM, never prints
  the key; a bad key file is refused naming the flag.

Waits are bounded only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.attempt import AttemptDeps, AttemptSpec, run_attempt
from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.channels import a2a_channels
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.engine.tau.sandbox import SandboxFactory
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import resolve_task
from green_agent.engine.tau.users import make_user
from green_agent.provider_limits import ProviderLimits
from green_agent.service.attempt_lease_client import AttemptLeaseClient
from green_agent.service.main import main as green_main
from green_agent.service.outbox import RetryPolicy
from green_agent.service.pool_flags import MAX_POOL_KEY_BYTES, POOL_KEY_ENV
from green_agent.service.pool_member import PoolMember
from green_agent.service.pool_runner import PoolRunner, check_admissible
from green_agent.wire.attempt_leases import AttemptIn, LeaseOut
from green_agent.wire.pool_attempts import PooledAttempt, PooledBattle, PooledResult
from launcher.ports import free_port, loopback_url
from launcher.processes import stop_process, wait_until_ready
from tests.green_agent.service.pool_support import PoolBackend, pool_backend, settled
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app
from white_agent.protocol import GreenTurn, format_action
from white_agent.replay import ReplayAgent
from white_agent.server import AgentReply

POOL, KEY = "pool-r", "the pool's shared secret 7f3a"
LIMIT_S = 240.0
FAST_RETRY = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5)


class BigTalker(ReplayAgent):
    """Calls a retail tool with a 300 KB argument on every turn (well under the 1 MiB reply cap): its five steps make
    a trajectory too large to be recorded with the result."""

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        return AgentReply(format_action("find_user_id_by_email", {"email": "la" * 150_000}))


@contextlib.asynccontextmanager
async def serving(agent: ReplayAgent) -> AsyncIterator[str]:
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as url:
        yield url


@contextlib.asynccontextmanager
async def world(
    tmp_path: Path, agent: ReplayAgent
) -> AsyncIterator[tuple[PoolBackend, AttemptLeaseClient, ScoringPool, SandboxFactory, str]]:
    """A backend process, the owner's lease client, one scoring process, a sandbox factory and ``agent`` served:
    (backend, owner, scoring, sandboxes, white agent URL)."""
    async with (
        pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend,
        _client(backend) as owner,
        ScoringPool(max_workers=1) as scoring,
        SandboxFactory() as sandboxes,
        serving(agent) as white_url,
    ):
        yield backend, owner, scoring, sandboxes, white_url


def calibration(tasks: int, k: int, **extra: Any) -> BattleConfig:
    fields = {"domain": "retail", "split": "test", "task_index": list(range(tasks)), "k": k, "calibration": True}
    return BattleConfig.model_validate({**fields, "concurrency": 8, **extra})


def _indices(cfg: BattleConfig) -> list[int]:
    assert isinstance(cfg.task_index, list)
    return cfg.task_index


def _task_key(index: int) -> str:
    return f"retail/test/{index}"


async def published(
    owner: AttemptLeaseClient,
    backend: PoolBackend,
    white_url: str,
    cfg: BattleConfig,
    *,
    max_requeues: int = 2,
    k: int | None = None,
) -> tuple[str, str, PooledBattle]:
    """A running battle on the backend whose attempts (cfg's tasks x k, or the first ``k``) the test publishes as
    its owner."""
    battle_id, token = await backend.battle()
    battle = PooledBattle(battle_id=battle_id, white_agent_url=white_url, config=cfg)
    attempts: list[AttemptIn] = []
    for index in _indices(cfg):
        ref = await asyncio.to_thread(resolve_task, "retail", "test", index)
        for attempt in range(1, (k or cfg.k) + 1):
            payload = PooledAttempt(
                battle=battle, domain="retail", split="test", index=index, task_id=ref.task_id, attempt=attempt
            ).payload()
            attempts.append(AttemptIn(task_key=ref.key, attempt=attempt, payload=payload))
    await owner.publish(battle_id, token, owner_worker="owner", attempts=attempts, max_requeues=max_requeues)
    return battle_id, token, battle


def _client(backend: PoolBackend) -> AttemptLeaseClient:
    return AttemptLeaseClient(backend.url, POOL, KEY, retry=FAST_RETRY, outage_s=30)


@contextlib.asynccontextmanager
async def members(
    backend: PoolBackend,
    scoring: ScoringPool,
    sandboxes: SandboxFactory,
    count: int,
    runners: list[PoolRunner] | None = None,
    capacity: int = 3,
    **runner: Any,
) -> AsyncIterator[list[PoolMember]]:
    """``count`` members (each its own client and runner, appended to ``runners``) leasing until the block ends;
    then stopped, no leftovers."""
    async with contextlib.AsyncExitStack() as stack:
        made: list[PoolMember] = []
        for n in range(count):
            client = await stack.enter_async_context(_client(backend))
            pool_runner = await stack.enter_async_context(
                PoolRunner(
                    f"m{n}",
                    scoring=scoring,
                    providers=ProviderLimits(),
                    sandboxes=sandboxes,
                    capacity=capacity,
                    **runner,
                )
            )
            if runners is not None:
                runners.append(pool_runner)
            made.append(PoolMember(client, f"m{n}", pool_runner.run_attempt, capacity=capacity, ttl_s=30, wait_s=1))
        tasks = [asyncio.create_task(member.run()) for member in made]
        try:
            yield made
        finally:
            for task in tasks:
                task.cancel()
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                assert outcome is None or isinstance(outcome, asyncio.CancelledError), outcome


def _verdict(result: AttemptResult) -> tuple[Any, ...]:
    failure = result.failure.category.value if result.failure else None
    return (result.outcome, result.reward, failure, result.termination_reason.value, result.steps)


async def test_two_members_drain_a_calibration_battle_with_the_outcomes_of_one_process(tmp_path: Path) -> None:
    cfg = calibration(tasks=4, k=2)
    seen: list[tuple[str, str]] = []
    async with world(tmp_path, ReplayAgent()) as (backend, owner, scoring, sandboxes, white_url):
        battle_id, token, _battle = await published(owner, backend, white_url, cfg)

        def tell(battle: PooledBattle, url: str) -> None:
            seen.append((battle.battle_id, url))

        runners: list[PoolRunner] = []
        async with members(
            backend, scoring, sandboxes, 2, runners, backend_url=backend.url, on_battle_seen=tell, idle_close_s=0.2
        ) as pool_members:
            attempts = await settled(owner, battle_id, token, 8, limit_s=LIMIT_S)
            async with asyncio.timeout(LIMIT_S):  # idle battles' HTTP pools and trajectory folders are closed
                while any(r.open_battles for r in runners):
                    await asyncio.sleep(0.05)
        assert all(m.counts.infra_errors == m.counts.dropped == 0 for m in pool_members)
        # The same attempts played in this process, as a battle plays them.
        async with capped_http_client(max_bytes=cfg.max_reply_bytes, max_connections=16) as http:
            deps = AttemptDeps(
                config=cfg,
                scoring=scoring,
                white_channels=a2a_channels(http),
                user_factory=functools.partial(make_user, limiter=None),
                user_api_key=None,
                trajectories_dir=None,
                sandboxes=sandboxes,
            )
            local: dict[tuple[str, int], AttemptResult] = {}
            for index in _indices(cfg):
                ref = await asyncio.to_thread(resolve_task, "retail", "test", index)
                for attempt in (1, 2):
                    spec = AttemptSpec(battle_id, ref, attempt, white_url)
                    local[(ref.key, attempt)] = await run_attempt(spec, deps)
    assert len(attempts) == 8 and {a.state for a in attempts} == {"done"}
    assert set(seen) <= {(battle_id, backend.url)} and len(seen) in (1, 2)  # once per member that saw it
    for stored in attempts:
        assert [h.outcome for h in stored.history] == ["recorded"]
        assert stored.result is not None
        pooled = PooledResult.model_validate(stored.result)
        result = pooled.result
        assert pooled.worker_id == stored.recorded_by
        assert (result.battle_id, result.task_key, result.attempt) == (battle_id, stored.task_key, stored.attempt)
        assert result.outcome == "success" and result.reward == 1.0, result.failure
        assert result.trajectory_file is None  # the member keeps no file; the owner writes its own
        assert pooled.trajectory and not pooled.trajectory_dropped
        assert _verdict(result) == _verdict(local[(stored.task_key, stored.attempt)])


async def test_an_invalid_payload_is_an_infrastructure_error_requeued_then_failed(tmp_path: Path) -> None:
    cfg = calibration(tasks=1, k=2)
    async with world(tmp_path, ReplayAgent()) as (backend, owner, scoring, sandboxes, white_url):
        battle_id, token = await backend.battle()
        other = PooledBattle(battle_id="another-battle", white_agent_url=white_url, config=cfg)
        ref = await asyncio.to_thread(resolve_task, "retail", "test", 0)
        elsewhere = PooledAttempt(battle=other, domain="retail", split="test", index=0, task_id=ref.task_id, attempt=1)
        await owner.publish(
            battle_id,
            token,
            owner_worker="owner",
            attempts=[
                AttemptIn(task_key=_task_key(0), attempt=1, payload={"protocol": "arena.pool-attempt/1", "x": 1}),
                AttemptIn(task_key=_task_key(0), attempt=2, payload=elsewhere.payload()),
            ],
            max_requeues=1,
        )
        async with members(backend, scoring, sandboxes, 1) as pool_members:
            attempts = await settled(owner, battle_id, token, 2, limit_s=LIMIT_S)
    assert [a.state for a in attempts] == ["failed", "failed"]
    for stored in attempts:
        assert stored.result is None
        assert [h.outcome for h in stored.history] == ["infra_error", "infra_error"]
    assert attempts[0].error is not None and "payload" in attempts[0].error
    assert attempts[1].error is not None and "payload.battle.battle_id" in attempts[1].error
    assert pool_members[0].counts.infra_errors == 4 and pool_members[0].counts.recorded == 0


async def test_a_task_that_differs_on_the_member_is_a_recorded_harness_error(tmp_path: Path) -> None:
    cfg = calibration(tasks=1, k=2)
    async with world(tmp_path, ReplayAgent()) as (backend, owner, scoring, sandboxes, white_url):
        battle_id, token = await backend.battle()
        battle = PooledBattle(battle_id=battle_id, white_agent_url=white_url, config=cfg)
        payload = PooledAttempt(battle=battle, domain="retail", split="test", index=0, task_id="not-task-0", attempt=1)
        await owner.publish(
            battle_id,
            token,
            owner_worker="owner",
            attempts=[AttemptIn(task_key=_task_key(0), attempt=1, payload=payload.payload())],
        )
        async with members(backend, scoring, sandboxes, 1):
            (stored,) = await settled(owner, battle_id, token, 1, limit_s=LIMIT_S)
    assert stored.state == "done" and stored.result is not None  # a result, as a local worker's: not requeued
    result = PooledResult.model_validate(stored.result).result
    assert result.outcome == "infra_error" and result.failure is not None
    assert (result.failure.category.value, result.failure.fault_author.value) == ("harness_error", "harness")
    assert "not 'not-task-0'" in result.failure.detail


async def test_a_trajectory_too_large_for_one_request_is_dropped_with_the_flag(tmp_path: Path) -> None:
    cfg = calibration(tasks=1, k=2, max_steps=5, calibration=False)
    async with world(tmp_path, BigTalker()) as (backend, owner, scoring, sandboxes, white_url):
        battle_id, token, _battle = await published(owner, backend, white_url, cfg, k=1)
        async with members(backend, scoring, sandboxes, 1) as pool_members:
            attempts = await settled(owner, battle_id, token, 1, limit_s=LIMIT_S)
    assert [a.state for a in attempts] == ["done"], attempts[0].error
    assert attempts[0].result is not None
    pooled = PooledResult.model_validate(attempts[0].result)
    assert pooled.trajectory is None and pooled.trajectory_dropped, (pooled.result.steps, pooled.result.failure)
    assert pooled.result.failure is not None  # the agent's own failure, recorded as a result
    assert pooled.result.failure.fault_author.value == "white_agent", pooled.result.failure
    assert pool_members[0].counts.recorded == 1


async def test_without_a_temporary_folder_attempts_still_run_and_record_no_trajectory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_room(**_kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("green_agent.service.pool_runner.mkdtemp", no_room)
    cfg = calibration(tasks=1, k=2)
    ref = await asyncio.to_thread(resolve_task, "retail", "test", 0)
    async with (
        ScoringPool(max_workers=1) as scoring,
        SandboxFactory() as sandboxes,
        serving(ReplayAgent()) as white_url,
        PoolRunner("m0", scoring=scoring, providers=ProviderLimits(), sandboxes=sandboxes) as runner,
    ):
        battle = PooledBattle(battle_id="b1", white_agent_url=white_url, config=cfg)
        payload = PooledAttempt(battle=battle, domain="retail", split="test", index=0, task_id=ref.task_id, attempt=1)
        lease = LeaseOut(
            battle_id="b1",
            task_key=ref.key,
            attempt=1,
            generation=1,
            worker_id="m0",
            ttl_s=30,
            payload=payload.payload(),
        )
        pooled = PooledResult.model_validate(await runner.run_attempt(lease))
    assert pooled.result.reward == 1.0 and pooled.trajectory is None and not pooled.trajectory_dropped


def test_a_member_refuses_a_config_that_would_spend_its_operator_s_keys_or_resources_elsewhere() -> None:
    operator = BattleConfig()  # no --scenario: the defaults (scripted user; LLM defaults as shipped)
    check_admissible(calibration(tasks=1, k=2), operator)
    check_admissible(calibration(tasks=1, k=2, user_simulator={"kind": "llm"}), operator)  # the operator's endpoint
    refused: list[tuple[dict[str, Any], str]] = [
        ({"user_simulator": {"kind": "llm", "base_url": "http://127.0.0.1:1/v1"}}, "user_simulator.base_url"),
        ({"user_simulator": {"kind": "llm", "api_key_env": "AWS_SECRET_ACCESS_KEY"}}, "user_simulator.api_key_env"),
        ({"user_simulator": {"kind": "llm", "model": "o3"}}, "user_simulator.model"),
        ({"user_simulator": {"max_user_turns": 13}}, "user_simulator.max_user_turns"),
        ({"max_reply_bytes": 2_000_000}, "max_reply_bytes"),
        ({"tool_mode": "mcp"}, "tool_mode"),
    ]
    for extra, field in refused:
        with pytest.raises(ValueError, match=f"payload.battle.config.{field}"):
            check_admissible(calibration(tasks=1, k=2, **extra), operator)


# ---------------------------------------------------------------------------------------------- arena-green --pool


def _green_argv(port: int, backend_url: str, key_file: Path, runs: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "green_agent", "--port", str(port), "--runs-dir", str(runs)),
        *("--workers", "1", "--scoring-workers", "1", "--log-level", "info"),
        *("--pool", POOL, "--pool-backend", backend_url, "--pool-key-file", str(key_file)),
        *("--pool-capacity", "2", "--pool-worker-id", "green-proc"),
    ]


async def test_arena_green_with_pool_flags_leases_records_and_stops_cleanly(tmp_path: Path) -> None:
    key_file = tmp_path / "pool.key"
    key_file.write_text(KEY + "\n", encoding="utf-8")  # one trailing newline: stripped
    cfg = calibration(tasks=1, k=2)
    async with (
        pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend,
        _client(backend) as owner,
        serving(ReplayAgent()) as white_url,
    ):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k != POOL_KEY_ENV}
        green = backend.group.start("green", _green_argv(port, backend.url, key_file, tmp_path / "runs"), env=env)
        try:
            await wait_until_ready(green, loopback_url(port) + "/health", timeout_s=120)
            battle_id, token, _battle = await published(owner, backend, white_url, cfg, k=1)
            attempts = await settled(owner, battle_id, token, 1, limit_s=LIMIT_S)
        finally:
            code = await stop_process(green, grace_s=30)
    assert [(a.state, a.recorded_by) for a in attempts] == [("done", "green-proc")]
    assert attempts[0].result is not None
    assert PooledResult.model_validate(attempts[0].result).result.reward == 1.0
    # SIGTERM: the member is cancelled, the app shuts down, uvicorn exits by re-raising the signal (not SIGKILLed).
    assert code == -signal.SIGTERM, green.stderr_tail(40)
    log = green.stderr_path.read_text(encoding="utf-8")
    assert "leasing attempts of pool" in log and "Application shutdown complete" in log
    assert "Traceback" not in log and "was destroyed but it is pending" not in log
    assert KEY not in log


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "empty"),
        (b"\n", "empty"),
        (b"k" * (MAX_POOL_KEY_BYTES + 2), "more than"),
        (b"a\x00b", "control characters"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_pool_key_file_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, content: bytes, why: str
) -> None:
    monkeypatch.delenv(POOL_KEY_ENV, raising=False)
    key_file = tmp_path / "pool.key"
    key_file.write_bytes(content)
    argv = ["--pool", POOL, "--pool-backend", "http://127.0.0.1:9", "--pool-key-file", str(key_file)]
    assert green_main(argv) == 2
    err = capsys.readouterr().err
    assert "--pool-key-file" in err and why in err


OK = ["--pool", POOL, "--pool-backend", "http://x", "--pool-key-file", "KEY"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--pool", POOL, "--pool-key-file", "KEY"], "--pool-backend"),
        (["--pool", POOL, "--pool-backend", "http://127.0.0.1:9", "--pool-key-file", "DIR"], "--pool-key-file"),
        (["--pool", POOL, "--pool-backend", "http://127.0.0.1:9", "--pool-key-file", "MISSING"], "--pool-key-file"),
        (["--pool", POOL, "--pool-backend", "http://127.0.0.1:9"], "--pool-key-file"),
        (["--pool", POOL, "--pool-backend", "ftp://x", "--pool-key-file", "KEY"], "--pool-backend"),
        ([*OK, "--pool-capacity", "0"], "--pool-capacity"),
        ([*OK, "--pool-capacity", "4097"], "--pool-capacity"),
        (["--pool", "a\tb", "--pool-backend", "http://x", "--pool-key-file", "KEY"], "--pool:"),
        ([*OK, "--pool-worker-id", ""], "--pool-worker-id"),
        ([*OK, "--pool-worker-id", "x\ny"], "--pool-worker-id"),
        (["--pool-backend", "http://x"], "--pool-backend"),
        (["--pool-capacity", "16"], "--pool-capacity"),
    ],
)  # fmt: skip
def test_pool_flags_are_checked_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], flag: str
) -> None:
    monkeypatch.delenv(POOL_KEY_ENV, raising=False)
    (tmp_path / "KEY").write_text("secret\n", encoding="utf-8")
    (tmp_path / "DIR").mkdir()
    names = {"KEY": str(tmp_path / "KEY"), "DIR": str(tmp_path / "DIR"), "MISSING": str(tmp_path / "missing")}
    assert green_main([names.get(arg, arg) for arg in argv]) == 2
    assert flag in capsys.readouterr().err


def test_the_pool_key_may_come_from_the_environment_and_a_fifo_is_refused(tmp_path: Path) -> None:
    from green_agent.service.pool_flags import read_pool_key

    assert read_pool_key(None, "from-env") == "from-env"
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"--pool-key-file: .* is not a regular file"):
        read_pool_key(fifo, "from-env")  # never blocks on the pipe's writer
    key_file = tmp_path / "key"
    for content in (b"s3cret\n", b"s3cret\r\n", b"s3cret"):
        key_file.write_bytes(content)
        assert read_pool_key(key_file, "from-env") == "s3cret"  # the file wins over the environment
    key_file.write_bytes(b"s3cret\n\n")  # only one trailing newline is stripped: the other is refused
    with pytest.raises(ValueError, match="--pool-key-file: the pool key holds control characters"):
        read_pool_key(key_file, None)
