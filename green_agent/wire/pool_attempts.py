"""What a pooled battle's owner puts in an attempt's lease payload, and what a member records as its result.

A battle worked by a pool of green agents (issue 29, docs/design/attempt-leases.md) is published to the backend's
store as one attempt per (task, attempt number). The store carries two opaque JSON objects per attempt: the
*payload* the owner publishes (at most 64 KiB) and the *result* a member records (bounded by the backend's request
size, 1 MiB by default). This module is their contract, ``arena.pool-attempt/1``, on both sides of the green agent:

- :class:`PooledAttempt` (the payload): the battle a member needs to run the attempt (id, white agent URL, config:
  an attempt's outcome depends only on these, the task and the attempt number) and the attempt itself, named as the
  local worker protocol names it (domain, split, index, tau2 task id, attempt number).
- :class:`PooledResult` (the result): the member's ``AttemptResult`` and, when it fits, the attempt's trajectory
  records (the owner writes them into its run directory's ``trajectories/``, the member writes none there).

Both are read from the store, written by whoever holds the pool key: they are validated before use (errors name the
field), and a payload or result that does not validate is the harness's failure, never the agent's.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult

POOL_ATTEMPT: Final = "arena.pool-attempt/1"
MAX_PAYLOAD_BYTES = 64 * 1024
"""The store's bound on a published payload (battle_backend: attempt payloads)."""
MAX_RESULT_BYTES = 900 * 1024
"""A recorded result travels in one request (the backend's ``max_request_bytes``, 1 MiB by default, with room for
the lease around it): past this the trajectory is left out of the result (``trajectory_dropped``)."""
MAX_TRAJECTORY_RECORDS = 10_000
MAX_WHITE_NAME_CHARS = 512
"""The white agent's name a payload carries at most (as ``backend_target.json`` keeps it)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PooledBattle(_Body):
    """The battle an attempt belongs to: all a member needs besides the attempt itself."""

    battle_id: str = Field(min_length=1, max_length=200)
    white_agent_url: str = Field(min_length=1, max_length=4096)
    config: BattleConfig
    white_name: str | None = Field(default=None, min_length=1, max_length=MAX_WHITE_NAME_CHARS)
    """The white agent's name the battle's winner is posted under (``battle_start``'s opponent), so that a member
    taking the battle over posts it too; None: the default ``white_agent`` (and left out of the payload, which
    members that predate the field refuse)."""


class PooledAttempt(_Body):
    """One attempt's lease payload."""

    protocol: Literal["arena.pool-attempt/1"] = "arena.pool-attempt/1"
    battle: PooledBattle
    domain: str = Field(min_length=1, max_length=64)
    split: str | None = Field(default=None, max_length=64)
    index: int = Field(ge=0)
    task_id: str = Field(max_length=512)
    attempt: int = Field(ge=1)

    def payload(self) -> dict[str, Any]:
        """The JSON object to publish (ValueError when it exceeds :data:`MAX_PAYLOAD_BYTES`)."""
        data: dict[str, Any] = self.model_dump(
            mode="json", exclude={"battle": {"white_name"}} if self.battle.white_name is None else None
        )
        size = len(json.dumps(data, separators=(",", ":")).encode("utf-8"))
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload: {size} bytes exceed {MAX_PAYLOAD_BYTES}")
        return data


class PooledResult(_Body):
    """What a member records for a leased attempt (failures included: they are results, as in one process)."""

    protocol: Literal["arena.pool-attempt/1"] = "arena.pool-attempt/1"
    worker_id: str = Field(min_length=1, max_length=256)
    result: AttemptResult
    trajectory: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TRAJECTORY_RECORDS)
    """The attempt's trajectory records as a local run writes them, or None (none kept, or dropped: too large)."""
    trajectory_dropped: bool = False
