"""Importing finished (or interrupted) battles from a file, so a run directory can be viewed offline with the same
pages as a live battle: ``python -m battle_backend --import FILE.json`` (repeatable), before serving.

The file (``arena.battle-import/1``, written by ``arena view RUN_DIR``) holds the battle's participants, the progress
events exactly as the green agent posts them and its result (null for an interrupted run). It is validated first
(pydantic; an error names the field, e.g. ``events[3].timestamp``) and checked like posted events (JSON bounds, event
sizes, an Arena result against the published schema), then loaded through the store's ordinary methods: agents,
battle (under the run's battle id, so links stay valid), start, events, finish with the result (or, without one,
the error state: the run was interrupted). The battle therefore ends terminal before the scheduler starts and is
never scheduled; its agents carry no launcher and are never contacted. A battle id already in the store is skipped,
so importing the same file twice is harmless.

A file may instead hold a ``runs_home`` section and no battle (``arena view runs/`` writes one beside the battles of
the folder): the runs home page's rows and the comparisons of ``arena compare`` the launcher computed
(:mod:`battle_backend.battles.runs_home`). It is checked like the rest and handed to the app (``ImportReport``).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator

from battle_backend.battles.api_models import ApiError
from battle_backend.battles.arena_results import arena_schema_problem, json_path
from battle_backend.battles.facts import result_says_calibration
from battle_backend.battles.json_limits import JsonLimits, check_json_value, parse_json
from battle_backend.battles.runs_home import RunsHome
from battle_backend.settings import BackendSettings
from battle_backend.store.protocol import BattleStore, StartOutcome
from battle_backend.store.records import FinishSpec, utc_now_iso
from battle_backend.store.timestamps import result_finish_time

logger = logging.getLogger(__name__)

IMPORT_SCHEMA = "arena.battle-import/1"
MAX_EVENTS = 100_000
MAX_OPPONENTS = 16
MAX_FILE_BYTES = 512 * 1024 * 1024
"""A whole battle with its trajectories is some megabytes; this only stops a wrong file (e.g. a disk image)."""
INTERRUPTED_REASON = "Imported from an interrupted run: the green agent recorded no result"
NameText = Annotated[StrictStr, Field(min_length=1, max_length=256)]
UrlText = Annotated[StrictStr, Field(max_length=2048)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImportedAgent(_Strict):
    """The green agent of the battle (it is registered under this alias, with no launcher)."""

    alias: NameText
    agent_url: UrlText | None = None


class ImportedOpponent(_Strict):
    """An opponent: its battle name (what the result's ``winner`` may say), alias and URL."""

    name: NameText
    alias: NameText
    agent_url: UrlText | None = None
    role: NameText = "blue_agent"


class ImportedBattle(_Strict):
    """Who took part, and the battle's config."""

    battle_id: Annotated[StrictStr, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
    green_agent: ImportedAgent
    opponents: list[ImportedOpponent] = Field(min_length=1, max_length=MAX_OPPONENTS)
    config: dict[str, Any] = Field(default_factory=dict)


class ImportedEvent(BaseModel):
    """A progress event as the green agent posted it (unknown keys are kept, as the API keeps them)."""

    model_config = ConfigDict(extra="allow")

    is_result: Literal[False] = False
    message: StrictStr | None = None
    reported_by: Annotated[StrictStr, Field(max_length=256)] | None = None
    timestamp: Annotated[StrictStr, Field(max_length=64)] | StrictInt | StrictFloat | None = None
    detail: Any = None
    markdown_content: StrictStr | None = None


class ImportedResult(ImportedEvent):
    """The result event as the green agent posted it."""

    is_result: Literal[True] = True  # type: ignore[assignment]
    winner: NameText


class ImportFile(_Strict):
    """``arena.battle-import/1``."""

    schema_id: Literal["arena.battle-import/1"] = Field(alias="schema")
    battle: ImportedBattle | None = None
    """None only in a runs-home file (``runs_home`` given, no events, no result)."""
    events: list[ImportedEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    result: ImportedResult | None = None
    runs_home: RunsHome | None = None

    @model_validator(mode="after")
    def _battle_or_home(self) -> ImportFile:
        if self.battle is None and (self.runs_home is None or self.events or self.result is not None):
            raise ValueError("battle is required (only a runs_home file, without events or result, has none)")
        return self


class ImportFileError(Exception):
    """A file that cannot be imported; the message names the file and the field."""


@dataclass(frozen=True)
class ImportReport:
    """What an import did."""

    battle_id: str
    events: int
    state: str
    """finished | error | skipped (already in the store) | home (a runs_home section, in :attr:`runs_home`)"""
    runs_home: RunsHome | None = None


def _loc_text(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(file)"


def _validation_message(path: Path, exc: ValidationError) -> str:
    problems = [
        f"{_loc_text(tuple(error['loc']))}: {error['msg']}"
        for error in exc.errors(include_url=False, include_input=False)[:20]
    ]
    return f"{path}: not an {IMPORT_SCHEMA} file: " + "; ".join(problems)


def _api_error_text(exc: ApiError) -> str:
    """The bounds error of body_limits as one line, its location relative to the file."""
    if not isinstance(exc.detail, list):
        return str(exc.detail)
    parts = []
    for item in exc.detail:
        loc = [part for part in item.get("loc", []) if part != "body"]
        parts.append(f"{_loc_text(tuple(loc))}: {item.get('msg')}")
    return "; ".join(parts)


def _checked_size(path: Path, body: dict[str, Any], limits: JsonLimits, where: str, cap: int, setting: str) -> None:
    try:
        size = check_json_value(body, limits, loc=(where,))
    except ApiError as exc:
        raise ImportFileError(f"{path}: {_api_error_text(exc)}") from exc
    if size > cap:
        raise ImportFileError(f"{path}: {where}: {size} bytes, over {setting} ({cap})")


def _posted_body(event: ImportedEvent) -> dict[str, Any]:
    """The stored payload: the event as posted, without what the poster's transport added."""
    body = event.model_dump(mode="json", by_alias=True, exclude_unset=True)
    body["is_result"] = event.is_result
    for key in ("battle_token", "event_id"):
        body.pop(key, None)
    if body.get("timestamp") in (None, ""):  # as the API does (a numeric 0 is a timestamp, kept)
        body["timestamp"] = utc_now_iso()
    return body


def load_import_file(
    path: Path, settings: BackendSettings
) -> tuple[ImportFile, list[dict[str, Any]], dict[str, Any] | None]:
    """Read and check one file: the parsed file, the event payloads and the result payload (or None).

    Raises ImportFileError naming the file and the field for anything the API would refuse too."""
    try:
        raw = path.read_bytes() if path.stat().st_size <= MAX_FILE_BYTES else None
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    if raw is None:
        raise ImportFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a battle import file")
    limits = JsonLimits.from_settings(settings)
    try:
        data = parse_json(raw, limits, loc=())
    except ApiError as exc:
        raise ImportFileError(f"{path}: not JSON within the backend's bounds: {_api_error_text(exc)}") from exc
    if not isinstance(data, dict):
        raise ImportFileError(f"{path}: the file must hold a JSON object")
    try:
        parsed = ImportFile.model_validate(data)
    except ValidationError as exc:
        raise ImportFileError(_validation_message(path, exc)) from exc
    events = [_posted_body(event) for event in parsed.events]
    for index, body in enumerate(events):
        _checked_size(path, body, limits, f"events[{index}]", settings.max_event_bytes, "max_event_bytes")
    result = _posted_body(parsed.result) if parsed.result is not None else None
    if result is not None:
        _checked_size(path, result, limits, "result", settings.max_result_bytes, "max_result_bytes")
        problem = arena_schema_problem(result.get("detail"))
        if problem is not None:
            where = json_path(("result", *problem.loc))
            raise ImportFileError(f"{path}: {where}: {problem.message} (the Arena result does not match its schema)")
    return parsed, events, result


async def import_battle(
    store: BattleStore, parsed: ImportFile, events: list[dict[str, Any]], result: dict[str, Any] | None
) -> ImportReport:
    """Load one checked file into an open store (see the module's docstring)."""
    battle = parsed.battle
    if battle is None:
        return ImportReport(battle_id="", events=0, state="home", runs_home=parsed.runs_home)
    if await store.get_battle(battle.battle_id, include_events=False) is not None:
        logger.warning("battle %s is already in the store: not imported again", battle.battle_id)
        return ImportReport(battle_id=battle.battle_id, events=0, state="skipped")
    requirements = [{"name": op.name, "role": op.role, "required": True} for op in battle.opponents]
    green = await store.create_agent(
        {
            "alias": battle.green_agent.alias,
            "agent_url": battle.green_agent.agent_url or "",
            "launcher_url": "",
            "is_green": True,
            "participant_requirements": requirements,
            "imported": True,
        },
        {"name": battle.green_agent.alias, "url": battle.green_agent.agent_url or ""},
    )
    opponents: list[dict[str, Any]] = []
    for opponent in battle.opponents:
        agent = await store.create_agent(
            {
                "alias": opponent.alias,
                "agent_url": opponent.agent_url or "",
                "launcher_url": "",
                "is_green": False,
                "imported": True,
            },
            {"name": opponent.alias, "url": opponent.agent_url or ""},
        )
        opponents.append({"name": opponent.name, "agent_id": agent.agent_id, "role": opponent.role})
    # owned: on a database that live replicas share, none of their schedulers may start (or take over) the battle
    # this import writes itself
    await store.create_battle(
        green.agent_id, opponents, dict(battle.config), None, battle_id=battle.battle_id, owned=True
    )
    try:
        outcome = await store.start_battle(battle.battle_id, secrets.token_urlsafe(24))
        if outcome is not StartOutcome.STARTED:
            raise ImportFileError(f"battle {battle.battle_id}: could not be started in the store ({outcome.value})")
        for body in events:
            await store.append_event(battle.battle_id, body, trusted=True)
        if result is None:
            await store.fail_battle(battle.battle_id, INTERRUPTED_REASON)
            return ImportReport(battle_id=battle.battle_id, events=len(events), state="error")
        finish = FinishSpec(
            winner=str(result["winner"]),
            detail=result.get("detail") if result.get("detail") is not None else {},
            finish_time=result_finish_time(result.get("timestamp")),
            rated=not result_says_calibration(result.get("detail")),
        )
        await store.append_event(battle.battle_id, result, finish=finish, trusted=True)
        return ImportReport(battle_id=battle.battle_id, events=len(events) + 1, state="finished")
    except Exception as error:
        # Never leave a queued or running battle behind (the scheduler would try to run it with agents that have no
        # launcher); the failed import stays visible as an error with its reason.
        await store.fail_battle(battle.battle_id, f"import failed: {type(error).__name__}: {error}"[:1000])
        raise


async def import_files(store: BattleStore, paths: list[Path], settings: BackendSettings) -> list[ImportReport]:
    """Check every file first (nothing is written when one is bad), then import them in order.

    With a runs-home file among them (``arena view runs/``), a battle file that fails its check is left out instead
    and its run moves to the home's ``skipped`` list with the reason: one bad run does not hide the others."""
    checked: list[tuple[ImportFile, list[dict[str, Any]], dict[str, Any] | None]] = []
    refused: dict[str, str] = {}
    first_error: ImportFileError | None = None
    for path in paths:
        try:
            checked.append(load_import_file(path, settings))
        except ImportFileError as error:
            refused[path.name] = str(error)
            first_error = first_error or error
    homes = [parsed for parsed, _, _ in checked if parsed.runs_home is not None]
    if first_error is not None and not homes:
        raise first_error
    if refused:
        for parsed in homes:
            assert parsed.runs_home is not None
            parsed.runs_home = parsed.runs_home.without_refused(refused)
            logger.warning("runs home: %d battle file(s) refused: %s", len(refused), "; ".join(refused.values()))
    reports = []
    for parsed, events, result in checked:
        report = await import_battle(store, parsed, events, result)
        logger.info("imported battle %s (%d events, %s)", report.battle_id, report.events, report.state)
        reports.append(report)
    return reports


def describe(report: ImportReport) -> str:
    """One line for the console."""
    if report.state == "skipped":
        return f"battle {report.battle_id}: already in the store, not imported again"
    if report.runs_home is not None:
        home = report.runs_home
        return f"runs home: {len(home.runs)} runs, {len(home.comparisons)} comparisons"
    return f"battle {report.battle_id}: imported ({report.events} events, {report.state})"
