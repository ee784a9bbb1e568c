"""Ragas-style agent metrics on typed message traces: goal accuracy, tool-call accuracy, topic adherence.

A sample is a conversation ``user_input`` of messages ``{"type": "human" | "ai" | "tool", "content": ...}`` (``role``
user/assistant/tool is accepted too); AI messages may carry ``tool_calls`` ``[{"name", "args"}]``. Optional references:
``reference`` (the desired outcome), ``reference_tool_calls`` and ``reference_topics``.

Metrics (one or several judges; each judge scores independently and the sample's score is the mean over the judges
that scored it, with each judge's own score and explanation kept):

- ``agent_goal_accuracy`` (with reference when the sample has one, else without; or name the variant explicitly):
  the judge infers the conversation's end state (and the user's goal), then decides whether the end state achieves
  the reference outcome (with reference) or the inferred goal (without). Score 1.0 or 0.0.
- ``tool_call_accuracy`` (mode ``strict`` or ``flexible``): deterministic, no judge. The AI messages' tool calls, in
  order, against ``reference_tool_calls`` with :func:`green_agent.statistics.match_tool_calls` (optimal matching;
  strict = equal canonical arguments, flexible = argument score >= ``argument_match_threshold``, 0.8). Score = F1;
  precision, recall, order score and mean argument score are reported beside it.
- ``topic_adherence`` (mode ``f1``, ``precision`` or ``recall``): the judge lists the topics the user raised, says
  for each whether the agent refused it, and whether it belongs to ``reference_topics``. Answered & in reference =
  true positive, answered & not in reference = false positive, refused & in reference = false negative. Vacuous
  cases are explicit: precision is 1.0 when the agent answered nothing, recall is 1.0 when no reference topic came
  up; a conversation with no topics is unscored.

A judge failure leaves that judge's score UNSCORED with the reason; a sample no judge could score is UNSCORED and
still listed and counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from green_agent.evaluations.judge import Judge, JudgeOutcome
from green_agent.evaluations.metrics import MatchMode, match_tool_calls
from green_agent.evaluations.prompts import (
    GOAL_COMPARISON,
    GOAL_INFERENCE,
    TOPIC_CLASSIFICATION,
    TOPIC_EXTRACTION,
    TOPIC_REFUSAL,
)

MetricName = Literal[
    "agent_goal_accuracy",
    "agent_goal_accuracy_with_reference",
    "agent_goal_accuracy_without_reference",
    "tool_call_accuracy",
    "topic_adherence",
]
_ROLE_ALIASES = {"user": "human", "human": "human", "assistant": "ai", "ai": "ai", "tool": "tool"}


class TraceToolCall(BaseModel):
    """A tool call on an AI message (``args``; ``arguments`` accepted)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "args" not in value:
            value = dict(value)
            for key in ("arguments", "parameters"):
                if key in value:
                    value["args"] = value.pop(key)
                    break
        return value


class TraceMessage(BaseModel):
    """One message of a trace."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["human", "ai", "tool"]
    content: str = ""
    tool_calls: list[TraceToolCall] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _role(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            value = dict(value)
            kind = value.get("type", value.get("role"))
            if isinstance(kind, str) and kind.lower() in _ROLE_ALIASES:
                value["type"] = _ROLE_ALIASES[kind.lower()]
            if value.get("content") is None:
                value["content"] = ""
        return value


class AgentSample(BaseModel):
    """One multi-turn sample."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    user_input: list[TraceMessage] = Field(min_length=1)
    reference: str | None = None
    reference_tool_calls: list[TraceToolCall] | None = None
    reference_topics: list[str] | None = None


class MetricSpec(BaseModel):
    """A metric to compute, with its mode."""

    model_config = ConfigDict(extra="forbid")

    name: MetricName
    mode: str | None = None
    argument_match_threshold: float = Field(default=0.8, ge=0.0, le=1.0)

    @field_validator("mode")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_mode(self) -> MetricSpec:
        allowed = {"tool_call_accuracy": ("strict", "flexible"), "topic_adherence": ("f1", "precision", "recall")}
        options = allowed.get(self.name)
        if options is None:
            if self.mode is not None:
                raise ValueError(f"{self.name} takes no mode")
        elif self.mode is None:
            self.mode = options[0]
        elif self.mode not in options:
            raise ValueError(f"mode of {self.name} must be one of {', '.join(options)}, got {self.mode!r}")
        return self

    @property
    def label(self) -> str:
        return self.name + (f"[{self.mode}]" if self.mode else "")


class JudgeScore(BaseModel):
    """One judge's score of one sample (or the deterministic computation's)."""

    model_config = ConfigDict(frozen=True)

    judge: str
    status: Literal["scored", "unscored"]
    score: float | None
    reason: str | None = None
    explanation: str | None = None
    judge_info: list[dict[str, Any]] = Field(default_factory=list)
    """The JudgeInfo of every judge call behind this score (model, prompt, prompt hash)."""
    details: dict[str, Any] = Field(default_factory=dict)


class SampleMetricResult(BaseModel):
    """A metric on one sample: the mean over the judges that scored it, and each judge's score."""

    model_config = ConfigDict(frozen=True)

    sample: str
    metric: str
    status: Literal["scored", "unscored"]
    score: float | None
    judges: list[JudgeScore]


class MetricSummary(BaseModel):
    """A metric over all samples."""

    model_config = ConfigDict(frozen=True)

    metric: str
    samples: int
    scored: int
    unscored: int
    mean: float | None
    per_judge_mean: dict[str, float | None]


def _conversation(sample: AgentSample) -> list[dict[str, Any]]:
    out = []
    for m in sample.user_input:
        item: dict[str, Any] = {"role": m.type, "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [{"name": c.name, "args": c.args} for c in m.tool_calls]
        out.append(item)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _unscored(judge: str, reason: str, infos: Sequence[JudgeOutcome] = ()) -> JudgeScore:
    return JudgeScore(
        judge=judge, status="unscored", score=None, reason=reason, judge_info=[o.judge.model_dump() for o in infos]
    )


# --- per metric, per judge (batched over samples) --------------------------------------------------------------------


async def _goal_accuracy(judge: Judge, samples: Sequence[AgentSample], variant: str) -> list[JudgeScore]:
    with_ref = [variant == "with" or (variant == "auto" and s.reference) for s in samples]
    results: list[JudgeScore | None] = [None] * len(samples)
    for index, sample in enumerate(samples):
        if with_ref[index] and not sample.reference:
            results[index] = _unscored(judge.name, "agent_goal_accuracy_with_reference needs a reference outcome")
    todo = [i for i, r in enumerate(results) if r is None]
    inferred = await judge.evaluate_many(GOAL_INFERENCE, [{"conversation": _conversation(samples[i])} for i in todo])
    compare_idx: list[int] = []
    compare_inputs: list[dict[str, Any]] = []
    for i, outcome in zip(todo, inferred, strict=True):
        if outcome.status != "scored" or outcome.answer is None:
            results[i] = _unscored(judge.name, f"goal inference: {outcome.reason}", [outcome])
            continue
        desired = samples[i].reference if with_ref[i] else outcome.answer["user_goal"]
        compare_idx.append(i)
        compare_inputs.append(
            {
                "desired_outcome": desired,
                "achieved_outcome": outcome.answer["end_state"],
                "desired_from": "reference" if with_ref[i] else "inferred",
            }
        )
    compared = await judge.evaluate_many(GOAL_COMPARISON, compare_inputs)
    inferred_by_index = dict(zip(todo, inferred, strict=True))
    for i, outcome, inputs in zip(compare_idx, compared, compare_inputs, strict=True):
        infos = [inferred_by_index[i], outcome]
        if outcome.status != "scored" or outcome.answer is None:
            results[i] = _unscored(judge.name, f"goal comparison: {outcome.reason}", infos)
            continue
        results[i] = JudgeScore(
            judge=judge.name,
            status="scored",
            score=1.0 if outcome.answer["achieved"] else 0.0,
            explanation=outcome.answer["reason"],
            judge_info=[o.judge.model_dump() for o in infos],
            details={
                "variant": "with_reference" if with_ref[i] else "without_reference",
                "desired_outcome": inputs["desired_outcome"],
                "end_state": inputs["achieved_outcome"],
            },
        )
    return [r for r in results if r is not None]


async def _topic_adherence(judge: Judge, samples: Sequence[AgentSample], mode: str) -> list[JudgeScore]:
    results: list[JudgeScore | None] = [None] * len(samples)
    for i, sample in enumerate(samples):
        if not sample.reference_topics:
            results[i] = _unscored(judge.name, "topic_adherence needs reference_topics")
    todo = [i for i, r in enumerate(results) if r is None]
    conversations = {i: _conversation(samples[i]) for i in todo}
    extracted = await judge.evaluate_many(TOPIC_EXTRACTION, [{"conversation": conversations[i]} for i in todo])
    topics: dict[int, list[str]] = {}
    infos: dict[int, list[JudgeOutcome]] = {}
    for i, outcome in zip(todo, extracted, strict=True):
        infos[i] = [outcome]
        if outcome.status != "scored" or outcome.answer is None:
            results[i] = _unscored(judge.name, f"topic extraction: {outcome.reason}", [outcome])
        elif not outcome.answer["topics"]:
            results[i] = _unscored(judge.name, "no topics found in the conversation", [outcome])
        else:
            topics[i] = [str(t) for t in outcome.answer["topics"]]
    live = list(topics)
    refusal_keys = [(i, t) for i in live for t in topics[i]]
    refusals = await judge.evaluate_many(
        TOPIC_REFUSAL, [{"conversation": conversations[i], "topic": t} for i, t in refusal_keys]
    )
    classes = await judge.evaluate_many(
        TOPIC_CLASSIFICATION, [{"reference_topics": samples[i].reference_topics, "topics": topics[i]} for i in live]
    )
    refused: dict[int, list[bool | None]] = {i: [] for i in live}
    for (i, _t), outcome in zip(refusal_keys, refusals, strict=True):
        infos[i].append(outcome)
        refused[i].append(bool(outcome.answer["refused"]) if outcome.status == "scored" and outcome.answer else None)
    for i, outcome in zip(live, classes, strict=True):
        infos[i].append(outcome)
        failed = [o for o in infos[i] if o.status != "scored"]
        if failed:
            results[i] = _unscored(judge.name, f"{failed[0].judge.prompt}: {failed[0].reason}", infos[i])
            continue
        assert outcome.answer is not None
        in_ref = [bool(x) for x in outcome.answer["in_reference"]]
        if len(in_ref) != len(topics[i]):
            results[i] = _unscored(
                judge.name,
                f"topic classification returned {len(in_ref)} verdicts for {len(topics[i])} topics",
                infos[i],
            )
            continue
        answered = [not r for r in refused[i]]
        tp = sum(1 for a, r in zip(answered, in_ref, strict=True) if a and r)
        fp = sum(1 for a, r in zip(answered, in_ref, strict=True) if a and not r)
        fn = sum(1 for a, r in zip(answered, in_ref, strict=True) if not a and r)
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        score = {"f1": f1, "precision": precision, "recall": recall}[mode]
        results[i] = JudgeScore(
            judge=judge.name,
            status="scored",
            score=score,
            explanation=f"{tp} on-topic answered, {fp} off-topic answered, {fn} on-topic refused",
            judge_info=[o.judge.model_dump() for o in infos[i]],
            details={
                "topics": topics[i],
                "refused": refused[i],
                "in_reference": in_ref,
                "precision": precision,
                "recall": recall,
                "f1": f1,
                "true_positives": tp,
                "false_positives": fp,
                "false_negatives": fn,
            },
        )
    return [r for r in results if r is not None]


def _tool_call_accuracy(sample: AgentSample, spec: MetricSpec) -> JudgeScore:
    if sample.reference_tool_calls is None:
        return _unscored("deterministic", "tool_call_accuracy needs reference_tool_calls")
    expected = [{"name": c.name, "arguments": c.args} for c in sample.reference_tool_calls]
    actual = [{"name": c.name, "arguments": c.args} for m in sample.user_input if m.type == "ai" for c in m.tool_calls]
    match = match_tool_calls(
        expected, actual, mode=MatchMode(spec.mode or "strict"), argument_match_threshold=spec.argument_match_threshold
    )
    return JudgeScore(
        judge="deterministic",
        status="scored",
        score=match.f1,
        explanation=f"{match.correct_count} of {match.expected_count} reference call(s) matched "
        f"({match.actual_count} made)",
        details={
            "precision": match.precision,
            "recall": match.recall,
            "f1": match.f1,
            "order_score": match.order_score,
            "mean_argument_score": match.mean_argument_score,
            "exact_sequence": match.exact_sequence,
            "missing_expected": match.missing_expected,
            "unexpected_actual": match.unexpected_actual,
        },
    )


# --- entry point ---------------------------------------------------------------------------------------------------


def _sample_name(sample: AgentSample, index: int) -> str:
    return sample.id or f"sample-{index + 1}"


async def evaluate_samples(
    samples: Sequence[AgentSample], metrics: Sequence[MetricSpec], judges: Sequence[Judge]
) -> tuple[list[SampleMetricResult], list[MetricSummary]]:
    """Every metric on every sample with every judge; results per (sample, metric) and summaries per metric."""
    if not judges:
        raise ValueError("judges: at least one judge is required")
    results: list[SampleMetricResult] = []
    summaries: list[MetricSummary] = []
    for spec in metrics:
        per_judge: list[list[JudgeScore]] = []
        if spec.name == "tool_call_accuracy":
            per_judge.append([_tool_call_accuracy(s, spec) for s in samples])
        else:
            for judge in judges:
                if spec.name == "topic_adherence":
                    per_judge.append(await _topic_adherence(judge, samples, spec.mode or "f1"))
                else:
                    variant = {
                        "agent_goal_accuracy": "auto",
                        "agent_goal_accuracy_with_reference": "with",
                        "agent_goal_accuracy_without_reference": "without",
                    }[spec.name]
                    per_judge.append(await _goal_accuracy(judge, samples, variant))
        metric_results = []
        for index, sample in enumerate(samples):
            scores = [column[index] for column in per_judge]
            scored = [s.score for s in scores if s.status == "scored" and s.score is not None]
            mean = _mean(scored)
            metric_results.append(
                SampleMetricResult(
                    sample=_sample_name(sample, index),
                    metric=spec.label,
                    status="scored" if mean is not None else "unscored",
                    score=mean,
                    judges=scores,
                )
            )
        results.extend(metric_results)
        judge_names = [column[0].judge for column in per_judge if column]
        per_judge_mean = {
            name: _mean([c.score for c in column if c.status == "scored" and c.score is not None])
            for name, column in zip(judge_names, per_judge, strict=False)
        }
        scored_values = [r.score for r in metric_results if r.score is not None]
        summaries.append(
            MetricSummary(
                metric=spec.label,
                samples=len(samples),
                scored=len(scored_values),
                unscored=len(samples) - len(scored_values),
                mean=_mean(scored_values),
                per_judge_mean=per_judge_mean,
            )
        )
    return results, summaries
