"""The lexical judge's rules: deterministic, explainable numbers without a key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from green_agent.evaluations.lexical import (
    answer_correctness,
    informative_recall,
    keyword_containment,
    response_faithfulness,
    tokens,
)


@pytest.mark.parametrize(
    "query, answer, truth, score",
    [
        ("What is 5 + 3?", "The result is 8.", "5 + 3 equals 8", 1.0),  # restating the question is not the answer
        ("What is 5 + 3?", "The result is 9.", "5 + 3 equals 8", 0.0),
        ("Capital of France?", "The capital of France is Paris.", "Paris", 1.0),
        ("Capital of France?", "Lyon", "Paris", 0.0),
        ("Price?", "It costs $1,967.15 today", "1967.1513", 1.0),  # precision of the less precise number
        ("Price?", "It costs 8.5", "8", 0.0),
    ],
)
def test_answer_correctness(query: str, answer: str, truth: str, score: float) -> None:
    result = answer_correctness({"query": query, "answer": answer, "ground_truth": truth})
    assert result["correctness_score"] == score
    assert result["reasoning"].startswith("lexical:")


def test_keyword_containment_reports_what_is_missing() -> None:
    score, found, missing = keyword_containment(["Apple", "195.20", "market cap"], "Apple trades at $195.2")
    assert (score, found, missing) == (pytest.approx(2 / 3), ["Apple", "195.20"], ["market cap"])


def test_faithfulness_without_keywords_checks_figures_against_tool_results() -> None:
    inputs = {
        "response": "AAPL is at $195.20, up 3%",
        "expected_keywords": [],
        "tool_calls": [
            {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}, "result": {"price": 195.2, "change_pct": 0.84}}
        ],
    }
    result = response_faithfulness(inputs)
    assert result["score"] == 0.5  # 195.20 backed, 3 is not


def test_tokens_fold_plurals_and_read_numbers() -> None:
    assert tokens("Prices: $1,000.50 and 7%")[0] == "price"
    assert [t.value for t in tokens("$1,000.50 and 7%") if not isinstance(t, str)] == [1000.5, 7.0]


@given(st.text(max_size=80), st.text(max_size=80))
def test_informative_recall_is_a_share(reference: str, candidate: str) -> None:
    score, found, missing = informative_recall(reference, candidate)
    assert 0.0 <= score <= 1.0
    assert informative_recall(reference, candidate) == (score, found, missing)  # deterministic


@given(st.text(min_size=1, max_size=80))
def test_a_text_contains_its_own_reference_terms(text: str) -> None:
    assert informative_recall(text, text)[0] == 1.0
