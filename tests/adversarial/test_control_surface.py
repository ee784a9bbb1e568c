"""The green agent's control surface belongs to its operator; what comes from the network is validated.

* ``--operator-token`` (or ARENA_OPERATOR_TOKEN): A2A assessment requests, tasks/get, tasks/cancel, the MCP control
  tools at /mcp/, /run and /evaluations need ``Authorization: Bearer <token>``; without it they are refused (A2A: a
  JSON-RPC error or a failed task; HTTP: 401). AgentBeats ``battle_info`` / ``battle_start`` stay open. The
  operator's tasks/cancel cancels the battle.
* The white agent under test, which knows the green agent's URL, cannot cancel or read its own battle.
* A remote config may not set user_simulator.base_url / api_key_env / model (refused, naming the field).
* battle_id values that would leave the runs directory, overlong ids and reused ids are refused.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import (
    GreenAgent,
    McpSession,
    assert_completed,
    assert_no_infrastructure_errors,
    failure_of,
    green_accepts_token_flag,
    green_help_text,
    jsonrpc,
    new_battle_id,
    rpc_refused,
    run_battle,
    tool_structured,
    user_message,
)
from tests.adversarial.hostile_agent import HostileAgent, control_probe, malformed, sleep_then

WRONG_TOKEN = "wrong-token-" + uuid.uuid4().hex


def _entries(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()} if path.is_dir() else set()


async def _assert_never_contacted(hostile: HostileAgent, seconds: float = 1.5) -> None:
    await asyncio.sleep(seconds)
    assert not hostile.contacted, f"the white agent was contacted: {[r.method for r in hostile.records]}"


# ---------------------------------------------------------------------------------------------------------- token


@pytest.mark.timeout(180)
def test_green_agent_accepts_the_operator_token_flag() -> None:
    assert green_accepts_token_flag(), (
        "python -m green_agent --help does not list --operator-token:\n" + green_help_text()[-1500:]
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("token", ["none", "wrong"])
async def test_assessment_request_without_the_operator_token_is_refused(
    green: GreenAgent, hostile: HostileAgent, token: str
) -> None:
    battle_id = new_battle_id("noauth")
    before = _entries(green.runs_dir)
    outcome = await run_battle(
        green,
        hostile.served_url,
        battle_config(),
        battle_id=battle_id,
        token=None if token == "none" else WRONG_TOKEN,
        timeout_s=60,
        watch_health=False,
    )
    print(f"\n[no token: {token}] {outcome.describe()}")
    assert not outcome.battle_started, f"a battle started without the operator token: {outcome.describe()}"
    await _assert_never_contacted(hostile)
    assert _entries(green.runs_dir) == before, "a refused request must not create a run directory"
    assert outcome.refused, (
        "an assessment request without the operator token must be refused with a JSON-RPC error or a failed task "
        f"(HTTP 401/403 also counts); got {outcome.describe()}"
        + (" -- a plain Message is not one of the specified refusal forms" if outcome.state == "message" else "")
    )


@pytest.mark.timeout(180)
async def test_task_get_and_cancel_need_the_token_and_the_operators_cancel_stops_the_battle(
    green: GreenAgent, hostile: HostileAgent
) -> None:
    hostile.set_behaviour(sleep_then(90.0))
    battle_id = new_battle_id("cancel")
    config = battle_config(turn_timeout_s=80.0, attempt_timeout_s=120.0)
    seen: dict[str, str] = {}

    def remember(task_id: str) -> None:
        seen.setdefault("task", task_id)

    battle = asyncio.create_task(
        run_battle(
            green,
            hostile.served_url,
            config,
            battle_id=battle_id,
            timeout_s=150,
            watch_health=False,
            on_task_id=remember,
        )
    )
    try:
        deadline = time.monotonic() + 60
        while len(hostile.message_arrivals()) < 2 and time.monotonic() < deadline:
            assert not battle.done(), battle.result().describe()
            await asyncio.sleep(0.05)
        assert len(hostile.message_arrivals()) == 2, "both attempts should be waiting on the white agent"
        assert "task" in seen, "the assessment stream never told its task id"
        task_id = seen["task"]

        refusals: dict[str, tuple[int, Any]] = {}
        for name, method, version in (
            ("tasks/get", "tasks/get", None),
            ("tasks/cancel", "tasks/cancel", None),
            ("GetTask 1.0", "GetTask", "1.0"),
            ("CancelTask 1.0", "CancelTask", "1.0"),
        ):
            for label, token in (("no token", None), ("wrong token", WRONG_TOKEN)):
                refusals[f"{name} ({label})"] = await jsonrpc(
                    green, method, {"id": task_id}, token=token, version=version
                )
        allowed = {
            name: (status, json.dumps(body)[:300])
            for name, (status, body) in refusals.items()
            if not rpc_refused(status, body)
        }
        print(f"\n[task ops without the token] {len(refusals) - len(allowed)}/{len(refusals)} refused")
        assert not allowed, f"task operations without the operator token must be refused: {allowed}"
        assert await _battle_state(green, battle_id) == "running", "the battle must still run"
        assert not battle.done()

        status, body = await jsonrpc(green, "tasks/get", {"id": task_id}, token=True)
        assert not rpc_refused(status, body), f"the operator may read the task: {status} {body}"
        status, body = await jsonrpc(green, "tasks/cancel", {"id": task_id}, token=True)
        assert not rpc_refused(status, body), f"the operator may cancel the task: {status} {body}"
        deadline = time.monotonic() + 15
        while (state := await _battle_state(green, battle_id)) == "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert state == "cancelled", f"the operator's tasks/cancel must cancel the battle (state {state})"
        outcome = await asyncio.wait_for(battle, 30)
        assert outcome.state == "canceled", outcome.describe()
    finally:
        if not battle.done():
            battle.cancel()
            await asyncio.gather(battle, return_exceptions=True)


async def _battle_state(green: GreenAgent, battle_id: str) -> str:
    """The battle's state via the MCP control tool get_battle, as the operator (with the token)."""
    async with McpSession(green, token=True) as mcp:
        status, body = await mcp.initialize()
        assert status == 200, f"the operator's MCP session must open: {status} {body}"
        status, body = await mcp.call_tool("get_battle", {"battle_id": battle_id})
        return str(tool_structured(body)["state"])


@pytest.mark.timeout(120)
async def test_mcp_run_and_evaluations_need_the_token(green: GreenAgent) -> None:
    answers: dict[str, int] = {}
    for label, token in (("no token", None), ("wrong token", WRONG_TOKEN)):
        async with McpSession(green, token=token) as mcp:
            status, _body = await mcp.initialize()
            answers[f"MCP initialize ({label})"] = status
            status, _body = await mcp.call_tool("list_domains", {})
            answers[f"MCP tools/call without a session ({label})"] = status
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(timeout=httpx.Timeout(15.0), trust_env=False, headers=headers) as http:
            answers[f"GET /evaluations/ ({label})"] = (await http.get(green.url + "/evaluations/")).status_code
            answers[f"GET /evaluations/config ({label})"] = (
                await http.get(green.url + "/evaluations/config")
            ).status_code
            answers[f"POST /run ({label})"] = (await http.post(green.url + "/run", json={})).status_code
            answers[f"POST /evaluations/run ({label})"] = (await http.post(green.url + "/evaluations/run")).status_code
    print(f"\n[control surface without the token] {answers}")
    assert all(status == 401 for status in answers.values()), f"every one must be HTTP 401: {answers}"

    # The same surface with the token works (so the 401s above are about the token, not broken endpoints).
    async with McpSession(green, token=True) as mcp:
        status, body = await mcp.initialize()
        assert status == 200, (status, body)
        status, body = await mcp.call_tool("list_domains", {})
        assert {d["name"] for d in tool_structured(body)["domains"]} >= {"mock", "retail"}
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0), trust_env=False, headers=green.auth) as http:
        assert (await http.get(green.url + "/evaluations/config")).status_code == 200


@pytest.mark.timeout(180)
async def test_agentbeats_battle_messages_stay_open_without_the_token(green: GreenAgent, hostile: HostileAgent) -> None:
    battle_id = new_battle_id("agentbeats")
    info = {"type": "battle_info", "battle_id": battle_id, "agent_name": "arena-green", "agent_id": "g"}
    status, body = await jsonrpc(green, "message/send", {"message": user_message(json.dumps(info))})
    print(f"\n[battle_info without the token] HTTP {status}: {json.dumps(body)[:300]}")
    assert not rpc_refused(status, body) and body["result"]["kind"] == "message", body
    assert "battle_info" in json.dumps(body["result"]["parts"])

    hostile.set_behaviour(malformed())
    start = {
        "type": "battle_start",
        "battle_id": battle_id,
        "green_battle_context": {"task_config": json.dumps(battle_config())},
        "opponent_infos": [{"name": "white_agent", "agent_url": hostile.served_url}],
    }
    status, body = await jsonrpc(green, "message/send", {"message": user_message(json.dumps(start))})
    print(f"[battle_start without the token] HTTP {status}: {json.dumps(body)[:300]}")
    assert not rpc_refused(status, body) and body["result"]["kind"] == "message", body
    text = json.dumps(body["result"]["parts"])
    assert "accepted" in text and "refused" not in text, text
    deadline = time.monotonic() + 60
    while len({t.context_id for t in hostile.message_arrivals()}) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert len({t.context_id for t in hostile.message_arrivals()}) == 2, "the AgentBeats battle must run its attempts"
    deadline = time.monotonic() + 60
    while not (green.run_dir(battle_id) / "summary.json").is_file() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    summary = json.loads((green.run_dir(battle_id) / "summary.json").read_text(encoding="utf-8"))
    assert len(summary["attempts"]) >= 2
    assert {failure_of(a)[:2] for a in summary["attempts"]} == {("format_error", "white_agent")}, summary["attempts"]


# ------------------------------------------------------------------------------------------------ the agent under test


@pytest.mark.timeout(240)
async def test_the_agent_under_test_cannot_cancel_or_read_its_battle(green: GreenAgent, hostile: HostileAgent) -> None:
    """The hostile agent, given its battle's id and even the assessment's A2A task id, tries tasks/get,
    tasks/cancel, a new assessment request, the MCP control tools, /evaluations and /run without the token; all
    are refused and its battle ends normally with a result."""
    battle_id = new_battle_id("probe")
    before = _entries(green.runs_dir)
    hostile.set_behaviour(control_probe(green.url))
    hostile.shared["battle_id"] = battle_id

    def leak(task_id: str) -> None:
        hostile.shared["task_id"] = task_id

    outcome = await run_battle(
        green,
        hostile.served_url,
        battle_config(turn_timeout_s=60.0),
        battle_id=battle_id,
        on_task_id=leak,
        timeout_s=180,
    )
    deadline = time.monotonic() + 60
    while hostile.contacted and not hostile.shared.get("probes_finished") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    print("\n[control probes by the agent under test]")
    for probe in hostile.probes:
        print(
            f"  {'refused' if probe['refused'] else 'ALLOWED'}  {probe['probe']}: HTTP {probe['status']} "
            f"{probe['body'][:160]}"
        )
    assert hostile.probes, "the hostile agent never probed (its first turn did not arrive)"
    names = {p["probe"] for p in hostile.probes}
    assert {"a2a tasks/get (0.3)", "a2a tasks/cancel (0.3)", "mcp initialize", "POST /run"} <= names, names
    attempts = assert_completed(outcome, green, attempts=2)
    assert_no_infrastructure_errors(attempts)
    assert [failure_of(a)[:2] for a in attempts] == [("format_error", "white_agent")] * 2
    assert _entries(green.runs_dir) - before == {battle_id}, "no other battle may have started"
    allowed = [
        f"{p['probe']} (HTTP {p['status']}: {p['body'][:120]})"
        + (
            " -- a plain Message is not one of the specified refusal forms (JSON-RPC error, failed task, 401)"
            if '"kind": "message"' in p["body"]
            else ""
        )
        for p in hostile.probes
        if not p["refused"]
    ]
    assert not allowed, "the agent under test reached the control surface:\n" + "\n".join(allowed)


# ------------------------------------------------------------------------------------------------------- remote config


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("field", "config_extra"),
    [
        ("base_url", {"user_simulator": {"kind": "scripted", "base_url": "http://127.0.0.1:9/v1"}}),
        ("api_key_env", {"user_simulator": {"kind": "scripted", "api_key_env": "HOME"}}),
        ("model", {"user_simulator": {"kind": "scripted", "model": "attacker-chosen-model"}}),
        (
            "base_url",
            {
                "pass_k_config_nested": True,
                "user_simulator": {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "PATH"},
            },
        ),
    ],
    ids=["base_url", "api_key_env", "model", "nested_llm_base_url"],
)
async def test_remote_config_cannot_set_operator_only_user_simulator_fields(
    green: GreenAgent, hostile: HostileAgent, field: str, config_extra: dict[str, Any]
) -> None:
    extra = dict(config_extra)
    if extra.pop("pass_k_config_nested", False):
        config = {"pass_k_config": battle_config(), **extra}
    else:
        config = {**battle_config(), **extra}
    battle_id = new_battle_id("remotecfg")
    outcome = await run_battle(green, hostile.served_url, config, battle_id=battle_id, timeout_s=60, watch_health=False)
    print(f"\n[remote user_simulator.{field}] {outcome.describe()}")
    assert outcome.refused, f"a remote config setting user_simulator.{field} must be refused: {outcome.describe()}"
    assert field in (outcome.error or ""), f"the error must name the field {field}: {outcome.error!r}"
    await _assert_never_contacted(hostile)
    assert not green.run_dir(battle_id).exists()


# ---------------------------------------------------------------------------------------------------------- battle ids


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "overlong", "slash"])
async def test_battle_id_that_would_escape_or_abuse_the_runs_dir_is_refused(
    green: GreenAgent, hostile: HostileAgent, kind: str, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex[:10]
    outside_root = green.runs_dir.parent  # runs/ is <root>/shared-N/runs: "../x" lands in <root>/shared-N/x
    absolute_target = tmp_path / f"abs-{marker}"
    battle_id = {
        "dotdot": f"../escape-{marker}",
        "absolute": str(absolute_target),
        "overlong": "a" * 300,
        "slash": f"sub-{marker}/dir",
    }[kind]
    before_outside = _tree(outside_root)
    outcome = await run_battle(
        green, hostile.served_url, battle_config(), battle_id=battle_id, timeout_s=60, watch_health=False
    )
    print(f"\n[battle_id {kind}] {outcome.describe()}")
    assert outcome.refused, f"battle_id {battle_id[:80]!r} must be refused: {outcome.describe()}"
    assert "battle_id" in (outcome.error or ""), f"the error must name battle_id: {outcome.error!r}"
    await _assert_never_contacted(hostile)
    assert not (outside_root / f"escape-{marker}").exists()
    assert not absolute_target.exists()
    created = _tree(outside_root) - before_outside
    assert not created, f"a refused battle id created files: {sorted(created)[:10]}"


@pytest.mark.timeout(180)
async def test_reused_battle_id_is_refused(green: GreenAgent, hostile: HostileAgent) -> None:
    battle_id = new_battle_id("reuse")
    first = await run_battle(green, hostile.served_url, battle_config(), battle_id=battle_id)
    assert_completed(first, green, attempts=2)
    summary_path = green.run_dir(battle_id) / "summary.json"
    summary_before = summary_path.read_bytes()
    contexts_before = {t.context_id for t in hostile.message_arrivals()}
    second = await run_battle(
        green, hostile.served_url, battle_config(), battle_id=battle_id, timeout_s=60, watch_health=False
    )
    print(f"\n[reused battle_id] {second.describe()}")
    assert second.refused, f"a reused battle_id must be refused: {second.describe()}"
    assert "battle_id" in (second.error or ""), second.error
    await asyncio.sleep(1.0)
    assert {t.context_id for t in hostile.message_arrivals()} == contexts_before, "the second battle must not run"
    assert summary_path.read_bytes() == summary_before, "the first battle's result must stay as it was"


@pytest.mark.timeout(120)
async def test_battle_id_of_an_existing_run_directory_is_refused(green: GreenAgent, hostile: HostileAgent) -> None:
    """A run directory left by an earlier green agent process (same --runs-dir) is a reused id too."""
    battle_id = new_battle_id("ondisk")
    old = green.run_dir(battle_id)
    old.mkdir(parents=True)
    (old / "summary.json").write_text('{"from": "an earlier run"}', encoding="utf-8")
    outcome = await run_battle(
        green, hostile.served_url, battle_config(), battle_id=battle_id, timeout_s=60, watch_health=False
    )
    print(f"\n[battle_id of an existing run dir] {outcome.describe()}")
    assert outcome.refused, f"an id whose run directory exists must be refused: {outcome.describe()}"
    await _assert_never_contacted(hostile)
    assert (old / "summary.json").read_text(encoding="utf-8") == '{"from": "an earlier run"}'
