"""Record what the AgentBeats SDK (PyPI ``agentbeats==1.2.6``) posts to a battle backend, as a replayable fixture.

Runs INSIDE the AgentBeats venv, never Arena's (it imports the SDK and the real AgentBeats backend):

    bash scripts/agentbeats_venv.sh
    .venv-agentbeats/bin/python scripts/record_agentbeats_sdk_posts.py [--output PATH]

What it does, offline (loopback only; proxies point at a dead port so nothing can leave the machine):

1. loads the REAL AgentBeats backend (``backend.app`` of the same wheel) from a temporary copy of its package (it
   keeps its SQLite file next to its source; the copy keeps the venv untouched) and writes into its store what a
   battle looks like once AgentBeats has started it: a green agent, a white agent named ``white_agent``, a battle in
   state ``running``. The launcher resets and the A2A battle_start that lead there are not part of what the SDK posts;
2. serves a small recording HTTP server on 127.0.0.1 that captures each request (method, path, headers with the
   values of credentials dropped, JSON body), forwards it to that real backend in process and answers with the
   real backend's status, which it records as ``agentbeats_status``;
3. calls the SDK's own reporting functions with that server as ``backend_url``: ``update_battle_process``,
   ``record_battle_event``, ``record_agent_action``, the legacy ``log_ready`` / ``log_startup`` / ``log_error`` /
   ``log_shutdown`` (they post to ``/battles/{id}/<name>``, which AgentBeats does not serve), then
   ``record_battle_result`` and one more progress update after the result;
4. the SDK stamps every post with ``datetime.utcnow().isoformat() + "Z"``: ISO text, never a number. AgentBeats
   also takes a Unix-time number there, so the SDK's own progress and result bodies are posted once more to a second
   seeded battle with the timestamp replaced by an int and a float (``numeric_timestamp_variants``: made by this
   script, not by the SDK, and marked so), with the real backend's statuses and the result it stores;
5. writes the fixture (default ``tests/battle_backend/fixtures/agentbeats_sdk_posts.json``) with a header naming the
   versions, the command and the recorded battle ids, plus what the real backend holds afterwards (state, result).

A new recording differs from the committed one in the SDK's wall-clock timestamps only.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "tests" / "backend" / "fixtures" / "agentbeats_sdk_posts.json"
COMMAND = "bash scripts/agentbeats_venv.sh && .venv-agentbeats/bin/python scripts/record_agentbeats_sdk_posts.py"
FORMAT = "arena.agentbeats-sdk-posts/1"

BATTLE_ID = "00000000-0000-4000-8000-0000000000b1"
NUMERIC_BATTLE_ID = "00000000-0000-4000-8000-0000000000b2"
NUMERIC_TIMESTAMPS: tuple[tuple[str, str, int | float], ...] = (
    ("update_battle_process(all fields)", "int", 1763769600),
    ("update_battle_process(minimal)", "float", 1763769600.25),
    ("record_battle_result", "float", 1763769601.5),
)
"""(SDK call whose body is re-posted, kind, the Unix time that replaces its ISO timestamp)."""
GREEN_ID = "00000000-0000-4000-8000-0000000000a1"
WHITE_ID = "00000000-0000-4000-8000-0000000000a2"
GREEN_NAME = "green_agent"
WHITE_NAME = "white_agent"

CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-battle-token", "x-api-key"})
"""Their values are replaced by ``<dropped>`` (the SDK sends none; a future one must not land in the repository)."""
VOLATILE_HEADERS = frozenset({"host", "content-length"})
"""Left out: the port changes on every run and the length follows from the body."""
DEAD_PROXY = "http://127.0.0.1:9"


def _require_sdk_venv() -> None:
    missing = [name for name in ("agentbeats", "backend", "fastapi") if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(
            f"record_agentbeats_sdk_posts.py: {', '.join(missing)} not importable with {sys.executable}.\n"
            f"Run it inside the AgentBeats venv: {COMMAND}"
        )


def _isolate_network() -> None:
    """Only loopback: any other request (the SDK has none, the backend's LLM role matcher would) fails at once."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[name] = DEAD_PROXY
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ.setdefault("DEV_LOGIN", "true")
    os.environ.setdefault("OPENROUTER_API_KEY", "dummy")
    os.environ.pop("OPENAI_API_KEY", None)


@contextlib.contextmanager
def real_backend() -> Iterator[tuple[Any, Any]]:
    """(FastAPI TestClient of AgentBeats' ``backend.app``, its ``db``), served from a temporary copy of the package."""
    spec = importlib.util.find_spec("backend")
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations)))
    with tempfile.TemporaryDirectory(prefix="agentbeats-backend-") as root:
        shutil.copytree(source, Path(root) / "backend", ignore=shutil.ignore_patterns("__pycache__", "data"))
        sys.path.insert(0, root)
        importlib.invalidate_caches()
        try:
            import backend.app  # the copy: first on sys.path
            from backend.db.storage import db
            from fastapi.testclient import TestClient

            copy_file = Path(backend.app.__file__ or "").resolve()
            assert copy_file.is_relative_to(Path(root).resolve()), f"imported {copy_file}, not the copy"
            logging.disable(logging.INFO)  # the backend logs every request and broadcast at INFO
            # No ``with``: the lifespan (battle queue thread) is not needed to take events for a running battle.
            yield TestClient(backend.app.app, raise_server_exceptions=False), db
        finally:
            sys.path.remove(root)


def seed_agents(db: Any, backend_url: str) -> None:
    """The two agents as AgentBeats' store holds them during a battle (registered, locked, ready)."""
    for agent_id, name, is_green in ((GREEN_ID, GREEN_NAME, True), (WHITE_ID, WHITE_NAME, False)):
        register_info: dict[str, Any] = {
            "alias": name,
            "agent_url": f"{backend_url}/agents/{name}",
            "launcher_url": f"{backend_url}/launchers/{name}",
            "is_green": is_green,
        }
        if is_green:
            register_info["participant_requirements"] = [{"role": "blue_agent", "name": WHITE_NAME, "required": True}]
        stats: dict[str, float] = dict.fromkeys(("wins", "losses", "draws", "errors", "total_battles"), 0)
        stats |= dict.fromkeys(("win_rate", "loss_rate", "draw_rate", "error_rate"), 0.0)
        db.create(
            "agents",
            {
                "agent_id": agent_id,
                "register_info": register_info,
                "agent_card": {"name": name},
                "status": "locked",
                "ready": True,
                "elo": {"rating": None if is_green else 1000, "battle_history": [], "stats": stats},
            },
        )


def seed_running_battle(db: Any, battle_id: str) -> None:
    """What AgentBeats' store holds once it has started a battle (agents locked and ready, battle_start sent)."""
    db.create(
        "battles",
        {
            "battle_id": battle_id,
            "green_agent_id": GREEN_ID,
            "opponents": [{"name": WHITE_NAME, "agent_id": WHITE_ID, "role": "blue_agent"}],
            "config": {},
            "state": "running",
            "interact_history": [],
        },
    )


class Recorder:
    """A loopback HTTP server that records every request and answers with the real backend's response."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.posts: list[dict[str, Any]] = []
        self._server = HTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    name.lower(): "<dropped>" if name.lower() in CREDENTIAL_HEADERS else value
                    for name, value in self.headers.items()
                    if name.lower() not in VOLATILE_HEADERS
                }
                answer = recorder.client.request(
                    self.command,
                    self.path,
                    content=raw,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in VOLATILE_HEADERS},
                )
                entry: dict[str, Any] = {
                    "sdk_call": recorder.current_call,
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(sorted(headers.items())),
                    "body": json.loads(raw) if raw else None,
                    "agentbeats_status": answer.status_code,
                }
                if answer.content:
                    entry["agentbeats_response"] = answer.json()
                recorder.posts.append(entry)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_POST = do_PUT = do_GET = _record

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    current_call = ""
    """Which SDK function is being called (set by the driver, stored with each request)."""

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def drive_sdk(recorder: Recorder) -> None:
    """Every SDK function that reports to a battle backend, as a green agent would call them."""
    import agentbeats
    from agentbeats.logging import update_battle_process

    context = agentbeats.BattleContext(battle_id=BATTLE_ID, backend_url=recorder.url, agent_name=GREEN_NAME)
    calls: list[tuple[str, Any]] = [
        (
            "update_battle_process(minimal)",
            lambda: update_battle_process(BATTLE_ID, recorder.url, "Battle begins", reported_by=GREEN_NAME),
        ),
        (
            "update_battle_process(all fields)",
            lambda: update_battle_process(
                BATTLE_ID,
                recorder.url,
                "Attempt 1 of task 0 finished",
                detail={"task": 0, "attempt": 1, "reward": 1.0},
                markdown_content="**Attempt 1**: success",
                terminal_input="ls",
                terminal_output="README.md",
                asciinema_url="https://asciinema.org/a/1",
                reported_by=GREEN_NAME,
            ),
        ),
        (
            "update_battle_process(default reported_by)",
            lambda: update_battle_process(BATTLE_ID, recorder.url, "reported by the SDK's default"),
        ),
        ("record_battle_event", lambda: agentbeats.record_battle_event(context, "Scoring", {"step": "score"})),
        (
            "record_agent_action",
            lambda: agentbeats.record_agent_action(
                context, "called tool get_order", {"tool": "get_order"}, {"order_id": "#W1"}
            ),
        ),
        ("log_ready", lambda: agentbeats.log_ready(context, {"streaming": True})),
        ("log_startup", lambda: agentbeats.log_startup(context, {"k": 2})),
        ("log_error", lambda: agentbeats.log_error(context, "white agent timed out", "timeout")),
        ("log_shutdown", lambda: agentbeats.log_shutdown(context)),
        (
            "record_battle_result",
            lambda: agentbeats.record_battle_result(
                context, "white_agent passed 2 of 2 tasks", WHITE_NAME, {"pass_hat_1": 1.0, "tasks": 2}
            ),
        ),
        (
            "update_battle_process(after the result)",
            lambda: update_battle_process(BATTLE_ID, recorder.url, "late progress", reported_by=GREEN_NAME),
        ),
    ]
    for name, call in calls:
        recorder.current_call = name
        before = len(recorder.posts)
        call()
        if len(recorder.posts) != before + 1:
            raise RuntimeError(f"{name}: expected one request, recorded {len(recorder.posts) - before}")


def post_numeric_variants(recorder: Recorder, sdk_posts: list[dict[str, Any]]) -> None:
    """The SDK's own bodies again, with a Unix-time number as timestamp (the SDK only ever sends ISO text)."""
    import requests

    by_call = {post["sdk_call"]: post for post in sdk_posts}
    for call, kind, number in NUMERIC_TIMESTAMPS:
        recorder.current_call = f"{call} with timestamp {kind} (re-posted by this script, not sent by the SDK)"
        body = {**by_call[call]["body"], "timestamp": number}
        requests.post(f"{recorder.url}/battles/{NUMERIC_BATTLE_ID}", json=body, timeout=10)


def battle_after(db: Any, battle_id: str) -> dict[str, Any]:
    """What the real backend holds for a battle after the posts."""
    battle = db.read("battles", battle_id)
    return {
        "state": battle["state"],
        "result": battle.get("result"),
        "interact_history_length": len(battle["interact_history"]),
    }


def versions() -> dict[str, str]:
    """The versions that produced the recording."""
    found = {"python": platform.python_version()}
    for name in ("agentbeats", "a2a-sdk", "requests", "fastapi"):
        found[name] = importlib.metadata.version(name)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    _require_sdk_venv()
    _isolate_network()
    with real_backend() as (client, db), Recorder(client) as recorder:
        seed_agents(db, recorder.url)
        seed_running_battle(db, BATTLE_ID)
        drive_sdk(recorder)
        sdk_posts, recorder.posts = recorder.posts, []
        seed_running_battle(db, NUMERIC_BATTLE_ID)
        post_numeric_variants(recorder, sdk_posts)
        sdk_after, numeric_after = battle_after(db, BATTLE_ID), battle_after(db, NUMERIC_BATTLE_ID)
    fixture = {
        "format": FORMAT,
        "produced_by": {
            "command": COMMAND,
            "versions": versions(),
            "statuses_from": "the real AgentBeats backend (backend.app of the same agentbeats wheel), in process, "
            "for a battle seeded in state running",
            "battle_id": BATTLE_ID,
            "green_agent": GREEN_NAME,
            "opponent": WHITE_NAME,
        },
        "posts": sdk_posts,
        "agentbeats_battle_after": sdk_after,
        "numeric_timestamp_variants": {
            "note": "NOT sent by the SDK (it only sends ISO text): its bodies re-posted by this script with a "
            "Unix-time number as timestamp, to a second battle of the same real backend",
            "battle_id": NUMERIC_BATTLE_ID,
            "posts": recorder.posts,
            "agentbeats_battle_after": numeric_after,
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    statuses = ", ".join(f"{p['sdk_call']}={p['agentbeats_status']}" for p in [*sdk_posts, *recorder.posts])
    print(f"recorded {len(sdk_posts)} SDK requests and {len(recorder.posts)} numeric variants to {args.output}")
    print(f"AgentBeats statuses: {statuses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
