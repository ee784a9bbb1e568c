"""The timeline's icons (views/event_icons.py): a text label from a verified event's typed detail or from the known
emoji its line starts with, the emoji taken off the rendered line, the stored event unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from battle_backend.store.records import EventRecord
from battle_backend.views.event_icons import event_icon
from battle_backend.views.rendering import Renderer, event_context
from tests.battle_backend.attempt_samples import attempt_finished, battle_started


def _event(message: str, detail: dict[str, Any] | None = None, *, verified: bool = True) -> EventRecord:
    payload: dict[str, Any] = {"is_result": False, "message": message, "reported_by": "green_agent"}
    if detail is not None:
        payload["detail"] = detail
    return EventRecord(battle_id="b", seq=7, payload=payload, received_at="2026-11-27T00:00:00Z", verified=verified)


@pytest.mark.parametrize(
    ("message", "label", "shown"),
    [
        ("[retail/test/0] ✅ Attempt 1/4: SUCCESS", "PASS", "[retail/test/0] Attempt 1/4: SUCCESS"),
        ("[retail/test/0] ❌ Attempt 2/4: FAILED", "FAIL", "[retail/test/0] Attempt 2/4: FAILED"),
        ("[t] ⚠️ Attempt 3/4: INFRASTRUCTURE ERROR", "WARN", "[t] Attempt 3/4: INFRASTRUCTURE ERROR"),
        ("🎯 Starting pass@4 evaluation", "START", "Starting pass@4 evaluation"),
        ("[t] 🔄 Starting attempt 1/4...", "RUN", "[t] Starting attempt 1/4..."),
        ("🛑 Battle cancelled", "STOP", "Battle cancelled"),
    ],
)
def test_known_leading_emoji_become_a_text_label(message: str, label: str, shown: str) -> None:
    icon, text = event_icon(None, message, verified=True)
    assert icon is not None and icon.label == label and text == shown


def test_other_text_is_left_as_posted() -> None:
    for message in ["plain text", "mid-line ✅ stays", "[" + "x" * 600 + "] ✅ too long a prefix", ""]:
        assert event_icon(None, message, verified=True) == (None, message)


def test_a_verified_detail_decides_and_an_unverified_one_does_not() -> None:
    detail = attempt_finished("retail/test/0", 1, "infra_error")
    icon, text = event_icon(detail, "✅ claimed", verified=True)
    assert icon is not None and (icon.label, text) == ("INFRA", "claimed")
    icon, _ = event_icon(detail, "no emoji", verified=False)
    assert icon is None
    icon, _ = event_icon(battle_started(["a"], 2), "no emoji", verified=True)
    assert icon is not None and icon.label == "START"


def test_the_rendered_entry_has_a_labelled_icon_and_no_emoji() -> None:
    event = _event("[retail/test/0] ❌ Attempt 2/4: FAILED", attempt_finished("retail/test/0", 2, "failure"))
    context = event_context(event)
    assert context["message"] == "[retail/test/0] Attempt 2/4: FAILED"
    html = Renderer().event_html(event)
    assert 'class="event-icon icon-failure" role="img" aria-label="attempt failed"' in html and ">FAIL<" in html
    assert "❌" not in html.split("<details", 1)[0]
    assert event.payload["message"].startswith("[retail/test/0] ❌")  # stored as posted
