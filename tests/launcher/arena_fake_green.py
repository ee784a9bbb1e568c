"""A fake green agent speaking the assessment contract, for launcher tests (no tau2 involved).

Run in-process (``build_app``) or as ``python -m arena_fake_green --host H --port P --card-url U --runs-dir D``
(the green agent's command line). ``FAKE_GREEN_MODE`` picks the behaviour:

  ok        battle_started, k attempts per task (success, failure, infra_error, ...), battle_finished (text: the
            markdown), writes runs/<battle id>/summary.json + summary.md, "Result" artifact, completed
  reject    failed before battle_started with a message naming the field (like a config error)
  fail_mid  battle_started, then failed
  die       battle_started, then the process exits with code 7 (only meaningful as a subprocess)
  hang      battle_started, then nothing (keep-alives only)
  message   answers with a plain Message instead of a Task

``FAKE_GREEN_RECORD`` names a file the received request JSON is written to; ``FAKE_GREEN_PIDFILE`` one the
process writes its pid to at start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import uvicorn
from a2a.helpers import get_message_text, new_data_part, new_message, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, TaskState
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

OUTCOMES = ("success", "failure", "infra_error", "success")


def _status(text: str, event: dict[str, Any] | None, context_id: str, task_id: str) -> Message:
    parts = [new_text_part(text)]
    if event is not None:
        parts.append(new_data_part({"arena_event": event}))
    return new_message(parts, context_id, task_id)


class FakeGreenExecutor(AgentExecutor):
    def __init__(self, runs_dir: Path, mode: str, record: Path | None) -> None:
        self.runs_dir = runs_dir
        self.mode = mode
        self.record = record

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = get_message_text(context.message)
        if self.record is not None:
            self.record.write_text(text, encoding="utf-8")
        if self.mode == "message":
            await event_queue.enqueue_event(new_message([new_text_part("accepted formats: ...")], context.context_id))
            return
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        request = json.loads(text)
        config = request["config"]
        if self.mode == "reject":
            await updater.failed(_status("config.k: k must be even and >= 2 (got 3)", None, task.context_id, task.id))
            return
        battle_id = request.get("battle_id") or "fake-battle"
        k = int(config.get("k", 2))
        index = config.get("task_index", config.get("task_id", 0))  # task_id: the field's old name
        tasks = [f"{config.get('domain', 'retail')}/test/{index}"]
        total = k * len(tasks)
        await updater.start_work(
            _status(
                f"🎯 Starting pass@{k} evaluation",
                {"type": "battle_started", "battle_id": battle_id, "attempts_total": total, "tasks": tasks},
                task.context_id,
                task.id,
            )
        )
        if self.mode == "die":
            await asyncio.sleep(0.2)
            os._exit(7)
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "fail_mid":
            await updater.failed(_status("harness exploded", None, task.context_id, task.id))
            return
        attempts = []
        for index in range(total):
            attempt = index % k + 1
            key = tasks[index // k]
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                _status(
                    f"🔄 Starting attempt {attempt}/{k}...",
                    {"type": "attempt_started", "task_key": key, "attempt": attempt},
                    task.context_id,
                    task.id,
                ),
            )
            outcome = OUTCOMES[index % len(OUTCOMES)]
            reward = 1.0 if outcome == "success" else 0.0
            attempts.append({"task_key": key, "attempt": attempt, "outcome": outcome, "reward": reward})
            mark = "✅" if outcome == "success" else "❌"
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                _status(
                    f"{mark} Attempt {attempt}/{k}: {outcome.upper()} (reward={reward})",
                    {
                        "type": "attempt_finished",
                        "task_key": key,
                        "attempt": attempt,
                        "outcome": outcome,
                        "done": index + 1,
                        "total": total,
                        "reward": reward,
                    },
                    task.context_id,
                    task.id,
                ),
            )
        result = {
            "battle_id": battle_id,
            "white_agent_url": request["participants"]["white_agent"],
            "attempts": attempts,
            "status": "completed",
        }
        markdown = (
            f"# Battle {battle_id}\n\n- attempts: {total}\n"
            '- reply format: expected `<json>{"name": ..., "arguments": {...}}</json>`\n'
        )
        # Like the real green agent: the summary travels twice, as the battle_finished event's text and as the
        # Result artifact (the terminal must print it once).
        await updater.update_status(
            TaskState.TASK_STATE_WORKING,
            _status(markdown, {"type": "battle_finished", "done": total, "total": total}, task.context_id, task.id),
        )
        run_dir = self.runs_dir / battle_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "summary.json").write_text(json.dumps(result), encoding="utf-8")
        (run_dir / "summary.md").write_text(markdown, encoding="utf-8")
        await updater.add_artifact([new_text_part(markdown), new_data_part(result)], name="Result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def build_app(
    card_url: str, runs_dir: Path, mode: str = "ok", record: Path | None = None, operator_token: str | None = None
) -> Starlette:
    """The fake green agent; with ``operator_token`` its A2A endpoint answers 401 to requests without the bearer
    token (as the real one refuses assessments), so launcher tests prove the token is passed."""
    card = AgentCard(
        name="fake green",
        description="fake green agent for launcher tests",
        version="0.0.1",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=card_url)],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="assess", name="assess", description="fake assessment", tags=["test"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=FakeGreenExecutor(runs_dir, mode, record), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)]
    )
    if operator_token:

        class RequireToken(BaseHTTPMiddleware):
            async def dispatch(self, request: Request, call_next: Any) -> Any:
                if request.method == "POST" and request.headers.get("authorization") != f"Bearer {operator_token}":
                    return JSONResponse({"error": "operator token required"}, status_code=401)
                return await call_next(request)

        app.add_middleware(RequireToken)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--card-url", required=True)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--scenario", type=Path, default=None)
    args = parser.parse_args()
    pidfile = os.environ.get("FAKE_GREEN_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()), encoding="utf-8")
    record = os.environ.get("FAKE_GREEN_RECORD")
    app = build_app(
        args.card_url,
        args.runs_dir,
        os.environ.get("FAKE_GREEN_MODE", "ok"),
        Path(record) if record else None,
        operator_token=os.environ.get("ARENA_OPERATOR_TOKEN"),
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)


if __name__ == "__main__":
    main()
