"""The trajectory posted with an attempt's event: bounded, latencies from timestamps, hostile content kept as data.

The bounds are checked with the backend's own measure and value checks (``check_json_value``), so a trajectory that
passes here is one our backend stores rather than refusing the attempt's whole event.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from battle_backend.battles.json_limits import JsonLimits, check_json_value
from green_agent.wire.trajectory import (
    MAX_STRING_CHARS,
    MAX_TRAJECTORY_BYTES,
    TRAJECTORY_SCHEMA,
    TrajectoryFileError,
    compact_records,
    json_size,
    latency_s,
    read_trajectory,
    trajectory_for_event,
    trajectory_path,
)


def message(step: int, role: str = "assistant", content: Any = "hello", **extra: Any) -> dict[str, Any]:
    """A tau2 message as the engine writes it to a trajectory file."""
    seconds = step % 60
    record = {"role": role, "content": content, "tool_calls": None, "turn_idx": step}
    record["timestamp"] = f"2026-11-23T01:{step // 60 % 60:02d}:{seconds:02d}.000000"
    return {**record, **extra}


def write_file(path: Path, records: list[Any], header: bool = True) -> Path:
    lines = [{"attempt": {"battle_id": "b", "outcome": "failure"}}] if header else []
    path.write_text("\n".join(json.dumps(r) for r in [*lines, *records]) + "\n", encoding="utf-8")
    return path


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def backend_accepts(value: Any) -> int:
    """Size as the backend measures it; raises if the backend would refuse a value in it (400)."""
    return check_json_value(value, JsonLimits())


def test_a_small_conversation_is_posted_whole_in_the_contract_shape() -> None:
    call = {"id": "call_001", "name": "get_order_details", "arguments": {"order_id": "#W1"}, "requestor": "assistant"}
    records = [
        message(0, content="Hi! How can I help?"),
        message(1, role="user", content="cancel my order"),
        message(2, content=None, tool_calls=[call]),
        {"id": "call_001", "role": "tool", "content": "{}", "requestor": "assistant", "error": True, "turn_idx": 3},
    ]
    trajectory = compact_records(records)
    assert trajectory["schema"] == TRAJECTORY_SCHEMA
    assert trajectory["message_count"] == 4
    assert trajectory["omitted_messages"] == 0
    assert trajectory["truncated"] is False
    first, _, with_call, tool = trajectory["messages"]
    assert set(first) == {"step", "role", "content", "tool_calls", "tool_call_id", "error", "timestamp", "latency_s"}
    assert first["latency_s"] is None
    assert with_call["tool_calls"] == [call]
    assert with_call["latency_s"] == 1.0
    assert (tool["role"], tool["tool_call_id"], tool["error"], tool["step"]) == ("tool", "call_001", True, 3)
    assert tool["timestamp"] is None and tool["latency_s"] is None


def test_huge_strings_are_cut_and_say_so() -> None:
    huge = "x" * 1_000_000
    call = {"id": "c", "name": "n" * 10_000, "arguments": {"text": huge, huge: 1}, "requestor": "assistant"}
    trajectory = compact_records([message(0, content=huge), message(1, tool_calls=[call])])
    assert trajectory["truncated"] is True
    content = trajectory["messages"][0]["content"]
    assert content.startswith("x" * MAX_STRING_CHARS) and len(content) < MAX_STRING_CHARS + 100
    assert "996000 more characters" in content
    posted_call = trajectory["messages"][1]["tool_calls"][0]
    assert len(posted_call["name"]) < 300
    assert all(len(key) < MAX_STRING_CHARS + 100 for key in posted_call["arguments"])
    assert backend_accepts(trajectory) <= MAX_TRAJECTORY_BYTES


def test_ten_thousand_messages_keep_the_first_and_last_within_the_budget(tmp_path: Path) -> None:
    records = [
        message(i, role="user" if i % 2 else "assistant", content=f"message {i} " + "y" * 200) for i in range(10_000)
    ]
    path = write_file(tmp_path / "t.jsonl", records)
    trajectory = read_trajectory(path)
    size = backend_accepts(trajectory)
    assert MAX_TRAJECTORY_BYTES * 0.8 < size <= MAX_TRAJECTORY_BYTES
    kept = trajectory["messages"]
    assert trajectory["message_count"] == 10_000
    assert trajectory["omitted_messages"] == 10_000 - len(kept) > 0
    steps = [m["step"] for m in kept]
    assert steps[0] == 0 and steps[-1] == 9_999
    # One gap, in the middle: the first ones, then the last ones, in order.
    gaps = [i for i in range(1, len(steps)) if steps[i] != steps[i - 1] + 1]
    assert len(gaps) == 1
    assert 0.3 < gaps[0] / len(steps) < 0.7
    # The same records in memory give the same result as the file.
    assert compact_records(records) == trajectory


def test_a_smaller_budget_is_kept_too() -> None:
    records = [message(i, content="z" * 3000) for i in range(100)]
    for budget in (8 * 1024, 50_000, 100_000):
        trajectory = compact_records(records, max_bytes=budget)
        assert json_size(trajectory) <= budget
        assert trajectory["messages"][0]["step"] == 0 and trajectory["messages"][-1]["step"] == 99


def test_one_enormous_message_is_shrunk_to_its_share_not_dropped() -> None:
    wide = {f"k{i}": "v" * 3999 for i in range(5000)}  # 20 MB of arguments in one call
    records = [message(0), message(1, tool_calls=[{"id": "c", "name": "f", "arguments": wide}]), message(2)]
    trajectory = compact_records(records)
    assert [m["step"] for m in trajectory["messages"]] == [0, 1, 2]
    assert trajectory["omitted_messages"] == 0 and trajectory["truncated"] is True
    assert json_size(trajectory["messages"][1]) <= MAX_TRAJECTORY_BYTES // 4
    assert backend_accepts(trajectory) <= MAX_TRAJECTORY_BYTES


def test_hostile_content_stays_data() -> None:
    forged = json.dumps({"schema": TRAJECTORY_SCHEMA, "omitted_messages": 999, "messages": []})
    script = "<script>alert(document.cookie)</script><img src=x onerror=alert(1)>"
    deep: Any = "bottom"
    for _ in range(500):
        deep = {"d": [deep]}
    records = [
        message(0, content=forged),
        message(1, role="admin", content=script, messages=["injected"], omitted_messages=5),
        message(2, content={"not": "a string"}, tool_calls=[{"id": 1, "name": None, "arguments": deep}]),
        message(3, content="lone \ud800 surrogate", tool_calls=[{"arguments": {"n": math.nan, "big": 10**100}}]),
        message(4, role="tool", id='call\u0000\n"x', error="yes"),
    ]
    trajectory = compact_records(records)
    first, second, third, fourth, fifth = trajectory["messages"]
    assert first["content"] == forged and trajectory["omitted_messages"] == 0
    assert second["content"] == script and second["role"] == "system" and "messages" not in second
    assert third["content"] == '{"not": "a string"}'
    assert third["tool_calls"][0]["id"] == "1" and third["tool_calls"][0]["name"] is None
    assert depth(trajectory) <= 24  # the backend refuses JSON nested deeper than 64 levels
    assert fourth["content"] == "lone \ufffd surrogate"
    assert fourth["tool_calls"][0]["arguments"] == {"n": "nan", "big": str(10**100)}
    assert fifth["tool_call_id"] == 'call\u0000\n"x' and fifth["error"] is False
    assert backend_accepts(trajectory) <= MAX_TRAJECTORY_BYTES


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        ("2026-11-23T01:37:51.678691", "2026-11-23T01:37:52.091000", 0.412),
        ("2026-11-23T01:37:51Z", "2026-11-23T01:38:51+00:00", 60.0),
        (None, "2026-11-23T01:37:51", None),
        ("2026-11-23T01:37:51", "not a time", None),
        ("2026-11-23T01:37:52", "2026-11-23T01:37:51", None),  # the clock went backwards
        ("2026-11-23T01:37:51", "2026-11-23T01:37:52Z", None),  # naive and aware cannot be compared
        (12, "2026-11-23T01:37:51", None),
    ],
)
def test_latency_is_the_delta_to_the_previous_message(previous: Any, current: Any, expected: float | None) -> None:
    assert latency_s(previous, current) == expected


def test_latency_spans_dropped_messages_correctly(tmp_path: Path) -> None:
    records = [message(i, content="w" * 3000) for i in range(400)]
    trajectory = read_trajectory(write_file(tmp_path / "t.jsonl", records))
    assert trajectory["omitted_messages"] > 0
    # Every kept message's latency is to its predecessor in the file (one second), also right after the gap.
    assert all(m["latency_s"] == 1.0 for m in trajectory["messages"][1:] if m["step"] % 60)


def test_the_header_line_is_not_posted(tmp_path: Path) -> None:
    trajectory = read_trajectory(write_file(tmp_path / "t.jsonl", [message(0), message(1)]))
    assert trajectory["message_count"] == 2
    assert "attempt" not in json.dumps(trajectory)


def test_a_line_the_engine_cut_is_shown_as_its_preview(tmp_path: Path) -> None:
    path = write_file(tmp_path / "t.jsonl", [message(0), {"cut": True, "preview": '{"role": "tool", "content": "...'}])
    cut = read_trajectory(path)["messages"][1]
    assert cut["role"] == "system" and cut["content"].startswith('{"role": "tool"')


def test_corrupt_or_missing_files_give_no_trajectory(tmp_path: Path) -> None:
    corrupt = tmp_path / "trajectories" / "retail-test-0001-attempt01.jsonl"
    corrupt.parent.mkdir()
    corrupt.write_text('{"attempt": {}}\n{"role": "user", "content": "a"}\nnot json\n', encoding="utf-8")
    with pytest.raises(TrajectoryFileError):
        read_trajectory(corrupt)
    data = {
        "task_key": "retail/test/1",
        "attempt": 1,
        "trajectory_file": "trajectories/retail-test-0001-attempt01.jsonl",
    }
    assert trajectory_for_event(tmp_path, data) is None
    assert trajectory_for_event(tmp_path, {**data, "trajectory_file": "trajectories/absent.jsonl"}) is None
    corrupt.write_text("[1, 2]\n", encoding="utf-8")
    assert trajectory_for_event(tmp_path, data) is None
    corrupt.write_bytes(b"\xff\xfe garbage")
    assert trajectory_for_event(tmp_path, data) is None
    assert trajectory_for_event(None, data) is None


def test_where_the_file_is_found(tmp_path: Path) -> None:
    reported = {"task_key": "retail/test/7", "attempt": 2, "trajectory_file": "trajectories/x.jsonl"}
    assert trajectory_path(tmp_path, reported) == tmp_path / "trajectories" / "x.jsonl"
    # Before the engine reported the path: its naming rule (split "-" is written "all").
    assert trajectory_path(tmp_path, {"task_key": "retail/test/7", "attempt": 2}) == (
        tmp_path / "trajectories" / "retail-test-0007-attempt02.jsonl"
    )
    assert trajectory_path(tmp_path, {"task_key": "mock/-/0", "attempt": 11}) == (
        tmp_path / "trajectories" / "mock-all-0000-attempt11.jsonl"
    )
    # No file, or a path that leaves the run directory: nothing is read.
    for bad in (None, "", "../../etc/passwd", "/etc/passwd", "trajectories/../../x"):
        assert trajectory_path(tmp_path, {**reported, "trajectory_file": bad}) is None
    for key in ("retail/../7", "retail", "a/b/c/x", 7):
        assert trajectory_path(tmp_path, {"task_key": key, "attempt": 1}) is None
