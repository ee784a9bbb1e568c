"""The battle page shows a ``certify`` battle's decision (issue 28): the claim, the decision, the confidence sequence
at the stop, attempts used against the fixed design, and the estimate with its interval labelled as not a
fixed-sample interval. The certification object is posted data: every string in it is escaped, malformed values
leave the box out instead of failing the page."""

from __future__ import annotations

import html as html_module
from typing import Any

from battle_backend.battles.arena_results import arena_schema_problem, parse_arena_result
from battle_backend.views.certification import MAX_CERT_TEXT
from battle_backend.views.rendering import Renderer
from battle_backend.views.results import build_result_view
from green_agent.statistics.certification import build_certification
from tests.battle_backend.views.test_rendering import unsafe
from tests.green_agent.engine.results.builders import battle_result


def certified_result(**changes: Any) -> dict[str, Any]:
    """An Arena result as the green agent posts it, with the certification of a battle that stopped early."""
    data: dict[str, Any] = battle_result().model_dump(mode="json")
    cert = build_certification(
        claim="pass^1 >= 0.3",
        j=1,
        threshold=0.3,
        confidence=0.95,
        values=[1.0, 1.0, 0.75, 1.0, 1.0, 1.0],
        decision="certified",
        tasks_budget=16,
        attempts_used=26,
        attempts_fixed_design=64,
        order_seed=0,
        order=[f"retail/test/{i}" for i in range(16)],
        waiting_for=None,
    ).model_dump(mode="json")
    data["certification"] = {**cert, **changes}
    return data


class _Battle:
    def __init__(self) -> None:
        self.battle_id = "b-1"
        self.result = {"winner": "white_agent", "finish_time": "t"}


def page(data: dict[str, Any]) -> str:
    return Renderer().render("_result.html", battle=_Battle(), view=build_result_view(data))


def test_the_page_shows_the_decision_the_sequence_the_attempts_and_the_labelled_estimate() -> None:
    data = certified_result()
    assert arena_schema_problem(data) is None and parse_arena_result(data) is not None  # a real, valid result
    cert = data["certification"]
    view = build_result_view(data)
    assert view.certification is not None and view.certification.decision == "certified"
    html = page(data)
    assert 'id="certification"' in html and "Certification: pass^1 &gt;= 0.3" in html
    assert '<strong id="certification-decision">CERTIFIED</strong>' in html
    assert "95% confidence sequence at the stop" in html
    sequence = f"[{cert['sequence_low']:.3f}, {cert['sequence_high']:.3f}] against threshold 0.300"
    assert sequence in html and "anytime-valid" in html
    assert "26 of the fixed design's 64 (59% fewer)" in html
    assert "after 6 of 16 tasks in the seeded order (seed 0)" in html
    estimate = f"{cert['estimate']:.3f}, interval [{cert['interval_low']:.3f}, {cert['interval_high']:.3f}]"
    assert estimate in html and "<em>not a fixed-sample interval</em>" in html
    assert html.index('id="certification"') < html.index('id="pass-table"')


def test_a_comparison_names_its_baseline_and_the_difference_scale() -> None:
    html = page(certified_result(claim="pass^1 >= baseline - 0.5", threshold=-0.5, baseline="/runs/base"))
    assert "against the baseline run" in html and "/runs/base" in html and "candidate - baseline" in html
    assert "against threshold -0.500" in html


def test_hostile_text_in_the_certification_is_escaped_and_bounded() -> None:
    attack = '<script>window.__pwned = 1</script><img src=x onerror="alert(1)">'
    data = certified_result(claim=attack, baseline=attack, waiting_for=attack + "x" * 5000, decision="inconclusive")
    assert arena_schema_problem(data) is None  # the schema lets any string through: the page must escape it
    html = page(data)
    assert [p for p in unsafe(html) if not p.startswith("tag svg")] == []
    assert "<script" not in html and "&lt;script&gt;" in html and "<img" not in html
    assert "x" * MAX_CERT_TEXT not in html  # cut
    assert "INCONCLUSIVE" in html and "the sequence waited on" in html


def test_a_malformed_certification_leaves_the_box_out_and_the_page_renders() -> None:
    for bad in ({"decision": "won"}, {"sequence_low": "0.5"}, {"attempts_used": -1}, {"confidence": 2}):
        data = certified_result(**bad)
        view = build_result_view(data)
        assert view.certification is None, bad
        html = page(data)
        assert 'id="certification"' not in html and 'id="pass-table"' in html
    foreign = {"attempts": [], "summary": {"macro": []}, "certification": "certified"}
    assert build_result_view(foreign).certification is None


def test_a_battle_without_certify_has_no_box() -> None:
    data = certified_result()
    data.pop("certification")
    assert build_result_view(data).certification is None
    assert 'id="certification"' not in page(data)


def test_a_pass_k_claim_says_its_tasks_stopped_at_their_first_failure() -> None:
    """A pass^k certify battle skips a task's remaining attempts at its first failure (``task_stop``, issue 28): the
    page says how many and that they are not failures of the agent, since the grid shows them as not run."""
    stop = {"rule": "stop_task_at_first_failure", "attempts_skipped": 7, "tasks_stopped": 3, "tasks_cut": 1}
    html = page(certified_result(task_stop={**stop, "skipped": [], "note": "n"}))
    row = html[html.index('id="certification-task-stop"') :]
    row = html_module.unescape(row[: row.index("</tr>")])
    assert "7 attempt(s) of 3 task(s) not run after the task's first failure" in row
    assert "not failures of the agent" in row and "1 task(s) cut by the battle's stop" in row
    for bad in ("7", {"attempts_skipped": "7"}, {"attempts_skipped": -1, "tasks_stopped": 3}):
        data = certified_result(task_stop=bad)
        html = page(data)
        assert 'id="certification"' in html and 'id="certification-task-stop"' not in html, bad
    assert 'id="certification-task-stop"' not in page(certified_result())
