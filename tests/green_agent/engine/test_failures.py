"""The failure taxonomy: each scored breakdown maps to exactly one category, and infrastructure is never the agent's."""

import pytest

from green_agent.engine.attribution import classify_scored, is_success
from green_agent.engine.results import Failure, FailureCategory, FaultAuthor, RewardBreakdown


def test_success_tolerance() -> None:
    assert is_success(1.0) and is_success(1.0 - 1e-7)
    assert not is_success(0.999) and not is_success(0.0)
    assert classify_scored(RewardBreakdown(reward=1.0, db_match=True)) is None


@pytest.mark.parametrize(
    ("breakdown", "category"),
    [
        (
            RewardBreakdown(reward=0.0, db_match=False, communicate_total=2, communicate_met=2),
            FailureCategory.TASK_INCOMPLETE,
        ),
        (
            RewardBreakdown(reward=0.0, db_match=True, communicate_total=2, communicate_met=0),
            FailureCategory.MISSING_OUTPUTS,
        ),
        (
            RewardBreakdown(reward=0.0, db_match=True, communicate_total=3, communicate_met=1),
            FailureCategory.INCOMPLETE_OUTPUTS,
        ),
        (RewardBreakdown(reward=0.0, db_match=None, action_total=2, action_met=1), FailureCategory.TASK_INCOMPLETE),
        (RewardBreakdown(reward=0.0, env_assertions_total=2, env_assertions_met=0), FailureCategory.TASK_INCOMPLETE),
        (RewardBreakdown(reward=0.0, db_match=True), FailureCategory.UNKNOWN_FAILURE),
    ],
)
def test_scored_failures(breakdown: RewardBreakdown, category: FailureCategory) -> None:
    failure = classify_scored(breakdown)
    assert failure is not None
    assert failure.category is category
    assert failure.fault_author is FaultAuthor.WHITE_AGENT
    assert not failure.is_infrastructure


@pytest.mark.parametrize("author", [FaultAuthor.USER_SIMULATOR, FaultAuthor.ENVIRONMENT, FaultAuthor.HARNESS])
def test_infrastructure_authors(author: FaultAuthor) -> None:
    assert Failure(category=FailureCategory.HARNESS_ERROR, fault_author=author).is_infrastructure
