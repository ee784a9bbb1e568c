"""The attempt queue's lease protocol on both stores (issue 29): publish, lease, heartbeat, record exactly once,
fencing of a lease that ran out, requeues with their history, refusals of other battles' and pools' workers, and
the owner's takeover.

SQLite's clock is moved by hand; PostgreSQL's is the database's, so expiry there is waited for by polling with a
generous bound. Nothing asserts on durations.
"""

from __future__ import annotations

from typing import Any

import pytest

from battle_backend.store import attempt_queue_rules
from battle_backend.store.attempt_errors import (
    LeaseRefused,
    OwnerAlive,
    PoolKeyRejected,
    PublishRefused,
)
from battle_backend.store.attempt_records import (
    AttemptSpec,
    AttemptState,
    LeaseOutcome,
    RecordStatus,
)
from battle_backend.store.protocol import TokenRejected
from tests.battle_backend.store.attempt_queue_support import (
    KEY,
    POOL,
    TOKEN,
    clock_of,
    eventually,
    lease_after_expiry,
    publish,
    running_pool_battle,
    specs,
    ttl_for,
)


async def test_published_attempts_are_leased_once_each_and_recorded(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    first = await publish(store, battle_id, specs(3, 2))
    assert (first.added, first.already) == (6, 0)
    again = await publish(store, battle_id, specs(3, 2))  # the owner's retry adds nothing
    assert (again.added, again.already) == (0, 6)

    leases = await store.attempts.lease(POOL, KEY, "w1", limit=4, ttl_s=30.0)
    more = await store.attempts.lease(POOL, KEY, "w2", limit=10, ttl_s=30.0)
    assert [(lease.task_key, lease.attempt) for lease in leases + more] == [
        (f"retail/{t}", a) for t in range(3) for a in range(2)
    ]
    assert all(lease.generation == 1 for lease in leases + more)
    assert leases[0].payload == {"task": 0, "attempt": 0}
    assert await store.attempts.lease(POOL, KEY, "w3", limit=10, ttl_s=30.0) == []

    for lease in leases + more:
        outcome = await store.attempts.record(POOL, KEY, lease.ref, {"reward": lease.attempt, "task": lease.task_key})
        assert outcome.status is RecordStatus.RECORDED
    stored = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert [a.state for a in stored] == [AttemptState.DONE] * 6
    assert [a.result for a in stored] == [{"reward": a, "task": f"retail/{t}"} for t in range(3) for a in range(2)]
    assert [[h.outcome for h in a.history] for a in stored] == [[LeaseOutcome.RECORDED.value]] * 6
    info = await store.attempts.queue_info(battle_id)
    assert info is not None and info.counts["done"] == 6 and info.pool == POOL
    assert await store.attempts.list_attempts(battle_id, pool_key=KEY) == stored
    with pytest.raises(TokenRejected):
        await store.attempts.list_attempts(battle_id, pool_key="another key")


async def test_an_expired_lease_recorded_late_is_refused_fenced(store: Any) -> None:
    clock = clock_of(store)
    ttl = ttl_for(clock)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    [late] = await store.attempts.lease(POOL, KEY, "slow", limit=1, ttl_s=ttl)

    [fresh] = await lease_after_expiry(store, clock, "fast", ttl)
    assert (fresh.task_key, fresh.attempt, fresh.generation) == (late.task_key, late.attempt, 2)
    with pytest.raises(LeaseRefused) as refused:
        await store.attempts.record(POOL, KEY, late.ref, {"reward": 0})
    assert refused.value.reason == "fenced"
    with pytest.raises(LeaseRefused):
        await store.attempts.heartbeat(POOL, KEY, late.ref, 30.0)
    with pytest.raises(LeaseRefused):
        await store.attempts.report_infra_error(POOL, KEY, late.ref, "late")

    assert (await store.attempts.record(POOL, KEY, fresh.ref, {"reward": 1})).status is RecordStatus.RECORDED
    with pytest.raises(LeaseRefused):  # still refused once the attempt is done: only the recording lease is answered
        await store.attempts.record(POOL, KEY, late.ref, {"reward": 0})
    [attempt] = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert attempt.result == {"reward": 1} and attempt.recorded_by == "fast" and attempt.requeues == 1
    assert [(h.generation, h.worker_id, h.outcome) for h in attempt.history] == [
        (1, "slow", "expired"),
        (2, "fast", "recorded"),
    ]


async def test_an_expired_lease_not_yet_taken_again_cannot_record(store: Any) -> None:
    clock = clock_of(store)
    ttl = ttl_for(clock)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    [lease] = await store.attempts.lease(POOL, KEY, "slow", limit=1, ttl_s=ttl)
    if clock is not None:
        clock.now += ttl + 1.0
        with pytest.raises(LeaseRefused) as refused:
            await store.attempts.record(POOL, KEY, lease.ref, {"reward": 0})
        assert refused.value.reason == "expired"
    else:

        async def expired() -> bool:
            return await _pg_seconds_left(store, battle_id) < 0

        await eventually(expired)
        with pytest.raises(LeaseRefused) as refused:
            await store.attempts.record(POOL, KEY, lease.ref, {"reward": 0})
        assert refused.value.reason == "expired"
    [attempt] = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert attempt.result is None


async def test_a_duplicate_result_is_stored_once(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=30.0)
    first = await store.attempts.record(POOL, KEY, lease.ref, {"reward": 1})
    second = await store.attempts.record(POOL, KEY, lease.ref, {"reward": 0, "other": "payload"})
    assert first.status is RecordStatus.RECORDED and second.status is RecordStatus.DUPLICATE
    assert second.attempt.result == {"reward": 1}
    [attempt] = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert attempt.result == {"reward": 1} and len(attempt.history) == 1
    assert await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=30.0) == []


async def test_a_worker_of_another_battle_or_pool_is_refused(store: Any) -> None:
    mine = await running_pool_battle(store)
    theirs = await running_pool_battle(store, pool="pool-b", alias="h")
    await publish(store, mine, specs(1, 1))
    await publish(store, theirs, specs(1, 1), pool="pool-b", key="pool-b-key")
    [my_lease] = await store.attempts.lease(POOL, KEY, "mine", limit=1, ttl_s=30.0)
    assert my_lease.battle_id == mine  # pool-a's members never see pool-b's attempts
    [their_lease] = await store.attempts.lease("pool-b", "pool-b-key", "theirs", limit=1, ttl_s=30.0)
    assert their_lease.battle_id == theirs

    # pool-b's worker, with its own key, presenting its lease against pool-a's battle: refused, nothing written
    with pytest.raises(PoolKeyRejected):
        await store.attempts.record("pool-b", "pool-b-key", _moved(their_lease.ref, mine), {"reward": 1})
    with pytest.raises(PoolKeyRejected):  # the right pool name without its key
        await store.attempts.record(POOL, "pool-b-key", _moved(their_lease.ref, mine), {"reward": 1})
    with pytest.raises(PoolKeyRejected):  # pool-a's key on an attempt of pool-b
        await store.attempts.record(POOL, KEY, their_lease.ref, {"reward": 1})
    # a member of the right pool whose lease is of another battle: not this attempt's lease
    third = await running_pool_battle(store, alias="i")
    await publish(store, third, specs(1, 1))
    with pytest.raises(LeaseRefused) as refused:
        await store.attempts.record(POOL, KEY, _moved(my_lease.ref, third), {"reward": 1})
    assert refused.value.reason in ("fenced", "wrong_worker", "not_leased")
    assert await store.attempts.lease(POOL, "wrong key", "x", limit=1, ttl_s=30.0) == []  # a wrong key sees nothing
    for battle_id, token in ((mine, TOKEN), (theirs, TOKEN), (third, TOKEN)):
        assert all(a.result is None for a in await store.attempts.list_attempts(battle_id, presented_token=token))


def _moved(ref: Any, battle_id: str) -> Any:
    return type(ref)(battle_id, ref.task_key, ref.attempt, ref.generation, ref.worker_id)


async def test_infrastructure_errors_are_requeued_up_to_the_limit_with_their_history(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1), max_requeues=1)
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=30.0)
    first = await store.attempts.report_infra_error(POOL, KEY, lease.ref, "sandbox died")
    assert first.status is RecordStatus.REQUEUED and first.attempt.state is AttemptState.AVAILABLE
    [again] = await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=30.0)
    assert again.generation == 2
    second = await store.attempts.report_infra_error(POOL, KEY, again.ref, "x" * 10_000)
    assert second.status is RecordStatus.FAILED and second.attempt.state is AttemptState.FAILED
    assert await store.attempts.lease(POOL, KEY, "w3", limit=1, ttl_s=30.0) == []
    [attempt] = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert attempt.requeues == 2 and attempt.result is None
    assert [(h.worker_id, h.outcome, (h.detail or "")[:12]) for h in attempt.history] == [
        ("w1", "infra_error", "sandbox died"),
        ("w2", "infra_error", "xxxxxxxxxxxx"),
    ]
    assert len(attempt.history[1].detail or "") == 4096


async def test_heartbeats_keep_a_lease(store: Any) -> None:
    clock = clock_of(store)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1))
    if clock is not None:
        [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=10.0)
        for _ in range(5):  # 5 x 6 s = 30 s past a 10 s lease, renewed every 6 s
            clock.now += 6.0
            await store.attempts.heartbeat(POOL, KEY, lease.ref, 10.0)
            assert await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=10.0) == []
        clock.now += 11.0  # no more heartbeats: it runs out
        [taken] = await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=10.0)
        assert taken.generation == 2
        return
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=30.0)
    await store.attempts.heartbeat(POOL, KEY, lease.ref, 3600.0)
    expires = await _pg_seconds_left(store, battle_id)
    assert expires > 1800  # the database's lease end moved to ~now() + 3600
    assert await store.attempts.lease(POOL, KEY, "w2", limit=1, ttl_s=30.0) == []
    await store.attempts.heartbeat(POOL, KEY, lease.ref, 0.2)
    [taken] = await lease_after_expiry(store, None, "w2", 0.2)
    assert taken.generation == 2


async def _pg_seconds_left(store: Any, battle_id: str) -> float:
    async def fn(conn: Any) -> float:
        row = await store._row(
            conn,
            "SELECT EXTRACT(EPOCH FROM lease_expires - now()) AS left FROM battle_attempts WHERE battle_id = %s",
            (battle_id,),
        )
        return float(row["left"])

    seconds: float = await store._read(fn)
    return seconds


async def test_publish_refusals_name_what_is_wrong(store: Any) -> None:
    battle_id = await running_pool_battle(store)
    with pytest.raises(TokenRejected):
        await publish(store, battle_id, specs(1, 1), token="not the token")
    with pytest.raises(PublishRefused) as refused:
        await publish(store, battle_id, specs(1, 1), pool="pool-b")
    assert refused.value.field == "pool"
    with pytest.raises(PublishRefused) as refused:
        await publish(store, battle_id, [AttemptSpec("t", 0, {"blob": "x" * 70_000})])
    assert refused.value.field == "attempts[0].payload"
    with pytest.raises(PublishRefused) as refused:
        await publish(store, battle_id, [AttemptSpec("t", 0, {}), AttemptSpec("t", 0, {})])
    assert refused.value.field == "attempts[1]"
    await publish(store, battle_id, specs(1, 1))
    with pytest.raises(PublishRefused) as refused:
        await publish(store, battle_id, specs(2, 1), key="another key")
    assert refused.value.field == "pool_key"
    assert (await store.attempts.queue_info(battle_id)).counts["available"] == 1


async def test_a_silent_owner_is_replaced_by_a_member_who_gets_the_battle_token(store: Any) -> None:
    clock = clock_of(store)
    owner_ttl = 30.0 if clock is not None else 0.3
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(1, 1), owner_ttl_s=owner_ttl)
    if clock is not None:
        with pytest.raises(OwnerAlive):
            await store.attempts.claim_owner(battle_id, POOL, KEY, "member")
        await store.attempts.owner_heartbeat(battle_id, TOKEN, "owner")
        clock.now += owner_ttl + 1.0
    with pytest.raises(PoolKeyRejected):
        await store.attempts.claim_owner(battle_id, POOL, "wrong", "member")

    async def claim() -> str | None:
        try:
            token: str = await store.attempts.claim_owner(battle_id, POOL, KEY, "member")
        except OwnerAlive:
            return None
        return token

    assert await eventually(claim) == TOKEN
    info = await store.attempts.queue_info(battle_id)
    assert info is not None and info.owner_worker == "member"
    with pytest.raises(OwnerAlive):  # the new owner is alive now
        await store.attempts.claim_owner(battle_id, POOL, KEY, "another member")


async def test_attempts_are_read_in_pages_and_a_battle_is_bounded(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt_queue_rules, "MAX_ATTEMPTS_PER_BATTLE", 6)
    battle_id = await running_pool_battle(store)
    await publish(store, battle_id, specs(2, 2))
    [lease] = await store.attempts.lease(POOL, KEY, "w1", limit=1, ttl_s=30.0)
    await store.attempts.record(POOL, KEY, lease.ref, {"reward": 1})
    with pytest.raises(PublishRefused) as refused:
        await publish(store, battle_id, specs(4, 2))  # 4 more than stored: past 6, nothing of it is kept
    assert refused.value.field == "attempts"
    assert (await publish(store, battle_id, specs(3, 2))).added == 2  # exactly 6
    pages = [
        await store.attempts.list_attempts(battle_id, presented_token=TOKEN, offset=offset, limit=4)
        for offset in (0, 4, 8)
    ]
    assert [len(page) for page in pages] == [4, 2, 0]
    everything = await store.attempts.list_attempts(battle_id, presented_token=TOKEN)
    assert pages[0] + pages[1] == everything
    assert [(a.task_key, a.attempt) for a in everything] == [(f"retail/{t}", a) for t in range(3) for a in range(2)]
    assert [len(a.history) for a in everything] == [1, 0, 0, 0, 0, 0]
