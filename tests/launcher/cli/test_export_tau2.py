"""``arena export --format tau2``: tau2's own loader, viewer and metrics open an Arena run and agree with Arena.

Two kinds of runs:

* a real one: the offline demo battle (scripted user, ``flaky`` reference agent; 5 retail tasks x k=4), run once for
  the module through ``arena run`` (~25 s, marked slow). Its export is checked against summary.json with tau2's
  code: ``Results.load`` (what ``tau2 view`` uses), ``compute_metrics`` and the viewer itself.
* small synthetic ones, written here with real task ids and hand-made trajectories, for what a real run rarely
  holds: infrastructure errors, a deadline, two domains, missing / oversized / hostile trajectory files.

Why pass^k can be compared exactly: both sides call a trial a success when |reward - 1| <= 1e-6, both estimate a
task's pass^k as C(c, k) / C(n, k) over its counted trials (Arena returns c/n, 0.0 and 1.0 for the k = 1, c < k and
c = n cases, the same floats) and both average tasks unweighted. The differences are where the sets differ: Arena
leaves infrastructure errors out of n (the export leaves them out of the file for that reason), and tau2 reports k
only up to the smallest number of trials of any task while Arena averages, for each k, the tasks with n >= k.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import BattleConfig
from green_agent.engine.results import (
    AttemptResult,
    BattleResult,
    Failure,
    FailureCategory,
    FaultAuthor,
    RewardBreakdown,
)
from green_agent.engine.results import TerminationReason as ArenaTermination
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import load_tasks
from green_agent.statistics import summarize_trials
from launcher.cli.app import app
from launcher.cli.tau2_export import MAX_TRAJECTORY_BYTES, TERMINATIONS, build_results

quiet_tau2()
from tau2.data_model.simulation import Results, RewardInfo, TerminationReason  # noqa: E402
from tau2.metrics.agent_metrics import compute_metrics, get_tasks_pass_hat_k  # noqa: E402
from tau2.scripts.view_simulations import display_simulation_list  # noqa: E402
from tau2.utils.display import ConsoleDisplay  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
EXIT_BAD_INPUT = 2


def export(source: Path, out: Path, *extra: str) -> tuple[int, str]:
    """``arena export SOURCE --format tau2 --out OUT``: exit code and stderr."""
    result = CliRunner().invoke(app, ["export", str(source), "--format", "tau2", "--out", str(out), *extra])
    return result.exit_code, result.stderr


def summary(run_dir: Path) -> BattleResult:
    return BattleResult.model_validate_json((run_dir / "summary.json").read_text(encoding="utf-8"))


def comparable_pass_hat(results: Any, arena: BattleResult) -> list[tuple[int, float, float | None]]:
    """(k, tau2's pass^k, Arena's macro pass^k) for every k tau2 reports; asserts tau2 reported at least k = 1."""
    metrics = compute_metrics(results)
    assert 1 in metrics.pass_hat_ks
    return [(k, float(value), arena.summary.macro[k - 1].pass_hat_mean) for k, value in metrics.pass_hat_ks.items()]


# --- the real run -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline demo battle, run once: ``runs/t2x/`` with summary.json and one trajectory per attempt."""
    runs = tmp_path_factory.mktemp("runs")
    completed = subprocess.run(
        [
            str(BIN / "arena"),
            "run",
            str(REPO / "scenarios" / "offline_demo.toml"),
            "--battle-id",
            "t2x",
            "-q",
            "--runs-dir",
            str(runs),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    return runs / "t2x"


@pytest.fixture(scope="module")
def demo_export(demo_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "t2x.json"
    code, stderr = export(demo_run, out)
    assert code == 0, stderr
    assert "warning" not in stderr  # every trajectory is there, no infrastructure error in the demo
    return out


@pytest.mark.slow
def test_tau2_loads_the_export_with_every_counted_attempt(demo_run: Path, demo_export: Path) -> None:
    arena = summary(demo_run)
    results = Results.load(demo_export)
    counted = [a for a in arena.attempts if a.trial_outcome is not None]
    assert len(results.simulations) == len(counted) == 20
    by_trial = {(s.task_id, s.trial): s for s in results.simulations}
    for attempt in counted:
        simulation = by_trial[(attempt.task_id, attempt.attempt - 1)]
        assert simulation.reward_info is not None
        assert simulation.reward_info.reward == attempt.reward
        assert simulation.termination_reason.value == attempt.termination_reason.value  # no deadline in the demo
        assert simulation.reward_info.info["arena"]["outcome"] == attempt.outcome
        if attempt.breakdown is not None and "db_check" in attempt.breakdown.raw:  # tau2's own RewardInfo, whole
            assert simulation.reward_info.model_dump(mode="json", exclude={"info"}) == {
                key: value for key, value in attempt.breakdown.raw.items() if key != "info"
            }
        lines = (demo_run / str(attempt.trajectory_file)).read_text(encoding="utf-8").splitlines()
        assert len(simulation.messages) == len(lines) - 1  # every line but Arena's header
        roles = [message.role for message in simulation.messages]
        assert roles[:2] == ["assistant", "user"] and set(roles) <= {"assistant", "user", "tool"}
        for index, message in enumerate(simulation.messages):
            if message.role == "tool":  # answers the tool call just before it
                calls = simulation.messages[index - 1].tool_calls
                assert calls is not None and calls[0].id == message.id
    assert {t.id for t in results.tasks} == {a.task_id for a in arena.attempts}
    assert results.info.num_trials == arena.config.k
    assert results.info.agent_info.implementation == arena.white_agent_url
    assert results.info.environment_info.domain_name == "retail"
    assert results.info.environment_info.policy.startswith("# Retail agent policy")


@pytest.mark.slow
def test_tau2_metrics_equal_arena_pass_hat(demo_run: Path, demo_export: Path) -> None:
    arena = summary(demo_run)
    results = Results.load(demo_export)
    compared = comparable_pass_hat(results, arena)
    assert [k for k, _, _ in compared] == [1, 2, 3, 4]  # every task has k = 4 counted trials
    # pass^1 exactly: every task's c/n is a multiple of 1/4, so any summation order gives the same sum. For k > 1 the
    # per-task values are the same floats (checked below) but pandas and numpy sum them in different orders: the
    # means may differ in the last bit (0.2666666666666667 vs 0.26666666666666666 for k = 2).
    assert compared[0][1] == arena.summary.macro[0].pass_hat_mean == 0.55
    for _k, tau2_value, arena_value in compared[1:]:
        assert tau2_value == pytest.approx(arena_value, rel=1e-12, abs=0)
    per_task = get_tasks_pass_hat_k(results)  # and task by task
    for task in arena.summary.tasks:
        task_id = next(a.task_id for a in arena.attempts if a.task_key == task.task_id)
        assert [float(per_task.loc[task_id, f"pass^{k}"]) for k in range(1, 5)] == list(task.pass_hat)
    # tau2's average reward is the mean reward; the demo's rewards are all 0 or 1, so it is Arena's micro rate.
    assert compute_metrics(results).avg_reward == pytest.approx(arena.summary.micro.rate, abs=1e-12)


@pytest.mark.slow
def test_tau2_view_opens_the_export(demo_export: Path, tmp_path: Path) -> None:
    results = Results.load(demo_export)  # the loader tau2 view uses (view_simulations.main, menu item 1)
    with ConsoleDisplay.console.capture() as captured:
        display_simulation_list(results)
        for simulation in results.simulations:
            ConsoleDisplay.display_simulation(simulation, show_details=True)
    assert captured.get().count("Task:") == len(results.simulations)
    # The command itself: select the file, show the metrics, exit.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHON_DOTENV_DISABLED": "1", "COLUMNS": "120"}
    viewed = subprocess.run(
        [str(BIN / "tau2"), "view", "--file", str(demo_export)],
        input="1\n1\n2\n5\n",
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert viewed.returncode == 0, viewed.stderr[-2000:]
    assert f"Loaded {len(results.simulations)} simulations" in viewed.stdout
    assert "Error loading results" not in viewed.stdout
    assert "k=1: 0.550" in viewed.stdout


@pytest.mark.slow
def test_missing_trajectories_export_with_empty_messages_and_a_warning(demo_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "t2x"
    shutil.copytree(demo_run, run)
    for path in sorted((run / "trajectories").iterdir())[:3]:
        path.unlink()
    code, stderr = export(run, tmp_path / "out.json")
    assert code == 0, stderr
    assert "warning: 3 of 20 attempts exported with empty messages: trajectory file missing" in stderr
    results = Results.load(tmp_path / "out.json")
    assert sum(1 for s in results.simulations if not s.messages) == 3
    shutil.rmtree(run / "trajectories")
    code, stderr = export(run, tmp_path / "none.json")
    assert code == 0 and "20 of 20 attempts exported with empty messages" in stderr
    assert compute_metrics(Results.load(tmp_path / "none.json")).pass_hat_ks[1] == 0.55  # scores need no messages


# --- synthetic runs -----------------------------------------------------------------------------------------------

GREETING = {"role": "assistant", "content": "Hi! How can I help you today?"}


def conversation(task_id: str) -> list[dict[str, Any]]:
    """A short tau2 conversation: greeting, user, a tool call and its result, the agent's answer."""
    call = {"id": "call_001", "name": "find_user_id_by_email", "arguments": {"email": f"{task_id}@example.com"}}
    return [
        {**GREETING, "turn_idx": 0, "timestamp": "2026-11-22T10:00:01"},
        {"role": "user", "content": f"help with task {task_id}", "turn_idx": 1},
        {"role": "assistant", "content": None, "tool_calls": [call], "turn_idx": 2},
        {"role": "tool", "id": "call_001", "content": "Error: user not found", "error": True, "turn_idx": 3},
        {"role": "assistant", "content": "Sorry, I cannot find you.", "turn_idx": 4},
    ]


def synthetic_attempt(
    domain: str, index: int, number: int, outcome: str, *, termination: str = "user_stop"
) -> AttemptResult:
    """One attempt on ``domain``/test task ``index``; successes carry a tau2 RewardInfo as the scorer writes it."""
    task_id = load_tasks(domain, "test")[index].id
    reward = {"success": 1.0, "failure": 0.0}.get(outcome)
    failure = None
    if outcome == "failure":
        failure = Failure(category=FailureCategory.TIMEOUT, fault_author=FaultAuthor.WHITE_AGENT, detail="slow")
    elif outcome == "infra_error":
        failure = Failure(
            category=FailureCategory.USER_SIMULATOR_ERROR, fault_author=FaultAuthor.USER_SIMULATOR, detail="429"
        )
    raw = {"reward": 1.0, "db_check": {"db_match": True, "db_reward": 1.0}, "reward_basis": ["DB"]}
    return AttemptResult(
        battle_id="syn",
        domain=domain,
        split="test",
        task_index=index,
        task_id=task_id,
        attempt=number,
        context_id=f"ctx-{domain}-{index}-{number}",
        outcome=outcome,
        reward=reward,
        steps=2,
        duration_s=1.5,
        termination_reason=termination,
        failure=failure,
        breakdown=RewardBreakdown(reward=1.0, db_match=True, reward_basis=["DB"], raw=raw) if reward == 1.0 else None,
        trajectory_file=f"trajectories/{domain}-test-{index:04d}-attempt{number:02d}.jsonl",
    )


def write_run(run: Path, attempts: list[AttemptResult], config: BattleConfig) -> BattleResult:
    """summary.json (summary computed as the battle does) and one trajectory per attempt."""
    trials: dict[str, list[bool | None]] = {}
    for attempt in attempts:
        trials.setdefault(attempt.task_key, []).append(attempt.trial_outcome)
    result = BattleResult(
        battle_id="syn",
        white_agent_url="http://127.0.0.1:9009",
        config=config,
        started_at="2026-11-22T10:00:00Z",
        finished_at="2026-11-22T10:01:00Z",
        duration_s=60.0,
        attempts=attempts,
        summary=summarize_trials(trials, k_max=config.k, seed=config.seed, n_bootstrap=0),
        failure_breakdown={},
        infrastructure_errors=sum(1 for a in attempts if a.outcome == "infra_error"),
    )
    (run / "trajectories").mkdir(parents=True)
    (run / "summary.json").write_text(result.model_dump_json(), encoding="utf-8")
    for attempt in attempts:
        header = {"attempt": attempt.model_dump(mode="json", exclude={"trajectory_file"})}
        lines = [json.dumps(record) for record in [header, *conversation(attempt.task_id)]]
        (run / str(attempt.trajectory_file)).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return result


@pytest.fixture
def retail_run(tmp_path: Path) -> tuple[Path, BattleResult]:
    """Two retail tasks x k=4: task 0 with two infrastructure errors, task 1 with a deadline."""
    outcomes = {
        0: ["success", "infra_error", "failure", "infra_error"],
        1: ["success", "failure", "success", "success"],
    }
    attempts = [
        synthetic_attempt(
            "retail", index, number, outcome, termination="deadline" if (index, number) == (1, 2) else "user_stop"
        )
        for index, runs in outcomes.items()
        for number, outcome in enumerate(runs, start=1)
    ]
    config = BattleConfig(mode="manual", k=4, domain="retail", task_index=[0, 1], split="test")
    return tmp_path / "syn", write_run(tmp_path / "syn", attempts, config)


def test_infrastructure_errors_are_left_out_so_tau2_pass_hat_matches_arena(
    retail_run: tuple[Path, BattleResult], tmp_path: Path
) -> None:
    run, arena = retail_run
    code, stderr = export(run, tmp_path / "out.json")
    assert code == 0, stderr
    assert "warning: 2 infrastructure-error attempts left out (user_simulator_error x2)" in stderr
    results = Results.load(tmp_path / "out.json")
    assert len(results.simulations) == 6
    assert all(s.reward_info is not None for s in results.simulations)
    compared = comparable_pass_hat(results, arena)
    assert [k for k, _, _ in compared] == [1, 2]  # tau2 stops at the smallest counted n (task 0: 2 of 4)
    for _k, tau2_value, arena_value in compared:
        assert tau2_value == arena_value
    assert compared[0][1] == (1 / 2 + 3 / 4) / 2
    # Kept the way tau2's runner keeps a failed sample (skipped, reward 0), they would count as failures in tau2.
    kept = results.model_copy(deep=True)
    base = next(s for s in kept.simulations if s.trial == 0 and s.task_id == arena.attempts[0].task_id)
    for trial in (1, 3):
        kept.simulations.append(
            base.model_copy(update={"trial": trial, "skipped": True, "reward_info": RewardInfo(reward=0.0)})
        )
    assert compute_metrics(kept).pass_hat_ks[1] == (1 / 4 + 3 / 4) / 2 != arena.summary.macro[0].pass_hat_mean


def test_deadline_becomes_max_steps_and_arena_facts_ride_in_reward_info(
    retail_run: tuple[Path, BattleResult], tmp_path: Path
) -> None:
    run, _ = retail_run
    text = build_results(summary(run), run).text
    results = Results.model_validate_json(text)
    deadline = next(s for s in results.simulations if s.id == "syn/retail/test/1/2")
    assert deadline.termination_reason is TerminationReason.MAX_STEPS
    assert deadline.reward_info is not None and deadline.reward_info.reward == 0.0
    assert deadline.reward_info.info["arena"]["termination_reason"] == "deadline"
    assert deadline.reward_info.info["arena"]["failure_category"] == "timeout"
    assert "terminated prematurely" in deadline.reward_info.info["note"]
    first = next(s for s in results.simulations if s.id == "syn/retail/test/0/1")
    assert first.reward_info is not None and first.reward_info.db_check is not None  # tau2's RewardInfo kept
    assert first.start_time == "2026-11-22T10:00:01" and first.end_time == "2026-11-22T10:00:02.500000"
    assert first.trial == 0
    assert [m.role for m in first.messages] == ["assistant", "user", "assistant", "tool", "assistant"]


def test_every_arena_termination_reason_has_a_tau2_one() -> None:
    assert set(TERMINATIONS) == {reason.value for reason in ArenaTermination}
    assert {k: v.value for k, v in TERMINATIONS.items() if k != v.value} == {"deadline": "max_steps"}


def test_two_domains_get_domain_prefixed_task_ids(tmp_path: Path) -> None:
    attempts = [
        synthetic_attempt(domain, 0, number, outcome)
        for domain in ("retail", "airline")
        for number, outcome in enumerate(["success", "failure"], start=1)
    ]
    config = BattleConfig(mode="random", k=2, domain=["retail", "airline"], num_tasks=2, split="test")
    arena = write_run(tmp_path / "syn", attempts, config)
    code, stderr = export(tmp_path / "syn" / "summary.json", tmp_path / "out.json")  # a summary.json works too
    assert code == 0, stderr
    results = Results.load(tmp_path / "out.json")
    ids = {f"retail/{load_tasks('retail', 'test')[0].id}", f"airline/{load_tasks('airline', 'test')[0].id}"}
    assert {t.id for t in results.tasks} == {s.task_id for s in results.simulations} == ids
    assert results.info.environment_info.domain_name == "retail+airline"
    assert "# airline policy" in results.info.environment_info.policy
    assert compute_metrics(results).pass_hat_ks[1] == arena.summary.macro[0].pass_hat_mean == 0.5


Corrupt = Callable[[Path, BattleResult], str]


def _swap_headers(run: Path, arena: BattleResult) -> str:
    first, second = (run / str(a.trajectory_file) for a in (arena.attempts[0], arena.attempts[2]))
    a, b = first.read_text(encoding="utf-8"), second.read_text(encoding="utf-8")
    first.write_text(b, encoding="utf-8")
    second.write_text(a, encoding="utf-8")
    return "2 of 6 attempts exported with empty messages: trajectory header names another attempt"


def _oversized(run: Path, arena: BattleResult) -> str:
    with (run / str(arena.attempts[0].trajectory_file)).open("r+b") as handle:
        handle.truncate(MAX_TRAJECTORY_BYTES + 1)  # sparse: no 64 MiB written
    return "1 of 6 attempts exported with empty messages: trajectory file over 64 MiB, not read"


def _escaping_path(run: Path, arena: BattleResult) -> str:
    data = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    data["attempts"][0]["trajectory_file"] = "../../../../etc/passwd"
    data["attempts"][2]["trajectory_file"] = "/etc/passwd"
    (run / "summary.json").write_text(json.dumps(data), encoding="utf-8")
    return "2 of 6 attempts exported with empty messages: trajectory path outside the run directory"


def _garbage_lines(run: Path, arena: BattleResult) -> str:
    path = run / str(arena.attempts[0].trajectory_file)
    junk = ["not json", '{"cut": true, "preview": "..."}', "[" * 100_000, '{"role": "wizard"}', "\udcff"]
    path.write_text(path.read_text(encoding="utf-8") + "\n".join(junk) + "\n", encoding="utf-8", errors="surrogatepass")
    return "5 trajectory lines were not tau2 messages and were dropped"


@pytest.mark.parametrize("corrupt", [_swap_headers, _oversized, _escaping_path, _garbage_lines])
def test_hostile_trajectories_are_not_read_and_are_counted(
    corrupt: Corrupt, retail_run: tuple[Path, BattleResult], tmp_path: Path
) -> None:
    run, arena = retail_run
    expected = corrupt(run, arena)
    code, stderr = export(run, tmp_path / "out.json")
    assert code == 0, stderr
    assert f"warning: {expected}" in stderr
    results = Results.load(tmp_path / "out.json")
    assert len(results.simulations) == 6
    assert len(results.simulations[0].messages) == (5 if corrupt is _garbage_lines else 0)


def test_not_a_run_and_several_battles_are_refused(retail_run: tuple[Path, BattleResult], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, stderr = export(empty, tmp_path / "out.json")
    assert code == EXIT_BAD_INPUT and "no summary.json" in stderr
    _, arena = retail_run
    two = {"participants": {}, "results": [arena.model_dump(mode="json")] * 2}
    (tmp_path / "results.json").write_text(json.dumps(two), encoding="utf-8")
    code, stderr = export(tmp_path / "results.json", tmp_path / "out.json")
    assert code == EXIT_BAD_INPUT and "holds 2 battles; the tau2 format takes one" in stderr
    assert not (tmp_path / "out.json").exists()
