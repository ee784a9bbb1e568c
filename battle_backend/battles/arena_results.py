"""Arena results as the backend knows them: recognised by their schema identifier, checked against the backend's
copy of the published JSON Schema, and read through small typed models.

Why a module of its own: the backend must not import green_agent, so it keeps its own copy of the schema
(schemas/summary.schema.json, equal to docs/summary.schema.json) and its own models, which read only what the page
shows. :mod:`battle_backend.views.results` turns them into the page's views.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as JsonSchemaError
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ARENA_SCHEMA_ID = "arena.battle-result/1"
"""The ``schema`` value of an Arena BattleResult of the shape in :data:`SCHEMA_FILE`. Results declaring another value
(or none) are foreign: accepted as they are and shown through the tolerant view."""
SCHEMA_FILE = Path(__file__).parents[1] / "schemas" / "summary.schema.json"
"""The backend's copy of docs/summary.schema.json (a test keeps the two equal)."""
RESULT_KEYS = ("battle_result", "result", "arena_result")
"""Where a result detail may hold the BattleResult one level down (else it is the detail itself)."""
MAX_PROBLEM_CHARS = 300
"""A schema problem's message is cut to this (it may quote a large part of the posted value)."""


# --- Arena results: recognised by their schema identifier, checked against the published schema --------------------
@functools.cache
def arena_validator() -> Draft202012Validator:
    """The validator of :data:`SCHEMA_FILE` (read once; the schema itself is checked against its metaschema)."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def declared_arena_results(detail: Any) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """``(path in detail, value)`` of every candidate of :func:`find_battle_result` that declares Arena's schema."""
    candidates: list[tuple[tuple[str, ...], Any]] = [((), detail)]
    if isinstance(detail, dict):
        candidates += [((key,), detail.get(key)) for key in RESULT_KEYS]
    for path, candidate in candidates:
        if isinstance(candidate, dict) and candidate.get("schema") == ARENA_SCHEMA_ID:
            yield path, candidate


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def json_path(parts: Iterable[str | int]) -> str:
    """``("detail", "summary", "macro", 0, "pass_hat_mean")`` -> ``$.detail.summary.macro[0].pass_hat_mean``."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}"
        else:
            text += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return text


@dataclass(frozen=True)
class SchemaProblem:
    """Why a result that declares Arena's schema does not match it: where (from the posted body's root) and what."""

    loc: tuple[str | int, ...]
    """Keys and indices from the body's root, e.g. ``("detail", "summary", "macro", 0, "pass_hat_mean")``."""
    message: str

    @property
    def path(self) -> str:
        """:attr:`loc` as a JSON path (``$.detail.summary.macro[0].pass_hat_mean``)."""
        return json_path(self.loc)


def _describe(error: JsonSchemaError) -> str:
    """jsonschema's message, except for a nullable value of the wrong type (``anyOf`` of types), where it would only
    say "not valid under any of the given schemas": ``'0.5' is not of type 'number' or 'null'``."""
    context = error.context or []
    if error.validator in ("anyOf", "oneOf") and context and all(e.validator == "type" for e in context):
        names: list[str] = []
        for sub in context:
            value = sub.validator_value
            names += [str(v) for v in value] if isinstance(value, list) else [str(value)]
        return f"{error.instance!r} is not of type " + " or ".join(repr(name) for name in names)
    return str(error.message)


def arena_schema_problem(detail: Any) -> SchemaProblem | None:
    """The first problem (jsonschema's best match) of the first result in ``detail`` that declares Arena's schema
    without matching it; ``None`` when there is none, or when nothing in ``detail`` declares Arena's schema.

    CPU-bound for large results (a pure-Python walk of the whole document): call it in a worker thread.
    """
    for prefix, candidate in declared_arena_results(detail):
        error = best_match(arena_validator().iter_errors(candidate))
        if error is None:
            continue
        message = _describe(error)
        if len(message) > MAX_PROBLEM_CHARS:
            message = message[: MAX_PROBLEM_CHARS - 1] + "…"
        return SchemaProblem(loc=("detail", *prefix, *error.absolute_path), message=message)
    return None


class _Typed(BaseModel):
    """Read-only view of a part of a validated Arena result; keys the page does not show are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ArenaFailure(_Typed):
    """An attempt's failure: the taxonomy category, whose fault, and the detail."""

    category: str
    fault_author: str
    detail: str = ""


class ArenaAttempt(_Typed):
    """One attempt of one task."""

    domain: str
    split: str | None
    task_index: int
    attempt: int
    outcome: Literal["success", "failure", "infra_error"]
    failure: ArenaFailure | None = None

    @property
    def task_key(self) -> str:
        """``domain/split/index``, as the green agent keys tasks."""
        return f"{self.domain}/{self.split or '-'}/{self.task_index}"


class ArenaMacro(_Typed):
    """``summary.macro[j - 1]``: macro means over the tasks with at least j attempts, with their intervals."""

    j: int
    coverage: int
    total_tasks: int
    pass_hat_mean: float | None
    pass_hat_ci_low: float | None
    pass_hat_ci_high: float | None
    pass_at_mean: float | None
    pass_at_ci_low: float | None
    pass_at_ci_high: float | None


class ArenaSummary(_Typed):
    """``summary``: what the page shows of it (the macro records)."""

    macro: list[ArenaMacro]


class ArenaResult(_Typed):
    """An Arena BattleResult (``"schema": "arena.battle-result/1"``), as far as the page reads it."""

    schema_id: Literal["arena.battle-result/1"] = Field(alias="schema")
    attempts: list[ArenaAttempt]
    summary: ArenaSummary
    failure_breakdown: dict[str, int]
    infrastructure_errors: int
    status: str = "completed"


def parse_arena_result(result: Any) -> ArenaResult | None:
    """The typed view of a result that declares Arena's schema; ``None`` for a foreign one (or, should one have been
    stored unchecked, an Arena one that does not match: it is then shown through the tolerant view)."""
    if not isinstance(result, dict) or result.get("schema") != ARENA_SCHEMA_ID:
        return None
    try:
        return ArenaResult.model_validate(result)
    except ValidationError:
        return None


def find_battle_result(detail: Any) -> dict[str, Any] | None:
    """The BattleResult in a result detail: the detail itself or one level down (``battle_result``, ``result``)."""
    candidates = [detail]
    if isinstance(detail, dict):
        candidates += [detail.get(key) for key in RESULT_KEYS]
    for candidate in candidates:
        if (
            isinstance(candidate, dict)
            and isinstance(candidate.get("attempts"), list)
            and isinstance(candidate.get("summary"), dict)
        ):
            return candidate
    return None
