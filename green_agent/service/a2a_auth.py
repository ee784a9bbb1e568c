"""Who may do what over A2A: the operator token, checked per JSON-RPC method and per message kind.

The HTTP middleware (:mod:`green_agent.service.operator_auth`) lets every A2A request through; here the request
handler reserves task reads, lists, cancels, subscriptions and push configs to the operator, and refuses an
assessment request without the token (unless ``open_assessments``). AgentBeats ``battle_start`` messages need none.
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.utils.errors import InvalidRequestError, TaskNotFoundError
from starlette.requests import Request

from green_agent.service.a2a_messages import message_payload
from green_agent.service.operator_auth import OperatorToken

ASSESSMENT_NEEDS_TOKEN = (
    "assessment requests need the green agent's operator token (Authorization: Bearer <token>); "
    "AgentBeats battle_start messages do not"
)

OPERATOR_STATE_KEY = "arena_operator"
"""Key of :class:`ServerCallContext` state that says whether the request carried the operator token."""


def is_operator(call_context: ServerCallContext | None) -> bool:
    """True when the A2A request was authenticated with the green agent's operator token."""
    return bool(call_context is not None and call_context.state.get(OPERATOR_STATE_KEY))


class OperatorContextBuilder(DefaultServerCallContextBuilder):
    """Builds the A2A call context and records whether the request presented the operator token."""

    def __init__(self, token: OperatorToken) -> None:
        self._token = token

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):  # the SDK reads A2A-Version from here; the credential stays out of task state
            context.state["headers"] = {
                k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")
            }
        context.state[OPERATOR_STATE_KEY] = self._token.authorizes(request.scope.get("headers", []))
        return context


class OperatorRequestHandler(DefaultRequestHandler):
    """The SDK's request handler, with task reads, lists, cancels and subscriptions reserved to the operator.

    A caller without the token gets "task not found" for every id (never a list of what exists), so the agent
    under test can neither read nor cancel any battle, its own included. An assessment request without the token
    is refused with a JSON-RPC error before any task exists (unless ``open_assessments``).
    """

    def __init__(self, *args: Any, open_assessments: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open_assessments = open_assessments

    def _check_send(self, params: Any, context: ServerCallContext) -> None:
        _require_operator_for_existing_task(params, context)
        if is_operator(context) or self._open_assessments:
            return
        payload = message_payload(getattr(params, "message", None))
        if payload is not None and "participants" in payload:
            raise InvalidRequestError(ASSESSMENT_NEEDS_TOKEN)

    async def on_message_send(self, params: Any, context: ServerCallContext) -> Any:
        self._check_send(params, context)
        return await super().on_message_send(params, context)

    async def on_message_send_stream(self, params: Any, context: ServerCallContext) -> Any:
        self._check_send(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event

    async def on_get_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_get_task(params, context)

    async def on_list_tasks(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_list_tasks(params, context)

    async def on_cancel_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_cancel_task(params, context)

    async def on_subscribe_to_task(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_create_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_create_task_push_notification_config(params, context)

    async def on_get_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_get_task_push_notification_config(params, context)

    async def on_list_task_push_notification_configs(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_list_task_push_notification_configs(params, context)

    async def on_delete_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        _require_operator(context)
        return await super().on_delete_task_push_notification_config(params, context)


def _require_operator_for_existing_task(params: Any, context: ServerCallContext) -> None:
    """Only the operator may add a message to an existing task (e.g. inject text into a running assessment)."""
    message: Any = getattr(params, "message", None)
    if message is not None and getattr(message, "task_id", None) and not is_operator(context):
        raise TaskNotFoundError("task not found (continuing a task needs the green agent's operator token)")


def _require_operator(context: ServerCallContext) -> None:
    if not is_operator(context):
        raise TaskNotFoundError("task not found (task operations need the green agent's operator token)")
