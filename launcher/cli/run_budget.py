"""``arena run --max-cost-usd / --max-wall-s`` and the verdict of a battle its budget stopped (issue 27).

The flags are overrides of ``[pass_k_config] max_cost_usd / max_wall_s`` (launcher/cli/run_overrides.py: validated
like the file, recorded in the run directory, a resume may change them). A battle its budget stopped has
``budget_stop`` in summary.json (green_agent/engine/budget.py): the verdict says so in a caveat line, carries the
object as ``budget_stop``, and exits 6 (inconclusive: the planned design was not measured, and the attempts that
finished first are not a fair sample of it), unless nothing was measured (5) or a gate failed (1). ``arena run
SCENARIO --resume --max-cost-usd MORE`` finishes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import typer
from pydantic import ValidationError

from green_agent.engine.battle_limits import BudgetStop
from launcher.cli.run_verdict import EXIT_OK, RunVerdict, outcome_for_exit

EXIT_BUDGET_STOPPED: Final = 6
"""The battle's budget stopped it before every planned attempt ran (the code of "inconclusive")."""

_PANEL = "Overrides of the scenario (validated like the file)"
MaxCostFlag = Annotated[
    float | None,
    typer.Option(
        "--max-cost-usd",
        metavar="DOLLARS",
        help="stop starting attempts once the battle's known cost reaches DOLLARS (pass_k_config.max_cost_usd; "
        "exit 6, resumable with a higher budget)",
        rich_help_panel=_PANEL,
    ),
]
MaxWallFlag = Annotated[
    float | None,
    typer.Option(
        "--max-wall-s",
        metavar="SECONDS",
        help="stop starting attempts once this run has taken SECONDS (pass_k_config.max_wall_s; exit 6, resumable)",
        rich_help_panel=_PANEL,
    ),
]


def read_budget_stop(summary: Mapping[str, Any]) -> BudgetStop | None:
    """summary.json's ``budget_stop`` (None without a well-formed one)."""
    raw = summary.get("budget_stop")
    if not isinstance(raw, Mapping):
        return None
    try:
        return BudgetStop.model_validate(dict(raw))
    except ValidationError:
        return None


def budget_verdict(summary: Mapping[str, Any], verdict: RunVerdict) -> RunVerdict:
    """The verdict of a battle its budget stopped: ``budget_stop`` set, a caveat, exit 6 where it would have been 0
    (the verdict unchanged without a budget stop)."""
    stop = read_budget_stop(summary)
    if stop is None:
        return verdict
    update: dict[str, Any] = {"budget_stop": stop.model_dump(mode="json"), "warnings": [*verdict.warnings, stop.text()]}
    if verdict.exit_code == EXIT_OK:
        update |= {"exit_code": EXIT_BUDGET_STOPPED, "outcome": outcome_for_exit(EXIT_BUDGET_STOPPED)}
    return verdict.model_copy(update=update)
