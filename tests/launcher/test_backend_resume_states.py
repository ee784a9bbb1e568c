"""What ``arena run --resume --backend`` does in each state of the backend battle, decided before any agent starts
(launcher/cli/backend_resume.py), and which record it trusts (launcher/cli/backend_record.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from green_agent.engine.config import ConfigError
from launcher.cli.backend_record import RECORD_FILE, BackendRunRecord, read_record
from launcher.cli.backend_resume import _check_record, _state_on_backend, _Stop
from launcher.cli.run_command import EXIT_CONFIG_ERROR, EXIT_HARNESS_ERROR, EXIT_OK

PREPARED: Any = SimpleNamespace(battle_id="b-1", run_dir=Path("runs/b-1"), scenario_file=Path("demo.toml"))
OPTIONS: Any = SimpleNamespace(run=SimpleNamespace(scenario_path=Path("demo.toml"), runs_dir=Path("runs")))


def _stop(battle: dict[str, Any]) -> _Stop:
    with pytest.raises(_Stop) as caught:
        _state_on_backend(battle, PREPARED, OPTIONS)
    return caught.value


def test_each_state_of_the_backend_battle() -> None:
    assert _state_on_backend({"state": "running"}, PREPARED, OPTIONS) is None  # resumed
    done = _stop({"state": "finished", "result": {"winner": "green_agent", "detail": {"attempts": []}}})
    assert done.exit_code == EXIT_OK and "already has its result" in str(done)
    timed_out = _stop({"state": "finished", "result": {"winner": "draw", "reason": "timeout", "detail": {}}})
    assert timed_out.exit_code == EXIT_CONFIG_ERROR
    assert "draw by timeout" in str(timed_out) and "arena run demo.toml --resume --battle-id b-1" in str(timed_out)
    assert "--backend" not in str(timed_out).split("locally")[-1]
    failed = _stop({"state": "error", "error": "Green agent g not found"})
    assert failed.exit_code == EXIT_HARNESS_ERROR and "Green agent g not found" in str(failed)
    assert _stop({"state": "queued"}).exit_code == EXIT_HARNESS_ERROR


def test_the_backend_must_be_the_one_the_battle_runs_on() -> None:
    local = BackendRunRecord(backend="local", backend_url="http://127.0.0.1:1", database="db", battle_timeout_s=600)
    remote = BackendRunRecord(backend="http://backend:9000", backend_url="http://backend:9000", battle_timeout_s=600)
    assert _check_record(local, "local", PREPARED) is local
    assert _check_record(remote, "http://backend:9000", PREPARED) is remote
    with pytest.raises(ConfigError, match="runs on local, not http://backend:9000; resume it with --backend local"):
        _check_record(local, "http://backend:9000", PREPARED)
    with pytest.raises(ConfigError, match="runs on http://backend:9000, not local"):
        _check_record(remote, "local", PREPARED)
    with pytest.raises(ConfigError, match=r"did not run through a backend .* resume it without --backend"):
        _check_record(None, "local", PREPARED)


def test_the_record_is_read_as_hostile_input(tmp_path: Path) -> None:
    assert read_record(tmp_path) is None
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"backend": "local", "backend_url": "x", "battle_timeout_s": 1}')
    (tmp_path / RECORD_FILE).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_record(tmp_path)
    (tmp_path / RECORD_FILE).unlink()
    (tmp_path / RECORD_FILE).write_text('{"backend": "local", "backend_url": "x", "battle_timeout_s": -1}')
    with pytest.raises(ConfigError, match=f"{RECORD_FILE}: battle_timeout_s: "):
        read_record(tmp_path)


def test_a_backend_resume_passes_workers_to_the_green_agent_it_starts() -> None:
    """``arena run --resume --backend ... --workers N`` starts the green agent with ``--workers N``, as a fresh run
    does (it was dropped: the resumed battle ran on the green agent's default)."""
    from launcher.cli.backend_resume import _start_agents
    from launcher.cli.run_overrides import RunOverrides

    started: dict[str, list[str]] = {}

    class Group:
        async def start_and_wait(self, name: str, argv: list[str], url: str, **_kwargs: object) -> None:
            started[name] = argv

    class Display:
        def status(self, _text: str) -> None:
            pass

    def options(workers: int | None) -> Any:
        run = SimpleNamespace(
            python="python",
            green_module="green_agent",
            runs_dir=Path("runs"),
            startup_timeout_s=5.0,
            overrides=RunOverrides(workers=workers),
        )
        return SimpleNamespace(run=run)

    prepared: Any = SimpleNamespace(
        scenario=SimpleNamespace(white_agent=SimpleNamespace(kind="external", url="http://127.0.0.1:9")),
        overrides={},
        scenario_file=Path("demo.toml"),
        operator_token=None,
    )
    asyncio.run(_start_agents(options(3), prepared, Group(), Display(), white=False))  # type: ignore[arg-type]
    argv = started["green_agent"]
    assert argv[argv.index("--workers") + 1] == "3"
    asyncio.run(_start_agents(options(None), prepared, Group(), Display(), white=False))  # type: ignore[arg-type]
    assert "--workers" not in started["green_agent"]  # not given: the green agent's default
