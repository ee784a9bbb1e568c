"""A green agent's membership of a pool (issue 29; docs/design/attempt-leases.md): set by ``arena-green --pool``.

One :class:`PoolSettings` per application (``ServiceContext.pool``; None: the green agent is in no pool and every
battle runs as today). The member side (``pool_runner``) leases attempts with it; the owner side (``pool_owner``)
publishes a battle's attempts to the same backend with it, when the battle reports to that backend.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CAPACITY = 16
"""Attempts a member runs at once unless ``--pool-capacity`` says otherwise."""


@dataclass(frozen=True)
class PoolSettings:
    """Which pool this green agent works for, where its queue is, and as whom."""

    name: str
    """The pool's name (``--pool``)."""
    backend_url: str
    """The backend whose store holds the pool's attempt queue (``--pool-backend``)."""
    key: str
    """The pool key (``--pool-key-file`` / ``ARENA_POOL_KEY``): never logged, never in ``repr``."""
    worker_id: str
    """This green agent's worker id in the pool (``--pool-worker-id``, default hostname-pid)."""
    capacity: int = DEFAULT_CAPACITY
    """Attempts this member runs at once (``--pool-capacity``)."""

    def __repr__(self) -> str:  # the key never appears in a log line or a traceback
        return (
            f"PoolSettings(name={self.name!r}, backend_url={self.backend_url!r}, key='set', "
            f"worker_id={self.worker_id!r}, capacity={self.capacity})"
        )

    def serves(self, backend_url: str) -> bool:
        """Whether a battle reporting to ``backend_url`` can be pooled (its backend holds this pool's queue)."""
        return self.backend_url.rstrip("/") == backend_url.rstrip("/")
