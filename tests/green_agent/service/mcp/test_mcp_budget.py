"""MCP ``start_battle`` with a budget (issue 27): the config's ``max_wall_s`` stops the battle like an ``arena run``
flag does, and the results say so (``budget_stop``, the PARTIAL line)."""

from __future__ import annotations

import pytest

from tests.green_agent.service.mcp.conftest import GreenServer, control, structured, white_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_start_battle_with_a_spent_wall_clock_budget_stops_after_the_first_attempt(green: GreenServer) -> None:
    # one attempt at a time and 1 ms: certainly spent once the first attempt has run
    config = {"domain": "mock", "split": "base", "task_id": [0, 1], "k": 2, "calibration": True}
    config |= {"concurrency": 1, "max_wall_s": 0.001}
    async with white_agent("replay") as white, control(green) as client:
        started = structured(
            await client.call_tool(
                "start_battle", {"white_agent_url": white, "config": config, "wait": True, "battle_id": "mcp-wall"}
            )
        )
    assert started["state"] == "finished", started
    results = started["results"]
    assert len(results["attempts"]) == 1
    stop = results["budget_stop"]
    assert (stop["reason"], stop["limit"], stop["attempts_done"], stop["attempts_total"]) == ("max_wall_s", 0.001, 1, 4)
    assert "> PARTIAL: stopped by budget: max_wall_s 0.001 s reached" in results["markdown"]
