"""Scoring a JSON document from the command line (``arena score FILE``): either format, one entry point.

Formats, told apart by their keys:
- ``/run`` format (has ``datasets``): the Fair-Forge request body, evaluated exactly as ``POST /run`` would;
- samples format (has ``samples``): ``{"samples": [AgentSample...], "metrics": [name | {name, mode, ...}],
  "judges": [connector block...]}``. ``metrics`` defaults to agent_goal_accuracy, tool_call_accuracy[strict] and
  topic_adherence[f1]; ``judges`` lists the LLM judges (each a seed connector block, optionally with
  ``use_structured_output``), ignored when the lexical judge is forced.

``judge="lexical"`` forces the offline judge for both formats (connectors are still validated; keys not needed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from green_agent.evaluations.agent_metrics import AgentSample, MetricSpec, evaluate_samples
from green_agent.evaluations.connectors import ConnectorError, resolve_connector
from green_agent.evaluations.fairforge import run_agentic
from green_agent.evaluations.fairforge_request import RunError
from green_agent.evaluations.judge import Judge, JudgeSettings, LexicalJudge, LlmJudge
from green_agent.evaluations.judge_cache import JudgeCache

DEFAULT_METRICS = ("agent_goal_accuracy", "tool_call_accuracy", "topic_adherence")
JudgeMode = Literal["auto", "lexical", "llm"]


class ScoreFileError(ValueError):
    """The document cannot be scored; the message says why (never a key)."""


def document_kind(document: Any) -> Literal["run", "samples"]:
    """``run`` or ``samples``; ScoreFileError for anything else."""
    if isinstance(document, Mapping):
        if "samples" in document:
            return "samples"
        if "datasets" in document or "connector" in document:
            return "run"
    raise ScoreFileError(
        "unrecognised document: expected a /run request (with 'datasets') or ragas-style samples (with 'samples')"
    )


def _metric_specs(raw: Any) -> list[MetricSpec]:
    items = raw if raw is not None else list(DEFAULT_METRICS)
    if not isinstance(items, list) or not items:
        raise ScoreFileError("metrics must be a non-empty list of names or {name, mode} objects")
    specs = []
    for index, item in enumerate(items):
        try:
            specs.append(MetricSpec.model_validate({"name": item} if isinstance(item, str) else item))
        except ValidationError as error:
            first = error.errors()[0]
            raise ScoreFileError(f"metrics[{index}]: {first['msg']}") from None
    return specs


def _samples(raw: Any) -> list[AgentSample]:
    if not isinstance(raw, list) or not raw:
        raise ScoreFileError("samples must be a non-empty list")
    out = []
    for index, item in enumerate(raw):
        try:
            out.append(AgentSample.model_validate(item))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ScoreFileError(f"samples[{index}].{where}: {first['msg']}") from None
    return out


def _llm_judges(raw: Any, settings: JudgeSettings, cache: JudgeCache | None) -> list[LlmJudge]:
    if not isinstance(raw, list) or not raw:
        raise ScoreFileError("no judges: list connector blocks under 'judges', or use the lexical judge")
    judges = []
    for index, block in enumerate(raw):
        if not isinstance(block, Mapping):
            raise ScoreFileError(f"judges[{index}] must be a connector object")
        try:
            resolved = resolve_connector(
                block,
                environ=settings.environ,
                base_url_overrides=settings.base_url_overrides,
                allow_base_url=settings.allow_base_url,
            )
        except ConnectorError as error:
            raise ScoreFileError(f"judges[{index}]: Failed to create LLM connector: {error}") from None
        judges.append(
            LlmJudge(
                resolved,
                use_structured_output=bool(block.get("use_structured_output", True)),
                cache=cache,
                retry=settings.retry,
                max_concurrency=settings.max_concurrency,
                providers=settings.providers,
                http_client=settings.http_client,
            )
        )
    return judges


async def score_document(
    document: Any, *, settings: JudgeSettings, judge: JudgeMode = "auto", cache: JudgeCache | None = None
) -> dict[str, Any]:
    """Score a document; returns a JSON-ready dict with ``kind`` = run | samples. Raises ScoreFileError."""
    kind = document_kind(document)
    if kind == "run":
        run_settings = settings
        if judge == "lexical":
            run_settings = dataclasses.replace(settings, offline=True)
        elif judge == "llm" and isinstance(document.get("config"), Mapping) and document["config"].get("judge"):
            document = {**document, "config": {**document["config"], "judge": "llm"}}
        try:
            result = await run_agentic(document, run_settings, cache=cache)
        except RunError as error:
            raise ScoreFileError(error.message) from None
        return {"kind": "run", **result}
    samples = _samples(document.get("samples"))
    metrics = _metric_specs(document.get("metrics"))
    judges: list[Judge]
    llm: list[LlmJudge] = []
    if judge == "lexical" or (judge == "auto" and not document.get("judges")):
        judges = [LexicalJudge()]
    else:
        llm = _llm_judges(document.get("judges"), settings, cache)
        judges = list(llm)
    try:
        results, summaries = await evaluate_samples(samples, metrics, judges)
    finally:
        for item in llm:
            await item.aclose()
    return {
        "kind": "samples",
        "judges": [j.describe() for j in judges],
        "results": [r.model_dump(mode="json") for r in results],
        "summary": [s.model_dump(mode="json") for s in summaries],
    }
