"""Two facts about a battle that change how its result is read: whether it is a CALIBRATION battle, and the rule
that decided its winner, in words.

Calibration: Arena's green agent can replay every task's gold solution (``"calibration": true`` in its config and
its BattleResult) to check the harness itself; such a battle says nothing about an agent, so the page flags it and
it moves no ELO rating. The rating decision reads only the result (posted with the battle token), never a progress
event: without ``--require-token`` anyone may post progress events, and an opponent must not be able to dodge a
rating change by posting a fake ``battle_started``. The banner may also use the green agent's ``battle_started``
detail while the battle runs (display only); once the result is in, the result decides.

Winner rule: ``winner_rule`` of an Arena BattleResult (absent from older results: then nothing is shown).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from battle_backend.battles import events as ev
from battle_backend.battles.arena_results import find_battle_result
from battle_backend.battles.tolerant import clip
from battle_backend.store.records import BattleRecord, EventRecord

CALIBRATION_TEXT = "CALIBRATION battle: checks the harness, not an agent; no ELO change"
MAX_RULE_CHARS = 1_000


def result_says_calibration(detail: Any) -> bool | None:
    """The BattleResult's ``calibration`` flag in a result detail; None when the detail holds no BattleResult."""
    found = find_battle_result(detail)
    if found is None:
        return None
    return found.get("calibration") is True


def started_says_calibration(payload: dict[str, Any]) -> bool:
    """Whether a progress event is the green agent's ``battle_started`` with ``calibration: true``."""
    detail = payload.get("detail")
    return (
        not payload.get("is_result")
        and isinstance(detail, dict)
        and detail.get(ev.TYPE) == ev.BATTLE_STARTED
        and detail.get(ev.CALIBRATION) is True
    )


def winner_rule(detail: Any) -> str | None:
    """The rule that decided the winner, in words, from a result detail's BattleResult (None when absent)."""
    found = find_battle_result(detail)
    rule = found.get("winner_rule") if found is not None else None
    return clip(rule, MAX_RULE_CHARS) if isinstance(rule, str) and rule.strip() else None


@dataclass(frozen=True)
class BattleFacts:
    """What the status line and the result section say besides the winner."""

    calibration: bool = False
    winner_rule: str | None = None
    calibration_text: str = CALIBRATION_TEXT


def battle_facts(battle: BattleRecord, *, started_calibration: bool = False) -> BattleFacts:
    """The facts of a battle: the result decides calibration once it is in; before, the ``battle_started`` flag."""
    detail = battle.result.get("detail") if battle.result is not None else None
    from_result = result_says_calibration(detail) if battle.result is not None else None
    return BattleFacts(
        calibration=from_result if from_result is not None else started_calibration,
        winner_rule=winner_rule(detail),
    )


def events_say_calibration(events: Iterable[EventRecord]) -> bool:
    """Whether any stored verified event is a ``battle_started`` with ``calibration: true`` (an unverified one,
    posted without the battle's token, decides nothing)."""
    return any(event.verified and started_says_calibration(event.payload) for event in events)
