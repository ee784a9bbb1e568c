"""Fair-Forge-compatible ``/run``: recorded conversations judged per interaction, a conversation as one trial.

The request, its bounds and its errors are :mod:`green_agent.evaluations.fairforge_request`; this module scores a
request that passed them.

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
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from green_agent.evaluations.connectors import redact
from green_agent.evaluations.fairforge_request import (
    ERR_FAILED,
    AgenticTrace,
    ConversationDataset,
    Interaction,
    RunConfig,
    RunError,
    RunLimits,
    ToolUse,
    parse_request,
)
from green_agent.evaluations.judge import Judge, JudgeOutcome, JudgeSettings, LexicalJudge, LlmJudge
from green_agent.evaluations.judge_cache import JudgeCache
from green_agent.evaluations.metrics import fair_forge_tool_correctness
from green_agent.evaluations.prompts import ANSWER_CORRECTNESS
from green_agent.statistics import (
    interpret,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)

logger = logging.getLogger(__name__)


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
    resolved, datasets, config = await asyncio.to_thread(parse_request, payload, settings, limits)
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
            providers=settings.providers,
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
