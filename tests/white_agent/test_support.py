"""The shared test helpers themselves: the loopback server runner and the fake OpenAI server."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.fake_openai import (
    ToolCallSpec,
    error_reply,
    fake_state,
    make_fake_openai,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)
from tests.support.servers import serve_app, serve_app_factory


def _hello_app() -> Starlette:
    async def hello(_request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


async def test_serve_app_serves_on_loopback_and_stops() -> None:
    async with serve_app(_hello_app()) as url:
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as http:
            assert (await http.get(url)).text == "hello"
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(url)


async def test_factory_gets_the_base_url() -> None:
    seen: list[str] = []

    def factory(base_url: str) -> Starlette:
        seen.append(base_url)
        return _hello_app()

    async with serve_app_factory(factory) as url:
        assert seen == [url]


async def test_failing_lifespan_is_reported() -> None:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def broken(_app: Starlette):  # type: ignore[no-untyped-def]
        raise RuntimeError("cannot start")
        yield

    with pytest.raises(RuntimeError, match="failed to start"):
        async with serve_app(Starlette(lifespan=broken)):
            pass


def _client(url: str, max_retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-fake", max_retries=max_retries)


async def test_fake_openai_text_tool_calls_and_models() -> None:
    fake = make_fake_openai(
        [text_reply("hi"), tool_calls_reply([ToolCallSpec("f", {"a": 1}, "id1"), ToolCallSpec("g", "{}")])]
    )
    async with serve_app(fake) as url:
        client = _client(url)
        first = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        second = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}])
        models = await client.models.list()
        with pytest.raises(openai.BadRequestError, match="script exhausted"):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "z"}])
        await client.close()
    assert first.choices[0].message.content == "hi" and first.choices[0].finish_reason == "stop"
    calls = second.choices[0].message.tool_calls
    assert second.choices[0].finish_reason == "tool_calls"
    assert (calls[0].id, calls[0].function.name, json.loads(calls[0].function.arguments)) == ("id1", "f", {"a": 1})
    assert calls[1].function.name == "g"
    assert [m.id for m in models.data] == ["fake-model"]
    paths = [r.path for r in fake_state(fake).requests]
    assert paths == ["/v1/chat/completions", "/v1/chat/completions", "/v1/models", "/v1/chat/completions"]
    assert fake_state(fake).completion_requests[1]["messages"] == [{"role": "user", "content": "y"}]


async def test_fake_openai_streaming() -> None:
    fake = make_fake_openai([text_reply("a fairly long streamed answer"), tool_call_reply("lookup", {"q": "abc" * 10})])
    async with serve_app(fake) as url:
        client = _client(url)
        stream = await client.chat.completions.create(model="m", messages=[], stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        stream = await client.chat.completions.create(model="m", messages=[], stream=True)
        name, arguments, finish = "", "", None
        async for chunk in stream:
            choice = chunk.choices[0]
            for call in choice.delta.tool_calls or []:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
        await client.close()
    assert text == "a fairly long streamed answer"
    assert name == "lookup" and json.loads(arguments) == {"q": "abc" * 10} and finish == "tool_calls"


async def test_fake_openai_errors_and_callable_script() -> None:
    calls: list[int] = []

    async def script(body: dict) -> object:
        calls.append(len(body["messages"]))
        return error_reply(429, retry_after=0) if len(calls) == 1 else text_reply(f"n={len(calls)}")

    fake = make_fake_openai(script)
    async with serve_app(fake) as url:
        client = _client(url, max_retries=2)  # the openai client's own retry honours retry-after
        answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        await client.close()
        no_retry = _client(url)
        fake_500 = make_fake_openai([error_reply(500, "down")])
        async with serve_app(fake_500) as url_500:
            with pytest.raises(openai.InternalServerError):
                await _client(url_500).chat.completions.create(model="m", messages=[])
        await no_retry.close()
    assert answer.choices[0].message.content == "n=2"
    assert calls == [1, 1]
