"""``arena run SCENARIO.toml``: start the agents, run one battle with live progress, print the summary, clean up.

Why here and not in cli.py: the orchestration (validation, process start order, readiness, the assessment, exit codes)
is testable without typer; cli.py only parses options. The rules it keeps:
- configuration problems are found before any process starts (exit 2, message naming the field);
- children get free loopback ports, log to ``runs/<battle id>/logs/``, and are all stopped on every exit path;
- API keys reach children only through the inherited environment, never on a command line;
- an external agent under test is asked for its card before anything starts: unreachable, exit 4 naming its URL;
- exit codes (:mod:`launcher.cli.run_verdict`; README and docs/results.md): 0 the battle completed and every gate
  passed (whatever the agent scored when no gate is given), 1 a gate (``--fail-under``) failed, 2 configuration
  error, 3 harness error, 4 the agent under test unreachable, 5 nothing measured (every attempt an infrastructure
  error), 130 on Ctrl-C, 128 + signal number on SIGTERM/SIGHUP;
- the terminal ends with the verdict (:func:`~launcher.cli.run_verdict.verdict_lines`), ``-q`` with one line,
  ``--json`` with nothing (the caller prints the :class:`~launcher.cli.run_verdict.RunVerdict`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from green_agent.engine.config import ConfigError, remote_config_dict
from green_agent.engine.run_store import RUN_FILE, baseline_values, summary_status
from green_agent.wire.process import TOKEN_ENV
from launcher.cli.assessment_client import AssessmentError, AssessmentOutcome, run_assessment
from launcher.cli.battle_display import BattleDisplay, say
from launcher.cli.resume import ResumePlan, plan_resume, refuse_existing, write_scenario_record
from launcher.cli.run_budget import budget_verdict
from launcher.cli.run_certify import EXIT_INCONCLUSIVE, certify_exit_code, certify_line, with_certify
from launcher.cli.run_overrides import RunOverrides, load_run_scenario, write_effective_scenario
from launcher.cli.run_verdict import (
    EXIT_AGENT_UNREACHABLE,
    EXIT_CONFIG_ERROR,
    EXIT_HARNESS_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    GateSpec,
    RunVerdict,
    load_summary,
    one_line,
    outcome_for_exit,
    parse_gates,
    verdict_from_summary,
    verdict_lines,
)
from launcher.cli.scenario import Scenario, WhiteAgentConfig
from launcher.ports import free_ports, loopback_url
from launcher.processes import ManagedProcess, ProcessError, ProcessGroup, wait_until_ready

logger = logging.getLogger(__name__)

__all__ = [
    "EXIT_AGENT_UNREACHABLE",
    "EXIT_CONFIG_ERROR",
    "EXIT_HARNESS_ERROR",
    "EXIT_INCONCLUSIVE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "PreparedRun",
    "RunOptions",
    "RunReport",
    "certify_exit_code",
    "certify_line",
    "check_agent_under_test",
    "conclude_run",
    "execute_run",
    "prepare_run",
    "say",
    "with_certify",
]

AGENT_CHECK_TIMEOUT_S = 10.0
"""How long the agent under test gets to serve its card before the battle (connection refused fails at once)."""
AGENT_CARD_PATH = "/.well-known/agent-card.json"
_BATTLE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class RunOptions:
    """Everything ``arena run`` was asked to do."""

    scenario_path: Path | None
    """The scenario file (None: ``--agent`` and the scenario-less defaults, :mod:`launcher.cli.run_overrides`)."""
    runs_dir: Path = Path("runs")
    backend_url: str | None = None
    battle_id: str | None = None
    with_launchers: bool = False
    quiet: bool = False
    python: str = sys.executable
    green_module: str = "green_agent"
    white_module: str = "white_agent"
    startup_timeout_s: float = 120.0
    idle_timeout_s: float | None = 300.0
    grace_s: float = 5.0
    resume: bool = False
    """Continue the unfinished battle ``battle_id`` (default: the newest unfinished run of the scenario)."""
    retry_infra: bool = False
    """With ``resume``: also re-run the attempts that ended as infrastructure errors."""
    fail_under: list[str] = field(default_factory=list)
    """``--fail-under METRIC=VALUE``: the point estimate must reach VALUE (else exit 1)."""
    fail_under_lower: list[str] = field(default_factory=list)
    """``--fail-under-lower METRIC=VALUE``: the interval's lower bound must reach VALUE (else exit 1)."""
    json_output: bool = False
    """``--json``: print no verdict text (the caller prints :attr:`RunReport.verdict` as JSON)."""
    certify: str | None = None
    certify_baseline: Path | None = None
    """``--certify-baseline DIR``: the baseline run of a comparison claim (``"pass^1>=baseline-0.05"``)."""
    """``--certify "pass^4>=0.8"``: set ``[pass_k_config] certify`` (stop once decided; exit 0 certified, 1 refuted,
    6 inconclusive)."""
    overrides: RunOverrides = field(default_factory=RunOverrides)
    """``--k``, ``--tasks``, ``--domain``, ... (:mod:`launcher.cli.run_overrides`)."""


@dataclass
class PreparedRun:
    """A validated run: the scenario, the battle id and where its files go."""

    scenario: Scenario
    battle_id: str
    run_dir: Path
    log_dir: Path
    backend_url: str | None
    operator_token: str = field(default="", repr=False)
    """The green agent's operator token for this run (generated; passed to it through its environment)."""
    resume: ResumePlan | None = None
    """Set with ``--resume``: what is on disk and whether anything is left to run."""
    gates: list[GateSpec] = field(default_factory=list)
    """``--fail-under`` and ``--fail-under-lower``, resolved against the scenario's k."""
    scenario_file: Path | None = None
    """What the green agent reads and resume hints name: the scenario file, or with overrides the run directory's
    scenario.toml (:meth:`write_scenario`)."""
    overrides: dict[str, Any] = field(default_factory=dict)

    def write_scenario(self) -> None:
        """scenario.json, and with overrides scenario.toml, in the run directory (blocking)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_scenario_record(self.run_dir, self.scenario, self.overrides)
        if self.overrides:
            write_effective_scenario(self.run_dir, self.scenario)


@dataclass
class RunReport:
    """What happened (for callers and tests)."""

    exit_code: int
    battle_id: str | None = None
    summary_path: Path | None = None
    outcome: AssessmentOutcome | None = None
    error: str | None = None
    pids: list[int] = field(default_factory=list)
    verdict: RunVerdict | None = None
    """Set when the battle completed: what ``--json`` prints."""


def generate_battle_id(name: str) -> str:
    """``<scenario name>-<UTC time>-<random>``: sortable, unique, safe as a directory name."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:40] or "battle"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{slug}-{stamp}-{secrets.token_hex(2)}"


def check_secrets_present(scenario: Scenario) -> None:
    """Refuse LLM users / LLM white agents whose API key variable is missing (before anything starts)."""
    user = scenario.pass_k_config.user_simulator
    if user.kind == "llm":  # the scripted user needs nothing, and the users' package costs ~0.4 s of tau2 import
        from green_agent.engine.tau.users import check_user_config

        check_user_config(user)
    white = scenario.white_agent
    if white.kind == "llm" and not os.environ.get(white.api_key_env):
        raise ConfigError(
            f"white_agent.api_key_env: environment variable {white.api_key_env} is not set "
            "(the llm white agent needs an API key)"
        )


def prepare_run(options: RunOptions) -> PreparedRun:
    """Validate the scenario, the battle id and the secrets; raise :class:`ConfigError` naming the field."""
    scenario = load_run_scenario(options.scenario_path, options.overrides)
    if options.certify is not None:
        scenario = with_certify(scenario, options.certify, options.certify_baseline)
    elif options.certify_baseline is not None:
        raise ConfigError("--certify-baseline: only with --certify (a comparison claim, e.g. 'pass^1>=baseline')")
    cert = scenario.pass_k_config.certify
    if cert is not None and cert.compare is not None and cert.baseline_values is None:
        if cert.baseline is None:  # [pass_k_config] certify with compare but no baseline run
            raise ConfigError("pass_k_config.certify.baseline: a comparison needs the baseline's run directory")
        values = baseline_values(Path(cert.baseline), cert.j)
        filled = cert.model_copy(update={"baseline": str(Path(cert.baseline).resolve()), "baseline_values": values})
        scenario = scenario.model_copy(
            update={"pass_k_config": scenario.pass_k_config.model_copy(update={"certify": filled})}
        )
    if options.battle_id is not None and not _BATTLE_ID_RE.match(options.battle_id):
        raise ConfigError(
            f"--battle-id: {options.battle_id!r} must be 1-128 characters of letters, digits, '.', '_' or '-' "
            "and start with a letter or digit"
        )
    if options.retry_infra and not options.resume:
        raise ConfigError("--retry-infra: only with --resume (it re-runs a stored battle's infrastructure errors)")
    check_secrets_present(scenario)
    k = scenario.pass_k_config.k
    gates = parse_gates(options.fail_under, "--fail-under", k)
    gates += parse_gates(options.fail_under_lower, "--fail-under-lower", k)
    plan = None
    if options.resume:
        plan = plan_resume(options.runs_dir, scenario, options.battle_id, retry_infra=options.retry_infra)
        battle_id = plan.battle_id
    else:
        battle_id = options.battle_id or generate_battle_id(scenario.name)
        refuse_existing(options.runs_dir, battle_id)
    run_dir = options.runs_dir / battle_id
    backend_url = options.backend_url or scenario.backend.url
    return PreparedRun(
        scenario,
        battle_id,
        run_dir,
        run_dir / "logs",
        backend_url,
        operator_token=secrets.token_urlsafe(32),
        resume=plan,
        gates=gates,
        scenario_file=run_dir / "scenario.toml" if options.overrides.given() else options.scenario_path,
        overrides=options.overrides.given(),
    )


async def check_agent_under_test(scenario: Scenario, timeout_s: float = AGENT_CHECK_TIMEOUT_S) -> str | None:
    """Why the external agent under test cannot be played against (its card unreachable or unusable), or None.

    Like ``arena eval-csv``: the same card fetch and client set-up the green agent does, before the battle, so an
    agent nobody serves ends the run in seconds (exit 4) instead of as k x tasks failed attempts. Agents we start
    ourselves are checked by their start-up (their card must answer)."""
    white = scenario.white_agent
    if white.kind != "external":
        return None
    from green_agent.engine.white_client import WhiteAgentClient, WhiteAgentError

    url = str(white.url)
    try:
        async with WhiteAgentClient(url, turn_timeout_s=timeout_s, card_timeout_s=timeout_s) as client:
            await asyncio.wait_for(client.connect(), timeout_s + 5.0)
    except WhiteAgentError as error:
        return f"the agent under test at {url} is unreachable: {error.detail}"
    except TimeoutError:
        return f"the agent under test at {url} is unreachable: no agent card within {timeout_s:g} s"
    return None


def _resume_note(console: Console, prepared: PreparedRun, options: RunOptions) -> None:
    """After a battle that did not finish: where its partial summary is and how to continue it."""
    if not (prepared.run_dir / RUN_FILE).exists():
        return  # the battle never started: nothing to resume
    status = summary_status(prepared.run_dir)
    if status == "completed":
        return
    if status is not None:
        say(console, f"partial summary ({status}): {prepared.run_dir / 'summary.json'}")
    say(console, f"resume with: {resume_hint(prepared, options)}")


def resume_hint(prepared: PreparedRun, options: RunOptions) -> str:
    """The command that continues this battle."""
    return f"arena run {prepared.scenario_file} --resume --battle-id {prepared.battle_id}" + (
        f" --runs-dir {options.runs_dir}" if options.runs_dir != Path("runs") else ""
    )


def white_agent_argv(white: WhiteAgentConfig, port: int, *, python: str, module: str = "white_agent") -> list[str]:
    """The reference white agent's command line (keys stay in the environment: only the variable's name is passed)."""
    argv = [python, "-m", module, "--kind", white.kind, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--card-url", loopback_url(port), "--seed", str(white.seed)]
    for name, rate in white.fault_rates.items():
        argv += ["--fault-rate", f"{name}={rate}"]
    if white.kind == "llm":
        argv += ["--model", white.model, "--api-key-env", white.api_key_env, "--temperature", str(white.temperature)]
        if white.base_url:
            argv += ["--base-url", white.base_url]
    return argv


def green_agent_argv(
    port: int, runs_dir: Path, *, python: str, module: str = "green_agent", scenario: Path | None = None
) -> list[str]:
    """The green agent's command line; ``scenario`` makes its [pass_k_config] the default of AgentBeats battles."""
    argv = [python, "-m", module, "--host", "127.0.0.1", "--port", str(port), "--card-url", loopback_url(port)]
    argv += ["--runs-dir", str(runs_dir), "--log-level", "warning"]
    return argv + (["--scenario", str(scenario)] if scenario is not None else [])


def launcher_argv(
    agent_argv: Sequence[str], *, port: int, agent_url: str, name: str, log_dir: Path, python: str
) -> list[str]:
    """An ``arena launcher`` wrapping ``agent_argv`` (run through ``python -m launcher``: no install needed)."""
    argv = [python, "-m", "launcher", "launcher", "--port", str(port), "--agent-url", agent_url, "--name", name]
    return [*argv, "--log-dir", str(log_dir), "--", *agent_argv]


async def start_agent(
    group: ProcessGroup,
    display: BattleDisplay,
    name: str,
    agent_argv: list[str],
    port: int,
    launcher_port: int,
    options: RunOptions,
    log_dir: Path,
    env: dict[str, str] | None = None,
) -> tuple[str, ManagedProcess]:
    """Start one agent (directly, or behind a launcher on ``launcher_port``) and wait until its card answers.

    ``env`` is the agent's whole environment (default: ours, minus the green agent's operator token)."""
    env = env if env is not None else agent_environment()
    url = loopback_url(port)
    card_url = url + AGENT_CARD_PATH
    if not options.with_launchers:
        display.status(f"starting the {name}")
        proc = await group.start_and_wait(name, agent_argv, card_url, timeout_s=options.startup_timeout_s, env=env)
        return url, proc
    launcher_url = loopback_url(launcher_port)
    display.status(f"starting the {name} launcher")
    argv = launcher_argv(
        agent_argv, port=launcher_port, agent_url=url, name=name, log_dir=log_dir, python=options.python
    )
    proc = group.start(f"{name}_launcher", argv, env=env)
    await wait_until_ready(proc, launcher_url + "/health", timeout_s=options.startup_timeout_s)
    display.status(f"waiting for the {name} behind {launcher_url}")
    await _wait_behind_launcher(proc, name, launcher_url, options.startup_timeout_s)
    display.line(f"{name} launcher: {launcher_url} (agent {url})")
    return url, proc


async def start_together(
    starting: dict[str, Coroutine[Any, Any, tuple[str, ManagedProcess]]],
) -> dict[str, tuple[str, ManagedProcess]]:
    """Run the agents' start-ups concurrently; the first failure cancels the others and is raised as it is (a
    :class:`ProcessError`, not an exception group, so callers report it the same way as a lone start-up)."""
    tasks = {name: asyncio.ensure_future(coroutine) for name, coroutine in starting.items()}
    try:
        await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks.values():
            error = task.exception() if task.done() else None
            if error is not None:
                raise error
        return {name: task.result() for name, task in tasks.items()}
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def agent_environment(operator_token: str | None = None) -> dict[str, str]:
    """Our environment for a child agent: never our own operator token; the green agent's, when given."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    if operator_token is not None:
        env[TOKEN_ENV] = operator_token
    return env


async def _wait_behind_launcher(proc: ManagedProcess, name: str, launcher_url: str, timeout_s: float) -> None:
    """Wait until the launcher reports its agent ready; fail fast with the launcher's own error report."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        while True:
            if not proc.running:
                raise proc.exited_error("before its agent was ready")
            try:
                health = (await client.get(launcher_url + "/health")).json()
            except (httpx.HTTPError, ValueError):
                health = {}
            if health.get("agent_ready"):
                return
            if health.get("last_error"):
                raise ProcessError(f"the {name} behind the launcher at {launcher_url} failed: {health['last_error']}")
            if loop.time() > deadline:
                raise ProcessError(
                    f"the {name} behind the launcher at {launcher_url} was not ready within {timeout_s:g} s"
                )
            await asyncio.sleep(0.1)


async def _assess(
    green: ManagedProcess,
    green_url: str,
    white_url: str,
    prepared: PreparedRun,
    display: BattleDisplay,
    options: RunOptions,
) -> AssessmentOutcome:
    """Run the assessment while watching the green agent: its death ends the wait at once."""
    config = remote_config_dict(prepared.scenario.pass_k_config)
    assessment = asyncio.create_task(
        run_assessment(
            green_url,
            white_url,
            config,
            battle_id=prepared.battle_id,
            on_event=display.on_event,
            extra_request_fields={
                "backend_url": prepared.backend_url,
                **({"resume": True, "retry_infra": options.retry_infra} if prepared.resume is not None else {}),
            },
            idle_timeout_s=options.idle_timeout_s,
            operator_token=prepared.operator_token,
        )
    )

    async def watch_green() -> None:
        while green.running:
            await asyncio.sleep(0.2)
        raise green.exited_error("while the battle was running")

    watcher = asyncio.create_task(watch_green())
    try:
        done, _ = await asyncio.wait({assessment, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if assessment in done:
            return assessment.result()
        watcher.result()  # raises ChildExitedError
        raise AssertionError("unreachable")  # pragma: no cover
    except AssessmentError:
        # A broken stream is usually the agent dying: prefer its exit code and stderr when we have them.
        await asyncio.sleep(0.3)
        if not green.running:
            raise green.exited_error("while the battle was running") from None
        raise
    finally:
        for task in (assessment, watcher):
            task.cancel()
        await asyncio.gather(assessment, watcher, return_exceptions=True)


def _summary_path(run_dir: Path, outcome: AssessmentOutcome, runs_dir: Path) -> Path:
    battle_id = (outcome.result or {}).get("battle_id")
    if isinstance(battle_id, str) and battle_id and battle_id != run_dir.name:
        return runs_dir / battle_id / "summary.json"
    return run_dir / "summary.json"


async def execute_run(options: RunOptions, console: Console) -> RunReport:
    """Run a scenario end to end; never leaves a child behind. Returns the exit code and what happened."""
    try:
        prepared = prepare_run(options)
    except ConfigError as error:
        say(console, str(error), label="configuration error:")
        return RunReport(EXIT_CONFIG_ERROR, error=str(error))

    scenario = prepared.scenario
    report = RunReport(EXIT_HARNESS_ERROR, battle_id=prepared.battle_id)
    plan = prepared.resume
    if plan is not None and plan.action == "finished":
        say(console, f"battle {plan.battle_id} already finished ({plan.done} attempts); nothing to resume")
        await conclude_run(console, report, plan.run_dir / "summary.json", prepared.gates, options, None)
        return report
    unreachable = await check_agent_under_test(scenario)
    if unreachable is not None:
        say(console, unreachable, label="error:")
        report.exit_code, report.error = EXIT_AGENT_UNREACHABLE, unreachable
        return report
    if plan is not None:
        say(
            console,
            f"resuming battle {plan.battle_id}: {plan.done} attempt(s) on disk"
            + (f", {plan.infra_errors} infrastructure error(s) to re-run" if options.retry_infra else ""),
        )
    await asyncio.to_thread(prepared.write_scenario)
    started = time.monotonic()
    group = ProcessGroup(prepared.log_dir, grace_s=options.grace_s)
    try:
        with BattleDisplay(console, quiet=options.quiet) as display:
            async with group:
                # All ports at once: sockets held together cannot be handed out twice.
                white_port, green_port, white_launcher_port, green_launcher_port = free_ports(4)
                # The scenario file gives the green agent its operator-only settings (the user simulator's
                # endpoint, model and key variable); the token travels in its environment, never on a command line.
                green_argv = green_agent_argv(
                    green_port,
                    options.runs_dir,
                    python=options.python,
                    module=options.green_module,
                    scenario=prepared.scenario_file,
                )
                green_argv += options.overrides.green_argv()  # --workers
                starting = {
                    "green_agent": start_agent(
                        group,
                        display,
                        "green_agent",
                        green_argv,
                        green_port,
                        green_launcher_port,
                        options,
                        prepared.log_dir,
                        env=agent_environment(prepared.operator_token),
                    )
                }
                if scenario.white_agent.kind == "external":
                    white_url = str(scenario.white_agent.url)
                else:
                    white_argv = white_agent_argv(
                        scenario.white_agent, white_port, python=options.python, module=options.white_module
                    )
                    starting["white_agent"] = start_agent(
                        group,
                        display,
                        "white_agent",
                        white_argv,
                        white_port,
                        white_launcher_port,
                        options,
                        prepared.log_dir,
                    )
                # Both agents start at once: each spends seconds importing, and neither needs the other to start.
                started_agents = await start_together(starting)
                green_url, green_proc = started_agents["green_agent"]
                white_proc = None
                if "white_agent" in started_agents:
                    white_url, white_proc = started_agents["white_agent"]
                report.pids = [p.pid for p in group.processes]
                display.status(f"battle {prepared.battle_id}")
                outcome = await _assess(green_proc, green_url, white_url, prepared, display, options)
                report.outcome = outcome
                if white_proc is not None and not white_proc.running:
                    display.line(str(white_proc.exited_error("during the battle")))
    except (ProcessError, AssessmentError) as error:
        say(console, str(error), label="error:")
        say(console, f"logs: {prepared.log_dir}")
        _resume_note(console, prepared, options)
        report.error = str(error)
        return report
    except asyncio.CancelledError:
        if group.received_signal is not None:
            say(console, f"stopped by {group.received_signal.name}; all agents stopped")
            _resume_note(console, prepared, options)
            report.exit_code = 128 + int(group.received_signal)
            report.error = f"received {group.received_signal.name}"
            return report
        _resume_note(console, prepared, options)  # Ctrl-C: the agents are stopped; app.py says so and exits 130
        raise

    elapsed = time.monotonic() - started
    if not outcome.completed:
        if outcome.state in {"failed", "rejected", "message"} and not outcome.battle_started:
            say(console, str(outcome.error), label="the green agent refused the battle:")
            report.exit_code = EXIT_CONFIG_ERROR
        else:
            # A cancelled battle still wrote its partial summary: pointed to, not printed (verdict first, detail in
            # the file).
            partial = prepared.run_dir / "summary.md"
            if await asyncio.to_thread(partial.is_file):
                say(console, f"partial summary: {partial}")
            say(console, str(outcome.error), label=f"the battle did not complete ({outcome.state}):")
            say(console, f"logs: {prepared.log_dir}")
            report.exit_code = EXIT_HARNESS_ERROR
        report.error = outcome.error
        return report

    summary_path = _summary_path(prepared.run_dir, outcome, options.runs_dir)
    await conclude_run(console, report, summary_path, prepared.gates, options, elapsed)
    return report


async def conclude_run(
    console: Console,
    report: RunReport,
    summary_path: Path,
    gates: Sequence[GateSpec],
    options: RunOptions,
    elapsed_s: float | None,
    extra_lines: Sequence[str] = (),
    battle_url: str | None = None,
) -> None:
    """After a completed battle: read its summary.json, judge the gates, set the exit code and print the verdict
    (``-q``: one line; ``--json``: nothing, the caller prints ``report.verdict``). ``extra_lines`` (e.g. the
    backend's winner) go just before the verdict's last lines; ``battle_url`` (the battle's page) is part of the
    verdict, also in ``-q`` and ``--json``."""
    try:
        summary = await asyncio.to_thread(load_summary, summary_path.parent)
    except (OSError, ValueError) as error:
        message = f"the battle completed but {summary_path} cannot be read: {error}"
        say(console, message, label="error:")
        report.exit_code, report.error = EXIT_HARNESS_ERROR, message
        return
    report.summary_path = summary_path
    verdict = verdict_from_summary(summary, gates, summary_path.parent, duration_s=elapsed_s, battle_url=battle_url)
    report.verdict = verdict
    report.exit_code = verdict.exit_code
    report.error = verdict.error
    certified = certify_exit_code(summary)
    if certified is not None and verdict.exit_code == EXIT_OK:  # gates that failed, nothing measured: those win
        report.exit_code = certified
        report.verdict = verdict = verdict.model_copy(
            update={"exit_code": certified, "outcome": outcome_for_exit(certified)}
        )
    report.verdict = verdict = budget_verdict(summary, verdict)  # stopped by max_cost_usd / max_wall_s: exit 6
    report.exit_code = verdict.exit_code
    line = certify_line(summary)
    if line is not None:
        extra_lines = [*extra_lines, line]
        if options.quiet and not options.json_output:
            say(console, line)
    if options.json_output:
        return
    if options.quiet:
        say(console, one_line(verdict))
        return
    lines = verdict_lines(verdict)
    for line in [*lines[:-2], *extra_lines, *lines[-2:]]:
        say(console, line)
