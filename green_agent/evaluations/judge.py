"""Judges: an LLM judge over any OpenAI-compatible endpoint and the offline lexical judge, with one interface.

Contract shared by both (what every metric relies on):
- ``await judge.evaluate_many(prompt, inputs_list)`` returns one :class:`JudgeOutcome` per input, in order;
- an outcome is ``scored`` with an ``answer`` that validated against ``prompt.answer_model``, or ``unscored`` with a
  ``reason``. Callers must keep unscored items in their totals as unscored: never as 0, never dropped;
- every outcome carries :class:`JudgeInfo` (kind, model, prompt name/version/hash), so every number can say which
  judge produced it.

LLM judge behaviour:
- temperature 0 always (a connector's temperature is reported, not used: cached verdicts must be reproducible);
- structured output (``response_format`` JSON schema) unless ``use_structured_output`` is false, in which case the
  schema is spelled out in the prompt and the first JSON object of the answer is parsed; a server that rejects
  ``response_format`` with HTTP 400 is retried once in prompted mode;
- answers are validated with pydantic; an invalid answer is asked again once with the validation error, then the item
  is unscored ("answer did not match the schema");
- HTTP 429, 5xx, connection errors and timeouts are retried with exponential backoff (honouring Retry-After, capped),
  from one budget for all the calls of an item (:class:`green_agent.llm_retry.RetryBudget`); other HTTP errors (401,
  403, 404, other 400s) are not retried; either way the item ends unscored with the reason;
- verdicts are cached in SQLite (:mod:`green_agent.evaluations.judge_cache`) unless the cache is off; only scored
  verdicts are stored;
- the API key never appears in a reason (upstream error texts are redacted) or in a log line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from green_agent.evaluations.connectors import ResolvedConnector, redact
from green_agent.evaluations.judge_cache import JudgeCache, cache_key
from green_agent.evaluations.lexical import LEXICAL_VERSION, RULES, LexicalUnsupported
from green_agent.evaluations.prompts import JudgePrompt
from green_agent.llm_retry import RetryBudget, is_transient
from green_agent.provider_limits import ProviderLimits
from green_agent.text_safety import clean_json

if TYPE_CHECKING:
    import openai

logger = logging.getLogger(__name__)

JudgeKind = Literal["llm", "lexical"]
DEFAULT_CACHE_PATH = Path.home() / ".cache" / "arena" / "judge-cache.sqlite"
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*|\s*```$")


class JudgeInfo(BaseModel):
    """Which judge scored an item, with which prompt."""

    model_config = ConfigDict(frozen=True)

    kind: JudgeKind
    name: str
    """``lexical`` or ``<provider>/<model>``."""
    provider: str | None = None
    model: str | None = None
    prompt: str
    prompt_version: str
    prompt_hash: str
    structured_output: bool | None = None


class JudgeOutcome(BaseModel):
    """One judged item: a validated answer, or the reason it stayed unscored."""

    model_config = ConfigDict(frozen=True)

    status: Literal["scored", "unscored"]
    answer: dict[str, Any] | None = None
    reason: str | None = None
    judge: JudgeInfo
    cached: bool = False
    attempts: int = 0


class Judge(Protocol):
    """What metrics need from a judge."""

    kind: JudgeKind
    name: str

    async def evaluate_many(self, prompt: JudgePrompt, inputs: Sequence[Mapping[str, Any]]) -> list[JudgeOutcome]:
        """One outcome per input, in order."""
        ...

    def describe(self) -> dict[str, Any]:
        """Public description (never a key) for results."""
        ...


# --- lexical ---------------------------------------------------------------------------------------------------------

INLINE_BUDGET = 16_384
"""Characters (plus containers) up to which the lexical judge scores on the event loop instead of a thread."""


def _small(value: Any, budget: int) -> bool:
    """True when ``value`` holds at most ``budget`` characters and containers (stops walking once over)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            budget -= len(item)
        elif isinstance(item, Mapping):
            budget -= 1 + len(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            budget -= 1 + len(item)
            stack.extend(item)
        if budget < 0:
            return False
    return True


class LexicalJudge:
    """Deterministic keyword/overlap judge (see :mod:`green_agent.evaluations.lexical`); needs no key or network."""

    kind: JudgeKind = "lexical"
    name = "lexical"

    def _info(self, prompt: JudgePrompt) -> JudgeInfo:
        return JudgeInfo(
            kind="lexical",
            name="lexical",
            prompt=prompt.name,
            prompt_version=LEXICAL_VERSION,
            prompt_hash=LEXICAL_VERSION,
        )

    def _evaluate_sync(self, prompt: JudgePrompt, inputs: Sequence[Mapping[str, Any]]) -> list[JudgeOutcome]:
        info = self._info(prompt)
        rule = RULES.get(prompt.name)
        out: list[JudgeOutcome] = []
        for item in inputs:
            if rule is None:
                out.append(
                    JudgeOutcome(status="unscored", reason=f"lexical judge has no rule for {prompt.name}", judge=info)
                )
                continue
            try:
                answer = prompt.answer_model.model_validate(rule(item)).model_dump()
            except LexicalUnsupported as reason:
                out.append(JudgeOutcome(status="unscored", reason=str(reason), judge=info))
                continue
            out.append(JudgeOutcome(status="scored", answer=answer, judge=info, attempts=1))
        return out

    async def evaluate_many(self, prompt: JudgePrompt, inputs: Sequence[Mapping[str, Any]]) -> list[JudgeOutcome]:
        """Score every input; in a worker thread unless the batch is a few short items (tokenising large texts is
        CPU work, and an agent's reply may be a megabyte)."""
        if len(inputs) <= 8 and _small(inputs, INLINE_BUDGET):
            return self._evaluate_sync(prompt, inputs)
        return await asyncio.to_thread(self._evaluate_sync, prompt, list(inputs))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "lexical",
            "name": "lexical",
            "version": LEXICAL_VERSION,
            "method": "keyword containment and token overlap (offline, deterministic)",
        }


# --- LLM -------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How hard the LLM judge tries before leaving an item unscored."""

    max_retries: int = 3
    """Extra attempts after a 429 / 5xx / connection error / timeout."""
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    max_invalid_answers: int = 2
    """Attempts that may return an answer failing the schema before the item is unscored."""
    timeout_s: float = 60.0


def extract_json_object(text: str) -> Any:
    """The JSON object in a model's text answer: the whole text, a fenced block, or the outermost ``{...}``."""
    stripped = _FENCE.sub("", text.strip()).strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    start, end = stripped.find("{"), stripped.rfind("}")
    if start != -1 and end > start:
        return json.loads(stripped[start : end + 1])
    raise ValueError("no JSON object in the answer")


def _describe_error(error: Exception) -> str:
    import openai  # only the LLM judge gets here; importing openai at the top would cost every start-up ~0.7 s

    if isinstance(error, openai.APIStatusError):
        message = ""
        body = getattr(error, "body", None)
        if isinstance(body, Mapping):
            inner = body.get("error", body)
            if isinstance(inner, Mapping):
                message = str(inner.get("message") or "")
        return f"HTTP {error.status_code}" + (f": {message[:300]}" if message else "")
    if isinstance(error, openai.APITimeoutError):
        return "request timed out"
    if isinstance(error, openai.APIConnectionError):
        return f"connection failed ({type(error.__cause__).__name__ if error.__cause__ else 'network error'})"
    return f"{type(error).__name__}: {str(error)[:300]}"


def _mentions_response_format(error: openai.APIStatusError) -> bool:
    text = _describe_error(error).lower()
    return any(word in text for word in ("response_format", "json_schema", "structured", "response format"))


@dataclass
class _Attempt:
    budget: RetryBudget
    """Counts every call for the item (its ``calls`` are the outcome's attempts) and the transient retries spent."""
    invalid: int = 0
    structured: bool = True
    notes: list[str] = field(default_factory=list)


class LlmJudge:
    """The LLM judge over one OpenAI-compatible endpoint (see the module docstring for its behaviour)."""

    kind: JudgeKind = "llm"

    def __init__(
        self,
        connector: ResolvedConnector,
        *,
        use_structured_output: bool = True,
        cache: JudgeCache | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 4,
        http_client: httpx.AsyncClient | None = None,
        providers: ProviderLimits | None = None,
    ) -> None:
        """``providers``: the green agent's provider limits (its calls share the endpoint's adaptive cap with every
        other judge and LLM user of that provider; green_agent/provider_limits.py); None: this judge's own
        ``max_concurrency`` only."""
        self.connector = connector
        self.name = f"{connector.provider}/{connector.model}"
        self.use_structured_output = use_structured_output
        self.cache = cache
        self.retry = retry or RetryPolicy()
        self._semaphore = asyncio.Semaphore(max(1, max_concurrency))
        self._limiter = providers.limiter(connector.base_url, connector.model) if providers is not None else None
        import openai  # lazily: see _describe_error

        self._client = openai.AsyncOpenAI(
            api_key=connector.api_key.get_secret_value(),
            base_url=connector.base_url,
            max_retries=0,  # RetryBudget retries: one budget per item, and it knows which failures leave it unscored
            timeout=self.retry.timeout_s,
            http_client=cast(Any, http_client),  # openai >= 3.5x types httpx2 but takes httpx clients too
        )
        self._model_id = f"{connector.provider}:{connector.model}@{connector.base_url}"
        self._owns_http = http_client is None

    def _info(self, prompt: JudgePrompt, structured: bool) -> JudgeInfo:
        return JudgeInfo(
            kind="llm",
            name=self.name,
            provider=self.connector.provider,
            model=self.connector.model,
            prompt=prompt.name,
            prompt_version=str(prompt.version),
            prompt_hash=prompt.hash,
            structured_output=structured,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "llm",
            "name": self.name,
            **self.connector.public(),
            "temperature": 0.0,
            "structured_output": self.use_structured_output,
            "cache": self.cache is not None,
        }

    async def aclose(self) -> None:
        """Close the HTTP client, unless the caller supplied it (the openai SDK would close that one too)."""
        if self._owns_http:
            await self._client.close()

    async def evaluate_many(self, prompt: JudgePrompt, inputs: Sequence[Mapping[str, Any]]) -> list[JudgeOutcome]:
        """Cached answers first, then the misses judged concurrently (bounded), then the new verdicts stored."""
        items = [dict(i) for i in inputs]
        if len(items) > 8:  # canonical JSON + sha256 per item: CPU work for large batches, kept off the event loop
            keys = await asyncio.to_thread(self._keys, prompt, items)
        else:
            keys = self._keys(prompt, items)
        cached: dict[str, dict[str, Any]] = {}
        if self.cache is not None:
            try:
                cached = await self.cache.get_many(keys)
            except Exception as error:
                logger.warning("judge cache read failed (%s); judging without it", type(error).__name__)
        results: list[JudgeOutcome | None] = [None] * len(items)
        pending: list[int] = []
        for index, key in enumerate(keys):
            hit = cached.get(key)
            if hit is not None:
                try:
                    answer = prompt.answer_model.model_validate(hit).model_dump()
                except ValidationError:
                    pending.append(index)
                    continue
                results[index] = JudgeOutcome(
                    status="scored", answer=answer, judge=self._info(prompt, self.use_structured_output), cached=True
                )
            else:
                pending.append(index)
        judged = await asyncio.gather(*(self._evaluate_one(prompt, items[i]) for i in pending))
        rows = []
        for index, outcome in zip(pending, judged, strict=True):
            results[index] = outcome
            if outcome.status == "scored" and outcome.answer is not None:
                rows.append((keys[index], self._model_id, prompt.hash, outcome.answer))
        if self.cache is not None and rows:
            try:
                await self.cache.put_many(rows)
            except Exception as error:
                logger.warning("judge cache write failed (%s)", type(error).__name__)
        return [r for r in results if r is not None]

    def _keys(self, prompt: JudgePrompt, items: Sequence[Mapping[str, Any]]) -> list[str]:
        return [cache_key(self._model_id, prompt.hash, item) for item in items]

    def _unscored(self, prompt: JudgePrompt, state: _Attempt, reason: str) -> JudgeOutcome:
        full = reason if not state.notes else f"{reason} ({'; '.join(state.notes)})"
        return JudgeOutcome(
            status="unscored",
            reason=redact(full, self.connector.api_key),
            judge=self._info(prompt, state.structured),
            attempts=state.budget.calls,
        )

    async def _call(self, prompt: JudgePrompt, messages: list[dict[str, str]], structured: bool) -> Any:
        kwargs: dict[str, Any] = {}
        if structured:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.name, "schema": prompt.json_schema, "strict": True},
            }
        async with self._semaphore:
            return await self._client.chat.completions.create(
                model=self.connector.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=0.0,
                **kwargs,
            )

    async def _evaluate_one(self, prompt: JudgePrompt, inputs: dict[str, Any]) -> JudgeOutcome:
        import openai  # lazily: see _describe_error (already loaded by __init__ here)

        budget = RetryBudget(
            max_retries=self.retry.max_retries,
            backoff_base_s=self.retry.backoff_base_s,
            backoff_max_s=self.retry.backoff_max_s,
            on_retry=self._log_retry,
            limiter=self._limiter,
        )
        state = _Attempt(budget=budget, structured=self.use_structured_output)
        correction: str | None = None
        while True:
            messages = [
                {"role": "system", "content": prompt.instructions},
                {"role": "user", "content": prompt.user_message(inputs, prompted=not state.structured)},
            ]
            if correction:
                messages.append({"role": "user", "content": correction})
            try:
                response = await budget.call(functools.partial(self._call, prompt, messages, state.structured))
            except openai.APIStatusError as error:
                if error.status_code == 400 and state.structured and _mentions_response_format(error):
                    state.structured = False
                    state.notes.append("endpoint rejected structured output; used the prompted JSON fallback")
                    continue
                verb = "unavailable" if is_transient(error) else "rejected the request"
                return self._unscored(
                    prompt, state, f"judge {verb} after {budget.calls} attempt(s): {_describe_error(error)}"
                )
            except openai.APIConnectionError as error:
                return self._unscored(
                    prompt, state, f"judge unreachable after {budget.calls} attempt(s): {_describe_error(error)}"
                )
            except openai.OpenAIError as error:
                return self._unscored(prompt, state, f"judge call failed: {_describe_error(error)}")

            problem, answer = self._parse(prompt, response)
            if answer is not None:
                return JudgeOutcome(
                    status="scored", answer=answer, judge=self._info(prompt, state.structured), attempts=budget.calls
                )
            state.invalid += 1
            if state.invalid >= self.retry.max_invalid_answers:
                return self._unscored(
                    prompt, state, f"judge answer did not match the schema after {state.invalid} tries: {problem}"
                )
            correction = (
                f"Your previous answer was not valid ({problem}). Answer again with only the JSON object "
                "required by the schema."
            )

    def _parse(self, prompt: JudgePrompt, response: Any) -> tuple[str, dict[str, Any] | None]:
        try:
            choice = response.choices[0]
        except (AttributeError, IndexError, TypeError):
            return "no choices in the completion", None
        message = choice.message
        refusal = getattr(message, "refusal", None)
        if refusal:
            return f"the model refused: {str(refusal)[:200]}", None
        content = message.content or ""
        if choice.finish_reason == "length":
            return "the answer was cut off (finish_reason length)", None
        try:
            raw = extract_json_object(content)
        except (ValueError, RecursionError):  # RecursionError: a hostile answer nested thousands deep
            return f"not JSON: {clean_json(content[:120])!r}", None
        try:  # a model's answer may escape lone surrogates: cleaned so caches and responses can store it
            return "", prompt.answer_model.model_validate(clean_json(raw)).model_dump()
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(root)"
            return f"{where}: {first['msg']}", None

    def _log_retry(self, error: Exception, retry: int, delay_s: float) -> None:
        logger.debug(
            "judge %s: %s; retry %d in %.2f s",
            self.name,
            redact(_describe_error(error), self.connector.api_key),
            retry,
            delay_s,
        )


@dataclass
class JudgeSettings:
    """Operator-side judge configuration (never taken from a request).

    ``offline`` makes every evaluation use the lexical judge, even when a request names an LLM connector (the
    connector is still validated, so errors stay the same); results then say the lexical judge scored them.
    ``base_url_overrides`` maps a provider name (groq, openai, gemini, ollama) to another OpenAI-compatible URL.
    """

    cache_path: Path | None = DEFAULT_CACHE_PATH
    base_url_overrides: Mapping[str, str] = field(default_factory=dict)
    allow_base_url: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_concurrency: int = 4
    offline: bool = False
    http_client: httpx.AsyncClient | None = None
    environ: Mapping[str, str] | None = None
    providers: ProviderLimits | None = None
    """The green agent's provider limits, shared with its battles (set by the evaluations component from the app's
    registry); None: each judge bounded by ``max_concurrency`` only."""
