"""The bounded A2A task store under the SDK's task manager: a long task's history and per-update copies stay bounded.

Why the SDK's TaskManager and not a hand-made sequence of saves: the bound only pays off because the task manager
keeps the task it saved as its working snapshot and appends the next update's message to it; these tests pin that
behaviour of the installed a2a-sdk, so an upgrade that changes it fails here. Work is counted in messages copied, not
in time.
"""

from __future__ import annotations

import pytest
from a2a.helpers import new_text_message
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskManager, TaskStore
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from green_agent.service.bounded_task_store import BoundedHistoryTaskStore, trim_history

asyncio_test = pytest.mark.asyncio(loop_scope="session")

EVENTS = 1000


class CountingStore(TaskStore):
    """An in-memory store that records how many history messages each save had to copy."""

    def __init__(self) -> None:
        self.inner = InMemoryTaskStore()
        self.copied: list[int] = []

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self.copied.append(len(task.history))
        await self.inner.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self.inner.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self.inner.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self.inner.delete(task_id, context)


def _update(i: int, state: TaskState = TaskState.TASK_STATE_WORKING) -> TaskStatusUpdateEvent:
    message = new_text_message(f"progress {i}", context_id="c", task_id="t", role=Role.ROLE_AGENT)
    return TaskStatusUpdateEvent(task_id="t", context_id="c", status=TaskStatus(state=state, message=message))


async def _run_task(store: TaskStore, events: int) -> TaskManager:
    """The SDK's task manager through a task's life: the request, ``events`` status updates, completion."""
    request = Message(message_id="request", role=Role.ROLE_USER, context_id="c", task_id="t")
    manager = TaskManager(store, ServerCallContext(), task_id="t", context_id="c", initial_message=request)
    submitted = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
    await manager.save_task_event(Task(id="t", context_id="c", history=[request], status=submitted))
    for i in range(events):
        await manager.save_task_event(_update(i))
    await manager.save_task_event(_update(events, TaskState.TASK_STATE_COMPLETED))
    return manager


@asyncio_test
async def test_without_the_bound_every_update_copies_the_whole_history() -> None:
    """The problem (the SDK's own store): the copies grow with the updates before them, quadratic in total."""
    counting = CountingStore()
    await _run_task(counting, EVENTS)
    assert counting.copied[-1] == EVENTS + 1
    assert sum(counting.copied) > EVENTS * EVENTS // 2


@asyncio_test
async def test_a_long_task_keeps_its_request_and_its_last_messages() -> None:
    counting = CountingStore()
    manager = await _run_task(BoundedHistoryTaskStore(max_history=50, inner=counting), EVENTS)
    stored = await counting.get("t", ServerCallContext())
    assert stored is not None
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert stored.status.message.parts[0].text == f"progress {EVENTS}"  # the latest update is the status, untouched
    assert stored.history[0].message_id == "request"
    assert [m.parts[0].text for m in stored.history[1:]] == [f"progress {i}" for i in range(EVENTS - 50, EVENTS)]
    # The task manager's working snapshot (what the SDK copies for subscribers on every update) is the bounded one.
    working = await manager.get_task()
    assert working is not None and len(working.history) == 51


@asyncio_test
async def test_the_work_per_update_does_not_grow_with_the_task() -> None:
    counting = CountingStore()
    store = BoundedHistoryTaskStore(max_history=50, inner=counting)
    await _run_task(store, EVENTS)
    assert max(counting.copied) == 51  # the request and 50 messages, from the 51st update to the last
    assert counting.copied[200:] == [51] * (len(counting.copied) - 200)
    assert store.dropped == EVENTS - 50


@asyncio_test
async def test_a_short_task_is_stored_unchanged() -> None:
    counting = CountingStore()
    await _run_task(BoundedHistoryTaskStore(max_history=50, inner=counting), 10)
    stored = await counting.get("t", ServerCallContext())
    assert stored is not None
    assert [m.message_id for m in stored.history][:1] == ["request"] and len(stored.history) == 11


def test_trim_keeps_the_first_message_and_the_last_ones() -> None:
    task = Task(id="t", history=[Message(message_id=str(i)) for i in range(10)])
    assert trim_history(task, 3) == 6
    assert [m.message_id for m in task.history] == ["0", "7", "8", "9"]
    assert trim_history(task, 3) == 0
    assert trim_history(task, 0) == 3 and [m.message_id for m in task.history] == ["0"]


def test_a_negative_bound_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="max_history"):
        BoundedHistoryTaskStore(max_history=-1)


@asyncio_test
async def test_what_the_store_hands_out_is_a_copy() -> None:
    """The store keeps the task it is given uncopied (the SDK's working snapshot); nobody it answers can change it."""
    store = BoundedHistoryTaskStore(max_history=5)
    context = ServerCallContext()
    await store.save(Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING)), context)
    got = await store.get("t", context)
    assert got is not None
    got.status.state = TaskState.TASK_STATE_FAILED
    listed = await store.list(ListTasksRequest(), context)
    listed.tasks[0].ClearField("status")  # what the SDK's tasks/list does to artifacts, say
    again = await store.get("t", context)
    assert again is not None and again is not got and again.status.state == TaskState.TASK_STATE_WORKING
    await store.delete("t", context)
    assert await store.get("t", context) is None
