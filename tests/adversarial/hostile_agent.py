"""A hostile A2A white agent, written with raw Starlette (not the a2a-sdk server), for the adversarial tests.

It speaks A2A 0.3 JSON-RPC like agents built on a2a-sdk 0.2/0.3: a 0.3-style card (``url``, ``protocolVersion``,
no ``supportedInterfaces``) at ``/.well-known/agent-card.json`` and ``/.well-known/agent.json``, and ``message/send``
/ ``tasks/get`` at ``/``. What it answers is a *behaviour*: a function of the :class:`Turn` (the request's context
id, the incoming text and data, the turn number within that context, the order in which contexts appeared) that
returns a :class:`Reply` (bytes, or an async iterator of chunks, with any status and content type). Bodies are
built by hand, so a reply can be anything: valid A2A, a 10 MB message, an endless chunked stream, a lone surrogate
escaped into the JSON text, invalid UTF-8, a wrong JSON-RPC shape.

    agent = HostileAgent()
    with serve_hostile(agent) as url:            # uvicorn on 127.0.0.1:<free port> in a background thread
        agent.set_behaviour(huge_integer_action())
        ...                                      # run a battle against url
        agent.records                            # every request it saw (method, context, turn, what it sent)
        agent.errors                             # exceptions raised by behaviours (harness bugs: should be [])

Behaviours that wait (sleep, hang) return early when the server stops, so shutdown is quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import socket
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

KiB = 1024
MiB = 1024 * 1024

INNER_SURROGATE = "@@INNER_LONE_SURROGATE@@"
"""Placeholder (inside the action JSON of a text part) replaced by ``\\ud800`` as the action JSON sees it: the body
gets the bytes ``\\\\ud800`` (an escaped backslash, then ``ud800``), the text part the six characters ``\\ud800``,
the action's parsed string a lone surrogate."""
RAW_SURROGATE = "@@RAW_LONE_SURROGATE@@"
"""Placeholder replaced by the bytes ``\\ud800`` in the JSON-RPC body: the text part itself holds a lone surrogate."""


# ---------------------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Turn:
    """One JSON-RPC request as the behaviour sees it."""

    method: str
    request_id: Any
    params: dict[str, Any]
    context_id: str | None
    text: str
    data: list[Any]
    metadata: dict[str, Any]
    turn: int
    """1-based number of this message within its context (0 for requests that are not ``message/send``)."""
    context_index: int
    """0-based order in which this context first appeared since the behaviour was set (-1 without a context)."""
    agent: HostileAgent

    @property
    def battle_id(self) -> str | None:
        """The battle id, when the green agent sent calibration metadata."""
        arena = self.metadata.get("arena")
        return arena.get("battle_id") if isinstance(arena, dict) else None


@dataclass
class Reply:
    """What to answer: a body (bytes, or a factory of an async iterator of chunks: chunked, no content-length)."""

    body: bytes | Callable[[], AsyncIterator[bytes]] = b""
    status: int = 200
    media_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    note: str = ""
    """What this reply is (for the records)."""


@dataclass(frozen=True)
class TurnRecord:
    """One request the hostile agent answered."""

    at: float
    method: str
    context_id: str | None
    context_index: int
    turn: int
    text_head: str
    text_length: int
    note: str
    reply_bytes: int | None
    """Body size; None for a streamed body."""


Behaviour = Callable[[Turn], "Reply | Awaitable[Reply]"]


# ---------------------------------------------------------------------------------------------------------- agent


class HostileAgent:
    """The hostile agent's state: the current behaviour and what it saw. One instance per server."""

    def __init__(self, name: str = "hostile white agent") -> None:
        self.name = name
        self.url: str | None = None
        self._lock = threading.Lock()
        self._behaviour: Behaviour = malformed()
        self._tasks_get: Behaviour | None = None
        self.records: list[TurnRecord] = []
        """Answered requests (appended when the answer is ready)."""
        self.arrivals: list[Turn] = []
        """Requests as they arrive (before the behaviour runs)."""
        self.errors: list[str] = []
        self.probes: list[dict[str, Any]] = []
        self.contexts: dict[str, int] = {}
        self._context_order: dict[str, int] = {}
        self.stored_tasks: dict[str, dict[str, Any]] = {}
        self.stream_bytes = 0
        self.streams_started = 0
        self.streams_ended = 0
        self.stopping = threading.Event()
        self.shared: dict[str, Any] = {}
        """Free-form values a test hands to its behaviour (e.g. the assessment task id for the control probes)."""
        self.generation = 0

    # -- configuration -------------------------------------------------------------------------------------------

    @property
    def served_url(self) -> str:
        """The URL :func:`serve_hostile` serves it at (AssertionError before that)."""
        assert self.url is not None, "the hostile agent is not served yet (serve_hostile)"
        return self.url

    def set_behaviour(self, behaviour: Behaviour, *, tasks_get: Behaviour | None = None) -> None:
        """Answer with ``behaviour`` from now on, and forget everything seen so far."""
        with self._lock:
            self.generation += 1
            self._behaviour = behaviour
            self._tasks_get = tasks_get
            self.records = []
            self.arrivals = []
            self.errors = []
            self.probes = []
            self.contexts = {}
            self._context_order = {}
            self.stored_tasks = {}
            self.stream_bytes = 0
            self.streams_started = 0
            self.streams_ended = 0
            self.shared = {}

    @property
    def contacted(self) -> bool:
        """True once any JSON-RPC request arrived since the behaviour was set."""
        return bool(self.arrivals)

    def message_turns(self) -> list[TurnRecord]:
        """``message/send`` requests answered so far."""
        return [r for r in self.records if r.method == "message/send"]

    def message_arrivals(self) -> list[Turn]:
        """``message/send`` requests received so far (also those still being answered)."""
        return [t for t in self.arrivals if t.method == "message/send"]

    async def sleep(self, seconds: float) -> None:
        """Sleep, but return at once when the server stops."""
        deadline = time.monotonic() + seconds
        while not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(0.05, left))

    # -- request handling ----------------------------------------------------------------------------------------

    def _turn_for(self, method: str, request_id: Any, params: dict[str, Any]) -> Turn:
        raw_message = params.get("message")
        message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
        context_id = message.get("contextId") if isinstance(message.get("contextId"), str) else None
        texts, data = [], []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if part.get("kind") == "text" or ("text" in part and "kind" not in part):
                texts.append(str(part.get("text", "")))
            elif part.get("kind") == "data" or "data" in part:
                data.append(part.get("data"))
        metadata: dict[str, Any] = {}
        for source in (params.get("metadata"), message.get("metadata")):
            if isinstance(source, dict):
                metadata.update(source)
        with self._lock:
            index = -1
            turn = 0
            if context_id is not None:
                index = self._context_order.setdefault(context_id, len(self._context_order))
                if method == "message/send":
                    self.contexts[context_id] = self.contexts.get(context_id, 0) + 1
                    turn = self.contexts[context_id]
        return Turn(
            method=method,
            request_id=request_id,
            params=params,
            context_id=context_id,
            text="\n".join(texts),
            data=data,
            metadata=metadata,
            turn=turn,
            context_index=index,
            agent=self,
        )

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            payload = json.loads(raw)
        except ValueError:
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
        if not isinstance(payload, dict):
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "bad request"}})
        method = str(payload.get("method"))
        raw_params = payload.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        generation = self.generation
        turn = self._turn_for(method, payload.get("id"), params)
        with self._lock:
            if generation == self.generation:
                self.arrivals.append(turn)
        behaviour: Behaviour | None
        if method == "message/send":
            behaviour = self._behaviour
        elif method == "tasks/get":
            behaviour = self._tasks_get or _stored_task
        else:
            behaviour = None
        try:
            if behaviour is None:
                reply = rpc_error(turn, -32601, f"Method not found: {method}")
            else:
                produced = behaviour(turn)
                reply = await produced if inspect.isawaitable(produced) else produced
        except Exception:
            self.errors.append(traceback.format_exc())
            reply = Reply(
                b"hostile agent behaviour raised", status=500, media_type="text/plain", note="behaviour error"
            )
        self._remember_task(reply)
        size = len(reply.body) if isinstance(reply.body, bytes) else None
        with self._lock:
            if generation != self.generation:  # answered for a behaviour that has since been replaced
                return self._response(reply)
            self.records.append(
                TurnRecord(
                    at=time.time(),
                    method=method,
                    context_id=turn.context_id,
                    context_index=turn.context_index,
                    turn=turn.turn,
                    text_head=turn.text[:300],
                    text_length=len(turn.text),
                    note=reply.note,
                    reply_bytes=size,
                )
            )
        return self._response(reply)

    def _remember_task(self, reply: Reply) -> None:
        if not isinstance(reply.body, bytes) or len(reply.body) > 4 * MiB or b'"task"' not in reply.body:
            return
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            result = json.loads(reply.body).get("result")
            if isinstance(result, dict) and result.get("kind") == "task" and isinstance(result.get("id"), str):
                self.stored_tasks[result["id"]] = result

    def _response(self, reply: Reply) -> Response:
        if isinstance(reply.body, bytes):
            return Response(reply.body, status_code=reply.status, media_type=reply.media_type, headers=reply.headers)
        factory = reply.body

        async def counted() -> AsyncIterator[bytes]:
            self.streams_started += 1
            try:
                async for chunk in factory():
                    if self.stopping.is_set():
                        return
                    self.stream_bytes += len(chunk)
                    yield chunk
                    await asyncio.sleep(0)  # let a disconnect be noticed before the next write
            finally:
                self.streams_ended += 1

        return StreamingResponse(
            counted(), status_code=reply.status, media_type=reply.media_type, headers=reply.headers
        )

    def card(self, url: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": "answers whatever its behaviour says (adversarial tests)",
            "url": url + "/",
            "version": "0.1.0",
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": False},
            "defaultInputModes": ["text"],
            "defaultOutputModes": ["text"],
            "skills": [{"id": "hostile", "name": "hostile", "description": "hostile replies", "tags": []}],
        }

    def app(self, url: str) -> Starlette:
        card = self.card(url)

        async def get_card(request: Request) -> Response:
            return JSONResponse(card)

        return Starlette(
            routes=[
                Route("/.well-known/agent-card.json", get_card, methods=["GET"]),
                Route("/.well-known/agent.json", get_card, methods=["GET"]),
                Route("/", self.handle, methods=["POST"]),
            ]
        )


async def _stored_task(turn: Turn) -> Reply:
    """``tasks/get``: the task this agent returned under that id (so odd states stay odd), else -32001."""
    task_id = turn.params.get("id")
    stored = turn.agent.stored_tasks.get(task_id) if isinstance(task_id, str) else None
    if stored is None:
        return rpc_error(turn, -32001, "Task not found")
    return rpc_result(turn, stored, note="tasks/get")


# ---------------------------------------------------------------------------------------------------------- server


class _ThreadServer(uvicorn.Server):
    """uvicorn without signal handlers (it runs in a background thread of the test process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.contextmanager
def serve_hostile(agent: HostileAgent, *, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``agent`` on 127.0.0.1 (free port, bound before uvicorn starts) in a background thread; yield its URL.

    Leaving the block stops it: hanging behaviours are released, streams end, the thread is joined.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    agent.url = url
    agent.stopping.clear()
    config = uvicorn.Config(
        agent.app(url),
        log_level="critical",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        log_config=None,
        timeout_keep_alive=30,
    )
    server = _ThreadServer(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name=f"hostile-agent-{url}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if failure or not thread.is_alive():
                raise RuntimeError(f"the hostile agent failed to start: {failure!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("the hostile agent did not start in time")
            time.sleep(0.01)
        yield url
    finally:
        agent.stopping.set()
        server.should_exit = True
        thread.join(timeout=10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout=5)
        sock.close()


# ---------------------------------------------------------------------------------------------------------- bodies


def _dumps(value: Any) -> bytes:
    """JSON with only ASCII (a lone surrogate in a str becomes the escape ``\\udXXX``)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def message_result(turn: Turn, text: str | None, data: list[Any] | None = None) -> dict[str, Any]:
    """An A2A 0.3 agent Message (the shape a legacy agent's ``message/send`` returns)."""
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"kind": "text", "text": text})
    for item in data or []:
        parts.append({"kind": "data", "data": item})
    result: dict[str, Any] = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "agent", "parts": parts}
    if turn.context_id:
        result["contextId"] = turn.context_id
    return result


def rpc_result(turn: Turn, result: Any, *, note: str = "") -> Reply:
    return Reply(_dumps({"jsonrpc": "2.0", "id": turn.request_id, "result": result}), note=note or "result")


def rpc_error(turn: Turn, code: int, message: str) -> Reply:
    return Reply(
        _dumps({"jsonrpc": "2.0", "id": turn.request_id, "error": {"code": code, "message": message}}),
        note=f"jsonrpc error {code}",
    )


def message_reply(turn: Turn, text: str | None, data: list[Any] | None = None, *, note: str = "") -> Reply:
    return rpc_result(turn, message_result(turn, text, data), note=note or "message")


def action_text(name: str, arguments: Mapping[str, Any]) -> str:
    return "<json>" + json.dumps({"name": name, "arguments": dict(arguments)}) + "</json>"


def action_reply(turn: Turn, name: str, arguments: Mapping[str, Any], *, note: str = "") -> Reply:
    return message_reply(turn, action_text(name, arguments), note=note or f"action {name}")


def respond_reply(turn: Turn, content: str, *, note: str = "") -> Reply:
    return action_reply(turn, "respond", {"content": content}, note=note or "respond")


def task_result(
    turn: Turn, state: Any, text: str | None = None, *, task_id: str | None = None, artifact_text: str | None = None
) -> dict[str, Any]:
    """An A2A 0.3 Task in ``state`` (any value, also invalid ones), optionally with a status message."""
    status: dict[str, Any] = {"state": state}
    if text is not None:
        status["message"] = message_result(turn, text)
    task: dict[str, Any] = {
        "kind": "task",
        "id": task_id or uuid.uuid4().hex,
        "contextId": turn.context_id or "c",
        "status": status,
    }
    if artifact_text is not None:
        task["artifacts"] = [{"artifactId": uuid.uuid4().hex, "parts": [{"kind": "text", "text": artifact_text}]}]
    return task


def with_surrogates(reply: Reply) -> Reply:
    """Replace the surrogate placeholders in a ready body with the escapes (see INNER_/RAW_SURROGATE)."""
    assert isinstance(reply.body, bytes)
    body = reply.body.replace(INNER_SURROGATE.encode(), b"\\\\ud800").replace(RAW_SURROGATE.encode(), b"\\ud800")
    return Reply(body, status=reply.status, media_type=reply.media_type, headers=reply.headers, note=reply.note)


MALFORMED_TEXT = "I will not answer in your format. There is no action here."


# ---------------------------------------------------------------------------------------------------------- behaviours


def malformed(text: str = MALFORMED_TEXT) -> Behaviour:
    """Every turn: a Message whose text holds no action (the green agent's ``format_error``)."""
    return lambda turn: message_reply(turn, text, note="malformed")


def by_turn(first: Behaviour, then: Behaviour) -> Behaviour:
    """``first`` for the first message of each context, ``then`` afterwards."""
    return lambda turn: first(turn) if turn.turn <= 1 else then(turn)


def by_context(mapping: Mapping[int, Behaviour], default: Behaviour) -> Behaviour:
    """A behaviour per context (0 = the first context that appeared, ...), ``default`` for the others."""
    return lambda turn: mapping.get(turn.context_index, default)(turn)


def huge_integer_action(digits: int = 5000) -> Behaviour:
    """An otherwise valid ``<json>`` respond action holding a ``digits``-digit integer."""
    number = "9" * digits

    def behaviour(turn: Turn) -> Reply:
        text = '<json>{"name": "respond", "arguments": {"content": "Hello.", "n": ' + number + "}}</json>"
        return message_reply(turn, text, note=f"{digits}-digit integer")

    return behaviour


def deep_nesting_action(depth: int = 5000) -> Behaviour:
    """An otherwise valid ``<json>`` respond action with an argument nested ``depth`` arrays deep."""
    nested = "[" * depth + "]" * depth

    def behaviour(turn: Turn) -> Reply:
        text = '<json>{"name": "respond", "arguments": {"content": "Hello.", "deep": ' + nested + "}}</json>"
        return message_reply(turn, text, note=f"nesting {depth}")

    return behaviour


PATHOLOGICAL_UNITS: dict[str, tuple[str, str]] = {
    # name: (repeated unit, tail)
    "open_object_key": ('{"a":', ""),
    "json_tag": ("<json>", ""),
    "open_brace_quote": ('{"', ""),
    "json_tag_pairs": ("<json>x</json>", ""),
    "json_fences": ("```json\n", ""),
}
"""400 KB texts that are slow or fatal for naive parsers: deep nesting (``{"a":`` repeated), many openers, many
openers each with many closers after them (quadratic or worse for a parser that tries every closer)."""


def pathological_text(kind: str, size: int = 400 * KiB) -> str:
    unit, tail = PATHOLOGICAL_UNITS[kind]
    return unit * (size // len(unit)) + tail


def pathological_reply(kind: str, size: int = 400 * KiB) -> Behaviour:
    text = pathological_text(kind, size)
    return lambda turn: message_reply(turn, text, note=f"pathological {kind} {len(text)} chars")


def big_respond(size: int = 10 * MiB) -> Behaviour:
    """A valid respond action whose content is ``size`` bytes: only a reply-size cap can refuse it."""
    content = "A" * size

    def behaviour(turn: Turn) -> Reply:
        return respond_reply(turn, content, note=f"respond of {size} bytes")

    return behaviour


def endless_stream(chunk_size: int = 64 * KiB, max_seconds: float = 300.0) -> Behaviour:
    """A chunked 200 answer that starts like a valid JSON-RPC Message and never ends (``chunk_size`` chunks, as fast
    as the reader takes them; stops after ``max_seconds`` or when the server stops)."""
    chunk = b"A" * chunk_size

    def behaviour(turn: Turn) -> Reply:
        head = _dumps({"jsonrpc": "2.0", "id": turn.request_id})[:-1] + (
            b',"result":{"kind":"message","messageId":"endless","role":"agent","parts":[{"kind":"text","text":"'
        )

        async def chunks() -> AsyncIterator[bytes]:
            yield head
            deadline = time.monotonic() + max_seconds
            while time.monotonic() < deadline:
                yield chunk

        return Reply(chunks, note="endless stream")

    return behaviour


def surrogate_in_respond() -> Behaviour:
    """First turn: a respond action whose content holds a JSON-escaped lone surrogate (``\\ud800`` inside the
    action JSON). Later turns: a malformed reply (so the attempt ends as format_error at step 2 if it went on)."""

    def first(turn: Turn) -> Reply:
        text = action_text(
            "respond", {"content": f"SURROGATE-MARKER {INNER_SURROGATE} what title should the task have?"}
        )
        return with_surrogates(message_reply(turn, text, note="respond with escaped lone surrogate"))

    return by_turn(first, malformed())


def surrogate_in_tool_argument(
    tool: str = "create_task", arguments: Mapping[str, Any] | None = None, field_name: str = "title"
) -> Behaviour:
    """First turn: a tool call whose ``field_name`` argument holds a JSON-escaped lone surrogate; then malformed."""
    args = dict(arguments or {"user_id": "user_1"})
    args[field_name] = f"SURROGATE-MARKER {INNER_SURROGATE} meeting"

    def first(turn: Turn) -> Reply:
        return with_surrogates(action_reply(turn, tool, args, note="tool argument with escaped lone surrogate"))

    return by_turn(first, malformed())


def raw_surrogate_in_text() -> Behaviour:
    """First turn: the text part itself holds a lone surrogate (``\\ud800`` escaped in the JSON-RPC body), inside
    the content of a respond action; then malformed."""

    def first(turn: Turn) -> Reply:
        text = action_text("respond", {"content": f"SURROGATE-MARKER {RAW_SURROGATE} what title should the task have?"})
        return with_surrogates(message_reply(turn, text, note="lone surrogate raw in the text part"))

    return by_turn(first, malformed())


def tool_then_malformed(tool: str, arguments: Mapping[str, Any]) -> Behaviour:
    """First turn: a tool call; afterwards malformed (format_error at step 2, after the tool ran)."""
    return by_turn(lambda turn: action_reply(turn, tool, arguments), malformed())


def calculate_bomb(expression: str = "9**9**9") -> Behaviour:
    """Retail/airline ``calculate`` with an expression whose evaluation never ends in practice; then malformed."""
    return tool_then_malformed("calculate", {"expression": expression})


def sleep_then(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Sleep ``seconds`` (longer than the turn limit), then answer with ``then`` (malformed by default)."""
    after = then or malformed()

    async def behaviour(turn: Turn) -> Reply:
        await turn.agent.sleep(seconds)
        produced = after(turn)
        return await produced if inspect.isawaitable(produced) else produced

    return behaviour


def fixed(reply: Reply) -> Behaviour:
    """The same raw reply every turn (status, content type and body bytes as given)."""
    return lambda turn: reply


# ---------------------------------------------------------------------------------------------------------- probes


def _refused(status: int, body: Any) -> bool:
    """Did the green agent refuse? HTTP 401/403, a JSON-RPC error, or a Task it failed/rejected at once."""
    if status in (401, 403):
        return True
    if status >= 400:
        return True  # any other error status is not an accepted operation either
    if not isinstance(body, dict):
        return False
    if "error" in body and body.get("error") is not None:
        return True
    result = body.get("result")
    if isinstance(result, dict):
        state = (result.get("status") or {}).get("state") if isinstance(result.get("status"), dict) else None
        if result.get("kind") == "task" and state in ("failed", "rejected", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"):
            return True
        if result.get("kind") == "message":
            return False  # an answer, not a refusal (a battle_info ack, or the list of accepted formats)
    return False


def _body_of(response: httpx.Response) -> Any:
    with contextlib.suppress(ValueError):
        return response.json()
    text = response.text
    if "data:" in text:  # SSE: the first data line
        for line in text.splitlines():
            if line.startswith("data:"):
                with contextlib.suppress(ValueError):
                    return json.loads(line[5:].strip())
    return text[:500]


MCP_ACCEPT = "application/json, text/event-stream"
MCP_PROTOCOL = "2025-06-18"


async def probe_control_surface(
    green_url: str,
    *,
    battle_id: str | None,
    task_id: str | None,
    white_url: str | None,
    timeout_s: float = 10.0,
    sink: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Try to read and steer the green agent WITHOUT its operator token; return what each attempt got back.

    Each entry: ``{"probe", "status", "refused", "body"}``. ``refused`` uses :func:`_refused` (MCP probes: the
    session could not be opened or the tool call errored); no answer at all (status -1) is not a refusal.
    """
    results: list[dict[str, Any]] = sink if sink is not None else []

    def note(probe: str, status: int, body: Any, refused: bool | None = None) -> None:
        shown = body if isinstance(body, str) else json.dumps(body)[:600]
        results.append(
            {
                "probe": probe,
                "status": status,
                "refused": _refused(status, body) if refused is None else refused,
                "body": shown,
            }
        )

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False) as http:

        async def rpc(probe: str, method: str, params: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            try:
                response = await http.post(
                    green_url + "/",
                    json={"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params},
                    headers=headers or {},
                )
            except httpx.HTTPError as error:
                note(probe, -1, f"no answer: {type(error).__name__}: {error}", refused=False)
                return
            note(probe, response.status_code, _body_of(response))

        if task_id:
            await rpc("a2a tasks/get (0.3)", "tasks/get", {"id": task_id})
            await rpc("a2a tasks/cancel (0.3)", "tasks/cancel", {"id": task_id})
            await rpc("a2a GetTask (1.0)", "GetTask", {"id": task_id}, {"A2A-Version": "1.0"})
            await rpc("a2a CancelTask (1.0)", "CancelTask", {"id": task_id}, {"A2A-Version": "1.0"})
        if white_url:
            request = {
                "participants": {"white_agent": white_url},
                "config": {"domain": "mock", "split": "base", "task_id": 0, "k": 2},
            }
            await rpc(
                "a2a assessment request (message/send)",
                "message/send",
                {
                    "message": {
                        "kind": "message",
                        "role": "user",
                        "messageId": uuid.uuid4().hex,
                        "parts": [{"kind": "text", "text": json.dumps(request)}],
                    },
                    "configuration": {"blocking": False, "acceptedOutputModes": ["text"]},
                },
            )

        # MCP control tools.
        mcp_url = green_url + "/mcp/"
        headers = {"Accept": MCP_ACCEPT, "MCP-Protocol-Version": MCP_PROTOCOL}
        try:
            init = await http.post(
                mcp_url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": MCP_PROTOCOL,
                        "capabilities": {},
                        "clientInfo": {"name": "hostile", "version": "1"},
                    },
                },
            )
            init_status, init_body = init.status_code, _body_of(init)
        except httpx.HTTPError as error:
            init, init_status, init_body = None, -1, f"{type(error).__name__}: {error}"
        opened = init is not None and init.status_code == 200 and isinstance(init_body, dict) and "result" in init_body
        note("mcp initialize", init_status, init_body, refused=not opened)
        if opened and init is not None:
            session = init.headers.get("mcp-session-id")
            call_headers = {**headers, **({"Mcp-Session-Id": session} if session else {})}
            with contextlib.suppress(httpx.HTTPError):
                await http.post(
                    mcp_url, headers=call_headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                )
            calls: list[tuple[str, str, dict[str, Any]]] = [("mcp tools/list", "tools/list", {})]
            if battle_id:
                for tool in ("get_battle", "get_results", "cancel_battle"):
                    calls.append((f"mcp {tool}", "tools/call", {"name": tool, "arguments": {"battle_id": battle_id}}))
            for index, (probe, method, params) in enumerate(calls, start=2):
                try:
                    response = await http.post(
                        mcp_url,
                        headers=call_headers,
                        json={"jsonrpc": "2.0", "id": index, "method": method, "params": params},
                    )
                except httpx.HTTPError as error:
                    note(probe, -1, f"no answer: {type(error).__name__}: {error}", refused=False)
                    continue
                body = _body_of(response)
                result = body.get("result") if isinstance(body, dict) else None
                is_error = bool(isinstance(result, dict) and result.get("isError"))
                note(probe, response.status_code, body, refused=_refused(response.status_code, body) or is_error)

        # Plain HTTP control surface.
        for probe, method, path, payload in (
            ("GET /evaluations/", "GET", "/evaluations/", None),
            ("GET /evaluations/config", "GET", "/evaluations/config", None),
            ("POST /run", "POST", "/run", {"agent_url": white_url or "http://127.0.0.1:9", "dataset": []}),
        ):
            try:
                response = await http.request(method, green_url + path, json=payload)
            except httpx.HTTPError as error:
                note(probe, -1, f"no answer: {type(error).__name__}: {error}", refused=False)
                continue
            note(probe, response.status_code, _body_of(response), refused=response.status_code in (401, 403))
    return results


def control_probe(green_url: str, *, wait_for_task_id_s: float = 5.0) -> Behaviour:
    """First turn of the first context: probe the green agent's control surface without the operator token (the
    battle id and the assessment's A2A task id come from ``agent.shared``, as if they had leaked), record the
    results in ``agent.probes`` as they come and set ``agent.shared["probes_finished"]`` at the end; every turn
    answers with a malformed reply (format_error)."""

    async def behaviour(turn: Turn) -> Reply:
        agent = turn.agent
        if turn.turn == 1 and turn.context_index == 0:
            deadline = time.monotonic() + wait_for_task_id_s
            while "task_id" not in agent.shared and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            battle_id = agent.shared.get("battle_id") or turn.battle_id
            try:
                await probe_control_surface(
                    green_url,
                    battle_id=battle_id,
                    task_id=agent.shared.get("task_id"),
                    white_url=agent.url,
                    sink=agent.probes,
                )
            finally:
                agent.shared["probes_finished"] = True
        return message_reply(turn, MALFORMED_TEXT, note="malformed after probing")

    return behaviour
