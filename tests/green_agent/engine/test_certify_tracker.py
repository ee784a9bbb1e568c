"""A battle's certification state (green_agent/engine/certify.py, issue 28): the design comes from the config, a
budget that can decide nothing starts nothing, an exact pass^k claim stops as soon as its boundary is crossed, tasks
finished after the stop stay out of the sequence, and a tracker rebuilt from the same attempts (a resume) reaches
the same certification."""

from __future__ import annotations

from typing import Any

from green_agent.engine.certify import CertifyTracker
from green_agent.engine.config import BattleConfig
from green_agent.engine.results import AttemptResult

K = 4


def config(claim: str, tasks: int) -> BattleConfig:
    data: dict[str, Any] = {
        "domain": "retail",
        "task_index": list(range(tasks)),
        "k": K,
        "seed": 5,
        "calibration": True,
        "certify": claim,
    }
    return BattleConfig.model_validate(data)


def attempts(key: str, outcomes: list[bool]) -> list[AttemptResult]:
    index = int(key.rsplit("/", 1)[1])
    return [
        AttemptResult(
            battle_id="certify-tracker",
            domain="retail",
            split="test",
            task_index=index,
            task_id=str(index),
            attempt=number,
            context_id=f"ctx-{index}-{number}",
            outcome="success" if ok else "failure",
            termination_reason="user_stop",
        )
        for number, ok in enumerate(outcomes, start=1)
    ]


def keys(tasks: int) -> list[str]:
    return [f"retail/test/{i}" for i in range(tasks)]


def tracker(claim: str, tasks: int) -> CertifyTracker:
    cfg = config(claim, tasks)
    assert cfg.certify is not None
    return CertifyTracker(cfg, cfg.certify, keys(tasks), tasks * K)


def test_a_budget_that_can_decide_nothing_starts_nothing() -> None:
    # Certifying pass^4 >= 0.7 needs 0.7^n <= 0.025 (n >= 11), refuting 0.3^n <= 0.025 (n >= 4): 3 tasks decide nothing.
    small = tracker("pass^4>=0.7", 3)
    assert small.design.method == "exact_binomial_group_sequential"
    assert small.decided([])
    cert = small.certification([])
    assert (cert.decision, cert.stop_reason, cert.tasks_observed, cert.attempts_used) == (
        "inconclusive",
        "futility",
        0,
        0,
    )


def test_an_exact_claim_stops_at_its_boundary_and_a_resume_reaches_the_same_certification() -> None:
    track = tracker("pass^4>=0.5", 16)
    finished: list[AttemptResult] = []
    for task, key in enumerate(track.order):
        assert not track.decided(finished), task
        finished += attempts(key, [True] * K)
        if track.decided(finished):
            break
    # 0.5^7 < 0.025 x (7/16)^0.5 is the first look where all-pass tasks cross the boundary (the betting sequence of the
    # intervals would need 10 or more); the budget is 16 tasks (64 attempts).
    assert len(finished) == 7 * K
    finished += attempts(track.order[7], [True, False, True, True])  # in flight at the stop: recorded, not observed
    cert = track.certification(finished)
    assert (cert.decision, cert.stop_reason, cert.tasks_observed) == ("certified", "decided", 7)
    assert cert.attempts_used == 8 * K and cert.attempts_fixed_design == 16 * K
    assert cert.sequence_low is not None and cert.sequence_low > 0.5
    assert cert.method_note is not None and "after every task of 16" in cert.method_note
    again = tracker("pass^4>=0.5", 16)
    assert again.order == track.order and again.decided(finished)
    assert again.certification(finished) == cert


def test_pass_1_claims_use_the_betting_design() -> None:
    track = tracker("pass^1>=0.3", 16)
    assert track.design.method == "betting_cs_wsr2024_sequential"
    finished: list[AttemptResult] = []
    for key in track.order:
        finished += attempts(key, [True] * K)
        if track.decided(finished):
            break
    cert = track.certification(finished)
    assert cert.decision == "certified" and cert.tasks_observed < 16
    assert cert.sequence_low is not None and cert.sequence_low > 0.3


def test_a_snapshot_read_from_the_summary_thread_counts_no_attempt_twice() -> None:
    """The summary's thread passes a copy of a prefix of the battle's list (certification) while the event loop
    passes the list itself (decided): a shorter copy must not rewind what was counted, or the next call counts those
    attempts again and the sequence holds observations that never happened."""
    fresh, mixed = tracker("pass^4>=0.5", 16), tracker("pass^4>=0.5", 16)
    first, second = fresh.order[:2]
    second_attempts = attempts(second, [True, True, False, True])
    finished = attempts(first, [True, True, True, True]) + second_attempts[:2]  # the second task half done
    snapshot = list(finished[:4])  # the summary thread's copy, taken before the second task began

    mixed.state(finished)
    mixed.state(snapshot)
    finished.extend(second_attempts[2:])

    assert fresh.state(finished) == ([1.0, 0.0], fresh.order[2])
    assert mixed.state(finished) == fresh.state(finished)
