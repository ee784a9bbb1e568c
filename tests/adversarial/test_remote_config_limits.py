"""A remote config against a running green agent: no unbounded time limit, no switch to the LLM user, nothing that
spends more of the operator's money or resources than the operator chose (issue 24, item 4, config side).

The shared green agent runs the default config (scripted user, 1 MiB replies, 12 user turns); each hostile request is
refused before the battle starts, naming the field, and the white agent is never contacted.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.adversarial.conftest import battle_config
from tests.adversarial.harness import GreenAgent, new_battle_id, run_battle
from tests.adversarial.hostile_agent import HostileAgent

HOSTILE_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "turn 1e12 s": ({"turn_timeout_s": 1e12}, "turn_timeout_s"),
    "attempt 1e12 s": ({"attempt_timeout_s": 1e12}, "attempt_timeout_s"),
    "user request 1e12 s": ({"user_simulator": {"request_timeout_s": 1e12}}, "user_simulator.request_timeout_s"),
    "llm user": ({"user_simulator": {"kind": "llm"}}, "user_simulator.kind"),
    "more user turns": ({"user_simulator": {"max_user_turns": 200}}, "user_simulator.max_user_turns"),
    "more retries": ({"user_simulator": {"max_retries": 20}}, "user_simulator.max_retries"),
    "64 MiB replies": ({"max_reply_bytes": 64 * 1_048_576}, "max_reply_bytes"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("extra", "field"), list(HOSTILE_CONFIGS.values()), ids=list(HOSTILE_CONFIGS))
async def test_a_remote_config_cannot_stretch_limits_or_spend_the_operators_money(
    green: GreenAgent, hostile: HostileAgent, extra: dict[str, Any], field: str
) -> None:
    config = battle_config()
    if "user_simulator" in extra:
        config["user_simulator"] = extra["user_simulator"]
    else:
        config.update(extra)
    battle_id = new_battle_id("remotelimit")
    assert hostile.url is not None
    outcome = await run_battle(green, hostile.url, config, battle_id=battle_id, timeout_s=60, watch_health=False)
    assert outcome.refused, f"{field}: the remote config must be refused: {outcome.describe()}"
    assert field in (outcome.error or ""), f"the error must name {field}: {outcome.error!r}"
    assert not hostile.contacted, "the white agent was contacted"
    assert not green.run_dir(battle_id).exists()
