"""The attempt queue's refusals (issue 29): each raised before anything is written (see :mod:`.attempt_records`)."""

from __future__ import annotations

from battle_backend.store.attempt_records import LeaseRef
from battle_backend.store.protocol import StoreError


class QueueNotFound(StoreError):
    """The battle has no published attempts (or no such battle)."""

    def __init__(self, battle_id: str) -> None:
        super().__init__(f"Battle {battle_id} has no attempt queue")
        self.battle_id = battle_id


class PoolKeyRejected(StoreError):
    """The presented pool key is not the one the battle's owner published its attempts with (``pool``: the pool's
    battles, asking for its members), or the attempt belongs to another pool: nothing was read or written."""

    def __init__(self, battle_id: str, reason: str, *, pool: str | None = None) -> None:
        super().__init__(f"Pool {pool}: {reason}" if pool is not None else f"Battle {battle_id}: {reason}")
        self.battle_id = battle_id
        self.reason = reason


class LeaseRefused(StoreError):
    """The presented lease is not the attempt's current, live lease (``reason``: not_found, not_leased, fenced,
    expired, wrong_worker): nothing was written."""

    def __init__(self, ref: LeaseRef, reason: str, detail: str) -> None:
        super().__init__(f"Attempt {ref.attempt} of {ref.task_key!r} in battle {ref.battle_id}: {detail}")
        self.ref = ref
        self.reason = reason
        self.detail = detail


class PublishRefused(StoreError):
    """A publish the store cannot take (``field`` names what is wrong): nothing was written."""

    def __init__(self, battle_id: str, field_name: str, detail: str) -> None:
        super().__init__(f"Battle {battle_id}: {field_name}: {detail}")
        self.battle_id = battle_id
        self.field = field_name
        self.detail = detail


class OwnerAlive(StoreError):
    """A takeover of a battle whose owner is still heartbeating: refused."""

    def __init__(self, battle_id: str, owner: str | None) -> None:
        super().__init__(f"Battle {battle_id}: its owner {owner!r} is alive")
        self.battle_id = battle_id
        self.owner = owner
