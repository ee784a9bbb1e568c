"""The green agent's A2A executor: routes each incoming message to the battle protocol it belongs to.

1. AgentBeats ``battle_info`` and ``battle_start`` (parsed by :mod:`green_agent.wire.agentbeats`): acknowledged at
   once with a Message; the battle runs in the background and reports to the ``backend_url`` of
   ``green_battle_context``. A battle_start for a battle that is already running is acknowledged and ignored.
2. An assessment request ``{"participants": {"white_agent": url}, "config": {...}}``: answered as an A2A Task whose
   status updates stream the battle's log and which ends with a "Result" artifact (markdown + BattleResult JSON).
3. Anything else: a Message listing the accepted formats.

One executor per application, built with the application's registry (see :mod:`green_agent.service.context`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from a2a.helpers import new_data_part, new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Role, TaskState

from green_agent.engine.battle_ids import new_battle_id
from green_agent.engine.config import ConfigError
from green_agent.engine.events import BattleEvent
from green_agent.service.a2a_auth import ASSESSMENT_NEEDS_TOKEN, is_operator
from green_agent.service.a2a_messages import ACCEPTED_FORMATS, assessment_request, message_payload
from green_agent.service.backend_target import BackendTarget
from green_agent.service.running_battles import BattleRegistry
from green_agent.wire.agentbeats import (
    AgentBeatsMessageError,
    ResultReason,
    parse_battle_info,
    parse_battle_start,
    refusal_reason,
)
from green_agent.wire.assessment import RESULT_ARTIFACT_NAME, ResultArtifact


def _reply(text: str, context: RequestContext) -> Message:
    return new_text_message(text, context_id=context.context_id, role=Role.ROLE_AGENT)


class GreenAgentExecutor(AgentExecutor):
    """Routes each incoming message to the battle protocol it belongs to."""

    def __init__(self, registry: BattleRegistry) -> None:
        self.registry = registry

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        payload = message_payload(context.message)
        kind = payload.get("type") if payload else None
        if kind == "battle_info" and payload is not None:
            # Acknowledged only: nothing is stored, so a flood of battle_info messages costs no memory.
            info = parse_battle_info(payload)
            await event_queue.enqueue_event(_reply(f"battle_info received for battle {info.shown_id}", context))
        elif kind == "battle_start" and payload is not None:
            await event_queue.enqueue_event(_reply(self._start_agentbeats_battle(payload), context))
        elif payload is not None and "participants" in payload:
            if not (is_operator(context.call_context) or self.registry.limits.open_assessments):
                await event_queue.enqueue_event(_reply(ASSESSMENT_NEEDS_TOKEN, context))  # (the handler refuses first)
                return
            await self._run_assessment(payload, context, event_queue)
        else:
            await event_queue.enqueue_event(_reply(ACCEPTED_FORMATS, context))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """A2A tasks/cancel (operator only, checked by the request handler): cancel the battle behind the task."""
        battle_id = self.registry.battle_of_task(context.task_id) if context.task_id else None
        if battle_id is not None:
            await self.registry.cancel(battle_id)
        if context.task_id:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id or "")
            await updater.cancel()

    # -- AgentBeats -------------------------------------------------------------------------------------------

    def _start_agentbeats_battle(self, payload: dict[str, Any]) -> str:
        """Start the battle in the background and answer at once (the backend's stream ends with our Message)."""
        try:
            start = parse_battle_start(payload)
        except AgentBeatsMessageError as error:
            return f"battle_start refused: {error}"
        battle_id = start.battle_id
        existing = self.registry.get(battle_id)
        if existing is not None:
            return f"battle {battle_id} is already {existing.state}; battle_start ignored"
        backend = (
            BackendTarget(url=start.report_url, token=start.token, white_name=start.white_name)
            if start.report_url
            else None
        )
        try:
            white_url = start.white_url()
            # AgentBeats sends the registered task_config; our backend also passes the battle's own config.
            overrides = start.config_overrides()
            config = self.registry.default_config if overrides is None else self.registry.remote_config(overrides)
            # A restarted green agent given the battle again continues its unfinished run (same white agent).
            record = self.registry.start(battle_id, white_url, config, backend=backend, resume=None)
        except ConfigError as error:
            if backend is not None:
                self.registry.report_refusal(battle_id, backend, error)
            return f"battle {battle_id} refused: {error}"
        accepted = f"{record.battle.config.k} attempts per task against {white_url}"
        if record.queued and record.ticket is not None:
            return f"battle {battle_id} accepted and {self.registry.admission.describe_wait(record.ticket)}: {accepted}"
        return f"battle {battle_id} accepted: {accepted}"

    # -- assessment request ------------------------------------------------------------------------------------

    async def _run_assessment(self, payload: dict[str, Any], context: RequestContext, event_queue: EventQueue) -> None:
        """Answer as a Task: status updates stream the battle log; a "Result" artifact ends it."""
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()

        def status(text: str, data: dict[str, Any] | None = None) -> Message:
            parts = [new_text_part(text)] + ([new_data_part(data)] if data is not None else [])
            return updater.new_agent_message(parts)

        async def stream(event: BattleEvent) -> None:
            await updater.update_status(TaskState.TASK_STATE_WORKING, status(event.text, {"arena_event": event.wire()}))

        try:
            request, config = assessment_request(payload, self.registry)
            battle_id = request.battle_id or new_battle_id()
            backend = BackendTarget(request.backend_url, request.battle_token) if request.backend_url else None
            record = self.registry.start(
                battle_id,
                request.white_agent,
                config,
                sinks=[stream],
                backend=backend,
                a2a_task_id=task.id,
                resume=request.resume,
                retry_infra=request.retry_infra,
                operator=is_operator(context.call_context),
            )
        except ConfigError as error:
            refusal = {"error": str(error), "reason": refusal_reason(error).value}
            await updater.failed(status(f"configuration error: {error}", refusal))
            return
        assert record.task is not None
        if record.queued and record.ticket is not None:
            queued = self.registry.admission.describe_wait(record.ticket)
            await updater.update_status(TaskState.TASK_STATE_WORKING, status(f"battle {battle_id} {queued}"))
        try:
            result = await asyncio.shield(record.task)
        except asyncio.CancelledError:
            if record.state == "cancelled":
                await updater.cancel(status(f"battle {battle_id} was cancelled"))
                return
            raise
        except ConfigError as error:  # found once the battle looked at its tasks (e.g. a task index out of range)
            refusal = {"error": str(error), "reason": refusal_reason(error).value}
            await updater.failed(status(f"configuration error: {error}", refusal))
            return
        except Exception:
            failure = {"error": record.error, "reason": ResultReason.HARNESS_ERROR.value}
            await updater.failed(status(f"battle failed in the harness: {record.error}", failure))
            return
        markdown = record.battle.markdown or ""
        artifact = ResultArtifact(markdown=markdown, result=result.model_dump(mode="json"))
        await updater.add_artifact(
            [new_text_part(artifact.markdown or ""), new_data_part(artifact.result)], name=RESULT_ARTIFACT_NAME
        )
        if result.status in ("cancelled", "interrupted"):
            ended = f"battle {battle_id} was {result.status}"
            await updater.cancel(status(f"{ended}: partial summary in the Result artifact"))
            return
        await updater.complete(status(markdown.splitlines()[0] if markdown else "done"))
