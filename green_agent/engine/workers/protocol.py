"""What crosses between a battle and its attempt workers: one JSON object per line, typed by ``kind``.

Published as docs/workers.schema.json (``python -m green_agent.engine.workers.protocol`` prints it;
tests/green_agent/engine/workers/test_protocol.py compares). Both directions are bounded: a line longer than
:data:`MAX_MESSAGE_BYTES` is a protocol violation (the parent stops reading that worker and kills it; the worker
replaces a result that would not fit with a harness failure). The unit of work is one attempt, named by its task
(domain, split, index, tau2 id) and attempt number, so a result depends on nothing but that and the battle's
config, whichever worker runs it.

Battle -> worker (the worker's stdin):
  ``start``   once, first: the battle (id, white agent URL, config, run directory) and the worker's share of the
              concurrency and of the scoring workers. Answered by ``ready`` (or ``failed``, then the worker exits).
  ``run``     play one attempt; answered by ``done`` with its result (never an exception: failures are results).
  ``cancel``  stop that attempt (cancel, interrupt); no answer (the battle no longer waits for it).
  ``share``   the worker's share of the green agent's provider caps changed (other battles' workers started or
              stopped, the pool's membership changed: docs/design/providers.md); sent after ``start`` and on every
              change; no answer.
  End of input: the worker cancels what it runs, closes its sandboxes and scoring workers, and exits.

Worker -> battle (a descriptor of its own: the worker's stdout is moved to stderr so a stray print cannot corrupt
the stream): ``ready``, ``done``, ``failed``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from green_agent.engine.config import MAX_CONCURRENCY, BattleConfig
from green_agent.engine.results import AttemptResult
from green_agent.provider_limits import DEFAULT_PROVIDER_MAX_CONCURRENCY, MAX_PROVIDER_CONCURRENCY

PROTOCOL = "arena.attempt-worker/1"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Longest line either side accepts (an attempt result is far smaller: its trajectory stays in its file)."""
MAX_DETAIL_CHARS = 2000


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartWorker(_Message):
    """The battle a worker serves (sent once, first)."""

    kind: Literal["start"] = "start"
    protocol: Literal["arena.attempt-worker/1"] = "arena.attempt-worker/1"
    battle_id: str = Field(min_length=1, max_length=200)
    white_agent_url: str = Field(min_length=1, max_length=4096)
    config: BattleConfig
    run_dir: str | None = Field(default=None, max_length=4096)
    """The battle's run directory: the worker writes attempts' trajectory files under ``trajectories/`` (one file
    per attempt, named by task and attempt number); everything else in it is the battle's."""
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    """Attempts this worker may be given at once (its HTTP pool is sized for them)."""
    scoring_workers: int = Field(ge=1, le=64)
    processes: int = Field(default=1, ge=1, le=1024)
    """How many workers the battle has: each takes its share of the provider caps (docs/design/providers.md)."""
    provider_max_concurrency: int = Field(default=DEFAULT_PROVIDER_MAX_CONCURRENCY, ge=1, le=MAX_PROVIDER_CONCURRENCY)
    """The operator's per-provider cap of LLM calls in flight (``--provider-max-concurrency``), for all workers."""


class RunAttempt(_Message):
    """Play one attempt: (task, attempt number)."""

    kind: Literal["run"] = "run"
    attempt_id: int = Field(ge=0)
    domain: str = Field(min_length=1, max_length=64)
    split: str | None = Field(default=None, max_length=64)
    index: int = Field(ge=0)
    task_id: str = Field(max_length=512)
    attempt: int = Field(ge=1)


class CancelAttempt(_Message):
    """Stop attempt ``attempt_id`` (its result is no longer wanted)."""

    kind: Literal["cancel"] = "cancel"
    attempt_id: int = Field(ge=0)


class WorkerReady(_Message):
    """The worker holds its HTTP pool, sandbox factory and scoring workers: it takes attempts."""

    kind: Literal["ready"] = "ready"
    pid: int


class AttemptDone(_Message):
    """An attempt's result (failures included: the attempt loop attributes them as in one process)."""

    kind: Literal["done"] = "done"
    attempt_id: int = Field(ge=0)
    result: AttemptResult


class WorkerFailed(_Message):
    """The worker cannot serve the battle (e.g. it could not start its pools); it exits after this."""

    kind: Literal["failed"] = "failed"
    detail: str = Field(max_length=MAX_DETAIL_CHARS)


class ProviderShare(_Message):
    """From now on at most ``slots`` LLM calls in flight per provider in this worker (its share of the operator's
    ``--provider-max-concurrency``, held for it by the serving process: docs/design/providers.md)."""

    kind: Literal["share"] = "share"
    slots: int = Field(ge=1, le=MAX_PROVIDER_CONCURRENCY)


ToWorker = Annotated[StartWorker | RunAttempt | CancelAttempt | ProviderShare, Field(discriminator="kind")]
FromWorker = Annotated[WorkerReady | AttemptDone | WorkerFailed, Field(discriminator="kind")]
TO_WORKER: TypeAdapter[StartWorker | RunAttempt | CancelAttempt | ProviderShare] = TypeAdapter(ToWorker)
FROM_WORKER: TypeAdapter[WorkerReady | AttemptDone | WorkerFailed] = TypeAdapter(FromWorker)


def encode(message: _Message) -> bytes:
    """One line of the protocol (ValueError when it exceeds :data:`MAX_MESSAGE_BYTES`)."""
    line = message.model_dump_json().encode("utf-8") + b"\n"
    if len(line) > MAX_MESSAGE_BYTES:
        raise ValueError(f"{message.__class__.__name__}: {len(line)} bytes exceed {MAX_MESSAGE_BYTES}")
    return line


def schema() -> dict[str, Any]:
    """The published schema of both directions (docs/workers.schema.json)."""
    return {
        "title": PROTOCOL,
        "description": "Messages between a battle and its attempt workers, one JSON object per line.",
        "to_worker": TO_WORKER.json_schema(),
        "from_worker": FROM_WORKER.json_schema(),
        "max_message_bytes": MAX_MESSAGE_BYTES,
    }


if __name__ == "__main__":
    print(json.dumps(schema(), indent=2, sort_keys=True))
