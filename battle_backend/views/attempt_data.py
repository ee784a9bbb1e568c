"""Finding one attempt of a battle in what the backend stored: the green agent's ``attempt_finished`` progress
events (outcome, category, fault, explanation and the trajectory, when its green agent posts them) and the result's
BattleResult ``attempts[]`` (outcome, failure and explanation, without the conversation).

Why both: an Arena green agent posts the attempt's trajectory with its ``attempt_finished`` event (the only way the
conversation reaches a backend it shares no disk with), while an older or foreign green agent posts only the final
result. The last event for an attempt wins (a resumed battle may report an attempt again); the result fills in what
no event carried. Pure functions over records: the routes read the battle, these decide.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from battle_backend.battles import events as ev
from battle_backend.battles.arena_results import find_battle_result
from battle_backend.battles.tolerant import DASH, MAX_NAME_CHARS, dict_of, float_of, int_of, name_of, text_of
from battle_backend.store.records import BattleRecord, EventRecord
from battle_backend.views.results import OUTCOMES, task_key_of

MAX_ATTEMPT_NUMBER = 10_000
"""Attempt numbers above this are not attempts anyone ran (a hostile detail); they are ignored."""

AttemptKey = tuple[str, int]
"""(task key, attempt number)."""


def attempt_path(battle_id: str, task_key: str, attempt: int) -> str:
    """The viewer's URL path of an attempt (each part percent-encoded; the task key keeps its slashes)."""
    return f"/ui/battles/{quote(battle_id, safe='')}/attempts/{quote(task_key, safe='/')}/{attempt}"


def linkable_task_key(task_key: str) -> bool:
    """False for a key with a ``.`` or ``..`` segment: a browser resolves those in the viewer's URL path (also
    percent-encoded), so its link would lead elsewhere on this site. Real keys are ``domain/split/index``."""
    return not any(segment in (".", "..") for segment in task_key.split("/"))


def finished_event_detail(payload: dict[str, Any]) -> tuple[AttemptKey, dict[str, Any]] | None:
    """The key and detail of an ``attempt_finished`` progress event; None for any other event."""
    if payload.get("is_result"):
        return None
    detail = payload.get("detail")
    if not isinstance(detail, dict) or detail.get(ev.TYPE) != ev.ATTEMPT_FINISHED:
        return None
    task_key, attempt = detail.get(ev.TASK_KEY), int_of(detail.get(ev.ATTEMPT), low=1, high=MAX_ATTEMPT_NUMBER)
    if not isinstance(task_key, str) or not task_key or len(task_key) > MAX_NAME_CHARS or attempt is None:
        return None
    if not linkable_task_key(task_key):
        return None
    return (task_key, attempt), detail


def finished_details(events: Iterable[EventRecord]) -> dict[AttemptKey, dict[str, Any]]:
    """The last ``attempt_finished`` detail of every attempt, in order of first report; only verified events count
    (one posted without the battle's token is anyone's claim, never the battle's attempt)."""
    found: dict[AttemptKey, dict[str, Any]] = {}
    for event in events:
        if not event.verified:
            continue
        keyed = finished_event_detail(event.payload)
        if keyed is not None:
            found[keyed[0]] = keyed[1]
    return found


def result_entries(battle: BattleRecord) -> dict[AttemptKey, dict[str, Any]]:
    """The BattleResult ``attempts[]`` entries of a finished battle, by key (empty without an Arena-like result)."""
    if battle.result is None:
        return {}
    found = find_battle_result(battle.result.get("detail"))
    entries: dict[AttemptKey, dict[str, Any]] = {}
    for entry in found.get("attempts", []) if found else []:
        if not isinstance(entry, dict):
            continue
        number = int_of(entry.get("attempt"), low=1, high=MAX_ATTEMPT_NUMBER)
        key = task_key_of(entry)
        if number is not None and linkable_task_key(key):
            entries[(key, number)] = entry
    return entries


def ordered_keys(keys: Iterable[AttemptKey]) -> list[AttemptKey]:
    """Tasks in order of first appearance, attempts ascending within a task (the grid's reading order)."""
    tasks: dict[str, set[int]] = {}
    for task_key, number in keys:
        tasks.setdefault(task_key, set()).add(number)
    return [(task_key, number) for task_key, numbers in tasks.items() for number in sorted(numbers)]


@dataclass(frozen=True)
class AttemptHeader:
    """What the viewer's header says about the attempt."""

    task_key: str
    attempt: int
    outcome: str
    """success | failure | infra_error | unknown (safe as a CSS class)."""
    outcome_text: str
    reward: float | None
    category: str
    fault_author: str
    failure_detail: str | None
    steps: int | None
    duration_s: float | None

    @property
    def reward_text(self) -> str:
        """The reward with three decimals, or a dash."""
        return DASH if self.reward is None else f"{self.reward:.3f}"

    @property
    def duration_text(self) -> str:
        """The duration in seconds, or a dash."""
        return DASH if self.duration_s is None else f"{self.duration_s:.1f} s"


@dataclass(frozen=True)
class AttemptData:
    """One attempt as stored: its event detail and result entry (either may be missing, not both)."""

    key: AttemptKey
    detail: dict[str, Any] | None
    entry: dict[str, Any] | None
    previous: AttemptKey | None
    next: AttemptKey | None

    def _value(self, name: str, failure_name: str | None = None) -> Any:
        """The event's value, else the result entry's (``failure.<failure_name>`` when given)."""
        if self.detail is not None and self.detail.get(name) is not None:
            return self.detail.get(name)
        if self.entry is None:
            return None
        if failure_name is not None:
            return dict_of(self.entry.get("failure")).get(failure_name)
        return self.entry.get(name)

    @property
    def header(self) -> AttemptHeader:
        """The header fields, from the event first and the result second."""
        raw_outcome = self._value(ev.OUTCOME)
        outcome_text = name_of(raw_outcome, 40) or "unknown"
        return AttemptHeader(
            task_key=self.key[0],
            attempt=self.key[1],
            outcome=outcome_text if outcome_text in OUTCOMES else "unknown",
            outcome_text=outcome_text,
            reward=float_of(self._value(ev.REWARD)),
            category=name_of(self._value(ev.CATEGORY, "category")),
            fault_author=name_of(self._value(ev.FAULT_AUTHOR, "fault_author")),
            failure_detail=text_of(self._value(ev.FAILURE_DETAIL, "detail")),
            steps=int_of(self._value(ev.STEPS), low=0),
            duration_s=float_of(self._value(ev.DURATION_S)),
        )

    @property
    def explanation(self) -> Any:
        """The failure explanation as posted (event first, then the result's attempt entry)."""
        return self._value(ev.EXPLANATION)

    @property
    def malformed_reply(self) -> Any:
        """A format_error attempt's reply as posted (event first, then the result's attempt entry)."""
        return self._value("malformed_reply")

    @property
    def scenario(self) -> Any:
        """The task's user scenario (only events carry it)."""
        return self.detail.get("scenario") if self.detail is not None else None

    @property
    def checks(self) -> Any:
        """tau2's checks and reward split (only events carry them)."""
        return self.detail.get("checks") if self.detail is not None else None

    @property
    def trajectory(self) -> Any:
        """The posted trajectory (only events carry one)."""
        return self.detail.get(ev.TRAJECTORY) if self.detail is not None else None

    def jsonl_lines(self) -> Iterator[str]:
        """The raw JSONL: the event detail without the trajectory (or, without an event, the result's entry), then
        one line per posted message, as posted."""
        head = {k: v for k, v in self.detail.items() if k != "trajectory"} if self.detail is not None else self.entry
        yield json.dumps(head, ensure_ascii=False, default=str)
        trajectory = dict_of(self.trajectory)
        messages = trajectory.get("messages")
        for message in messages if isinstance(messages, list) else []:
            yield json.dumps(message, ensure_ascii=False, default=str)


def find_attempt(battle: BattleRecord, task_key: str, attempt: int) -> AttemptData | None:
    """The attempt ``(task_key, attempt)`` of a battle loaded with its events; None when nothing names it."""
    details = finished_details(battle.events)
    entries = result_entries(battle)
    key = (task_key, attempt)
    if key not in details and key not in entries:
        return None
    keys = ordered_keys([*entries, *details])
    index = keys.index(key)
    return AttemptData(
        key=key,
        detail=details.get(key),
        entry=entries.get(key),
        previous=keys[index - 1] if index > 0 else None,
        next=keys[index + 1] if index + 1 < len(keys) else None,
    )
