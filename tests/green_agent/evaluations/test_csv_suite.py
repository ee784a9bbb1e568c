"""CSV suite validation: every problem reported with its row and column, in one pass."""

from __future__ import annotations

import pytest

from green_agent.evaluations import CsvValidationError, parse_csv_suite
from tests.green_agent.evaluations.conftest import SAMPLE_CSV

HEADER = "test_id,query,expected_tool,expected_args,expected_response_contains\n"


def _problems(text: str | bytes, **kwargs: int) -> list[tuple[int | None, str | None, str]]:
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(CsvValidationError) as caught:
        parse_csv_suite(data, **kwargs)
    return [(p.row, p.column, p.message) for p in caught.value.problems]


def test_the_sample_suite_is_valid() -> None:
    suite = parse_csv_suite(SAMPLE_CSV.read_bytes())
    assert 9 <= len(suite.cases) <= 12
    compare = next(c for c in suite.cases if c.test_id == "fin-007")
    assert [(e.name, e.arguments) for e in compare.expected_tools] == [
        ("get_stock_price", {"ticker": "AAPL"}),
        ("get_stock_price", {"ticker": "MSFT"}),
    ]
    assert compare.expected_keywords == ["195.20", "425.50"]
    assert compare.row == 8
    no_tool = next(c for c in suite.cases if c.test_id == "fin-010")
    assert no_tool.expected_tools == []


def test_doubled_quotes_bom_crlf_blank_rows_and_extra_columns() -> None:
    text = (
        "\ufeffTest_ID , Query,expected_tool,expected_args,expected_response_contains,owner\r\n"
        't1,"Price of ""AAPL""?",get_stock_price,"{""ticker"": ""AAPL""}"," AAPL , 195.20 ,",me\r\n'
        ",,,,,\r\n"
        "t2,Hello,,,\r\n"
    )
    suite = parse_csv_suite(text.encode())
    first, second = suite.cases
    assert first.query == 'Price of "AAPL"?'
    assert first.expected_tools[0].arguments == {"ticker": "AAPL"}
    assert first.expected_keywords == ["AAPL", "195.20"]
    assert (second.row, second.expected_tools, second.expected_keywords) == (4, [], [])
    assert suite.warnings == ["ignored column(s): owner"]


def test_missing_columns_are_named() -> None:
    problems = _problems("test_id,query,expected_tool\nt1,q,get_stock_price\n")
    assert [(r, c) for r, c, _m in problems] == [(1, "expected_args"), (1, "expected_response_contains")]
    assert "required column 'expected_args' is missing" in problems[0][2]


def test_every_row_problem_has_row_and_column() -> None:
    text = (
        HEADER
        + "\n".join(
            [
                't1,ok,get_stock_price,"{""ticker"": ""AAPL""}",',  # row 2: fine
                "t2,bad json,get_stock_price,\"{'ticker': 'AAPL'}\",",  # row 3: single quotes
                't3,mismatch,"[""a"", ""b""]","[{""x"": 1}]",',  # row 4: 2 tools, 1 args object
                't4,object for two,"[""a"", ""b""]","{""x"": 1}",',  # row 5: one object for 2 tools
                't5,bad tool list,"[""a"", 3]",,',  # row 6: not names
                "t1,duplicate id,get_stock_price,,",  # row 7: duplicate test_id
                "t7,,get_stock_price,,",  # row 8: empty query
                't8,args without tool,,"{""x"": 1}",',  # row 9
                ",no id,get_stock_price,,",  # row 10
                't10,broken json,get_stock_price,"{""ticker"": }",',  # row 11
                "t11,bad tool name,get stock price,,",  # row 12
            ]
        )
        + "\n"
    )
    problems = _problems(text)
    where = [(r, c) for r, c, _m in problems]
    assert where == [
        (3, "expected_args"),
        (4, "expected_args"),
        (5, "expected_args"),
        (6, "expected_tool"),
        (7, "test_id"),
        (8, "query"),
        (9, "expected_args"),
        (10, "test_id"),
        (11, "expected_args"),
        (12, "expected_tool"),
    ]
    messages = {(r, c): m for r, c, m in problems}
    assert "double quotes" in messages[(3, "expected_args")]
    assert "names 2 tool(s) but expected_args has 1 argument object(s)" in messages[(4, "expected_args")]
    assert "one JSON object but expected_tool names 2 tools" in messages[(5, "expected_args")]
    assert "first at row 2" in messages[(7, "test_id")]
    assert "not valid JSON: Expecting value at character 12" in messages[(11, "expected_args")]


def test_wrong_encoding_names_row_and_column() -> None:
    data = (HEADER + "t1,ok,get_stock_price,,\n").encode() + "t2,caf\u00e9 price,get_stock_price,,\n".encode("latin-1")
    [(row, column, message)] = _problems(data)
    assert (row, column) == (3, "query")
    assert "not valid UTF-8 (byte 0xE9" in message


def test_too_many_fields_in_a_row() -> None:
    [(row, column, message)] = _problems(HEADER + "t1,a,b,c,d,e,f\n")
    assert (row, column) == (2, None) and "7 fields but the header has 5" in message


def test_case_and_size_limits() -> None:
    rows = "".join(f"t{i},q{i},,,\n" for i in range(4))
    [(row, _c, message)] = _problems(HEADER + rows, max_cases=3)
    assert row == 5 and "more than 3 test cases" in message
    [(row, _c, message)] = _problems(HEADER + rows, max_bytes=20)
    assert row is None and "the limit is 20 bytes" in message


def test_empty_and_header_only_files() -> None:
    assert _problems(b"")[0][2] == "the file is empty"
    assert _problems(HEADER)[0][2] == "no test cases (only a header)"
