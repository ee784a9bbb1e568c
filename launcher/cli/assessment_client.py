"""Send one assessment request to the green agent and follow its streamed Task to the end.

Why a module of its own: ``arena run`` (and anyone scripting battles) needs the same thing: one streaming A2A message
carrying ``{"participants": {"white_agent": url}, "config": {...}, "battle_id": ...}``, live progress from the status
updates' ``arena_event`` data parts, and at the end the "Result" artifact (markdown + BattleResult JSON). The green
agent may also die or hang mid-battle; that must become a clear :class:`AssessmentError`, never a silent hang.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.helpers import get_data_parts, get_text_parts, new_text_part
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError

from green_agent.wire.assessment import RESULT_ARTIFACT_NAME, AssessmentRequest, ResultArtifact
from launcher.ports import is_loopback_url

logger = logging.getLogger(__name__)

EventCallback = Callable[[dict[str, Any], str], None]
"""``on_event(arena_event, progress_text)``; a status update without ``arena_event`` arrives as
``{"type": "log", "message": text}``."""

_STATE_NAMES: dict[int, str] = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input_required",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth_required",
}
TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
# The agent stopped and waits for something we will never send: the stream is over as far as we are concerned.
_INTERRUPTED_STATES = frozenset({"input_required", "auth_required"})
_INT_EVENT_FIELDS = ("attempt", "attempts_total", "done", "total")


class AssessmentError(RuntimeError):
    """The assessment could not be carried out (green agent unreachable, died, hung, or broke the protocol)."""


@dataclass
class AssessmentOutcome:
    """How the assessment ended.

    ``state`` is the final task state name ("completed", "failed", "rejected", "canceled", or "message" when the
    green agent answered with a plain Message instead of a Task). ``error`` holds the agent's text for anything but
    "completed". ``battle_started`` tells whether a ``battle_started`` event arrived (a config rejection comes before
    it).
    """

    state: str
    markdown: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    task_id: str | None = None
    battle_started: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.state == "completed"


def build_request_text(white_url: str, config: dict[str, Any], battle_id: str | None = None, **extra: Any) -> str:
    """The JSON text of the assessment request (``extra`` keys are added at top level, e.g. ``backend_url``)."""
    fields = {k: v for k, v in extra.items() if v is not None}
    return json.dumps(AssessmentRequest(white_agent=white_url, config=config, battle_id=battle_id, **fields).wire())


def state_name(state: int) -> str:
    """Lower-case name of a protobuf TaskState value."""
    return _STATE_NAMES.get(state, "unknown")


def _normalise_event(event: dict[str, Any]) -> dict[str, Any]:
    # Data parts travel as protobuf Values: every number is a double. Counters are integers again here.
    fixed = dict(event)
    for key in _INT_EVENT_FIELDS:
        value = fixed.get(key)
        if isinstance(value, float) and value.is_integer():
            fixed[key] = int(value)
    return fixed


class _StreamState:
    """What the stream has told us so far."""

    def __init__(self, on_event: EventCallback | None) -> None:
        self.on_event = on_event
        self.task_id: str | None = None
        self.state = "submitted"
        self.status_text = ""
        self.markdown: str | None = None
        self.result: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.battle_started = False
        self.message_reply: str | None = None
        self._artifacts: dict[str, Artifact] = {}

    def on_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        for artifact in task.artifacts:
            self._merge_artifact(artifact, append=False)
        self.on_status(task.status, from_snapshot=True)

    def on_status(self, status: TaskStatus, *, from_snapshot: bool = False) -> None:
        self.state = state_name(status.state)
        if not status.HasField("message"):
            return
        message = status.message
        text = "\n".join(get_text_parts(message.parts))
        self.status_text = text
        if from_snapshot and self.state not in TERMINAL_STATES:
            return  # a snapshot repeats what the updates already told us
        events = [d["arena_event"] for d in get_data_parts(message.parts) if isinstance(d, dict) and "arena_event" in d]
        if not events and self.state == "working" and text:
            events = [{"type": "log", "message": text}]
        for raw in events:
            if not isinstance(raw, dict):
                continue
            event = _normalise_event(raw)
            if event.get("type") == "battle_started":
                self.battle_started = True
            self.events.append(event)
            if self.on_event is not None:
                try:
                    self.on_event(event, text)
                except Exception:  # a display bug must not abort the battle
                    logger.exception("on_event callback failed")

    def on_artifact(self, artifact: Artifact, append: bool) -> None:
        self._merge_artifact(artifact, append=append)

    def on_message(self, message: Message) -> None:
        self.message_reply = "\n".join(get_text_parts(message.parts))
        self.state = "message"

    def _merge_artifact(self, artifact: Artifact, *, append: bool) -> None:
        key = artifact.artifact_id or artifact.name
        if append and key in self._artifacts:
            self._artifacts[key].parts.extend(artifact.parts)
        else:
            copy = Artifact()
            copy.CopyFrom(artifact)
            self._artifacts[key] = copy
        merged = self._artifacts[key]
        if merged.name != RESULT_ARTIFACT_NAME:
            return
        content = ResultArtifact.read(get_text_parts(merged.parts), get_data_parts(merged.parts))
        self.markdown = content.markdown if content.markdown is not None else self.markdown
        self.result = content.result if content.result is not None else self.result

    def outcome(self) -> AssessmentOutcome:
        error = None
        if self.state == "message":
            error = self.message_reply or "the green agent answered with a message instead of running the assessment"
        elif self.state != "completed":
            error = self.status_text or f"the assessment ended in state {self.state}"
        return AssessmentOutcome(
            state=self.state,
            markdown=self.markdown,
            result=self.result,
            error=error,
            task_id=self.task_id,
            battle_started=self.battle_started,
            events=self.events,
        )


async def run_assessment(
    green_url: str,
    white_url: str,
    config: dict[str, Any],
    *,
    battle_id: str | None = None,
    on_event: EventCallback | None = None,
    extra_request_fields: dict[str, Any] | None = None,
    connect_timeout_s: float = 10.0,
    idle_timeout_s: float | None = 120.0,
    operator_token: str | None = None,
) -> AssessmentOutcome:
    """Run one assessment on the green agent at ``green_url`` and return how it ended.

    ``on_event`` is called for every progress event as it arrives. ``idle_timeout_s`` bounds the silence between two
    bytes of the stream (the server sends SSE keep-alives every 15 s, so only a hung agent trips it; None disables).

    Raises :class:`AssessmentError` when the green agent cannot be reached, the connection breaks (e.g. the agent
    died), the stream goes silent, or it ends before a final state. ``operator_token`` is the green agent's operator
    token (assessment requests need it).
    """
    timeout = httpx.Timeout(connect=connect_timeout_s, read=idle_timeout_s, write=30.0, pool=30.0)
    stream = _StreamState(on_event)
    text = build_request_text(white_url, config, battle_id, **(extra_request_fields or {}))
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[new_text_part(text)])
    headers = {"Authorization": f"Bearer {operator_token}"} if operator_token else None
    async with httpx.AsyncClient(timeout=timeout, trust_env=not is_loopback_url(green_url), headers=headers) as http:
        try:
            card = await A2ACardResolver(http, green_url).get_agent_card()
        except (A2AClientError, httpx.HTTPError, ValueError) as error:
            raise AssessmentError(f"could not read the green agent's card at {green_url}: {error}") from error
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        try:
            async for response in client.send_message(SendMessageRequest(message=message)):
                kind = response.WhichOneof("payload")
                if kind == "task":
                    stream.on_task(response.task)
                elif kind == "status_update":
                    stream.task_id = response.status_update.task_id or stream.task_id
                    stream.on_status(response.status_update.status)
                elif kind == "artifact_update":
                    update = response.artifact_update
                    stream.on_artifact(update.artifact, append=update.append)
                elif kind == "message":
                    stream.on_message(response.message)
                if stream.state in TERMINAL_STATES or stream.state == "message":
                    break
                if stream.state in _INTERRUPTED_STATES:
                    break
        except A2AClientError as error:
            cause = error.__cause__
            detail = f"{error}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
            if isinstance(cause, httpx.ReadTimeout):
                raise AssessmentError(
                    f"the green agent at {green_url} sent nothing for {idle_timeout_s:g} s (state {stream.state})"
                ) from error
            raise AssessmentError(f"lost the connection to the green agent at {green_url}: {detail}") from error
        except httpx.HTTPError as error:
            raise AssessmentError(f"lost the connection to the green agent at {green_url}: {error}") from error
        except A2AError as error:  # a JSON-RPC error answer: the green agent refused (e.g. no operator token)
            raise AssessmentError(f"the green agent at {green_url} refused the request: {error.message}") from error
        finally:
            await client.close()
    if stream.state not in TERMINAL_STATES and stream.state != "message" and stream.state not in _INTERRUPTED_STATES:
        raise AssessmentError(
            f"the green agent's stream ended before the assessment finished (last state: {stream.state})"
        )
    return stream.outcome()
