"""``arena run [SCENARIO] --k 8 --tasks 0-9,12 ...``: command-line overrides of a scenario's common fields, and the
scenario-less form ``arena run --domain retail --agent URL --k 4``.

Why a module of its own: the overrides are merged into the scenario's TOML data *before* validation, so they are
checked exactly like the file (the same models, the same task-list checks), and an error names the flag and the field
(``--k: pass_k_config.k: k must be even and >= 2 (got 3)``). The flags follow tau2 (``--num-trials``, ``--task-ids``)
and inspect (``--epochs``, ``-T``): ``--num-trials`` is accepted as another name of ``--k``.

What each flag sets in ``[pass_k_config]``: ``--k`` k; ``--tasks`` task_index (and mode "manual"; tasks are 0-based
indices into the split, as in the scenario file: ``0-9,12``); ``--num-tasks`` num_tasks (and mode "random");
``--domain`` domain (``retail`` or ``retail,airline``); ``--concurrency``, ``--seed``, ``--split`` themselves;
``--agent URL`` makes ``[white_agent]`` an external agent at URL.

Without a scenario file (``--agent`` required), the battle is every task of the domain's test split (mode "all",
domain retail unless ``--domain``), k = 4, the offline scripted user simulator (no API key), the reference defaults
for the rest (:class:`green_agent.engine.config.BattleConfig`); the flags then override these defaults. For an LLM
user simulator, write a scenario file.

The run directory records what was overridden (``scenario.json``'s ``overrides``) and the scenario the battle ran
(``scenario.toml``: the file the green agent reads, and the one ``--resume`` hints name). A resume is checked against
the overridden configuration, so a resume with different overrides is refused like a changed scenario file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from green_agent.engine.config import MAX_TASK_INDICES, ConfigError, read_toml
from green_agent.engine.run_store import write_atomic
from launcher.cli.scenario import Scenario, check_battle, describe_scenario_error, load_scenario

EFFECTIVE_SCENARIO_FILE: Final = "scenario.toml"
"""The scenario a battle with overrides (or without a scenario file) ran, in its run directory."""
MAX_TASK_SPEC_CHARS: Final = 10_000
"""Longest ``--tasks`` value."""
MAX_WORKERS: Final = 64
"""Most ``--workers`` (attempt worker processes of the green agent; each one has its own event loop, scoring workers
and tool-sandbox fork server; a battle uses one per 16 attempts in flight, so 64 serve 1024, the most concurrency)."""

FLAG_FIELDS: Final[Mapping[str, str]] = {
    "--k": "k",
    "--tasks": "task_index",
    "--num-tasks": "num_tasks",
    "--domain": "domain",
    "--concurrency": "concurrency",
    "--seed": "seed",
    "--split": "split",
    "--max-cost-usd": "max_cost_usd",
    "--max-wall-s": "max_wall_s",
}
"""Each override flag and the ``[pass_k_config]`` field it sets."""
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_RANGE = re.compile(r"^(\d{1,9})(?:-(\d{1,9}))?$")


class RunOverrides(BaseModel):
    """The override flags of ``arena run`` as given (None: not given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k: int | None = None
    tasks: str | None = None
    num_tasks: int | None = None
    domain: str | None = None
    concurrency: int | None = None
    seed: int | None = None
    split: str | None = None
    agent: str | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None
    """Budgets (launcher/cli/run_budget.py): a resume may change them."""
    workers: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    """``--workers``: the attempt worker processes of the green agent ``arena run`` starts (its ``--workers``; not a
    battle setting: no number depends on it, so a resume may change it)."""

    def given(self) -> dict[str, Any]:
        """``{flag: value}`` of the flags given (what the run directory records): each field is its flag."""
        return {"--" + name.replace("_", "-"): value for name, value in self.model_dump(exclude_none=True).items()}

    def green_argv(self) -> list[str]:
        """Flags for the green agent ``arena run`` starts: ``--workers N`` when given (else its default)."""
        return ["--workers", str(self.workers)] if self.workers is not None else []


def parse_task_spec(spec: str) -> list[int]:
    """``0-9,12`` -> ``[0, 1, ..., 9, 12]``; ConfigError naming ``--tasks`` for anything else (bounded before it is
    expanded: a range of a billion tasks is refused, not built)."""
    if len(spec) > MAX_TASK_SPEC_CHARS:
        raise ConfigError(f"--tasks: at most {MAX_TASK_SPEC_CHARS} characters (got {len(spec)})")
    indices: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        match = _RANGE.match(part)
        if match is None:
            raise ConfigError(
                f"--tasks: {part[:40]!r} is not a task index or a range like 0-9 (tasks are 0-based indices into the "
                "split, as pass_k_config.task_index; e.g. --tasks 0-9,12)"
            )
        first, last = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if last < first:
            raise ConfigError(f"--tasks: the range {part!r} ends before it starts")
        if len(indices) + last - first + 1 > MAX_TASK_INDICES:
            raise ConfigError(f"--tasks: at most {MAX_TASK_INDICES} tasks")
        indices.extend(range(first, last + 1))
    seen: set[int] = set()
    for index in indices:
        if index in seen:
            raise ConfigError(f"--tasks: task {index} is listed more than once")
        seen.add(index)
    return indices


def _scenario_less(overrides: RunOverrides) -> dict[str, Any]:
    if overrides.agent is None:
        raise ConfigError(
            "SCENARIO: give a scenario file, or --agent URL to test an agent without one "
            "(e.g. arena run --domain retail --agent http://127.0.0.1:9004 --k 4)"
        )
    name = re.sub(r"[^A-Za-z0-9]+", "-", overrides.domain or "retail").strip("-")[:40] or "battle"
    return {"name": name, "pass_k_config": {"mode": "all"}, "user_simulator": {"kind": "scripted"}}


def merge_overrides(data: dict[str, Any], overrides: RunOverrides) -> dict[str, Any]:
    """The scenario's TOML data with the overrides written in (validated afterwards, like the file)."""
    if overrides.tasks is not None and overrides.num_tasks is not None:
        raise ConfigError("--tasks, --num-tasks: give one (--tasks names the tasks, --num-tasks samples that many)")
    merged = dict(data)
    battle = merged.get("pass_k_config", {})
    if not isinstance(battle, dict):
        return merged  # validation names pass_k_config
    battle = dict(battle)
    if overrides.k is not None:
        battle["k"] = overrides.k
    if overrides.tasks is not None:
        battle.pop("task_id", None)
        battle |= {"mode": "manual", "task_index": parse_task_spec(overrides.tasks)}
    if overrides.num_tasks is not None:
        battle.pop("num_battles", None)
        battle |= {"mode": "random", "num_tasks": overrides.num_tasks}
    if overrides.domain is not None:
        domains = [name.strip() for name in overrides.domain.split(",")]
        battle["domain"] = domains[0] if len(domains) == 1 else domains
    for field in ("concurrency", "seed", "split", "max_cost_usd", "max_wall_s"):
        if (value := getattr(overrides, field)) is not None:
            battle[field] = value
    merged["pass_k_config"] = battle
    if overrides.agent is not None:
        merged["white_agent"] = {"kind": "external", "url": overrides.agent}
    return merged


def _flags_at_fault(error: ValidationError, overrides: RunOverrides) -> list[str]:
    given = overrides.given()
    flags: list[str] = []
    for problem in error.errors(include_url=False, include_input=False):
        loc = problem["loc"]
        if loc[:1] == ("white_agent",) and "--agent" in given:
            flags.append("--agent")
        for flag, field in FLAG_FIELDS.items():
            if flag in given and loc[:2] == ("pass_k_config", field):
                flags.append(flag)
    return list(dict.fromkeys(flags))


def load_run_scenario(path: Path | None, overrides: RunOverrides) -> Scenario:
    """The scenario ``arena run`` runs: the file (or the scenario-less defaults) with the overrides; ConfigError
    naming the flag and the field (or the file and the field, as :func:`load_scenario`). Blocking file reads."""
    if path is not None and not overrides.given():
        return load_scenario(path)
    data = read_toml(path) if path is not None else _scenario_less(overrides)
    merged = merge_overrides(data, overrides)
    where = f"{path}: " if path is not None else ""
    try:
        scenario = Scenario.model_validate(merged)
    except ValidationError as error:
        flags = _flags_at_fault(error, overrides)
        raise ConfigError(
            f"{', '.join(flags) + ': ' if flags else where}{describe_scenario_error(error, merged)}"
        ) from None
    try:
        check_battle(scenario.pass_k_config)
    except ConfigError as error:
        field = str(error).split(":", 1)[0].removeprefix("pass_k_config.")
        flags = [f for f, name in FLAG_FIELDS.items() if name == field and f in overrides.given()]
        if field == "split" and not flags:  # mode "all": the split's size decides
            flags = [f for f in ("--split", "--domain", "--k") if f in overrides.given()]
        raise ConfigError(f"{', '.join(flags) + ': ' if flags else where}{error}") from None
    return scenario


# ------------------------------------------------------------------------------------ the scenario the battle ran


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a TOML number: {value}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise ValueError(f"cannot write {type(value).__name__} as a TOML value")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_table(table: Mapping[str, Any], name: str, lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if v is not None and not isinstance(v, dict)}
    if name:
        lines.append(f"\n[{name}]")
    lines.extend(f"{_toml_key(key)} = {_toml_value(value)}" for key, value in scalars.items())
    for key, value in table.items():
        if isinstance(value, dict):
            _toml_table(value, f"{name}.{_toml_key(key)}" if name else _toml_key(key), lines)


def scenario_toml(scenario: Scenario) -> str:
    """The scenario as a TOML scenario file (None values left out: they are the defaults)."""
    lines = ["# The scenario this battle ran (written by arena run: its file with the command-line overrides)."]
    _toml_table(scenario.model_dump(mode="json"), "", lines)
    return "\n".join(lines) + "\n"


def write_effective_scenario(run_dir: Path, scenario: Scenario) -> Path:
    """``run_dir/scenario.toml``: the scenario with its overrides, as a file the green agent and a resume read."""
    path = run_dir / EFFECTIVE_SCENARIO_FILE
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(path, scenario_toml(scenario))
    return path


# ------------------------------------------------------------------------------------------ the flags (for typer)

_PANEL = "Overrides of the scenario (validated like the file)"
KFlag = Annotated[
    int | None,
    typer.Option("--k", "--num-trials", help="attempts per task (pass_k_config.k; even, >= 2)", rich_help_panel=_PANEL),
]
TasksFlag = Annotated[
    str | None,
    typer.Option(
        "--tasks",
        metavar="0-9,12",
        help="the tasks: 0-based indices into the split and ranges (pass_k_config.task_index; sets mode manual)",
        rich_help_panel=_PANEL,
    ),
]
NumTasksFlag = Annotated[
    int | None,
    typer.Option(
        "--num-tasks", help="sample this many tasks (pass_k_config.num_tasks; sets mode random)", rich_help_panel=_PANEL
    ),
]
DomainFlag = Annotated[
    str | None,
    typer.Option(
        "--domain", metavar="NAME[,NAME]", help="the tau2 domain(s) (pass_k_config.domain)", rich_help_panel=_PANEL
    ),
]
ConcurrencyFlag = Annotated[
    int | None,
    typer.Option("--concurrency", help="attempts in flight (pass_k_config.concurrency)", rich_help_panel=_PANEL),
]
SeedFlag = Annotated[
    int | None, typer.Option("--seed", help="the battle's seed (pass_k_config.seed)", rich_help_panel=_PANEL)
]
SplitFlag = Annotated[
    str | None, typer.Option("--split", help="the task split, e.g. test (pass_k_config.split)", rich_help_panel=_PANEL)
]
AgentFlag = Annotated[
    str | None,
    typer.Option(
        "--agent",
        metavar="URL",
        help="the agent under test at URL (white_agent kind external); without SCENARIO: every task of the "
        "domain's test split, k 4, the offline scripted user simulator",
        rich_help_panel=_PANEL,
    ),
]
WorkersFlag = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        max=MAX_WORKERS,
        help="attempt worker processes of the green agent arena run starts (its --workers; default: one per core; "
        f"1..{MAX_WORKERS}; a battle uses one per 16 attempts in flight; numbers do not depend on it)",
    ),
]
