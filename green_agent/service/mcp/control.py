"""The green agent's control surface over MCP: list tasks, start and follow battles, read results, compute metrics.

Why MCP tools on top of A2A: IDE assistants, chat apps and LLM-driven orchestrators speak MCP natively; with these
tools they can run and inspect evaluations without knowing the A2A assessment message format. Every battle goes
through the application's :class:`BattleRegistry`, so a battle started here behaves exactly like one started over
A2A or by AgentBeats (same run directory, same events, same result).

Bad input never crashes or hangs a call: unknown battle ids, invalid configs (the message names the field), a
white agent that does not answer its agent card and unknown arguments all come back as MCP tool errors
(``is_error`` with the reason). CPU-bound work (tau2 task loading, bootstrap intervals) runs in threads.

Who may call these tools: only the green agent's operator (the app's :class:`~green_agent.service.operator_auth.
OperatorAuthMiddleware` answers 401 on /mcp/ without the operator token). Even so, what comes in is treated as
remote input: configs go through :meth:`BattleRegistry.remote_config` (the user simulator's endpoint, key variable
and model stay the operator's), battle ids through :func:`~green_agent.engine.battle_ids.validate_battle_id`, ids the
server
makes are unguessable (:func:`~green_agent.engine.battle_ids.new_battle_id`), and an error about one battle never names
another (a leaked id is a handle on someone else's run).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Annotated, Any

import httpx
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, StrictBool, ValidationError

from green_agent.engine.battle_ids import BattleIdError, new_battle_id, run_dir_for, validate_battle_id
from green_agent.engine.certify import per_attempt_refusal
from green_agent.engine.config import KNOWN_DOMAINS, BattleConfig, ConfigError, format_validation_error
from green_agent.engine.events import AttemptFinished, BattleEvent, BattleStarted
from green_agent.engine.fingerprint import incomparabilities
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.gold_gaps import gold_gap
from green_agent.engine.tau.tasks import list_domains, load_tasks, select_tasks
from green_agent.run_files import RunFileRefused, read_run_file
from green_agent.service.mcp.models import (
    AttemptRow,
    BattleResults,
    BattleStatus,
    CancelledBattle,
    DomainList,
    DomainView,
    EventView,
    StartedBattle,
    TaskList,
    TaskView,
)
from green_agent.service.mcp.security import keep_root_logging
from green_agent.service.running_battles import BattleRecord, BattleRegistry
from green_agent.statistics import TrialsComparison, TrialsSummary, compare_trials, summarize_trials

INSTRUCTIONS = """\
Arena green agent: tau-bench reliability assessments (pass^k / pass@k with confidence intervals, failure breakdown).
1. list_domains / list_tasks to pick tasks (a task is named by its 0-based index in a split).
2. start_battle(white_agent_url, config) runs k fresh attempts per task against an A2A white agent; with wait=true it
   reports progress and returns the results, otherwise poll get_battle and read get_results when it has finished.
3. cancel_battle stops a running battle; it ends "cancelled" with a partial summary of the attempts that finished.
4. score_attempts / compare_runs compute the metrics for your own trial lists or for finished battles."""

RECENT_EVENTS_MAX = 200
MAX_SUMMARY_BYTES = 64 * 1024 * 1024  # compare_runs reads no larger summary.json from disk
SUMMARY_FILE = "summary.json"

Trials = dict[str, list[StrictBool | None]]
"""task id -> ordered outcomes: true (success), false (failure), null (infrastructure error, not counted)."""

RegistryGetter = Callable[[], BattleRegistry]


def _snippet(text: str | None, limit: int = 240) -> str | None:
    if not text:
        return None
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _task_view(domain: str, index: int, task: Any) -> TaskView:
    instructions = getattr(getattr(task, "user_scenario", None), "instructions", None)
    reason = getattr(instructions, "reason_for_call", None) if instructions is not None else None
    if reason is None and isinstance(instructions, str):
        reason = instructions
    description = getattr(task, "description", None)
    purpose = getattr(description, "purpose", None) if description is not None else None
    return TaskView(
        index=index,
        task_id=str(task.id),
        reason_for_call=_snippet(reason),
        purpose=_snippet(purpose),
        gold_gap=gold_gap(domain, str(task.id)),
    )


def _checked_id(battle_id: object, name: str = "battle_id") -> str:
    """``battle_id`` if it is a valid id, else a ToolError saying why (the rejected value is not echoed back)."""
    try:
        return validate_battle_id(battle_id)
    except BattleIdError as error:
        message = str(error)
        if name != "battle_id":
            message = f"{name}: {message.removeprefix('battle_id: ')}"
        raise ToolError(message) from None


def _record(registry: BattleRegistry, battle_id: str, name: str = "battle_id") -> BattleRecord:
    """The battle named ``battle_id``, or a ToolError that names only that id.

    Why no list of known ids: every battle id on this green agent would otherwise be one failed lookup away, and an
    id is all it takes to read another run's results or cancel it.
    """
    record = registry.get(_checked_id(battle_id, name))
    if record is None:
        raise ToolError(f"{name}: no battle {battle_id!r} on this green agent")
    return record


def battle_status(record: BattleRecord, events: int = 10) -> BattleStatus:
    """A battle's state, progress and its last ``events`` events."""
    battle = record.battle
    recent = battle.events[-events:] if events > 0 else []
    return BattleStatus(
        battle_id=record.battle_id,
        state=record.state,
        white_agent_url=battle.white_agent_url,
        attempts_done=battle.attempts_done,
        attempts_total=battle.attempts_total,
        tool_mode=battle.config.tool_mode,
        calibration=battle.config.calibration,
        error=record.error,
        recent_events=[EventView(type=e.type, text=e.text, timestamp=e.timestamp, data=e.data) for e in recent],
    )


def battle_results(record: BattleRecord) -> BattleResults:
    """The summary of a finished battle (ToolError when it has not finished)."""
    result = record.result
    if result is None:
        battle = record.battle
        if record.running:
            raise ToolError(
                f"battle {record.battle_id} is still running ({battle.attempts_done}/"
                f"{battle.attempts_total} attempts done): poll get_battle, or start_battle with wait"
            )
        raise ToolError(
            f"battle {record.battle_id} has no results: it ended in state {record.state}"
            + (f" ({record.error})" if record.error else "")
        )
    return BattleResults(
        battle_id=result.battle_id,
        state=record.state,
        status=result.status,
        white_agent_url=result.white_agent_url,
        calibration=result.calibration,
        duration_s=result.duration_s,
        k=result.config.k,
        macro=list(result.summary.macro),
        micro=result.summary.micro,
        failure_breakdown=result.failure_breakdown,
        infrastructure_errors=result.infrastructure_errors,
        budget_stop=result.budget_stop,
        attempts=[
            AttemptRow(
                task_key=a.task_key,
                task_id=a.task_id,
                attempt=a.attempt,
                outcome=a.outcome,
                reward=a.reward,
                steps=a.steps,
                duration_s=a.duration_s,
                failure_category=a.failure.category.value if a.failure else None,
                failure_detail=a.failure.detail if a.failure and a.failure.detail else None,
            )
            for a in result.attempts
        ],
        markdown=record.battle.markdown or "",
        certification=result.certification,
    )


def _progress_of(event: BattleEvent) -> tuple[float, float, str] | None:
    """(done, total, message) for the events that move a battle forward (progress must only increase)."""
    typed = event.typed()
    if isinstance(typed, BattleStarted) and typed.attempts_total:
        return 0.0, float(typed.attempts_total), event.text.splitlines()[0]
    if isinstance(typed, AttemptFinished) and typed.total:
        return float(typed.done or 0), float(typed.total), event.text.splitlines()[0]
    return None


async def probe_white_agent(url: str, timeout_s: float) -> None:
    """ToolError unless ``url`` serves an A2A agent card (so a battle never starts against nothing)."""
    if not re.match(r"^https?://[^/\s]+", url):
        raise ToolError(f"white_agent_url: expected an http(s) URL of an A2A agent, got {url!r}")
    card_url = url.rstrip("/") + "/.well-known/agent-card.json"
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s)) as http:
            response = await http.get(card_url)
    except httpx.HTTPError as error:
        raise ToolError(
            f"white_agent_url: {url} does not answer ({type(error).__name__} within {timeout_s:g} s); "
            "is the agent running and reachable from the green agent?"
        ) from None
    if response.status_code != 200:
        raise ToolError(
            f"white_agent_url: {url} answered HTTP {response.status_code} for its agent card "
            "(/.well-known/agent-card.json); is it an A2A agent?"
        )


def _run_id_of_path(runs_dir: Path, value: str, name: str) -> str:
    """The id in ``<runs dir>/<id>[/summary.json]`` (runs dir absolute, relative to the cwd, or left out), else
    refused. Lexical: the caller's path is never opened, only ``run_dir_for(runs_dir, id)``: nothing outside is."""
    path = PurePath(value).parent if PurePath(value).name == SUMMARY_FILE else PurePath(value)
    prefix = os.path.abspath(path.parent) if str(path.parent) != "." else "."
    if prefix not in {".", os.path.abspath(runs_dir), str(runs_dir.resolve())}:
        raise ToolError(f"{name}: only battle ids and run directories in this green agent's runs directory are read")
    return _checked_id(path.name, name)


def _read_summary(runs_dir: Path, battle_id: str, name: str) -> BattleResult:
    """``<runs dir>/<id>/summary.json`` (blocking: in a thread), a regular file (no symlink) of bounded size."""
    where = f"{name}: the {SUMMARY_FILE} of battle {battle_id}"
    try:
        run_dir = run_dir_for(runs_dir, battle_id)
        data = read_run_file(run_dir, SUMMARY_FILE, max_bytes=MAX_SUMMARY_BYTES)  # green_agent.run_files
    except BattleIdError as error:
        raise ToolError(f"{name}: {error}") from None
    except FileNotFoundError:
        if run_dir.is_dir():
            raise ToolError(f"{name}: battle {battle_id} has no {SUMMARY_FILE} (it never finished)") from None
        raise ToolError(f"{name}: no battle {battle_id!r} on this green agent") from None
    except RunFileRefused as error:
        if error.reason == "outside":
            raise ToolError(f"{where} cannot be read (it leads outside its run directory)") from None
        limit = MAX_SUMMARY_BYTES >> 20
        raise ToolError(f"{where} is not a regular file of at most {limit} MB (see `arena compare`)") from None
    except OSError as error:
        raise ToolError(f"{where} cannot be read ({error.strerror})") from None
    try:
        return BattleResult.model_validate_json(data)
    except ValidationError as error:
        raise ToolError(f"{where} is not a battle result ({format_validation_error(error)})") from None


async def _trials_of(
    registry: BattleRegistry, value: str | Mapping[str, Sequence[bool | None]], name: str
) -> Mapping[str, Sequence[bool | None]]:
    """Trials given directly, or those of a finished battle (task key -> outcomes by attempt) named by its id (in
    memory, else its summary.json on disk) or by its run directory inside the runs directory."""
    if not isinstance(value, str):
        return value
    return _trials_from(await _finished_result(registry, value, name), name)


def _trials_from(result: BattleResult, name: str) -> dict[str, list[bool | None]]:
    if refusal := per_attempt_refusal(result, name):  # a pass^k certify battle: its attempts cannot be paired
        raise ToolError(refusal)
    trials: dict[str, list[bool | None]] = {}
    for attempt in sorted(result.attempts, key=lambda a: (a.task_key, a.attempt)):
        trials.setdefault(attempt.task_key, []).append(attempt.trial_outcome)
    return trials


async def _finished_result(registry: BattleRegistry, value: str, name: str) -> BattleResult:
    """The result of a finished battle named by its id or run directory (see :func:`_trials_of`)."""
    is_path = "/" in value or os.sep in value
    battle_id = _run_id_of_path(registry.runs_dir, value, name) if is_path else _checked_id(value, name)
    record = registry.get(battle_id)
    if record is not None:
        if record.result is None or record.state != "finished":
            # A cancelled battle's partial result is left out: the attempts that never finished are the slow ones,
            # so comparing what is left would flatter that run.
            raise ToolError(f"{name}: battle {battle_id} has not finished (state {record.state})")
        result = record.result
    else:
        result = await asyncio.to_thread(_read_summary, registry.runs_dir, battle_id, name)
        if result.status != "completed":  # as above (`arena compare` compares partial runs, with a warning)
            raise ToolError(f"{name}: battle {battle_id} ended with status {result.status}, not completed")
    return result


async def _metrics(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a metrics function in a thread; its ValueErrors (naming the argument) become tool errors."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except (ValueError, TypeError) as error:
        raise ToolError(str(error)) from None


def _reject_unknown_arguments(server: MCPServer) -> ServerMiddleware[Any]:
    """Middleware: a tools/call naming an argument the tool does not take is an error, not silently ignored."""
    accepted: dict[str, frozenset[str]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and isinstance(ctx.params, Mapping):
            name, arguments = ctx.params.get("name"), ctx.params.get("arguments")
            if not accepted:
                for tool in await server.list_tools():
                    accepted[tool.name] = frozenset(tool.input_schema.get("properties", {}))
            if isinstance(name, str) and name in accepted and isinstance(arguments, Mapping):
                unknown = sorted(set(arguments) - accepted[name])
                if unknown:
                    allowed = ", ".join(sorted(accepted[name])) or "none"
                    text = f"unknown argument(s) for {name}: {', '.join(unknown)} (accepted: {allowed})"
                    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        return await call_next(ctx)

    return middleware


def build_control_server(
    registry: RegistryGetter,
    *,
    mcp_tool_mode_available: Callable[[], bool],
    probe_timeout_s: float = 5.0,
) -> MCPServer:
    """The control MCP server. ``registry()`` returns the application's registry (available once it started)."""
    with keep_root_logging():
        server: MCPServer = MCPServer(
            "arena-green-agent", version="0.1.0", instructions=INSTRUCTIONS, log_level="WARNING"
        )
    server.middleware.append(_reject_unknown_arguments(server))

    @server.tool(name="list_domains")
    async def list_domains_tool() -> DomainList:
        """The tau2 domains battles can use, with each split's number of tasks."""
        domains = await asyncio.to_thread(list_domains)
        return DomainList(domains=[DomainView(name=d.name, splits=d.splits) for d in domains])

    @server.tool()
    async def list_tasks(
        domain: str,
        split: str | None = "test",
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> TaskList:
        """Tasks of a domain's split (null split: the whole task file), paged. A task's ``index`` is what a
        battle config's ``task_index`` names. ``gold_gap`` marks a task whose own gold solution cannot pass tau2's
        evaluator (tau2's data) and says why: a calibration battle fails on it by design."""
        if domain not in KNOWN_DOMAINS:
            raise ToolError(f"domain: unknown domain {domain!r}; known domains: {', '.join(KNOWN_DOMAINS)}")
        try:
            tasks = await asyncio.to_thread(load_tasks, domain, split)
        except ConfigError as error:
            raise ToolError(str(error)) from None
        page = tasks[offset : offset + limit]
        return TaskList(
            domain=domain,
            split=split or None,
            total=len(tasks),
            offset=offset,
            tasks=[_task_view(domain, offset + i, task) for i, task in enumerate(page)],
        )

    @server.tool()
    async def start_battle(
        white_agent_url: str,
        ctx: Context,
        config: dict[str, Any] | None = None,
        battle_id: str | None = None,
        wait: bool = False,
    ) -> StartedBattle:
        """Start a battle: k fresh-context attempts per task against the A2A white agent at ``white_agent_url``.

        ``config``: the [pass_k_config] fields, e.g. {"mode": "manual", "domain": "retail", "task_index": [0, 1],
        "k": 4, "calibration": false, "tool_mode": "text"}; omitted fields take this green agent's defaults, and the
        user simulator's base_url, api_key_env and model are the operator's (refused here). ``battle_id``: optional
        (letters, digits, . _ -, at most 128 characters; by default a random id). With ``wait`` the call reports
        progress (attempts done / total) and returns the results when the battle ends; otherwise it returns at
        once."""
        battles = registry()
        # A random id by default: ids are handles on a battle (results, cancel), so they must not be guessable.
        battle_id = new_battle_id() if battle_id is None else _checked_id(battle_id)
        existing = battles.get(battle_id)
        if existing is not None:
            raise ToolError(f"battle_id: battle {battle_id} already exists ({existing.state})")
        cfg = await _validated_config(battles, config)
        if cfg.tool_mode == "mcp" and not mcp_tool_mode_available():
            raise ToolError(
                "config.tool_mode: 'mcp' needs the green agent's MCP component to know its public URL "
                "(McpComponent(public_url=...))"
            )
        await probe_white_agent(white_agent_url, probe_timeout_s)

        queue: asyncio.Queue[BattleEvent | None] = asyncio.Queue()
        listening = wait

        async def follow(event: BattleEvent) -> None:
            if listening:
                queue.put_nowait(event)

        try:
            record = battles.start(battle_id, white_agent_url, cfg, sinks=[follow] if wait else [])
        except ConfigError as error:
            raise ToolError(str(error)) from None
        if not wait:
            return StartedBattle(battle_id=battle_id, state=record.state, attempts_total=0)
        assert record.task is not None
        record.task.add_done_callback(lambda _task: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                progress = _progress_of(event)
                if progress is not None:
                    await ctx.report_progress(*progress)
        finally:
            listening = False  # a caller that went away stops collecting events; the battle goes on
        results = battle_results(record) if record.result is not None else None
        return StartedBattle(
            battle_id=battle_id,
            state=record.state,
            attempts_total=record.battle.attempts_total,
            results=results,
            error=record.error,
        )

    @server.tool()
    async def get_battle(
        battle_id: str, events: Annotated[int, Field(ge=0, le=RECENT_EVENTS_MAX)] = 10
    ) -> BattleStatus:
        """A battle's state (running, finished, error, cancelled), attempts done / total and its latest events."""
        return battle_status(_record(registry(), battle_id), events)

    @server.tool()
    async def get_results(battle_id: str) -> BattleResults:
        """A finished battle's summary: macro pass^j / pass@j with 95% intervals per j, micro success rate,
        failure breakdown, every attempt's outcome, and the markdown report. For a cancelled battle (``status``
        "cancelled") the summary covers the attempts that finished before the cancel."""
        return battle_results(_record(registry(), battle_id))

    @server.tool()
    async def cancel_battle(battle_id: str) -> CancelledBattle:
        """Cancel a running battle: attempts in flight stop, and the battle ends "cancelled" with a partial result
        (get_results) covering the attempts that finished. A battle that already ended is left as it is."""
        battles = registry()
        record = _record(battles, battle_id)
        was_running = record.running
        if was_running:
            # The registry's path, shared with A2A tasks/cancel: same partial result, same backend report.
            await battles.cancel(battle_id)
        return _cancel_answer(record, was_running)

    @server.tool()
    async def score_attempts(
        trials: Trials,
        k_max: Annotated[int, Field(ge=1)] | None = None,
        seed: Annotated[int, Field(ge=0)] = 0,
        n_bootstrap: Annotated[int, Field(ge=0, le=100_000)] = 1000,
    ) -> TrialsSummary:
        """pass^j / pass@j per task and macro over tasks (with bootstrap intervals) and the micro success rate,
        for ``trials``: task id -> ordered outcomes (true, false, or null for an infrastructure error)."""
        summary: TrialsSummary = await _metrics(
            summarize_trials, trials, k_max=k_max, seed=seed, n_bootstrap=n_bootstrap
        )
        return summary

    @server.tool()
    async def compare_runs(
        a: str | Trials,
        b: str | Trials,
        k_max: Annotated[int, Field(ge=1)] | None = None,
        seed: Annotated[int, Field(ge=0)] = 0,
        n_bootstrap: Annotated[int, Field(ge=0, le=100_000)] = 1000,
        allow_incomparable: bool = False,
    ) -> TrialsComparison:
        """Paired comparison A minus B over the tasks both ran: pass^j / pass@j differences with intervals and a
        sign test. ``a`` and ``b`` are each trials (task id -> ordered outcomes), or a completed battle: its id (one
        of this green agent's, running since its start or on disk in its runs directory) or its run directory
        (``<runs dir>/<id>``, nothing outside the runs directory is read). Two battles whose fingerprints differ
        on the shared tasks (tau2 build, task, database or policy files, user simulator) are refused, naming what
        differs, unless ``allow_incomparable``."""
        battles = registry()
        if not (isinstance(a, str) and isinstance(b, str)):
            trials_a, trials_b = await _trials_of(battles, a, "a"), await _trials_of(battles, b, "b")
        else:
            result_a, result_b = await _finished_result(battles, a, "a"), await _finished_result(battles, b, "b")
            trials_a, trials_b = _trials_from(result_a, "a"), _trials_from(result_b, "b")
            differences = incomparabilities(
                result_a.fingerprint, result_b.fingerprint, trials_a.keys() & trials_b.keys()
            )
            if differences and not allow_incomparable:
                raise ToolError(
                    "the battles are not comparable (their fingerprints differ on the shared tasks): "
                    + "; ".join(differences)
                    + " (allow_incomparable=true compares them anyway)"
                )
        comparison: TrialsComparison = await _metrics(
            compare_trials, trials_a, trials_b, k_max=k_max, seed=seed, n_bootstrap=n_bootstrap
        )
        return comparison

    return server


def _cancel_answer(record: BattleRecord, was_running: bool) -> CancelledBattle:
    """What cancel_battle says: the state the battle ended in and how many attempts finished (what the partial
    summary covers), so a caller knows at once whether get_results is worth reading."""
    battle = record.battle
    finished = len(record.result.attempts) if record.result is not None else battle.attempts_done
    total = battle.attempts_total
    if was_running and record.state == "cancelled":
        message = f"battle {record.battle_id} ended cancelled: {finished} of {total} attempts finished"
        if record.result is not None:
            message += "; get_results has the partial summary"
    elif was_running:
        message = f"battle {record.battle_id} ended {record.state} before the cancel took effect"
    else:
        message = f"battle {record.battle_id} had already ended ({record.state}); nothing was cancelled"
    return CancelledBattle(
        battle_id=record.battle_id,
        state=record.state,
        was_running=was_running,
        attempts_finished=finished,
        attempts_total=total,
        message=message,
    )


async def _validated_config(registry: BattleRegistry, config: dict[str, Any] | None) -> BattleConfig:
    """The battle config as a remote one (on top of the operator's default, operator-only fields refused),
    validated down to the task selection (ToolError naming the field otherwise)."""
    try:
        cfg = registry.remote_config(config or {})
        await asyncio.to_thread(select_tasks, cfg)
    except ConfigError as error:
        raise ToolError(f"invalid config: {error}") from None
    return cfg
