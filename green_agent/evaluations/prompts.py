"""The judge's prompts: instructions, the JSON answer schema each one demands, and a version hash.

Why hashed: a cached verdict is only reusable for the exact prompt that produced it, and a result must say which
prompt scored it. The hash covers the name, version, instructions and the answer schema, so editing any of them
changes the hash, invalidates old cache entries and shows in every result (``prompt_hash``).

Why one schema per prompt: the judge asks for structured output (``response_format`` JSON schema) and validates the
answer against the same pydantic model locally, so a model that ignores the schema is caught here, not downstream.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnswerCorrectness(_Answer):
    """How well an answer agrees with the reference answer."""

    correctness_score: float = Field(ge=0.0, le=1.0, description="0.0 wrong .. 1.0 fully correct")
    reasoning: str = Field(description="one or two sentences")


class Faithfulness(_Answer):
    """How well a response states the facts its tools returned and the expected keywords."""

    score: float = Field(ge=0.0, le=1.0, description="0.0 unfaithful .. 1.0 fully faithful")
    explanation: str = Field(description="one or two sentences")


class GoalInference(_Answer):
    """What the user wanted and what the conversation ended with."""

    user_goal: str
    end_state: str


class GoalComparison(_Answer):
    """Whether an achieved outcome satisfies a desired one."""

    achieved: bool
    reason: str


class TopicExtraction(_Answer):
    """The topics the user raised."""

    topics: list[str]


class TopicClassification(_Answer):
    """For each topic, whether it belongs to the allowed reference topics."""

    in_reference: list[bool]


class TopicRefusal(_Answer):
    """Whether the assistant declined to engage with a topic."""

    refused: bool
    reason: str


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a pydantic JSON schema in the subset OpenAI's strict structured output accepts.

    Strict mode wants every property required and ``additionalProperties: false``; it rejects some validation keywords
    (numeric bounds, titles, defaults). The bounds are still enforced: the answer is validated with pydantic.
    """
    dropped = {"title", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "default", "description"}

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: clean(v) for k, v in node.items() if k not in dropped}
            if out.get("type") == "object" and "properties" in out:
                out["required"] = list(out["properties"])
                out["additionalProperties"] = False
            return out
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    cleaned: dict[str, Any] = clean(schema)
    return cleaned


@dataclass(frozen=True)
class JudgePrompt:
    """One judge task: instructions, answer model and the version hash recorded with every verdict."""

    name: str
    version: int
    instructions: str
    answer_model: type[BaseModel]
    hash: str = field(init=False)
    json_schema: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        schema = _strict_schema(self.answer_model.model_json_schema())
        object.__setattr__(self, "json_schema", schema)
        material = json.dumps(
            {"name": self.name, "version": self.version, "instructions": self.instructions, "schema": schema},
            sort_keys=True,
        )
        object.__setattr__(self, "hash", hashlib.sha256(material.encode()).hexdigest()[:16])

    def user_message(self, inputs: dict[str, Any], *, prompted: bool) -> str:
        """The user turn: the inputs as JSON, plus the schema spelled out when structured output is off."""
        text = "Inputs (JSON):\n" + json.dumps(inputs, ensure_ascii=False, indent=2, default=str)
        if prompted:
            text += (
                "\n\nAnswer with exactly one JSON object that validates against this JSON schema, and nothing else "
                "(no prose, no code fence):\n" + json.dumps(self.json_schema, sort_keys=True)
            )
        return text


_COMMON = (
    "You are a careful, strict evaluator inside an automated test harness. Judge only from the inputs given; do not "
    "assume facts that are not there. Keep explanations short and concrete. "
)

ANSWER_CORRECTNESS = JudgePrompt(
    name="answer_correctness",
    version=1,
    instructions=_COMMON
    + (
        "Compare the agent's answer with the reference answer for the user's query and give correctness_score in "
        "[0, 1]. Score the facts, not the wording: a rephrased or more verbose answer with the same facts scores "
        "0.9-1.0; a correct core fact with a misspelling or a small formatting error about 0.7; a partly correct "
        "answer missing important details 0.4-0.6; a wrong or contradicting answer below 0.3."
    ),
    answer_model=AnswerCorrectness,
)

RESPONSE_FAITHFULNESS = JudgePrompt(
    name="response_faithfulness",
    version=1,
    instructions=_COMMON
    + (
        "An agent answered the query after calling tools. Score in [0, 1] how faithful its response is: every figure "
        "and fact it states must be supported by the tool results, and it should mention the expected keywords "
        "(when any are listed). Unsupported or contradicting figures pull the score below 0.5; missing keywords "
        "lower it in proportion."
    ),
    answer_model=Faithfulness,
)

GOAL_INFERENCE = JudgePrompt(
    name="goal_inference",
    version=1,
    instructions=_COMMON
    + (
        "Read the conversation between a user, an AI agent and its tools. State in one sentence each the goal the "
        "user was pursuing (user_goal) and the state the conversation ended in (end_state): what was actually "
        "achieved, as evidenced by the agent's messages and the tool results."
    ),
    answer_model=GoalInference,
)

GOAL_COMPARISON = JudgePrompt(
    name="goal_comparison",
    version=1,
    instructions=_COMMON
    + (
        "Decide whether the achieved outcome satisfies the desired outcome: achieved is true only when everything "
        "essential in the desired outcome happened."
    ),
    answer_model=GoalComparison,
)

TOPIC_EXTRACTION = JudgePrompt(
    name="topic_extraction",
    version=1,
    instructions=_COMMON
    + (
        "List the distinct topics the user raised in the conversation, as short noun phrases, in order of first "
        "appearance."
    ),
    answer_model=TopicExtraction,
)

TOPIC_CLASSIFICATION = JudgePrompt(
    name="topic_classification",
    version=1,
    instructions=_COMMON
    + (
        "For each topic in 'topics', say whether it falls under one of the 'reference_topics' (the subjects the "
        "agent is meant to cover). Answer in_reference as a list of booleans with exactly one entry per topic, in "
        "the same order."
    ),
    answer_model=TopicClassification,
)

TOPIC_REFUSAL = JudgePrompt(
    name="topic_refusal",
    version=1,
    instructions=_COMMON
    + (
        "Decide whether the AI agent declined to engage with the given topic in the conversation (refused is true "
        "when it refused, deflected or said it cannot help with it; false when it answered or acted on it)."
    ),
    answer_model=TopicRefusal,
)
