"""The ``finance`` white agent: answers simple finance questions with four local tools and reports the tools it used.

Why it exists: the CSV evaluation (``arena eval-csv``) needs an agent under test that runs offline and
deterministically, and a reference for the trace convention every agent should follow: the reply is the answer
text plus a data part ``{"tool_calls": [{"name", "arguments", "result"}, ...]}`` listing the calls in order.

Modes:
- ``scripted`` (kind ``finance``): a fixed router reads the question (tickers or company names; price, profile,
  ratio and investment wording; amounts, percentages and years) and calls the matching tools, then writes the answer
  from templates. No network, no randomness: the same question always gives the same calls and text.
- ``llm`` (kind ``finance-llm``): an OpenAI-compatible model with native tool calling decides; the agent executes
  the tools itself (up to ``max_tool_rounds`` rounds) and returns the model's final text with the same data part.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx
import openai
from pydantic import BaseModel, ConfigDict, Field

from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS, BoundedContexts
from white_agent.errors import WhiteAgentConfigError
from white_agent.finance.data import COMPANIES
from white_agent.finance.tools import TOOL_SCHEMAS, execute_tool
from white_agent.model_retry import call_with_retries
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply

logger = logging.getLogger(__name__)

HELP_TEXT = (
    "I can look up stock prices, company profiles and financial ratios (P/E, price-to-book, margins, "
    "debt-to-equity, ROE) for " + ", ".join(sorted(COMPANIES)) + ", and compute compound investment returns."
)
SYSTEM_PROMPT = (
    "You are a concise financial assistant. Use the tools for every figure you state; never invent "
    "numbers. Quote figures exactly as the tools return them. " + HELP_TEXT
)

_INTENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "calculate_financial_ratios",
        re.compile(
            r"\b(ratios?|p/?e|price[- ]to[- ](?:earnings|book)|margins?|debt[- ]to[- ]equity|return on equity|roe|"
            r"valuation)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "get_stock_price",
        re.compile(r"\b(price|prices|trading|trades?|quote|share price|stock price|cost)\b", re.IGNORECASE),
    ),
    (
        "get_company_info",
        re.compile(
            r"\b(company|sector|industry|employees?|headquarter(?:s|ed)?|based|founded|market cap(?:italization)?|"
            r"profile|about|who)\b",
            re.IGNORECASE,
        ),
    ),
)
_INVEST = re.compile(r"\b(invest(?:ed|ing|ment)?|compound(?:ed|ing)?|grow|returns?|worth)\b", re.IGNORECASE)
_MONEY = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)\s*(k|thousand|m|million)?", re.IGNORECASE)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent)", re.IGNORECASE)
_YEARS = re.compile(r"(\d+(?:\.\d+)?)\s*(?:years?|yrs?)\b", re.IGNORECASE)


def find_tickers(text: str) -> list[str]:
    """Known tickers and company names in order of appearance (each once)."""
    hits: list[tuple[int, str]] = []
    for ticker, company in COMPANIES.items():
        for match in re.finditer(rf"\b{ticker}\b", text):
            hits.append((match.start(), ticker))
        for alias in company.aliases:
            for match in re.finditer(rf"\b{re.escape(alias)}\b", text, re.IGNORECASE):
                hits.append((match.start(), ticker))
    ordered: list[str] = []
    for _pos, ticker in sorted(hits):
        if ticker not in ordered:
            ordered.append(ticker)
    return ordered


def _investment_args(text: str) -> dict[str, Any] | None:
    money, rate, years = _MONEY.search(text), _RATE.search(text), _YEARS.search(text)
    if not (money and rate and years):
        return None
    principal = float(money.group(1).replace(",", ""))
    scale = (money.group(2) or "").lower()
    principal *= 1000 if scale in ("k", "thousand") else 1_000_000 if scale in ("m", "million") else 1
    compounding = next((c for c in ("monthly", "quarterly", "daily") if c in text.lower()), "annual")
    args: dict[str, Any] = {
        "principal": _plain(principal),
        "annual_rate": _plain(float(rate.group(1))),
        "years": _plain(float(years.group(1))),
    }
    if compounding != "annual":
        args["compounding"] = compounding
    return args


def _plain(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def route(question: str) -> list[tuple[str, dict[str, Any]]]:
    """The scripted mode's tool calls for a question (possibly none)."""
    if _INVEST.search(question):
        args = _investment_args(question)
        if args is not None:
            return [("calculate_investment_returns", args)]
    tickers = find_tickers(question)
    if not tickers:
        return []
    intents = sorted(((m.start(), name) for name, pattern in _INTENTS if (m := pattern.search(question))))
    names = [name for _pos, name in intents] or ["get_company_info"]
    return [(name, {"ticker": ticker}) for name in names for ticker in tickers]


def _money(value: float) -> str:
    for limit, suffix in ((1e12, " trillion"), (1e9, " billion")):
        if abs(value) >= limit:
            return f"${value / limit:,.2f}{suffix}"
    return f"${value:,.2f}"


def describe_result(name: str, result: dict[str, Any]) -> str:
    """One sentence for one tool result (the scripted mode's answer text)."""
    if "error" in result:
        return f"I could not complete {name}: {result['error']}."
    if name == "get_stock_price":
        return (
            f"{result['ticker']} is trading at ${result['price']:,.2f} {result['currency']} "
            f"({result['change_pct']:+.2f}% on the day, as of {result['as_of']})."
        )
    if name == "get_company_info":
        return (
            f"{result['name']} ({result['ticker']}) is in the {result['sector']} sector ({result['industry']}), "
            f"headquartered in {result['headquarters']}, founded in {result['founded']}, with "
            f"{result['employees']:,} employees and a market capitalization of {_money(result['market_cap'])}."
        )
    if name == "calculate_financial_ratios":
        return (
            f"{result['ticker']} ratios: P/E {result['pe_ratio']:.2f}, price-to-book {result['price_to_book']:.2f}, "
            f"net margin {result['net_margin_pct']:.2f}%, debt-to-equity {result['debt_to_equity']:.2f}, "
            f"return on equity {result['return_on_equity_pct']:.2f}%."
        )
    if name == "calculate_investment_returns":
        return (
            f"Investing ${result['principal']:,.2f} at {result['annual_rate']:g}% per year for "
            f"{result['years']:g} years with {result['compounding']} compounding grows to "
            f"${result['final_value']:,.2f}, a total return of ${result['total_return']:,.2f} "
            f"({result['total_return_pct']:.2f}%)."
        )
    return json.dumps(result)


class FinanceLlmSettings(BaseModel):
    """The llm mode's endpoint. ``api_key_env`` names the variable holding the key (never the key itself)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tool_rounds: int = Field(default=5, ge=1, le=20)
    max_retries: int = Field(default=3, ge=0, le=10)
    retry_base_delay_s: float = Field(default=1.0, ge=0.0)
    request_timeout_s: float = Field(default=60.0, gt=0.0)


@dataclass
class _History:
    messages: list[dict[str, Any]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class FinanceAgent:
    """The finance agent (a :class:`white_agent.server.TurnAgent`) in ``scripted`` or ``llm`` mode."""

    card_name = "Arena finance white agent"
    card_description = (
        "Finance demo agent: stock prices, company profiles, financial ratios and investment returns "
        "from local data; reports its tool calls as a tool_calls data part."
    )

    def __init__(
        self,
        mode: Literal["scripted", "llm"] = "scripted",
        *,
        llm: FinanceLlmSettings | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
        idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        if mode not in ("scripted", "llm"):
            raise WhiteAgentConfigError(f"mode: must be 'scripted' or 'llm', got {mode!r}")
        self.mode = mode
        self._settings = llm or FinanceLlmSettings()
        self._client: openai.AsyncOpenAI | None = None
        self._contexts: BoundedContexts[_History] = BoundedContexts(max_contexts, idle_s=idle_s)
        if mode == "llm":
            key = api_key if api_key is not None else os.environ.get(self._settings.api_key_env)
            if not key:
                raise WhiteAgentConfigError(
                    f"api_key_env: environment variable {self._settings.api_key_env} is not "
                    "set (the finance-llm agent needs an API key)"
                )
            self._client = openai.AsyncOpenAI(
                api_key=key,
                base_url=self._settings.base_url,
                max_retries=0,
                timeout=self._settings.request_timeout_s,
                http_client=cast(Any, http_client),  # openai >= 3.5x types httpx2 but takes httpx clients too
            )

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        """Answer one question; the data part lists the tool calls made for it."""
        question = turn.content.strip() or turn.text.strip()
        if self.mode == "scripted":
            return self._scripted(question)
        return await self._llm(context_id, question)

    def _scripted(self, question: str) -> AgentReply:
        calls: list[dict[str, Any]] = [
            {"name": name, "arguments": args, "result": execute_tool(name, args)} for name, args in route(question)
        ]
        if not calls:
            return AgentReply(HELP_TEXT, data={"tool_calls": []})
        text = " ".join(describe_result(c["name"], c["result"]) for c in calls)
        return AgentReply(f"{text} (Demo data.)", data={"tool_calls": calls})

    async def _llm(self, context_id: str, question: str) -> AgentReply:
        assert self._client is not None
        history = self._contexts.get_or_create(context_id, _History)
        async with history.lock:
            if not history.messages:
                history.messages.append({"role": "system", "content": SYSTEM_PROMPT})
            mark = len(history.messages)
            history.messages.append({"role": "user", "content": question})
            calls: list[dict[str, Any]] = []
            try:
                for _round in range(self._settings.max_tool_rounds):
                    message = await self._complete(history.messages)
                    if not message.tool_calls:
                        text = message.content or ""
                        history.messages.append({"role": "assistant", "content": text})
                        return AgentReply(text, data={"tool_calls": calls})
                    history.messages.append(
                        {
                            "role": "assistant",
                            "content": message.content,
                            "tool_calls": [
                                {
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                                }
                                for c in message.tool_calls
                            ],
                        }
                    )
                    for call in message.tool_calls:
                        try:
                            arguments = json.loads(call.function.arguments or "{}")
                        except ValueError:
                            arguments = {}
                            result: dict[str, Any] = {"error": "arguments were not valid JSON"}
                        else:
                            result = (
                                execute_tool(call.function.name, arguments)
                                if isinstance(arguments, dict)
                                else {"error": "arguments must be a JSON object"}
                            )
                        calls.append({"name": call.function.name, "arguments": arguments, "result": result})
                        history.messages.append(
                            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                        )
                text = "I could not finish within the tool-call limit."
                history.messages.append({"role": "assistant", "content": text})
                return AgentReply(text, data={"tool_calls": calls})
            except (openai.OpenAIError, httpx.HTTPError) as error:
                del history.messages[mark:]
                status = getattr(error, "status_code", None)
                logger.warning("finance-llm model call failed: %s", type(error).__name__)
                return AgentReply(
                    f"The language model endpoint failed: {type(error).__name__}"
                    + (f" (HTTP {status})" if status else ""),
                    kind="task_failed",
                )

    async def _complete(self, messages: list[dict[str, Any]]) -> Any:
        assert self._client is not None
        client = self._client

        async def call() -> Any:
            response = await client.chat.completions.create(
                model=self._settings.model,
                messages=messages,  # type: ignore[arg-type]
                tools=TOOL_SCHEMAS,  # type: ignore[arg-type]
                temperature=self._settings.temperature,
            )
            return response.choices[0].message

        # Uncapped backoff and no Retry-After, as this agent has always done.
        return await call_with_retries(
            call,
            max_retries=self._settings.max_retries,
            base_delay_s=self._settings.retry_base_delay_s,
            honour_retry_after=False,
        )

    async def aclose(self) -> None:
        """Close the model client (llm mode)."""
        if self._client is not None:
            await self._client.close()
