"""``arena run SCENARIO.toml --backend local|URL``: the battle goes through an AgentBeats-compatible backend.

Why a second run mode: in direct mode ``arena run`` talks to the green agent itself, so nobody else can watch the
battle. Here the battle is created through the AgentBeats HTTP API (ours, started for the run or already running,
or the real AgentBeats backend), so its page shows the timeline live while the terminal shows the same progress bar
as direct mode. The flow is the platform's own:

1. ``local``: start ``python -m battle_backend`` on a free loopback port, SQLite inside the run directory;
   a URL: check that it answers ``GET /health``.
2. Start the white and the green agent, each behind an ``arena launcher`` (the backend resets agents through their
   launchers before every battle). The green agent gets ``--scenario`` so the real AgentBeats backend, which passes
   no battle config, still runs the scenario's battle.
3. ``POST /agents`` for both (the green agent requires one participant named ``white_agent``, with a
   ``battle_timeout`` large enough for the scenario), ``POST /battles`` with the scenario's ``pass_k_config``.
4. Poll ``GET /battles/{id}``; every new ``interact_history`` entry feeds the progress display; the result event's
   markdown is printed at the end.

A backend outage is ridden out: before the battle exists, each call is tried a few times when the backend cannot be
reached (a POST only when it never got there, so a registration or a battle is never made twice); while following
the battle, an unreachable backend (connection error, timeout, 5xx, 408, 429) is polled again with backoff (up to
5 s), with one line when it goes away and one when it is back. The green agent keeps its events in an outbox and
delivers them when the backend returns, so the battle's history is complete. ``arena run`` gives up (exit 1) only
after ``outage_limit_s`` of one outage (default: the battle timeout plus the green agent's outbox retention, the
longest the result can take to arrive). The HTTP calls and their bounds are in :mod:`launcher.cli.backend_api`.

Exit codes are those of direct mode: 0 the battle completed (whatever the agent scored), 1 harness error, the
backend put the battle in state error, or it timed out (a draw by timeout), 2 configuration error (before anything
starts, or the green agent refused the battle: the result's ``detail["reason"]`` is one of
``green_agent.wire.agentbeats.REFUSALS``), 130 Ctrl-C, 128 + signal on SIGTERM/SIGHUP. Every child
(backend, launchers, and through them the agents) is stopped on every exit path. Agent registrations stay in the
backend: its battle records and pages refer to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
import webbrowser
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from green_agent.engine.battle_ids import run_dir_for
from green_agent.engine.config import ConfigError, remote_config_dict
from green_agent.wire.process import DEFAULT_RETENTION_S, OUTBOX_FILE
from launcher.cli.assessment_client import AssessmentOutcome
from launcher.cli.backend_agents import (
    GREEN_ALIAS,
    earlier_ports,
    register_or_reuse,
    registered_agents,
    reuse_lock,
    white_alias,
)
from launcher.cli.backend_api import BackendApi, BackendError
from launcher.cli.backend_battle import LOCAL, estimate_battle_timeout, judge_battle, parse_backend, result_event
from launcher.cli.backend_dirs import DATABASE_FILE, merge_into_run
from launcher.cli.backend_follow import Follower, GreenWatch
from launcher.cli.backend_record import BackendRunRecord, record_battle, resume_command
from launcher.cli.battle_display import BattleDisplay, say
from launcher.cli.run_command import (
    EXIT_AGENT_UNREACHABLE,
    EXIT_CONFIG_ERROR,
    EXIT_HARNESS_ERROR,
    EXIT_OK,
    PreparedRun,
    RunOptions,
    RunReport,
    agent_environment,
    check_agent_under_test,
    conclude_run,
    green_agent_argv,
    prepare_run,
    start_agent,
    white_agent_argv,
)
from launcher.ports import free_ports, is_loopback_url, loopback_url
from launcher.processes import ProcessError, ProcessGroup, wait_until_ready

logger = logging.getLogger(__name__)

__all__ = [  # the battle's pure helpers live in backend_battle.py; callers import them from here too
    "LOCAL",
    "BackendRunOptions",
    "BackendRunReport",
    "battle_page_url",
    "estimate_battle_timeout",
    "execute_backend_run",
    "is_arena_backend",
    "judge_battle",
    "local_backend_argv",
    "parse_backend",
    "result_event",
]

WHITE_PARTICIPANT = "white_agent"
"""The participant name our green agent requires (the name in ``opponents``; the winner is reported by alias)."""
_POLL_FAILURES_TOLERATED = 5
_OUTAGE_MAX_DELAY_S = 5.0
"""Longest pause between two polls of an unreachable backend."""


@dataclass
class BackendRunOptions:
    """``arena run --backend``: the direct-mode options plus where the backend is and how to show it."""

    run: RunOptions
    backend: str
    open_browser: bool = False
    keep_backend: bool = False
    battle_timeout_s: float | None = None
    poll_interval_s: float = 0.5
    request_timeout_s: float = 15.0
    outage_limit_s: float | None = None
    """How long one backend outage is waited out while following the battle (None: the battle timeout plus the
    green agent's outbox retention)."""


@dataclass
class BackendRunReport(RunReport):
    """What happened, plus the backend's view of the battle (for callers and tests)."""

    backend_url: str | None = None
    battle_url: str | None = None
    battle: dict[str, Any] | None = None
    backend_db: Path | None = None
    """The SQLite file of a ``local`` backend (``arena backend --db`` serves it again later)."""
    agent_ids: dict[str, str] = field(default_factory=dict)


def local_backend_argv(port: int, db_path: Path, *, python: str) -> list[str]:
    """Our backend for one run: loopback only, its SQLite file in the run directory."""
    argv = [python, "-m", "battle_backend", "--host", "127.0.0.1", "--port", str(port), "--db", str(db_path)]
    return [*argv, "--log-level", "warning"]


def is_arena_backend(health: dict[str, Any]) -> bool:
    """Our backend says how many battles it runs at once; AgentBeats' /health is only {"status": "ok"}."""
    return "max_concurrent_battles" in health


def battle_page_url(backend_url: str, battle_id: str, *, arena: bool) -> str:
    """Our backend's live page, or (AgentBeats ships no page in its wheel) the battle's JSON."""
    return f"{backend_url}/ui/battles/{battle_id}" if arena else f"{backend_url}/battles/{battle_id}"


async def _follow(
    api: BackendApi,
    battle_id: str,
    display: BattleDisplay,
    group: ProcessGroup,
    options: BackendRunOptions,
    deadline_s: float,
    outage_limit_s: float,
    *,
    seen: int = 0,
    watch: Callable[[], Awaitable[None]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Poll until the battle is finished or errored; a dead child, a battle that never ends or a backend gone for
    longer than ``outage_limit_s`` is an error. Time spent in outages does not count against ``deadline_s``.
    ``seen``: history entries already shown (a resume shows only what comes after); ``watch`` raises when the green
    agent stopped (checked once the battle started: the backend restarts agents before it)."""
    follower = Follower(display)
    follower.seen = seen
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    failures = 0
    outage_started: float | None = None
    outage_since = ""
    delay = options.poll_interval_s
    while True:
        group.check_alive()
        if watch is not None and follower.events:
            await watch()
        try:
            battle = await api.battle(battle_id)
        except BackendError as error:
            if error.transient:  # the backend is down or restarting: the green agent keeps the events meanwhile
                now = loop.time()
                if outage_started is None:
                    outage_started, outage_since = now, datetime.now().strftime("%H:%M:%S")
                    say(display.console, f"backend unreachable since {outage_since}, retrying ({error})")
                    display.status(f"battle {battle_id}: backend unreachable since {outage_since}")
                elif now - outage_started > outage_limit_s:
                    outbox = options.run.runs_dir / battle_id / OUTBOX_FILE
                    raise BackendError(
                        f"the backend has been unreachable since {outage_since} ({now - outage_started:.0f} s, "
                        f"longer than the limit of {outage_limit_s:g} s); giving up on battle {battle_id}. Last "
                        f"error: {error}. The green agent's undelivered events are in {outbox}"
                    ) from error
                delay = min(max(delay, options.poll_interval_s) * 2, _OUTAGE_MAX_DELAY_S)
                await asyncio.sleep(delay)
                continue
            failures += 1  # a busy backend may miss one poll; a gone one fails every poll
            if failures >= _POLL_FAILURES_TOLERATED:
                raise
            await asyncio.sleep(options.poll_interval_s)
            continue
        if outage_started is not None:
            down = loop.time() - outage_started
            say(display.console, f"backend reachable again after {down:.1f} s (unreachable since {outage_since})")
            display.status(f"battle {battle_id}")
            deadline += down
            outage_started, delay = None, options.poll_interval_s
        failures = 0
        follower.feed(battle)
        state = battle.get("state")
        if state in ("finished", "error"):
            return battle, follower.events
        if state == "queued":
            position = battle.get("queue_position")
            display.status(f"battle {battle_id} queued" + (f" (position {position})" if position else ""))
        if loop.time() > deadline:
            raise BackendError(f"battle {battle_id} was still {state} after {deadline_s:g} s")
        await asyncio.sleep(options.poll_interval_s)


async def _connect_backend(
    options: BackendRunOptions,
    target: str,
    group: ProcessGroup,
    prepared: PreparedRun,
    port: int,
    display: BattleDisplay,
    report: BackendRunReport,
) -> str:
    """The backend's URL; for ``local``, ours started for this run and waited for."""
    if target != LOCAL:
        return target
    url = loopback_url(port)
    display.status("starting the battle backend")
    report.backend_db = prepared.run_dir / DATABASE_FILE
    proc = group.start("backend", local_backend_argv(port, report.backend_db, python=options.run.python))
    await wait_until_ready(proc, url + "/health", timeout_s=options.run.startup_timeout_s)
    display.line(f"battle backend: {url} (database {report.backend_db})")
    return url


async def _keep_serving(console: Console, backend_url: str) -> None:
    say(console, f"the backend keeps serving at {backend_url}; press Ctrl-C to stop it")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        say(console, "backend stopped")


async def execute_backend_run(options: BackendRunOptions, console: Console) -> BackendRunReport:
    """Run a scenario through a backend end to end; never leaves a child behind."""
    try:
        target = parse_backend(options.backend)
        if options.run.resume:
            from launcher.cli.backend_resume import execute_backend_resume

            return await execute_backend_resume(options, target, console)
        if options.run.backend_url:
            raise ConfigError("--backend-url: not with --backend (the battle reports to the backend it runs on)")
        if options.keep_backend and target != LOCAL:
            raise ConfigError("--keep-backend: only with --backend local (a backend given by URL is not ours to stop)")
        prepared = prepare_run(options.run)
    except ConfigError as error:
        say(console, str(error), label="configuration error:")
        return BackendRunReport(EXIT_CONFIG_ERROR, error=str(error))
    unreachable = await check_agent_under_test(prepared.scenario)
    if unreachable is not None:
        say(console, unreachable, label="error:")
        return BackendRunReport(EXIT_AGENT_UNREACHABLE, error=unreachable)

    report = BackendRunReport(EXIT_HARNESS_ERROR)
    group = ProcessGroup(prepared.log_dir, grace_s=options.run.grace_s)
    started = time.monotonic()
    try:
        async with group:
            with BattleDisplay(console, quiet=options.run.quiet) as display:
                battle, events = await _run_battle(options, target, prepared, group, display, report)
            report.battle = battle
            await _conclude(report, battle, events, prepared, options, console, started)
            if options.keep_backend and report.backend_url is not None:
                for proc in group.processes:  # only the backend stays: the agents' work is done
                    if proc.name != "backend":
                        await group.stop(proc)
                await _keep_serving(console, report.backend_url)
    except (ProcessError, BackendError) as error:
        say(console, str(error), label="error:")
        say(console, f"logs: {options.run.runs_dir / (report.battle_id or prepared.battle_id) / 'logs'}")
        hint = resume_command(prepared.scenario_file, options.backend, options.run.runs_dir, report.battle_id)
        if hint is not None:
            say(console, f"resume with: {hint}")
        report.exit_code = EXIT_HARNESS_ERROR
        report.error = str(error)
    except asyncio.CancelledError:
        await _one_run_dir(prepared, options, report)
        if group.received_signal is not None:
            say(console, f"stopped by {group.received_signal.name}; all agents stopped")
            report.exit_code = 128 + int(group.received_signal)
            report.error = f"received {group.received_signal.name}"
            return report
        raise
    await _one_run_dir(prepared, options, report)
    return report


async def _one_run_dir(prepared: PreparedRun, options: BackendRunOptions, report: BackendRunReport) -> None:
    """After every child stopped: the logs and the database join the battle's run directory (one per battle)."""
    if report.battle_id is not None:
        run_dir = options.run.runs_dir / report.battle_id
        report.backend_db = await asyncio.to_thread(merge_into_run, prepared.run_dir, run_dir) or report.backend_db


async def _open_page(display: BattleDisplay, url: str, *, arena: bool) -> None:
    """``--open``: the battle page in a browser, or one line saying why not (with the URL to open by hand)."""
    if not arena:
        display.line(f"--open: this backend serves no battle page; the battle is at {url}")
        return
    try:
        opened = await asyncio.to_thread(webbrowser.open, url)
    except (webbrowser.Error, OSError):
        opened = False
    if not opened:
        display.line(f"--open: no web browser could be started here; open {url} yourself")


async def _run_battle(
    options: BackendRunOptions,
    target: str,
    prepared: PreparedRun,
    group: ProcessGroup,
    display: BattleDisplay,
    report: BackendRunReport,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Backend up, agents up and registered, battle created and followed to its end."""
    run = options.run
    scenario = prepared.scenario
    config = scenario.pass_k_config
    timeout = httpx.Timeout(options.request_timeout_s)
    backend_port, white_port, green_port, white_launcher_port, green_launcher_port = free_ports(5)
    backend_url = await _connect_backend(options, target, group, prepared, backend_port, display, report)
    report.backend_url = backend_url
    async with (
        httpx.AsyncClient(timeout=timeout, trust_env=not is_loopback_url(backend_url)) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        api = BackendApi(http, backend_url)
        arena = is_arena_backend(await api.health())
        # Behind launchers: the backend resets every agent through its launcher before the battle.
        agent_options = dataclasses.replace(run, with_launchers=True)
        reusing = stack.enter_context(reuse_lock(backend_url)) if target != LOCAL else False
        agents = await registered_agents(api) if reusing else []  # reused when registered alike
        white_name = white_alias(scenario.white_agent)
        if earlier := await asyncio.to_thread(earlier_ports, agents, white_name, [backend_port, green_port]):
            white_port, white_launcher_port = earlier
        taken = [backend_port, white_port, white_launcher_port]
        if earlier := await asyncio.to_thread(earlier_ports, agents, GREEN_ALIAS, taken):
            green_port, green_launcher_port = earlier
        white_launcher = ""
        if scenario.white_agent.kind == "external":
            white_url = str(scenario.white_agent.url)
        else:
            white_argv = white_agent_argv(scenario.white_agent, white_port, python=run.python, module=run.white_module)
            white_url, _ = await start_agent(
                group,
                display,
                "white_agent",
                white_argv,
                white_port,
                white_launcher_port,
                agent_options,
                prepared.log_dir,
            )
            white_launcher = loopback_url(white_launcher_port)
        if prepared.overrides:  # the green agent reads the scenario with its overrides
            await asyncio.to_thread(prepared.write_scenario)
        green_argv = green_agent_argv(
            green_port, run.runs_dir, python=run.python, module=run.green_module, scenario=prepared.scenario_file
        )
        green_argv += run.overrides.green_argv()  # --workers
        green_url, _ = await start_agent(
            group,
            display,
            "green_agent",
            green_argv,
            green_port,
            green_launcher_port,
            agent_options,
            prepared.log_dir,
            env=agent_environment(prepared.operator_token),
        )
        report.pids = [p.pid for p in group.processes]

        display.status("registering the agents")
        white_id = await register_or_reuse(
            api,
            agents,
            {"alias": white_name, "agent_url": white_url, "launcher_url": white_launcher, "is_green": False},
        )
        battle_timeout = options.battle_timeout_s or estimate_battle_timeout(config)
        green_id = await register_or_reuse(
            api,
            agents,
            {
                "alias": GREEN_ALIAS,
                "agent_url": green_url,
                "launcher_url": loopback_url(green_launcher_port),
                "is_green": True,
                "participant_requirements": [{"role": "blue_agent", "name": WHITE_PARTICIPANT, "required": True}],
                "battle_timeout": math.ceil(battle_timeout),
            },
        )
        report.agent_ids = {"white_agent": white_id, "green_agent": green_id}
        battle_id = await api.create_battle(
            {
                "green_agent_id": green_id,
                "opponents": [{"name": WHITE_PARTICIPANT, "agent_id": white_id}],
                "config": {"pass_k_config": remote_config_dict(config)},
            }
        )
        report.battle_id = battle_id
        if run.battle_id is not None and run.battle_id != battle_id:  # the logs and database move there at the end
            display.line(f"the backend names the battle {battle_id}: its run directory is {run.runs_dir / battle_id}")
        # The green agent's run directory is named after the backend's battle id: what --resume --backend needs.
        record = BackendRunRecord(
            backend=target,
            backend_url=backend_url,
            database=str(report.backend_db) if report.backend_db is not None else None,
            battle_timeout_s=battle_timeout,
            white_alias=white_name,
        )
        with contextlib.suppress(ConfigError):  # an id that is no directory name: the green agent refuses it too
            await asyncio.to_thread(
                record_battle, run_dir_for(run.runs_dir, battle_id), scenario, record, prepared.overrides
            )
        report.battle_url = battle_page_url(backend_url, battle_id, arena=arena)
        display.line(f"battle page: {report.battle_url}" if arena else f"battle {battle_id}: {report.battle_url}")
        if options.open_browser:
            await _open_page(display, report.battle_url, arena=arena)
        display.status(f"battle {battle_id}")
        # The backend's own timeout ends the battle; ours only guards against a backend that never does.
        deadline_s = battle_timeout + 300.0
        outage_limit_s = options.outage_limit_s or battle_timeout + DEFAULT_RETENTION_S
        watch = GreenWatch(http, loopback_url(green_launcher_port))
        return await _follow(api, battle_id, display, group, options, deadline_s, outage_limit_s, watch=watch)


async def _conclude(
    report: BackendRunReport,
    battle: dict[str, Any],
    events: list[dict[str, Any]],
    prepared: PreparedRun,
    options: BackendRunOptions,
    console: Console,
    started: float,
) -> None:
    """Exit code, verdict and summary path from the finished battle."""
    exit_code, error = judge_battle(battle)
    event = result_event(battle) or {}
    result = battle.get("result") or {}
    detail = result.get("detail") if isinstance(result.get("detail"), dict) else None
    report.outcome = AssessmentOutcome(
        state="completed" if exit_code == EXIT_OK else "failed",
        markdown=event.get("markdown_content") if isinstance(event.get("markdown_content"), str) else None,
        result=detail,
        error=error,
        battle_started=any(e.get("type") == "battle_started" for e in events),
        events=events,
    )
    if exit_code != EXIT_OK:
        label = (
            "the green agent refused the battle:" if exit_code == EXIT_CONFIG_ERROR else "the battle did not complete:"
        )
        say(console, str(error), label=label)
        say(console, f"battle: {report.battle_url}")
        say(console, f"logs: {prepared.log_dir}")
        report.exit_code, report.error = exit_code, error
        return
    summary_path = options.run.runs_dir / str(report.battle_id) / "summary.json"
    if not summary_path.is_file():
        say(console, f"the battle completed but {summary_path} was not written", label="error:")
        report.exit_code, report.error = EXIT_HARNESS_ERROR, f"{summary_path} missing"
        return
    extra = [f"winner (as the backend records it): {result.get('winner')}"]
    if (db := report.backend_db) is not None and not options.keep_backend:
        db = summary_path.parent / DATABASE_FILE if db.name == DATABASE_FILE else db  # where it ends up
        extra.append(f"the run's backend stops now; to browse this battle again: arena backend --db {db}")
    # The verdict, the gates and the exit code (0, 1 or 5) are direct mode's, read from the same summary.json.
    elapsed = time.monotonic() - started
    await conclude_run(
        console, report, summary_path, prepared.gates, options.run, elapsed, extra, battle_url=report.battle_url
    )
