"""CSV test suites (the FinAgent format): parsing and validation that names the row and column of every problem.

Columns (header names are trimmed and case-insensitive; other columns are ignored with a warning):

    test_id                      unique, non-empty
    query                        the message sent to the agent, non-empty
    expected_tool                a tool name, a JSON array of names (``["get_stock_price", "get_company_info"]``),
                                 or empty when no tool should be called
    expected_args                a JSON object (one expected tool), a JSON array of objects (one per expected tool,
                                 same order), or empty (no argument expectations). Inside a CSV field quotes are
                                 doubled: ``"{""ticker"": ""AAPL""}"``
    expected_response_contains   comma-separated keywords the response should contain (may be empty)

Rows are numbered like a spreadsheet: the header is row 1, the first test case row 2 (a quoted field spanning lines
still counts as one row). Blank rows are skipped. Limits (all configurable, see :class:`CsvLimits`): 5 MB, 100 test
cases, 10,000 rows (blank ones included), 64 columns, 32,768 characters per cell, 32 expected tools per case; JSON
cells nested at most 64 deep, numbers of at most 1000 digits, no NaN or Infinity. A file over a limit gets a problem
naming the row, the
column and the limit; the whole file is checked and every problem reported at once (up to 200), so a user fixes
the file in one pass. JSON cells are cleaned of lone UTF-16 surrogates (``"\\ud800"`` becomes U+FFFD).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from green_agent.evaluations.safe_json import MAX_JSON_DEPTH, JsonRefused, loads_bounded

MAX_BYTES = 5 * 1024 * 1024
MAX_CASES = 100
MAX_PROBLEMS = 200
CSV_FIELD_LIMIT = csv.field_size_limit()
"""The csv module's own cap on one field (131,072 characters unless the process changed it)."""


@dataclass(frozen=True)
class CsvLimits:
    """Bounds of a CSV suite besides its size in bytes and its number of test cases."""

    max_rows: int = 10_000
    """Records after the header, blank ones included (a file of empty lines costs time too)."""
    max_columns: int = 64
    max_cell_chars: int = 32 * 1024
    """Characters of one cell (values above the csv module's own cap are reported as that cap)."""
    max_expected_tools: int = 32
    """Tools one case may expect (matching expected to actual calls is cubic in their number)."""


COLUMNS = ("test_id", "query", "expected_tool", "expected_args", "expected_response_contains")
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$")


class CsvProblem(BaseModel):
    """One problem: where (row and column when known) and what."""

    model_config = ConfigDict(frozen=True)

    row: int | None
    column: str | None
    message: str

    def __str__(self) -> str:
        where = ", ".join(
            p for p in (f"row {self.row}" if self.row else "", f"column {self.column}" if self.column else "") if p
        )
        return f"{where}: {self.message}" if where else self.message


class ExpectedCall(BaseModel):
    """One expected tool call."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class CsvCase(BaseModel):
    """One validated test case."""

    model_config = ConfigDict(frozen=True)

    test_id: str
    row: int
    query: str
    expected_tools: list[ExpectedCall]
    expected_keywords: list[str]


class CsvSuite(BaseModel):
    """A validated suite."""

    model_config = ConfigDict(frozen=True)

    cases: list[CsvCase]
    warnings: list[str] = Field(default_factory=list)


class CsvValidationError(ValueError):
    """The file cannot be run; ``problems`` lists every problem found."""

    def __init__(self, problems: list[CsvProblem]) -> None:
        self.problems = problems
        shown = "; ".join(str(p) for p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"invalid CSV test suite: {shown}{more}")


def _size_text(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB" if n >= 1024 * 1024 else f"{n} bytes"


def _decode(data: bytes) -> str:
    """UTF-8 (a BOM is accepted); a wrong encoding is reported at the row and column of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        prefix = data[: error.start]
        row = prefix.count(b"\n") + 1
        line_start = prefix.rfind(b"\n") + 1
        column: str | None = None
        try:
            header = next(csv.reader(io.StringIO(data[: data.find(b"\n")].decode("utf-8-sig", "replace"))))
            fields_before = next(csv.reader(io.StringIO(prefix[line_start:].decode("utf-8", "replace") + "x")))
            names = [h.strip().lower() for h in header]
            column = names[len(fields_before) - 1] if len(fields_before) <= len(names) else None
        except (StopIteration, csv.Error):
            column = None
        raise CsvValidationError(
            [
                CsvProblem(
                    row=row,
                    column=column,
                    message=f"not valid UTF-8 (byte 0x{data[error.start]:02X} at offset {error.start}); "
                    "save the file as "
                    "UTF-8 (CSV UTF-8 in spreadsheet programs)",
                )
            ]
        ) from None


def _json_problem(text: str, error: json.JSONDecodeError, what: str) -> str:
    hint = ""
    if "'" in text and '"' not in text:
        hint = " (JSON needs double quotes; inside a CSV field write each as two double quotes)"
    return f"{what} is not valid JSON: {error.msg} at character {error.pos + 1}{hint}"


class _CellJsonError(ValueError):
    """A JSON cell that is refused before or while parsing; the message is the problem to report."""


def _load_cell(text: str, what: str) -> Any:
    """The JSON of a cell (see :func:`loads_bounded`); only :class:`_CellJsonError`, naming the column, is raised."""
    try:
        return loads_bounded(text, max_depth=MAX_JSON_DEPTH)
    except json.JSONDecodeError as error:
        raise _CellJsonError(_json_problem(text, error, what)) from None
    except JsonRefused as error:
        raise _CellJsonError(f"{what} refused: {error}") from None


def _tools(raw: str, max_tools: int = 32) -> tuple[list[str] | None, str | None]:
    text = raw.strip()
    if not text:
        return [], None
    if text.startswith("["):
        try:
            value = _load_cell(text, "expected_tool")
        except _CellJsonError as error:
            return None, str(error)
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            return None, "expected_tool must be a tool name or a JSON array of tool names (strings)"
        if len(value) > max_tools:
            return (
                None,
                f"expected_tool names {len(value)} tools; at most {max_tools} are accepted (max_expected_tools)",
            )
        names = [v.strip() for v in value]
    else:
        names = [text]
    bad = [n for n in names if not _TOOL_NAME.match(n)]
    if bad:
        return None, f"expected_tool {bad[0][:200]!r} is not a valid tool name (letters, digits, _ . -)"
    return names, None


def _args(raw: str, tools: list[str]) -> tuple[list[dict[str, Any]] | None, str | None]:
    text = raw.strip()
    if not text:
        return [{} for _ in tools], None
    try:
        value = _load_cell(text, "expected_args")
    except _CellJsonError as error:
        return None, str(error)
    if not tools:
        return None, "expected_args is given but expected_tool is empty"
    if isinstance(value, dict):
        if len(tools) != 1:
            return None, (
                f"expected_args is one JSON object but expected_tool names {len(tools)} tools; give a JSON "
                f"array of {len(tools)} objects in the same order"
            )
        return [value], None
    if isinstance(value, list):
        if not all(isinstance(v, dict) for v in value):
            return None, "expected_args array must contain only JSON objects"
        if len(value) != len(tools):
            return None, (
                f"expected_tool names {len(tools)} tool(s) but expected_args has {len(value)} argument "
                "object(s); they must pair up one to one"
            )
        return value, None
    return None, "expected_args must be a JSON object or an array of objects"


def _csv_error_text(error: csv.Error, limits: CsvLimits) -> str:
    if "field larger than field limit" in str(error):
        return (
            f"a cell is larger than {min(CSV_FIELD_LIMIT, csv.field_size_limit())} characters; at most "
            f"{limits.max_cell_chars} are accepted (max_cell_chars)"
        )
    return f"malformed CSV: {error}"


def parse_csv_suite(
    data: bytes, *, max_bytes: int = MAX_BYTES, max_cases: int = MAX_CASES, limits: CsvLimits | None = None
) -> CsvSuite:
    """Validate a CSV suite; raises :class:`CsvValidationError` listing every problem (row and column).

    In three layers: the file and its header (:func:`_read_header`, which stops at the first layer that fails), each
    row's shape (:func:`_read_rows`) and each cell's content (:func:`_row_case`). CPU work proportional to the file
    (up to ``max_bytes``): call it in a worker thread from async code.
    """
    limits = limits or CsvLimits()
    reader = csv.reader(io.StringIO(_file_text(data, max_bytes), newline=""), strict=True)
    header = _read_header(reader, limits)
    cases, problems = _read_rows(reader, header, limits, max_cases)
    if problems:
        raise CsvValidationError(problems)
    if not cases:
        raise CsvValidationError([CsvProblem(row=None, column=None, message="no test cases (only a header)")])
    return CsvSuite(cases=cases, warnings=header.warnings)


def _file_text(data: bytes, max_bytes: int) -> str:
    """The file as text: within ``max_bytes``, UTF-8, not empty."""
    if len(data) > max_bytes:
        raise CsvValidationError(
            [
                CsvProblem(
                    row=None,
                    column=None,
                    message=(f"the file is {_size_text(len(data))}; the limit is {_size_text(max_bytes)}"),
                )
            ]
        )
    text = _decode(data)
    if not text.strip():
        raise CsvValidationError([CsvProblem(row=None, column=None, message="the file is empty")])
    return text


@dataclass(frozen=True)
class _Header:
    names: list[str]
    """Every column name, lower-cased (extra and blank ones included: a row is measured against all of them)."""
    index: dict[str, int]
    """Where each of :data:`COLUMNS` is."""
    warnings: list[str]


def _read_header(reader: Iterator[list[str]], limits: CsvLimits) -> _Header:
    """The header row: every required column once (all problems of the header at once), extra ones ignored."""
    try:
        header: list[str] = next(reader)
    except csv.Error as error:
        raise CsvValidationError([CsvProblem(row=1, column=None, message=_csv_error_text(error, limits))]) from None
    if len(header) > limits.max_columns:
        raise CsvValidationError(
            [
                CsvProblem(
                    row=1,
                    column=None,
                    message=(
                        f"the header has {len(header)} columns; at most {limits.max_columns} are accepted (max_columns)"
                    ),
                )
            ]
        )
    names = [h.strip().lower()[:200] for h in header]
    problems: list[CsvProblem] = []
    warnings: list[str] = []
    missing = [c for c in COLUMNS if c not in names]
    for column in missing:
        problems.append(
            CsvProblem(
                row=1,
                column=column,
                message=f"required column {column!r} is missing "
                f"(header has: {', '.join(n for n in names if n) or 'nothing'})",
            )
        )
    counts = Counter(n for n in names if n)
    dupes = sorted(n for n, count in counts.items() if count > 1)
    for column in dupes:
        problems.append(CsvProblem(row=1, column=column, message="column appears more than once"))
    extra = [n for n in names if n and n not in COLUMNS]
    if extra:
        warnings.append(f"ignored column(s): {', '.join(extra)}")
    if problems:
        raise CsvValidationError(problems)
    return _Header(names=names, index={name: names.index(name) for name in COLUMNS}, warnings=warnings)


def _read_rows(
    reader: Iterator[list[str]], header: _Header, limits: CsvLimits, max_cases: int
) -> tuple[list[CsvCase], list[CsvProblem]]:
    """Every row after the header: bounded in number, in fields and in cell size; then its cells (``_row_case``).

    Stops at a malformed line, past ``max_rows`` or after :data:`MAX_PROBLEMS` problems.
    """
    cases: list[CsvCase] = []
    problems: list[CsvProblem] = []
    seen: dict[str, int] = {}
    row = 1
    over_limit = False
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            problems.append(CsvProblem(row=row + 1, column=None, message=_csv_error_text(error, limits)))
            break
        row += 1
        if row - 1 > limits.max_rows:
            problems.append(
                CsvProblem(
                    row=row,
                    column=None,
                    message=(f"more than {limits.max_rows} rows after the header (max_rows, blank rows included)"),
                )
            )
            break
        if not any(cell.strip() for cell in record):
            continue
        if len(cases) >= max_cases and not over_limit:
            over_limit = True
            problems.append(
                CsvProblem(
                    row=row, column=None, message=f"more than {max_cases} test cases (the limit); split the suite"
                )
            )
        if len(record) > len(header.names):
            problems.append(
                CsvProblem(
                    row=row,
                    column=None,
                    message=(
                        f"{len(record)} fields but the header has {len(header.names)} (an unquoted comma? quote the "
                        "field)"
                    ),
                )
            )
            continue
        cells = {name: (record[i] if i < len(record) else "") for name, i in header.index.items()}
        oversized = _oversized_cells(row, cells, limits)
        if not oversized:
            case, row_problems = _row_case(row, cells, limits, seen)
            problems.extend(row_problems)
            if case is not None and not over_limit:
                cases.append(case)
        else:
            problems.extend(oversized)
        if len(problems) >= MAX_PROBLEMS:
            problems.append(CsvProblem(row=None, column=None, message=f"stopped after {MAX_PROBLEMS} problems"))
            break
    return cases, problems


def _oversized_cells(row: int, cells: dict[str, str], limits: CsvLimits) -> list[CsvProblem]:
    """A problem for each cell over ``max_cell_chars`` (such a row's cells are not read any further)."""
    return [
        CsvProblem(
            row=row,
            column=name,
            message=(
                f"{name} has {len(value)} characters; at most {limits.max_cell_chars} are accepted (max_cell_chars)"
            ),
        )
        for name, value in cells.items()
        if len(value) > limits.max_cell_chars
    ]


def _row_case(
    row: int, cells: dict[str, str], limits: CsvLimits, seen: dict[str, int]
) -> tuple[CsvCase | None, list[CsvProblem]]:
    """One row's test case from its cells, or every problem of its cells (``seen``: test ids and their rows)."""
    problems: list[CsvProblem] = []
    test_id = cells["test_id"].strip()
    if not test_id:
        problems.append(CsvProblem(row=row, column="test_id", message="test_id is empty"))
    elif test_id in seen:
        problems.append(
            CsvProblem(
                row=row,
                column="test_id",
                message=f"duplicate test_id {test_id[:200]!r} (first at row {seen[test_id]})",
            )
        )
    else:
        seen[test_id] = row
    query = cells["query"].strip()
    if not query:
        problems.append(CsvProblem(row=row, column="query", message="query is empty"))
    tools, tool_problem = _tools(cells["expected_tool"], limits.max_expected_tools)
    if tool_problem:
        problems.append(CsvProblem(row=row, column="expected_tool", message=tool_problem))
    args: list[dict[str, Any]] | None = None
    if tools is not None:
        args, args_problem = _args(cells["expected_args"], tools)
        if args_problem:
            problems.append(CsvProblem(row=row, column="expected_args", message=args_problem))
    keywords = [k.strip() for k in cells["expected_response_contains"].split(",") if k.strip()]
    if problems or tools is None or args is None:
        return None, problems
    case = CsvCase(
        test_id=test_id,
        row=row,
        query=query,
        expected_keywords=keywords,
        expected_tools=[ExpectedCall(name=n, arguments=a) for n, a in zip(tools, args, strict=True)],
    )
    return case, problems
