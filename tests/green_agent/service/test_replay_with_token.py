"""A restarted green agent delivers the result its predecessor left in the outbox, with the battle token kept in
the run directory (green_agent/service/backend_target.py): a result always needs the token, and before the token
was kept, a replay posted without one, so the backend refused the result and the battle ended as a draw by timeout.
The token goes only to the backend that issued it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from green_agent.service.a2a_server import create_app
from green_agent.service.backend_client import BackendReporter
from green_agent.service.backend_target import BackendTarget, write_target
from green_agent.service.outbox import OUTBOX_FILE
from launcher.ports import free_port, loopback_url
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.launcher.launcher_test_helpers import serve
from tests.support.servers import serve_app_factory

TOKEN = "battle-token-kept-for-the-replay"


async def _leave_a_result_undelivered(run_dir: Path, backend_url: str) -> None:
    """What a green agent stopped before its backend answered leaves behind: the result, pending in the outbox."""
    write_target(run_dir, BackendTarget(backend_url, TOKEN, "white_agent"))
    reporter = BackendReporter(backend_url, run_dir.name, token=TOKEN)
    await reporter.open_outbox(run_dir / OUTBOX_FILE)
    reporter.start()
    reporter.result("battle over", winner="white_agent", detail={"attempts": []})
    await reporter.aclose(timeout=0)  # the backend is down: nothing delivered
    assert reporter.undelivered()


async def test_a_restarted_green_agent_replays_the_undelivered_result_with_the_stored_token(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    port = free_port()
    backend_url = loopback_url(port)
    await _leave_a_result_undelivered(runs / "replayed", backend_url)
    record = Recorded()
    async with (
        serve(make_recording_backend(record), port=port),
        serve_app_factory(lambda url: create_app(url, runs_dir=runs), startup_timeout_s=60),
    ):
        await asyncio.wait_for(record.result_seen.wait(), timeout=60)
    (headers,) = record.headers
    assert headers.get("x-battle-token") == TOKEN
    assert record.results[0]["battle_id"] == "replayed"


async def test_the_stored_token_is_not_sent_to_another_backend(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    port = free_port()
    await _leave_a_result_undelivered(runs / "moved", loopback_url(port))
    write_target(runs / "moved", BackendTarget("http://127.0.0.1:9", TOKEN))  # issued by another backend
    record = Recorded()
    async with (
        serve(make_recording_backend(record), port=port),
        serve_app_factory(lambda url: create_app(url, runs_dir=runs), startup_timeout_s=60),
    ):
        await asyncio.wait_for(record.result_seen.wait(), timeout=60)
    (headers,) = record.headers
    assert "x-battle-token" not in headers and "authorization" not in headers
