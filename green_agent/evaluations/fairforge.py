"""Fair-Forge-compatible ``/run``: recorded conversations judged per interaction, a conversation as one trial.

Request (the seed's Agentic Lambda fields): ``connector`` {class_path, params{model, api_key, temperature}},
``datasets`` (each one complete conversation: session_id, assistant_id, language, context, conversation[] of
interactions qa_id / query / assistant / ground_truth_assistant / agentic{tools_used[], final_answer_uses_tools} /
ground_truth_agentic{expected_tools[], tool_sequence_matters}) and ``config`` (threshold 0.7, tool_threshold 0.75,
tool_weights 0.25 each, use_structured_output, verbose, k 3). Arena adds two optional config fields: ``judge``
("llm" or "lexical") and ``cache`` (false turns the verdict cache off for this request).

Semantics (the seed's, with the harness's fixes):
- each interaction's answer is judged against its ground truth (score in [0, 1]); it is correct when score >=
  threshold. A judge failure leaves the interaction UNSCORED with the reason;
- a conversation is correct when all its interactions are correct, incorrect when any scored interaction is
  incorrect, and UNSCORED otherwise (some interaction could not be judged and none failed). Unscored conversations
  are infrastructure errors: reported and counted, left out of n, never counted as failures or dropped;
- tool correctness per interaction with ground_truth_agentic comes from
  :func:`green_agent.statistics.fair_forge_tool_correctness` (duplicates matched optimally, sequence by relative order,
  "expected tools but none used" scores 0 rather than null); as in the seed it is reported, not part of the
  conversation's correctness;
- across conversations (n scored, c correct): pass@k and pass^k are the unbiased estimators of the metrics library,
  null when n < k with a warning; the seed's plug-in forms 1-(1-c/n)^k and (c/n)^k are given beside them, labelled
  as projections; the interpretation is :func:`green_agent.statistics.interpret` at that k.

Errors (the seed's exact messages, in the seed's order): "No connector configuration provided",
"connector.class_path is required", "Failed to create LLM connector: ...", "No datasets provided",
"No qa_ids found in datasets", "Agentic evaluation failed: ...". Messages never contain the API key.

Bounds (:class:`RunLimits`, given by the server; the CLI scores local files unbounded): number of conversations,
interactions per conversation and in total, tool calls per interaction, characters per text field and per id. A
request over a bound is refused before any scoring with HTTP 413 and ``{"success": false, "error": ..., "field":
"datasets[3].conversation[0].query", "limit": "max_text_chars"}``. Strings are cleaned of lone UTF-16 surrogates
(replaced by U+FFFD) when the request is parsed, so nothing downstream (cache keys, the response) can fail on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.evaluations.connectors import ConnectorError, ResolvedConnector, redact, resolve_connector
from green_agent.evaluations.judge import Judge, JudgeCache, JudgeOutcome, JudgeSettings, LexicalJudge, LlmJudge
from green_agent.evaluations.metrics import fair_forge_tool_correctness
from green_agent.evaluations.prompts import ANSWER_CORRECTNESS
from green_agent.statistics import (
    interpret,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)
from green_agent.text_safety import clean_json

logger = logging.getLogger(__name__)

ERR_NO_CONNECTOR = "No connector configuration provided"
ERR_NO_CLASS_PATH = "connector.class_path is required"
ERR_CONNECTOR = "Failed to create LLM connector"
ERR_NO_DATASETS = "No datasets provided"
ERR_NO_QA_IDS = "No qa_ids found in datasets"
ERR_FAILED = "Agentic evaluation failed"


class RunError(Exception):
    """A /run request that cannot be evaluated: ``message`` is the seed-style error, ``status`` the HTTP status;
    ``field`` (where in the request) and ``limit`` (which bound) are set when a bound was exceeded."""

    def __init__(self, message: str, status: int = 400, *, field: str | None = None, limit: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.limit = limit


@dataclass(frozen=True)
class RunLimits:
    """How large a /run request may be (checked before anything is parsed into models or scored).

    The defaults fit the seed's use (a few conversations) and the benchmark (1,000 conversations of 1-3
    interactions) with a wide margin, and keep the worst request to seconds of CPU.
    """

    max_conversations: int = 5_000
    max_interactions_per_conversation: int = 500
    max_interactions: int = 20_000
    """Interactions over all conversations of one request."""
    max_tools_per_interaction: int = 64
    """Entries of ``agentic.tools_used`` and of ``ground_truth_agentic.expected_tools`` each (optimal matching of
    expected to used calls is cubic in their number)."""
    max_text_chars: int = 50_000
    """Characters of each text: query, assistant, ground_truth_assistant, context."""
    max_id_chars: int = 1_000
    """Characters of session_id, assistant_id, language, qa_id and tool names."""


UNBOUNDED = RunLimits(**{f.name: sys.maxsize for f in dataclasses.fields(RunLimits)})
"""No bounds (local files scored from the command line); tool arguments are still checked."""


# --- request models --------------------------------------------------------------------------------------------------


class ToolUse(BaseModel):
    """One tool call, used or expected (the seed's tool_name / parameters / result / step)."""

    model_config = ConfigDict(extra="allow")

    tool_name: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    step: int | None = None


class AgenticTrace(BaseModel):
    """What the agent did with tools in one interaction."""

    model_config = ConfigDict(extra="allow")

    tools_used: list[ToolUse] = Field(default_factory=list)
    final_answer_uses_tools: bool = False


class GroundTruthAgentic(BaseModel):
    """The tools the agent should have used."""

    model_config = ConfigDict(extra="allow")

    expected_tools: list[ToolUse] = Field(default_factory=list)
    tool_sequence_matters: bool = False


class Interaction(BaseModel):
    """One question/answer of a conversation with its ground truth."""

    model_config = ConfigDict(extra="allow")

    qa_id: str
    query: str
    assistant: str
    ground_truth_assistant: str
    agentic: AgenticTrace | None = None
    ground_truth_agentic: GroundTruthAgentic | None = None


class ConversationDataset(BaseModel):
    """One complete conversation (one trial)."""

    model_config = ConfigDict(extra="allow")

    session_id: str
    assistant_id: str = ""
    language: str | None = "english"
    context: str = ""
    conversation: list[Interaction] = Field(default_factory=list)


class RunConfig(BaseModel):
    """The seed's config block plus Arena's ``judge`` and ``cache``; unknown keys are ignored like the seed does."""

    model_config = ConfigDict(extra="ignore")

    threshold: float = Field(default=0.7, ge=0.0, le=1.0, allow_inf_nan=False)
    tool_threshold: float = Field(default=0.75, ge=0.0, le=1.0, allow_inf_nan=False)
    tool_weights: dict[str, float] | None = None
    use_structured_output: bool = True
    verbose: bool = False
    k: int = Field(default=3, ge=1, le=10_000)
    judge: Literal["llm", "lexical"] | None = None
    cache: bool = True


# --- helpers ---------------------------------------------------------------------------------------------------------


def _errors_text(error: ValidationError, prefix: str) -> str:
    """pydantic errors as "loc: msg" (never the input values: they could hold a key)."""
    parts = []
    for item in error.errors()[:5]:
        loc = prefix
        for piece in item["loc"]:
            loc += f"[{piece}]" if isinstance(piece, int) else f".{piece}" if loc else str(piece)
        parts.append(f"{loc or '(root)'}: {item['msg']}")
    more = len(error.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _has_qa_ids(datasets: list[Any]) -> bool:
    for dataset in datasets:
        conversation = dataset.get("conversation") if isinstance(dataset, Mapping) else None
        if isinstance(conversation, list):  # anything else is named by the model validation that follows
            for interaction in conversation:
                if isinstance(interaction, Mapping) and interaction.get("qa_id") not in (None, ""):
                    return True
    return False


_ID_FIELDS = ("session_id", "assistant_id", "language")
_TEXT_FIELDS = ("query", "assistant", "ground_truth_assistant")


def _over(field: str, limit: str, message: str) -> RunError:
    return RunError(f"{ERR_FAILED}: request too large: {field}: {message}", status=413, field=field, limit=limit)


def _check_text(value: Any, field: str, bound: int, limit: str) -> None:
    if isinstance(value, str) and len(value) > bound:
        raise _over(field, limit, f"{len(value)} characters; at most {bound} are accepted ({limit})")


_FLOAT_RANGE = 2**1023


def _unrepresentable_number(value: Any) -> bool:
    """True for an integer no float can hold (tool arguments are compared numerically, as floats)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if abs(item) >= _FLOAT_RANGE:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_tools(block: Any, key: str, field: str, limits: RunLimits) -> None:
    tools = block.get(key) if isinstance(block, Mapping) else None
    if not isinstance(tools, list):
        return
    if len(tools) > limits.max_tools_per_interaction:
        raise _over(
            f"{field}.{key}",
            "max_tools_per_interaction",
            f"{len(tools)} tool calls; at most {limits.max_tools_per_interaction} are accepted",
        )
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            continue
        _check_text(tool.get("tool_name"), f"{field}.{key}[{index}].tool_name", limits.max_id_chars, "max_id_chars")
        if _unrepresentable_number(tool.get("parameters")):
            where = f"{field}.{key}[{index}].parameters"
            raise RunError(
                f"{ERR_FAILED}: invalid request: {where}: a number is too large to compare "
                "(beyond the range of a double)",
                field=where,
            )


def check_limits(datasets: list[Any], limits: RunLimits | None) -> None:
    """Raise :class:`RunError` (413, naming the field and the bound) when ``datasets`` exceeds ``limits``, or 400
    (naming the field) for a tool argument no float can hold. ``limits`` None checks only the latter.

    Runs on the raw JSON, before pydantic builds a model of it: the cost is proportional to what is accepted, never
    to what a request sends beyond a bound.
    """
    limits = limits or UNBOUNDED
    if len(datasets) > limits.max_conversations:
        raise _over(
            "datasets",
            "max_conversations",
            f"{len(datasets)} conversations; at most {limits.max_conversations} are accepted",
        )
    total = 0
    for d, dataset in enumerate(datasets):
        if not isinstance(dataset, Mapping):
            continue  # the model validation names the wrong type
        where = f"datasets[{d}]"
        for key in _ID_FIELDS:
            _check_text(dataset.get(key), f"{where}.{key}", limits.max_id_chars, "max_id_chars")
        _check_text(dataset.get("context"), f"{where}.context", limits.max_text_chars, "max_text_chars")
        conversation = dataset.get("conversation")
        if not isinstance(conversation, list):
            continue
        if len(conversation) > limits.max_interactions_per_conversation:
            raise _over(
                f"{where}.conversation",
                "max_interactions_per_conversation",
                f"{len(conversation)} interactions; at most {limits.max_interactions_per_conversation} "
                "per conversation are accepted",
            )
        total += len(conversation)
        if total > limits.max_interactions:
            raise _over(
                "datasets", "max_interactions", f"more than {limits.max_interactions} interactions in total (the limit)"
            )
        for i, interaction in enumerate(conversation):
            if not isinstance(interaction, Mapping):
                continue
            at = f"{where}.conversation[{i}]"
            _check_text(interaction.get("qa_id"), f"{at}.qa_id", limits.max_id_chars, "max_id_chars")
            for key in _TEXT_FIELDS:
                _check_text(interaction.get(key), f"{at}.{key}", limits.max_text_chars, "max_text_chars")
            _check_tools(interaction.get("agentic"), "tools_used", f"{at}.agentic", limits)
            _check_tools(
                interaction.get("ground_truth_agentic"), "expected_tools", f"{at}.ground_truth_agentic", limits
            )


def _tool_calls(tools: list[ToolUse]) -> list[dict[str, Any]]:
    return [{"name": t.tool_name, "arguments": t.parameters} for t in tools]


def _tool_scores(datasets: list[ConversationDataset], config: RunConfig) -> list[list[dict[str, Any] | None]]:
    """Fair-Forge tool correctness per interaction (CPU work: run in a thread)."""
    out: list[list[dict[str, Any] | None]] = []
    for dataset in datasets:
        row: list[dict[str, Any] | None] = []
        for interaction in dataset.conversation:
            truth = interaction.ground_truth_agentic
            if truth is None:
                row.append(None)
                continue
            trace = interaction.agentic or AgenticTrace()
            score = fair_forge_tool_correctness(
                _tool_calls(truth.expected_tools),
                _tool_calls(trace.tools_used),
                final_answer_uses_tools=trace.final_answer_uses_tools,
                tool_sequence_matters=truth.tool_sequence_matters,
                tool_weights=config.tool_weights,
                tool_threshold=config.tool_threshold,
            )
            row.append(
                {
                    "tool_selection_correct": score.selection,
                    "parameter_accuracy": score.parameters,
                    "sequence_correct": score.sequence,
                    "result_utilization": score.utilization,
                    "overall_correctness": score.overall,
                    "is_correct": score.is_correct,
                    "reasoning": "; ".join(score.notes) or "all tools used correctly",
                    "weights": score.weights,
                }
            )
        out.append(row)
    return out


def _interaction_result(interaction: Interaction, outcome: JudgeOutcome, threshold: float) -> dict[str, Any]:
    base: dict[str, Any] = {"qa_id": interaction.qa_id, "judge": outcome.judge.model_dump(), "cached": outcome.cached}
    if outcome.status != "scored" or outcome.answer is None:
        return {**base, "status": "unscored", "correctness_score": None, "reason": outcome.reason, "explanation": None}
    score = float(outcome.answer["correctness_score"])
    return {
        **base,
        "status": "correct" if score >= threshold else "incorrect",
        "correctness_score": score,
        "reason": None,
        "explanation": outcome.answer.get("reasoning"),
    }


def _conversation_result(
    dataset: ConversationDataset,
    interactions: list[dict[str, Any]],
    tools: list[dict[str, Any] | None],
    threshold: float,
) -> dict[str, Any]:
    statuses = [i["status"] for i in interactions]
    correct = [index for index, s in enumerate(statuses) if s == "correct"]
    unscored = statuses.count("unscored")
    if not interactions:
        status, fully = "unscored", None
    elif "incorrect" in statuses:
        status, fully = "incorrect", False
    elif unscored:
        status, fully = "unscored", None
    else:
        status, fully = "correct", True
    return {
        "session_id": dataset.session_id,
        "assistant_id": dataset.assistant_id,
        "total_interactions": len(interactions),
        "correct_interactions": len(correct),
        "unscored_interactions": unscored,
        "is_fully_correct": fully,
        "status": status,
        "unscored_reason": (
            "conversation has no interactions"
            if not interactions
            else f"{unscored} interaction(s) could not be judged"
            if status == "unscored"
            else None
        ),
        "threshold": threshold,
        "correctness_scores": [i["correctness_score"] for i in interactions],
        "correct_indices": correct,
        "tool_correctness_scores": tools,
        "interactions": interactions,
    }


def aggregate(conversations: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """Conversation-level totals, pass@k / pass^k (unbiased; null when n < k), projections and the verdict."""
    total = len(conversations)
    unscored = sum(1 for c in conversations if c["status"] == "unscored")
    n = total - unscored
    c = sum(1 for conv in conversations if conv["status"] == "correct")
    warnings: list[str] = []
    at = pass_at_k(n, c, k)
    hat = pass_hat_k(n, c, k)
    if unscored:
        warnings.append(
            f"{unscored} of {total} conversation(s) could not be judged (UNSCORED): they are left out of "
            f"n = {n} and are not counted as failures"
        )
    if at is None:
        warnings.append(
            f"k = {k} but only {n} scored conversation(s): pass@{k} and pass^{k} are undefined (null); "
            f"the projections beside them assume independent trials with p = c/n and are biased"
        )
    rate = c / n if n else None
    wilson = wilson_interval(c, n) if n else None
    projections = None
    if rate is not None:
        projections = {
            "pass_at_k": 1.0 - (1.0 - rate) ** k,
            "pass_pow_k": rate**k,
            "label": f"projection (plug-in 1-(1-p)^{k} and p^{k} with p = c/n = {c}/{n}; biased, not an estimate)",
        }
    verdict = interpret(at, hat, k=k) if at is not None and hat is not None else None
    tool_items = [t for conv in conversations for t in conv["tool_correctness_scores"] if t is not None]
    return {
        "total_conversations": total,
        "scored_conversations": n,
        "unscored_conversations": unscored,
        "fully_correct_conversations": c,
        "conversation_success_rate": rate,
        "success_rate_ci": None
        if wilson is None
        else {"low": wilson.low, "high": wilson.high, "confidence": wilson.confidence, "method": "wilson"},
        "k": k,
        "pass_at_k": at,
        "pass_pow_k": hat,
        "projections": projections,
        "interpretation": verdict.label.value if verdict else None,
        "verdict": verdict.model_dump(mode="json") if verdict else None,
        "tool_scored_interactions": len(tool_items),
        "tool_correct_interactions": sum(1 for t in tool_items if t["is_correct"]),
        "warnings": warnings,
    }


# - the endpoint's logic ----------------------------------------------------------------------------------------------


def _parse(
    payload: Any, settings: JudgeSettings, limits: RunLimits | None
) -> tuple[ResolvedConnector, list[ConversationDataset], RunConfig]:
    if not isinstance(payload, Mapping):
        raise RunError("Invalid JSON body")
    payload = clean_json(payload)
    connector = payload.get("connector")
    if not connector:
        raise RunError(ERR_NO_CONNECTOR)
    if not isinstance(connector, Mapping):
        raise RunError(f"{ERR_CONNECTOR}: connector must be a JSON object")
    if not isinstance(connector.get("class_path"), str) or not connector.get("class_path", "").strip():
        raise RunError(ERR_NO_CLASS_PATH)
    raw_config = payload.get("config")
    lexical = settings.offline or (isinstance(raw_config, Mapping) and raw_config.get("judge") == "lexical")
    try:
        resolved = resolve_connector(
            connector,
            environ=settings.environ,
            base_url_overrides=settings.base_url_overrides,
            allow_base_url=settings.allow_base_url,
            require_key=not lexical,
        )
    except ConnectorError as error:
        raise RunError(f"{ERR_CONNECTOR}: {error}") from None
    datasets = payload.get("datasets")
    if datasets is None or datasets == [] or datasets == {}:
        raise RunError(ERR_NO_DATASETS)
    if not isinstance(datasets, list):
        raise RunError(f"{ERR_FAILED}: datasets must be a list of conversations")
    check_limits(datasets, limits)
    if not _has_qa_ids(datasets):
        raise RunError(ERR_NO_QA_IDS)
    parsed: list[ConversationDataset] = []
    for index, dataset in enumerate(datasets):
        try:
            parsed.append(ConversationDataset.model_validate(dataset))
        except ValidationError as error:
            raise RunError(f"{ERR_FAILED}: invalid request: {_errors_text(error, f'datasets[{index}]')}") from None
    try:
        config = RunConfig.model_validate(raw_config or {})
    except ValidationError as error:
        raise RunError(f"{ERR_FAILED}: invalid request: {_errors_text(error, 'config')}") from None
    return resolved, parsed, config


def _assemble(
    datasets: list[ConversationDataset],
    flat: list[tuple[int, int]],
    outcomes: list[JudgeOutcome],
    tools: list[list[dict[str, Any] | None]],
    config: RunConfig,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-conversation results and the aggregate (CPU work proportional to the request: run in a thread)."""
    per_dataset: list[list[dict[str, Any]]] = [[] for _ in datasets]
    for (d, i), outcome in zip(flat, outcomes, strict=True):
        per_dataset[d].append(_interaction_result(datasets[d].conversation[i], outcome, config.threshold))
    conversations = [
        _conversation_result(ds, per_dataset[d], tools[d], config.threshold) for d, ds in enumerate(datasets)
    ]
    return conversations, aggregate(conversations, config.k)


async def run_agentic(
    payload: Any, settings: JudgeSettings, *, cache: JudgeCache | None = None, limits: RunLimits | None = None
) -> dict[str, Any]:
    """Evaluate a /run request; returns the seed-shaped success body or raises :class:`RunError`.

    ``cache`` is the caller's open verdict cache (used by the LLM judge unless ``config.cache`` is false);
    ``limits`` bound the request (None: unbounded, for local files).
    """
    resolved, datasets, config = await asyncio.to_thread(_parse, payload, settings, limits)
    warnings: list[str] = []
    judge: Judge
    llm: LlmJudge | None = None
    if settings.offline or config.judge == "lexical":
        judge = LexicalJudge()
        why = "offline mode" if settings.offline else "config.judge is 'lexical'"
        warnings.append(
            f"scored by the lexical judge ({why}); connector {resolved.provider}/{resolved.model} was "
            "validated but not called"
        )
    else:
        llm = LlmJudge(
            resolved,
            use_structured_output=config.use_structured_output,
            cache=cache if config.cache else None,
            retry=settings.retry,
            max_concurrency=settings.max_concurrency,
            http_client=settings.http_client,
        )
        judge = llm
        if resolved.requested_temperature not in (None, 0.0):
            warnings.append(
                f"connector.params.temperature = {resolved.requested_temperature} ignored: the judge "
                "always runs at temperature 0"
            )
    try:
        flat = [(d, i) for d in range(len(datasets)) for i in range(len(datasets[d].conversation))]
        inputs = [
            {
                "query": datasets[d].conversation[i].query,
                "answer": datasets[d].conversation[i].assistant,
                "ground_truth": datasets[d].conversation[i].ground_truth_assistant,
            }
            for d, i in flat
        ]
        outcomes, tools = await asyncio.gather(
            judge.evaluate_many(ANSWER_CORRECTNESS, inputs),
            asyncio.to_thread(_tool_scores, datasets, config),
        )
        conversations, aggregated = await asyncio.to_thread(_assemble, datasets, flat, outcomes, tools, config)
    except ValueError as error:  # bad tool weights and the like: the metrics library names the field
        raise RunError(f"{ERR_FAILED}: {redact(str(error), resolved.api_key)}") from None
    except Exception as error:
        logger.exception("agentic evaluation failed")
        raise RunError(f"{ERR_FAILED}: {type(error).__name__}", status=500) from None
    finally:
        if llm is not None:
            await llm.aclose()
    return {
        "success": True,
        "per_conversation_metrics": conversations,
        "aggregated_metrics": aggregated,
        "judge": judge.describe(),
        "warnings": warnings + aggregated["warnings"],
    }


def error_body(error: RunError) -> dict[str, Any]:
    """The seed's error shape (plus ``field`` and ``limit`` when a bound was exceeded)."""
    body: dict[str, Any] = {"success": False, "error": error.message}
    if error.field is not None:
        body["field"] = error.field
    if error.limit is not None:
        body["limit"] = error.limit
    return clean_json(body)
