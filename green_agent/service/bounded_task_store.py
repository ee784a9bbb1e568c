"""The green agent's A2A task store: an in-memory store whose tasks keep a bounded history, saved without a copy.

Why: a battle answered as an A2A Task streams its progress as status updates of that one task. The SDK's task manager
moves each update's previous status message into ``task.history`` and saves the whole task on every update; the SDK's
in-memory store deep-copies it on save, and the SDK copies it again for its subscribers. With an unbounded history that
is O(events) work per event (quadratic in a battle's length: 45% of the serving process's CPU at 320 attempts) and
memory that grows without bound (a battle of 10,000 attempts emits tens of thousands of updates).

What it keeps: the task's first message (the request that started it) and its last ``max_history`` other messages.
Everything else about the task (id, status with its latest message, artifacts such as the battle's Result, metadata)
is stored as the SDK gives it. Streaming clients (``message/stream``, ``tasks/resubscribe``) are unaffected: events
reach them through the SDK's event queue, never through the stored history.

How, and why it is safe:

- :meth:`BoundedHistoryTaskStore.save` trims the history of the task it is given *in place*. That task is the SDK task
  manager's working snapshot (``TaskManager._save_task`` saves it and keeps it as its current task), so the next
  update appends to a bounded history and the copy the SDK makes of it for subscribers stays bounded too.
- ``save`` keeps that task itself, without the copy the SDK's store makes (the second O(history) copy per update);
  ``get`` and ``list`` hand out copies, so no caller can change what is stored. The task manager changes its working
  snapshot only right before saving it, with no ``await`` in between, so a copy taken by ``get`` is always of a saved
  state. A write that is not the working snapshot (e.g. the SDK's cancel, which saves a copy) replaces it.
"""

from __future__ import annotations

import logging

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task

log = logging.getLogger(__name__)

DEFAULT_MAX_TASK_HISTORY = 200
"""Messages of a task's history kept besides its first one (the request): a battle's last 200 progress updates."""


def trim_history(task: Task, max_history: int) -> int:
    """Drop the oldest messages of ``task.history`` but its first, keeping the last ``max_history``; returns how many
    were dropped (in place: O(history) once, then O(1) per message appended since the last trim)."""
    excess = len(task.history) - 1 - max_history
    if excess <= 0:
        return 0
    del task.history[1 : 1 + excess]
    return excess


def _copy(task: Task) -> Task:
    copy = Task()
    copy.CopyFrom(task)
    return copy


class BoundedHistoryTaskStore(TaskStore):
    """An in-memory A2A task store keeping a bounded history per task; it copies what it hands out, not what it is
    given (see the module's docstring).

    ``max_history``: messages kept besides the first (at least 0). ``inner``: the store that holds the tasks (by default
    the SDK's in-memory store without its copies; a store that copies on save works too, at the cost of that copy).
    """

    def __init__(self, max_history: int = DEFAULT_MAX_TASK_HISTORY, inner: TaskStore | None = None) -> None:
        if max_history < 0:
            raise ValueError(f"max_history: {max_history} is negative (the number of messages kept must be >= 0)")
        self.max_history = max_history
        self._inner = inner if inner is not None else InMemoryTaskStore(use_copying=False)
        self.dropped = 0
        """Messages dropped from histories since the store was made (for tests and diagnostics)."""

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Trim ``task``'s history in place, then store it uncopied (the module's docstring says why)."""
        dropped = trim_history(task, self.max_history)
        if dropped:
            self.dropped += dropped
            log.debug("task %s: %d old history messages dropped (keeping %d)", task.id, dropped, self.max_history)
        await self._inner.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """A copy of the stored task, or None."""
        task = await self._inner.get(task_id, context)
        return None if task is None else _copy(task)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """A copy of the stored tasks the request asks for."""
        response = await self._inner.list(params, context)
        copy = ListTasksResponse()
        copy.CopyFrom(response)
        return copy

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget a task."""
        await self._inner.delete(task_id, context)
