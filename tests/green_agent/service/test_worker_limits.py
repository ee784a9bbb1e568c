"""Concurrency up to the documented limit for the operator's own scenario, remote configs under the operator's cap,
and a battle refused when its attempts would not fit the open-file limit (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from green_agent.engine.config import MAX_CONCURRENCY, BattleConfig, ConfigError
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.descriptors import descriptor_problem, descriptors_needed, raise_descriptor_limit
from green_agent.service.running_battles import BattleRegistry, ServiceLimits


def registry(tmp_path: Path, default: BattleConfig, **limits: int) -> BattleRegistry:
    return BattleRegistry(
        scoring=ScoringPool(max_workers=1, warm=False),
        runs_dir=tmp_path,
        default_config=default,
        limits=ServiceLimits(**limits),  # type: ignore[arg-type]
    )


def test_the_documented_limit_is_at_least_1024() -> None:
    assert MAX_CONCURRENCY >= 1024
    assert BattleConfig.model_validate({"concurrency": 1024}).concurrency == 1024
    with pytest.raises(ValueError, match="concurrency"):
        BattleConfig.model_validate({"concurrency": MAX_CONCURRENCY + 1})


def test_the_operators_scenario_concurrency_is_honoured_and_remote_configs_stay_under_the_cap(tmp_path: Path) -> None:
    operators = registry(tmp_path, BattleConfig.model_validate({"concurrency": 256}))
    assert operators.remote_config({"concurrency": 256}).concurrency == 256
    with pytest.raises(ConfigError, match="concurrency: at most 256"):
        operators.remote_config({"concurrency": 257})
    plain = registry(tmp_path, BattleConfig())
    with pytest.raises(ConfigError, match="concurrency: at most 16"):
        plain.remote_config({"concurrency": 17})
    raised = registry(tmp_path, BattleConfig(), max_concurrency=64)
    assert raised.remote_config({"concurrency": 64}).concurrency == 64


def test_descriptor_needs_are_checked_per_process() -> None:
    assert descriptor_problem(1024, 1, soft_limit=20_000) is None
    problem = descriptor_problem(1024, 1, soft_limit=1024)
    assert problem is not None and problem.startswith("concurrency: 1024 attempts") and "RLIMIT_NOFILE" in problem
    assert descriptors_needed(1024, 8) < descriptors_needed(1024, 1)
    assert raise_descriptor_limit() >= 1024


def test_a_battle_that_cannot_fit_the_open_file_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (512, 512))
    battles = registry(tmp_path, BattleConfig(), max_attempts_in_flight=1024)
    config = BattleConfig.model_validate({"concurrency": 200, "domain": "retail", "task_index": [0]})
    with pytest.raises(ConfigError, match="concurrency: 200 attempts in flight need about"):
        battles.start("too-many", "http://127.0.0.1:9/", config)
    assert not (tmp_path / "too-many").exists()
