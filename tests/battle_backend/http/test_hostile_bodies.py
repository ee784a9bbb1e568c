"""Hostile request bodies against every body-taking endpoint of a live backend: no answer may be a 5xx, nothing
hostile may reach the store, and the server must keep serving.

Endpoints: ``POST /agents``, ``PUT /agents/{id}``, ``POST /agents/check_launcher``, ``POST /battles``,
``POST /battles/{id}`` (progress and results), the web forms ``POST /ui/agents`` and ``POST /ui/battles``, and the
MCP transports ``POST /mcp/`` (raw, and tools/call inside a real session) and ``POST /messages/``.

Bodies: lone surrogates (escaped, and UTF-8-encoded), nesting up to 100 000 deep, 5000-digit integers,
NaN/Infinity literals and overflowing floats, wrong types for every field, empty bodies, non-JSON, invalid UTF-8,
and bodies over the caps with and without Content-Length (chunked, from an async generator).

Bounded and deterministic: hypothesis runs with ``derandomize=True``, a fixed ``max_examples`` and no example
database; the hand-picked cases are fixed lists. The backend (uvicorn, real HTTP) runs in a thread of its own for
the whole module, so hypothesis' synchronous tests and the async chunked-upload tests share it; its caps are
lowered so that "too large" is cheap to reach. ``pytest -s`` prints the request count and the status histogram.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount

from battle_backend import BackendSettings, create_app
from battle_backend.battles.json_limits import JsonLimits, parse_json
from battle_backend.context import BackendContext
from battle_backend.http.body import BodyLimitMiddleware, read_body
from battle_backend.testing import FakeA2AAgent
from tests.battle_backend.conftest import FAST_SETTINGS
from tests.battle_backend.http.test_api_agents import closed_port_url
from tests.support.servers import serve_app

T = TypeVar("T")

CAPS: dict[str, Any] = {
    "max_request_bytes": 32 * 1024,
    "max_event_bytes": 8 * 1024,
    "max_result_bytes": 64 * 1024,
    "max_json_depth": 64,
    "max_json_int_digits": 64,
}
FUZZ_SETTINGS: dict[str, Any] = {
    **FAST_SETTINGS,
    **CAPS,
    "http_timeout_s": 2.0,
    "a2a_timeout_s": 2.0,
    "battle_timeout_default_s": 3600.0,
}
EXAMPLES = 120
"""Hypothesis examples per JSON endpoint (and for the MCP tools)."""
FORM_EXAMPLES = 60
"""Per form: every refused form re-renders the whole battle list, so these cost more."""


def hypothesis_settings(max_examples: int) -> settings:
    """Deterministic (derandomized, no example database), bounded, and without a per-example deadline."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


HYPOTHESIS = hypothesis_settings(EXAMPLES)
JSON_HEADERS = {"content-type": "application/json"}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


# --- the live backend -----------------------------------------------------------------------------------------
@dataclass
class Target:
    """The backend under attack, its fake agents, and the tally of every answer."""

    url: str
    loop: asyncio.AbstractEventLoop
    app: Starlette
    http: httpx.Client
    agent_url: str = ""
    green_id: str = ""
    white_id: str = ""
    events_green_id: str = ""
    events_white_id: str = ""
    battle_id: str = ""
    statuses: Counter[int] = field(default_factory=Counter)
    per_endpoint: Counter[str] = field(default_factory=Counter)

    @property
    def ctx(self) -> BackendContext:
        return self.app.state.backend  # type: ignore[no-any-return]

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the server's loop (store access)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def record(self, endpoint: str, response: httpx.Response) -> httpx.Response:
        """Count the answer; a 5xx fails the test with what was answered."""
        self.statuses[response.status_code] += 1
        self.per_endpoint[endpoint] += 1
        assert response.status_code < 500, f"{endpoint}: HTTP {response.status_code}: {response.text[:800]}"
        return response

    def send(self, endpoint: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        if path.startswith("/battles/") and path.count("/") == 2:
            headers = {**headers, "X-Battle-Token": BATTLE_TOKEN}
        return self.record(endpoint, self.http.request(method, path, content=body, headers=headers))

    def open_battle(self) -> str:
        """A battle that still accepts events (a fuzzed result may have finished the previous one)."""
        if self.battle_id:
            battle = self.call(self.ctx.store.get_battle(self.battle_id, include_events=False))
            if battle is not None and not battle.state.is_terminal:
                return self.battle_id
        opponents = [{"name": "white_agent", "agent_id": self.events_white_id, "role": "blue_agent"}]
        # Started with a token, as the flow does: results are accepted only with it, so the fuzzed results carry it
        # and reach the parsing and storing they are meant to attack. The app's own scheduler may take a new queued
        # battle first (it wakes when a fuzzed result finishes the previous one) and start it with a token of its
        # own; such a battle is left to it and another one is made.
        outcomes = []
        for _ in range(10):
            battle = self.call(self.ctx.store.create_battle(self.events_green_id, opponents, {}, None))
            started = self.call(self.ctx.store.start_battle(battle.battle_id, BATTLE_TOKEN))
            outcomes.append(started.value)
            if started.value == "started":
                self.battle_id = battle.battle_id
                return self.battle_id
        raise AssertionError(f"could not start a battle with the test's token: {outcomes}")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    db_path: Path = tmp_path_factory.mktemp("hostile") / "backend.sqlite3"
    app = create_app(BackendSettings(db_path=db_path, **FUZZ_SETTINGS))
    green, white = FakeA2AAgent(name="green"), FakeA2AAgent(name="white")
    fakes = Starlette(routes=[Mount("/green", app=green.app), Mount("/white", app=white.app)])
    started = threading.Event()
    info: dict[str, Any] = {}

    async def main() -> None:
        stop = asyncio.Event()
        async with serve_app(fakes) as fakes_url, serve_app(app) as url:
            info.update(url=url, fakes_url=fakes_url, loop=asyncio.get_running_loop(), stop=stop)
            started.set()
            await stop.wait()
        await green.aclose()
        await white.aclose()

    def run() -> None:
        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=run, name="hostile-backend", daemon=True)
    thread.start()
    assert started.wait(60) and "url" in info, "the backend did not start"
    with httpx.Client(base_url=info["url"], timeout=60.0, trust_env=False) as http:
        tgt = Target(url=info["url"], loop=info["loop"], app=app, http=http)
        tgt.agent_url = info["fakes_url"] + "/white"
        registered = http.post(
            "/agents",
            json={
                "alias": "green",
                "agent_url": info["fakes_url"] + "/green",
                "launcher_url": "",
                "is_green": True,
                "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
            },
        )
        assert registered.status_code == 201, registered.text
        tgt.green_id = registered.json()["agent_id"]
        registered = http.post(
            "/agents", json={"alias": "white", "agent_url": tgt.agent_url, "launcher_url": "", "is_green": False}
        )
        assert registered.status_code == 201, registered.text
        tgt.white_id = registered.json()["agent_id"]
        # A pair of its own for the battles that take fuzzed events (started in the store, never by the scheduler,
        # so the battles the fuzzed POST /battles creates cannot keep them busy).
        for role, is_green in (("events_green", True), ("events_white", False)):
            body: dict[str, Any] = {"alias": role, "agent_url": tgt.agent_url, "launcher_url": "", "is_green": is_green}
            if is_green:
                body["participant_requirements"] = [{"role": "blue_agent", "name": "white_agent", "required": True}]
            registered = http.post("/agents", json=body)
            assert registered.status_code == 201, registered.text
            setattr(tgt, f"{role}_id", registered.json()["agent_id"])
        try:
            yield tgt
        finally:
            total = sum(tgt.statuses.values())
            print(
                f"\nhostile bodies: {total} requests, status histogram {dict(sorted(tgt.statuses.items()))}, "
                f"per endpoint {dict(sorted(tgt.per_endpoint.items()))}"
            )
            info["loop"].call_soon_threadsafe(info["stop"].set)
            thread.join(30)


# --- the endpoints and their valid bodies -----------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: Callable[[Target], str]
    template: Callable[[Target], dict[str, Any]]


JSON_ENDPOINTS = [
    Endpoint(
        "register",
        "POST",
        lambda t: "/agents",
        lambda t: {
            "alias": "fuzz",
            "agent_url": t.agent_url,
            "launcher_url": "",
            "is_green": True,
            "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
            "battle_timeout": 30,
        },
    ),
    Endpoint("ready", "PUT", lambda t: f"/agents/{t.white_id}", lambda t: {"ready": True}),
    Endpoint(
        "check_launcher", "POST", lambda t: "/agents/check_launcher", lambda t: {"launcher_url": closed_port_url()}
    ),
    Endpoint(
        "create_battle",
        "POST",
        lambda t: "/battles",
        lambda t: {
            "green_agent_id": t.green_id,
            "opponents": [{"name": "white_agent", "agent_id": t.white_id, "role": "blue_agent"}],
            "config": {"tasks": [1, 2], "seed": 7},
        },
    ),
    Endpoint(
        "progress",
        "POST",
        lambda t: f"/battles/{t.open_battle()}",
        lambda t: {
            "is_result": False,
            "message": "turn",
            "reported_by": "green_agent",
            "timestamp": "2026-11-22T00:00:00Z",
            "detail": {"step": 1, "scores": [0.5, 1]},
            "markdown_content": "**ok**",
        },
    ),
    Endpoint(
        "result",
        "POST",
        lambda t: f"/battles/{t.open_battle()}",
        lambda t: {
            "is_result": True,
            "message": "done",
            "winner": "white_agent",
            "reported_by": "green_agent",
            "detail": {"attempts": [{"outcome": "pass"}], "summary": {"macro": {}}},
        },
    ),
]
BATTLE_TOKEN = "fuzz-battle-token-0123456789"

FORM_ENDPOINTS = [
    Endpoint(
        "form_register",
        "POST",
        lambda t: "/ui/agents",
        lambda t: {
            "alias": "form",
            "agent_url": t.agent_url,
            "launcher_url": "",
            "is_green": "true",
            "participant_requirements": "white_agent blue_agent required",
            "battle_timeout": "30",
        },
    ),
    Endpoint(
        "form_battle",
        "POST",
        lambda t: "/ui/battles",
        lambda t: {
            "green_agent_id": t.green_id,
            "opponent_name_0": "white_agent",
            "opponent_agent_0": t.white_id,
            "config": '{"seed": 1}',
        },
    ),
]

# --- hand-picked hostile pieces ----------------------------------------------------------------------------------
DEEP = "[" * 1000 + "]" * 1000
RAW_VALUES = [
    '"\\ud800"',  # lone high surrogate
    '"\\udfff"',  # lone low surrogate
    '"a\\udc00b\\ud83d"',  # reversed pair
    '"\\ud83d\\ude00"',  # a valid pair (an emoji): must be accepted where a string is
    "1" + "0" * 5000,  # 5001 digits: Python's json refuses to build it
    "-" + "9" * 4400,
    "1" + "0" * 64,  # 65 digits: over max_json_int_digits
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e400",
    DEEP,
    '{"a":' * 1000 + "1" + "}" * 1000,
    "[" * 65 + "]" * 65,  # just over max_json_depth
    '"\\u0000"',
    "null",
    "true",
    "0",
    "-0.0",
    "1.5",
    '""',
    "[]",
    "{}",
    '"x"',
    '"' + "a" * 40_000 + '"',  # over max_request_bytes and max_event_bytes
]
RAW_BODIES: list[bytes] = [
    b"",
    b" ",
    b"not json",
    b"{",
    b"}",
    b"[1,2",
    b'{"a":1,}',
    b"null",
    b"[]",
    b"1",
    b'"just a string"',
    b"NaN",
    b"\xff\xfe{\x00}\x00",  # UTF-16 with a BOM
    b"\xef\xbb\xbf{}",  # UTF-8 BOM
    b'{"message": "\xff"}',  # invalid UTF-8 inside a string
    b'{"message": "\xed\xa0\x80"}',  # a surrogate encoded in UTF-8 (invalid UTF-8)
    b'{"message": "\xc0\xaf"}',  # overlong encoding
    b'{"\xed\xb0\x80": 1}',
    DEEP.encode(),
    ("[" * 100_000 + "]" * 100_000).encode(),
    ("{" * 50_000).encode(),
    b'{"a": ' + b"1" * 5000 + b"}",
    b'{"a": NaN}',
    b'{"a": -Infinity}',
    b'{"a": "\\ud800"}',
    b'{"\\ud800": "key"}',
    b"\x00" * 64,
]
WRONG_TYPES: list[Any] = [None, True, 0, -1, 1.5, "", "x", "\ud800", [], {}, [None], {"": None}, 10**70]

# --- hypothesis strategies ----------------------------------------------------------------------------------------
SURROGATES = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
TEXT = st.one_of(
    st.text(max_size=20),
    SURROGATES,
    st.tuples(st.text(max_size=4), SURROGATES, st.text(max_size=4)).map("".join),
    st.sampled_from(["", "\x00", "<script>alert(1)</script>", "javascript:alert(1)", "http://", "\u202e", "😀"]),
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**90), max_value=10**90),
    st.floats(),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -0.0]),
)
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
VALUES = st.recursive(
    LEAVES, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TEXT, kids, max_size=4), max_leaves=12
)
PLACEHOLDER = "@@RAW{}@@"


def dumps(value: Any) -> str:
    """JSON text as a careless client writes it: NaN/Infinity literals, lone surrogates as \\u escapes."""
    return json.dumps(value, allow_nan=True, ensure_ascii=True)


@st.composite
def json_bodies(draw: st.DrawFn, template: dict[str, Any]) -> bytes:
    """A body built from ``template``: fields kept, dropped, replaced by any value or a raw hostile token;
    or a whole arbitrary value; or arbitrary bytes; sometimes corrupted after encoding."""
    kind = draw(st.sampled_from(["template", "template", "template", "value", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "value":
        return dumps(draw(VALUES)).encode()
    body: dict[str, Any] = {}
    raws: list[str] = []
    for key, valid in template.items():
        action = draw(st.sampled_from(["keep", "keep", "drop", "value", "raw"]))
        if action == "keep":
            body[key] = valid
        elif action == "value":
            body[key] = draw(VALUES)
        elif action == "raw":
            body[key] = PLACEHOLDER.format(len(raws))
            raws.append(draw(st.sampled_from(RAW_VALUES)))
    body.update(draw(st.dictionaries(TEXT, VALUES, max_size=2)))
    text = dumps(body)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(PLACEHOLDER.format(index)), raw)
    data = text.encode()
    corruption = draw(st.sampled_from(["none", "none", "none", "truncate", "invalid_utf8"]))
    if corruption == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif corruption == "invalid_utf8":
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc3", b"\x80"])) + data[cut:]
    return data


FORM_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "x" * 5000, "white_agent red_agent maybe", "-1", "nan", "inf", "1e999", DEEP]),
    st.sampled_from(RAW_VALUES),
)


@st.composite
def form_bodies(draw: st.DrawFn, template: dict[str, str]) -> tuple[bytes, str]:
    """(body, content type): the form with fields kept, dropped or replaced; or raw bytes as urlencoded or
    multipart."""
    kind = draw(st.sampled_from(["form", "form", "form", "bytes", "multipart"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300)), "application/x-www-form-urlencoded"
    fields: dict[str, str] = {}
    for key, valid in template.items():
        action = draw(st.sampled_from(["keep", "keep", "drop", "replace"]))
        if action == "keep":
            fields[key] = valid
        elif action == "replace":
            fields[key] = draw(FORM_TEXT)
    if "config" in template and draw(st.booleans()):
        fields["config"] = dumps(draw(VALUES)) if draw(st.booleans()) else draw(st.sampled_from(RAW_VALUES))
    if kind == "multipart":
        boundary = "fuzzboundary"
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode()
            + v.encode("utf-8", "surrogatepass")
            + b"\r\n"
            for k, v in fields.items()
        ]
        if draw(st.booleans()):
            parts.append(draw(st.binary(max_size=80)))
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return body, f"multipart/form-data; boundary={boundary}"
    encoded = httpx.QueryParams({k: v.encode("utf-8", "surrogatepass").decode("latin-1") for k, v in fields.items()})
    return str(encoded).encode(), "application/x-www-form-urlencoded"


# --- helpers ----------------------------------------------------------------------------------------------------
def paths_of(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every field path of a template, containers and leaves (``("opponents", 0, "name")``)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from paths_of(child, (*prefix, index))


def replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """A deep copy of ``value`` with the field at ``path`` set to ``new``."""
    copy = json.loads(json.dumps(value))
    holder = copy
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = new
    return copy


def serving(target: Target) -> None:
    """The server still answers, reads every battle back and renders them."""
    assert target.http.get("/health").status_code == 200
    battles = target.http.get("/battles")
    assert battles.status_code == 200, battles.text[:500]
    json.loads(battles.text)  # strict: no NaN came back out
    assert target.http.get("/agents").status_code == 200


# --- JSON endpoints -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_hand_picked_bodies(target: Target, endpoint: Endpoint) -> None:
    template = endpoint.template(target)
    cases: list[bytes] = list(RAW_BODIES)
    for raw in RAW_VALUES:
        cases.append(raw.encode())
        for key in template:
            cases.append(dumps({**template, key: PLACEHOLDER.format(0)}).replace('"@@RAW0@@"', raw).encode())
    for path in paths_of(template):
        for wrong in WRONG_TYPES:
            cases.append(dumps(replaced(template, path, wrong)).encode())
    for body in cases:
        response = target.send(endpoint.name, endpoint.method, endpoint.path(target), body, JSON_HEADERS)
        if response.status_code >= 400:
            detail = response.json()["detail"]  # always a JSON error body
            assert detail
            if response.status_code == 413:
                assert detail[0]["ctx"]["setting"] in CAPS and detail[0]["ctx"]["limit"] in CAPS.values()
    serving(target)


@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_named_errors(target: Target, endpoint: Endpoint) -> None:
    """Each kind of hostile value is refused with its status and the field's location."""
    template = endpoint.template(target)
    key = next(iter(template))
    expectations = [
        ('"\\ud800"', 400, "string_unicode"),
        ("1" + "0" * 5000, 400, "int_too_long"),
        ("1" + "0" * 64, 400, "int_too_long"),
        ("NaN", 400, "non_finite_number"),
        ("-Infinity", 400, "non_finite_number"),
        ("1e999", 400, "non_finite_number"),
        ("[" * 65 + "]" * 65, 400, "json_too_deep"),
        (DEEP, 400, "json_too_deep"),
    ]
    for raw, status, kind in expectations:
        body = dumps({**template, key: PLACEHOLDER.format(0)}).replace('"@@RAW0@@"', raw).encode()
        response = target.send(endpoint.name, endpoint.method, endpoint.path(target), body, JSON_HEADERS)
        assert response.status_code == status, (raw[:20], response.text[:300])
        error = response.json()["detail"][0]
        assert error["type"] == kind and error["loc"][:2] == ["body", key], error
    key_body = dumps({**template, "\ud800": 1}).encode()
    response = target.send(endpoint.name, endpoint.method, endpoint.path(target), key_body, JSON_HEADERS)
    assert response.status_code == 400 and response.json()["detail"][0]["loc"] == ["body", "\\ud800"]
    for bad in (b"", b"not json", b'{"a": "\xff"}'):
        response = target.send(endpoint.name, endpoint.method, endpoint.path(target), bad, JSON_HEADERS)
        assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_generated_bodies(target: Target, endpoint: Endpoint) -> None:
    @HYPOTHESIS
    @given(body=json_bodies(endpoint.template(target)))
    def attack(body: bytes) -> None:
        target.send(endpoint.name, endpoint.method, endpoint.path(target), body, JSON_HEADERS)

    attack()
    serving(target)


# --- forms ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("endpoint", FORM_ENDPOINTS, ids=lambda e: e.name)
def test_form_bodies(target: Target, endpoint: Endpoint) -> None:
    template = endpoint.template(target)
    form = {"content-type": "application/x-www-form-urlencoded"}
    for body in RAW_BODIES:
        target.send(endpoint.name, "POST", endpoint.path(target), body, form)
    if "config" in template:
        for raw in RAW_VALUES:
            encoded = str(httpx.QueryParams({**template, "config": raw})).encode()
            response = target.send(endpoint.name, "POST", endpoint.path(target), encoded, form)
            assert response.status_code in (303, 400, 404, 413, 422), (raw[:20], response.status_code)

    @hypothesis_settings(FORM_EXAMPLES)
    @given(body=form_bodies(template))
    def attack(body: tuple[bytes, str]) -> None:
        content, content_type = body
        target.send(endpoint.name, "POST", endpoint.path(target), content, {"content-type": content_type})

    attack()
    serving(target)


# --- MCP --------------------------------------------------------------------------------------------------------
class McpSession:
    """A raw streamable-HTTP MCP session, so that arguments can carry what no well-behaved client sends."""

    def __init__(self, target: Target) -> None:
        self.target = target
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "f", "version": "0"},
            },
        }
        response = target.send("mcp_session", "POST", "/mcp/", json.dumps(init).encode(), MCP_HEADERS)
        assert response.status_code == 200, response.text
        self.headers = {
            **MCP_HEADERS,
            "mcp-session-id": response.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        notified = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        target.send("mcp_session", "POST", "/mcp/", notified, self.headers)
        self.next_id = 1

    def call(self, tool: str, arguments_text: str) -> dict[str, Any] | None:
        """tools/call with the arguments object given as JSON text; the JSON-RPC answer (None when refused)."""
        self.next_id += 1
        text = (
            f'{{"jsonrpc":"2.0","id":{self.next_id},"method":"tools/call",'
            f'"params":{{"name":{json.dumps(tool)},"arguments":{arguments_text}}}}}'
        )
        response = self.target.send("mcp_tools", "POST", "/mcp/", text.encode(), self.headers)
        if response.status_code != 200:
            return None
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1]) if data else response.json()  # type: ignore[no-any-return]


def assert_no_crash(tool: str, answer: dict[str, Any] | None) -> None:
    """A crashing tool answers exactly "Error executing tool <name>": the MCP form of a 500."""
    if answer is None or "result" not in answer:
        return
    texts = [c.get("text", "") for c in answer["result"].get("content", [])]
    assert f"Error executing tool {tool}" not in texts, answer


def test_mcp_bodies(target: Target) -> None:
    for body in RAW_BODIES:
        target.send("mcp_raw", "POST", "/mcp/", body, MCP_HEADERS)
        target.send("mcp_raw", "POST", "/messages/?session_id=0123456789abcdef0123456789abcdef", body, JSON_HEADERS)
    session = McpSession(target)
    battle_id = target.open_battle()
    tools = {
        "update_battle_process": {"battle_id": battle_id, "message": "m", "reported_by": "green", "detail": {"a": 1}},
        "report_on_battle_end": {
            "battle_id": battle_id,
            "message": "m",
            "winner": "draw",
            "reported_by": "green",
            "detail": {"a": 1},
        },
    }
    for tool, template in tools.items():
        for key in template:
            for raw in RAW_VALUES:
                arguments = dumps({**template, key: PLACEHOLDER.format(0)}).replace('"@@RAW0@@"', raw)
                assert_no_crash(tool, session.call(tool, arguments))
            for wrong in WRONG_TYPES:
                assert_no_crash(tool, session.call(tool, dumps({**template, key: wrong})))
        # the MCP transport's own parser refuses lone surrogates (HTTP 400); the rest reach the tool and are refused
        # by the same checks as over HTTP, as tool errors naming the argument
        surrogate = dumps({**template, "detail": {"x": "\ud800"}})
        assert session.call(tool, surrogate) is None
        cases = [
            ("NaN", "detail.x: NaN and Infinity"),
            ("1e999", "detail.x: NaN and Infinity"),
            ("1" + "0" * 100, "detail.x: integer longer than 64 digits"),
            ("[" * 70 + "]" * 70, "JSON nested deeper than 64 levels"),
        ]
        if tool == "update_battle_process":  # within the body cap, over the progress-event cap
            cases.append(('"' + "a" * 20_000 + '"', "larger than 8192 bytes (the backend's max_event_bytes setting)"))
        for raw, expected in cases:
            answer = session.call(
                tool, dumps({**template, "detail": {"x": PLACEHOLDER.format(0)}}).replace('"@@RAW0@@"', raw)
            )
            assert answer is not None and answer["result"]["isError"], (raw[:20], answer)
            assert expected in answer["result"]["content"][0]["text"], (raw[:20], answer)

    @HYPOTHESIS
    @given(arguments=json_bodies(tools["update_battle_process"]))
    def attack(arguments: bytes) -> None:
        text = arguments.decode("utf-8", "replace")
        assert_no_crash("update_battle_process", session.call("update_battle_process", text))
        target.send("mcp_raw", "POST", "/mcp/", arguments, MCP_HEADERS)

    attack()
    serving(target)


# --- bodies over the caps -----------------------------------------------------------------------------------------
async def chunks(total: int, piece: bytes = b"[" * 4096) -> AsyncIterator[bytes]:
    """``total`` bytes, chunked: httpx sends an async generator without Content-Length."""
    sent = 0
    while sent < total:
        sent += len(piece)
        yield piece


async def test_bodies_over_the_caps(target: Target) -> None:
    paths = {
        "register": ("POST", "/agents", "max_request_bytes"),
        "ready": ("PUT", f"/agents/{target.white_id}", "max_request_bytes"),
        "check_launcher": ("POST", "/agents/check_launcher", "max_request_bytes"),
        "create_battle": ("POST", "/battles", "max_request_bytes"),
        "result": ("POST", f"/battles/{target.open_battle()}", "max_result_bytes"),
        "form_register": ("POST", "/ui/agents", "max_request_bytes"),
        "form_battle": ("POST", "/ui/battles", "max_request_bytes"),
        "mcp_raw": ("POST", "/mcp/", "max_result_bytes"),
    }
    async with httpx.AsyncClient(base_url=target.url, timeout=60.0, trust_env=False) as client:
        for name, (method, path, setting) in paths.items():
            limit = CAPS[setting]
            for size in (limit + 1, 4 * limit, 8 * 1024 * 1024):
                chunked = await client.request(method, path, content=chunks(size), headers=JSON_HEADERS)
                assert "content-length" not in chunked.request.headers
                declared = await client.request(method, path, content=b"[" * (limit + 1), headers=JSON_HEADERS)
                for response in (chunked, declared):
                    target.record(name, response)
                    assert response.status_code == 413, (name, size, response.text[:300])
                    if not name.startswith(("form_", "mcp_")):  # forms answer their page, MCP its transport's text
                        error = response.json()["detail"][0]
                        assert error["ctx"] == {"limit": limit, "setting": setting}, error
                        assert str(limit) in error["msg"] and setting in error["msg"]
        # the event caps, checked once the kind of event is known
        battle = target.open_battle()
        progress = {"is_result": False, "message": "x" * CAPS["max_event_bytes"], "reported_by": "green"}
        response = target.record("progress", await client.post(f"/battles/{battle}", json=progress))
        assert response.status_code == 413
        assert response.json()["detail"][0]["ctx"] == {"limit": CAPS["max_event_bytes"], "setting": "max_event_bytes"}
        small = {**progress, "message": "x" * (CAPS["max_event_bytes"] // 2)}
        assert target.record("progress", await client.post(f"/battles/{battle}", json=small)).status_code == 204
        result = {"is_result": True, "winner": "draw", "detail": {"blob": "y" * (CAPS["max_event_bytes"] * 2)}}
        posted = await client.post(f"/battles/{battle}", json=result, headers={"X-Battle-Token": BATTLE_TOKEN})
        assert target.record("result", posted).status_code == 204
        assert (await client.get("/health")).status_code == 200


# --- the store and the pages afterwards -----------------------------------------------------------------------------
def test_nothing_hostile_was_stored_and_every_page_renders(target: Target) -> None:
    store = target.ctx.store
    battles = target.call(store.list_battles(include_events=True))
    agents = target.call(store.list_agents())
    assert battles and agents
    stored: list[Any] = [a.to_api() for a in agents] + [b.to_api() for b in battles]
    for value in stored:
        json.dumps(value, allow_nan=False).encode("utf-8")  # no NaN, no lone surrogate, no giant integer
    limits = JsonLimits(max_depth=CAPS["max_json_depth"] + 4, max_int_digits=CAPS["max_json_int_digits"])
    for value in stored:
        parse_json(json.dumps(value).encode(), limits)
    for path in ("/", "/battles", "/agents"):
        response = target.record("read_back", target.http.get(path))
        assert response.status_code == 200
    for battle in battles:
        for path in (f"/battles/{battle.battle_id}", f"/ui/battles/{battle.battle_id}"):
            assert target.record("read_back", target.http.get(path)).status_code == 200
        if battle.state.is_terminal:
            events = target.record("read_back", target.http.get(f"/battles/{battle.battle_id}/events"))
            assert events.status_code == 200 and "event: end" in events.text


# --- the reading primitives, without a server ---------------------------------------------------------------------
async def test_read_body_stops_pulling_at_the_cap() -> None:
    """An endless chunked body: read_body and the middleware stop asking for more right after the cap."""
    from starlette.requests import Request

    pulled = 0

    async def endless() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    with pytest.raises(Exception) as refused:
        await read_body(Request(scope, endless), limit=10_000, setting="max_request_bytes")
    assert getattr(refused.value, "status_code", None) == 413
    assert pulled == 11

    sent: list[dict[str, Any]] = []

    async def greedy_app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass

    async def collect(message: Any) -> None:
        sent.append(message)

    pulled = 0
    await BodyLimitMiddleware(greedy_app, cap=lambda scope: (10_000, "max_result_bytes"))(scope, endless, collect)
    assert pulled == 11
    assert sent[0]["status"] == 413 and b"max_result_bytes" in sent[1]["body"]

    # an app that swallows the refusal and answers something else: the answer is replaced by the 413
    async def swallowing_app(scope: Any, receive: Any, send: Any) -> None:
        with contextlib.suppress(Exception):
            while (await receive()).get("more_body"):
                pass
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": b"bad"})

    sent.clear()
    await BodyLimitMiddleware(swallowing_app, cap=lambda scope: (10_000, "max_result_bytes"))(scope, endless, collect)
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]
    assert b"bad" not in b"".join(m.get("body", b"") for m in sent)
