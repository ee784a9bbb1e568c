"""Why a conversation (``arena score``) or a test case (``arena eval-csv``) did not pass: one short line for the
tables' reason column.

Why a module: the results carry the reasons in several places (a judge's unscored reason, its explanation, the tool
checker's notes, the scores against the pass threshold, the expected and the called tools), and the tables showed
only an error field that is set for errored cases, so a failed case's column was empty. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MAX_REASON_CHARS = 160
"""Longest reason shown in a table cell (the JSON output keeps everything)."""


def _text(value: object) -> str:
    return " ".join(str(value).split()) if value is not None else ""


def _join(parts: Iterable[str]) -> str:
    text = "; ".join(part for part in parts if part)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def conversation_reason(conversation: Mapping[str, Any]) -> str:
    """A conversation that is not correct: its unscored reason, the interactions judged incorrect (score against the
    threshold, the judge's reasoning) and the tool checks that failed; empty for a correct one."""
    status = conversation.get("status")
    if status == "correct":
        return ""
    parts: list[str] = []
    if status == "unscored":
        parts.append(_text(conversation.get("unscored_reason")))
    threshold = conversation.get("threshold")
    interactions = conversation.get("interactions")
    for interaction in interactions if isinstance(interactions, list) else []:
        if not isinstance(interaction, Mapping):
            continue
        label = f"qa {_text(interaction.get('qa_id'))}"
        if interaction.get("status") == "incorrect":
            score = f"answer {_number(interaction.get('correctness_score'))} < {_number(threshold)}"
            explanation = _text(interaction.get("explanation"))
            parts.append(f"{label}: {score}" + (f" ({explanation})" if explanation else ""))
        elif interaction.get("status") == "unscored" and interaction.get("reason"):
            parts.append(f"{label}: unscored ({_text(interaction.get('reason'))})")
    tools = conversation.get("tool_correctness_scores")
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, Mapping) and tool.get("is_correct") is False:
            parts.append(f"tools {_number(tool.get('overall_correctness'))}: {_text(tool.get('reasoning'))}")
    return _join(parts)


def _names(calls: object) -> list[str]:
    return (
        [str(call["name"]) for call in calls if isinstance(call, Mapping) and "name" in call]
        if isinstance(calls, list)
        else []
    )


def case_reason(case: Mapping[str, Any]) -> str:
    """A CSV test case that did not pass: its error (errored, unscored), else the tools missing or not expected, the
    scores against the pass threshold and the judge's explanation; with the reply's notes. Empty when it passed."""
    raw_notes = case.get("notes")
    notes = [_text(note) for note in raw_notes if note] if isinstance(raw_notes, list) else []
    if case.get("status") == "passed":
        return _join(notes)
    if case.get("error"):
        return _join([_text(case["error"]), *notes])
    parts: list[str] = []
    expected, called = _names(case.get("expected_tools")), _names(case.get("actual_tool_calls"))
    missing = [name for name in expected if name not in called]
    extra = [name for name in called if name not in expected]
    if missing:
        parts.append("not called: " + ", ".join(missing))
    if extra:
        parts.append("not expected: " + ", ".join(extra))
    scores = case.get("scores") if isinstance(case.get("scores"), Mapping) else {}
    assert isinstance(scores, Mapping)
    threshold = case.get("pass_threshold")
    overall = scores.get("overall")
    if isinstance(overall, (int, float)) and isinstance(threshold, (int, float)) and overall < threshold:
        low = [
            f"{name.replace('_', ' ')} {_number(scores.get(key))}"
            for key, name in (("tool_selection", "tools"), ("argument_match", "arguments"), ("faithfulness", "answer"))
            if isinstance(scores.get(key), (int, float)) and scores[key] < 1.0
        ]
        parts.append(f"overall {_number(overall)} < {_number(threshold)}" + (f" ({', '.join(low)})" if low else ""))
    explanation = _text(case.get("judge_explanation"))
    if explanation:
        parts.append(explanation)
    return _join([*parts, *notes])
