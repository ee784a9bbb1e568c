"""The Fair-Forge ``/run`` request: its fields, its bounds and its errors, checked before anything is scored.

Why a module of its own: what a request may contain and how a bad one is refused (the seed's messages in the seed's
order, 413 naming the field and the bound) is the hostile-input side of ``/run``; scoring what passed is
:mod:`green_agent.evaluations.fairforge`.

Request (the seed's Agentic Lambda fields): ``connector`` {class_path, params{model, api_key, temperature}},
``datasets`` (each one complete conversation: session_id, assistant_id, language, context, conversation[] of
interactions qa_id / query / assistant / ground_truth_assistant / agentic{tools_used[], final_answer_uses_tools} /
ground_truth_agentic{expected_tools[], tool_sequence_matters}) and ``config`` (threshold 0.7, tool_threshold 0.75,
tool_weights 0.25 each, use_structured_output, verbose, k 3). Arena adds two optional config fields: ``judge``
("llm" or "lexical") and ``cache`` (false turns the verdict cache off for this request).

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

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.evaluations.connectors import ConnectorError, ResolvedConnector, resolve_connector
from green_agent.evaluations.judge import JudgeSettings
from green_agent.evaluations.safe_json import FLOAT_RANGE
from green_agent.text_safety import clean_json

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


# --- checks ----------------------------------------------------------------------------------------------------------


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


def _unrepresentable_number(value: Any) -> bool:
    """True for an integer no float can hold (tool arguments are compared numerically, as floats)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if abs(item) >= FLOAT_RANGE:
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


def parse_request(
    payload: Any, settings: JudgeSettings, limits: RunLimits | None
) -> tuple[ResolvedConnector, list[ConversationDataset], RunConfig]:
    """Validate a /run body in the seed's order of checks: the connector, the datasets (bounds first), the config.

    Raises :class:`RunError` with the seed's message; CPU work proportional to the request (run it in a thread).
    """
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


def error_body(error: RunError) -> dict[str, Any]:
    """The seed's error shape (plus ``field`` and ``limit`` when a bound was exceeded)."""
    body: dict[str, Any] = {"success": False, "error": error.message}
    if error.field is not None:
        body["field"] = error.field
    if error.limit is not None:
        body["limit"] = error.limit
    cleaned: dict[str, Any] = clean_json(body)
    return cleaned
