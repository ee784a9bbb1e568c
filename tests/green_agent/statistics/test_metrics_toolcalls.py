"""Tool-call canonicalisation and optimal matching: docs/metrics.md's worked example, modes, edges and bad input."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from green_agent.evaluations.metrics import (
    CanonicalOptions,
    MatchMode,
    ToolCall,
    ToolCallMatch,
    argument_score,
    canonicalize,
    match_tool_calls,
    values_match,
)


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


REFERENCE = [call("search", q="a"), call("book", id=1, seats=2)]
ACTUAL = [call("search", q="a"), call("book", id=1, seats=3)]


# --- vectors -------------------------------------------------------------------------------------------------------


def test_book_pair_has_argument_score_one_half() -> None:
    result = match_tool_calls(REFERENCE, ACTUAL)
    book = next(p for p in result.pairs if p.name == "book")
    assert book.argument_score == 0.5 and book.correct is False
    assert result.mean_argument_score == 0.75
    assert (result.correct_count, result.precision, result.recall, result.f1) == (1, 0.5, 0.5, 0.5)
    assert result.order_score == 1.0 and result.exact_sequence is False
    assert (result.missing_expected, result.unexpected_actual) == ([1], [1])


@pytest.mark.parametrize("mode", ["strict", "flexible"])
def test_swapping_actual_calls_keeps_order_insensitive_scores_and_lowers_the_order_score(mode: str) -> None:
    straight = match_tool_calls(REFERENCE, ACTUAL, mode=mode, argument_match_threshold=0.5)
    swapped = match_tool_calls(REFERENCE, list(reversed(ACTUAL)), mode=mode, argument_match_threshold=0.5)
    for field in ("precision", "recall", "f1", "mean_argument_score", "correct_count"):
        assert getattr(straight, field) == getattr(swapped, field)
    assert straight.order_score == 1.0 and swapped.order_score == 0.5


def test_nested_objects_match_whatever_the_key_order() -> None:
    assert values_match({"f": {"year": 2024, "lang": "en"}}, {"f": {"lang": "en", "year": 2024}})
    result = match_tool_calls([call("s", f={"year": 2024, "lang": "en"})], [call("s", f={"lang": "en", "year": 2024})])
    assert result.f1 == 1.0 and result.exact_sequence


def test_float_and_int_match() -> None:
    assert values_match(1.0, 1)
    assert match_tool_calls([call("t", x=1.0)], [call("t", x=1)]).f1 == 1.0


def test_lcs_order_score_and_unordered_match() -> None:
    expected = [call("A"), call("B"), call("C")]
    actual = [call("B"), call("A"), call("C")]
    result = match_tool_calls(expected, actual)
    assert result.order_score == pytest.approx(2 / 3)
    assert result.f1 == 1.0 and result.precision == 1.0 and result.recall == 1.0
    assert result.exact_sequence is False


def test_two_identical_expected_calls_against_the_same_two_score_one_not_one_half() -> None:
    result = match_tool_calls([call("search", q="a")] * 2, [call("search", q="a")] * 2)
    assert (result.f1, result.correct_count, result.exact_sequence) == (1.0, 2, True)


def test_repeated_tool_with_different_arguments_is_paired_optimally() -> None:
    expected = [call("get", id=1), call("get", id=2), call("get", id=3)]
    actual = [call("get", id=3), call("get", id=1), call("get", id=2)]
    result = match_tool_calls(expected, actual)
    assert result.f1 == 1.0
    assert {(p.expected_index, p.actual_index) for p in result.pairs} == {(0, 1), (1, 2), (2, 0)}


def test_optimal_assignment_beats_greedy_first_choice() -> None:
    # Greedy in list order gives expected[0] its perfect partner actual[0] and leaves expected[1] with actual[1]
    # (score 0.6 < 0.8: not correct). The optimum pairs expected[0]-actual[1] (0.8) and expected[1]-actual[0] (0.8).
    expected = [call("t", a=1, b=1, c=1, d=1, e=1), call("t", a=1, b=1, c=1, d=2, e=1)]
    actual = [call("t", a=1, b=1, c=1, d=1, e=1), call("t", a=1, b=1, c=1, d=1, e=0)]
    result = match_tool_calls(expected, actual, mode="flexible", argument_match_threshold=0.8)
    assert result.correct_count == 2 and result.f1 == 1.0
    assert result.mean_argument_score == pytest.approx(0.8)
    assert {(p.expected_index, p.actual_index) for p in result.pairs} == {(0, 1), (1, 0)}


def test_among_equally_many_correct_pairs_the_closer_arguments_win() -> None:
    expected = [call("t", a=1, b=1), call("t", a=2, b=2)]
    actual = [call("t", a=2, b=0), call("t", a=1, b=1)]
    result = match_tool_calls(expected, actual, mode="flexible", argument_match_threshold=0.0)
    assert result.mean_argument_score == pytest.approx(0.75)  # 1.0 and 0.5, not 0.0 and 0.0


# --- modes and options ---------------------------------------------------------------------------------------------


def test_flexible_uses_the_share_of_reference_keys_against_the_threshold() -> None:
    expected = [call("t", a=1, b=2, c=3, d=4, e=5)]
    four_of_five = [call("t", a=1, b=2, c=3, d=4, e=0)]
    assert match_tool_calls(expected, four_of_five, mode="flexible").f1 == 1.0  # 0.8 >= 0.8
    assert match_tool_calls(expected, four_of_five, mode="strict").f1 == 0.0
    assert match_tool_calls(expected, four_of_five, mode=MatchMode.FLEXIBLE, argument_match_threshold=0.81).f1 == 0.0


def test_strict_requires_identical_argument_sets_flexible_ignores_extras() -> None:
    expected, actual = [call("t", a=1)], [call("t", a=1, extra=True)]
    assert match_tool_calls(expected, actual, mode="strict").correct_count == 0
    assert match_tool_calls(expected, actual, mode="flexible").correct_count == 1
    penalised = match_tool_calls(expected, actual, mode="flexible", extra_arguments="penalize")
    assert penalised.pairs[0].argument_score == 0.5 and penalised.correct_count == 0


def test_argument_score_function() -> None:
    assert argument_score({"id": 1, "seats": 2}, {"id": 1.0, "seats": 3}) == 0.5
    assert argument_score({}, {"x": 1}) == 1.0
    assert argument_score({"a": 1}, {"a": 1, "b": 2}, extra_arguments="penalize") == 0.5
    assert argument_score({"a": None}, {"a": None}) == 1.0
    assert argument_score({"a": None}, {}) == 0.0


def test_string_options() -> None:
    folded = CanonicalOptions(casefold_strings=True, trim_strings=True)
    assert not values_match("Tech", "tech ")
    assert values_match("Tech", "tech ", folded)
    assert values_match("STRASSE", "straße", CanonicalOptions(casefold_strings=True))
    assert not values_match(" x", "x", CanonicalOptions(casefold_strings=True))


def test_numeric_strings_option() -> None:
    numeric = CanonicalOptions(numeric_strings=True)
    assert not values_match("7", 7)
    assert values_match("7", 7, numeric)
    assert values_match(" 1.5e3 ", 1500, numeric)
    assert not values_match("7 apples", 7, numeric)
    assert not values_match("nan", float("nan"), numeric)  # only decimal literals are numbers


def test_unordered_lists_option_keeps_multiplicity() -> None:
    unordered = CanonicalOptions(unordered_lists=True)
    assert not values_match(["AAPL", "MSFT"], ["MSFT", "AAPL"])
    assert values_match(["AAPL", "MSFT"], ["MSFT", "AAPL"], unordered)
    assert not values_match(["a", "a", "b"], ["a", "b", "b"], unordered)
    assert values_match([1.0, 2.0000000001], [2, 1], CanonicalOptions(unordered_lists=True, rel_tol=1e-6))
    assert values_match([{"b": 1, "a": 2}, 3], [3, {"a": 2, "b": 1}], unordered)


def test_tolerances() -> None:
    assert values_match(0.1 + 0.2, 0.3)
    assert not values_match(1000.0, 1000.5)
    assert values_match(1000.0, 1000.5, CanonicalOptions(rel_tol=1e-3))
    assert values_match(0.0, 1e-7, CanonicalOptions(abs_tol=1e-6))
    assert not values_match(0.0, 1e-7)


def test_booleans_are_not_numbers_and_nan_equals_nan() -> None:
    assert not values_match(True, 1)
    assert not values_match([True], [1.0])
    assert not values_match(False, 0)
    assert values_match(True, True)
    assert values_match(float("nan"), float("nan"))
    assert values_match(None, None) and not values_match(None, 0)


def test_containers_of_different_kinds_do_not_match() -> None:
    assert not values_match({"a": 1}, [("a", 1)])
    assert not values_match([1, 2], [1, 2, 3])
    assert not values_match({"a": 1}, {"a": 1, "b": 2})
    assert values_match((1, 2), [1, 2])


def test_canonical_form() -> None:
    options = CanonicalOptions(casefold_strings=True, trim_strings=True, numeric_strings=True, unordered_lists=True)
    value = {"z": [" B", "a", "3"], "a": {"y": (True, None), "x": 2.5}}
    canon = canonicalize(value, options)
    assert canon == {"a": {"x": 2.5, "y": [None, True]}, "z": [3, "a", "b"]}
    assert list(canon) == ["a", "z"]
    assert canonicalize(canon, options) == canon
    assert canonicalize({3, 1, 2}) == [1, 2, 3]


# --- edges ---------------------------------------------------------------------------------------------------------


def test_empty_lists() -> None:
    both = match_tool_calls([], [])
    assert (both.precision, both.recall, both.f1, both.order_score, both.exact_sequence) == (1.0, 1.0, 1.0, 1.0, True)
    assert both.mean_argument_score is None
    nothing_done = match_tool_calls([call("a")], [])
    assert (nothing_done.precision, nothing_done.recall, nothing_done.f1, nothing_done.order_score) == (0, 0, 0, 0)
    nothing_expected = match_tool_calls([], [call("a")])
    assert (nothing_expected.precision, nothing_expected.recall, nothing_expected.f1) == (0, 0, 0)
    assert nothing_expected.unexpected_actual == [0]


def test_different_tool_names_never_pair() -> None:
    result = match_tool_calls([call("a", x=1)], [call("b", x=1)])
    assert result.pairs == [] and result.mean_argument_score is None and result.f1 == 0.0


def test_mapping_inputs_and_json_string_arguments() -> None:
    openai_style = {"name": "book", "arguments": json.dumps({"id": 1, "seats": 2})}
    fair_forge_style = {"tool_name": "book", "parameters": {"seats": 2, "id": 1}, "step": 3}
    result = match_tool_calls([fair_forge_style], [openai_style])
    assert result.f1 == 1.0


def test_result_is_json_serialisable() -> None:
    result = match_tool_calls(REFERENCE, ACTUAL)
    assert ToolCallMatch.model_validate_json(json.dumps(result.model_dump(mode="json"))) == result


# --- bad input -----------------------------------------------------------------------------------------------------


def test_unknown_mode_is_rejected_listing_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"^mode must be one of 'strict', 'flexible', got 'fuzzy'"):
        match_tool_calls([], [], mode="fuzzy")


@pytest.mark.parametrize("threshold", [float("nan"), 1.5, -0.1, "0.8"])
def test_bad_threshold(threshold: object) -> None:
    with pytest.raises(ValueError, match=r"^argument_match_threshold must be a finite number in \[0.0, 1.0\]"):
        match_tool_calls([], [], argument_match_threshold=threshold)  # type: ignore[arg-type]


def test_bad_extra_arguments_mode() -> None:
    with pytest.raises(ValueError, match=r"^extra_arguments must be one of 'ignore', 'penalize'"):
        argument_score({}, {}, extra_arguments="sometimes")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rel_tol": float("nan")}, "rel_tol"),
        ({"abs_tol": float("inf")}, "abs_tol"),
        ({"rel_tol": -1.0}, "rel_tol"),
        ({"casefold_strings": "yes"}, "casefold_strings"),
        ({"fuzzy": True}, "fuzzy"),
    ],
)
def test_bad_canonical_options_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field) as info:
        CanonicalOptions(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"arguments": {}}], r"^expected\[0\] must have a non-empty string 'name'"),
        ([{"name": ""}], r"^expected\[0\] must have a non-empty string 'name'"),
        (["search"], r"^expected\[0\] must be a ToolCall or a mapping"),
        ([{"name": "a", "arguments": [1, 2]}], r"^expected\[0\]\.arguments must be a mapping"),
        ([{"name": "a", "arguments": "{not json"}], r"^expected\[0\]\.arguments is a string that is not valid JSON"),
        ("search", r"^expected must be an ordered sequence"),
    ],
)
def test_bad_calls_are_rejected_naming_the_position(calls: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        match_tool_calls(calls, [])  # type: ignore[arg-type]


def test_bad_options_object() -> None:
    with pytest.raises(ValueError, match=r"^options must be a CanonicalOptions"):
        match_tool_calls([], [], options={"rel_tol": 1})  # type: ignore[arg-type]
