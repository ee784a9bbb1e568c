"""Seed-compatible tool-use scorers built on the matching core: Fair-Forge tool correctness and FinAgent per case.

Both keep the seeds' component names, defaults and overall formulas so their numbers can be read the same way, and
fix the defects listed in each docstring. All comparisons go through
:func:`~green_agent.evaluations.metrics.toolcalls.match_tool_calls`, so duplicate calls are paired optimally and no
score
depends on the order in which calls were listed (except the explicit sequence component).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from green_agent.evaluations.metrics.toolcalls import (
    CanonicalOptions,
    ExtraArguments,
    MatchMode,
    ToolCall,
    ToolCallMatch,
    as_tool_calls,
    match_tool_calls,
)
from green_agent.statistics._validation import require_confidence, require_probability, require_real
from green_agent.statistics.intervals import wilson_interval

FAIR_FORGE_COMPONENTS: tuple[str, ...] = ("selection", "parameters", "sequence", "utilization")
FAIR_FORGE_DEFAULT_WEIGHTS: dict[str, float] = {name: 0.25 for name in FAIR_FORGE_COMPONENTS}

FINAGENT_OPTIONS = CanonicalOptions(
    casefold_strings=True, trim_strings=True, numeric_strings=False, unordered_lists=False, rel_tol=1e-9, abs_tol=1e-6
)
"""FinAgent's normalisation: strings case-insensitive and trimmed, numbers as floats within 1e-6 (the seed's
epsilon, plus a relative tolerance for large amounts), numeric strings *not* read as numbers, lists ordered."""


def _require_bool(name: str, value: Any) -> bool:
    if type(value) is not bool:
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


# --- Fair-Forge ----------------------------------------------------------------------------------------------------


class FairForgeToolCorrectness(BaseModel):
    """Fair-Forge's four tool-use components, their weighted overall score and the threshold decision."""

    model_config = ConfigDict(frozen=True)

    selection: float
    parameters: float
    sequence: float | None
    """``None`` when the order does not matter for this case (its weight is then dropped, not granted)."""
    utilization: float
    overall: float
    is_correct: bool
    tool_threshold: float
    weights: dict[str, float]
    """The normalised weights applied (summing to 1 over the components in use)."""
    match: ToolCallMatch
    notes: list[str]


def _normalised_weights(tool_weights: Mapping[str, float] | None, use_sequence: bool) -> dict[str, float]:
    if not isinstance(tool_weights, (Mapping, type(None))):
        raise ValueError(f"tool_weights must be a mapping of component -> weight, got {type(tool_weights).__name__}")
    raw = dict(FAIR_FORGE_DEFAULT_WEIGHTS if tool_weights is None else tool_weights)
    unknown = sorted(set(raw) - set(FAIR_FORGE_COMPONENTS))
    if unknown:
        raise ValueError(f"tool_weights has unknown component(s) {unknown}; allowed: {list(FAIR_FORGE_COMPONENTS)}")
    weights = {
        name: require_real(f"tool_weights[{name!r}]", raw.get(name, 0.0), low=0.0) for name in FAIR_FORGE_COMPONENTS
    }
    if not use_sequence:
        weights.pop("sequence")
    total = math.fsum(weights.values())
    if total <= 0.0:
        raise ValueError(
            "tool_weights must give a positive total weight to the components in use "
            f"({', '.join(weights)}), got {weights}"
        )
    return {name: w / total for name, w in weights.items()}


def fair_forge_tool_correctness(
    expected_tools: Sequence[ToolCall | Mapping[str, Any]],
    tools_used: Sequence[ToolCall | Mapping[str, Any]],
    *,
    final_answer_uses_tools: bool,
    tool_sequence_matters: bool = True,
    tool_weights: Mapping[str, float] | None = None,
    tool_threshold: float = 0.75,
    options: CanonicalOptions | None = None,
) -> FairForgeToolCorrectness:
    """Fair-Forge agentic tool correctness with the original's defects fixed.

    Components (each in [0, 1]):
      selection    Jaccard overlap of the sets of tool names expected and used (the original's four cases, subset
                   either way or partial overlap, are all this ratio).
      parameters   per expected call, the share of the union of argument keys present on both sides with equal
                   canonical values (the original's key-union rule: extra and missing arguments both count), averaged
                   over the expected calls; an expected call with no partner scores 0.
      sequence     longest common subsequence of the name sequences / number of expected calls; only when
                   ``tool_sequence_matters``.
      utilization  1.0 when ``final_answer_uses_tools`` else 0.0.
    overall = weighted sum with the weights normalised to 1 (default 0.25 each); ``is_correct`` when
    overall >= ``tool_threshold`` (default 0.75).

    Improvements over the original (``fair_forge.metrics.agentic.Agentic._evaluate_tool_correctness``):
      1. Duplicate calls are paired optimally (maximum-weight assignment). The original compared every expected
         call of a tool with the *first* used call of that name, so two expected calls with different arguments
         could never both be right, and an unused tool added one 0 per tool name instead of per expected call.
      2. Sequence is judged by relative order (LCS), not by equality of absolute ``step`` numbers: one extra call
         at the start no longer makes every later step "wrong".
      3. Expected tools but none used scores 0 on selection, parameters and sequence; the original returned no
         score at all (``None``), which silently dropped the worst cases from averages.
      4. When the order does not matter, the sequence component is left out and the remaining weights are
         renormalised; the original granted a free 1.0 (0.25 of the overall score) to every case.
      5. Arguments are compared canonically rather than with raw ``==``: numbers within a tolerance (``==`` fails
         ``0.1 + 0.2`` vs ``0.3``), ``True`` is not ``1`` (``==`` says it is), optional string folding and
         unordered lists via ``options``; and a key must be present on both sides to match (the original counted a
         key missing on one side and ``None`` on the other as equal).
      6. Weights are validated (known components, finite, non-negative, positive total) and normalised, so custom
         weights that do not sum to 1 cannot push the overall score outside [0, 1].
    The threshold default is 0.75 as in Fair-Forge's Lambda/README configuration; note that the library class's
    own default in the version read was 1.0.
    """
    final_answer_uses_tools = _require_bool("final_answer_uses_tools", final_answer_uses_tools)
    tool_sequence_matters = _require_bool("tool_sequence_matters", tool_sequence_matters)
    tool_threshold = require_probability("tool_threshold", tool_threshold)
    weights = _normalised_weights(tool_weights, tool_sequence_matters)
    expected = as_tool_calls(expected_tools, "expected_tools")
    used = as_tool_calls(tools_used, "tools_used")

    match = match_tool_calls(
        expected,
        used,
        mode=MatchMode.FLEXIBLE,
        argument_match_threshold=0.0,
        options=options,
        extra_arguments=ExtraArguments.PENALIZE,
    )
    exp_names = {c.name for c in expected}
    used_names = {c.name for c in used}
    union = exp_names | used_names
    selection = 1.0 if not union else len(exp_names & used_names) / len(union)
    if expected:
        parameters = math.fsum(p.argument_score for p in match.pairs) / len(expected)
    else:
        parameters = 1.0 if not used else 0.0
    sequence = match.order_score if tool_sequence_matters else None
    utilization = 1.0 if final_answer_uses_tools else 0.0
    values = {"selection": selection, "parameters": parameters, "sequence": sequence, "utilization": utilization}
    overall = min(1.0, max(0.0, math.fsum(w * float(values[name] or 0.0) for name, w in weights.items())))

    notes: list[str] = []
    if exp_names - used_names:
        notes.append(f"missing tools: {sorted(exp_names - used_names)}")
    if used_names - exp_names:
        notes.append(f"unexpected tools: {sorted(used_names - exp_names)}")
    unpaired = len(expected) - len(match.pairs)
    if unpaired:
        notes.append(f"{unpaired} expected call(s) without a call of the same tool")
    imperfect = sum(1 for p in match.pairs if p.argument_score < 1.0)
    if imperfect:
        notes.append(f"{imperfect} paired call(s) with differing arguments")
    if sequence is not None and sequence < 1.0:
        notes.append(f"order: {sequence:.2f} of expected calls in relative order")
    if not final_answer_uses_tools:
        notes.append("final answer does not use the tool results")
    return FairForgeToolCorrectness(
        selection=selection,
        parameters=parameters,
        sequence=sequence,
        utilization=utilization,
        overall=overall,
        is_correct=overall >= tool_threshold - 1e-12,
        tool_threshold=tool_threshold,
        weights=weights,
        match=match,
        notes=notes,
    )


# --- FinAgent ------------------------------------------------------------------------------------------------------


class FinAgentCaseScore(BaseModel):
    """One FinAgent test case: the three component scores, their mean, and passed / failed / errored."""

    model_config = ConfigDict(frozen=True)

    case_id: str | None
    status: Literal["passed", "failed", "errored"]
    tool_selection: float | None
    argument_match: float | None
    faithfulness: float | None
    overall: float | None
    pass_threshold: float
    error: str | None = None
    match: ToolCallMatch | None = None


class FinAgentSummary(BaseModel):
    """Totals over FinAgent cases; errored cases count in ``total`` and never as passed."""

    model_config = ConfigDict(frozen=True)

    total: int
    passed: int
    failed: int
    errored: int
    pass_rate: float | None
    """passed / total (errored cases included in the denominator); ``None`` when there are no cases."""
    pass_rate_ci_low: float | None
    pass_rate_ci_high: float | None
    confidence: float
    mean_tool_selection: float | None
    """Means over the scored (non-errored) cases."""
    mean_argument_match: float | None
    mean_faithfulness: float | None
    mean_overall: float | None


def finagent_case_score(
    expected_tools: Sequence[ToolCall | Mapping[str, Any]],
    actual_tools: Sequence[ToolCall | Mapping[str, Any]],
    *,
    faithfulness: float,
    case_id: str | None = None,
    pass_threshold: float = 0.7,
    options: CanonicalOptions | None = None,
) -> FinAgentCaseScore:
    """FinAgent's per-case scores from expected and actual tool calls plus an already-judged faithfulness score.

    tool_selection  share of the distinct expected tool names that were called (extra tools are not penalised);
                    1.0 when nothing was expected.
    argument_match  per expected call, the share of its expected fields that match the paired actual call (strings
                    case-insensitive and trimmed, numbers as floats within tolerance, nested objects recursively,
                    extra actual fields ignored), averaged over expected calls; an expected call with no call of
                    that tool scores 0; 1.0 when nothing was expected.
    overall         mean of tool_selection, argument_match and faithfulness; passed when >= ``pass_threshold``.

    Improvements over the original FinAgent evaluator:
      1. Expected calls are paired with actual calls by an optimal assignment; the original kept only the *last*
         call of each tool name (a dict overwritten in a loop) and then zipped by position, so repeated calls of
         one tool were compared with the wrong arguments.
      2. An expected tool that was never called scores 0 on its arguments; the original gave 1.0 to any expected
         call with empty expected arguments whether or not it was made.
      3. Booleans are not numbers (the original turned ``True`` into ``1.0``); numbers use a relative as well as
         the seed's absolute 1e-6 tolerance, so large amounts compare sensibly.
      4. A field whose expected value is ``null`` matches an explicit ``null``; the original treated every
         ``None`` as "missing" and failed it.
      5. Errored cases are kept (see :func:`finagent_errored_case` and :func:`summarize_finagent`) instead of
         vanishing from the totals.
    ``faithfulness`` comes from an LLM judge elsewhere; this library only checks it is a number in [0, 1].
    """
    faithfulness = require_probability("faithfulness", faithfulness)
    pass_threshold = require_probability("pass_threshold", pass_threshold)
    if case_id is not None and not isinstance(case_id, str):
        raise ValueError(f"case_id must be a string or None, got {type(case_id).__name__}")
    expected = as_tool_calls(expected_tools, "expected_tools")
    actual = as_tool_calls(actual_tools, "actual_tools")
    match = match_tool_calls(
        expected,
        actual,
        mode=MatchMode.FLEXIBLE,
        argument_match_threshold=0.0,
        options=options or FINAGENT_OPTIONS,
        extra_arguments=ExtraArguments.IGNORE,
    )
    exp_names = {c.name for c in expected}
    called = {c.name for c in actual}
    selection = len(exp_names & called) / len(exp_names) if exp_names else 1.0
    arguments = math.fsum(p.argument_score for p in match.pairs) / len(expected) if expected else 1.0
    overall = math.fsum((selection, arguments, faithfulness)) / 3.0
    passed = overall >= pass_threshold - 1e-12
    return FinAgentCaseScore(
        case_id=case_id,
        status="passed" if passed else "failed",
        tool_selection=selection,
        argument_match=arguments,
        faithfulness=faithfulness,
        overall=overall,
        pass_threshold=pass_threshold,
        match=match,
    )


def finagent_errored_case(error: str, *, case_id: str | None = None, pass_threshold: float = 0.7) -> FinAgentCaseScore:
    """A case that could not be scored (the agent or the judge raised): counted in the totals as errored."""
    if not isinstance(error, str):
        raise ValueError(f"error must be a string describing what failed, got {type(error).__name__}")
    pass_threshold = require_probability("pass_threshold", pass_threshold)
    return FinAgentCaseScore(
        case_id=case_id,
        status="errored",
        tool_selection=None,
        argument_match=None,
        faithfulness=None,
        overall=None,
        pass_threshold=pass_threshold,
        error=error,
    )


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize_finagent(cases: Sequence[FinAgentCaseScore], *, confidence: float = 0.95) -> FinAgentSummary:
    """Totals, pass rate with a Wilson interval (errored cases in the denominator) and mean component scores."""
    confidence = require_confidence("confidence", confidence)
    items = list(cases)
    for index, case in enumerate(items):
        if not isinstance(case, FinAgentCaseScore):
            raise ValueError(f"cases[{index}] must be a FinAgentCaseScore, got {type(case).__name__}")
    scored = [c for c in items if c.status != "errored"]
    passed = sum(1 for c in items if c.status == "passed")
    errored = len(items) - len(scored)
    wilson = wilson_interval(passed, len(items), confidence)
    return FinAgentSummary(
        total=len(items),
        passed=passed,
        failed=len(scored) - passed,
        errored=errored,
        pass_rate=passed / len(items) if items else None,
        pass_rate_ci_low=wilson.low if wilson else None,
        pass_rate_ci_high=wilson.high if wilson else None,
        confidence=confidence,
        mean_tool_selection=_mean([c.tool_selection for c in scored if c.tool_selection is not None]),
        mean_argument_match=_mean([c.argument_match for c in scored if c.argument_match is not None]),
        mean_faithfulness=_mean([c.faithfulness for c in scored if c.faithfulness is not None]),
        mean_overall=_mean([c.overall for c in scored if c.overall is not None]),
    )
