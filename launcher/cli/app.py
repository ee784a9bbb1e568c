"""The ``arena`` command line (typer + rich).

Commands:
  arena run SCENARIO.toml     start the agents, run the battle with live progress, end with the verdict
                              (--backend local|URL: through an AgentBeats-compatible backend, watchable in a browser)
  arena backend ...           the AgentBeats-compatible battle backend with its live web page
  arena launcher ... -- CMD   an AgentBeats launcher server for one agent command
  arena green ... / white ... the agents themselves (same as ``arena-green`` / ``arena-white``)
  arena export / score / eval-csv / register   see each command's --help
  arena compare RUN_A RUN_B   candidate A vs baseline B, paired by task (pass^j differences, intervals, verdict)
  arena plan [RUN]            tasks x attempts (cost, time) a question needs, from a run or stated assumptions
  arena regrade RUN_DIR       re-score a run's trajectories under the installed tau2 into a new run directory
  arena schema                the JSON Schema of summary.json (arena.battle-result/1; docs/summary.schema.json)
  arena schema --events       the JSON Schema of a progress event (arena.progress-event/1; docs/events.schema.json)
  arena --version / -V        the installed package's version
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

import launcher.cli.run_budget as run_budget
import launcher.cli.run_overrides as run_overrides
from launcher.cli.compare_command import compare_command
from launcher.cli.eval_commands import eval_csv_command, score_command
from launcher.cli.export_command import export_command
from launcher.cli.plan_command import plan_command
from launcher.cli.register_command import register_command
from launcher.cli.regrade_command import regrade_command
from launcher.cli.view_command import view_command

app = typer.Typer(
    name="arena",
    help="Arena: reliability battles (tau-bench over A2A, pass^k) between a green assessor and a white agent.",
    no_args_is_help=True,
    add_completion=True,  # arena --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
)
app.command("score")(score_command)
app.command("eval-csv")(eval_csv_command)
app.command("export")(export_command)
app.command("compare")(compare_command)
app.command("plan")(plan_command)
app.command("regrade")(regrade_command)
app.command("register")(register_command)
app.command("view")(view_command)

DISTRIBUTION = "arena"
"""The distribution name in pyproject.toml: what ``--version`` asks importlib.metadata about."""

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _configure_logging(console: Console, level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, show_time=False)],
        force=True,
    )


def package_version() -> str:
    """The installed distribution's version (what a bug report needs), or a note when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"arena {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """Arena: reliability battles (tau-bench over A2A, pass^k) between a green assessor and a white agent."""


@app.command()
def run(
    scenario: Annotated[
        Path | None,
        typer.Argument(help="scenario TOML file (optional with --agent: see the overrides)", show_default=False),
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="where runs/<battle id>/ is written")] = Path("runs"),
    backend_url: Annotated[
        str | None, typer.Option(help="AgentBeats-compatible backend to post progress and the result to")
    ] = None,
    battle_id: Annotated[str | None, typer.Option(help="battle id (default: <scenario>-<time>-<random>)")] = None,
    with_launchers: Annotated[
        bool, typer.Option("--with-launchers", help="start each agent behind an AgentBeats launcher server")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no live progress; the verdict as one line")] = False,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="run the battle through an AgentBeats-compatible backend: 'local' starts ours "
            "for this run (SQLite in the run directory), or the URL of a running one (ours or AgentBeats)",
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="with --backend: open the battle page in a web browser")
    ] = False,
    keep_backend: Annotated[
        bool,
        typer.Option(
            "--keep-backend", help="with --backend local: keep the backend serving after the battle until Ctrl-C"
        ),
    ] = False,
    battle_timeout: Annotated[
        float | None,
        typer.Option(
            help="with --backend: the green agent's battle_timeout in seconds (default: estimated from the scenario)"
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="continue an interrupted battle: only its missing attempts run (the battle named by --battle-id, "
            "default the newest unfinished run of this scenario in --runs-dir); a changed scenario is refused",
        ),
    ] = False,
    retry_infra: Annotated[
        bool,
        typer.Option("--retry-infra", help="with --resume: also re-run attempts that ended as infrastructure errors"),
    ] = False,
    fail_under: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-under",
            metavar="METRIC=VALUE",
            help="gate on the point estimate: exit 1 when METRIC (pass^J, pass@J, pass^k or pooled) is below VALUE, "
            "e.g. pass^k=0.8 (repeatable)",
        ),
    ] = None,
    fail_under_lower: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-under-lower",
            metavar="METRIC=VALUE",
            help="gate on the lower bound of METRIC's 95%% interval: exit 1 when it is below VALUE (repeatable)",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="print the verdict as one JSON object on standard output (progress goes to standard error)"
        ),
    ] = False,
    certify: Annotated[
        str | None,
        typer.Option(
            "--certify",
            metavar="CLAIM",
            help='stop as soon as CLAIM (e.g. "pass^4>=0.8") is decided by an anytime-valid confidence sequence: '
            "exit 0 certified, 1 refuted, 6 inconclusive (budget spent); against a baseline run: "
            '"pass^1>=baseline-0.05" (no worse) or "pass^1>baseline" (better) with --certify-baseline',
        ),
    ] = None,
    certify_baseline: Annotated[
        Path | None,
        typer.Option("--certify-baseline", metavar="RUN_DIR", help="the baseline run of a --certify comparison"),
    ] = None,
    startup_timeout: Annotated[float, typer.Option(help="seconds each agent gets to answer its card")] = 120.0,
    log_level: Annotated[str, typer.Option(help="log level of the arena process itself")] = "warning",
    green_module: Annotated[str, typer.Option(hidden=True)] = "green_agent",
    white_module: Annotated[str, typer.Option(hidden=True)] = "white_agent",
    k: run_overrides.KFlag = None,
    tasks: run_overrides.TasksFlag = None,
    num_tasks: run_overrides.NumTasksFlag = None,
    domain: run_overrides.DomainFlag = None,
    concurrency: run_overrides.ConcurrencyFlag = None,
    seed: run_overrides.SeedFlag = None,
    split: run_overrides.SplitFlag = None,
    agent: run_overrides.AgentFlag = None,
    max_cost_usd: run_budget.MaxCostFlag = None,
    max_wall_s: run_budget.MaxWallFlag = None,
    workers: run_overrides.WorkersFlag = None,
) -> None:
    """Run a battle: start the white and green agents, stream progress, print the pass^k summary.

    Exit codes: 0 the battle completed and every gate passed (whatever the agent scored when no gate is given;
    also --resume of a finished battle), 1 a gate failed, 2 configuration error, 3 harness error (with --backend
    also a battle the backend puts in state error or ends by timeout), 4 the agent under test unreachable (checked
    before the battle starts), 5 nothing measured (every attempt an infrastructure error), 6 inconclusive (a
    --certify budget spent undecided, or --max-cost-usd / --max-wall-s stopped the battle: --resume with a higher
    budget finishes it), 130 interrupted (Ctrl-C; the partial summary is written, --resume continues it). The
    terminal ends with the verdict; per-task detail is in summary.md.

    Overrides (--k, --tasks, --num-tasks, --domain, --concurrency, --seed, --split, --agent) change the scenario's
    fields and are checked like the file; without a scenario file (arena run --domain retail --agent URL --k 4) the
    battle is every task of the domain's test split, k 4, with the offline scripted user simulator.
    """
    from launcher.cli.run_command import EXIT_INTERRUPTED, RunOptions, RunReport, execute_run, say
    from launcher.cli.run_verdict import RunVerdict, outcome_for_exit

    console = Console(stderr=json_output)
    _configure_logging(console, log_level)
    options = RunOptions(
        scenario_path=scenario,
        runs_dir=runs_dir,
        backend_url=backend_url,
        battle_id=battle_id,
        with_launchers=with_launchers,
        quiet=quiet,
        startup_timeout_s=startup_timeout,
        green_module=green_module,
        white_module=white_module,
        resume=resume,
        retry_infra=retry_infra,
        fail_under=list(fail_under or []),
        fail_under_lower=list(fail_under_lower or []),
        json_output=json_output,
        certify=certify,
        certify_baseline=certify_baseline,
        overrides=run_overrides.RunOverrides(
            k=k,
            tasks=tasks,
            num_tasks=num_tasks,
            domain=domain,
            concurrency=concurrency,
            seed=seed,
            split=split,
            agent=agent,
            max_cost_usd=max_cost_usd,
            max_wall_s=max_wall_s,
            workers=workers,
        ),
    )

    def finish(exit_code: int, error: str | None = None, verdict: RunVerdict | None = None) -> typer.Exit:
        if json_output:
            verdict = verdict or RunVerdict(outcome=outcome_for_exit(exit_code), exit_code=exit_code, error=error)
            typer.echo(verdict.to_json())
        return typer.Exit(exit_code)

    if backend is None and (open_browser or keep_backend or battle_timeout is not None):
        say(console, "--open, --keep-backend and --battle-timeout need --backend", label="configuration error:")
        raise finish(2, "--open, --keep-backend and --battle-timeout need --backend")
    report: RunReport
    try:
        if backend is not None:
            from launcher.cli.backend_run import BackendRunOptions, execute_backend_run

            backend_options = BackendRunOptions(
                options, backend, open_browser=open_browser, keep_backend=keep_backend, battle_timeout_s=battle_timeout
            )
            report = asyncio.run(execute_backend_run(backend_options, console))
        else:
            report = asyncio.run(execute_run(options, console))
    except KeyboardInterrupt:
        say(console, "interrupted; all agents stopped")
        raise finish(EXIT_INTERRUPTED, "interrupted") from None
    raise finish(report.exit_code, report.error, report.verdict)


@app.command(context_settings={"allow_interspersed_args": False})
def launcher(
    port: Annotated[int, typer.Option(help="port of the launcher server")],
    agent_url: Annotated[str, typer.Option(help="URL where the agent serves its card (its --card-url)")],
    command: Annotated[list[str], typer.Argument(help="the agent command, after --", show_default=False)],
    host: Annotated[str, typer.Option(help="bind address of the launcher")] = "127.0.0.1",
    name: Annotated[str, typer.Option(help="agent name (log file names)")] = "agent",
    log_dir: Annotated[Path, typer.Option(help="where the agent's stdout/stderr logs go")] = Path("runs/launcher-logs"),
    autostart: Annotated[bool, typer.Option(help="start the agent with the launcher")] = True,
    ready_timeout: Annotated[float, typer.Option(help="seconds the agent gets to answer its card")] = 60.0,
    log_level: Annotated[str, typer.Option(help="uvicorn/launcher log level")] = "warning",
) -> None:
    """Serve an AgentBeats launcher (POST /reset, GET /status, GET /health, POST /launch, POST /terminate).

    Example: arena launcher --port 9210 --agent-url http://127.0.0.1:9004 -- arena-white --kind replay --port 9004
    """
    from launcher.agentbeats_launcher import run_launcher

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not command:
        raise typer.BadParameter("give the agent command after --", param_hint="COMMAND")
    run_launcher(
        command,
        agent_url=agent_url,
        host=host,
        port=port,
        log_dir=log_dir,
        name=name,
        autostart=autostart,
        ready_timeout_s=ready_timeout,
        log_level=log_level,
    )


@app.command()
def schema(
    out: Annotated[
        list[Path] | None,
        typer.Option("--out", help="write the schema to this file instead of standard output (repeatable)"),
    ] = None,
    events: Annotated[
        bool,
        typer.Option("--events", help="the schema of a progress event instead (docs/events.schema.json)"),
    ] = False,
) -> None:
    """Print the JSON Schema of summary.json (a BattleResult, "schema": "arena.battle-result/1").

    With --events: the JSON Schema of a progress event's wire form ("arena.progress-event/1": the A2A arena_event
    part, a backend progress post's detail), committed as docs/events.schema.json; regenerate it with
    arena schema --events --out docs/events.schema.json

    Committed as docs/summary.schema.json and battle_backend/schemas/summary.schema.json (the backend's copy).

    After changing the result models, regenerate both:

    arena schema --out docs/summary.schema.json --out battle_backend/schemas/summary.schema.json
    """
    from green_agent.engine.events import events_json_schema_text
    from green_agent.engine.results import result_json_schema_text

    text = events_json_schema_text() if events else result_json_schema_text()
    if not out:
        typer.echo(text, nl=False)
        return
    for path in out:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")
        except OSError as error:
            typer.echo(f"error: cannot write {path}: {error}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"wrote {path}", err=True)


def _exec_module(module: str, args: list[str], summary: str = "") -> None:
    if "--help" in args or "-h" in args:  # the module's own flags, in the help style of the other commands
        from launcher.cli.module_help import print_module_help

        name = {"battle_backend": "backend", "green_agent": "green", "white_agent": "white"}[module]
        raise typer.Exit(print_module_help(module, f"arena {name}", summary))
    argv = [sys.executable, "-m", module, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def backend(ctx: typer.Context) -> None:
    """Serve the AgentBeats-compatible battle backend and its live web page (arguments go to python -m battle_backend:
    --host, --port, --db, --public-url, --max-concurrent-battles, ...; try: arena backend --help)."""
    _exec_module("battle_backend", list(ctx.args), "Serve the AgentBeats-compatible battle backend and its live page.")


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def green(ctx: typer.Context) -> None:
    """Serve the green agent (all arguments go to python -m green_agent; try: arena green --help)."""
    _exec_module("green_agent", list(ctx.args), "Serve the green agent (the assessor) over A2A.")


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def white(ctx: typer.Context) -> None:
    """Serve a reference white agent (all arguments go to python -m white_agent; try: arena white --help)."""
    _exec_module("white_agent", list(ctx.args), "Serve a reference white agent (an A2A server).")


def main() -> None:
    """Entry point for ``python -m launcher``."""
    app(prog_name="arena")
