"""Views of a :class:`BattleResult`: the markdown summary (the seed's wording, extended across tasks), the run
directory, and the AgentBeats winner.

Nothing here computes a statistic of its own: per-task and macro numbers come from ``green_agent.statistics``.

:func:`render_markdown` is the one source of a battle's markdown: summary.md, the A2A "Result" artifact's text, the
backend result's ``markdown_content`` are all its output (the battle keeps it as ``Battle.markdown``). The battle
backend's result table and chart are HTML views it draws from the same BattleResult JSON
(battle_backend/views/results.py), not a second markdown. ``arena run``'s terminal does not show it: it ends with a
short verdict read from summary.json (launcher/cli/run_verdict.py), the markdown being summary.md.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from green_agent.engine.attempt_details import MalformedReply
from green_agent.engine.bounded_json import json_excerpt
from green_agent.engine.budget import budget_markdown
from green_agent.engine.consistency import consistency_markdown
from green_agent.engine.costs import attempt_cost_line, cost_markdown
from green_agent.engine.explanation import (
    DbDifference,
    DbExplanation,
    FailureExplanation,
    UnmatchedAction,
    difference_place,
)
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.run_store import write_run_dir
from green_agent.statistics import MacroStat, first_k_all_pass, has_success_streak

__all__ = [
    "WIN_THRESHOLD",
    "code_span",
    "explanation_lines",
    "macro_pass_hat",
    "macro_rows",
    "render_markdown",
    "winner_for",
    "winner_rule",
    "write_run_dir",
]

WIN_THRESHOLD = 0.5
"""The white agent "wins" an AgentBeats battle when macro pass^k (j = k) is at least this. Documented in README."""


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def _by_task(result: BattleResult) -> dict[str, list[AttemptResult]]:
    groups: dict[str, list[AttemptResult]] = defaultdict(list)
    for attempt in result.attempts:
        groups[attempt.task_key].append(attempt)
    return {key: sorted(items, key=lambda a: a.attempt) for key, items in groups.items()}


def macro_rows(result: BattleResult) -> list[MacroStat]:
    """Per j: pass^j and pass@j macro means with 95% intervals and coverage, from the stored summary."""
    return list(result.summary.macro)


def macro_pass_hat(result: BattleResult, j: int) -> float | None:
    """The macro pass^j point estimate, or None when no task had j trials."""
    row = next((row for row in result.summary.macro if row.j == j), None)
    return row.pass_hat_mean if row is not None else None


def winner_for(result: BattleResult, white_name: str) -> str:
    """AgentBeats needs a winner: the white agent when macro pass^k >= WIN_THRESHOLD, else the green agent."""
    value = macro_pass_hat(result, result.config.k)
    return white_name if value is not None and value >= WIN_THRESHOLD else "green_agent"


def winner_rule(result: BattleResult) -> str:
    """:func:`winner_for`'s rule in words with this battle's figure (``BattleResult.winner_rule``), e.g. "the white
    agent wins when macro pass^4 >= 0.5; this battle: 0.000, so the green agent wins"."""
    k = result.config.k
    value = macro_pass_hat(result, k)
    rule = f"the white agent wins when macro pass^{k} >= {WIN_THRESHOLD}"
    if value is None:
        return f"{rule}; this battle: n/a (no task has {k} counted attempts), so the green agent wins"
    wins = value >= WIN_THRESHOLD
    figure = f"{value:.3f}"
    if (float(figure) >= WIN_THRESHOLD) != wins:  # 0.4999 must not read as 0.500
        figure = f"{value:.6g}"
    return f"{rule}; this battle: {figure}, so {'the white agent' if wins else 'the green agent'} wins"


_BACKTICKS = re.compile(r"`+")
_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
SPAN_CHARS = 200
"""Longest text put in one inline code span of the summary (cut with "…"); the JSON keeps the full excerpt."""


def code_span(text: str, limit: int = SPAN_CHARS) -> str:
    """``text`` as a CommonMark inline code span, so no markdown renderer drops or interprets any of it (``<json>``,
    ``*``, links, HTML): the fence is one backtick longer than the longest backtick run inside, padded with a space
    where the text starts or ends with a backtick or space; line breaks and control characters become spaces (a
    line break could start a new block); cut at ``limit`` characters."""
    if len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    text = _UNSAFE_CHARS.sub(" ", text)
    if not text:
        return "` `"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


DETAIL_CHARS = 1000
"""Longest failure detail shown in the summary (the attempt's JSON keeps all of it)."""
EXPLANATION_DIFFERENCES = 3
"""Database differences listed under a failed attempt in the summary (then "and N more")."""


def _difference_line(difference: DbDifference) -> str:
    place = code_span(difference_place(difference))
    expected = code_span(difference.expected or "")
    actual = code_span(difference.actual or "")
    text = {
        "changed": f"expected {expected}, got {actual}",
        "missing_record": f"record missing (expected {expected})",
        "unexpected_record": f"unexpected record (got {actual})",
        "missing_field": f"missing (expected {expected})",
        "unexpected_field": f"unexpected (got {actual})",
    }[difference.change]
    return f"Database: {place}: {text}"


def _call_text(name: str, arguments: dict[str, object]) -> str:
    return code_span(f"{name} {json_excerpt(arguments, SPAN_CHARS)}")


def _db_lines(db: DbExplanation) -> list[str]:
    shown = db.differences[:EXPLANATION_DIFFERENCES]
    lines = [_difference_line(d) for d in shown]
    if db.total > len(shown):
        rest = db.total - len(shown)
        lines.append(f"Database: and {rest} more difference{'s' if rest != 1 else ''}")
    if db.total == 0:
        lines.append("Database: differs from the goal state, but not in any value equality can see")
    return lines


def _action_line(action: UnmatchedAction, others: int) -> str:
    line = f"Gold action not matched: {_call_text(action.name, action.arguments)}"
    if action.closest is not None:
        step = "" if action.closest.step is None else f" (step {action.closest.step})"
        line += f"; closest call{step}: {_call_text(action.closest.name, action.closest.arguments)}"
        if action.differing_arguments:
            line += ", differs in " + ", ".join(code_span(name) for name in action.differing_arguments[:5])
    else:
        line += "; no call of the conversation comes close"
    return line + (f" (and {others} more)" if others else "")


def explanation_lines(explanation: FailureExplanation) -> list[str]:
    """A failed attempt's explanation as a few markdown lines (no list markers): up to three database differences,
    the strings never told, the first unmatched gold action with the closest call, the first unmet assertion. Every
    value is an inline code span (it may be text the agent chose)."""
    lines = _db_lines(explanation.db) if explanation.db is not None else []
    if explanation.communicate is not None and explanation.communicate.missing:
        missing = explanation.communicate.missing
        told = ", ".join(code_span(text) for text in missing[:EXPLANATION_DIFFERENCES])
        rest = len(missing) - EXPLANATION_DIFFERENCES
        lines.append(f"Never told the user: {told}" + (f" and {rest} more" if rest > 0 else ""))
    if explanation.actions:
        lines.append(_action_line(explanation.actions[0], len(explanation.actions) - 1))
    if explanation.env_assertions:
        first = explanation.env_assertions[0]
        others = len(explanation.env_assertions) - 1
        lines.append(
            f"Assertion not met: {_call_text(first.function, first.arguments)}"
            + (f" (and {others} more)" if others else "")
        )
    return lines


MALFORMED_REPLY_CHARS = 1000
"""Characters of a malformed reply shown in the summary (the attempt's JSON and trajectory keep 4096)."""


def malformed_reply_line(reply: MalformedReply) -> str:
    """``Reply that is not an action (turn 4, 12 characters): `...``: the agent's reply as one inline code span
    (line breaks and control characters as spaces, so nothing in it can start a block or reach a terminal)."""
    where = [f"turn {reply.turn}"] if reply.turn is not None else []
    where.append(f"{reply.chars} characters" if reply.source == "reply" else f"first {reply.chars} bytes of the body")
    if reply.truncated or len(reply.text) > MALFORMED_REPLY_CHARS:
        where.append("cut")
    what = "Reply that is not an action" if reply.source == "reply" else "Reply over the byte cap"
    return f"{what} ({', '.join(where)}): {code_span(reply.text, MALFORMED_REPLY_CHARS)}"


def _outcome_words(attempts: list[AttemptResult]) -> str:
    """The strip in words, for screen readers and plain-text readers: "#1 success, #2 failure, #3 infrastructure
    error" (an emoji-only line reads as a row of symbol names, or as nothing)."""
    words = {"success": "success", "failure": "failure", "infra_error": "infrastructure error"}
    return ", ".join(f"#{a.attempt} {words.get(a.outcome, a.outcome)}" for a in attempts)


def _task_section(key: str, attempts: list[AttemptResult], k: int, gold_gap: str | None = None) -> list[str]:
    first = attempts[0]
    counted = [a.trial_outcome for a in attempts if a.trial_outcome is not None]
    marks = "".join("✅" if a.outcome == "success" else "❌" if a.outcome == "failure" else "⚠️" for a in attempts)
    successes = sum(1 for o in counted if o)
    half = k // 2
    strict = first_k_all_pass(counted, k) if len(counted) >= k else None
    streak = has_success_streak(counted, half) if half >= 1 else None
    steps_ok = [a.steps for a in attempts if a.outcome == "success"]
    failures = Counter(a.failure.category.value for a in attempts if a.failure is not None)
    lines = [
        f"### {first.domain} task {first.task_index} (split {first.split or '-'}, tau2 id {first.task_id})",
        "",
        f"{marks} ({_outcome_words(attempts)})",
        "",
        f"- pass^{k} strict (first {k} attempts all succeed): "
        + ("n/a (fewer than k counted attempts)" if strict is None else "✅ YES" if strict else "❌ NO"),
        f"- pass^({k}/2) streak ({half} consecutive successes; order-dependent, not tau-bench's pass^j): "
        + ("n/a" if streak is None else "✅ YES" if streak else "❌ NO"),
        f"- success rate: {successes}/{len(counted)}"
        + (f" ({successes / len(counted):.1%})" if counted else "")
        + (
            f"; {len(attempts) - len(counted)} infrastructure error(s) excluded" if len(counted) < len(attempts) else ""
        ),
        f"- average steps on success: {sum(steps_ok) / len(steps_ok):.1f}"
        if steps_ok
        else "- average steps on success: n/a",
        f"- total steps: {sum(a.steps for a in attempts)}",
        "- failure breakdown: " + (", ".join(f"{c} x{n}" for c, n in sorted(failures.items())) or "none"),
        "",
        "Attempt details:",
    ]
    for a in attempts:
        reward = "n/a" if a.reward is None else f"{a.reward:.1f}"
        status = {"success": "✅ SUCCESS", "failure": "❌ FAILED", "infra_error": "⚠️ INFRASTRUCTURE ERROR"}[a.outcome]
        line = f"- Attempt {a.attempt}/{k}: {status} (reward={reward}, steps={a.steps}, time={a.duration_s:.1f}s)"
        if a.failure is not None:
            line += f" [{a.failure.category.value}; fault: {a.failure.fault_author.value}]"
        lines.append(line)
        if a.failure is not None and a.failure.detail:
            lines.append(f"    - ↳ Error: {code_span(a.failure.detail, DETAIL_CHARS)}")
        if a.malformed_reply is not None:
            lines.append(f"    - ↳ {malformed_reply_line(a.malformed_reply)}")
        if a.explanation is not None and a.outcome == "failure":
            lines += [f"    - ↳ {line}" for line in explanation_lines(a.explanation)]
        if (cost_line := attempt_cost_line(a)) is not None:
            lines.append(f"    - {cost_line}")
    if gold_gap is not None:
        lines.append(f"- ⚠️ Known tau2 data gap, expected to fail: {gold_gap}")
    lines.append("")
    return lines


def _certification_lines(result: BattleResult) -> list[str]:
    """The ``certify`` decision (issue 28): claim, decision, the confidence sequence at the stop, attempts used."""
    cert = result.certification
    if cert is None:
        return []

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return [
        "",
        f"## Certification: {cert.claim} — {cert.decision.upper()}",
        "",
        f"- decision after {cert.tasks_observed} of {cert.tasks_budget} tasks in the seeded order (seed "
        f"{cert.order_seed}); attempts used: {cert.attempts_used} of the fixed design's {cert.attempts_fixed_design}",
        f"- {cert.confidence:.0%} anytime-valid confidence sequence at the stop: [{num(cert.sequence_low)}, "
        f"{num(cert.sequence_high)}] (valid at every look; the basis of the decision)",
        f"- estimate {num(cert.estimate)}, interval [{num(cert.interval_low)}, {num(cert.interval_high)}]: "
        f"{cert.interval_note}",
        f"- method: {cert.method_note or 'betting confidence sequence on per-task pass^j estimates, in order'}"
        + (f"; stopped: {cert.stop_reason}" if cert.stop_reason else "")
        + ' (docs/metrics.md, "Certify early")',
        *([f"- within-task stop: {cert.task_stop.note}"] if cert.task_stop is not None else []),
    ]


def render_markdown(result: BattleResult) -> str:
    """The battle summary as markdown: headline table across tasks, then the seed's per-task sections."""
    k = result.config.k
    tasks = _by_task(result)
    title = "# Arena pass^k evaluation" + (" — CALIBRATION" if result.calibration else "")
    lines = [title, ""]
    if result.status in ("cancelled", "interrupted"):
        how = "was cancelled" if result.status == "cancelled" else "was interrupted (the green agent was stopped)"
        lines += [
            f"> PARTIAL: the battle {how}; this summary covers the {len(result.attempts)} attempts that finished"
            + (". Resume it with `arena run SCENARIO --resume`." if result.status == "interrupted" else "."),
            "",
        ]
    lines += budget_markdown(result.budget_stop)  # stopped by max_cost_usd / max_wall_s (issue 27)
    if result.calibration:
        lines += [
            "> CALIBRATION battle: the white agent was told the task (replay of gold actions). These numbers "
            "check the harness, not an agent.",
            "",
        ]
    lines += [
        f"- battle: `{result.battle_id}`; white agent: {result.white_agent_url}",
        f"- tasks: {len(tasks)}; attempts: {len(result.attempts)} (k = {k}); wall time {result.duration_s:.1f} s"
        + (
            f" ({result.resumed_attempts} attempts resumed from an earlier run, not timed here)"
            if result.resumed_attempts
            else ""
        ),
        f"- infrastructure errors (excluded from n, not the agent's fault): {result.infrastructure_errors}",
        f"- winner rule: {result.winner_rule or winner_rule(result)}",
    ]
    lines += _certification_lines(result)
    micro = result.summary.micro
    micro_label, macro_label = result.summary.interval_labels()
    lines.append(
        f"- micro success rate (pooled over attempts): {_fmt(micro.rate)} "
        f"{_interval(micro.ci_low, micro.ci_high)} ({micro_label})"
    )
    if result.summary.few_tasks_caveat:
        lines.append(f"- caveat: {result.summary.few_tasks_caveat}")
    lines += [
        "",
        f"## Across tasks (macro mean over tasks, {macro_label})",
        "",
        "| j | pass^j | 95% CI | pass@j | 95% CI | tasks with n >= j |",
        "|---|---|---|---|---|---|",
    ]
    for row in macro_rows(result):
        lines.append(
            f"| {row.j} | {_fmt(row.pass_hat_mean)} | {_interval(row.pass_hat_ci_low, row.pass_hat_ci_high)} | "
            f"{_fmt(row.pass_at_mean)} | {_interval(row.pass_at_ci_low, row.pass_at_ci_high)} | "
            f"{row.coverage}/{row.total_tasks} |"
        )
    lines += [
        "",
        "Failure breakdown: " + (", ".join(f"{c} x{n}" for c, n in result.failure_breakdown.items()) or "none"),
        "",
    ]
    lines += cost_markdown(result)
    gaps = {gap.task_key: gap for gap in result.gold_gaps}
    if gaps:
        lines += [
            "## Tasks whose gold solution cannot pass (tau2's data)",
            "",
            "Expected to fail in a calibration battle; not a harness bug:",
            "",
        ]
        lines += [f"- {gap.task_key} (tau2 id {gap.task_id}): {gap.reason}" for gap in gaps.values()]
        lines.append("")
    lines += consistency_markdown(result)
    lines += ["## Per task", ""]
    for key, attempts in tasks.items():
        gap = gaps.get(key)
        lines += _task_section(key, attempts, k, gap.reason if gap is not None else None)
    return "\n".join(lines).rstrip() + "\n"
