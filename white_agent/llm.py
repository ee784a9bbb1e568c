"""The ``llm`` white agent: a tool-calling agent over any OpenAI-compatible chat-completions endpoint.

Why native tool calling: the green agent sends the tools as OpenAI function schemas (Arena in a data part, the public
green agents as a JSON list in the first message's text, recovered by :func:`white_agent.protocol.parse_green_message`),
so the model gets them as real ``tools`` and we only translate between the harness's one-action-per-turn text
protocol and the chat history:

* first turn: system = the policy (data part, else the text before the tools list or before "User message:") + a
  short instruction; the user's text becomes a ``user`` message;
* tool-result turns ("Tool call result:", tau2's "tool: ") become a ``tool`` message answering the pending tool call;
* user turns ("User message:", tau2's "user: ") become ``user`` messages;
* the model's first tool call becomes a ``<json>`` action (only that call is kept in the history, so the next tool
  result answers it); plain text becomes a ``respond`` action.

Tool mode "mcp" (the first message carries the attempt's ``mcp`` endpoint): the tools are fetched over MCP
(``list_tools``) and every tool call the model makes is executed there by the agent itself, in a loop, until the
model answers with text; the green agent only ever receives ``respond`` actions. A turn is capped at
``max_tool_calls_per_turn`` calls (a runaway model ends the attempt with the agent's own failure report).

Memory is per A2A context id, isolated and bounded (LRU). 429/5xx/connection errors are retried with exponential
backoff (:mod:`white_agent.model_retry`); when retries run out the turn is answered with a failed A2A Task (the
agent reports its own failure). The API key is read from a named environment variable and never logged or echoed.

Usage: every reply carries what its turn cost in the message metadata under ``"arena/usage"`` (:data:`USAGE_KEY`):
``{"prompt_tokens", "completion_tokens", "model"}`` summed over the turn's model calls, plus ``"cost_usd"`` when the
provider reported a cost for every call. A turn with a call that returned no usage reports nothing (a partial count
would understate the cost). Arena's green agent shows it as the agent's tokens and cost (docs/results.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Self, cast

import httpx
import openai
from mcp import Client
from pydantic import BaseModel, ConfigDict, Field

from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS, BoundedContexts
from white_agent.errors import WhiteAgentConfigError
from white_agent.mcp_client import (
    McpConnector,
    McpToolsError,
    describe_mcp_error,
    openai_tools_from_mcp,
    tool_result_text,
)
from white_agent.model_retry import call_with_retries
from white_agent.protocol import GreenTurn, McpEndpointInfo, format_action, format_respond, normalize_tool_schema
from white_agent.provider_limit import DEFAULT_PROVIDER_MAX_CONCURRENCY, ProviderLimiter
from white_agent.server import AgentReply

logger = logging.getLogger(__name__)

USAGE_KEY = "arena/usage"
"""The reply metadata key Arena's green agent reads an agent's own usage from (docs/results.md, "Cost and latency")."""

AGENT_INSTRUCTION = (
    "You are the customer service agent described by the policy above. Follow the policy strictly. Use the "
    "provided tools to look up and change information, one tool call at a time. When you want to say something to "
    "the customer, answer with plain text instead of a tool call."
)


class LlmAgentSettings(BaseModel):
    """How to reach the model. ``api_key_env`` names the environment variable holding the key (never the key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_retries: int = Field(default=4, ge=0, le=20)
    retry_base_delay_s: float = Field(default=1.0, ge=0.0)
    retry_max_delay_s: float = Field(default=20.0, ge=0.0)
    request_timeout_s: float = Field(default=60.0, gt=0.0)
    max_contexts: int = Field(default=DEFAULT_MAX_CONTEXTS, ge=1)
    context_idle_s: float = Field(default=DEFAULT_IDLE_S, ge=0.0)
    """A conversation unused this long may be forgotten to make room (live ones never are: white_agent/contexts.py)."""
    provider_max_concurrency: int = Field(default=DEFAULT_PROVIDER_MAX_CONCURRENCY, ge=1, le=4096)
    """Model calls in flight at most across conversations, halved on 429 (white_agent/provider_limit.py)."""
    max_tool_calls_per_turn: int = Field(default=40, ge=1, le=1000)
    """Tool mode "mcp": the most tool calls the agent makes over MCP before it must answer the user."""


@dataclass
class TurnUsage:
    """The model usage of one turn (every completion it took, the MCP tool loop's included)."""

    calls: int = 0
    without_usage: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls_with_cost: int = 0

    def add(self, usage: Any) -> None:
        """One completion's ``usage`` (None when the endpoint sent none)."""
        self.calls += 1
        prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        if not isinstance(prompt, int) or not isinstance(completion, int):
            self.without_usage += 1
            return
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        cost = getattr(usage, "cost", None)  # a provider extension (OpenRouter), in US dollars
        if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
            self.cost_usd += float(cost)
            self.calls_with_cost += 1

    def metadata(self, model: str) -> dict[str, Any] | None:
        """The reply metadata reporting this turn (None: no call, or a call without usage)."""
        if self.calls == 0 or self.without_usage:
            return None
        report: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": model,
        }
        if self.calls_with_cost == self.calls:
            report["cost_usd"] = self.cost_usd
        return {USAGE_KEY: report}


@dataclass
class Conversation:
    """One context's chat history and the tool call id the next tool-result turn answers."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    pending_call_id: str | None = None
    calls_made: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    mcp: McpEndpointInfo | None = None
    """Tool mode "mcp": the attempt's endpoint; the tools then come from there and are called there."""
    mcp_tools_loaded: bool = False
    usage: TurnUsage = field(default_factory=TurnUsage)
    """The current turn's model usage (reset at each turn, reported in the reply's metadata)."""


def _describe(error: BaseException) -> str:
    """Class and HTTP status only: provider messages can echo parts of credentials."""
    status = getattr(error, "status_code", None)
    return f"{type(error).__name__}" + (f" (HTTP {status})" if status else "")


def _log_retry(error: BaseException, retry: int, delay_s: float) -> None:
    logger.info("model call failed (%s), retry %d in %.2fs", _describe(error), retry, delay_s)


class _LazyMcpSession:
    """The attempt's MCP tools for one turn, connected on first use (a turn the model answers directly needs none).

    Every failure of the endpoint (connection, HTTP refusal, protocol error) is raised as :class:`McpToolsError`;
    a tool that ran and failed is not a failure here: its error text goes back to the model.
    """

    def __init__(self, connector: McpConnector, endpoint: McpEndpointInfo) -> None:
        self._connector = connector
        self._endpoint = endpoint
        self._stack = contextlib.AsyncExitStack()
        self._client: Client | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with contextlib.suppress(Exception):
            await self._stack.aclose()

    async def _connected(self) -> Client:
        if self._client is None:
            self._client = await self._stack.enter_async_context(self._connector.open(self._endpoint))
        return self._client

    async def list(self) -> list[Any]:
        """The endpoint's tools (MCP ``Tool`` objects)."""
        client = await self._connected()
        try:
            return list((await client.list_tools()).tools)
        except Exception as error:
            raise McpToolsError(f"listing tools: {describe_mcp_error(error)}") from error

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call one tool; its output (or its error text) as the model will read it."""
        client = await self._connected()
        try:
            result = await client.call_tool(name, arguments)
        except Exception as error:
            raise McpToolsError(f"calling {name}: {describe_mcp_error(error)}") from error
        return tool_result_text(result)


def _arguments_of(raw: str) -> dict[str, Any]:
    """The model's tool-call arguments as a dict; malformed JSON becomes ``{}`` (the tool then reports the error)."""
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


class LlmAgent:
    """The LLM-backed agent (a :class:`white_agent.server.TurnAgent`)."""

    card_name = "Arena LLM white agent"
    card_description = "Tool-calling customer-service agent over an OpenAI-compatible endpoint."

    def __init__(
        self,
        settings: LlmAgentSettings,
        *,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """``api_key`` overrides the environment variable (tests); ``http_client`` lets tests pass a transport."""
        key = api_key if api_key is not None else os.environ.get(settings.api_key_env)
        if not key:
            raise WhiteAgentConfigError(
                f"api_key_env: environment variable {settings.api_key_env} is not set (the llm agent needs an API "
                "key; local servers accept any non-empty value)"
            )
        self._settings = settings
        self._client = openai.AsyncOpenAI(
            api_key=key,
            base_url=settings.base_url,
            max_retries=0,
            timeout=settings.request_timeout_s,
            http_client=cast(Any, http_client),  # openai >= 3.5x types httpx2 but takes httpx clients too
        )
        self._contexts: BoundedContexts[Conversation] = BoundedContexts(
            settings.max_contexts, idle_s=settings.context_idle_s
        )
        self._mcp = McpConnector(timeout_s=settings.request_timeout_s)
        self._provider = ProviderLimiter(settings.provider_max_concurrency)  # shared by all conversations

    @property
    def contexts(self) -> BoundedContexts[Conversation]:
        """The per-context conversations (exposed for tests and diagnostics)."""
        return self._contexts

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        """Append the turn to the context's history, ask the model, answer with one action (and what it cost)."""
        conversation = self._contexts.get_or_create(context_id, lambda: Conversation(messages=[]))
        async with conversation.lock:
            conversation.usage = TurnUsage()
            answer = await self._reply(conversation, turn)
            metadata = conversation.usage.metadata(self._settings.model)
            return dataclasses.replace(answer, metadata=metadata) if metadata else answer

    async def _reply(self, conversation: Conversation, turn: GreenTurn) -> AgentReply:
        """One turn, the conversation's lock held."""
        if turn.kind == "first":
            conversation.mcp, conversation.mcp_tools_loaded = turn.mcp, False
        if conversation.mcp is not None:
            return await self._reply_over_mcp(conversation, conversation.mcp, turn)
        mark = len(conversation.messages)
        pending_before = conversation.pending_call_id
        self._append_turn(conversation, turn)
        try:
            message = await self._complete(conversation)
        except (openai.OpenAIError, httpx.HTTPError) as error:
            # Every endpoint failure becomes the agent's own failure report; the turn is undone.
            del conversation.messages[mark:]
            conversation.pending_call_id = pending_before
            logger.warning("model call failed for a context: %s", _describe(error))
            return AgentReply(
                f"The language model endpoint failed: {_describe(error)}; giving up after "
                f"{self._settings.max_retries + 1} attempt(s).",
                kind="task_failed",
            )
        return self._answer(conversation, message)

    async def _reply_over_mcp(
        self, conversation: Conversation, endpoint: McpEndpointInfo, turn: GreenTurn
    ) -> AgentReply:
        """Tool mode "mcp": run the model's tool calls on the attempt's endpoint until it answers with text."""
        mark = len(conversation.messages)
        self._append_turn(conversation, turn)
        conversation.pending_call_id = None
        try:
            async with _LazyMcpSession(self._mcp, endpoint) as tools:
                if not conversation.mcp_tools_loaded:
                    conversation.tools = openai_tools_from_mcp(await tools.list()) or None
                    conversation.mcp_tools_loaded = True
                calls = 0
                while True:
                    message = await self._complete(conversation)
                    tool_calls = list(message.tool_calls or [])
                    if not tool_calls:
                        text = message.content or ""
                        conversation.messages.append({"role": "assistant", "content": text})
                        return AgentReply(format_respond(text))
                    calls += len(tool_calls)
                    if calls > self._settings.max_tool_calls_per_turn:
                        return AgentReply(
                            f"Giving up: the model asked for more than {self._settings.max_tool_calls_per_turn} "
                            "tool calls without answering the customer.",
                            kind="task_failed",
                        )
                    entries = [self._call_entry(conversation, call) for call in tool_calls]
                    conversation.messages.append(
                        {"role": "assistant", "content": message.content or None, "tool_calls": entries}
                    )
                    for entry in entries:
                        function = entry["function"]
                        output = await tools.call(function["name"], _arguments_of(function["arguments"]))
                        conversation.messages.append({"role": "tool", "tool_call_id": entry["id"], "content": output})
        except (openai.OpenAIError, httpx.HTTPError) as error:
            del conversation.messages[mark:]
            logger.warning("model call failed for a context: %s", _describe(error))
            return AgentReply(
                f"The language model endpoint failed: {_describe(error)}; giving up after "
                f"{self._settings.max_retries + 1} attempt(s).",
                kind="task_failed",
            )
        except McpToolsError as error:
            del conversation.messages[mark:]
            logger.warning("MCP tool endpoint failed for a context: %s", error)
            return AgentReply(f"The attempt's MCP tool endpoint failed: {error}", kind="task_failed")

    @staticmethod
    def _call_entry(conversation: Conversation, call: Any) -> dict[str, Any]:
        """One tool call of the model as it is kept in the history (an id is made up when the model gave none)."""
        conversation.calls_made += 1
        return {
            "id": call.id or f"call_{conversation.calls_made}",
            "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments or "{}"},
        }

    def _append_turn(self, conversation: Conversation, turn: GreenTurn) -> None:
        if turn.kind == "first" or not conversation.messages:
            policy = turn.policy or ""
            system = f"{policy}\n\n{AGENT_INSTRUCTION}" if policy else AGENT_INSTRUCTION
            conversation.messages[:] = [{"role": "system", "content": system}]
            conversation.pending_call_id = None
            if turn.tools:
                tools = [t for t in (normalize_tool_schema(x) for x in turn.tools) if t is not None]
                conversation.tools = tools or None
            if turn.kind == "first":
                conversation.messages.append({"role": "user", "content": turn.content})
                return
        if turn.kind == "tool_result" and conversation.pending_call_id is not None:
            conversation.messages.append(
                {"role": "tool", "tool_call_id": conversation.pending_call_id, "content": turn.content}
            )
            conversation.pending_call_id = None
            return
        if conversation.pending_call_id is not None:
            # A user message while a tool call is unanswered: close the call so the history stays valid.
            conversation.messages.append(
                {"role": "tool", "tool_call_id": conversation.pending_call_id, "content": "(no result)"}
            )
            conversation.pending_call_id = None
        if turn.kind == "tool_result":  # no call to answer: keep it readable as text
            content = f"Tool call result:\n{turn.content}"
        elif turn.kind == "user":
            content = turn.content
        else:
            content = turn.text
        conversation.messages.append({"role": "user", "content": content})

    async def _complete(self, conversation: Conversation) -> Any:
        """One chat completion with retries on 429/5xx/connection errors."""
        kwargs: dict[str, Any] = {
            "model": self._settings.model,
            "messages": conversation.messages,
            "temperature": self._settings.temperature,
        }
        if conversation.tools:
            kwargs["tools"] = conversation.tools

        async def call() -> Any:
            completion = await self._provider.run(lambda: self._client.chat.completions.create(**kwargs))
            conversation.usage.add(getattr(completion, "usage", None))
            return completion.choices[0].message

        return await call_with_retries(
            call,
            max_retries=self._settings.max_retries,
            base_delay_s=self._settings.retry_base_delay_s,
            max_delay_s=self._settings.retry_max_delay_s,
            on_retry=_log_retry,
        )

    def _answer(self, conversation: Conversation, message: Any) -> AgentReply:
        tool_calls = list(message.tool_calls or [])
        if tool_calls:
            call = tool_calls[0]
            conversation.calls_made += 1
            call_id = call.id or f"call_{conversation.calls_made}"
            raw_arguments = call.function.arguments or "{}"
            arguments = _arguments_of(raw_arguments)
            conversation.messages.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.function.name, "arguments": raw_arguments},
                        }
                    ],
                }
            )
            conversation.pending_call_id = call_id
            return AgentReply(format_action(call.function.name, arguments))
        text = message.content or ""
        conversation.messages.append({"role": "assistant", "content": text})
        return AgentReply(format_respond(text))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
