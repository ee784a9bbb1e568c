"""The bounds outside request bodies proper: hostile agent cards, hostile text in agents' answers, the store's last
line of defence, and the settings and flags of the limits (test_hostile_bodies.py fuzzes the bodies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from battle_backend import BackendSettings
from battle_backend.__main__ import build_parser, settings_from_args
from battle_backend.battles.api_models import ApiError
from battle_backend.battles.json_limits import JsonLimits, check_json_value, parse_json
from battle_backend.store.sqlite.store import SQLiteStore
from tests.battle_backend.conftest import Arena

CARD_BASE: dict[str, Any] = {
    "name": "hostile",
    "description": "d",
    "version": "1.0.0",
    "protocolVersion": "0.3.0",
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


def card_app(body: bytes | None, *, rpc_error_message: str | None = None) -> Starlette:
    """An agent serving ``body`` as its card (None: a valid card pointing at itself); with ``rpc_error_message``
    every JSON-RPC call answers an error whose message is that raw JSON string literal (so it can hold escapes such
    as a lone surrogate)."""

    async def card(request: Request) -> Response:
        if body is None:
            return JSONResponse({**CARD_BASE, "url": str(request.url).split("/.well-known/")[0] + "/"})
        return Response(body, media_type="application/json")

    async def rpc(request: Request) -> Response:
        call = await request.json()
        message = rpc_error_message or '"no"'
        error = f'{{"code": -32603, "message": {message}}}'
        text = f'{{"jsonrpc": "2.0", "id": {json.dumps(call.get("id"))}, "error": {error}}}'
        return Response(text.encode(), media_type="application/json")

    return Starlette(routes=[Route("/.well-known/agent-card.json", card), Route("/", rpc, methods=["POST"])])


@pytest.mark.parametrize(
    ("card", "reason"),
    [
        (b'{"name": "x\\ud800"}', "agent_card.name: the string contains a lone UTF-16 surrogate"),
        (b'{"name": "x", "n": NaN}', "agent_card.n: NaN is not valid JSON"),
        (b'{"name": "x", "deep": ' + b"[" * 2000 + b"]" * 2000 + b"}", "agent_card.deep.0.0"),
        (b'{"name": "x", "big": 1' + b"0" * 5000 + b"}", "agent_card.big: integer with 5001 digits"),
        (b'{"name": "' + b"x" * (1024 * 1024) + b'"}', "larger than 1048576 bytes"),
        (b'{"name": "\xff"}', "not UTF-8"),
    ],
    ids=["surrogate", "nan", "deep", "huge-int", "too-large", "not-utf8"],
)
async def test_a_hostile_agent_card_is_refused_with_the_reason(arena: Arena, card: bytes, reason: str) -> None:
    url = await arena.mount("hostile", card_app(card))
    response = await arena.client.post(
        "/agents", json={"alias": "h", "agent_url": url, "launcher_url": "", "is_green": False}
    )
    assert response.status_code == 400, response.text
    assert reason in response.json()["detail"]
    assert (await arena.client.get("/agents")).status_code == 200


async def test_a_lone_surrogate_in_an_agents_answer_is_replaced_in_the_battle_error(arena: Arena) -> None:
    """battle_info answered with a JSON-RPC error whose message is "bad \\ud800": the battle's error keeps the text
    with U+FFFD, and everything still reads back (SQLite could not have stored the surrogate)."""
    url = await arena.mount("green", card_app(None, rpc_error_message='"bad \\ud800 answer"'))
    registered = await arena.client.post(
        "/agents",
        json={
            "alias": "green",
            "agent_url": url,
            "launcher_url": "",
            "is_green": True,
            "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
        },
    )
    assert registered.status_code == 201, registered.text
    white = await arena.agent("white")
    created = await arena.client.post(
        "/battles",
        json={
            "green_agent_id": registered.json()["agent_id"],
            "opponents": [{"name": "white_agent", "agent_id": white.agent_id}],
        },
    )
    battle = await arena.wait_state(created.json()["battle_id"], "error")
    assert "bad \ufffd answer" in battle["error"]
    for path in ("/battles", f"/ui/battles/{battle['battle_id']}", "/"):
        assert (await arena.client.get(path)).status_code == 200


async def test_the_store_replaces_surrogates_and_refuses_nan(tmp_path: Path) -> None:
    """The last line: whatever slipped past the API, nothing stored can break a later read."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    await store.open()
    try:
        agent = await store.create_agent({"alias": "a\ud800", "is_green": False}, {"name": "\udfff"})
        read_back = await store.get_agent(agent.agent_id)
        assert read_back is not None
        assert read_back.register_info["alias"] == "a\ufffd" and read_back.agent_card == {"name": "\ufffd"}
        with pytest.raises(ValueError):
            await store.create_agent({"alias": "n", "x": float("nan")}, {})
    finally:
        await store.close()


def test_check_json_value_names_the_place_and_measures() -> None:
    limits = JsonLimits(max_depth=4, max_int_digits=5)
    assert check_json_value({"a": [1, "é"]}, limits) == len('{"a":[1,"é"]}'.encode())
    cases: list[tuple[Any, str, list[Any]]] = [
        ({"a": [1, float("inf")]}, "non_finite_number", ["body", "a", 1]),
        ({"a": {"b": 123456}}, "int_too_long", ["body", "a", "b"]),
        ({"a": [[[[1]]]]}, "json_too_deep", ["body", "a", 0, 0, 0]),
        ({"k\ud800": 1}, "string_unicode", ["body", "k\\ud800"]),
        ([object()], "json_value", ["body", 0]),
    ]
    for value, kind, loc in cases:
        with pytest.raises(ApiError) as refused:
            check_json_value(value, limits)
        assert refused.value.status_code == 400
        assert refused.value.detail[0]["type"] == kind and refused.value.detail[0]["loc"] == loc


def test_parse_json_accepts_what_is_fine() -> None:
    limits = JsonLimits()
    text = '{"emoji": "\\ud83d\\ude00", "escaped backslash": "\\\\ud800", "n": -0.0, "big": 1e308, "deep": '
    value = parse_json((text + "[" * 63 + "]" * 63 + "}").encode(), limits)
    assert value["emoji"] == "\U0001f600" and value["escaped backslash"] == "\\ud800"
    assert parse_json(b"\xef\xbb\xbf[1]", limits) == [1]  # a UTF-8 BOM is ignored


def test_limits_are_settings_and_flags() -> None:
    args = build_parser().parse_args(
        [
            "--max-request-bytes",
            "4096",
            "--max-event-bytes",
            "8192",
            "--max-result-bytes",
            "65536",
            "--max-json-depth",
            "16",
        ]
    )
    settings = settings_from_args(args)
    assert (settings.max_request_bytes, settings.max_event_bytes, settings.max_result_bytes) == (4096, 8192, 65536)
    assert settings.max_json_depth == 16
    defaults = BackendSettings()
    assert (defaults.max_request_bytes, defaults.max_event_bytes, defaults.max_result_bytes) == (
        1024 * 1024,
        256 * 1024,
        8 * 1024 * 1024,
    )
    assert defaults.max_json_depth == 64 and defaults.max_json_int_digits == 64
    with pytest.raises(ValidationError, match="max_result_bytes must be at least max_event_bytes"):
        BackendSettings(max_event_bytes=1 << 20, max_result_bytes=1 << 19)
