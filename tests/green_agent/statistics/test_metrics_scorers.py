"""Seed-compatible scorers: Fair-Forge tool correctness and FinAgent cases, with the fixes over the originals."""

from __future__ import annotations

import json

import pytest

from green_agent.evaluations.metrics import (
    FairForgeToolCorrectness,
    FinAgentSummary,
    ToolCall,
    fair_forge_tool_correctness,
    finagent_case_score,
    finagent_errored_case,
    summarize_finagent,
)


def ff(name: str, step: int | None = None, **parameters: object) -> dict[str, object]:
    """A Fair-Forge style tool record."""
    record: dict[str, object] = {"tool_name": name, "parameters": parameters}
    if step is not None:
        record["step"] = step
    return record


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


# --- Fair-Forge ----------------------------------------------------------------------------------------------------


def test_fair_forge_perfect_use_is_correct() -> None:
    tools = [ff("calculator", 1, operation="add", a=15, b=27)]
    score = fair_forge_tool_correctness(tools, tools, final_answer_uses_tools=True)
    assert (score.selection, score.parameters, score.sequence, score.utilization) == (1.0, 1.0, 1.0, 1.0)
    assert score.overall == 1.0 and score.is_correct and score.notes == []


def test_fair_forge_parameters_use_the_union_of_keys() -> None:
    expected = [ff("weather", city="Paris", units="metric")]
    used = [ff("weather", city="Paris", units="imperial", lang="fr")]
    score = fair_forge_tool_correctness(expected, used, final_answer_uses_tools=True)
    assert score.parameters == pytest.approx(1 / 3)  # city matches; units differs; lang is extra


def test_fair_forge_expected_tools_but_none_used_scores_zero_not_null() -> None:
    score = fair_forge_tool_correctness([ff("search", q="x")], [], final_answer_uses_tools=False)
    assert (score.selection, score.parameters, score.sequence, score.utilization) == (0.0, 0.0, 0.0, 0.0)
    assert score.overall == 0.0 and not score.is_correct
    assert any("missing tools" in note for note in score.notes)


def test_fair_forge_duplicate_calls_are_paired_optimally() -> None:
    # The original compared both expected calls with the first used call: 0 + 1 -> parameters 0.5.
    expected = [ff("calc", a=1), ff("calc", a=2)]
    used = [ff("calc", a=2), ff("calc", a=1)]
    score = fair_forge_tool_correctness(expected, used, final_answer_uses_tools=True, tool_sequence_matters=False)
    assert score.parameters == 1.0 and score.is_correct


def test_fair_forge_sequence_is_relative_order_not_absolute_steps() -> None:
    # One extra call first shifts every step number; the original scored the sequence 0, relative order is intact.
    expected = [ff("a", 1), ff("b", 2), ff("c", 3)]
    used = [ff("lookup", 1), ff("a", 2), ff("b", 3), ff("c", 4)]
    score = fair_forge_tool_correctness(expected, used, final_answer_uses_tools=True)
    assert score.sequence == 1.0
    assert score.selection == pytest.approx(3 / 4)
    swapped = fair_forge_tool_correctness(expected, [ff("b"), ff("a"), ff("c")], final_answer_uses_tools=True)
    assert swapped.sequence == pytest.approx(2 / 3)


def test_fair_forge_order_not_required_drops_the_component_and_renormalises() -> None:
    expected = [ff("a", x=1), ff("b", y=2)]
    used = [ff("b", y=2), ff("a", x=1)]
    score = fair_forge_tool_correctness(expected, used, final_answer_uses_tools=False, tool_sequence_matters=False)
    assert score.sequence is None
    assert score.weights == pytest.approx({"selection": 1 / 3, "parameters": 1 / 3, "utilization": 1 / 3})
    assert score.overall == pytest.approx(2 / 3)  # no free 0.25 for an order that was not judged
    assert not score.is_correct


def test_fair_forge_threshold_boundary_is_inclusive() -> None:
    tools = [ff("a", x=1)]
    score = fair_forge_tool_correctness(tools, tools, final_answer_uses_tools=False)
    assert score.overall == pytest.approx(0.75) and score.is_correct
    strict = fair_forge_tool_correctness(tools, tools, final_answer_uses_tools=False, tool_threshold=1.0)
    assert not strict.is_correct


def test_fair_forge_custom_weights_are_normalised() -> None:
    tools = [ff("a", x=1)]
    score = fair_forge_tool_correctness(
        tools, [ff("a", x=2)], final_answer_uses_tools=True, tool_weights={"selection": 2, "parameters": 2}
    )
    assert score.weights == {"selection": 0.5, "parameters": 0.5, "sequence": 0.0, "utilization": 0.0}
    assert score.overall == pytest.approx(0.5)


def test_fair_forge_unexpected_tools_when_none_expected() -> None:
    score = fair_forge_tool_correctness([], [ff("a")], final_answer_uses_tools=True)
    assert (score.selection, score.parameters, score.sequence) == (0.0, 0.0, 0.0)
    nothing = fair_forge_tool_correctness([], [], final_answer_uses_tools=False, tool_sequence_matters=False)
    assert (nothing.selection, nothing.parameters) == (1.0, 1.0)


def test_fair_forge_result_is_json_serialisable() -> None:
    score = fair_forge_tool_correctness([ff("a", x=1)], [ff("a", x=1.0)], final_answer_uses_tools=True)
    assert FairForgeToolCorrectness.model_validate_json(json.dumps(score.model_dump(mode="json"))) == score


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_weights": {"speed": 1.0}}, r"^tool_weights has unknown component"),
        ({"tool_weights": {"selection": -1.0}}, r"^tool_weights\['selection'\] must be"),
        ({"tool_weights": {"selection": float("nan")}}, r"^tool_weights\['selection'\] must be"),
        ({"tool_weights": {"sequence": 1.0}, "tool_sequence_matters": False}, r"^tool_weights must give a positive"),
        ({"tool_weights": [0.25] * 4}, r"^tool_weights must be a mapping"),
        ({"tool_threshold": 1.2}, r"^tool_threshold must be"),
        ({"final_answer_uses_tools": 1}, r"^final_answer_uses_tools must be True or False"),
        ({"tool_sequence_matters": "no"}, r"^tool_sequence_matters must be True or False"),
    ],
)
def test_fair_forge_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"final_answer_uses_tools": True} | kwargs
    with pytest.raises(ValueError, match=message):
        fair_forge_tool_correctness([ff("a")], [ff("a")], **arguments)  # type: ignore[arg-type]


# --- FinAgent ------------------------------------------------------------------------------------------------------


def test_finagent_numbers_within_tolerance_numeric_strings_not_coerced() -> None:
    expected = [call("compound_interest", principal=1000, annual_rate=7, years=10)]
    actual = [call("compound_interest", principal=1000.0000001, annual_rate="7", years=10, compounding="monthly")]
    case = finagent_case_score(expected, actual, faithfulness=1.0)
    assert case.argument_match == pytest.approx(2 / 3)
    assert case.tool_selection == 1.0


def test_finagent_strings_are_case_insensitive_and_trimmed_extra_fields_ignored() -> None:
    case = finagent_case_score(
        [call("screen", sector="Tech", limit=5)], [call("screen", sector="tech ", limit=5, x=1)], faithfulness=0.9
    )
    assert case.argument_match == 1.0


def test_finagent_lists_are_ordered() -> None:
    case = finagent_case_score(
        [call("prices", tickers=["AAPL", "MSFT"])], [call("prices", tickers=["MSFT", "AAPL"])], faithfulness=1.0
    )
    assert case.argument_match == 0.0


def test_finagent_nested_objects_recursively() -> None:
    case = finagent_case_score(
        [call("q", f={"year": 2024, "lang": "EN"})], [call("q", f={"lang": "en", "year": 2024.0})], faithfulness=1.0
    )
    assert case.argument_match == 1.0


def test_finagent_selection_ignores_extra_tools_and_counts_missing_ones() -> None:
    expected = [call("price", t="A"), call("news", t="A")]
    case = finagent_case_score(expected, [call("price", t="A"), call("chart")], faithfulness=1.0)
    assert case.tool_selection == 0.5
    assert case.argument_match == 0.5  # the uncalled expected tool scores 0 on its arguments


def test_finagent_repeated_tool_is_paired_optimally() -> None:
    expected = [call("price", t="AAPL"), call("price", t="MSFT")]
    actual = [call("price", t="msft"), call("price", t="aapl")]
    assert finagent_case_score(expected, actual, faithfulness=1.0).argument_match == 1.0


def test_finagent_overall_is_the_mean_and_passes_at_0_7() -> None:
    expected = [call("price", t="A", d="x", e=1)]
    actual = [call("price", t="A", d="y", e=2)]
    case = finagent_case_score(expected, actual, faithfulness=0.7, case_id="c1")
    assert case.overall == pytest.approx((1.0 + 1 / 3 + 0.7) / 3)
    assert case.status == "failed" and case.case_id == "c1"
    boundary = finagent_case_score([call("p")], [call("p")], faithfulness=0.1)
    assert boundary.overall == pytest.approx(0.7) and boundary.status == "passed"


def test_finagent_errored_cases_count_in_totals() -> None:
    ok = finagent_case_score([call("p")], [call("p")], faithfulness=1.0, case_id="ok")
    bad = finagent_case_score([call("p")], [], faithfulness=0.2, case_id="bad")
    err = finagent_errored_case("agent timed out", case_id="err")
    summary = summarize_finagent([ok, bad, err])
    assert (summary.total, summary.passed, summary.failed, summary.errored) == (3, 1, 1, 1)
    assert summary.pass_rate == pytest.approx(1 / 3)
    assert summary.mean_faithfulness == pytest.approx(0.6)
    assert summary.mean_tool_selection == pytest.approx(0.5)
    assert summary.pass_rate_ci_low is not None and summary.pass_rate_ci_high is not None
    assert summary.pass_rate_ci_low < 1 / 3 < summary.pass_rate_ci_high
    assert err.status == "errored" and err.overall is None and err.error == "agent timed out"
    assert FinAgentSummary.model_validate_json(summary.model_dump_json()) == summary


def test_finagent_empty_summary() -> None:
    summary = summarize_finagent([])
    assert summary.total == 0 and summary.pass_rate is None and summary.mean_overall is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"faithfulness": 1.2}, r"^faithfulness must be a finite number in \[0.0, 1.0\]"),
        ({"faithfulness": float("nan")}, r"^faithfulness must be"),
        ({"faithfulness": None}, r"^faithfulness must be"),
        ({"faithfulness": 0.5, "pass_threshold": -0.1}, r"^pass_threshold must be"),
        ({"faithfulness": 0.5, "case_id": 3}, r"^case_id must be a string"),
    ],
)
def test_finagent_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        finagent_case_score([call("p")], [call("p")], **kwargs)  # type: ignore[arg-type]


def test_finagent_summary_rejects_foreign_items() -> None:
    with pytest.raises(ValueError, match=r"^cases\[0\] must be a FinAgentCaseScore"):
        summarize_finagent([{"status": "passed"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"^error must be a string"):
        finagent_errored_case(RuntimeError("x"))  # type: ignore[arg-type]
