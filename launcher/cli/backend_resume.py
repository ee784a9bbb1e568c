"""``arena run SCENARIO --resume --backend local|URL``: continue a battle that runs on a backend after ``arena run``
(or its green agent) was stopped, so that the backend battle gets its one result.

Why: the backend battle outlives the run that started it (it is ``running`` until a result or its timeout), and
only the green agent holds the battle token a result needs. The green agent keeps the token in the battle's run
directory (:mod:`green_agent.service.backend_target`); ``arena run --backend`` records where the battle runs
(:mod:`launcher.cli.backend_record`). A resume then:

1. checks, before starting anything, that the run can be resumed (the scenario and the white agent unchanged,
   :mod:`launcher.cli.resume`) and that ``--backend`` names the backend the battle ran on (exit 2 otherwise);
2. reaches the backend: a URL must answer; ``local`` starts our backend again on the same SQLite file (on the same
   port when it is free, so undelivered events of the earlier run still find it);
3. asks the backend about the battle: **running** -> step 4; **finished with a result** -> nothing to do (exit 0);
   **finished by timeout** -> the backend refuses a late result: exit 2, naming the command that finishes the run
   locally instead; **error** -> exit 3 (harness) with the backend's reason; unknown battle -> exit 2;
4. starts the white agent and the green agent (no launchers: the backend does not reset agents of a running
   battle) and sends the green agent an assessment request with ``"resume": true`` and the backend's current URL:
   it runs only the missing attempts, delivers what the earlier run left in its outbox, then its events and the one
   result with the stored token. When the run had already finished on disk but the backend still lacks the result
   (stopped between the two), only the green agent starts: it replays its outbox with the stored token;
5. follows the battle on the backend until it is finished (the same display and exit codes as ``--backend``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from green_agent.engine.config import ConfigError, remote_config_dict
from green_agent.wire.process import DEFAULT_RETENTION_S
from launcher.cli.assessment_client import AssessmentError, AssessmentOutcome, run_assessment
from launcher.cli.backend_api import BackendApi, BackendError
from launcher.cli.backend_dirs import merge_into_run
from launcher.cli.backend_record import BackendRunRecord, read_record
from launcher.cli.backend_run import (
    LOCAL,
    BackendRunOptions,
    BackendRunReport,
    _conclude,
    _follow,
    battle_page_url,
    is_arena_backend,
    judge_battle,
    local_backend_argv,
)
from launcher.cli.battle_display import BattleDisplay, say
from launcher.cli.run_command import (
    EXIT_CONFIG_ERROR,
    EXIT_HARNESS_ERROR,
    EXIT_OK,
    PreparedRun,
    agent_environment,
    green_agent_argv,
    prepare_run,
    white_agent_argv,
)
from launcher.ports import free_ports, is_loopback_url, loopback_url, port_is_free
from launcher.processes import ProcessError, ProcessGroup, wait_until_ready

_RESULT_WAIT_S = 600.0
"""After the green agent finished, how long the backend may take to show the result (outages aside)."""


class _Stop(Exception):
    """The resume ends before (or instead of) running anything: exit code and message."""

    def __init__(self, exit_code: int, message: str, *, label: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.label = label


def _check_record(record: BackendRunRecord | None, target: str, prepared: PreparedRun) -> BackendRunRecord:
    run_dir = prepared.run_dir
    if record is None:
        raise ConfigError(
            f"--backend: {run_dir} did not run through a backend (no backend_run.json); resume it without --backend"
        )
    if (record.backend == LOCAL) != (target == LOCAL) or (target != LOCAL and target != record.backend.rstrip("/")):
        raise ConfigError(
            f"--backend: battle {prepared.battle_id} runs on {record.backend}, not {target}; "
            f"resume it with --backend {record.backend}"
        )
    if record.backend == LOCAL and not record.database:
        raise ConfigError(f"{run_dir}/backend_run.json: database: required for a local backend")
    return record


async def _reach_backend(
    options: BackendRunOptions, record: BackendRunRecord, group: ProcessGroup, display: BattleDisplay
) -> str:
    """The backend's URL; ``local``: ours again on its database, on the earlier port when free."""
    if record.backend != LOCAL:
        return record.backend.rstrip("/")
    assert record.database is not None
    earlier = httpx.URL(record.backend_url).port
    port = earlier if earlier is not None and await asyncio.to_thread(port_is_free, earlier) else free_ports(1)[0]
    url = loopback_url(port)
    display.status("starting the battle backend again")
    argv = local_backend_argv(port, Path(record.database), python=options.run.python)
    proc = group.start("backend", argv)
    await wait_until_ready(proc, url + "/health", timeout_s=options.run.startup_timeout_s)
    display.line(f"battle backend: {url} (database {record.database})")
    return url


def _state_on_backend(battle: dict[str, Any], prepared: PreparedRun, options: BackendRunOptions) -> None:
    """Raise :class:`_Stop` unless the backend battle can still take a result."""
    battle_id = prepared.battle_id
    state = battle.get("state")
    if state == "running":
        return
    if state == "queued":
        raise _Stop(EXIT_HARNESS_ERROR, f"battle {battle_id} is still queued on the backend: nothing to resume yet")
    exit_code, error = judge_battle(battle)
    if exit_code == EXIT_OK:
        raise _Stop(EXIT_OK, f"battle {battle_id} already has its result on the backend; nothing to resume")
    result: dict[str, Any] = battle["result"] if isinstance(battle.get("result"), dict) else {}
    score: dict[str, Any] = result["score"] if isinstance(result.get("score"), dict) else {}
    if state == "finished" and "timeout" in (result.get("reason"), score.get("reason")):
        local = f"arena run {prepared.scenario_file} --resume --battle-id {battle_id}" + (
            f" --runs-dir {options.run.runs_dir}" if str(options.run.runs_dir) != "runs" else ""
        )
        raise _Stop(
            EXIT_CONFIG_ERROR,
            f"battle {battle_id} ended on the backend as a draw by timeout, and a backend refuses a later result; "
            f"to finish the run locally (summary.json only): {local}",
            label="cannot resume through the backend:",
        )
    raise _Stop(exit_code, f"battle {battle_id} is over on the backend: {error}", label="cannot resume:")


async def _start_agents(
    options: BackendRunOptions, prepared: PreparedRun, group: ProcessGroup, display: BattleDisplay, *, white: bool
) -> tuple[str, str]:
    """The white agent (when ``white``) and the green agent, directly on free loopback ports."""
    run = options.run
    white_port, green_port = free_ports(2)
    scenario = prepared.scenario
    white_url = ""
    starting: list[Any] = []
    if white and scenario.white_agent.kind == "external":
        white_url = str(scenario.white_agent.url)
    elif white:
        white_url = loopback_url(white_port)
        argv = white_agent_argv(scenario.white_agent, white_port, python=run.python, module=run.white_module)
        starting.append(
            group.start_and_wait(
                "white_agent", argv, white_url + "/.well-known/agent-card.json", timeout_s=run.startup_timeout_s
            )
        )
    green_url = loopback_url(green_port)
    if prepared.overrides:  # the green agent reads the scenario with this run's overrides
        await asyncio.to_thread(prepared.write_scenario)
    argv = green_agent_argv(
        green_port, run.runs_dir, python=run.python, module=run.green_module, scenario=prepared.scenario_file
    )
    argv += run.overrides.green_argv()  # --workers, as on a fresh run (launcher/cli/backend_run.py)
    env = agent_environment(prepared.operator_token)
    starting.append(
        group.start_and_wait(
            "green_agent", argv, green_url + "/.well-known/agent-card.json", timeout_s=run.startup_timeout_s, env=env
        )
    )
    display.status("starting the agents")
    await asyncio.gather(*starting)
    return white_url, green_url


async def _resume_battle(
    options: BackendRunOptions,
    record: BackendRunRecord,
    prepared: PreparedRun,
    group: ProcessGroup,
    display: BattleDisplay,
    report: BackendRunReport,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    battle_id = prepared.battle_id
    plan = prepared.resume
    assert plan is not None
    backend_url = await _reach_backend(options, record, group, display)
    report.backend_url = backend_url
    timeout = httpx.Timeout(options.request_timeout_s)
    async with httpx.AsyncClient(timeout=timeout, trust_env=not is_loopback_url(backend_url)) as http:
        api = BackendApi(http, backend_url)
        arena = is_arena_backend(await api.health())
        try:
            battle = await api.battle(battle_id)
        except BackendError as error:
            if "HTTP 404" in str(error):
                message = f"--resume: the backend at {backend_url} has no battle {battle_id}"
                raise _Stop(EXIT_CONFIG_ERROR, message) from None
            raise
        _state_on_backend(battle, prepared, options)
        report.battle_url = battle_page_url(backend_url, battle_id, arena=arena)
        display.line(f"battle page: {report.battle_url}")
        only_outbox = plan.action == "finished"
        white_url, green_url = await _start_agents(options, prepared, group, display, white=not only_outbox)
        report.pids = [p.pid for p in group.processes]
        display.status(f"battle {battle_id} (resumed)")
        assessment: asyncio.Task[AssessmentOutcome] | None = None
        if not only_outbox:
            assessment = asyncio.create_task(
                run_assessment(
                    green_url,
                    white_url,
                    remote_config_dict(prepared.scenario.pass_k_config),
                    battle_id=battle_id,
                    extra_request_fields={
                        "backend_url": backend_url,
                        "resume": True,
                        "retry_infra": options.run.retry_infra,
                    },
                    idle_timeout_s=options.run.idle_timeout_s,
                    operator_token=prepared.operator_token,
                )
            )
        seen = len(battle.get("interact_history") or [])
        deadline_s = record.battle_timeout_s + _RESULT_WAIT_S
        outage_limit_s = options.outage_limit_s or record.battle_timeout_s + DEFAULT_RETENTION_S
        following = asyncio.create_task(
            _follow(api, battle_id, display, group, options, deadline_s, outage_limit_s, seen=seen)
        )
        try:
            return await _until_finished(following, assessment)
        finally:
            for task in (following, assessment):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task


async def _until_finished(
    following: asyncio.Task[tuple[dict[str, Any], list[dict[str, Any]]]],
    assessment: asyncio.Task[AssessmentOutcome] | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The backend's view once the battle is over there; a refused or failed assessment ends the wait at once."""
    if assessment is not None:
        done, _ = await asyncio.wait({following, assessment}, return_when=asyncio.FIRST_COMPLETED)
        if following not in done:
            outcome = assessment.result()  # AssessmentError propagates
            if not outcome.completed:
                if outcome.state in {"failed", "rejected", "message"} and not outcome.battle_started:
                    raise _Stop(EXIT_CONFIG_ERROR, str(outcome.error), label="the green agent refused the resume:")
                raise _Stop(
                    EXIT_HARNESS_ERROR, f"the resumed battle did not complete ({outcome.state}): {outcome.error}"
                )
    return await following


async def execute_backend_resume(options: BackendRunOptions, target: str, console: Console) -> BackendRunReport:
    """``arena run --resume --backend``: see the module's docstring. Never leaves a child behind."""
    try:
        if options.run.backend_url:
            raise ConfigError("--backend-url: not with --backend (the battle reports to the backend it runs on)")
        prepared = prepare_run(options.run)
        record = _check_record(await asyncio.to_thread(read_record, prepared.run_dir), target, prepared)
    except ConfigError as error:
        say(console, str(error), label="configuration error:")
        return BackendRunReport(EXIT_CONFIG_ERROR, error=str(error))
    plan = prepared.resume
    assert plan is not None
    report = BackendRunReport(EXIT_HARNESS_ERROR, battle_id=prepared.battle_id)
    if record.backend == LOCAL:
        report.backend_db = Path(record.database or "")
    say(
        console,
        f"resuming battle {plan.battle_id} on {record.backend}: {plan.done} attempt(s) on disk"
        + (" (finished on disk: the backend may lack its result)" if plan.action == "finished" else ""),
    )
    group = ProcessGroup(prepared.log_dir, grace_s=options.run.grace_s)
    started = time.monotonic()
    try:
        async with group:
            with BattleDisplay(console, quiet=options.run.quiet) as display:
                battle, events = await _resume_battle(options, record, prepared, group, display, report)
            report.battle = battle
            await _conclude(report, battle, events, prepared, options, console, started)
    except _Stop as stop:
        say(console, str(stop), label=stop.label or ("error:" if stop.exit_code != EXIT_OK else ""))
        report.exit_code, report.error = stop.exit_code, (None if stop.exit_code == EXIT_OK else str(stop))
        if stop.exit_code == EXIT_OK:
            report.summary_path = prepared.run_dir / "summary.json"
    except (ProcessError, BackendError, AssessmentError) as error:
        say(console, str(error), label="error:")
        say(console, f"logs: {prepared.log_dir}")
        report.exit_code, report.error = EXIT_HARNESS_ERROR, str(error)
    except asyncio.CancelledError:
        if group.received_signal is not None:
            say(console, f"stopped by {group.received_signal.name}; all agents stopped")
            report.exit_code = 128 + int(group.received_signal)
            report.error = f"received {group.received_signal.name}"
            return report
        raise
    if record.database and (staging := Path(record.database).parent).parent.resolve() == options.run.runs_dir.resolve():
        # An earlier run stopped before its logs and database joined the battle's run directory: now they do.
        moved = await asyncio.to_thread(merge_into_run, staging, prepared.run_dir)
        report.backend_db = moved or report.backend_db
    return report
