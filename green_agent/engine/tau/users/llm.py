"""The LLM-played customer, over any OpenAI-compatible endpoint, prompted the way tau2 prompts its user simulator.

Why not tau2's ``UserSimulator``: it is synchronous and goes through litellm; the green agent serves many attempts
on one event loop. This class keeps tau2's behaviour where it matters for comparable results:

* system prompt = tau2's user-simulation guidelines read from the installed package data (the ``_tools`` variant
  when the user has tools, i.e. telecom with an environment) followed by the task's user scenario (persona and
  instructions, rendered by tau2's own ``str(task.user_scenario)``) inside ``<scenario>`` tags, laid out as tau2
  lays it out;
* roles flipped: the agent's messages reach the LLM as ``user`` messages and the customer's own messages as
  ``assistant`` messages; the conversation starts with tau2's greeting "Hi! How can I help you today?";
* stop tokens ``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###`` end the conversation;
* telecom: the user's tool calls run on the attempt's environment (``requestor="user"``, recorded there) and their
  outputs go back to the LLM, until it answers with text.

Failures: 429, 408/409, 5xx, timeouts, connection errors and empty answers are retried with exponential backoff
(``Retry-After`` honoured, capped; :class:`green_agent.llm_retry.RetryBudget`) up to ``config.max_retries`` times,
then :class:`UserSimulatorError`; other HTTP errors (bad request, authentication, unknown model) fail at once. The
API key is never logged, and any echo of it in an error message from the server is redacted.

Usage: every completion's ``usage`` (tokens, and ``cost`` when the provider sends one) is counted in
:attr:`LLMUser.usage`; the attempt prices it and reports it (green_agent/engine/costs.py).
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import openai
from openai import AsyncOpenAI

from green_agent.engine.config import UserSimulatorConfig
from green_agent.engine.costs import UsageMeter, provider_usage
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users.base import UserSimulatorError, UserTurn
from green_agent.llm_retry import CallLimiter, RetryBudget, is_transient

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from green_agent.engine.tau.environment import AttemptEnvironment

log = logging.getLogger(__name__)

GREETING = "Hi! How can I help you today?"  # tau2's orchestrator's first agent message
MAX_TOOL_ROUNDS = 12
"""Tool calls the user may make in a row before it must say something (a runaway loop is an infrastructure error)."""

_RETRY_STATUS = frozenset({408, 409, 429})
_KEY_LIKE = re.compile(r"\bsk-[-_A-Za-z0-9*.]{4,}")  # OpenAI-style keys, even masked ones ("sk-abc***xyz")


class _EmptyAnswer(Exception):
    """The endpoint answered with neither text nor tool calls."""


def _transient(error: BaseException) -> bool:
    """What the user simulator retries: connection errors, timeouts, 408, 409, 429, 5xx, and empty answers."""
    return isinstance(error, _EmptyAnswer) or is_transient(error, statuses=_RETRY_STATUS)


@lru_cache(maxsize=2)
def _guidelines(use_tools: bool) -> str:
    quiet_tau2()
    from tau2.utils import DATA_DIR

    name = "simulation_guidelines_tools.md" if use_tools else "simulation_guidelines.md"
    text: str = (DATA_DIR / "tau2" / "user_simulator" / name).read_text(encoding="utf-8")
    return text


def user_system_prompt(task: Task, *, use_tools: bool) -> str:
    """tau2's user-simulator system prompt for ``task``: guidelines, then the scenario in ``<scenario>`` tags."""
    return f"{_guidelines(use_tools)}\n\n<scenario>\n{task.user_scenario}\n</scenario>"


def _name(call: Any) -> str:
    function = getattr(call, "function", None)  # custom (non-function) tool calls have none
    return str(getattr(function, "name", "") or "")


def _arguments_text(call: Any) -> str:
    function = getattr(call, "function", None)
    return str(getattr(function, "arguments", "") or "")


class LLMUser:
    """A customer played by an LLM for one attempt. Not shared: it holds the attempt's conversation."""

    def __init__(
        self,
        ref: TaskRef,
        config: UserSimulatorConfig,
        *,
        api_key: str,
        environment: AttemptEnvironment | None = None,
        client: AsyncOpenAI | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        limiter: CallLimiter | None = None,
    ) -> None:
        """``client``: share one across attempts if you like (then it is not closed here); otherwise one is made
        from ``config.base_url``, ``api_key`` and ``config.request_timeout_s`` with the client's own retries off.
        ``limiter``: the provider's limiter shared with the other attempts and battles (every try runs under it;
        green_agent/provider_limits.py); None: no cap."""
        if not api_key:
            raise UserSimulatorError(f"no API key for the llm user simulator (set {config.api_key_env})")
        self._ref = ref
        self._config = config
        self._key = api_key
        self._environment = environment
        self._tools: list[dict[str, Any]] = list(environment.user_tools) if environment is not None else []
        self._owns_client = client is None
        self._closed = False
        self._client = client or AsyncOpenAI(
            api_key=api_key, base_url=config.base_url, max_retries=0, timeout=config.request_timeout_s
        )
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._limiter = limiter
        self._system = user_system_prompt(ref.task, use_tools=bool(self._tools))
        self._history: list[dict[str, Any]] = []
        self._endpoint = urlsplit(str(self._client.base_url)).netloc or str(self._client.base_url)
        self.usage = UsageMeter()
        """Every completion received, with its ``usage`` (the attempt prices it: green_agent/engine/costs.py)."""

    @property
    def system_prompt(self) -> str:
        """The system prompt sent with every request."""
        return self._system

    async def opening(self) -> UserTurn:
        """The customer's answer to tau2's greeting."""
        return await self._respond_to(GREETING)

    async def reply(self, agent_message: str) -> UserTurn:
        """The customer's answer to the agent's message."""
        return await self._respond_to(agent_message)

    async def aclose(self) -> None:
        """Close the HTTP client if this user made it. Idempotent; called by itself after a stop token."""
        if self._owns_client and not self._closed:
            self._closed = True
            await self._client.close()

    async def _respond_to(self, agent_text: str) -> UserTurn:
        self._history.append({"role": "user", "content": agent_text})
        for _ in range(MAX_TOOL_ROUNDS + 1):
            message = await self._complete()
            calls = list(message.tool_calls or []) if self._environment is not None and self._tools else []
            if calls:  # any text next to tool calls is dropped: tau2's guidelines say "not both at the same time"
                await self._run_tools(calls)
                continue
            text = message.content or ""
            if not text.strip():
                raise UserSimulatorError(
                    f"the user simulator ({self._config.model}) answered with tool calls but this user has no tools"
                )
            self._history.append({"role": "assistant", "content": text})
            turn = UserTurn.from_text(text)
            if turn.stop:  # the conversation is over: release the connection even if nobody calls aclose()
                await self.aclose()
            return turn
        raise UserSimulatorError(
            f"the user simulator ({self._config.model}) made tool calls {MAX_TOOL_ROUNDS} times in a row "
            "without answering the agent"
        )

    async def _run_tools(self, calls: list[Any]) -> None:
        assert self._environment is not None
        self._history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": _name(call), "arguments": _arguments_text(call)},
                    }
                    for call in calls
                ],
            }
        )
        for call in calls:
            try:
                arguments = json.loads(_arguments_text(call) or "{}")
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict) and _name(call):
                outcome = await self._environment.call_tool(_name(call), arguments, requestor="user", call_id=call.id)
                content = outcome.content
            else:
                content = "Error: a tool call needs a function name and a JSON object of arguments"
            self._history.append({"role": "tool", "tool_call_id": call.id, "content": content})

    def _request(self) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._config.model,
            "messages": [{"role": "system", "content": self._system}, *self._history],
            "temperature": self._config.temperature,
        }
        if self._config.seed is not None:
            request["seed"] = self._config.seed
        if self._tools:
            request["tools"] = self._tools
            request["tool_choice"] = "auto"
        return request

    async def _complete(self) -> Any:
        """One chat completion with retries; returns the choice's message (text or tool calls, never empty)."""
        budget = RetryBudget(
            max_retries=self._config.max_retries,
            backoff_base_s=self._backoff_base_s,
            backoff_max_s=self._backoff_max_s,
            transient=_transient,
            retry_after="instead",
            on_retry=self._log_retry,
            limiter=self._limiter,
        )
        try:
            return await budget.call(self._answer)
        except (openai.OpenAIError, _EmptyAnswer) as error:
            if _transient(error):  # the retries ran out: the provider's failure (an infrastructure error)
                limited = f" ({budget.rate_limited} rate limited)" if budget.rate_limited else ""
                raise UserSimulatorError(
                    f"the user simulator ({self._config.model} at {self._endpoint}) failed after "
                    f"{budget.calls} tries{limited}: {self._problem(error)}"
                ) from None
            if isinstance(error, openai.APIStatusError):
                raise UserSimulatorError(self._describe(f"HTTP {error.status_code}", error)) from None
            raise UserSimulatorError(self._describe("client error", error)) from None
        finally:
            self.usage.rate_limited += budget.rate_limited
            self.usage.retries += budget.retries

    async def _answer(self) -> Any:
        """One request; the choice's message, or :class:`_EmptyAnswer` (retried like a server error)."""
        response = await self._client.chat.completions.create(**self._request())
        self.usage.record(provider_usage(getattr(response, "usage", None)))  # empty answers were billed too
        message = response.choices[0].message if response.choices else None
        if message is not None and ((message.content or "").strip() or message.tool_calls):
            return message
        raise _EmptyAnswer

    def _log_retry(self, error: Exception, retry: int, delay_s: float) -> None:
        log.info(
            "user simulator %s at %s: %s; retry %d/%d in %.2f s",
            self._config.model,
            self._endpoint,
            self._problem(error),
            retry,
            self._config.max_retries,
            delay_s,
        )

    def _problem(self, error: BaseException) -> str:
        """A transient failure as the logs and the final error name it."""
        if isinstance(error, openai.APIStatusError):
            return f"HTTP {error.status_code}: {self._detail(error)}"
        if isinstance(error, _EmptyAnswer):
            return "an empty answer"
        return type(error).__name__

    def _describe(self, what: str, error: Exception) -> str:
        return f"the user simulator ({self._config.model} at {self._endpoint}) failed: {what}: {self._detail(error)}"

    def _detail(self, error: Exception) -> str:
        """The server's error message (or the exception's), with anything key-like redacted, at most 300 chars."""
        body = getattr(error, "body", None)
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            body = body["error"]
        server_message = body.get("message") if isinstance(body, dict) else None
        detail = str(server_message or getattr(error, "message", None) or error)
        if self._key:
            detail = detail.replace(self._key, "[redacted]")
        return _KEY_LIKE.sub("[redacted]", detail)[:300]
