"""``arena plan [RUN]``: how many tasks x attempts a question needs, and what that costs.

The model of the tasks comes from a finished run (its per-task success rates c/n: a parametric bootstrap of "tasks
like these") or from stated assumptions (``--p 0.7``, ``--p uniform``, ``--p beta:2,5``). Questions:

- ``--half-width H``: the number of tasks whose pass^j interval (the summary's own method) has a median half-width
  of at most H;
- ``--delta D``: the number of tasks at which ``arena compare`` (its paired sign-flip test, two-sided, or one-sided
  with ``--fail-if``) detects a success-rate difference D against this run with 80% power (``--power``).

Without either, both are answered for H = 0.1 and D = -0.1 (a ten-point regression). Each answer gives tasks, k,
attempts per run, and, from the run's summary.json, the expected cost (its cost per attempt) and wall time (its wall
time per attempt at the run's concurrency). All figures come from seeded simulation
(green_agent.statistics.planning); ``benchmarks/bench_statistics_validity.py`` checks the power predictions against
``arena compare``'s own test.

Exit codes: 0 planned; 2 bad input (the run cannot be read, an option is out of range), with the reason on standard
error.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import numpy as np
import typer
from pydantic import BaseModel, ConfigDict

from green_agent.engine.results import BattleResult
from green_agent.statistics.planning import TaskPlan, plan_for_half_width, plan_for_power
from launcher.cli.compare_command import CompareError, read_run

EXIT_BAD_INPUT = 2
POOL_SIZE = 4000
"""Tasks drawn from a stated distribution to form the model's pool."""

Gate = Literal["worse", "not-better", "not-noninferior"]


class PlanError(ValueError):
    """Bad input to ``arena plan``; the message names the option."""


class Costs(BaseModel):
    """Per-attempt cost and wall time measured in the run (``None`` when it does not say)."""

    model_config = ConfigDict(frozen=True)

    attempts: int
    cost_per_attempt_usd: float | None
    wall_s_per_attempt: float | None
    concurrency: int | None


class PlanAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    plan: TaskPlan
    expected_cost_usd: float | None
    expected_wall_s: float | None


class PlanReport(BaseModel):
    """What ``arena plan --json`` prints."""

    model_config = ConfigDict(frozen=True)

    schema_id: str = "arena.plan/1"
    model: str
    """Where the per-task success probabilities came from."""
    pool_tasks: int
    mean_p: float
    k: int
    j: int
    confidence: float
    tasks_available: int | None
    costs: Costs | None
    answers: list[PlanAnswer]
    notes: list[str]


def parse_p(text: str, seed: int) -> np.ndarray:
    """``0.7`` (every task), ``uniform`` or ``beta:A,B``: a pool of per-task probabilities."""
    rng = np.random.default_rng(seed)
    value = text.strip().lower()
    if value == "uniform":
        return rng.uniform(0.0, 1.0, POOL_SIZE)
    if value.startswith("beta:"):
        try:
            a, b = (float(x) for x in value[5:].split(","))
        except ValueError:
            raise PlanError(f"--p: expected beta:A,B with two positive numbers, got {text!r}") from None
        if not (a > 0 and b > 0 and np.isfinite(a) and np.isfinite(b)):
            raise PlanError(f"--p: beta parameters must be positive and finite, got {text!r}")
        return rng.beta(a, b, POOL_SIZE)
    try:
        p = float(value)
    except ValueError:
        raise PlanError(f"--p: expected a probability, 'uniform' or beta:A,B, got {text!r}") from None
    if not 0.0 <= p <= 1.0:
        raise PlanError(f"--p: a probability must be in [0, 1], got {text!r}")
    return np.full(1, p)


def run_model(result: BattleResult) -> tuple[np.ndarray, Costs]:
    """Per-task c/n of a finished run, and its cost and wall time per attempt."""
    rates = [t.c / t.n for t in result.summary.tasks if t.n > 0]
    if not rates:
        raise PlanError(f"run {result.battle_id}: no task has a counted attempt; nothing to plan from")
    attempts = len(result.attempts)
    usage = result.usage
    cost = usage.total_cost_usd if usage is not None else None
    wall = result.duration_s - 0.0
    counted_here = attempts - result.resumed_attempts
    return np.array(rates), Costs(
        attempts=attempts,
        cost_per_attempt_usd=None if cost is None or not attempts else cost / attempts,
        wall_s_per_attempt=(wall / counted_here) if counted_here > 0 and wall > 0 else None,
        concurrency=result.config.concurrency,
    )


def _answer(plan: TaskPlan, costs: Costs | None) -> PlanAnswer:
    attempts = plan.attempts_per_run
    cost = wall = None
    if costs is not None and attempts is not None:
        cost = None if costs.cost_per_attempt_usd is None else costs.cost_per_attempt_usd * attempts
        wall = None if costs.wall_s_per_attempt is None else costs.wall_s_per_attempt * attempts
    return PlanAnswer(plan=plan, expected_cost_usd=cost, expected_wall_s=wall)


def build_plan(
    *,
    result: BattleResult | None,
    p_text: str | None,
    k: int | None,
    j: int,
    half_width: float | None,
    delta: float | None,
    fail_if: Gate | None,
    margin: float,
    power: float,
    confidence: float,
    tasks_available: int | None,
    replicates: int,
    seed: int,
) -> PlanReport:
    if (result is None) == (p_text is None):
        raise PlanError("give a finished run (RUN) or --p, not both and not neither")
    costs: Costs | None = None
    if result is not None:
        pool, costs = run_model(result)
        model = f"run {result.battle_id}: per-task success rates of its {pool.size} task(s)"
        k = k or result.config.k
    else:
        assert p_text is not None
        pool = parse_p(p_text, seed)
        model = f"stated: p = {p_text}"
        k = k or 4
    if j > k:
        raise PlanError(f"--j {j} is more than k = {k} attempts per task")
    max_tasks = tasks_available or 2000
    notes: list[str] = []
    if half_width is None and delta is None:
        half_width, delta = 0.1, -0.1
        notes.append("no question given: planned for --half-width 0.1 and --delta -0.1 (a ten-point regression)")
    answers: list[PlanAnswer] = []
    try:
        if half_width is not None:
            plan = plan_for_half_width(
                pool, k=k, half_width=half_width, j=j, confidence=confidence, max_tasks=max_tasks, seed=seed
            )
            answers.append(_answer(plan, costs))
        if delta is not None:
            alternative: Literal["two-sided", "greater", "less"] = (
                "two-sided" if fail_if is None else "less" if fail_if == "worse" else "greater"
            )
            if fail_if == "not-noninferior":
                notes.append(f"non-inferiority: power to show the candidate above baseline - {margin:g}")
            shift = delta + margin if fail_if == "not-noninferior" else delta
            plan = plan_for_power(
                pool,
                k=k,
                delta=shift,
                j=j,
                confidence=confidence,
                alternative=alternative,
                power=power,
                max_tasks=max_tasks,
                replicates=replicates,
                seed=seed,
            )
            answers.append(_answer(plan, costs))
    except ValueError as error:
        raise PlanError(str(error)) from None
    if any(a.plan.tasks is None for a in answers):
        notes.append(
            f"not reachable with at most {max_tasks} tasks at k = {k}: more attempts per task (--k) narrow the "
            "trial noise, not the spread between tasks"
        )
    if result is not None:
        notes.append(
            "the run's own success rates stand in for the true ones: with few tasks or attempts the plan is rough"
        )
    return PlanReport(
        model=model,
        pool_tasks=int(pool.size),
        mean_p=float(np.mean(pool)),
        k=k,
        j=j,
        confidence=confidence,
        tasks_available=tasks_available,
        costs=costs,
        answers=answers,
        notes=notes,
    )


def render_text(report: PlanReport) -> str:
    lines = [f"arena plan: {report.model}; mean p {report.mean_p:.3f}; k = {report.k}; {report.confidence:g}"]
    for answer in report.answers:
        plan = answer.plan
        lines.append(f"- {plan.question}:")
        if plan.tasks is None:
            lines.append("    not reachable within the task limit")
        else:
            cost = "cost n/a" if answer.expected_cost_usd is None else f"~${answer.expected_cost_usd:.2f}"
            wall = "wall time n/a" if answer.expected_wall_s is None else f"~{answer.expected_wall_s:.0f} s wall"
            achieved = "" if plan.achieved is None else f" (simulated: {plan.achieved:.3f})"
            lines.append(
                f"    {plan.tasks} tasks x k = {plan.k} = {plan.attempts_per_run} attempts per run{achieved}; "
                f"{cost}, {wall}"
            )
        curve = ", ".join(f"{point.tasks}: {point.power:.3f}" for point in plan.curve)
        lines.append(f"    tried (tasks: value): {curve}")
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


_RUN_HELP = "a finished run directory or its summary.json (the model: its per-task success rates, cost, time)"


def plan_command(
    run: Annotated[str | None, typer.Argument(metavar="RUN", help=_RUN_HELP, show_default=False)] = None,
    p: Annotated[
        str | None, typer.Option("--p", help="stated per-task success probability: 0.7, uniform or beta:A,B")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", min=1, max=64, help="attempts per task (default: the run's)")] = None,
    j: Annotated[int, typer.Option("--j", min=1, help="plan the pass^j interval (default pass^1)")] = 1,
    half_width: Annotated[
        float | None, typer.Option("--half-width", min=0.001, max=0.5, help="target interval half-width")
    ] = None,
    delta: Annotated[
        float | None,
        typer.Option("--delta", min=-1.0, max=1.0, help="success-rate difference to detect (negative: regression)"),
    ] = None,
    fail_if: Annotated[
        Gate | None, typer.Option("--fail-if", help="plan for this arena compare gate (one-sided) instead of two-sided")
    ] = None,
    margin: Annotated[float, typer.Option("--margin", min=0.0, max=1.0, help="with --fail-if not-noninferior")] = 0.0,
    power: Annotated[float, typer.Option("--power", min=0.5, max=0.99, help="target power")] = 0.8,
    confidence: Annotated[float, typer.Option("--confidence", min=0.5, max=0.999, help="confidence level")] = 0.95,
    tasks_available: Annotated[
        int | None, typer.Option("--tasks-available", min=2, help="tasks that exist (caps the plan)")
    ] = None,
    replicates: Annotated[int, typer.Option("--replicates", min=100, max=20_000, help="simulations per point")] = 1000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="seed of the simulation")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="one JSON object (arena.plan/1)")] = False,
) -> None:
    """Plan a battle: tasks x attempts for a target interval half-width, or to detect a difference at 80% power,
    from a finished run or stated assumptions, with the expected cost and wall time. Exit 2 for bad input."""
    try:
        result = None
        if run is not None:
            try:
                result = read_run(run)
            except CompareError as error:
                raise PlanError(str(error)) from None
        report = build_plan(
            result=result,
            p_text=p,
            k=k,
            j=j,
            half_width=half_width,
            delta=delta,
            fail_if=fail_if,
            margin=margin,
            power=power,
            confidence=confidence,
            tasks_available=tasks_available,
            replicates=replicates,
            seed=seed,
        )
    except PlanError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if json_output:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        typer.echo(render_text(report), nl=False)
