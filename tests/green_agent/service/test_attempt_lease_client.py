"""The attempt-lease client's handling of a backend that is down, slow to come back, or answers badly (an httpx mock
transport: no server needed). The protocol's refusals against a real backend are in test_pool_member.py."""

from __future__ import annotations

import json

import httpx
import pytest

from green_agent.service.attempt_lease_client import (
    AttemptLeaseClient,
    LeaseBackendDown,
    LeaseLost,
    LeaseRequestRefused,
    OwnerStillAlive,
    PoolRefused,
)
from green_agent.service.outbox import RetryPolicy
from green_agent.service.pool_member import PoolMember
from green_agent.wire.attempt_leases import AttemptIn, LeaseOut

KEY, TOKEN = "pool-key-secret", "battle-token-secret"
LEASE = {"battle_id": "b", "task_key": "t", "attempt": 0, "generation": 1, "worker_id": "w", "ttl_s": 5, "payload": {}}
FAST = RetryPolicy(initial_delay_s=0.0, max_delay_s=0.0)


def _client(
    handler: httpx.MockTransport, *, outage_s: float = 30, max_answer_bytes: int = 1 << 20
) -> AttemptLeaseClient:
    http = httpx.AsyncClient(transport=handler)
    return AttemptLeaseClient(
        "http://backend", "p", KEY, httpx_client=http, retry=FAST, outage_s=outage_s, max_answer_bytes=max_answer_bytes
    )


async def test_an_outage_is_retried_until_the_backend_answers() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ConnectError("refused")
        if len(seen) < 4:
            return httpx.Response(503 if len(seen) == 2 else 429, text="busy", headers={"Retry-After": "0"})
        return httpx.Response(200, json={"leases": [LEASE]})

    client = _client(httpx.MockTransport(handle))
    leases = await client.lease("w", limit=2, ttl_s=5, wait_s=1)
    assert [lease.task_key for lease in leases] == ["t"] and len(seen) == 4
    sent = json.loads(seen[-1].content)
    assert sent == {"worker_id": "w", "limit": 2, "ttl_s": 5.0, "wait_s": 1.0}
    assert seen[-1].headers["X-Pool-Key"] == KEY and KEY not in seen[-1].content.decode()
    assert seen[-1].url.path == "/pools/p/leases"


async def test_an_outage_past_the_deadline_is_an_error_naming_the_call() -> None:
    client = _client(httpx.MockTransport(lambda r: httpx.Response(502, text=f"bad gateway {KEY}")), outage_s=0.05)
    with pytest.raises(LeaseBackendDown, match=r"^record: no answer after \d+ tries \(last: HTTP 502") as down:
        await client.record(LeaseOut.model_validate(LEASE), {"reward": 1.0})
    assert KEY not in str(down.value) and down.value.status is None


async def test_refusals_and_bad_answers_raise_the_error_that_names_them() -> None:
    answers = iter(
        [
            httpx.Response(409, json={"detail": {"reason": "expired", "msg": "ran out", "loc": ["body", "lease"]}}),
            httpx.Response(409, json={"detail": {"reason": "owner_alive", "msg": "alive", "owner_worker": "o"}}),
            httpx.Response(422, json={"detail": [{"loc": ["body", "result"], "msg": "too large", "type": "x"}]}),
            httpx.Response(200, json={"leases": [{**LEASE, "task_key": "x" * 600}]}),
            httpx.Response(200, content=b"{" * 2048),
            httpx.Response(200, json={"leases": [LEASE, LEASE]}),
        ]
    )
    client = _client(httpx.MockTransport(lambda r: next(answers)), max_answer_bytes=1024)
    lease = LeaseOut.model_validate(LEASE)
    with pytest.raises(LeaseLost) as lost:
        await client.heartbeat(lease, 5)
    assert lost.value.reason == "expired" and lost.value.status == 409
    with pytest.raises(OwnerStillAlive):
        await client.take_over("b", "w2")
    with pytest.raises(LeaseRequestRefused, match="result: too large"):
        await client.record(lease, {"reward": 1.0})
    with pytest.raises(LeaseBackendDown, match=r"invalid answer at leases\.0\.task_key"):
        await client.lease("w", limit=1, ttl_s=5)
    with pytest.raises(LeaseBackendDown, match="larger than 1024 bytes"):
        await client.lease("w", limit=1, ttl_s=5)
    with pytest.raises(LeaseBackendDown, match="granted 2 leases, 1 asked"):
        await client.lease("w", limit=1, ttl_s=5)


async def test_the_owner_token_goes_only_in_headers_and_never_in_repr() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"added": 1, "already": 0})

    client = _client(httpx.MockTransport(handle))
    answer = await client.publish("b/1", TOKEN, owner_worker="o", attempts=[AttemptIn(task_key="t", attempt=0)])
    assert (answer.added, answer.already) == (1, 0)
    (request,) = seen
    assert request.url.raw_path == b"/battles/b%2F1/attempts"
    assert request.headers["X-Battle-Token"] == TOKEN and request.headers["X-Pool-Key"] == KEY
    assert TOKEN not in request.content.decode() and KEY not in repr(client)


async def test_a_member_the_backend_refuses_stops_with_that_refusal_and_checks_its_settings() -> None:
    client = _client(httpx.MockTransport(lambda r: httpx.Response(403, json={"detail": "not this pool's key"})))

    async def never(lease: LeaseOut) -> dict[str, object]:
        raise AssertionError("nothing was leased")

    member = PoolMember(client, "w", never, capacity=2)
    with pytest.raises(PoolRefused, match="lease: HTTP 403"):
        await member.run()
    with pytest.raises(ValueError, match="worker_id"):
        PoolMember(client, "w\n", never, capacity=1)
    with pytest.raises(ValueError, match="capacity"):
        PoolMember(client, "w", never, capacity=0)
    with pytest.raises(ValueError, match="heartbeat_every_s"):
        PoolMember(client, "w", never, capacity=1, ttl_s=1, heartbeat_every_s=1)
