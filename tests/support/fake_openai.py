"""A scripted OpenAI-compatible server for tests: ``make_fake_openai(script)`` returns a Starlette app.

Why: tests of the LLM white agent and the LLM user simulator must exercise the real ``openai`` client end to end
(HTTP, JSON shapes, streaming, error handling) without a network or a key. Serve the app on loopback with
:func:`tests.support.servers.serve_app` (base URL for the client: ``f"{url}/v1"``) or pass it in-process through
``httpx.ASGITransport``.

Routes:
    POST /v1/chat/completions   answered from the script (JSON, or SSE chunks + ``data: [DONE]`` when the request
                                has ``"stream": true``)
    GET  /v1/models             a one-model list

The script is either
    * a list (or any iterable) of response specs, consumed one per completion request (a queue); when it runs out
      the server answers HTTP 400 "fake_openai: script exhausted" (not retried by clients, so tests fail fast), or
    * a callable ``request_json -> spec`` (sync or async), called for every completion request.

Response specs (build them with the helpers):
    ``text_reply("hi")``                             an assistant message, finish_reason "stop"
    ``tool_call_reply("get_user", {"id": 1})``       one tool call, finish_reason "tool_calls" (``call_id=`` to fix
                                                     the id; ``tool_calls_reply([...])`` for several calls)
    ``error_reply(429)`` / ``error_reply(500)``      an HTTP error with an OpenAI-style error body (``retry_after=``
                                                     adds ``retry-after-ms``/``retry-after`` headers)
    a plain dict                                     sent as the JSON body verbatim (status 200)

    ``usage=`` on ``text_reply`` / ``tool_call_reply`` / ``tool_calls_reply`` scripts the completion's ``usage``
    object (e.g. ``{"prompt_tokens": 120, "completion_tokens": 7, "cost": 0.0021}``; ``total_tokens`` is added when
    missing); without it every completion reports 1 prompt + 1 completion token. Streamed answers carry no usage.

Rate limits (``limits=ProviderLimitsSpec(...)``), as a real provider enforces them: at most ``max_concurrency``
completions in flight, and at most ``tokens_per_window`` tokens (each answered completion's usage: prompt +
completion) per ``window_s`` (a fixed window: the tokens-per-minute limit with a test-sized minute). A completion
over either limit is answered HTTP 429 with ``retry-after-ms`` / ``retry-after`` (the time left in the window, or
``concurrency_retry_after_s``) before the script is consulted; ``latency_s`` makes each answered completion take that
long (so that concurrency matters). ``fake_state(app)`` counts ``rate_limited`` (429s sent, per limit),
``answered`` and ``peak_in_flight``.

Recording: every request reaching either route is appended to ``fake_state(app).requests`` as a
:class:`RecordedRequest` (method, path, headers with lower-case names, parsed JSON body), e.g. to check the tool
messages an agent sent or that the ``authorization`` header carried the key.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DEFAULT_MODEL = "fake-model"


@dataclass(frozen=True)
class TextReply:
    """An assistant text answer."""

    content: str
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call of an assistant answer; ``arguments`` is sent as a JSON string (or verbatim if a str)."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str | None = None


@dataclass(frozen=True)
class ToolCallsReply:
    """An assistant answer made of tool calls (optionally with text content)."""

    calls: tuple[ToolCallSpec, ...]
    content: str | None = None
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error answer."""

    status: int
    message: str = "scripted error"
    retry_after: float | None = None


@dataclass(frozen=True)
class ProviderLimitsSpec:
    """The limits a fake provider enforces with 429s (see the module docstring)."""

    max_concurrency: int | None = None
    tokens_per_window: int | None = None
    window_s: float = 60.0
    latency_s: float = 0.0
    concurrency_retry_after_s: float = 0.05

    def requests_per_s(self, tokens_per_request: int) -> float:
        """The most completions per second these limits let through (each of ``tokens_per_request`` tokens)."""
        rates = []
        if self.max_concurrency is not None and self.latency_s > 0:
            rates.append(self.max_concurrency / self.latency_s)
        if self.tokens_per_window is not None:
            rates.append(self.tokens_per_window / tokens_per_request / self.window_s)
        return min(rates) if rates else float("inf")


ResponseSpec = TextReply | ToolCallsReply | ErrorReply | dict[str, Any]
Script = Iterable[ResponseSpec] | Callable[[dict[str, Any]], Any]


def text_reply(content: str, *, usage: dict[str, Any] | None = None) -> TextReply:
    """A text completion (``usage``: its scripted usage object)."""
    return TextReply(content, usage=usage)


def tool_call_reply(
    name: str,
    arguments: dict[str, Any] | str,
    *,
    call_id: str | None = None,
    content: str | None = None,
    usage: dict[str, Any] | None = None,
) -> ToolCallsReply:
    """A completion with one tool call."""
    return ToolCallsReply((ToolCallSpec(name, arguments, call_id),), content, usage)


def tool_calls_reply(
    calls: Iterable[ToolCallSpec], *, content: str | None = None, usage: dict[str, Any] | None = None
) -> ToolCallsReply:
    """A completion with several tool calls."""
    return ToolCallsReply(tuple(calls), content, usage)


DEFAULT_USAGE: dict[str, Any] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
"""The usage of a completion whose spec scripts none."""


def _usage_json(usage: dict[str, Any] | None) -> dict[str, Any]:
    """The scripted usage, with ``total_tokens`` added when it is missing and computable (malformed stays as is)."""
    if usage is None:
        return dict(DEFAULT_USAGE)
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if "total_tokens" in usage or not isinstance(prompt, int) or not isinstance(completion, int):
        return dict(usage)
    return {"total_tokens": prompt + completion, **usage}


def error_reply(status: int, message: str = "scripted error", *, retry_after: float | None = None) -> ErrorReply:
    """An HTTP error (429, 500, ...)."""
    return ErrorReply(status, message, retry_after)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class FakeOpenAIState:
    """The script and the record of one fake server (``app.state.fake``)."""

    script: deque[ResponseSpec] | Callable[[dict[str, Any]], Any]
    model: str = DEFAULT_MODEL
    requests: list[RecordedRequest] = field(default_factory=list)
    limits: ProviderLimitsSpec | None = None
    in_flight: int = 0
    peak_in_flight: int = 0
    answered: int = 0
    """Completions answered 200 (rate limited ones not counted)."""
    rate_limited: dict[str, int] = field(default_factory=lambda: {"concurrency": 0, "tokens": 0})
    """429s sent, by the limit that was over."""
    window_start: float = 0.0
    window_tokens: int = 0
    first_answer_at: float | None = None
    last_answer_at: float | None = None

    @property
    def rate_limited_total(self) -> int:
        return sum(self.rate_limited.values())

    @property
    def completion_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat-completion requests, in arrival order."""
        return [r.body or {} for r in self.requests if r.path.endswith("/chat/completions")]


def fake_state(app: Starlette) -> FakeOpenAIState:
    """The state (script and recorded requests) of an app made by :func:`make_fake_openai`."""
    state: FakeOpenAIState = app.state.fake
    return state


def _tool_calls_json(reply: ToolCallsReply) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(reply.calls):
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        calls.append(
            {
                "id": call.call_id or f"call_{uuid.uuid4().hex[:12]}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
        )
    return calls


def _completion_json(spec: TextReply | ToolCallsReply, model: str) -> dict[str, Any]:
    if isinstance(spec, TextReply):
        message: dict[str, Any] = {"role": "assistant", "content": spec.content}
        finish = spec.finish_reason
    else:
        message = {"role": "assistant", "content": spec.content, "tool_calls": _tool_calls_json(spec)}
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage_json(spec.usage),
    }


def _chunk(completion_id: str, model: str, delta: dict[str, Any], finish: str | None) -> str:
    body = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _split(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def _stream(spec: TextReply | ToolCallsReply, model: str) -> AsyncIterator[str]:
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:16]}"
    if isinstance(spec, TextReply):
        yield _chunk(completion_id, model, {"role": "assistant", "content": ""}, None)
        for piece in _split(spec.content):
            yield _chunk(completion_id, model, {"content": piece}, None)
        yield _chunk(completion_id, model, {}, spec.finish_reason)
    else:
        yield _chunk(completion_id, model, {"role": "assistant", "content": spec.content}, None)
        for index, call in enumerate(_tool_calls_json(spec)):
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield _chunk(completion_id, model, {"tool_calls": [head]}, None)
            for piece in _split(call["function"]["arguments"]):
                yield _chunk(
                    completion_id, model, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, None
                )
        yield _chunk(completion_id, model, {}, "tool_calls")
    yield "data: [DONE]\n\n"


def _error_response(spec: ErrorReply) -> Response:
    headers: dict[str, str] = {}
    if spec.retry_after is not None:
        headers["retry-after-ms"] = str(int(spec.retry_after * 1000))
        headers["retry-after"] = str(spec.retry_after)
    kind = (
        "rate_limit_exceeded"
        if spec.status == 429
        else "server_error"
        if spec.status >= 500
        else "invalid_request_error"
    )
    body = {"error": {"message": spec.message, "type": kind, "param": None, "code": kind}}
    return JSONResponse(body, status_code=spec.status, headers=headers)


def _tokens_of(spec: ResponseSpec) -> int:
    if isinstance(spec, TextReply | ToolCallsReply):
        usage = _usage_json(spec.usage)
        return int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return 0


def _over_limit(state: FakeOpenAIState, limits: ProviderLimitsSpec) -> ErrorReply | None:
    """A 429 when a limit is reached (the window rolls over first), else None (the request is let in)."""
    now = time.monotonic()
    if now - state.window_start >= limits.window_s:
        state.window_start, state.window_tokens = now, 0
    if limits.max_concurrency is not None and state.in_flight >= limits.max_concurrency:
        state.rate_limited["concurrency"] += 1
        return ErrorReply(429, "fake_openai: too many requests in flight", limits.concurrency_retry_after_s)
    if limits.tokens_per_window is not None and state.window_tokens >= limits.tokens_per_window:
        state.rate_limited["tokens"] += 1
        left = max(0.001, limits.window_s - (now - state.window_start))
        return ErrorReply(429, "fake_openai: tokens per minute exceeded", round(left, 3))
    return None


async def _limited(
    state: FakeOpenAIState, limits: ProviderLimitsSpec, answer: Callable[[], Awaitable[tuple[Response, int]]]
) -> Response:
    """``answer()`` under ``limits`` (429 when over one), taking ``latency_s``."""
    refused = _over_limit(state, limits)
    if refused is not None:
        return _error_response(refused)
    state.in_flight += 1
    state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
    try:
        if limits.latency_s:
            await asyncio.sleep(limits.latency_s)
        response, tokens = await answer()
    finally:
        state.in_flight -= 1
    if response.status_code == 200:
        state.window_tokens += tokens
        state.answered += 1
        now = time.monotonic()
        state.first_answer_at = state.first_answer_at or now
        state.last_answer_at = now
    return response


def make_fake_openai(
    script: Script, *, model: str = DEFAULT_MODEL, limits: ProviderLimitsSpec | None = None
) -> Starlette:
    """A Starlette app answering chat completions from ``script`` (see the module docstring); ``limits``: the rate
    limits it enforces with 429s."""
    queue_or_callable: deque[ResponseSpec] | Callable[[dict[str, Any]], Any]
    queue_or_callable = script if callable(script) else deque(script)
    state = FakeOpenAIState(script=queue_or_callable, model=model, limits=limits, window_start=time.monotonic())

    async def _record(request: Request) -> dict[str, Any] | None:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        state.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.url.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body if isinstance(body, dict) or body is None else {"_json": body},
            )
        )
        return body if isinstance(body, dict) else None

    async def chat_completions(request: Request) -> Response:
        body = await _record(request) or {}
        if state.limits is None:
            response, _ = await _answer(body)
            return response

        async def answer() -> tuple[Response, int]:
            return await _answer(body)

        return await _limited(state, state.limits, answer)

    async def _answer(body: dict[str, Any]) -> tuple[Response, int]:
        """The scripted answer to one completion request and its tokens."""
        if callable(state.script):
            spec = state.script(body)
            if inspect.isawaitable(spec):
                spec = await spec
        elif state.script:
            spec = state.script.popleft()
        else:
            return _error_response(ErrorReply(400, "fake_openai: script exhausted")), 0
        if isinstance(spec, ErrorReply):
            return _error_response(spec), 0
        if isinstance(spec, dict):
            return JSONResponse(spec), 0
        if not isinstance(spec, TextReply | ToolCallsReply):
            return _error_response(ErrorReply(500, f"fake_openai: bad script entry {type(spec).__name__}")), 0
        model_name = str(body.get("model") or state.model)
        if body.get("stream"):
            return StreamingResponse(_stream(spec, model_name), media_type="text/event-stream"), _tokens_of(spec)
        return JSONResponse(_completion_json(spec, model_name)), _tokens_of(spec)

    async def models(request: Request) -> Response:
        await _record(request)
        return JSONResponse(
            {"object": "list", "data": [{"id": state.model, "object": "model", "created": 0, "owned_by": "fake"}]}
        )

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    app.state.fake = state
    return app
