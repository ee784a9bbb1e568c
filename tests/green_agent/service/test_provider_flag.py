"""``arena-green --provider-max-concurrency`` (issue 27): out-of-range values exit 2 naming the flag before anything
starts; the registry's provider limits take the operator's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.main import main
from green_agent.service.running_battles import BattleRegistry, ServiceLimits


@pytest.mark.parametrize(("value", "problem"), [("0", "must be at least 1"), ("5000", "at most 4096")])
def test_an_out_of_range_cap_exits_2_naming_the_flag(
    value: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--provider-max-concurrency", value, "--runs-dir", str(tmp_path), "--port", "0"])
    assert code == 2
    assert f"--provider-max-concurrency: {problem}" in capsys.readouterr().err


def test_the_registry_shares_one_provider_limits_with_the_operators_cap() -> None:
    registry = BattleRegistry(
        scoring=ScoringPool(max_workers=1, warm=False),
        runs_dir=Path(),
        default_config=BattleConfig(),
        limits=ServiceLimits(provider_max_concurrency=7),
    )
    assert registry.providers.max_concurrency == 7
    assert registry.providers.limiter(None, "m") is registry.providers.limiter(None, "m")
