"""How a turn reaches the agent and how its reply goes back over A2A: the SDK's executor and the direct path.

Why two paths: the a2a-sdk's :class:`~a2a.server.request_handlers.DefaultRequestHandler` runs every SendMessage
through its task machinery (an ActiveTask with event queues and consumer tasks, tracing spans, and a required-field
check that walks the whole request). A turn whose reply is a plain Message needs none of it and leaves nothing
behind in the SDK (no task is stored), yet that machinery was most of the white agent's CPU per turn (a replay
attempt of tau2's retail domain: ~20 ms for the first turn, which carries the tools, and 2-4 ms for each later one).

:class:`DirectRequestHandler` therefore answers such turns itself, with the same outcome the SDK would give:

* only requests the SDK would accept and treat plainly are taken (a context id, no task id, no push notification
  config, a non-negative history length, every REQUIRED field set: :mod:`white_agent.required_fields`); anything
  else goes to the SDK unchanged, which then rejects or handles it as it always has;
* the reply Message is built by :func:`reply_message`, the same function the executor uses;
* a reply that is a Task, or an exception of the agent, is handed to the SDK after all: the agent has already
  decided, so the request's call context carries that outcome (:data:`OUTCOME_KEY`) and :class:`TurnExecutor`
  publishes it instead of asking the agent again. Tasks are stored and errors reported exactly as before.

A turn the agent abandons (:class:`~white_agent.errors.TurnAbandoned`: a deliberately hanging turn woken because
the server is stopping) is answered with a JSON-RPC internal error, never with a reply.
"""

from __future__ import annotations

import uuid
from typing import cast

from a2a.helpers import new_data_part, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCard, Message, SendMessageRequest, Task, TaskState, TaskStatus
from a2a.utils.errors import InternalError
from google.protobuf.json_format import MessageToDict

from white_agent.errors import ContextsFull, TurnAbandoned
from white_agent.protocol import parse_green_message
from white_agent.reply import AgentReply, TurnAgent
from white_agent.required_fields import required_fields_present

OUTCOME_KEY = "white_agent/turn_outcome"
"""Call-context state key: the agent's reply (or exception) decided on the direct path, for the SDK to publish."""

ABANDONED_TEXT = "The white agent abandoned this turn without replying"


def reply_message(reply: AgentReply, context_id: str) -> Message:
    """The A2A Message of a ``message`` reply: its text, then its data part, with its metadata."""
    answer = new_text_message(reply.text, context_id=context_id)
    if reply.data is not None:
        answer.parts.append(new_data_part(reply.data))
    if reply.metadata:
        answer.metadata.update(reply.metadata)
    return answer


class TurnExecutor(AgentExecutor):
    """Adapts a :class:`TurnAgent` to the a2a-sdk executor interface (exactly one Message, or one Task, per request)."""

    def __init__(self, agent: TurnAgent) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Parse the green agent's message, ask the agent (unless it already answered), publish its reply."""
        message = context.message
        if message is None:  # pragma: no cover - the SDK always passes the message on SendMessage
            raise ValueError("no message in request")
        context_id = context.context_id or str(uuid.uuid4())
        outcome = context.call_context.state.pop(OUTCOME_KEY, None)
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, AgentReply):
            reply = outcome
        else:
            reply = await self._agent.reply(context_id, parse_green_message(message, context.metadata))
        if reply.kind == "message":
            await event_queue.enqueue_event(reply_message(reply, context_id))
            return
        task_id = context.task_id or str(uuid.uuid4())
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message],
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        status_message = updater.new_agent_message([new_text_part(reply.text)], metadata=reply.metadata)
        if reply.kind == "task_failed":
            await updater.failed(status_message)
            return
        parts = [new_text_part(reply.text)] + ([new_data_part(reply.data)] if reply.data is not None else [])
        await updater.add_artifact(parts, name="action")
        await updater.complete(status_message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Nothing to undo: a turn either answers or is abandoned."""


def _answerable_directly(params: SendMessageRequest) -> bool:
    """True for a request the SDK would accept and handle plainly (see the module docstring)."""
    message = params.message
    configuration = params.configuration
    return (
        bool(message.context_id)
        and not message.task_id
        and configuration.history_length >= 0
        and not configuration.HasField("task_push_notification_config")
        and required_fields_present(params)
    )


class DirectRequestHandler(DefaultRequestHandler):
    """The SDK's request handler, answering plain turns whose reply is a Message itself (module docstring)."""

    def __init__(self, agent: TurnAgent, agent_card: AgentCard) -> None:
        super().__init__(agent_executor=TurnExecutor(agent), task_store=InMemoryTaskStore(), agent_card=agent_card)
        self._agent = agent

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        """One turn: the agent's Message directly; anything else through the SDK."""
        if not _answerable_directly(params):
            return cast("Message | Task", await super().on_message_send(params, context))
        message = params.message
        try:
            turn = parse_green_message(message, MessageToDict(params.metadata))
            reply = await self._agent.reply(message.context_id, turn)
        except TurnAbandoned as error:
            raise InternalError(message=f"{ABANDONED_TEXT}: {error}") from error
        except ContextsFull as error:  # refused, never evicting a live conversation (white_agent/contexts.py)
            raise InternalError(message=str(error)) from error
        except Exception as error:  # the SDK reports it exactly as before: its executor re-raises it
            context.state[OUTCOME_KEY] = error
            return cast("Message | Task", await super().on_message_send(params, context))
        if reply.kind == "message":
            return reply_message(reply, message.context_id)
        context.state[OUTCOME_KEY] = reply
        return cast("Message | Task", await super().on_message_send(params, context))
