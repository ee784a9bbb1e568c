"""Unit checks of the evaluations' defences against hostile values: bounded JSON parsing, wire-safe output, linear
lexical matching, header checks that are not quadratic, and walks over agent data that do not recurse."""

from __future__ import annotations

import json
import math
import random

import pytest

from green_agent.evaluations import lexical
from green_agent.evaluations.csv_runner import _plain_numbers
from green_agent.evaluations.csv_suite import CsvLimits, CsvValidationError, parse_csv_suite
from green_agent.evaluations.safe_json import JsonRefused, loads_bounded, wire_safe

HEADER = "test_id,query,expected_tool,expected_args,expected_response_contains\n"


def test_loads_bounded_refuses_what_json_would_crash_on() -> None:
    assert loads_bounded('{"a": [1, 2.5, "x\\ud800"]}') == {"a": [1, 2.5, "x\ufffd"]}
    for text, reason in [
        ("[" * 65 + "]" * 65, "nested 65 levels deep"),
        ("[" * 50_000, "nested"),
        ("1" * 1_001, "more than 1000 digits"),
        ("NaN", "NaN is not a JSON number"),
        ("[-Infinity]", "-Infinity is not a JSON number"),
        ("1e400", "out of range"),
        ("9" * 400, "out of range"),
    ]:
        with pytest.raises(JsonRefused, match=reason):
            loads_bounded(text)
    with pytest.raises(json.JSONDecodeError):
        loads_bounded("{bad")


def test_wire_safe_output_parses_anywhere() -> None:
    value = {"\ud800key": [math.nan, math.inf, -math.inf, 1.5, ("t", "\udfff")], "ok": True, "n": None}
    safe = wire_safe(value)
    assert safe == {"\ufffdkey": [None, None, None, 1.5, ["t", "\ufffd"]], "ok": True, "n": None}
    json.dumps(safe, ensure_ascii=False, allow_nan=False).encode("utf-8")
    deep: object = "\ud800"
    for _ in range(100_000):  # no recursion: hostile nesting cannot exhaust the stack
        deep = [deep]
    assert wire_safe(deep) is not None


def test_plain_numbers_is_iterative() -> None:
    deep: object = 3.0
    for _ in range(100_000):
        deep = {"x": [deep]}
    out = _plain_numbers(deep)
    for _ in range(100_000):
        out = out["x"][0]
    assert out == 3 and isinstance(out, int)
    assert _plain_numbers({"a": [1.0, 2.5, 2.0**60, "s", None, True]}) == {"a": [1, 2.5, 2.0**60, "s", None, True]}


def test_lexical_pool_matches_the_pairwise_rule() -> None:
    rng = random.Random(20240611)
    values = [0.0, 0.1, 8, 8.4, 8.5, 1967.15, 1967.1513572, 1e12, 1e12 + 500, 123456789.123, math.inf]
    for _ in range(3_000):
        pool_tokens = [
            lexical.Number(rng.choice(values) * rng.choice([1, 1 + 1e-10, 1.01]), rng.randint(0, 9))
            for _ in range(rng.randint(0, 6))
        ]
        pool_tokens += rng.sample(["price", "aapl", "revenue"], rng.randint(0, 2))
        probe = rng.choice(
            [
                lexical.Number(rng.choice(values) * rng.choice([1, 1 + 1e-10]), rng.randint(0, 9)),
                rng.choice(["price", "ticker"]),
            ]
        )
        pool = lexical._Pool(pool_tokens)
        assert (probe in pool) == any(lexical.token_matches(probe, other) for other in pool_tokens), (
            probe,
            pool_tokens,
        )


@pytest.mark.timeout(120)  # a hang guard, not a speed assertion: the quadratic version ran for minutes
def test_lexical_scoring_of_long_texts_is_not_quadratic() -> None:
    rng = random.Random(7)
    numbers = " ".join(f"{rng.randint(0, 10**6)}.{rng.randint(0, 99)}" for _ in range(10_000))
    words = " ".join(f"w{rng.randint(0, 10**6)}" for _ in range(10_000))
    lexical.informative_recall(numbers, numbers[::-1], ignore=words)
    lexical.keyword_containment(words.split()[:5_000], words + " " + numbers)
    lexical.response_faithfulness(
        {"response": numbers, "expected_keywords": [], "tool_calls": [{"result": numbers.split(), "arguments": {}}]}
    )
    # pairwise matching took minutes on these (10,000 x 10,000 comparisons each); indexed, well under a second
    # (about a second on this 2-core machine; the timeout only catches a return to the quadratic version)


@pytest.mark.timeout(120)  # a hang guard: names.count() per column was quadratic, hours for this header
def test_csv_header_checks_are_linear_and_bounded() -> None:
    many = ",".join(["test_id"] * 200_000) + ",query,expected_tool,expected_args,expected_response_contains\n"
    with pytest.raises(CsvValidationError) as refused:
        parse_csv_suite(many.encode(), limits=CsvLimits(max_columns=1_000_000))
    assert [(p.row, p.column, p.message) for p in refused.value.problems] == [
        (1, "test_id", "column appears more than once")
    ]
    with pytest.raises(CsvValidationError) as capped:
        parse_csv_suite(many.encode())
    assert "at most 64 are accepted (max_columns)" in capped.value.problems[0].message


def test_csv_cells_beyond_the_csv_module_limit_are_named() -> None:
    data = (HEADER + "t1," + "q" * 200_000 + ",,,\n").encode()
    with pytest.raises(CsvValidationError) as refused:
        parse_csv_suite(data)
    [problem] = refused.value.problems
    assert problem.row == 2 and "max_cell_chars" in problem.message


def test_csv_json_cells_are_cleaned_and_bounded() -> None:
    suite = parse_csv_suite((HEADER + 't1,q,tool,"{""k\\ud800"": [""\\udc00"", 1.5]}",\n').encode())
    assert suite.cases[0].expected_tools[0].arguments == {"k\ufffd": ["\ufffd", 1.5]}
    with pytest.raises(CsvValidationError) as refused:
        parse_csv_suite((HEADER + 't1,q,tool,"' + "[" * 10_000 + '",\n').encode())
    assert refused.value.problems[0].column == "expected_args"
    assert "nested 10000 levels deep" in refused.value.problems[0].message
