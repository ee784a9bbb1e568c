"""The attempt viewer at ``tau2 view``'s level: the task's instructions, every check with met/unmet, the reward split,
tool calls and results as collapsible fields, one meaning of "turn", and a format_error's malformed reply; all of it
escaped (the page's CSP forbids inline script, and no agent markup becomes an element); older events without these
fields still render, their sections hidden."""

from __future__ import annotations

from typing import Any

from battle_backend.http.security import CONTENT_SECURITY_POLICY
from battle_backend.views.attempt_checks import checks_view, malformed_reply_view, scenario_view
from battle_backend.views.attempt_data import AttemptData
from battle_backend.views.explanation import explanation_view
from battle_backend.views.rendering import Renderer
from battle_backend.views.trajectory import trajectory_view
from tests.battle_backend.attempt_samples import XSS_ARGUMENT, attempt_finished, trajectory
from tests.battle_backend.conftest import Arena
from tests.battle_backend.views.test_attempt_viewer import page_text, post_detail, running_battle, viewer
from tests.battle_backend.views.test_rendering import unsafe

TASK = "retail/test/0"
XSS_REPLY = 'I cannot <script>window.__pwned = 7</script><img src=x onerror="window.__pwned = 8"> do that'


def scenario() -> dict[str, Any]:
    """A retail task's user scenario as the green agent posts it (attempt_details.TaskScenario)."""
    return {
        "task_id": "0",
        "purpose": None,
        "notes": None,
        "persona": None,
        "domain": "retail",
        "reason_for_call": "You received your order #W2378156 and wish to exchange the mechanical keyboard.",
        "known_info": "You are Yusuf Rossi in zip code 19122.",
        "unknown_info": None,
        "task_instructions": "You are detail-oriented and want to make sure everything is addressed in one go.",
    }


def checks(*, hostile: bool = False) -> dict[str, Any]:
    """tau2's checks as posted (attempt_details.RewardChecks): two actions (one unmet), a communicate check, an NL
    assertion, an environment assertion, and the reward split."""
    return {
        "reward_basis": ["DB", "ACTION", "COMMUNICATE"],
        "reward_split": {"DB": 0.0, "ACTION": 0.0, "COMMUNICATE": 1.0},
        "db_match": False,
        "actions": [
            {"name": "get_order_details", "arguments": {"order_id": "#W2378156"}, "requestor": "assistant",
             "met": True, "reward": 1.0},
            {"name": "cancel_pending_order",
             "arguments": {"order_id": XSS_ARGUMENT if hostile else "#W2378156", "reason": "no longer needed"},
             "requestor": "assistant", "met": False, "reward": 0.0},
        ],
        "communicate": [{"text": "54.04", "met": True, "justification": None}],
        "nl_assertions": [{"text": "The agent is polite" + (XSS_REPLY if hostile else ""), "met": False,
                           "justification": "It was curt."}],
        "env_assertions": [{"function": "assert_mobile_data_status", "arguments": {"expected_status": True},
                            "env_type": "user", "met": False, "message": None}],
        "left_out": 0,
    }  # fmt: skip


def malformed(text: str = XSS_REPLY) -> dict[str, Any]:
    return {"text": text, "chars": len(text), "truncated": False, "source": "reply", "turn": 5, "step": 3}


def full_detail(outcome: str = "failure", *, hostile: bool = False) -> dict[str, Any]:
    """An attempt_finished detail with every new field (and, for a format_error, the malformed reply)."""
    detail = attempt_finished(TASK, 1, outcome, hostile=hostile)
    detail.update(scenario=scenario(), checks=checks(hostile=hostile))
    if hostile:
        detail.update(category="format_error", failure_detail="reply at step 3 is not an action: no JSON action")
        detail["malformed_reply"] = malformed()
        messages = detail["trajectory"]["messages"]
        messages.append({**messages[-1], "step": 5, "content": XSS_REPLY, "error": True})
        detail["trajectory"]["message_count"] = len(messages)
    return detail


def render(detail: dict[str, Any] | None, entry: dict[str, Any] | None = None) -> str:
    data = AttemptData(key=(TASK, 1), detail=detail, entry=entry, previous=None, next=None)

    class Battle:
        battle_id = "b-1"

    return Renderer().render(
        "attempt.html",
        battle=Battle(),
        header=data.header,
        explanation=explanation_view(data.explanation),
        trajectory=trajectory_view(data.trajectory),
        malformed=malformed_reply_view(data.malformed_reply),
        scenario=scenario_view(data.scenario),
        checks=checks_view(data.checks),
        previous=None,
        next=None,
        jsonl_url="/x/trajectory.jsonl",
        facts=None,
    )


def section(page: str, element_id: str) -> str:
    """The text of the element with ``element_id`` up to the end of its section."""
    return page_text(page.split(f'id="{element_id}"', 1)[1].split("</section>", 1)[0])


def test_the_checks_and_the_reward_split_are_shown() -> None:
    page = render(full_detail())
    split = section(page, "reward-split")
    assert "DB 0.000 yes" in split and "ACTION 0.000 yes" in split and "COMMUNICATE 1.000 yes" in split
    assert "Database check: ✗ unmet" in section(page, "db-check")
    actions = section(page, "checks-ACTION-title")
    assert "Action checks 1 of 2 met" in actions
    assert "✓ met get_order_details by assistant" in actions and "✗ unmet cancel_pending_order" in actions
    assert '"order_id": "#W2378156"' in actions and '"reason": "no longer needed"' in actions
    assert "Communicate checks 1 of 1 met" in page_text(page) and "✓ met 54.04" in page_text(page)
    nl = section(page, "checks-NL_ASSERTION-title")
    assert "NL assertions 0 of 1 met · not part of the reward" in nl and "It was curt." in nl
    env = section(page, "checks-ENV_ASSERTION-title")
    assert "not part of the reward" in env and "assert_mobile_data_status on the user side" in env


def test_the_task_instructions_are_shown_in_tau2_order() -> None:
    text = section(render(full_detail()), "scenario")
    assert "what the simulated user was told; tau2 task 0" in text
    reason, known = text.index("Reason for call"), text.index("Known info")
    assert reason < known < text.rindex("Task instructions")
    assert "exchange the mechanical keyboard" in text and "Yusuf Rossi" in text
    assert "Unknown info" not in text and "Persona" not in text  # empty fields are left out


def test_tool_calls_and_results_are_collapsible_fields() -> None:
    page = render(full_detail())
    call = page.split('<details class="tool-call" open>', 1)[1].split("</details>\n", 1)[0]
    assert 'calls <code class="tool-name">get_order_details</code>' in call and "1 argument(s)" in call
    assert '<dt class="mono">order_id</dt><dd><span class="field-value">#W2378156</span>' in call
    result = page.split('<details class="tool-result">', 1)[1]
    assert '<dt class="mono">status</dt><dd><span class="field-value">pending</span>' in result
    assert "1 field(s)" in result.split("</summary>", 1)[0]
    # a nested value is pretty JSON; a result that is not JSON stays text
    messages = trajectory()["messages"]
    messages[3]["content"] = '{"items": [{"price": 1.5}], "note": "ok"}'
    messages.append({**messages[3], "content": "Error: order not found"})
    page = render({**attempt_finished(TASK, 1, "failure"), "trajectory": {**trajectory(), "messages": messages}})
    assert '<pre class="field-json">[\n  {\n    &#34;price&#34;: 1.5\n  }\n]</pre>' in page
    assert '<div class="message-content">Error: order not found</div>' in page


def test_turn_is_the_one_meaning_of_a_message_number() -> None:
    page = render(full_detail())
    text = page_text(page)
    assert "turn 2" in text and "step 2" not in text  # messages are numbered by turn
    assert 'id="turn-2"' in page
    assert '<a href="#turn-7">turn 7</a>' in page  # the explanation's closest call names the same turn
    assert "turn = the message's index in the conversation" in text
    assert "a step is one action of the agent" in page  # the header's count, defined


def test_the_malformed_reply_is_shown_escaped() -> None:
    page = render(full_detail(hostile=True))
    text = section(page, "malformed-reply")
    assert "The reply that is not an action" in text and f"turn 5 · step 3 · {len(XSS_REPLY)} characters" in text
    assert XSS_REPLY in text
    main = page.split("<main", 1)[1]
    assert unsafe(main) == [] and "<img" not in main and "<svg" not in main
    assert "&lt;script&gt;window.__pwned = 7&lt;/script&gt;" in page
    assert "error: not an action" in page_text(page)  # the trajectory's last message is that reply
    long = render({**attempt_finished(TASK, 1, "failure"), "malformed_reply": {**malformed("z" * 30_000)}})
    assert "z" * 8_001 not in long and "cut: the first 8000 characters are shown" in page_text(long)
    over = malformed("{" + '"jsonrpc"' * 10)
    over.update(source="http_body", truncated=True)
    over_page = page_text(render({**attempt_finished(TASK, 1, "failure"), "malformed_reply": over}))
    assert "The reply over the size limit (its first bytes)" in over_page and "bytes read" in over_page


def test_the_malformed_reply_of_a_result_only_attempt_is_shown() -> None:
    entry = {"attempt": 1, "outcome": "failure", "malformed_reply": malformed("plain words")}
    assert "plain words" in section(render(None, entry), "malformed-reply")


def test_old_events_render_without_the_new_sections() -> None:
    page = render(attempt_finished(TASK, 1, "failure"))
    for element_id in ("scenario", "checks", "malformed-reply", "reward-split"):
        assert f'id="{element_id}"' not in page
    assert 'id="messages"' in page and 'id="explanation"' in page


def test_odd_new_fields_never_crash_the_page() -> None:
    odd_values: list[Any] = [None, 1, "x", [], {}, [1, "a", None], {"actions": "no"}, {"text": 5}, {"rows": [[1]]}]
    for odd in odd_values:
        detail = {**attempt_finished(TASK, 1, "failure"), "scenario": odd, "checks": odd, "malformed_reply": odd}
        main = render(detail).split("<main", 1)[1]
        assert unsafe(main) == []
    wild = {
        "reward_split": {"DB": "NaN", "X" * 900: 1e308, "ACTION": True},
        "reward_basis": ["DB", 5, None],
        "actions": [{"name": XSS_ARGUMENT, "arguments": "<b>", "met": "yes"}] * 500,
        "communicate": [{"text": "y" * 50_000, "met": True}],
        "left_out": -3,
    }
    view = checks_view(wild)
    assert view is not None and len(view.groups[0].rows) == 100 and view.left_out == 0
    assert all(not row.met for row in view.groups[0].rows)  # only true is met
    assert len(view.groups[1].rows[0].label) <= 2_000
    assert unsafe(render({**attempt_finished(TASK, 1, "failure"), "checks": wild}).split("<main", 1)[1]) == []


async def test_the_viewer_over_http_has_the_new_sections_under_a_strict_csp(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, full_detail(hostile=True))
    response = await arena.client.get(viewer(battle_id))
    assert response.status_code == 200
    csp = response.headers["content-security-policy"]
    assert csp == CONTENT_SECURITY_POLICY and "script-src 'self'" in csp and "unsafe-inline" not in csp
    page = response.text
    for element_id in ("malformed-reply", "scenario", "checks", "reward-split", "checks-ACTION", "task-links"):
        assert f'id="{element_id}"' in page
    assert unsafe(page.split("<main", 1)[1]) == []
