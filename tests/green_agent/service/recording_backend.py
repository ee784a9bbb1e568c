"""A minimal AgentBeats-shaped backend for tests: records every POST /battles/{id} body and header set."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Recorded:
    events: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    result_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def results(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("is_result")]


def make_recording_backend(record: Recorded, *, fail_first: int = 0) -> Starlette:
    """Answers 204 like AgentBeats (after ``fail_first`` 500s, to exercise retries); 400 once a result arrived."""
    failures = {"left": fail_first}

    async def post_event(request: Request) -> Response:
        if failures["left"] > 0:
            failures["left"] -= 1
            return Response(status_code=500)
        if record.results:
            return Response(status_code=400)
        body = await request.json()
        record.events.append({**body, "battle_id": request.path_params["battle_id"]})
        record.headers.append(dict(request.headers))
        if body.get("is_result"):
            record.result_seen.set()
        return Response(status_code=204)

    return Starlette(routes=[Route("/battles/{battle_id}", post_event, methods=["POST"])])
