"""The timeline's icons: a short text label in a CSS shape instead of the emoji the green agent's lines start with.

Why: Arena's green agent (and the seed's) start their progress lines with emoji (✅, ❌, ⚠️, 🎯, 🔄, 🛑). A machine
without an emoji font (most servers, many Linux desktops) draws them as empty boxes, and a screen reader reads their
Unicode names. The page shows instead a label that any font draws (``PASS``, ``FAIL``, ``INFRA``...), coloured by CSS,
with words for screen readers; the leading emoji is taken off the line it stood for. The stored event is unchanged
(the API and ``events.jsonl`` keep the posted text); only its rendering differs.

What decides the icon: a verified event's typed ``detail`` first (``attempt_finished`` with its outcome,
``battle_started``...), else the known emoji the message starts with (after an optional ``[task key]`` prefix), as
any AgentBeats green agent may post them. Anything else gets no icon and its text as posted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from battle_backend.battles import events as ev


@dataclass(frozen=True)
class EventIcon:
    """One timeline icon: ``kind`` is safe as a CSS class suffix, ``label`` is what it shows, ``words`` what it
    means (its accessible name and tooltip)."""

    kind: str
    label: str
    words: str


SUCCESS = EventIcon("success", "PASS", "attempt succeeded")
FAILURE = EventIcon("failure", "FAIL", "attempt failed")
INFRA = EventIcon("infra", "INFRA", "infrastructure error, not counted against the agent")
WARNING = EventIcon("infra", "WARN", "warning")
START = EventIcon("start", "START", "battle started")
ATTEMPT = EventIcon("attempt", "RUN", "attempt started")
STOP = EventIcon("stop", "STOP", "battle stopped")
FINISH = EventIcon("finish", "DONE", "battle finished")
NOTE = EventIcon("note", "NOTE", "note")

_BY_OUTCOME = {"success": SUCCESS, "failure": FAILURE, "infra_error": INFRA}
_BY_TYPE = {
    ev.BATTLE_STARTED: START,
    ev.ATTEMPT_STARTED: ATTEMPT,
    "battle_cancelled": STOP,
    "battle_interrupted": STOP,
    "battle_finished": FINISH,
    "log": NOTE,
}
_BY_EMOJI = {
    "\u2705": SUCCESS,  # white heavy check mark
    "\u2714": SUCCESS,  # heavy check mark
    "\u274c": FAILURE,  # cross mark
    "\u26a0": WARNING,  # warning sign (usually followed by U+FE0F)
    "\U0001f3af": START,  # direct hit
    "\U0001f504": ATTEMPT,  # anticlockwise arrows
    "\U0001f6d1": STOP,  # octagonal sign
    "\U0001f3c1": FINISH,  # chequered flag
}
_LEADING = re.compile(
    r"^(?P<prefix>\[[^\]\n]{1,500}\] )?(?P<emoji>" + "|".join(map(re.escape, _BY_EMOJI)) + r")\ufe0f? ?",
)


def event_icon(detail: Any, message: str, *, verified: bool) -> tuple[EventIcon | None, str]:
    """The icon of a timeline entry and its message without the emoji the icon replaces.

    ``detail`` is read only for a verified event (anyone may post an unverified one; its icon then comes from its
    own text, as its text would have shown it)."""
    icon: EventIcon | None = None
    if verified and isinstance(detail, dict):
        kind = detail.get(ev.TYPE)
        if kind == ev.ATTEMPT_FINISHED:
            outcome = detail.get(ev.OUTCOME)
            icon = _BY_OUTCOME.get(outcome) if isinstance(outcome, str) else None
        elif isinstance(kind, str):
            icon = _BY_TYPE.get(kind)
    match = _LEADING.match(message)
    if match is None:
        return icon, message
    return icon or _BY_EMOJI[match.group("emoji")], (match.group("prefix") or "") + message[match.end() :]
