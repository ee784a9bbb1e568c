"""``arena export`` carries the battle's fingerprint (issue 30): which tau2 and which task definitions each attempt
was scored on, in the CSV (``tau2``, ``task_hash``) and in the tau2 format (``reward_info.info["arena"]
["fingerprint"]``); results-json holds the whole BattleResult, fingerprint included. Results written before
fingerprints existed export with those cells empty."""

from __future__ import annotations

import json
from pathlib import Path

from green_agent.engine.fingerprint import DomainFingerprint, Fingerprint, Tau2Build, UserSimulatorFingerprint
from green_agent.engine.results import BattleResult
from launcher.cli.export_command import ExportFormat, export_battles
from launcher.cli.tau2_export import build_results
from tests.deploy.test_export_command import csv_rows, make_result, run_dir
from tests.launcher.cli.test_export_tau2 import synthetic_attempt, write_run


def fingerprint_for(result: BattleResult) -> Fingerprint:
    return Fingerprint(
        tau2=Tau2Build(distribution="tau2", version="1.0.1", evaluator="e" * 64),
        user_simulator=UserSimulatorFingerprint(kind="scripted"),
        domains={"retail": DomainFingerprint(database="d" * 64, policy="p" * 64, tools="t" * 64)},
        tasks={a.task_key: f"{a.task_index:064x}" for a in result.attempts},
    )


def with_fingerprint(result: BattleResult) -> BattleResult:
    return result.model_copy(update={"fingerprint": fingerprint_for(result)})


def test_csv_rows_name_the_tau2_and_the_task_hash_they_were_scored_on(tmp_path: Path) -> None:
    result = with_fingerprint(make_result())
    rows = csv_rows(export_battles(run_dir(tmp_path, result), ExportFormat.CSV).text)
    assert len(rows) == len(result.attempts)
    for row, attempt in zip(rows, result.attempts, strict=True):
        assert row["tau2"] == "tau2 1.0.1"
        assert row["task_hash"] == f"{attempt.task_index:064x}"


def test_csv_of_a_result_without_fingerprint_leaves_the_cells_empty(tmp_path: Path) -> None:
    rows = csv_rows(export_battles(run_dir(tmp_path, make_result()), ExportFormat.CSV).text)
    assert rows and all(row["tau2"] == "" and row["task_hash"] == "" for row in rows)


def test_results_json_keeps_the_fingerprint(tmp_path: Path) -> None:
    result = with_fingerprint(make_result())
    document = json.loads(export_battles(run_dir(tmp_path, result), ExportFormat.RESULTS_JSON).text)
    assert BattleResult.model_validate(document["results"][0]).fingerprint == result.fingerprint


def test_tau2_export_puts_each_attempts_fingerprint_in_reward_info(tmp_path: Path) -> None:
    from tau2.data_model.simulation import Results

    from green_agent.engine.config import BattleConfig

    attempts = [synthetic_attempt("retail", i, n, "success") for i in (0, 1) for n in (1, 2)]
    config = BattleConfig(mode="manual", k=2, domain="retail", task_index=[0, 1], split="test")
    run = tmp_path / "syn"
    plain = write_run(run, attempts, config)
    result = with_fingerprint(plain)
    (run / "summary.json").write_text(result.model_dump_json(), encoding="utf-8")
    exported = Results.model_validate_json(build_results(result, run).text)
    assert len(exported.simulations) == 4
    for simulation in exported.simulations:
        assert simulation.reward_info is not None
        arena = simulation.reward_info.info["arena"]
        assert arena["fingerprint"]["tau2"] == "tau2 1.0.1"
        assert arena["fingerprint"]["evaluator"] == "e" * 64
        assert arena["fingerprint"]["task"] == f"{int(arena['task_key'].rsplit('/', 1)[1]):064x}"
        assert arena["fingerprint"]["domain"]["database"] == "d" * 64
        assert arena["fingerprint"]["user_simulator"] == {"kind": "scripted", "model": None, "prompt_hash": None}
    unprinted = Results.model_validate_json(build_results(plain, run).text)
    assert all(
        s.reward_info is not None and "fingerprint" not in s.reward_info.info["arena"] for s in unprinted.simulations
    )
