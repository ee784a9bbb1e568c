"""A pooled battle whose owner goes silent is taken over by a member and finished from the store (issue 29), against
a real backend process on SQLite with fake members: the owner (owner_ttl_s of 1 s) is stopped mid-battle; the other
green agent's takeover wins once the owner has been silent, starts the battle through its registry as a pooled
owner, which collects what the store holds, lets the members finish the rest, and posts the result computed from all
stored attempts (read back from the backend's API). A battle running on the member itself is never claimed.

Waits are bounded (``asyncio.timeout``) only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from green_agent.engine.attempt_runner import AttemptPlan
from green_agent.engine.battle import Battle
from green_agent.engine.config import BattleConfig
from green_agent.engine.events import BattleEvent
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.engine.tau.tasks import select_tasks
from green_agent.service.pool_owner import PoolOwner
from green_agent.service.pool_takeover import PoolTakeover
from green_agent.service.running_battles import BattleRegistry
from green_agent.statistics import summarize_trials
from green_agent.wire.attempt_leases import AttemptIn
from green_agent.wire.pool_attempts import PooledAttempt, PooledBattle
from tests.green_agent.service.pool_owner_support import (
    WHITE,
    client,
    config,
    fake_run,
    journal,
    members,
    reward,
    settings,
)
from tests.green_agent.service.pool_support import pool_backend

LIMIT_S = 180.0


async def test_a_member_takes_over_a_silent_owners_battle_and_posts_its_result(tmp_path: Path) -> None:
    cfg = config(tasks=6, k=2, concurrency=12)  # every attempt awaited at once: held ones do not block the rest
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as b_client:
        battle_id, token = await backend.battle()
        b_settings = settings(backend, "green-b")
        registry = BattleRegistry(
            scoring=ScoringPool(max_workers=1, warm=False),
            runs_dir=tmp_path / "b-runs",
            default_config=BattleConfig(),
            pool=b_settings,
        )
        takeover = PoolTakeover(registry, b_settings, b_client, check_every_s=0.2)
        three_done = asyncio.Event()

        async def count(event: BattleEvent) -> None:
            if event.type == "attempt_finished" and event.data.get("done") == 3:
                three_done.set()

        def runners(plan: AttemptPlan) -> PoolOwner:
            return PoolOwner(plan, settings(backend, "green-a"), token, owner_ttl_s=1.0, idle_s=0.1)

        owner = Battle(
            battle_id, WHITE, cfg, scoring=ScoringPool(max_workers=1, warm=False), runs_dir=tmp_path / "a-runs",
            sinks=[count], attempt_runners=runners,
        )  # fmt: skip
        release = asyncio.Event()  # tasks 2 to 5 wait for it: the owner stays alive (heartbeating) meanwhile

        def held(index: int) -> asyncio.Event | None:
            return release if index >= 2 else None

        b_member = fake_run("member-b", pause_s=0.1, seen=takeover.battle_seen, backend_url=backend.url, hold=held)
        watching = asyncio.create_task(takeover.run())
        try:
            async with members(backend, [b_member]), asyncio.timeout(LIMIT_S):
                async with members(backend, [fake_run("member-a", pause_s=0.1, hold=held)]):
                    a_task = asyncio.create_task(owner.run())
                    await three_done.wait()
                    while takeover.owner_alive < 10:  # claims over more than owner_ttl_s: the heartbeats keep it
                        assert takeover.taken == []
                        await asyncio.sleep(0.05)
                    a_task.cancel()  # the owner dies: no more heartbeats, its member goes with it
                    with contextlib.suppress(asyncio.CancelledError):
                        await a_task
                release.set()
                while not takeover.taken:
                    await asyncio.sleep(0.1)
                record = registry.get(battle_id)
                assert record is not None and record.task is not None
                result = await record.task
                reporter = record.reporter
                assert reporter is not None
                posted = await backend.over(battle_id)  # the result is delivered in the background
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await registry.aclose()
    assert takeover.taken == [battle_id]
    assert owner.run_dir is not None and 3 <= len(journal(owner.run_dir)) < 12
    taken_dir = tmp_path / "b-runs" / battle_id
    lines = journal(taken_dir)
    assert len(lines) == 12 and len(set(lines)) == 12  # all of them, each once, on the member that took over
    trials = {f"retail/test/{i}": [reward(i, a) == 1.0 for a in (1, 2)] for i in range(6)}
    assert result.status == "completed" and result.infrastructure_errors == 0
    assert result.summary == summarize_trials(trials, k_max=2, seed=cfg.seed)
    assert posted["state"] == "finished", posted.get("error")
    detail = posted["result"]["detail"]
    assert len(detail["attempts"]) == 12
    assert detail["summary"] == result.summary.model_dump(mode="json")


async def test_a_battle_running_on_the_member_itself_is_not_claimed(tmp_path: Path) -> None:
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as lease_client:
        battle_id, token = await backend.battle()
        attempts = [AttemptIn(task_key="retail/test/0", attempt=a) for a in (1, 2)]
        await lease_client.publish(battle_id, token, owner_worker="elsewhere", attempts=attempts, owner_ttl_s=0.05)
        registry = BattleRegistry(
            scoring=ScoringPool(max_workers=1, warm=False), runs_dir=tmp_path / "runs", default_config=BattleConfig()
        )
        takeover = PoolTakeover(registry, settings(backend, "green-a"), lease_client, check_every_s=0.05)
        battle = PooledBattle(battle_id=battle_id, white_agent_url=WHITE, config=config(tasks=1, k=2))
        takeover.battle_seen(battle, "http://127.0.0.1:1/")  # another backend than the pool's: ignored
        assert takeover.watching == []
        takeover.battle_seen(battle, backend.url)
        takeover.battle_seen(battle, backend.url)
        assert takeover.watching == [battle_id]
        gate = asyncio.Event()

        async def hold(event: BattleEvent) -> None:
            await gate.wait()

        record = registry.start(battle_id, WHITE, config(tasks=1, k=2), sinks=[hold])
        watching = asyncio.create_task(takeover.run())
        try:
            for _ in range(10):  # many checks, each with the owner silent for longer than its owner_ttl_s
                await asyncio.sleep(0.05)
            assert takeover.taken == [] and registry.get(battle_id) is record
            page = await lease_client.read(battle_id, token=token)
            assert page.owner_worker == "elsewhere"  # never claimed: the battle runs here
            assert takeover.watching == [battle_id]
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            gate.set()
            await registry.aclose()


async def test_a_taken_over_battle_posts_its_winner_under_the_white_agents_name(tmp_path: Path) -> None:
    name = "blue-one"  # battle_start's opponent name: the dead owner kept it on its own disk only
    cfg = BattleConfig.model_validate(
        {"domain": "retail", "split": "test", "task_index": [2, 7], "k": 2, "concurrency": 4}
    )  # every attempt a success (reward()): the white agent wins
    refs = await asyncio.to_thread(select_tasks, cfg)
    async with pool_backend(tmp_path, str(tmp_path / "backend.sqlite3")) as backend, client(backend) as b_client:
        battle_id, token = await backend.battle(white_name=name)
        pooled = PooledBattle(battle_id=battle_id, white_agent_url=WHITE, config=cfg, white_name=name)
        attempts = [
            AttemptIn(
                task_key=ref.key,
                attempt=a,
                payload=PooledAttempt(
                    battle=pooled, domain=ref.domain, split=ref.split, index=ref.index, task_id=ref.task_id, attempt=a
                ).payload(),
            )
            for ref in refs
            for a in (1, 2)
        ]
        # The owner published its battle and died at once: it never heartbeats.
        await b_client.publish(battle_id, token, owner_worker="dead-owner", attempts=attempts, owner_ttl_s=0.5)
        b_settings = settings(backend, "green-b")
        registry = BattleRegistry(
            scoring=ScoringPool(max_workers=1, warm=False),
            runs_dir=tmp_path / "b-runs",
            default_config=BattleConfig(),
            pool=b_settings,
        )
        takeover = PoolTakeover(registry, b_settings, b_client, check_every_s=0.1)
        watching = asyncio.create_task(takeover.run())
        b_member = fake_run("member-b", seen=takeover.battle_seen, backend_url=backend.url)
        try:
            async with members(backend, [b_member]), asyncio.timeout(LIMIT_S):
                while not takeover.taken:
                    await asyncio.sleep(0.05)
                record = registry.get(battle_id)
                assert record is not None and record.task is not None
                result = await record.task
                posted = await backend.over(battle_id)  # the result is delivered in the background
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await registry.aclose()
    assert takeover.taken == [battle_id]
    assert result.status == "completed" and len(result.attempts) == 4
    assert all(a.outcome == "success" for a in result.attempts)
    assert posted["state"] == "finished", posted.get("error")
    assert posted["result"]["winner"] == name  # not the default "white_agent"
