"""What ``arena run`` prints: the ETA on the progress bar (from attempts done / total since the battle started), the
summary once and rendered (the ``battle_finished`` event's raw markdown is not echoed), the reply-format hint's
``<json>`` tags visible, and no escape codes when the output is not a terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from launcher.cli.battle_display import (
    NO_ESTIMATE,
    BattleDisplay,
    estimate_remaining_s,
    format_eta,
    print_summary,
)

SUMMARY = "# Arena pass^k evaluation\n\n- battle: `b1`\n- micro success rate: 0.500 [0.150, 0.850] (Wilson 95%)\n"


class FakeClock:
    """A monotonic clock the test moves by hand (the bar reads it through rich's get_time)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pipe_console() -> tuple[Console, io.StringIO]:
    """A console writing to a pipe-like buffer (not a terminal: what CI and ``| tee`` see)."""
    buffer = io.StringIO()
    return Console(file=buffer, width=160), buffer


# ------------------------------------------------------------------------------------------------------------- ETA


def test_no_estimate_until_an_attempt_of_this_run_finished() -> None:
    assert estimate_remaining_s(0, 8, 0, 30.0) is None
    assert estimate_remaining_s(3, None, 0, 30.0) is None  # total unknown
    assert estimate_remaining_s(2, 8, 2, 30.0) is None  # only carried (resumed) attempts so far


def test_estimate_extrapolates_from_attempts_done() -> None:
    assert estimate_remaining_s(2, 8, 0, 20.0) == pytest.approx(60.0)  # 10 s each, 6 left
    # a resume carried 4 attempts that took no time in this run: 1 new attempt in 10 s, 3 left
    assert estimate_remaining_s(5, 8, 4, 10.0) == pytest.approx(30.0)
    assert estimate_remaining_s(8, 8, 0, 80.0) == 0.0
    assert estimate_remaining_s(9, 8, 0, 80.0) == 0.0  # never negative


def test_eta_format() -> None:
    assert format_eta(None) == f"ETA {NO_ESTIMATE}" == "ETA \u2013"
    assert format_eta(0.0) == "ETA 0:00"
    assert format_eta(59.6) == "ETA 1:00"
    assert format_eta(75.0) == "ETA 1:15"
    assert format_eta(3 * 3600 + 62.0) == "ETA 3:01:02"


def final_bar(events: list[tuple[float, dict[str, object]]], clock_at_end: float) -> str:
    """Feed events at the given clock times; the bar's last line as a pipe sees it (drawn once, at the end)."""
    console, buffer = pipe_console()
    clock = FakeClock()
    with BattleDisplay(console, quiet=False, clock=clock) as display:
        for at, event in events:
            clock.now = at
            display.on_event(event, "")
        clock.now = clock_at_end
    return buffer.getvalue()


def test_bar_says_dash_until_the_first_attempt_finishes() -> None:
    output = final_bar([(100.0, {"type": "battle_started", "battle_id": "b1", "attempts_total": 4})], 160.0)
    assert f"ETA {NO_ESTIMATE}" in output
    assert "0/4" in output


def test_bar_eta_counts_from_the_battle_start_not_the_agent_startup() -> None:
    events: list[tuple[float, dict[str, object]]] = [
        (130.0, {"type": "battle_started", "battle_id": "b1", "attempts_total": 4}),  # agents took 30 s to start
        (140.0, {"type": "attempt_finished", "outcome": "success", "done": 1, "total": 4}),
    ]
    output = final_bar(events, 140.0)
    assert "ETA 0:30" in output  # 10 s per attempt, 3 left; the 30 s of startup do not count
    assert "1/4" in output


def test_bar_eta_of_a_resumed_battle_ignores_the_carried_attempts() -> None:
    events: list[tuple[float, dict[str, object]]] = [
        (100.0, {"type": "battle_started", "battle_id": "b1", "attempts_total": 8, "resumed_attempts": 6}),
        (120.0, {"type": "attempt_finished", "outcome": "failure", "done": 7, "total": 8}),
    ]
    output = final_bar(events, 120.0)
    assert "ETA 0:20" in output  # one attempt of this run in 20 s, one left
    assert "7/8" in output


def test_attempts_certify_skipped_leave_the_total_so_the_bar_reaches_it() -> None:
    """A pass^k certify battle skips a task's remaining attempts at its first failure (``attempts_skipped``): they
    will never finish, so the bar's total and its ETA leave them out."""
    skipped = {"type": "attempts_skipped", "task_key": "retail/test/0", "failed_attempt": 1, "attempts": [2, 3, 4]}
    events: list[tuple[float, dict[str, object]]] = [
        (100.0, {"type": "battle_started", "battle_id": "b1", "attempts_total": 8}),
        (110.0, {"type": "attempt_finished", "outcome": "failure", "done": 1, "total": 8}),
        (110.0, skipped),
        (120.0, {"type": "attempt_finished", "outcome": "success", "done": 2, "total": 8}),
    ]
    output = final_bar(events, 120.0)
    assert "2/5" in output and "ETA 0:30" in output  # 10 s per attempt, 3 left (not 6)
    done: list[tuple[float, dict[str, object]]] = [
        (130.0 + a, {"type": "attempt_finished", "outcome": "success", "done": a, "total": 8}) for a in (3, 4, 5)
    ]
    assert "5/5" in final_bar([*events, *done, (140.0, skipped)], 140.0)  # a repeated skip is not counted twice


def test_a_skip_outside_the_battles_tasks_or_attempts_does_not_shrink_the_total() -> None:
    """Only the battle's own tasks and attempts 1..k leave the total: a malformed or hostile ``attempts_skipped``
    (another task, attempt numbers past k, a flood of keys) changes nothing else."""
    started = {"type": "battle_started", "battle_id": "b1", "attempts_total": 8, "k": 4, "tasks": ["t/a", "t/b"]}
    events: list[tuple[float, dict[str, object]]] = [
        (100.0, started),
        (110.0, {"type": "attempt_finished", "outcome": "failure", "done": 1, "total": 8}),
        (110.0, {"type": "attempts_skipped", "task_key": "t/a", "failed_attempt": 1, "attempts": [2, 3, 4, 9, 99]}),
        *[
            (111.0, {"type": "attempts_skipped", "task_key": f"t/x{i}", "failed_attempt": 1, "attempts": [2, 3, 4]})
            for i in range(5)
        ],
    ]
    assert "1/5" in final_bar(events, 120.0)


# --------------------------------------------------------------------------------------------- summary, once


def test_battle_finished_text_is_not_echoed_and_the_summary_prints_once() -> None:
    console, buffer = pipe_console()
    with BattleDisplay(console, quiet=False) as display:
        display.on_event({"type": "battle_started", "battle_id": "b1", "attempts_total": 2}, "🎯 Starting")
        display.on_event({"type": "battle_finished", "done": 2, "total": 2}, SUMMARY)
    assert display.finished_markdown == SUMMARY
    print_summary(console, SUMMARY)
    output = buffer.getvalue()
    assert "🎯 Starting" in output  # ordinary progress lines still print
    assert output.count("Arena pass^k evaluation") == 1
    assert "# Arena" not in output  # rendered, not raw
    assert "\x1b[" not in output  # no escape codes in a pipe


def test_quiet_display_prints_nothing_but_the_summary() -> None:
    console, buffer = pipe_console()
    with BattleDisplay(console, quiet=True) as display:
        display.on_event({"type": "attempt_finished", "outcome": "success", "done": 1, "total": 2}, "✅ Attempt 1/2")
    print_summary(console, SUMMARY)
    output = buffer.getvalue()
    assert "Attempt 1/2" not in output
    assert output.count("Arena pass^k evaluation") == 1


def test_no_summary_prints_nothing() -> None:
    console, buffer = pipe_console()
    print_summary(console, None)
    print_summary(console, "")
    assert buffer.getvalue() == ""


@pytest.mark.parametrize(
    "line",
    [
        'expected `<json>{"name": "get_user", "arguments": {"id": 1}}</json>`',  # as code (the report's form)
        'expected <json>{"name": "get_user", "arguments": {"id": 1}}</json>',  # raw: a terminal renders no HTML
    ],
)
def test_reply_format_hint_keeps_its_json_tags(line: str) -> None:
    console, buffer = pipe_console()
    print_summary(console, f"# Summary\n\n- format_error: the agent's reply was not an action; {line}\n")
    assert '<json>{"name": "get_user", "arguments": {"id": 1}}</json>' in buffer.getvalue()


def test_reply_format_hint_in_a_terminal_keeps_its_json_tags() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=True, color_system="truecolor")
    print_summary(console, "- expected `<json>{...}</json>`\n")
    output = buffer.getvalue()
    assert "\x1b[" in output  # styled (a code span)...
    assert "<json>{...}</json>" in output  # ...and every character of it shown
