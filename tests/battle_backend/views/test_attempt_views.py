"""The viewer's pure parts on odd input: explanation and trajectory views, the attempt's header, the page they make
(never a crash, never agent markup), and the filter rule."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from battle_backend.views.attempt_data import AttemptData, attempt_path
from battle_backend.views.attempt_filter import AttemptFilter
from battle_backend.views.explanation import explanation_view
from battle_backend.views.rendering import Renderer
from battle_backend.views.trajectory import trajectory_view
from tests.battle_backend.attempt_samples import explanation, trajectory
from tests.battle_backend.views.test_rendering import JSON, unsafe

HOSTILE_TEXT = st.sampled_from(["<script>alert(1)</script>", '<img src=x onerror="alert(2)">', "x" * 30_000, "ok"])
ODD = JSON | HOSTILE_TEXT


class _Battle:
    """What attempt.html reads from a battle."""

    battle_id = "b-1"


@settings(max_examples=120, deadline=None)
@given(
    explanation_raw=st.one_of(
        ODD,
        st.fixed_dictionaries(
            {
                "db": st.fixed_dictionaries(
                    {"differences": st.lists(st.dictionaries(st.text(max_size=8), ODD), max_size=3)}
                )
            },
            optional={"actions": st.lists(ODD, max_size=3), "summary": ODD, "communicate": ODD, "env_assertions": ODD},
        ),
    ),
    trajectory_raw=st.one_of(
        ODD,
        st.fixed_dictionaries(
            {
                "messages": st.lists(
                    st.dictionaries(
                        st.sampled_from(
                            ["role", "content", "tool_calls", "step", "latency_s", "error", "tool_call_id"]
                        ),
                        ODD,
                    ),
                    max_size=4,
                )
            },
            optional={"message_count": ODD, "omitted_messages": ODD, "truncated": ODD},
        ),
    ),
    detail=st.dictionaries(
        st.sampled_from(["outcome", "reward", "category", "steps", "duration_s", "failure_detail"]), ODD
    ),
)
def test_odd_attempts_never_crash_the_viewer(explanation_raw: Any, trajectory_raw: Any, detail: dict[str, Any]) -> None:
    data = AttemptData(key=("t/1", 1), detail=detail, entry=None, previous=None, next=("t/1", 2))
    html = Renderer().render(
        "attempt.html",
        battle=_Battle(),
        header=data.header,
        explanation=explanation_view(explanation_raw),
        trajectory=trajectory_view(trajectory_raw),
        previous=data.previous,
        next=data.next,
        jsonl_url="/x/trajectory.jsonl",
        facts=None,
    )
    assert unsafe(html.split("<main", 1)[1]) == []
    assert "x" * 20_001 not in html


def test_explanation_view_reads_the_contract_shape() -> None:
    view = explanation_view(explanation())
    assert view is not None and view.db_checked and view.db_left_out == 0
    [difference] = view.db_differences
    assert (difference.table, difference.record, difference.field) == ("orders", "#W2378156", "status")
    assert (difference.expected, difference.actual, difference.change) == ('"cancelled"', '"pending"', "changed")
    [action] = view.actions
    assert action.closest_step == 7 and action.differing_arguments == ["order_id"]
    assert view.missing_communicate == ["your refund of $54.04 is on its way"]
    assert explanation_view(None) is None and explanation_view("text") is None
    passed_db = explanation_view({"summary": "s", "db": None, "communicate": None, "actions": [], "env_assertions": []})
    assert passed_db is not None and not passed_db.db_checked


def test_trajectory_view_links_results_to_their_calls() -> None:
    view = trajectory_view(trajectory())
    assert view is not None and view.message_count == 5 and view.not_shown == 0
    tool = view.messages[3]
    assert (tool.role, tool.answers, tool.latency_text) == ("tool", "get_order_details", "+0.003 s")
    assert view.messages[2].tool_calls[0].arguments == '{\n  "order_id": "#W2378156"\n}'
    assert [m.role_label for m in view.messages[:2]] == ["white agent", "user"]


def test_attempt_paths_are_percent_encoded() -> None:
    assert attempt_path("b 1", "retail/test/7", 3) == "/ui/battles/b%201/attempts/retail/test/7/3"
    assert attempt_path("b", 'x/"?#<', 1) == "/ui/battles/b/attempts/x/%22%3F%23%3C/1"


def test_filter_rule() -> None:
    none = AttemptFilter()
    failures = AttemptFilter(outcome="failure")
    category = AttemptFilter(category="format_error")
    assert none.cell_matches(None, None) and not failures.cell_matches(None, None)
    assert failures.cell_matches("failure", "x") and not failures.cell_matches("success", "")
    assert category.cell_matches("failure", "format_error") and not category.cell_matches("failure", "other")
    assert AttemptFilter.from_query({"outcome": "<b>", "task": "t"}) == AttemptFilter(task="t")
