"""The explanation's pure parts: the database diff and its bounds against hostile values, the closest-call rule, the
markdown lines (escaped as inline code, checked with markdown-it), the winner rule and the attempt_finished data."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from green_agent.engine.bounded_json import MAX_DEPTH, bounded_copy, json_excerpt
from green_agent.engine.events import AttemptFinished
from green_agent.engine.explanation import (
    MAX_ARGUMENTS_CHARS,
    MAX_DIFFERENCES,
    MAX_EXPLANATION_CHARS,
    MAX_VALUE_CHARS,
    CalledTool,
    CommunicateExplanation,
    DbDifference,
    DbExplanation,
    FailureExplanation,
    UnmatchedAction,
    fit,
    summarize,
)
from green_agent.engine.report import code_span, explanation_lines, render_markdown, winner_for, winner_rule
from green_agent.engine.results import BattleResult, Failure, FailureCategory, FaultAuthor
from green_agent.engine.tau.db_diff import diff_databases
from green_agent.engine.tau.explain import _Call, closest_call
from tests.green_agent.engine.results.builders import battle_result

REPLY_FORMAT_DETAIL = (
    "reply at step 1 is not an action: no JSON action found in the reply "
    "(expected <json>{...}</json>, a ```json block or a bare JSON object)"
)
"""The failure detail that tells agent authors the reply format (green_agent/engine/turn_protocol.py)."""


def orders(**status: str) -> dict[str, Any]:
    return {
        "orders": {oid: {"order_id": oid, "status": s, "items": [{"price": 1.0}]} for oid, s in status.items()},
        "users": {"u1": {"user_id": "u1", "address": {"city": "Phoenix"}}},
    }


# -- the diff ---------------------------------------------------------------------------------------------------------


def test_the_diff_names_table_record_field_and_both_values() -> None:
    gold = orders(**{"#W1": "cancelled", "#W2": "pending"})
    attempt = orders(**{"#W1": "pending", "#W2": "pending"})
    attempt["users"]["u1"]["address"]["city"] = "Tucson"
    attempt["orders"]["#W2"]["items"].append({"price": 2.5})
    diff = diff_databases(gold, attempt)
    assert [(d.table, d.record, d.field, d.expected, d.actual, d.change) for d in diff.differences] == [
        ("orders", "#W1", "status", '"cancelled"', '"pending"', "changed"),
        ("orders", "#W2", "items[1]", None, '{"price": 2.5}', "unexpected_field"),
        ("users", "u1", "address.city", '"Phoenix"', '"Tucson"', "changed"),
    ]
    assert (diff.total, diff.truncated) == (3, False)


def test_missing_and_unexpected_records_and_list_tables_keyed_by_their_id() -> None:
    gold = {"orders": {"#W1": {"status": "x"}}, "lines": [{"line_id": "L1", "plan": "a"}, {"line_id": "L2"}]}
    attempt = {"orders": {"#W1-x": {"status": "x"}}, "lines": [{"line_id": "L2"}, {"line_id": "L1", "plan": "b"}]}
    diff = diff_databases(gold, attempt)
    assert [(d.table, d.record, d.field, d.change) for d in diff.differences] == [
        ("orders", "#W1", "", "missing_record"),
        ("orders", "#W1-x", "", "unexpected_record"),
        ("lines", "L1", "plan", "changed"),
    ]
    assert diff.differences[0].expected == '{"status": "x"}' and diff.differences[0].actual is None


def test_the_user_database_is_one_table_of_its_objects() -> None:
    gold_user = {"device": {"data_saver_mode": False, "apn": {"name": "internet"}}, "surroundings": {"abroad": True}}
    attempt_user = {"device": {"data_saver_mode": True, "apn": {"name": "internet"}}, "surroundings": {"abroad": True}}
    diff = diff_databases({}, {}, expected_user=gold_user, actual_user=attempt_user)
    assert [(d.table, d.record, d.field, d.expected, d.actual) for d in diff.differences] == [
        ("user_db", "device", "data_saver_mode", "false", "true")
    ]


def test_a_value_of_another_type_differs_even_when_python_calls_it_equal() -> None:
    diff = diff_databases({"t": {"r": {"n": 1}}}, {"t": {"r": {"n": 1.0}}})
    assert diff.total == 0  # equal as a whole record: the rare int/float case is not itemised
    diff = diff_databases({"t": {"r": {"n": 1, "m": 0}}}, {"t": {"r": {"n": 1.0, "m": 1}}})
    assert [(d.field, d.expected, d.actual) for d in diff.differences] == [("n", "1", "1.0"), ("m", "0", "1")]


@pytest.mark.timeout(120)  # a hang guard (linear work must not turn quadratic), not a timed assertion
def test_hostile_values_stay_within_the_bounds() -> None:
    huge = "A" * 20_000_000
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    wide_gold = {f"#W{i}": {"status": "pending"} for i in range(20_000)}
    wide_attempt = {f"#W{i}": {"status": "cancelled" + "`" * 7} for i in range(20_000)}
    gold = {"orders": wide_gold, "users": {"u": {"note": "short", "nested": {"x": 1}}}, "big": 10**5000}
    attempt = {"orders": wide_attempt, "users": {"u": {"note": huge, "nested": deep}}, "big": -(10**5000)}
    diff = diff_databases(gold, attempt)
    assert diff.total == 20_000 + 2 + 1 and diff.truncated and len(diff.differences) == MAX_DIFFERENCES
    for difference in diff.differences:
        assert len(difference.expected or "") <= MAX_VALUE_CHARS and len(difference.actual or "") <= MAX_VALUE_CHARS
        assert len(difference.field) <= 200 and len(difference.record or "") <= 200
    assert len(FailureExplanation(summary="", db=diff).model_dump_json()) < 80_000
    users = diff_databases({"users": gold["users"]}, {"users": attempt["users"]})
    note, nested = users.differences
    assert note.actual is not None and note.actual.startswith('"AAAA') and note.actual.endswith("…")
    assert nested.field == "nested" and nested.actual == "[" * MAX_DEPTH + '"…"' + "]" * MAX_DEPTH


def test_a_whole_explanation_fits_the_event_budget() -> None:
    big = '"' + "x" * (MAX_VALUE_CHARS - 3) + '…"'
    differences = [
        DbDifference(table="t" * 200, record=f"r{i}", field="f" * 200, expected=big, actual=big, change="changed")
        for i in range(MAX_DIFFERENCES)
    ]
    arguments = bounded_copy({f"k{i}": "v" * 400 for i in range(20)}, chars=MAX_ARGUMENTS_CHARS)
    actions = [
        UnmatchedAction(name="n" * 200, arguments=arguments, closest=CalledTool(name="c", arguments=arguments))
        for _ in range(20)
    ]
    value = FailureExplanation(summary="s", db=DbExplanation(differences=differences, total=70), actions=actions)
    assert len(value.model_dump_json()) > MAX_EXPLANATION_CHARS
    fitted = fit(value)
    assert len(fitted.model_dump_json()) <= MAX_EXPLANATION_CHARS
    assert fitted.db is not None and fitted.db.total == 70 and fitted.db.truncated
    assert 1 <= len(fitted.db.differences) < MAX_DIFFERENCES and len(fitted.actions) >= 1


def test_json_excerpts_and_bounded_copies_never_raise_and_stay_small() -> None:
    deep: Any = {}
    for _ in range(50_000):
        deep = {"k": deep}
    assert len(json_excerpt(deep, 100)) == 100
    assert json_excerpt(10**5000, 100) == '"(an integer of 16610 bits)"'
    assert json_excerpt("\ud800 lone surrogate", 100).encode("utf-8")
    copied = bounded_copy({"a": "x" * 10_000, "deep": deep, "many": list(range(1000))}, chars=600, max_string=300)
    text = json.dumps(copied, ensure_ascii=False)
    assert len(text) < 1500 and "… 980 more" in text


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**100), 2**100) | st.floats(allow_nan=False) | st.text(max_size=30),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
        max_leaves=20,
    )
)
def test_short_excerpts_are_the_json_itself(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    excerpt = json_excerpt(value, MAX_VALUE_CHARS)
    if len(text) <= MAX_VALUE_CHARS:
        assert excerpt == text
    else:
        assert len(excerpt) == MAX_VALUE_CHARS and excerpt.endswith("…") and text.startswith(excerpt[:-1])


# -- the closest call ------------------------------------------------------------------------------------------------


def gold_action(name: str, compare_args: list[str] | None = None, **arguments: Any) -> Any:
    from tau2.data_model.tasks import Action

    return Action(action_id="a", name=name, arguments=arguments, compare_args=compare_args)


def test_the_closest_call_is_the_same_tool_first_then_the_fewest_differences() -> None:
    action = gold_action("cancel_pending_order", order_id="#W1", reason="no longer needed")
    calls = [
        _Call("get_order_details", {"order_id": "#W1"}, "assistant", 3),
        _Call("cancel_pending_order", {"order_id": "#W1-x", "reason": "ordered by mistake"}, "assistant", 5),
        _Call("cancel_pending_order", {"order_id": "#W1-x", "reason": "no longer needed"}, "assistant", 7),
        _Call("cancel_pending_order", {"order_id": "#W1-y", "reason": "no longer needed"}, "assistant", 9),
    ]
    found = closest_call(action, calls)
    assert found is not None and (found[0].step, found[1]) == (7, ["order_id"])
    found = closest_call(action, calls[:1])
    assert found is not None and found[0].name == "get_order_details" and found[1] == ["reason"]
    assert closest_call(action, [_Call("get_user_details", {"user_id": "u"}, "assistant", 2)]) is None


def test_differences_follow_taus_compare_args() -> None:
    action = gold_action("book", compare_args=["flight"], flight="HAT1", note="anything")
    found = closest_call(action, [_Call("book", {"flight": "HAT2", "note": "other"}, "assistant", 4)])
    assert found is not None and found[1] == ["flight"]


# -- markdown --------------------------------------------------------------------------------------------------------


def rendered(markdown: str, *, html: bool = False) -> str:
    html_text: str = MarkdownIt("commonmark", {"html": html}).render(markdown)
    return html_text


@pytest.mark.parametrize(
    "text",
    [
        REPLY_FORMAT_DETAIL,
        "`starts with a backtick",
        "ends with two ``",
        " padded ",
        "<script>alert(1)</script> *not emphasis* [link](http://x)",
        "line one\n# not a heading\n- not a list",
        "",
    ],
)
def test_code_spans_render_their_text_verbatim(text: str) -> None:
    for html in (False, True):
        page = rendered(f"- ↳ Error: {code_span(text)}", html=html)
        [code] = re.findall(r"<code>(.*?)</code>", page, re.DOTALL)
        expected = (text.replace("\n", " ") or " ").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert code == expected.replace('"', "&quot;")
        assert "<script>" not in page and "<h1>" not in page


def explanation() -> FailureExplanation:
    differences = [
        DbDifference(
            table="orders",
            record="#W2378156",
            field="status",
            expected='"cancelled"',
            actual='"pending"',
            change="changed",
        ),
        DbDifference(
            table="orders", record="#W2378156", field="payment_history[1]", expected='{"a": 1}', change="missing_field"
        ),
        DbDifference(
            table="orders", record="#W9", field="", actual='{"note": "<json>x</json>"}', change="unexpected_record"
        ),
        DbDifference(table="users", record="u1", field="address.city", expected='"a"', actual='"b"', change="changed"),
    ]
    action = UnmatchedAction(
        name="cancel_pending_order",
        arguments={"order_id": "#W2378156", "reason": "no longer needed"},
        closest=CalledTool(name="cancel_pending_order", arguments={"order_id": "#W2378156-x"}, step=7),
        differing_arguments=["order_id"],
    )
    result = FailureExplanation(
        summary="",
        db=DbExplanation(differences=differences, total=5, truncated=False),
        communicate=CommunicateExplanation(missing=["mastercard"]),
        actions=[action],
    )
    result.summary = summarize(result)
    return result


def test_the_summary_line_and_the_markdown_lines_of_an_explanation() -> None:
    value = explanation()
    assert value.summary == (
        "database: 5 differences (orders #W2378156 status, orders #W2378156 payment_history[1] and 3 more); "
        "never told the user: 1 required string; 1 gold action not matched (cancel_pending_order)"
    )
    assert explanation_lines(value) == [
        'Database: `orders #W2378156 status`: expected `"cancelled"`, got `"pending"`',
        'Database: `orders #W2378156 payment_history[1]`: missing (expected `{"a": 1}`)',
        'Database: `orders #W9`: unexpected record (got `{"note": "<json>x</json>"}`)',
        "Database: and 2 more differences",
        "Never told the user: `mastercard`",
        'Gold action not matched: `cancel_pending_order {"order_id": "#W2378156", "reason": "no longer needed"}`; '
        'closest call (step 7): `cancel_pending_order {"order_id": "#W2378156-x"}`, differs in `order_id`',
    ]


def failed_battle() -> BattleResult:
    result = battle_result()
    failed = next(a for a in result.attempts if a.outcome == "failure")
    failed.failure = Failure(
        category=FailureCategory.FORMAT_ERROR, fault_author=FaultAuthor.WHITE_AGENT, detail=REPLY_FORMAT_DETAIL
    )
    failed.explanation = explanation()
    return result


def test_the_summary_shows_the_explanation_under_the_failed_attempt_and_keeps_json_tags() -> None:
    markdown = render_markdown(failed_battle())
    lines = markdown.splitlines()
    error = next(i for i, line in enumerate(lines) if "↳ Error:" in line)
    assert lines[error + 1] == '    - ↳ Database: `orders #W2378156 status`: expected `"cancelled"`, got `"pending"`'
    for html in (False, True):  # the terminal (rich, html off) and the battle page (html on, then nh3)
        page = rendered(markdown, html=html)
        assert "expected &lt;json&gt;{...}&lt;/json&gt;, a ```json block" in page
        assert "&lt;json&gt;x&lt;/json&gt;" in page


def with_pass_hat(result: BattleResult, value: float | None) -> BattleResult:
    """``result`` with its macro pass^4 set to ``value`` (the statistics models are frozen: copies)."""
    macro = list(result.summary.macro)
    macro[3] = macro[3].model_copy(update={"pass_hat_mean": value})
    result.summary = result.summary.model_copy(update={"macro": macro})
    return result


@pytest.mark.parametrize(
    ("pass_hat", "figure", "winner"),
    [(0.0, "0.000", "green"), (0.4999, "0.4999", "green"), (0.5, "0.500", "white"), (0.75, "0.750", "white")],
)
def test_the_winner_rule_in_words_with_the_battles_figure(pass_hat: float, figure: str, winner: str) -> None:
    result = with_pass_hat(battle_result(), pass_hat)
    rule = winner_rule(result)
    assert rule == f"the white agent wins when macro pass^4 >= 0.5; this battle: {figure}, so the {winner} agent wins"
    assert (winner_for(result, "white_agent") == "white_agent") == (winner == "white")
    assert f"- winner rule: {rule}" in render_markdown(result)


def test_the_winner_rule_without_the_figure() -> None:
    result = with_pass_hat(battle_result(), None)
    assert winner_rule(result).endswith("this battle: n/a (no task has 4 counted attempts), so the green agent wins")


def test_the_winner_rule_is_written_when_set_and_absent_from_older_results() -> None:
    result = battle_result()
    assert "winner_rule" not in result.model_dump(mode="json")
    result.winner_rule = winner_rule(result)
    data = result.model_dump(mode="json")
    assert data["winner_rule"] == result.winner_rule
    assert BattleResult.model_validate(data) == result


def _attempt_details(attempt: Any) -> dict[str, Any]:
    """The attempt_finished event's data through the one model that builds it, less what every event carries."""
    data = AttemptFinished.from_result(attempt, done=1, total=1).data()
    keep = ("fault_author", "failure_detail", "steps", "duration_s", "explanation", "trajectory_file")
    return {key: data[key] for key in keep}


def test_the_attempt_finished_event_carries_the_attempt_details() -> None:
    result = failed_battle()
    failed = next(a for a in result.attempts if a.explanation is not None)
    details = _attempt_details(failed)
    assert details == {
        "fault_author": "white_agent",
        "failure_detail": REPLY_FORMAT_DETAIL,
        "steps": failed.steps,
        "duration_s": failed.duration_s,
        "explanation": failed.explanation.model_dump(mode="json") if failed.explanation else None,
        "trajectory_file": failed.trajectory_file,
    }
    assert json.loads(json.dumps(details)) == details
    success = next(a for a in result.attempts if a.outcome == "success")
    assert _attempt_details(success) | {"steps": 0, "duration_s": 0, "trajectory_file": None} == {
        "fault_author": None,
        "failure_detail": None,
        "steps": 0,
        "duration_s": 0,
        "explanation": None,
        "trajectory_file": None,
    }
